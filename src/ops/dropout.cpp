// Fast path of dropout (definition: python/dimtorch/ops/dropout.py): torch.dropout per element (the
// kernel F.dropout calls, without its Python wrapper: the same draws), or one mask over the dims
// `axis`. Every other case goes to the Python definition, which owns the errors.
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

#define FASTCALL(fn) DIMTORCH_OP(fn), \
                     METH_FASTCALL | METH_KEYWORDS
PyMethodDef kFunctions[] = {
    {"dropout", FASTCALL(f_dropout),
     "dropout(x, p, axis=None, training=True): zeroes elements with probability p and scales the "
     "rest by 1/(1-p); with `axis`, one draw per position over those dims, shared by the rest. "
     "p=0 or training=False returns x. See dimtorch.ops.dropout.dropout."},
    {nullptr}};
#undef FASTCALL

}  // namespace

bool export_ops_dropout(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
