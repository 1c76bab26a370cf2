// Fast path of reduce_out (definition: python/dimtorch/ops/reduce_out.py), e.g. maxout in a readout: the
// source's static feature dim F split into (out_dim, num_pieces) by one reshape and reduced over the pieces
// by one torch amax / sum / mean / amin; out_dim F // num_pieces by dim math (cached on F) or a given static
// Dim of that size. Every other call (a mean of ints, every error) goes to the Python definition.
#include "core/args.h"
#include "core/backend.h"
#include "core/dim.h"
#include "core/exports.h"
#include "core/functions.h"
#include "core/python_fallback.h"
#include "core/tensor.h"
#include "ops/fast_path_util.h"

namespace dimtorch {

namespace {

DIMTORCH_PYTHON_FALLBACK(reduce_out_fallback, "reduce_out")

/// reduce_out(source, *, mode, num_pieces, out_dim=None) -> Tensor.
PyObject* f_reduce_out(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"source", "mode", "num_pieces", "out_dim"};
  const char* caller = "dimtorch.reduce_out()";
  PyObject* v[4];
  if (!parse_args(args, nargs, kwnames, names, 4, 1, 3, v, caller)) {
    PyErr_Clear();
    return reduce_out_fallback(args, nargs, kwnames);
  }
#define FALLBACK() return reduce_out_fallback(args, nargs, kwnames)
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !PyUnicode_CheckExact(v[1])) FALLBACK();
  static PyObject* modes[4] = {};
  const char* const mode_names[4] = {"max", "sum", "mean", "min"};
  int m = 0;
  while (m < 4 && v[1] != fast_path::interned(&modes[m], mode_names[m])) ++m;
  if (m == 4) {  // a str made at run time: compared by value
    m = 0;
    while (m < 4 && PyUnicode_CompareWithASCIIString(v[1], mode_names[m]) != 0) ++m;
    if (m == 4) FALLBACK();
  }
  Py_ssize_t pieces;
  if (!fast_path::exact_int(v[2], &pieces) || pieces < 1) FALLBACK();
  TensorObject* x = as_tensor(v[0]);
  PyObject* feature = x->feature_dim;
  if (!feature) FALLBACK();
  Py_ssize_t size = as_dim(feature)->size;
  int a = dims_index(x->dims, feature);
  if (a < 0 || size < 0 || dim_has_lengths(as_dim(feature)) || size % pieces) FALLBACK();
  if (m == 2) {  // (torch's mean takes no int dtype: the definition raises)
    PyObject* dtype = backend::raw_dtype_name(x->raw);
    if (!dtype) return nullptr;
    if (!backend::is_floating_dtype_name(dtype)) FALLBACK();
  }
  Ref out_dim;
  if (v[3] && v[3] != Py_None) {
    if (!is_dim(v[3]) || as_dim(v[3])->size != size / pieces || dim_has_lengths(as_dim(v[3]))) FALLBACK();
    out_dim = Ref::borrow(v[3]);
  } else if (!(out_dim = Ref(dim_derive(as_dim(feature), DimOp::kFloorDiv, pieces, nullptr, caller)))) {
    PyErr_Clear();
    FALLBACK();
  }
  // out_dim already another dim of x (given, or the derived dim's cached object): the definition says so.
  int at = dims_index(x->dims, out_dim.get());
  if (at >= 0 && at != a) FALLBACK();
#undef FALLBACK
  Py_ssize_t nd = tensor_ndim(x);
  Py_ssize_t split[kMaxDims + 1];
  for (Py_ssize_t i = 0, j = 0; i < nd; ++i) {
    if (i == a) {
      split[j++] = size / pieces;
      split[j++] = pieces;
    } else {
      split[j++] = x->sizes[i];
    }
  }
  Ref shape(size_tuple(split, nd + 1));
  Ref pieces_axis(PyLong_FromLong(a + 1));
  if (!shape || !pieces_axis) return nullptr;
  Ref grouped(backend::call2(backend::T.reshape, x->raw, shape.get()));
  if (!grouped) return nullptr;
  PyObject* const reductions[4] = {backend::T.amax, backend::T.sum, backend::T.mean, backend::T.amin};
  PyObject* out = backend::call2(reductions[m], grouped.get(), pieces_axis.get());
  if (!out) return nullptr;
  Ref dims(fast_path::dims_replaced(x->dims, a, out_dim.get()));
  if (!dims) {
    Py_DECREF(out);
    return nullptr;
  }
  Py_ssize_t sizes[kMaxDims];
  for (Py_ssize_t i = 0; i < nd; ++i) sizes[i] = i == a ? size / pieces : x->sizes[i];
  return tensor_make(out, dims.get(), sizes, x->sparse_dim, out_dim.get());
}

PyMethodDef kFunctions[] = {
    {"reduce_out", DIMTORCH_OP(f_reduce_out), METH_FASTCALL | METH_KEYWORDS,
     "reduce_out(source, *, mode, num_pieces, out_dim=None) -> Tensor: see dimtorch.ops.reduce_out.reduce_out; "
     "one reshape and one torch reduction here."},
    {nullptr}};

}  // namespace

bool export_ops_reduce_out(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
