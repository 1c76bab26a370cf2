// Fast paths of the stack family (definitions: python/dimtorch/ops/stack.py): split of a static dim
// (one split_with_sizes), stack of tensors in one layout (one torch.stack). Every other case
// goes to the Python definition (python_fallback.h), which owns the errors.
#include "core/args.h"
#include "core/backend.h"
#include "core/dim.h"
#include "core/exports.h"
#include "ops/fast_path_util.h"
#include "core/functions.h"
#include "core/mask.h"
#include "core/python_fallback.h"
#include "core/tensor.h"

#include <algorithm>

namespace dimtorch {

namespace {

using namespace fast_path;

// ---- split ------------------------------------------------------------------------------------

DIMTORCH_PYTHON_FALLBACK(split_fallback, "split")

/// split(x, *, axis, out_dims): the fast path splits a dim without lengths into static out dims
/// whose sizes add up to its size: one split_with_sizes (views).
PyObject* f_split(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "axis", "out_dims"};
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 1, 3, v, "dimtorch.split()", 1)) {
    PyErr_Clear();
    return split_fallback(args, nargs, kwnames);
  }
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(v[1]) || dim_has_lengths(as_dim(v[1])))
    return split_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  int a = dims_index(x->dims, v[1]);
  PyObject* out_dims = v[2];
  Ref parts_seq;
  if (is_dim(out_dims)) {
    parts_seq = Ref(PyTuple_Pack(1, out_dims));
  } else if (PyTuple_CheckExact(out_dims) || PyList_CheckExact(out_dims)) {
    parts_seq = Ref(PySequence_Tuple(out_dims));
  } else {
    return split_fallback(args, nargs, kwnames);
  }
  if (!parts_seq) return nullptr;
  PyObject* parts = parts_seq.get();
  Py_ssize_t n_parts = PyTuple_GET_SIZE(parts);
  if (a < 0 || n_parts == 0) return split_fallback(args, nargs, kwnames);
  Ref sizes_obj(PyTuple_New(n_parts));
  if (!sizes_obj) return nullptr;
  Py_ssize_t total = 0;
  for (Py_ssize_t i = 0; i < n_parts; ++i) {
    PyObject* p = PyTuple_GET_ITEM(parts, i);
    if (!is_dim(p) || as_dim(p)->size < 0 || (p != v[1] && dims_index(x->dims, p) >= 0))
      return split_fallback(args, nargs, kwnames);
    // (sizes summing past int64: never the axis' size, which the definition then says)
    if (__builtin_add_overflow(total, as_dim(p)->size, &total)) return split_fallback(args, nargs, kwnames);
    PyObject* size = PyLong_FromSsize_t(as_dim(p)->size);
    if (!size) return nullptr;
    PyTuple_SET_ITEM(sizes_obj.get(), i, size);
  }
  if (total != x->sizes[a]) return split_fallback(args, nargs, kwnames);
  Ref a_obj(PyLong_FromLong(a));
  if (!a_obj) return nullptr;
  PyObject* call[3] = {x->raw, sizes_obj.get(), a_obj.get()};
  Ref raws(PyObject_Vectorcall(backend::T.split_with_sizes, call, 3, nullptr));
  if (!raws) return nullptr;
  Ref raws_tuple(PySequence_Tuple(raws.get()));
  if (!raws_tuple) return nullptr;
  if (PyTuple_GET_SIZE(raws_tuple.get()) != n_parts) {
    PyErr_SetString(PyExc_RuntimeError, "dimtorch.split(): split_with_sizes gave the wrong number of parts");
    return nullptr;
  }
  PyObject* feature = x->feature_dim != v[1] ? x->feature_dim : nullptr;
  Ref out(PyTuple_New(n_parts));  // a tuple: RETURNN frontend's convention
  if (!out) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  std::copy(x->sizes, x->sizes + tensor_ndim(x), sizes);
  for (Py_ssize_t i = 0; i < n_parts; ++i) {
    PyObject* p = PyTuple_GET_ITEM(parts, i);
    Ref dims(dims_replaced(x->dims, a, p));
    if (!dims) return nullptr;
    sizes[a] = as_dim(p)->size;
    PyObject* t = tensor_make(Py_NewRef(PyTuple_GET_ITEM(raws_tuple.get(), i)), dims.get(), sizes,
                              x->sparse_dim, feature);
    if (!t) return nullptr;
    PyTuple_SET_ITEM(out.get(), i, t);
  }
  return out.release();
}

// ---- stack ------------------------------------------------------------------------------------

DIMTORCH_PYTHON_FALLBACK(stack_fallback, "stack")

/// stack(tensors, *, out_dim=None): the fast path takes tensors with the same dims in the same
/// order, raw sizes and dtype: one torch.stack.
/// raw.dtype, new reference. For a torch.Tensor or Parameter, whose attribute lookup finds TensorBase's
/// getter (checked once), that getter is called directly: the value getattr gives, without the lookup
/// (half the cost of reading a dtype). Any other raw type goes through getattr.
PyObject* raw_dtype(PyObject* raw) {
  static getter get = nullptr;
  static void* closure = nullptr;
  static bool looked = false;
  if (!looked) {
    looked = true;
    Ref name(PyUnicode_FromString("dtype"));
    PyObject* d = name ? _PyType_Lookup(backend::T.tensor_type, name.get()) : nullptr;  // borrowed
    if (d && Py_IS_TYPE(d, &PyGetSetDescr_Type) && _PyType_Lookup(backend::T.plain_type, name.get()) == d &&
        _PyType_Lookup(backend::T.parameter_type, name.get()) == d) {
      PyGetSetDef* def = reinterpret_cast<PyGetSetDescrObject*>(d)->d_getset;
      get = def->get;
      closure = def->closure;
    }
    PyErr_Clear();
  }
  if (get && (Py_IS_TYPE(raw, backend::T.plain_type) || Py_IS_TYPE(raw, backend::T.parameter_type)))
    return get(raw, closure);
  return PyObject_GetAttr(raw, backend::T.s_dtype);
}

PyObject* f_stack(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"tensors", "out_dim"};
  static PyObject* stack_name = nullptr;
  PyObject* v[2];
  if (!parse_args(args, nargs, kwnames, names, 2, 1, 1, v, "dimtorch.stack()", 1)) {
    PyErr_Clear();
    return stack_fallback(args, nargs, kwnames);
  }
  PyObject* seq = v[0];
  if (!(PyTuple_CheckExact(seq) || PyList_CheckExact(seq)) || PySequence_Fast_GET_SIZE(seq) == 0)
    return stack_fallback(args, nargs, kwnames);
  /* torch (a tensor subclass's dtype getter) may run code that changes a list: its items are read
     by index with its size checked each time, and the first (used to the end) is held. */
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  Ref first_ref = Ref::borrow(PySequence_Fast_GET_ITEM(seq, 0));
  if (!is_tensor(first_ref.get()) || !as_tensor(first_ref.get())->raw) return stack_fallback(args, nargs, kwnames);
  TensorObject* first = as_tensor(first_ref.get());
  Py_ssize_t nd = tensor_ndim(first);
  if (nd + 1 > kMaxDims) return stack_fallback(args, nargs, kwnames);
  Ref dtype(raw_dtype(first->raw));
  if (!dtype) return nullptr;
  Ref raws(PyList_New(n));
  if (!raws) return nullptr;
  PyObject* sparse = first->sparse_dim;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (PySequence_Fast_GET_SIZE(seq) != n) return stack_fallback(args, nargs, kwnames);  // changed meanwhile
    Ref item = Ref::borrow(PySequence_Fast_GET_ITEM(seq, i));  // (held across the dtype getter)
    if (!is_tensor(item.get())) return stack_fallback(args, nargs, kwnames);
    TensorObject* t = as_tensor(item.get());
    if (!t->raw || !same_dims(t->dims, first->dims) ||
        !std::equal(t->sizes, t->sizes + nd, first->sizes))
      return stack_fallback(args, nargs, kwnames);
    if (i > 0) {
      Ref t_dtype(raw_dtype(t->raw));
      if (!t_dtype) return nullptr;
      if (t_dtype.get() != dtype.get()) return stack_fallback(args, nargs, kwnames);
    }
    if (t->sparse_dim != sparse) sparse = nullptr;
    PyList_SET_ITEM(raws.get(), i, Py_NewRef(t->raw));
  }
  Ref out_dim;
  if (!v[1] || v[1] == Py_None) {
    if (!interned(&stack_name, "stack")) return nullptr;
    out_dim = Ref(new_static_dim(n, stack_name));
    if (!out_dim) return nullptr;
  } else if (is_dim(v[1]) && as_dim(v[1])->size == n && dims_index(first->dims, v[1]) < 0) {
    out_dim = Ref::borrow(v[1]);
  } else {
    return stack_fallback(args, nargs, kwnames);
  }
  Ref raw(backend::call1(backend::T.stack, raws.get()));
  if (!raw) return nullptr;
  Ref dims(PyTuple_New(nd + 1));
  if (!dims) return nullptr;
  PyTuple_SET_ITEM(dims.get(), 0, Py_NewRef(out_dim.get()));
  Py_ssize_t sizes[kMaxDims];
  sizes[0] = n;
  for (Py_ssize_t j = 0; j < nd; ++j) {
    PyTuple_SET_ITEM(dims.get(), j + 1, Py_NewRef(PyTuple_GET_ITEM(first->dims, j)));
    sizes[j + 1] = first->sizes[j];
  }
  Ref t(tensor_make(raw.release(), dims.get(), sizes, sparse, first->feature_dim));
  if (!t) return nullptr;
  return PyTuple_Pack(2, t.get(), out_dim.get());
}

#define FASTCALL_KW(fn) DIMTORCH_OP(fn), METH_FASTCALL | METH_KEYWORDS

PyMethodDef kFunctions[] = {
    {"split", FASTCALL_KW(f_split), "split(x, /, *, axis, out_dims) -> tuple of tensors: see dimtorch.ops.stack.split."},
    {"stack", FASTCALL_KW(f_stack),
     "stack(tensors, /, *, out_dim=None) -> (tensor, out_dim): see dimtorch.ops.stack.stack."},
    {nullptr}};

#undef FASTCALL_KW

}  // namespace

bool export_ops_stack(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
