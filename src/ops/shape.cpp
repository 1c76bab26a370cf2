// Fast path of the shape family (definitions: python/dimtorch/ops/shape.py): merge_dims of adjacent
// static dims (one reshape), and the merged dim both paths share (_merged_dim). Every other case
// (permuted dims, dynamic dims, bad input) goes to the Python definition, which owns the errors.
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

DIMTORCH_PYTHON_FALLBACK(merge_dims_fallback, "merge_dims")
DIMTORCH_PYTHON_FALLBACK(squeeze_fallback, "squeeze")

/// squeeze(x, /, axis): axis a dim of x of raw size 1: the raw's select(a, 0) (a view, as
/// squeeze(a)); markers kept as keep_markers does.
PyObject* f_squeeze(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "axis"};
  PyObject* v[2];
  if (!parse_args(args, nargs, kwnames, names, 2, 2, 2, v, "dimtorch.squeeze()", 1)) {
    PyErr_Clear();
    return squeeze_fallback(args, nargs, kwnames);
  }
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(v[1])) return squeeze_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  int a = dims_index(x->dims, v[1]);
  if (a < 0 || x->sizes[a] != 1) return squeeze_fallback(args, nargs, kwnames);
  int nd = static_cast<int>(tensor_ndim(x));
  Ref dims(PyTuple_New(nd - 1));
  Ref axis_arg(PyLong_FromLong(a));
  if (!dims || !axis_arg) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  for (int i = 0, j = 0; i < nd; ++i)
    if (i != a) {
      PyTuple_SET_ITEM(dims.get(), j, Py_NewRef(PyTuple_GET_ITEM(x->dims, i)));
      sizes[j++] = x->sizes[i];
    }
  PyObject* raw = backend::call3(backend::T.select, x->raw, axis_arg.get(), backend::T.zero);
  if (!raw) return nullptr;
  return tensor_make(raw, dims.get(), sizes, x->sparse_dim, x->feature_dim != v[1] ? x->feature_dim : nullptr);
}

/* The merged dim of static `dims` (a tuple), cached on the first dim (dim_merged): merging the
   same dims again gives the same dim, as RETURNN's prod(dims) does, and costs no new Dim per call. */
PyObject* merged_dim(PyObject* dims, Py_ssize_t total) { return dim_merged(dims, total); }

/// _merged_dim(dims): merged_dim for the Python definition of merge_dims, so that both paths give
/// the same dim for the same static dims.
PyObject* f_merged_dim(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 1 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) == 0) {
    PyErr_SetString(PyExc_TypeError, "dimtorch._C._merged_dim(dims): dims must be a non-empty tuple of Dims");
    return nullptr;
  }
  PyObject* dims = args[0];
  Py_ssize_t total = 1;
  for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(dims); ++j) {
    PyObject* d = PyTuple_GET_ITEM(dims, j);
    if (!is_dim(d) || !dim_is_static(d)) {
      PyErr_Format(PyExc_ValueError, "dimtorch._C._merged_dim(dims): every dim must be static, got %R", d);
      return nullptr;
    }
    if (__builtin_mul_overflow(total, as_dim(d)->size, &total)) {
      PyErr_SetString(PyExc_OverflowError,
                      "dimtorch._C._merged_dim(dims): the product of the sizes overflows (a size is at most 2**63 - 1)");
      return nullptr;
    }
  }
  return merged_dim(dims, total);
}

PyObject* f_merge_dims(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "dims", "out_dim"};
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 1, 2, v, "dimtorch.merge_dims()", 1) ||
      !is_tensor(v[0]) || !as_tensor(v[0])->raw || !PyTuple_Check(v[1])) {
    PyErr_Clear();
    return merge_dims_fallback(args, nargs, kwnames);
  }
  TensorObject* x = as_tensor(v[0]);
  PyObject* dims = v[1];
  PyObject* out_dim = v[2] && v[2] != Py_None ? v[2] : nullptr;
  Py_ssize_t n = PyTuple_GET_SIZE(dims), nd = tensor_ndim(x);
  if (n == 0 || n > nd) return merge_dims_fallback(args, nargs, kwnames);
  // Fast path: static dims, adjacent in x and in the given order; any doubt goes to Python.
  int first = is_dim(PyTuple_GET_ITEM(dims, 0)) ? dims_index(x->dims, PyTuple_GET_ITEM(dims, 0)) : -1;
  if (first < 0 || first + n > nd) return merge_dims_fallback(args, nargs, kwnames);
  Py_ssize_t total = 1;
  for (Py_ssize_t j = 0; j < n; ++j) {
    PyObject* d = PyTuple_GET_ITEM(dims, j);
    if (PyTuple_GET_ITEM(x->dims, first + j) != d || !dim_is_static(d))
      return merge_dims_fallback(args, nargs, kwnames);
    // (an empty tensor's other sizes are free: their product may pass int64; the definition says so)
    if (__builtin_mul_overflow(total, x->sizes[first + j], &total)) return merge_dims_fallback(args, nargs, kwnames);
  }
  // A dim left in x whose lengths vary along a merged dim: the Python definition refuses that.
  if (int over = fast_path::lengths_over_group(x, first, n, dims))
    return over < 0 ? nullptr : merge_dims_fallback(args, nargs, kwnames);
  Ref out;
  if (out_dim) {
    if (!is_dim(out_dim) || as_dim(out_dim)->size != total || dims_index(x->dims, out_dim) >= 0)
      return merge_dims_fallback(args, nargs, kwnames);
    out = Ref::borrow(out_dim);
  } else {
    out = Ref(merged_dim(dims, total));
    if (!out) return nullptr;
    if (dims_index(x->dims, out.get()) >= 0) return merge_dims_fallback(args, nargs, kwnames);
  }
  Py_ssize_t out_nd = nd - n + 1;
  Ref out_dims(PyTuple_New(out_nd));
  if (!out_dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  PyObject* call[kMaxDims + 1];
  call[0] = x->raw;
  Py_ssize_t k = 0;
  for (Py_ssize_t i = 0; i < nd; ++i) {
    if (i > first && i < first + n) continue;
    PyObject* d = i == first ? out.get() : PyTuple_GET_ITEM(x->dims, i);
    sizes[k] = i == first ? total : x->sizes[i];
    PyTuple_SET_ITEM(out_dims.get(), k, Py_NewRef(d));
    ++k;
  }
  PyObject* raw;
  if (n >= 2) {
    // flatten(first[, last]): reshape's result (a view where one exists) with one or two ints to parse,
    // where reshape(a, b, c) takes one per output axis. (Not for one dim: flatten(i, i) returns x's raw itself.)
    Ref start(PyLong_FromSsize_t(first));
    Ref end(first + n < nd ? PyLong_FromSsize_t(first + n - 1) : nullptr);
    if (!start || (first + n < nd && !end)) return nullptr;
    call[1] = start.get();
    call[2] = end.get();
    raw = PyObject_Vectorcall(backend::T.flatten, call, end ? 3 : 2, nullptr);
  } else {
    // reshape(a, b, c): the sizes as separate ints, which torch parses faster than a tuple.
    Py_ssize_t made = 0;
    for (; made < out_nd; ++made)
      if (!(call[made + 1] = PyLong_FromSsize_t(sizes[made]))) break;
    raw = made == out_nd ? PyObject_Vectorcall(backend::T.reshape, call, out_nd + 1, nullptr) : nullptr;
    for (Py_ssize_t j = 1; j <= made; ++j) Py_DECREF(call[j]);
  }
  if (!raw) return nullptr;
  PyObject* feature =
      x->feature_dim && dims_index(out_dims.get(), x->feature_dim) >= 0 ? x->feature_dim : nullptr;
  Ref t(tensor_make(raw, out_dims.get(), sizes, x->sparse_dim, feature));
  if (!t) return nullptr;
  return PyTuple_Pack(2, t.get(), out.get());
}

PyMethodDef kFunctions[] = {
    {"_merged_dim", DIMTORCH_OP(f_merged_dim),
     METH_FASTCALL, "_merged_dim(dims) -> the Dim that merging these static dims gives (cached on the first)."},
    {"merge_dims", DIMTORCH_OP(f_merge_dims),
     METH_FASTCALL | METH_KEYWORDS,
     "merge_dims(x, /, *, dims, out_dim=None) -> (tensor, out_dim): merges `dims` (the first varies "
     "slowest) into one dim at the place of the first. Adjacent static dims in order are one "
     "reshape here; other cases are dimtorch.ops.shape.merge_dims."},
    {"squeeze", DIMTORCH_OP(f_squeeze), METH_FASTCALL | METH_KEYWORDS,
     "squeeze(x, /, axis) -> Tensor: see dimtorch.ops.shape.squeeze; one select(axis, 0) view here."},
    {nullptr}};

}  // namespace

bool export_ops_shape(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
