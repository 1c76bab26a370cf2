// Fast paths of reshape (definition: python/dimtorch/ops/reshape.py): adjacent static dims into new
// static dims (one reshape); replace_dim_v2 (one narrow or constant_pad_nd, one where with a cached mask).
// Every other case goes to the Python definition, which owns the errors.
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

// ---- replace_dim_v2 ---------------------------------------------------------------------------

DIMTORCH_PYTHON_FALLBACK(replace_dim_v2_fallback, "replace_dim_v2")

/// replace_dim_v2(source, *, in_dim, out_dim, allow_expand=True, allow_shrink=True): the fast path (the
/// flags not given or True) as the definition: source's in_dim axis cut (narrow) or zero-padded
/// (constant_pad_nd) to out_dim's raw size (static, or a dynamic dim's longest sequence); a dynamic in_dim
/// whose lengths vary over dims of source, when out_dim's longest sequence is longer than in_dim's (so the
/// definition's host check _within is False without reading lengths), then zeroed past each sequence's own
/// length by one where with in_dim's cached mask. Every other call goes to the definition.
PyObject* f_replace_dim_v2(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"source", "in_dim", "out_dim", "allow_expand", "allow_shrink"};
  const char* caller = "dimtorch.replace_dim_v2()";
  PyObject* v[5];
  if (!parse_args(args, nargs, kwnames, names, 5, 1, 3, v, caller)) {
    PyErr_Clear();
    return replace_dim_v2_fallback(args, nargs, kwnames);
  }
#define FALLBACK() return replace_dim_v2_fallback(args, nargs, kwnames)
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(v[1]) || !is_dim(v[2]) || (v[3] && v[3] != Py_True) ||
      (v[4] && v[4] != Py_True))
    FALLBACK();
  TensorObject* x = as_tensor(v[0]);
  PyObject* in_dim = v[1];
  PyObject* out_dim = v[2];
  int a = dims_index(x->dims, in_dim);
  if (a < 0 || dims_index(x->dims, out_dim) >= 0) FALLBACK();
  DimObject* out = as_dim(out_dim);
  Py_ssize_t n_out = dim_has_lengths(out) ? dim_max_size(out) : out->size;
  if (n_out < 0) {
    if (n_out == -2) PyErr_Clear();
    FALLBACK();
  }
  Py_ssize_t nd = tensor_ndim(x);
  DimObject* in = as_dim(in_dim);
  signed char pos[kMaxDims + 1];
  int n_pos = 0;
  bool masked = false;
  if (dim_has_lengths(in)) {
    if (lengths_positions(in, x->dims, true, pos, &n_pos, caller)) {
      Py_ssize_t in_max = dim_max_size(in);
      if (in_max < 0) {
        if (in_max == -2) PyErr_Clear();
        FALLBACK();
      }
      if (n_out <= in_max) FALLBACK();  // (whether out_dim's frames fit in in_dim's: the definition reads lengths)
      masked = true;
    } else {
      PyErr_Clear();  // lengths over a dim that source lacks (or any other failure): the definition decides
      FALLBACK();
    }
  }
#undef FALLBACK
  Py_ssize_t old = x->sizes[a];
  Ref raw = Ref::borrow(x->raw);
  if (n_out < old) {
    raw = Ref(fast_path::narrowed(x->raw, a, 0, n_out));
  } else if (n_out > old) {
    Py_ssize_t after = nd - 1 - a;
    Ref pad_list(PyTuple_New(2 * after + 2));
    if (!pad_list) return nullptr;
    for (Py_ssize_t j = 0; j < 2 * after + 1; ++j) PyTuple_SET_ITEM(pad_list.get(), j, Py_NewRef(backend::T.zero));
    PyObject* right = PyLong_FromSsize_t(n_out - old);
    if (!right) return nullptr;
    PyTuple_SET_ITEM(pad_list.get(), 2 * after + 1, right);
    raw = Ref(backend::call2(backend::T.constant_pad_nd, x->raw, pad_list.get()));
  }
  if (!raw) return nullptr;
  if (masked) {
    Ref device(PyObject_GetAttr(x->raw, backend::T.s_device));
    if (!device) return nullptr;
    Ref mask(dim_cached_raw(in, MaskKind::kMask, pos, static_cast<int>(nd), n_out, device.get()));
    PyObject* dtype = mask ? backend::raw_dtype_name(x->raw) : nullptr;
    if (!dtype) return nullptr;
    PyObject* zero = PyUnicode_CompareWithASCIIString(dtype, "bool") == 0 ? Py_False : backend::T.zero;
    raw = Ref(backend::call3(backend::T.where, mask.get(), raw.get(), zero));
    if (!raw) return nullptr;
  }
  Ref dims(fast_path::dims_replaced(x->dims, a, out_dim));
  if (!dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  std::copy(x->sizes, x->sizes + nd, sizes);
  sizes[a] = n_out;
  PyObject* sparse = x->sparse_dim == in_dim ? out_dim : x->sparse_dim;
  PyObject* feature = x->feature_dim == in_dim ? out_dim : x->feature_dim;
  return tensor_make(raw.release(), dims.get(), sizes, sparse, feature);
}

PyMethodDef kFunctions[] = {
    {"reshape", DIMTORCH_OP(f_reshape),
     METH_FASTCALL | METH_KEYWORDS,
     "reshape(source, in_dims, out_dims): see dimtorch.ops.reshape.reshape; static in_dims adjacent in order "
     "into static out_dims are one reshape here."},
    {"replace_dim_v2", DIMTORCH_OP(f_replace_dim_v2), METH_FASTCALL | METH_KEYWORDS,
     "replace_dim_v2(source, *, in_dim, out_dim, allow_expand=True, allow_shrink=True) -> Tensor: see "
     "dimtorch.ops.reshape.replace_dim_v2; one narrow or constant_pad_nd here (and one where with the cached "
     "mask for a dynamic in_dim)."},
    {nullptr}};

}  // namespace

bool export_ops_reshape(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
