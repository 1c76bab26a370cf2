// Fast path of scatter (definition: python/dimtorch/_scatter.py) along one dim (one
// scatter_add_). Every other case goes to the Python definition (python_fallback.h).
#include "args.h"
#include "backend.h"
#include "dim.h"
#include "exports.h"
#include "fast_path_util.h"
#include "functions.h"
#include "mask.h"
#include "python_fallback.h"
#include "tensor.h"

#include <algorithm>

namespace dimtorch {

namespace {

using namespace fast_path;

// ---- scatter ----------------------------------------------------------------------------------

DIMTORCH_PYTHON_FALLBACK(scatter_fallback, "scatter")

/// scatter(x, *, indices, indices_dim, out_dim=None): the fast path (its common call: no mode,
/// fill_value or use_mask, which go to the Python definition as unknown keywords) adds along one indices dim
/// into a static out dim, with int64 indices over dims of x of the same sizes, where no other
/// indices dim has lengths: one scatter_add_ in x's layout. The padding of a dynamic indices dim
/// goes to an extra last row that is cut off (where with the dim's cached mask, on the indices).
PyObject* f_scatter(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "indices", "indices_dim", "out_dim"};
  const char* caller = "dimtorch.scatter()";
  PyObject* v[4];
  if (!parse_args(args, nargs, kwnames, names, 4, 1, 3, v, caller)) {
    PyErr_Clear();
    return scatter_fallback(args, nargs, kwnames);
  }
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_tensor(v[1]) || !as_tensor(v[1])->raw || !is_dim(v[2]))
    return scatter_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  TensorObject* idx = as_tensor(v[1]);
  PyObject* d = v[2];
  PyObject* out_dim = v[3] && v[3] != Py_None ? v[3] : idx->sparse_dim;
  if (!out_dim || !is_dim(out_dim) || as_dim(out_dim)->size < 0 || (idx->sparse_dim && idx->sparse_dim != out_dim))
    return scatter_fallback(args, nargs, kwnames);
  int a = dims_index(x->dims, d);
  if (a < 0 || dims_index(idx->dims, d) < 0 || dims_index(x->dims, out_dim) >= 0)
    return scatter_fallback(args, nargs, kwnames);
  for (Py_ssize_t j = 0; j < tensor_ndim(idx); ++j) {
    PyObject* e = PyTuple_GET_ITEM(idx->dims, j);
    int i = dims_index(x->dims, e);
    if (i < 0 || x->sizes[i] != idx->sizes[j] || (e != d && dim_has_lengths(as_dim(e))))
      return scatter_fallback(args, nargs, kwnames);
  }
  PyObject* dtype = backend::raw_dtype_name(idx->raw);
  if (!dtype) return nullptr;
  if (PyUnicode_CompareWithASCIIString(dtype, "int64") != 0) return scatter_fallback(args, nargs, kwnames);
  Py_ssize_t nd = tensor_ndim(x);
  Py_ssize_t n_out = as_dim(out_dim)->size;
  bool dynamic = dim_has_lengths(as_dim(d));
  signed char pos[kMaxDims + 1];
  int k = 0;
  if (dynamic && !lengths_positions(as_dim(d), x->dims, true, pos, &k, caller)) {
    PyErr_Clear();
    return scatter_fallback(args, nargs, kwnames);
  }
  Ref ir(tensor_raw_aligned(idx, x->dims, caller));
  if (!ir) return nullptr;
  if (dynamic) {
    Ref device(PyObject_GetAttr(x->raw, backend::T.s_device));
    if (!device) return nullptr;
    Ref mask(dim_cached_raw(as_dim(d), MaskKind::kMask, pos, static_cast<int>(nd), x->sizes[a], device.get()));
    Ref extra_row(PyLong_FromSsize_t(n_out));
    if (!mask || !extra_row) return nullptr;
    ir = Ref(backend::call3(backend::T.where, mask.get(), ir.get(), extra_row.get()));
    if (!ir) return nullptr;
  }
  Py_ssize_t out_sizes[kMaxDims];
  std::copy(x->sizes, x->sizes + nd, out_sizes);
  out_sizes[a] = n_out + (dynamic ? 1 : 0);  // a dynamic dim's padding goes to the extra last row
  Ref shape(size_tuple(out_sizes, nd));
  if (!shape) return nullptr;
  Ref zeros(backend::call2(backend::T.new_zeros, x->raw, shape.get()));
  Ref index(backend::call2(backend::T.expand_as, ir.get(), x->raw));
  Ref a_obj(PyLong_FromLong(a));
  if (!zeros || !index || !a_obj) return nullptr;
  PyObject* call[4] = {zeros.get(), a_obj.get(), index.get(), x->raw};
  Ref raw(PyObject_Vectorcall(backend::T.scatter_add_, call, 4, nullptr));
  if (!raw) return nullptr;
  if (dynamic) {
    raw = Ref(narrowed(raw.get(), a, 0, n_out));
    if (!raw) return nullptr;
  }
  Ref dims(dims_replaced(x->dims, a, out_dim));
  if (!dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  std::copy(x->sizes, x->sizes + nd, sizes);
  sizes[a] = n_out;
  return tensor_make(raw.release(), dims.get(), sizes, x->sparse_dim, kept_feature(x, dims.get()));
}

#define FASTCALL_KW(fn) DIMTORCH_OP(fn), METH_FASTCALL | METH_KEYWORDS

PyMethodDef kFunctions[] = {
    {"scatter", FASTCALL_KW(f_scatter),
     "scatter(x, *, indices, indices_dim, mode='sum', fill_value=None, out_dim=None, use_mask=None) -> tensor: "
     "see dimtorch._scatter.scatter."},
    {nullptr}};

#undef FASTCALL_KW

}  // namespace

bool export_ops_scatter(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
