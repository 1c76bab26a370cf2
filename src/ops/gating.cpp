// Fast path of gating (definition: python/dimtorch/ops/gating.py) for its common call, the GLU: the
// default gate (sigmoid) and act (identity) over a static even axis (default x's feature_dim), out_dim
// axis // 2 by dim math (cached on the dim) or a given static Dim of that size: one torch glu. Every other
// call (other gate or act functions, every error) goes to the Python definition.
#include "core/args.h"
#include "core/backend.h"
#include "core/definitions.h"
#include "core/dim.h"
#include "core/exports.h"
#include "core/functions.h"
#include "core/python_fallback.h"
#include "core/tensor.h"
#include "ops/fast_path_util.h"

namespace dimtorch {

namespace {

DIMTORCH_PYTHON_FALLBACK(gating_fallback, "gating")

/// The definition's default gate_func and act_func (sigmoid, its identity), read once from its
/// keyword defaults; borrowed, NULL (no error set) when they cannot be read.
bool default_funcs(PyObject** gate, PyObject** act) {
  static PyObject* gate_default = nullptr;
  static PyObject* act_default = nullptr;
  if (!gate_default) {
    PyObject* fn = definition("gating");
    Ref inner(fn ? PyObject_GetAttrString(fn, "__wrapped__") : nullptr);  // (names_errors wraps it)
    Ref defaults(inner ? PyObject_GetAttrString(inner.get(), "__kwdefaults__") : nullptr);
    PyObject* g = defaults && PyDict_Check(defaults.get()) ? PyDict_GetItemString(defaults.get(), "gate_func") : nullptr;
    PyObject* a = defaults && PyDict_Check(defaults.get()) ? PyDict_GetItemString(defaults.get(), "act_func") : nullptr;
    if (!g || !a) {
      PyErr_Clear();
      return false;
    }
    gate_default = Py_NewRef(g);
    act_default = Py_NewRef(a);
  }
  *gate = gate_default;
  *act = act_default;
  return true;
}

/// gating(x, *, axis=None, gate_func=sigmoid, act_func=identity, out_dim=None) -> (y, out_dim).
PyObject* f_gating(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "axis", "gate_func", "act_func", "out_dim"};
  const char* caller = "dimtorch.gating()";
  PyObject* v[5];
  if (!parse_args(args, nargs, kwnames, names, 5, 1, 1, v, caller)) {
    PyErr_Clear();
    return gating_fallback(args, nargs, kwnames);
  }
#define FALLBACK() return gating_fallback(args, nargs, kwnames)
  PyObject *gate, *act;
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !default_funcs(&gate, &act) || (v[2] && v[2] != gate) ||
      (v[3] && v[3] != act))
    FALLBACK();
  TensorObject* x = as_tensor(v[0]);
  PyObject* axis = v[1] && v[1] != Py_None ? v[1] : x->feature_dim;
  if (!axis || !is_dim(axis)) FALLBACK();
  int a = dims_index(x->dims, axis);
  Py_ssize_t size = as_dim(axis)->size;
  if (a < 0 || size < 0 || size % 2 || dim_has_lengths(as_dim(axis))) FALLBACK();
  Ref out_dim;
  if (v[4] && v[4] != Py_None) {
    if (!is_dim(v[4]) || as_dim(v[4])->size != size / 2 || dim_has_lengths(as_dim(v[4]))) FALLBACK();
    out_dim = Ref::borrow(v[4]);
  } else if (!(out_dim = Ref(dim_derive(as_dim(axis), DimOp::kFloorDiv, 2, nullptr, caller)))) {
    PyErr_Clear();
    FALLBACK();
  }
#undef FALLBACK
  Ref axis_arg(PyLong_FromLong(a));
  if (!axis_arg) return nullptr;
  PyObject* out = backend::call2(backend::T.glu, x->raw, axis_arg.get());
  if (!out) return nullptr;
  Ref dims(fast_path::dims_replaced(x->dims, a, out_dim.get()));
  if (!dims) {
    Py_DECREF(out);
    return nullptr;
  }
  Py_ssize_t sizes[kMaxDims];
  for (Py_ssize_t i = 0; i < tensor_ndim(x); ++i) sizes[i] = i == a ? size / 2 : x->sizes[i];
  PyObject* feature = x->feature_dim == axis ? out_dim.get() : x->feature_dim;
  Ref t(tensor_make(out, dims.get(), sizes, nullptr, feature));
  if (!t) return nullptr;
  return PyTuple_Pack(2, t.get(), out_dim.get());
}

PyMethodDef kFunctions[] = {
    {"gating", DIMTORCH_OP(f_gating), METH_FASTCALL | METH_KEYWORDS,
     "gating(x, *, axis=None, gate_func=sigmoid, act_func=identity, out_dim=None) -> (y, out_dim): see "
     "dimtorch.ops.gating.gating; the GLU (the default gate and act) is one torch glu here."},
    {nullptr}};

}  // namespace

bool export_ops_gating(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
