// Fast path of gather (definition: python/dimtorch/_gather.py): an int index (one select) and an
// embedding lookup (one F.embedding). Every other case goes to the Python definition.
#include "args.h"
#include "backend.h"
#include "dim.h"
#include "functions.h"
#include "mask.h"
#include "python_fallback.h"
#include "tensor.h"
#include "exports.h"

#include <algorithm>

namespace dimtorch {

namespace {

DIMTORCH_PYTHON_FALLBACK(gather_fallback, "gather")

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

/// gather(x, *, indices, axis, clip_to_valid=False): the fast paths are an int index in range (one
/// select) and an embedding lookup — x over (axis, feature), int64 indices sharing no dim with x —
/// which is one F.embedding. clip_to_valid other than False goes to the Python definition.
PyObject* f_gather(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "indices", "axis", "clip_to_valid"};
  PyObject* v[4];
  if (!parse_args(args, nargs, kwnames, names, 4, 1, 3, v, "dimtorch.gather()") || (v[3] && v[3] != Py_False)) {
    PyErr_Clear();
    return gather_fallback(args, nargs, kwnames);
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
  if (!x->raw || !idx->raw || tensor_ndim(x) != 2 || PyTuple_GET_ITEM(x->dims, 0) != v[2] ||
      idx->sparse_dim != v[2] || tensor_ndim(idx) + 1 > kMaxDims)
    return gather_fallback(args, nargs, kwnames);
  for (Py_ssize_t j = 0; j < tensor_ndim(idx); ++j)
    if (dims_index(x->dims, PyTuple_GET_ITEM(idx->dims, j)) >= 0) return gather_fallback(args, nargs, kwnames);
  PyObject* dtype = backend::raw_dtype_name(idx->raw);
  if (!dtype) return nullptr;
  if (PyUnicode_CompareWithASCIIString(dtype, "int64") != 0) return gather_fallback(args, nargs, kwnames);
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
     "gather(x, *, indices, axis, clip_to_valid=False): see dimtorch._gather.gather; an embedding lookup (x over "
     "(axis, feature), int64 indices sharing no dim with x) is one F.embedding here."},
    {nullptr}};

}  // namespace

bool export_ops_gather(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
