// Fast path of gather (definition: python/dimtorch/ops/gather.py): an int index (one select), an
// embedding lookup (one F.embedding) and batched indices (one torch.gather in x's layout, as the
// definition does it). Every other case goes to the definition.
#include "core/args.h"
#include "ops/fast_path_util.h"
#include "core/backend.h"
#include "core/dim.h"
#include "core/functions.h"
#include "core/mask.h"
#include "core/python_fallback.h"
#include "core/tensor.h"
#include "core/exports.h"

#include <algorithm>

namespace dimtorch {

namespace {

using namespace fast_path;

DIMTORCH_PYTHON_FALLBACK(gather_fallback, "gather")
DIMTORCH_PYTHON_FALLBACK(one_hot_fallback, "one_hot")

/// one_hot(indices): int64 indices with a static sparse_dim they lack: one F.one_hot, dims
/// indices' then the sparse_dim, which is the feature_dim. Other dtypes go to the definition.
PyObject* f_one_hot(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"indices"};
  PyObject* v[1];
  if (!parse_args(args, nargs, kwnames, names, 1, 1, 1, v, "dimtorch.one_hot()", 1)) {
    PyErr_Clear();
    return one_hot_fallback(args, nargs, kwnames);
  }
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || tensor_ndim(as_tensor(v[0])) >= kMaxDims)
    return one_hot_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  PyObject* d = x->sparse_dim;
  if (!d || as_dim(d)->size < 0 || dims_index(x->dims, d) >= 0) return one_hot_fallback(args, nargs, kwnames);
  PyObject* dtype = backend::raw_dtype_name(x->raw);
  if (!dtype) return nullptr;
  if (PyUnicode_CompareWithASCIIString(dtype, "int64") != 0) return one_hot_fallback(args, nargs, kwnames);
  int nd = static_cast<int>(tensor_ndim(x));
  Ref dims(PyTuple_New(nd + 1));
  Ref classes(PyLong_FromSsize_t(as_dim(d)->size));
  if (!dims || !classes) return nullptr;
  Py_ssize_t sizes[kMaxDims + 1];
  for (int i = 0; i < nd; ++i) {
    PyTuple_SET_ITEM(dims.get(), i, Py_NewRef(PyTuple_GET_ITEM(x->dims, i)));
    sizes[i] = x->sizes[i];
  }
  PyTuple_SET_ITEM(dims.get(), nd, Py_NewRef(d));
  sizes[nd] = as_dim(d)->size;
  PyObject* raw = backend::call2(backend::T.one_hot, x->raw, classes.get());
  if (!raw) return nullptr;
  return tensor_make(raw, dims.get(), sizes, nullptr, d);
}

/// x at the int `index` of its dim at axis a, that dim removed: one select (a view).
PyObject* gather_int(TensorObject* x, int a, PyObject* index) {
  Ref a_obj(PyLong_FromLong(a));
  if (!a_obj) return nullptr;
  PyObject* raw = backend::call3(backend::T.select, x->raw, a_obj.get(), index);
  if (!raw) return nullptr;
  Py_ssize_t nd = tensor_ndim(x);
  Ref dims(PyTuple_New(nd - 1));
  if (!dims) {
    Py_DECREF(raw);
    return nullptr;
  }
  Py_ssize_t sizes[kMaxDims];
  for (Py_ssize_t j = 0, k = 0; j < nd; ++j) {
    if (j == a) continue;
    PyTuple_SET_ITEM(dims.get(), k, Py_NewRef(PyTuple_GET_ITEM(x->dims, j)));
    sizes[k++] = x->sizes[j];
  }
  PyObject* axis = PyTuple_GET_ITEM(x->dims, a);
  return tensor_make(raw, dims.get(), sizes, x->sparse_dim, x->feature_dim != axis ? x->feature_dim : nullptr);
}

/// Batched indices: int64 `idx` over one dim x lacks (the new dim) and dims of x of the same sizes
/// (batch dims, e.g. a beam step's back-pointers over (batch, beam)): one torch.gather in x's own layout,
/// the indices aligned to it (size 1 where they lack a dim of x) and expanded; axis becomes the new dim.
/// NULL with *fall_back set (no error) for other indices.
PyObject* gather_batched(TensorObject* x, int a, TensorObject* idx, bool* fall_back) {
  *fall_back = true;
  PyObject* new_dim = nullptr;
  for (Py_ssize_t j = 0; j < tensor_ndim(idx); ++j) {
    PyObject* d = PyTuple_GET_ITEM(idx->dims, j);
    int i = dims_index(x->dims, d);
    if (i < 0) {
      if (new_dim) return nullptr;  // several new dims: the definition flattens them
      new_dim = d;
    } else if (i == a || x->sizes[i] != idx->sizes[j]) {
      return nullptr;
    }
  }
  if (!new_dim) return nullptr;
  *fall_back = false;
  Py_ssize_t nd = tensor_ndim(x);
  Ref out_dims(dims_replaced(x->dims, a, new_dim));
  if (!out_dims) return nullptr;
  Ref ir(tensor_raw_aligned(idx, out_dims.get(), "dimtorch.gather()"));
  if (!ir) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  std::copy(x->sizes, x->sizes + nd, sizes);
  sizes[a] = idx->sizes[dims_index(idx->dims, new_dim)];
  Ref shape(size_tuple(sizes, nd));
  Ref index(shape ? backend::call2(backend::T.expand, ir.get(), shape.get()) : nullptr);
  Ref a_obj(PyLong_FromLong(a));
  if (!index || !a_obj) return nullptr;
  PyObject* raw = backend::call3(backend::T.gather, x->raw, a_obj.get(), index.get());
  if (!raw) return nullptr;
  PyObject* axis = PyTuple_GET_ITEM(x->dims, a);
  return tensor_make(raw, out_dims.get(), sizes, x->sparse_dim, x->feature_dim != axis ? x->feature_dim : nullptr);
}

/// gather(x, *, indices, axis, clip_to_valid=False): the fast paths are an int index in range (one
/// select), an embedding lookup — x over (axis, feature), int64 indices sharing no dim with x —
/// which is one F.embedding, and batched indices (gather_batched). clip_to_valid other than False goes
/// to the Python definition.
PyObject* f_gather(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "indices", "axis", "clip_to_valid"};
  PyObject* v[4];
  if (!parse_args(args, nargs, kwnames, names, 4, 1, 2, v, "dimtorch.gather()", 1) || (v[3] && v[3] != Py_False)) {
    PyErr_Clear();
    return gather_fallback(args, nargs, kwnames);
  }
  if (!v[2] || v[2] == Py_None) {  // axis: the indices' sparse_dim (RETURNN frontend's default)
    if (!is_tensor(v[1]) || !as_tensor(v[1])->sparse_dim) return gather_fallback(args, nargs, kwnames);
    v[2] = as_tensor(v[1])->sparse_dim;
  }
  if (PyLong_CheckExact(v[1]) && is_tensor(v[0]) && as_tensor(v[0])->raw && is_dim(v[2])) {
    int a = dims_index(as_tensor(v[0])->dims, v[2]);
    Py_ssize_t i = PyLong_AsSsize_t(v[1]);
    if (i == -1 && PyErr_Occurred()) PyErr_Clear();  // out of range: the Python definition says so
    else if (a >= 0 && i >= 0 && i < as_tensor(v[0])->sizes[a]) return gather_int(as_tensor(v[0]), a, v[1]);
  }
  if (!is_tensor(v[0]) || !is_tensor(v[1]) || !is_dim(v[2]))
    return gather_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  TensorObject* idx = as_tensor(v[1]);
  if (!x->raw || !idx->raw || (idx->sparse_dim && idx->sparse_dim != v[2]) || tensor_ndim(idx) + 1 > kMaxDims)
    return gather_fallback(args, nargs, kwnames);
  PyObject* idx_dtype = backend::raw_dtype_name(idx->raw);
  if (!idx_dtype) return nullptr;
  if (PyUnicode_CompareWithASCIIString(idx_dtype, "int64") != 0) return gather_fallback(args, nargs, kwnames);
  int a = dims_index(x->dims, v[2]);
  if (a < 0) return gather_fallback(args, nargs, kwnames);
  bool shares_a_dim = false;
  for (Py_ssize_t j = 0; j < tensor_ndim(idx); ++j)
    if (dims_index(x->dims, PyTuple_GET_ITEM(idx->dims, j)) >= 0) shares_a_dim = true;
  if (shares_a_dim) {
    bool fall_back;
    PyObject* out = gather_batched(x, a, idx, &fall_back);
    return fall_back ? gather_fallback(args, nargs, kwnames) : out;
  }
  if (tensor_ndim(x) != 2 || a != 0) return gather_fallback(args, nargs, kwnames);
  Py_ssize_t nd = tensor_ndim(idx) + 1;
  Ref out_dims(PyTuple_New(nd));
  if (!out_dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  for (Py_ssize_t j = 0; j + 1 < nd; ++j) {
    PyTuple_SET_ITEM(out_dims.get(), j, Py_NewRef(PyTuple_GET_ITEM(idx->dims, j)));
    sizes[j] = idx->sizes[j];
  }
  PyObject* rest = PyTuple_GET_ITEM(x->dims, 1);
  PyTuple_SET_ITEM(out_dims.get(), nd - 1, Py_NewRef(rest));
  sizes[nd - 1] = x->sizes[1];
  PyObject* raw = backend::call2(backend::T.embedding, idx->raw, x->raw);
  if (!raw) return nullptr;
  return tensor_make(raw, out_dims.get(), sizes, x->sparse_dim,
                     x->feature_dim == rest ? rest : nullptr);
}

PyMethodDef kFunctions[] = {
    {"gather", DIMTORCH_OP(f_gather),
     METH_FASTCALL | METH_KEYWORDS,
     "gather(x, /, *, indices, axis=None, clip_to_valid=False): see dimtorch.ops.gather.gather; an embedding lookup (x over "
     "(axis, feature), int64 indices sharing no dim with x) is one F.embedding here, batched indices (one new "
     "dim, the others x's) one torch.gather in x's layout."},
    {"one_hot", DIMTORCH_OP(f_one_hot), METH_FASTCALL | METH_KEYWORDS,
     "one_hot(indices, /) -> Tensor: see dimtorch.ops.gather.one_hot; int64 indices are one F.one_hot here."},
    {nullptr}};

}  // namespace

bool export_ops_gather(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
