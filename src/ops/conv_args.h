// What the fast paths of conv and pool share (as python/dimtorch/ops/conv_args.py does for their
// definitions): the spatial dims argument, per-dim ints, x's layout for torch's (N, C, *S) and the
// output dims by dim math. Each reader returns false for anything but the common forms, and the fast
// path then hands the call to the definition, which owns the errors.
#pragma once
#include "core/backend.h"
#include "core/common.h"
#include "core/dim.h"
#include "core/tensor.h"
#include "ops/fast_path_util.h"

namespace dimtorch {
namespace conv_args {

constexpr int kMaxSpatial = 3;

/// in_spatial_dims: a Dim, or a tuple or list of 1 to 3 Dims, each once.
inline bool spatial_dims(PyObject* o, PyObject** out, int* n) {
  if (is_dim(o)) {
    out[0] = o;
    *n = 1;
    return true;
  }
  if (!PyTuple_CheckExact(o) && !PyList_CheckExact(o)) return false;
  Py_ssize_t len = PySequence_Fast_GET_SIZE(o);
  if (len < 1 || len > kMaxSpatial) return false;
  PyObject** items = PySequence_Fast_ITEMS(o);
  for (Py_ssize_t i = 0; i < len; ++i) {
    if (!is_dim(items[i])) return false;
    for (Py_ssize_t j = 0; j < i; ++j)
      if (items[j] == items[i]) return false;
    out[i] = items[i];
  }
  *n = static_cast<int>(len);
  return true;
}

/// An exact int >= minimum for every spatial dim, or a tuple or list of n such ints; `absent`
/// (NULL) gives `fallback`.
inline bool per_dim(PyObject* o, int n, Py_ssize_t minimum, Py_ssize_t fallback, Py_ssize_t* out) {
  Py_ssize_t v;
  if (!o) {
    for (int i = 0; i < n; ++i) out[i] = fallback;
    return true;
  }
  if (fast_path::exact_int(o, &v)) {
    for (int i = 0; i < n; ++i) out[i] = v;
    return v >= minimum;
  }
  if ((!PyTuple_CheckExact(o) && !PyList_CheckExact(o)) || PySequence_Fast_GET_SIZE(o) != n) return false;
  for (int i = 0; i < n; ++i)
    if (!fast_path::exact_int(PySequence_Fast_ITEMS(o)[i], &out[i]) || out[i] < minimum) return false;
  return true;
}

/// padding: "valid" (kValid), "same" (kSame) or ints >= 0 (kInts, in `ints`); NULL is "valid".
enum class Padding { kValid, kSame, kInts };
inline bool padding(PyObject* o, int n, Padding* kind, Py_ssize_t* ints) {
  for (int i = 0; i < n; ++i) ints[i] = 0;
  if (!o) {
    *kind = Padding::kValid;
    return true;
  }
  if (PyUnicode_CheckExact(o)) {
    if (PyUnicode_CompareWithASCIIString(o, "valid") == 0) *kind = Padding::kValid;
    else if (PyUnicode_CompareWithASCIIString(o, "same") == 0) *kind = Padding::kSame;
    else return false;
    return true;
  }
  *kind = Padding::kInts;
  return per_dim(o, n, 0, 0, ints);
}

/// The output spatial dim of `d` for a window of k_eff frames, `stride` and padding (`pad` frames on
/// both sides for kInts), by dim math as conv_args.out_spatial_dim: "valid" ceildiv(T - (k_eff - 1), s),
/// "same" ceildiv(T, s), ints "valid" over T + 2p. New reference; NULL with an error set.
inline PyObject* out_spatial_dim(PyObject* d, Py_ssize_t k_eff, Py_ssize_t stride, Padding kind, Py_ssize_t pad,
                                 const char* caller) {
  Ref dim = Ref::borrow(d);
  if (kind == Padding::kInts && pad) {
    dim = Ref(dim_derive(as_dim(dim.get()), DimOp::kAdd, 2 * pad, nullptr, caller));
    if (!dim) return nullptr;
  }
  if (kind != Padding::kSame) {
    dim = Ref(dim_derive(as_dim(dim.get()), DimOp::kSub, k_eff - 1, nullptr, caller));
    if (!dim) return nullptr;
  }
  return dim_derive(as_dim(dim.get()), DimOp::kCeilDiv, stride, nullptr, caller);
}

/// The size of a dim along a raw axis of its Tensors: static size, or the longest sequence. -1 for a
/// dim that takes its size from data, -2 with an error set.
inline Py_ssize_t axis_size(PyObject* d) { return dim_max_size(as_dim(d)); }

// The four helpers below are forced inline: they run on every conv and pool call (a call each cost ~100
// instructions there when the compiler kept them out of line).

/// Where x has each spatial dim (pos, is_spatial over x's axes) and whether any has lengths. false for a
/// dim x lacks or one that takes its size from data (a new out dim per call: the definition's case).
[[gnu::always_inline]] inline bool locate_spatial(TensorObject* x, PyObject* const* spatial, int n, int* pos,
                                                  bool* is_spatial, bool* dynamic) {
  *dynamic = false;
  for (int i = 0; i < n; ++i) {
    pos[i] = dims_index(x->dims, spatial[i]);
    if (pos[i] < 0) return false;
    is_spatial[pos[i]] = true;
    DimObject* d = as_dim(spatial[i]);
    if (d->size < 0 && !dim_has_lengths(d)) return false;
    *dynamic = *dynamic || dim_has_lengths(d);
  }
  return true;
}

/// The size torch sees of each spatial axis: x's, or the longest sequence when that is shorter (`narrow`
/// then set). false with an error set.
[[gnu::always_inline]] inline bool torch_sizes(TensorObject* x, PyObject* const* spatial, const int* pos, int n,
                                               Py_ssize_t* sizes, bool* narrow) {
  *narrow = false;
  for (int i = 0; i < n; ++i) {
    sizes[i] = x->sizes[pos[i]];
    Py_ssize_t longest = axis_size(spatial[i]);
    if (longest == -2) return false;
    if (longest < sizes[i]) {
      sizes[i] = longest;
      *narrow = true;
    }
  }
  return true;
}

/// The out spatial dims (out_spatial_dim of each) as a new tuple, their axis sizes in `axis_sizes`; NULL
/// with no error set when dim math or a size fails (the definition then says why).
[[gnu::always_inline]] inline PyObject* out_spatial_tuple(PyObject* const* spatial, int n, const Py_ssize_t* k_eff,
                                                          const Py_ssize_t* strides, Padding kind,
                                                          const Py_ssize_t* pads, const char* caller,
                                                          Py_ssize_t* axis_sizes) {
  Ref out(PyTuple_New(n));
  if (!out) return nullptr;
  for (int i = 0; i < n; ++i) {
    PyObject* od = out_spatial_dim(spatial[i], k_eff[i], strides[i], kind, pads[i], caller);
    if (!od) {
      PyErr_Clear();
      return nullptr;
    }
    PyTuple_SET_ITEM(out.get(), i, od);
    if ((axis_sizes[i] = axis_size(od)) == -2) {
      PyErr_Clear();
      return nullptr;
    }
  }
  return out.release();
}

/// The output's dims and shape: x's axes order[0..n_lead) (its other dims, in order), then `middle` of
/// size middle_size if given (conv's out_dim), then the out spatial dims of out_sizes. New tuple.
[[gnu::always_inline]] inline PyObject* out_dims_and_shape(TensorObject* x, const int* order, int n_lead,
                                                           PyObject* middle, Py_ssize_t middle_size,
                                                           PyObject* out_spatial, const Py_ssize_t* out_sizes,
                                                           Py_ssize_t* out_shape) {
  int n = static_cast<int>(PyTuple_GET_SIZE(out_spatial));
  int first_spatial = n_lead + (middle ? 1 : 0);
  PyObject* dims = PyTuple_New(first_spatial + n);
  if (!dims) return nullptr;
  for (int j = 0; j < n_lead; ++j) {
    PyTuple_SET_ITEM(dims, j, Py_NewRef(PyTuple_GET_ITEM(x->dims, order[j])));
    out_shape[j] = x->sizes[order[j]];
  }
  if (middle) {
    PyTuple_SET_ITEM(dims, n_lead, Py_NewRef(middle));
    out_shape[n_lead] = middle_size;
  }
  for (int i = 0; i < n; ++i) {
    PyTuple_SET_ITEM(dims, first_spatial + i, Py_NewRef(PyTuple_GET_ITEM(out_spatial, i)));
    out_shape[first_spatial + i] = out_sizes[i];
  }
  return dims;
}

/// raw with its axes permuted to `order` (a view; the raw itself for the identity; `.mT` for a swap
/// of the last two, torch's cheapest view call). New reference.
inline PyObject* permuted(PyObject* raw, const int* order, int nd) {
  bool swap_last = nd >= 2 && order[nd - 1] == nd - 2 && order[nd - 2] == nd - 1;
  for (int i = 0; swap_last && i < nd - 2; ++i) swap_last = order[i] == i;
  if (swap_last) return PyObject_GetAttr(raw, backend::T.s_mT);
  return backend::permute_order(raw, order, nd);
}

/// raw.reshape(sizes). New reference.
inline PyObject* reshaped(PyObject* raw, const Py_ssize_t* sizes, int n) {
  Ref shape(size_tuple(sizes, n));
  if (!shape) return nullptr;
  return backend::call2(backend::T.reshape, raw, shape.get());
}

/// One int for a 1-D op (torch parses it faster than a 1-tuple), else a tuple of n ints. New reference.
inline PyObject* int_arg(const Py_ssize_t* values, int n) {
  return n == 1 ? PyLong_FromSsize_t(values[0]) : size_tuple(values, n);
}

}  // namespace conv_args
}  // namespace dimtorch
