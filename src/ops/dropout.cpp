// Fast path of dropout (definition: python/dimtorch/ops/dropout.py): torch.dropout per element (the
// kernel F.dropout calls, without its Python wrapper: the same draws), or one mask over the dims
// `axis`. Every other case goes to the Python definition, which owns the errors. Also dropout as
// RETURNN frontend calls it (dimtorch.rf.dropout): on or off by the run context's train flag, which
// the run context publishes here (dimtorch._core.run_ctx), so that a step outside training pays no
// Python frame for reading it.
#include "core/args.h"
#include "core/backend.h"
#include "core/dim.h"
#include "core/exports.h"
#include "core/functions.h"
#include "core/python_fallback.h"
#include "core/tensor.h"

namespace dimtorch {

namespace {

DIMTORCH_PYTHON_FALLBACK(dropout_fallback, "dropout")
DIMTORCH_PYTHON_FALLBACK(train_flag_dropout_fallback, "_rf_dropout")

/// The installed run context's train flag for dropout as published by dimtorch._core.run_ctx: 1 or 0,
/// or -1 when only Python can answer (a flag that is a Tensor, a context that does not publish).
/// 0 before any context is installed, as is_train_flag_enabled() gives then.
int g_train_flag = 0;

/// dropout(x, p, axis=None, training=True): the common cases here (F.dropout per element, or one
/// mask over the dims `axis`); p == 1 and every bad input go to dimtorch.ops.dropout.dropout, which
/// owns the errors.
PyObject* f_dropout(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "p", "axis", "training"};
  PyObject* v[4];
  if (!parse_args(args, nargs, kwnames, names, 4, 4, 2, v, "dimtorch.dropout()")) {
    PyErr_Clear();
    return dropout_fallback(args, nargs, kwnames);
  }
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !PyFloat_Check(v[1])) return dropout_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  double p = PyFloat_AS_DOUBLE(v[1]);
  if (!(p >= 0.0 && p < 1.0)) return dropout_fallback(args, nargs, kwnames);
  int training = flag_arg(v[3], 1, "dimtorch.dropout()", "training");
  if (training < 0) return nullptr;
  if (!training || p == 0.0) return Py_NewRef(v[0]);
  using backend::T;
  if (!v[2] || v[2] == Py_None) {
    PyObject* raw = backend::call3(T.dropout, x->raw, v[1], Py_True);
    if (!raw) return nullptr;
    return tensor_make(raw, x->dims, x->sizes, x->sparse_dim, x->feature_dim);
  }
  Ref axis(is_dim(v[2]) ? PyTuple_Pack(1, v[2]) : (PyTuple_Check(v[2]) ? Py_NewRef(v[2]) : nullptr));
  if (!axis) return PyErr_Occurred() ? nullptr : dropout_fallback(args, nargs, kwnames);
  Py_ssize_t nd = tensor_ndim(x);
  Ref shape(PyTuple_New(nd));
  if (!shape) return nullptr;
  for (Py_ssize_t i = 0; i < nd; ++i) PyTuple_SET_ITEM(shape.get(), i, PyLong_FromLong(1));
  for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(axis.get()); ++j) {
    PyObject* d = PyTuple_GET_ITEM(axis.get(), j);
    int i = is_dim(d) ? dims_index(x->dims, d) : -1;
    if (i < 0) return dropout_fallback(args, nargs, kwnames);
    PyObject* size = PyLong_FromSsize_t(x->sizes[i]);
    if (!size) return nullptr;
    PyObject* old = PyTuple_GET_ITEM(shape.get(), i);
    PyTuple_SET_ITEM(shape.get(), i, size);
    Py_DECREF(old);
  }
  // One draw per position over `axis`, scaled by 1/(1-p), broadcast over x's other dims.
  Ref keep(PyFloat_FromDouble(1.0 - p));
  if (!keep) return nullptr;
  Ref mask(backend::call2(T.new_empty, x->raw, shape.get()));
  if (!mask) return nullptr;
  Ref drawn(backend::call2(T.bernoulli_, mask.get(), keep.get()));
  if (!drawn) return nullptr;
  Ref scaled(backend::call2(T.div_, mask.get(), keep.get()));
  if (!scaled) return nullptr;
  PyObject* raw = PyNumber_Multiply(x->raw, mask.get());
  if (!raw) return nullptr;
  return tensor_make(raw, x->dims, x->sizes, x->sparse_dim, x->feature_dim);
}

/// _set_train_flag(flag): True, False, or None (ask the definition on each call).
PyObject* f_set_train_flag(PyObject*, PyObject* flag) {
  if (flag != Py_True && flag != Py_False && flag != Py_None) {
    PyErr_SetString(PyExc_TypeError, "dimtorch._C._set_train_flag(): expected True, False or None");
    return nullptr;
  }
  g_train_flag = flag == Py_None ? -1 : flag == Py_True;
  Py_RETURN_NONE;
}

/// _rf_dropout(source, drop_prob, *, axis=None, on_forward=False): dimtorch.rf.dropout. With the
/// flag off (and not on_forward) source itself; on, dropout's fast path with training=True. Any other
/// case (a Tensor drop_prob, a flag only Python reads, bad input) goes to the definition
/// (dimtorch.ops.dropout.train_flag_dropout), which owns the errors.
PyObject* f_rf_dropout(PyObject* m, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"source", "drop_prob", "axis", "on_forward"};
  PyObject* v[4];
  if (!parse_args(args, nargs, kwnames, names, 4, 2, 2, v, "dimtorch.rf.dropout()")) {
    PyErr_Clear();
    return train_flag_dropout_fallback(args, nargs, kwnames);
  }
  PyObject* axis = v[2] && v[2] != Py_False ? v[2] : Py_None;
  bool on_forward = v[3] == Py_True;
  if (axis == Py_True || (v[3] && v[3] != Py_True && v[3] != Py_False) || (!on_forward && g_train_flag < 0))
    return train_flag_dropout_fallback(args, nargs, kwnames);
  if (!on_forward && g_train_flag == 0) return Py_NewRef(v[0]);
  if (!PyFloat_CheckExact(v[1])) return train_flag_dropout_fallback(args, nargs, kwnames);
  double p = PyFloat_AS_DOUBLE(v[1]);
  if (!(p >= 0.0 && p < 1.0)) return train_flag_dropout_fallback(args, nargs, kwnames);
  PyObject* call[4] = {v[0], v[1], axis, Py_True};
  return f_dropout(m, call, 4, nullptr);
}

#define FASTCALL(fn) DIMTORCH_OP(fn), \
                     METH_FASTCALL | METH_KEYWORDS
PyMethodDef kFunctions[] = {
    {"dropout", FASTCALL(f_dropout),
     "dropout(x, p, axis=None, training=True): zeroes elements with probability p and scales the "
     "rest by 1/(1-p); with `axis`, one draw per position over those dims, shared by the rest. "
     "p=0 or training=False returns x. See dimtorch.ops.dropout.dropout."},
    {"_rf_dropout", FASTCALL(f_rf_dropout),
     "_rf_dropout(source, drop_prob, *, axis=None, on_forward=False)\n--\n\n"
     "dimtorch.rf.dropout: dropout when the run context's train flag is set (for this function) or "
     "on_forward, else source itself. See dimtorch.ops.dropout.train_flag_dropout."},
    {"_set_train_flag", DIMTORCH_OP(f_set_train_flag), METH_O,
     "_set_train_flag(flag): the run context's train flag for dropout (True, False, or None: ask "
     "Python); set by dimtorch._core.run_ctx."},
    {nullptr}};
#undef FASTCALL

}  // namespace

bool export_ops_dropout(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
