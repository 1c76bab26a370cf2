// Helpers the fast paths of the array families share (slicing, stack, sort, packing, scatter, shape,
// reshape): exact ints, new static dims, dims tuples with one dim replaced, lengths over a group of
// dims, raws cached on a dim per layout.
#pragma once
#include "core/common.h"
#include "core/dim.h"
#include "core/tensor.h"

namespace dimtorch {
namespace fast_path {

/// An exact Python int (not a bool) that fits Py_ssize_t.
inline bool exact_int(PyObject* o, Py_ssize_t* out) {
  if (!o || !PyLong_CheckExact(o)) return false;
  *out = PyLong_AsSsize_t(o);
  if (*out == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  return true;
}

/// New static Dim(n, name=name); `name` borrowed.
inline PyObject* new_static_dim(Py_ssize_t n, PyObject* name) {
  Ref size(PyLong_FromSsize_t(n));
  if (!size) return nullptr;
  PyObject* args[2] = {size.get(), name};
  return PyObject_Vectorcall(reinterpret_cast<PyObject*>(&DimType), args, 2, nullptr);
}

/// x's dims with the one at `a` replaced by `dim`; new reference.
inline PyObject* dims_replaced(PyObject* dims, Py_ssize_t a, PyObject* dim) {
  Py_ssize_t n = PyTuple_GET_SIZE(dims);
  PyObject* out = PyTuple_New(n);
  if (!out) return nullptr;
  for (Py_ssize_t j = 0; j < n; ++j) PyTuple_SET_ITEM(out, j, Py_NewRef(j == a ? dim : PyTuple_GET_ITEM(dims, j)));
  return out;
}

/// x's feature_dim when it is among `dims`, else NULL (as dimtorch.ops.shape.keep_markers).
inline PyObject* kept_feature(TensorObject* x, PyObject* dims) {
  return x->feature_dim && dims_index(dims, x->feature_dim) >= 0 ? x->feature_dim : nullptr;
}

/// Whether a dim of x outside its axes [first, first + n) has lengths that vary over one of the n
/// dims of the tuple `group` (merge_dims, reshape: the definition refuses that): 1 yes (or its
/// lengths are gone), 0 no, -1 with an error set.
inline int lengths_over_group(TensorObject* x, Py_ssize_t first, Py_ssize_t n, PyObject* group) {
  for (Py_ssize_t i = 0, nd = tensor_ndim(x); i < nd; ++i) {
    if (i >= first && i < first + n) continue;
    DimObject* d = as_dim(PyTuple_GET_ITEM(x->dims, i));
    if (!dim_has_lengths(d)) continue;
    PyObject* lengths = dim_dyn_size(d);
    if (!lengths) return PyErr_Occurred() ? -1 : 1;
    for (Py_ssize_t j = 0; j < n; ++j)
      if (dims_index(as_tensor(lengths)->dims, PyTuple_GET_ITEM(group, j)) >= 0) return 1;
  }
  return 0;
}

/// The raw cached in dim->cache under `key` (a tuple starting with a str tag), or the one
/// `build()` makes, stored there. New reference.
template <typename Build>
inline PyObject* cached_on_dim(DimObject* dim, PyObject* key, Build build) {
  if (!dim->cache && !(dim->cache = PyDict_New())) return nullptr;
  PyObject* hit = PyDict_GetItemWithError(dim->cache, key);
  if (hit) return Py_NewRef(hit);
  if (PyErr_Occurred()) return nullptr;
  Ref value(build());
  if (!value) return nullptr;
  // build() may have let another thread in, which stored the same key first: keep its value.
  PyObject* kept = PyDict_SetDefault(dim->cache, key, value.get());
  return Py_XNewRef(kept);
}

/// Cache key (tag, device, ints...): the layout an index raw was made for. New reference.
inline PyObject* layout_key(PyObject* tag, PyObject* device, const Py_ssize_t* sizes, Py_ssize_t n_sizes,
                     const signed char* pos, int n_pos) {
  Ref key(PyTuple_New(2 + n_sizes + n_pos));
  if (!key) return nullptr;
  PyTuple_SET_ITEM(key.get(), 0, Py_NewRef(tag));
  PyTuple_SET_ITEM(key.get(), 1, Py_NewRef(device));
  for (Py_ssize_t j = 0; j < n_sizes; ++j) {
    PyObject* v = PyLong_FromSsize_t(sizes[j]);
    if (!v) return nullptr;
    PyTuple_SET_ITEM(key.get(), 2 + j, v);
  }
  for (int j = 0; j < n_pos; ++j) {
    PyObject* v = PyLong_FromLong(pos[j]);
    if (!v) return nullptr;
    PyTuple_SET_ITEM(key.get(), 2 + n_sizes + j, v);
  }
  return key.release();
}

inline PyObject* interned(PyObject** cache, const char* s) {
  if (!*cache) *cache = PyUnicode_InternFromString(s);
  return *cache;
}

/// Contiguous int32 ones of shape sizes[0..nd) on `device`, cached for the last few shapes (src/ops/scatter.cpp):
/// the increments of a counting scatter_add_ (from a contiguous source ~2x faster than from an expanded 0-dim
/// one; making them each call costs ~1.5 us). Eager only. New reference.
PyObject* int32_ones(const Py_ssize_t* sizes, Py_ssize_t nd, PyObject* device);

/// raw[:, ..., s:s + n] along axis a, a view: torch's indexing is ~1 us faster than its narrow.
inline PyObject* narrowed(PyObject* raw, int a, Py_ssize_t s, Py_ssize_t n) {
  static PyObject* all = nullptr;
  if (!all && !(all = PySlice_New(nullptr, nullptr, nullptr))) return nullptr;
  Ref start(PyLong_FromSsize_t(s)), stop(PyLong_FromSsize_t(s + n));
  if (!start || !stop) return nullptr;
  Ref index(PyTuple_New(a + 1));
  if (!index) return nullptr;
  for (int j = 0; j < a; ++j) PyTuple_SET_ITEM(index.get(), j, Py_NewRef(all));
  PyObject* part = PySlice_New(start.get(), stop.get(), nullptr);
  if (!part) return nullptr;
  PyTuple_SET_ITEM(index.get(), a, part);
  return PyObject_GetItem(raw, index.get());
}

}  // namespace fast_path
}  // namespace dimtorch
