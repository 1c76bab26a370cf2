// The registry of Python definitions (see definitions.h) and the check that sends calls on traced
// tensors to them.
#include "core/definitions.h"

#include "core/dim.h"
#include "core/functions.h"
#include "core/tensor.h"
#include "core/exports.h"

namespace dimtorch {

namespace {

PyObject* g_definitions = nullptr;  // dict: name -> callable

/* Names the core calls by name (fallbacks, methods, operators, index builders); registration
   refuses a table without one of them, or without the definition of any public function of
   dimtorch._C (functions.h: wrapped_functions_defined), so that renaming a Python definition fails
   at import, not at the first call that needs it. tests/test_layers.py checks that every name the
   sources pass to the registry is in this list. */
const char* const kRequired[] = {
    "pad", "concat", "gather", "merge_dims", "slice", "shift_right", "reverse_sequence", "split",
    "stack", "top_k", "pack_padded", "scatter", "scatter_count", "lerp", "dropout",
    "ctc_durations_from_path", "repeat", "ctc_greedy_decode", "matmul", "dot", "combine", "compare",
    "maximum", "minimum",
    "reshape", "masked_select", "masked_scatter", "to_host",
    "conv", "transposed_conv", "pool", "gating", "search_sorted", "where_nested", "window", "top_k_mask", "reduce_out", "replace_dim_v2", "stft", "_mel_filterbank", "_mel_filterbank_matrix", "label_smoothing", "reduce_logmeanexp", "dot_attention", "apply_rope", "cond", "while_loop", "cumsum", "squeeze", "one_hot", "stop_gradient", "safe_log",
    "zeros", "ones", "full", "constant", "_dim_cached_raw", "Dim._traced_size", "Dim._set_traced_size", "Dim._padded_size",
    "_reverse_index", "_valid_index", "_valid_index_in", "_gather_index", "_stft_window", "_rf_dropout", "_rf_concat_features", "_pair_max", "_loop_truth", "_while_loop_check",
    "Dim.__init__", "Dim._rf_new", "Dim._mul_dims", "Tensor.copy", "Dim.get_mask", "Dim.get_size_tensor", "Dim.get_max_size", "Dim.__reduce__",
    "Tensor.__init__", "Tensor.__reduce__", "Tensor._assign_raw_fallback", "Tensor.raw_aligned", "Tensor.copy_transpose",
    "Tensor.copy_masked", "Tensor.__neg__", "Tensor.__abs__", "Tensor.__invert__",
    "Tensor.__add__", "Tensor.__radd__", "Tensor.__sub__", "Tensor.__rsub__", "Tensor.__mul__",
    "Tensor.__rmul__", "Tensor.__truediv__", "Tensor.__rtruediv__", "Tensor.__floordiv__",
    "Tensor.__rfloordiv__", "Tensor.__mod__", "Tensor.__rmod__", "Tensor.__pow__",
    "Tensor.__rpow__", "Tensor.__and__", "Tensor.__rand__", "Tensor.__or__", "Tensor.__ror__",
    "Tensor.__xor__", "Tensor.__rxor__", "Tensor.__lt__", "Tensor.__le__", "Tensor.__eq__",
    "Tensor.__ne__", "Tensor.__gt__", "Tensor.__ge__",
    nullptr};

/// _set_definitions(table): registers {name: callable}; a KeyError names any required name missing.
PyObject* f_set_definitions(PyObject*, PyObject* table) {
  if (!PyDict_Check(table)) {
    PyErr_SetString(PyExc_TypeError, "dimtorch._C._set_definitions(): expected a dict");
    return nullptr;
  }
  for (const char* const* n = kRequired; *n; ++n) {
    PyObject* fn = PyDict_GetItemString(table, *n);
    if (!fn || !PyCallable_Check(fn)) {
      PyErr_Format(PyExc_KeyError,
                   "dimtorch._C._set_definitions(): no Python definition registered for '%s'", *n);
      return nullptr;
    }
  }
  if (!wrapped_functions_defined(table)) return nullptr;
  Py_XSETREF(g_definitions, PyDict_Copy(table));
  if (!g_definitions) return nullptr;
  Py_RETURN_NONE;
}

/* _set_type_attr(type, name, value): puts a Python definition into Tensor's or Dim's type dict
   without touching the type's C slots. Python-level lookups (Tensor.__add__, getattr of a derived
   property, and so torch.compile, which traces what the dict holds) see the definition; the
   interpreter's operators and the core keep the C++ fast paths. */
PyObject* f_set_type_attr(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  PyObject* property_type = PyObject_GetAttrString(module, "_Property");
  if (!property_type) return nullptr;
  Py_DECREF(property_type);  // the module holds it
  if (nargs != 3 || (args[0] != reinterpret_cast<PyObject*>(&TensorType) &&
                     args[0] != reinterpret_cast<PyObject*>(&DimType) && args[0] != property_type) ||
      !PyUnicode_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError,
                    "dimtorch._C._set_type_attr(): expected (Tensor, Dim or Property, name, value)");
    return nullptr;
  }
  PyTypeObject* type = reinterpret_cast<PyTypeObject*>(args[0]);
  if (PyDict_SetItem(type->tp_dict, args[1], args[2]) < 0) return nullptr;
  PyType_Modified(type);
  Py_RETURN_NONE;
}

PyMethodDef kFunctions[] = {
    {"_set_definitions", DIMTORCH_OP(f_set_definitions), METH_O,
     "Registers the Python definitions the core calls (dimtorch._op_table does, at import)."},
    {"_set_type_attr", DIMTORCH_OP(f_set_type_attr), METH_FASTCALL,
     "Puts a Python definition into Tensor's or Dim's type dict (dimtorch._capture.compile does)."},
    {nullptr}};

}  // namespace

PyObject* definition(const char* name) {
  PyObject* fn = g_definitions ? PyDict_GetItemString(g_definitions, name) : nullptr;
  if (!fn)
    PyErr_Format(PyExc_ImportError, "dimtorch: no Python definition registered for '%s'", name);
  return fn;
}

PyObject* call_definition(const char* name, PyObject* const* args, size_t nargsf,
                          PyObject* kwnames) {
  Ref fn(Py_XNewRef(definition(name)));  // (held: the call could replace the table)
  return fn ? PyObject_Vectorcall(fn.get(), args, nargsf, kwnames) : nullptr;
}

PyObject* call_method_definition(const char* name, PyObject* self, PyObject* const* args,
                                 size_t nargsf, PyObject* kwnames) {
  Ref fn(Py_XNewRef(definition(name)));  // (held: the call could replace the table)
  if (!fn) return nullptr;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  Py_ssize_t total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
  PyObject* stack[16];
  if (total + 1 > 16) {
    PyErr_Format(PyExc_TypeError, "dimtorch.%s(): too many arguments", name);
    return nullptr;
  }
  stack[0] = self;
  for (Py_ssize_t i = 0; i < total; ++i) stack[i + 1] = args[i];
  return PyObject_Vectorcall(fn.get(), stack, nargs + 1, kwnames);
}

bool any_traced(PyObject* const* args, Py_ssize_t n) {
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* a = args[i];
    if (is_tensor_type(a)) {
      if (is_traced_tensor(a)) return true;
    } else if (PyTuple_CheckExact(a) || PyList_CheckExact(a)) {
      PyObject** items = PySequence_Fast_ITEMS(a);
      for (Py_ssize_t j = 0; j < Py_SIZE(a); ++j) {
        PyObject* b = items[j];
        if (is_traced_tensor(b)) return true;
        if (PyTuple_CheckExact(b))
          for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(b); ++k)
            if (is_traced_tensor(PyTuple_GET_ITEM(b, k))) return true;
      }
    }
  }
  return false;
}

bool export_definitions(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
