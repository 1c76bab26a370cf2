// Fast path of reshape (definition: python/dimtorch/ops/reshape.py): adjacent static dims into new
// static dims (one reshape). Every other case goes to the Python definition, which owns the errors.
#include "core/args.h"
#include "core/backend.h"
#include "core/dim.h"
#include "core/functions.h"
#include "core/mask.h"
#include "core/python_fallback.h"
#include "core/tensor.h"
#include "core/exports.h"
#include "ops/fast_path_util.h"

#include <algorithm>

namespace dimtorch {

namespace {

DIMTORCH_PYTHON_FALLBACK(reshape_fallback, "reshape")

/// reshape(source, in_dims, out_dims): the fast path takes static in_dims adjacent in source in the given
/// order and new static out_dims of the same total size (tuples): one reshape. Anything else, and all
/// errors, go to the Python definition.
PyObject* f_reshape(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"source", "in_dims", "out_dims"};
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 3, 3, v, "dimtorch.reshape()") || !is_tensor(v[0]) ||
      !as_tensor(v[0])->raw || !PyTuple_Check(v[1]) || !PyTuple_Check(v[2])) {
    PyErr_Clear();
    return reshape_fallback(args, nargs, kwnames);
  }
  TensorObject* x = as_tensor(v[0]);
  PyObject* in_dims = v[1];
  PyObject* out_dims = v[2];
  Py_ssize_t n_in = PyTuple_GET_SIZE(in_dims), n_out = PyTuple_GET_SIZE(out_dims), nd = tensor_ndim(x);
  Py_ssize_t out_nd = nd - n_in + n_out;
  if (n_in == 0 || n_in > nd || out_nd > kMaxDims) return reshape_fallback(args, nargs, kwnames);
  int first = is_dim(PyTuple_GET_ITEM(in_dims, 0)) ? dims_index(x->dims, PyTuple_GET_ITEM(in_dims, 0)) : -1;
  if (first < 0 || first + n_in > nd) return reshape_fallback(args, nargs, kwnames);
  Py_ssize_t total = 1;
  for (Py_ssize_t j = 0; j < n_in; ++j) {
    PyObject* d = PyTuple_GET_ITEM(in_dims, j);
    if (PyTuple_GET_ITEM(x->dims, first + j) != d || !dim_is_static(d)) return reshape_fallback(args, nargs, kwnames);
    // (an empty tensor's other sizes are free: their product may pass int64; the definition says so)
    if (__builtin_mul_overflow(total, x->sizes[first + j], &total)) return reshape_fallback(args, nargs, kwnames);
  }
  Py_ssize_t out_total = 1;
  for (Py_ssize_t j = 0; j < n_out; ++j) {
    PyObject* d = PyTuple_GET_ITEM(out_dims, j);
    if (!is_dim(d) || !dim_is_static(d) || dims_index(x->dims, d) >= 0) return reshape_fallback(args, nargs, kwnames);
    for (Py_ssize_t k = 0; k < j; ++k)
      if (PyTuple_GET_ITEM(out_dims, k) == d) return reshape_fallback(args, nargs, kwnames);
    // Past int64 (huge dims given by the user): never x's size, which the definition then says.
    if (__builtin_mul_overflow(out_total, as_dim(d)->size, &out_total)) return reshape_fallback(args, nargs, kwnames);
  }
  if (out_total != total) return reshape_fallback(args, nargs, kwnames);
  // A dim left in x whose lengths vary along a reshaped dim: the Python definition refuses that.
  if (int over = fast_path::lengths_over_group(x, first, n_in, in_dims))
    return over < 0 ? nullptr : reshape_fallback(args, nargs, kwnames);
  Ref dims(PyTuple_New(out_nd));
  if (!dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  for (Py_ssize_t i = 0, k = 0; i < nd; ++i) {
    if (i == first) {
      for (Py_ssize_t j = 0; j < n_out; ++j, ++k) {
        PyObject* d = PyTuple_GET_ITEM(out_dims, j);
        PyTuple_SET_ITEM(dims.get(), k, Py_NewRef(d));
        sizes[k] = as_dim(d)->size;
      }
    }
    if (i >= first && i < first + n_in) continue;
    PyTuple_SET_ITEM(dims.get(), k, Py_NewRef(PyTuple_GET_ITEM(x->dims, i)));
    sizes[k++] = x->sizes[i];
  }
  // reshape(a, b, c): the sizes as separate ints, which torch parses faster than a tuple.
  PyObject* call[kMaxDims + 1];
  call[0] = x->raw;
  for (Py_ssize_t k = 0; k < out_nd; ++k) call[k + 1] = PyLong_FromSsize_t(sizes[k]);
  bool ok = true;
  for (Py_ssize_t k = 1; k <= out_nd; ++k) ok = ok && call[k];
  PyObject* raw = ok ? PyObject_Vectorcall(backend::T.reshape, call, out_nd + 1, nullptr) : nullptr;
  for (Py_ssize_t k = 1; k <= out_nd; ++k) Py_XDECREF(call[k]);
  if (!raw) return nullptr;
  PyObject* feature =
      x->feature_dim && dims_index(dims.get(), x->feature_dim) >= 0 ? x->feature_dim : nullptr;
  return tensor_make(raw, dims.get(), sizes, x->sparse_dim, feature);
}

PyMethodDef kFunctions[] = {
    {"reshape", DIMTORCH_OP(f_reshape),
     METH_FASTCALL | METH_KEYWORDS,
     "reshape(source, in_dims, out_dims): see dimtorch.ops.reshape.reshape; static in_dims adjacent in order "
     "into static out_dims are one reshape here."},
    {nullptr}};

}  // namespace

bool export_ops_reshape(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
