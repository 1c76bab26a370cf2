// Fast paths of array ops composed in Python, for their common calls: slice (one view),
// shift_right (one view and one constant_pad_nd), split of a static dim (one split_with_sizes),
// stack of tensors in one layout (one torch.stack), top_k over a static dim (one topk),
// reverse_sequence (one flip, or one gather by an index cached on the dim), pack_padded of leading
// dims (one index_select by an index cached on the dim) and scatter along one dim (one
// scatter_add_). In Python each costs a few torch calls' time more (argument checks, output Dims
// and Tensors). Every other case goes to the Python definition (python_fallback.h).
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

/// An exact Python int (not a bool) that fits Py_ssize_t.
bool exact_int(PyObject* o, Py_ssize_t* out) {
  if (!o || !PyLong_CheckExact(o)) return false;
  *out = PyLong_AsSsize_t(o);
  if (*out == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  return true;
}

/// New static Dim(n, name=name); `name` borrowed.
PyObject* new_static_dim(Py_ssize_t n, PyObject* name) {
  Ref size(PyLong_FromSsize_t(n));
  if (!size) return nullptr;
  PyObject* args[2] = {size.get(), name};
  return PyObject_Vectorcall(reinterpret_cast<PyObject*>(&DimType), args, 2, nullptr);
}

/// x's dims with the one at `a` replaced by `dim`; new reference.
PyObject* dims_replaced(PyObject* dims, Py_ssize_t a, PyObject* dim) {
  Py_ssize_t n = PyTuple_GET_SIZE(dims);
  PyObject* out = PyTuple_New(n);
  if (!out) return nullptr;
  for (Py_ssize_t j = 0; j < n; ++j) PyTuple_SET_ITEM(out, j, Py_NewRef(j == a ? dim : PyTuple_GET_ITEM(dims, j)));
  return out;
}

/// x's feature_dim when it is among `dims`, else NULL (as dimtorch._shape_ops.keep_markers).
PyObject* kept_feature(TensorObject* x, PyObject* dims) {
  return x->feature_dim && dims_index(dims, x->feature_dim) >= 0 ? x->feature_dim : nullptr;
}

/// The raw cached in dim->cache under `key` (a tuple starting with a str tag), or the one
/// `build()` makes, stored there. New reference.
template <typename Build>
PyObject* cached_on_dim(DimObject* dim, PyObject* key, Build build) {
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
PyObject* layout_key(PyObject* tag, PyObject* device, const Py_ssize_t* sizes, Py_ssize_t n_sizes,
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

PyObject* interned(PyObject** cache, const char* s) {
  if (!*cache) *cache = PyUnicode_InternFromString(s);
  return *cache;
}

/// raw[:, ..., s:s + n] along axis a, a view: torch's indexing is ~1 us faster than its narrow.
PyObject* narrowed(PyObject* raw, int a, Py_ssize_t s, Py_ssize_t n) {
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

// ---- slice ------------------------------------------------------------------------------------

DIMTORCH_PYTHON_FALLBACK(slice_fallback, "slice")

/// slice(x, *, axis, start=0, end=None, step=1): the fast path (size and out_dim go to the Python
/// definition as unknown keywords, a Tensor start as a non-int) takes step 1 and, on a dynamic dim,
/// start >= 0 with end None (each sequence drops its first frames: out dim axis - start by dim
/// math), on a static dim start/end within the size (a new static out dim).
PyObject* f_slice(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "axis", "start", "end", "step"};
  const char* caller = "dimtorch.slice()";
  PyObject* v[5];
  if (!parse_args(args, nargs, kwnames, names, 5, 1, 2, v, caller)) {
    PyErr_Clear();
    return slice_fallback(args, nargs, kwnames);
  }
  Py_ssize_t start = 0, end = 0, step = 1;
  bool has_end = v[3] && v[3] != Py_None;
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(v[1]) || (v[2] && !exact_int(v[2], &start)) ||
      (has_end && !exact_int(v[3], &end)) || (v[4] && (!exact_int(v[4], &step) || step != 1)))
    return slice_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  PyObject* axis = v[1];
  DimObject* d = as_dim(axis);
  int a = dims_index(x->dims, axis);
  if (a < 0) return slice_fallback(args, nargs, kwnames);
  Py_ssize_t size = x->sizes[a];
  Py_ssize_t s, n;
  Ref out_dim;
  if (dim_has_lengths(d)) {
    signed char pos[kMaxDims + 1];
    int k = 0;
    if (has_end || start < 0 || !lengths_positions(d, x->dims, false, pos, &k, caller)) {
      PyErr_Clear();
      return slice_fallback(args, nargs, kwnames);
    }
    out_dim = start ? Ref(dim_derive(d, DimOp::kSub, start, nullptr, caller)) : Ref::borrow(axis);
    if (!out_dim) return nullptr;
    Py_ssize_t max_len = dim_max_size(as_dim(out_dim.get()));
    if (max_len < 0) return max_len == -2 ? nullptr : slice_fallback(args, nargs, kwnames);
    s = start < size ? start : size;
    n = max_len < size - s ? max_len : size - s;
  } else if (d->size >= 0) {
    // Python slice semantics within the size; out of range goes to the Python error.
    s = start < 0 ? start + size : start;
    Py_ssize_t e = !has_end ? size : (end < 0 ? end + size : end);
    if (s < 0 || s > size || e < 0 || e > size) return slice_fallback(args, nargs, kwnames);
    n = e > s ? e - s : 0;
    PyObject* name = d->name ? d->name : Py_None;
    Ref label(has_end ? PyUnicode_FromFormat("%S[%zd:%zd]", name, start, end)
                      : PyUnicode_FromFormat("%S[%zd:]", name, start));
    if (!label) return nullptr;
    out_dim = Ref(new_static_dim(n, label.get()));
    if (!out_dim) return nullptr;
  } else {
    return slice_fallback(args, nargs, kwnames);  // size from data
  }
  Ref raw;
  if (s == 0 && n == size) {
    raw = Ref::borrow(x->raw);
  } else {
    raw = Ref(narrowed(x->raw, a, s, n));
    if (!raw) return nullptr;
  }
  Ref dims(dims_replaced(x->dims, a, out_dim.get()));
  if (!dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  std::copy(x->sizes, x->sizes + tensor_ndim(x), sizes);
  sizes[a] = n;
  Ref t(tensor_make(raw.release(), dims.get(), sizes, x->sparse_dim, kept_feature(x, dims.get())));
  if (!t) return nullptr;
  return PyTuple_Pack(2, t.get(), out_dim.get());
}

// ---- shift_right ------------------------------------------------------------------------------

DIMTORCH_PYTHON_FALLBACK(shift_right_fallback, "shift_right")

/// shift_right(x, *, axis, amount=1, pad_value=0): the fast path takes an int amount >= 1 and a
/// Python number as pad_value: the first n - amount frames (a view), then one constant_pad_nd.
PyObject* f_shift_right(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "axis", "amount", "pad_value"};
  PyObject* v[4];
  if (!parse_args(args, nargs, kwnames, names, 4, 1, 2, v, "dimtorch.shift_right()")) {
    PyErr_Clear();
    return shift_right_fallback(args, nargs, kwnames);
  }
  Py_ssize_t amount = 1;
  PyObject* value = v[3] ? v[3] : backend::T.zero;
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(v[1]) || (v[2] && !exact_int(v[2], &amount)) ||
      amount < 1 || !(PyFloat_CheckExact(value) || PyLong_CheckExact(value)))
    return shift_right_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  int a = dims_index(x->dims, v[1]);
  if (a < 0) return shift_right_fallback(args, nargs, kwnames);
  Py_ssize_t n = x->sizes[a];
  Py_ssize_t k = amount < n ? amount : n;
  Ref kept(narrowed(x->raw, a, 0, n - k));
  if (!kept) return nullptr;
  // constant_pad_nd's pairs run from the last axis: zeros after axis a, then (k, 0).
  Py_ssize_t after = tensor_ndim(x) - 1 - a;
  Ref pad(PyTuple_New(2 * after + 2));
  Ref k_obj(PyLong_FromSsize_t(k));
  if (!pad || !k_obj) return nullptr;
  for (Py_ssize_t j = 0; j < 2 * after; ++j) PyTuple_SET_ITEM(pad.get(), j, Py_NewRef(backend::T.zero));
  PyTuple_SET_ITEM(pad.get(), 2 * after, k_obj.release());
  PyTuple_SET_ITEM(pad.get(), 2 * after + 1, Py_NewRef(backend::T.zero));
  PyObject* raw = backend::call3(backend::T.constant_pad_nd, kept.get(), pad.get(), value);
  if (!raw) return nullptr;
  return tensor_make(raw, x->dims, x->sizes, x->sparse_dim, x->feature_dim);
}

// ---- split ------------------------------------------------------------------------------------

DIMTORCH_PYTHON_FALLBACK(split_fallback, "split")

/// split(x, *, axis, out_dims): the fast path splits a dim without lengths into static out dims
/// whose sizes add up to its size: one split_with_sizes (views).
PyObject* f_split(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "axis", "out_dims"};
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 1, 3, v, "dimtorch.split()")) {
    PyErr_Clear();
    return split_fallback(args, nargs, kwnames);
  }
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(v[1]) || dim_has_lengths(as_dim(v[1])))
    return split_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  int a = dims_index(x->dims, v[1]);
  PyObject* out_dims = v[2];
  Ref parts_seq;
  if (is_dim(out_dims)) {
    parts_seq = Ref(PyTuple_Pack(1, out_dims));
  } else if (PyTuple_CheckExact(out_dims) || PyList_CheckExact(out_dims)) {
    parts_seq = Ref(PySequence_Tuple(out_dims));
  } else {
    return split_fallback(args, nargs, kwnames);
  }
  if (!parts_seq) return nullptr;
  PyObject* parts = parts_seq.get();
  Py_ssize_t n_parts = PyTuple_GET_SIZE(parts);
  if (a < 0 || n_parts == 0) return split_fallback(args, nargs, kwnames);
  Ref sizes_obj(PyTuple_New(n_parts));
  if (!sizes_obj) return nullptr;
  Py_ssize_t total = 0;
  for (Py_ssize_t i = 0; i < n_parts; ++i) {
    PyObject* p = PyTuple_GET_ITEM(parts, i);
    if (!is_dim(p) || as_dim(p)->size < 0 || (p != v[1] && dims_index(x->dims, p) >= 0))
      return split_fallback(args, nargs, kwnames);
    total += as_dim(p)->size;
    PyObject* size = PyLong_FromSsize_t(as_dim(p)->size);
    if (!size) return nullptr;
    PyTuple_SET_ITEM(sizes_obj.get(), i, size);
  }
  if (total != x->sizes[a]) return split_fallback(args, nargs, kwnames);
  Ref a_obj(PyLong_FromLong(a));
  if (!a_obj) return nullptr;
  PyObject* call[3] = {x->raw, sizes_obj.get(), a_obj.get()};
  Ref raws(PyObject_Vectorcall(backend::T.split_with_sizes, call, 3, nullptr));
  if (!raws) return nullptr;
  Ref raws_tuple(PySequence_Tuple(raws.get()));
  if (!raws_tuple) return nullptr;
  if (PyTuple_GET_SIZE(raws_tuple.get()) != n_parts) {
    PyErr_SetString(PyExc_RuntimeError, "dimtorch.split(): split_with_sizes gave the wrong number of parts");
    return nullptr;
  }
  PyObject* feature = x->feature_dim != v[1] ? x->feature_dim : nullptr;
  Ref out(PyList_New(n_parts));
  if (!out) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  std::copy(x->sizes, x->sizes + tensor_ndim(x), sizes);
  for (Py_ssize_t i = 0; i < n_parts; ++i) {
    PyObject* p = PyTuple_GET_ITEM(parts, i);
    Ref dims(dims_replaced(x->dims, a, p));
    if (!dims) return nullptr;
    sizes[a] = as_dim(p)->size;
    PyObject* t = tensor_make(Py_NewRef(PyTuple_GET_ITEM(raws_tuple.get(), i)), dims.get(), sizes,
                              x->sparse_dim, feature);
    if (!t) return nullptr;
    PyList_SET_ITEM(out.get(), i, t);
  }
  return out.release();
}

// ---- stack ------------------------------------------------------------------------------------

DIMTORCH_PYTHON_FALLBACK(stack_fallback, "stack")

/// stack(tensors, *, out_dim=None): the fast path takes tensors with the same dims in the same
/// order, raw sizes and dtype: one torch.stack.
PyObject* f_stack(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"tensors", "out_dim"};
  static PyObject* stack_name = nullptr;
  PyObject* v[2];
  if (!parse_args(args, nargs, kwnames, names, 2, 1, 1, v, "dimtorch.stack()")) {
    PyErr_Clear();
    return stack_fallback(args, nargs, kwnames);
  }
  PyObject* seq = v[0];
  if (!(PyTuple_CheckExact(seq) || PyList_CheckExact(seq)) || PySequence_Fast_GET_SIZE(seq) == 0)
    return stack_fallback(args, nargs, kwnames);
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  if (!is_tensor(items[0]) || !as_tensor(items[0])->raw) return stack_fallback(args, nargs, kwnames);
  TensorObject* first = as_tensor(items[0]);
  Py_ssize_t nd = tensor_ndim(first);
  if (nd + 1 > kMaxDims) return stack_fallback(args, nargs, kwnames);
  Ref dtype(PyObject_GetAttr(first->raw, backend::T.s_dtype));
  if (!dtype) return nullptr;
  Ref raws(PyList_New(n));
  if (!raws) return nullptr;
  PyObject* sparse = first->sparse_dim;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!is_tensor(items[i])) return stack_fallback(args, nargs, kwnames);
    TensorObject* t = as_tensor(items[i]);
    if (!t->raw || !same_dims(t->dims, first->dims) ||
        !std::equal(t->sizes, t->sizes + nd, first->sizes))
      return stack_fallback(args, nargs, kwnames);
    if (i > 0) {
      Ref t_dtype(PyObject_GetAttr(t->raw, backend::T.s_dtype));
      if (!t_dtype) return nullptr;
      if (t_dtype.get() != dtype.get()) return stack_fallback(args, nargs, kwnames);
    }
    if (t->sparse_dim != sparse) sparse = nullptr;
    PyList_SET_ITEM(raws.get(), i, Py_NewRef(t->raw));
  }
  Ref out_dim;
  if (!v[1] || v[1] == Py_None) {
    if (!interned(&stack_name, "stack")) return nullptr;
    out_dim = Ref(new_static_dim(n, stack_name));
    if (!out_dim) return nullptr;
  } else if (is_dim(v[1]) && as_dim(v[1])->size == n && dims_index(first->dims, v[1]) < 0) {
    out_dim = Ref::borrow(v[1]);
  } else {
    return stack_fallback(args, nargs, kwnames);
  }
  Ref raw(backend::call1(backend::T.stack, raws.get()));
  if (!raw) return nullptr;
  Ref dims(PyTuple_New(nd + 1));
  if (!dims) return nullptr;
  PyTuple_SET_ITEM(dims.get(), 0, Py_NewRef(out_dim.get()));
  Py_ssize_t sizes[kMaxDims];
  sizes[0] = n;
  for (Py_ssize_t j = 0; j < nd; ++j) {
    PyTuple_SET_ITEM(dims.get(), j + 1, Py_NewRef(PyTuple_GET_ITEM(first->dims, j)));
    sizes[j + 1] = first->sizes[j];
  }
  Ref t(tensor_make(raw.release(), dims.get(), sizes, sparse, first->feature_dim));
  if (!t) return nullptr;
  return PyTuple_Pack(2, t.get(), out_dim.get());
}

// ---- top_k ------------------------------------------------------------------------------------

DIMTORCH_PYTHON_FALLBACK(top_k_fallback, "top_k")

/// top_k(x, *, axis, k): the fast path ranks one dim without lengths (nothing to mask) with an
/// int k within its size, for int and float dtypes: one topk; k_dim is a new static Dim.
PyObject* f_top_k(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "axis", "k"};
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 1, 3, v, "dimtorch.top_k()")) {
    PyErr_Clear();
    return top_k_fallback(args, nargs, kwnames);
  }
  Py_ssize_t k;
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(v[1]) || dim_has_lengths(as_dim(v[1])) ||
      !exact_int(v[2], &k))
    return top_k_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  PyObject* axis = v[1];
  int a = dims_index(x->dims, axis);
  if (a < 0 || k < 1 || k > x->sizes[a]) return top_k_fallback(args, nargs, kwnames);
  PyObject* dtype = backend::raw_dtype_name(x->raw);
  if (!dtype) return nullptr;
  if (!backend::is_floating_dtype_name(dtype) && !backend::is_integer_dtype_name(dtype))
    return top_k_fallback(args, nargs, kwnames);
  static PyObject* labels[16] = {};  // "top1".."top15", made once each
  Ref label = k < 16 && labels[k] ? Ref::borrow(labels[k]) : Ref(PyUnicode_FromFormat("top%zd", k));
  if (!label) return nullptr;
  if (k < 16 && !labels[k]) labels[k] = Py_NewRef(label.get());
  Ref k_dim(new_static_dim(k, label.get()));
  Ref a_obj(PyLong_FromLong(a));
  if (!k_dim || !a_obj) return nullptr;
  PyObject* call[3] = {x->raw, v[2], a_obj.get()};
  Ref result(PyObject_Vectorcall(backend::T.topk, call, 3, nullptr));
  if (!result) return nullptr;
  PyObject* pair = result.get();  // torch.return_types.topk: a tuple (values, indices)
  if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
    PyErr_SetString(PyExc_RuntimeError, "dimtorch.top_k(): topk did not return (values, indices)");
    return nullptr;
  }
  Ref dims(dims_replaced(x->dims, a, k_dim.get()));
  if (!dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  std::copy(x->sizes, x->sizes + tensor_ndim(x), sizes);
  sizes[a] = k;
  PyObject* feature = x->feature_dim != axis ? x->feature_dim : nullptr;
  Ref values(tensor_make(Py_NewRef(PyTuple_GET_ITEM(pair, 0)), dims.get(), sizes, x->sparse_dim, feature));
  if (!values) return nullptr;
  Ref indices(tensor_make(Py_NewRef(PyTuple_GET_ITEM(pair, 1)), dims.get(), sizes, axis, nullptr));
  if (!indices) return nullptr;
  return PyTuple_Pack(3, values.get(), indices.get(), k_dim.get());
}

// ---- reverse_sequence -------------------------------------------------------------------------

DIMTORCH_PYTHON_FALLBACK(reverse_fallback, "reverse_sequence")

/// reverse_sequence(x, *, axis, handle_dynamic_dims=True): a dim without lengths is one flip; a
/// dynamic dim whose lengths vary over dims of x is one gather, by the index
/// dimtorch._slicing._reverse_index makes from the host lengths, cached on the dim per raw sizes,
/// places of the lengths' dims and device. handle_dynamic_dims other than True goes to Python.
PyObject* f_reverse_sequence(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "axis", "handle_dynamic_dims"};
  static PyObject* tag = nullptr;
  const char* caller = "dimtorch.reverse_sequence()";
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 1, 2, v, caller) || (v[2] && v[2] != Py_True)) {
    PyErr_Clear();
    return reverse_fallback(args, nargs, kwnames);
  }
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(v[1])) return reverse_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  DimObject* d = as_dim(v[1]);
  int a = dims_index(x->dims, v[1]);
  if (a < 0) return reverse_fallback(args, nargs, kwnames);
  Ref a_obj(PyLong_FromLong(a));
  if (!a_obj) return nullptr;
  Ref raw;
  if (!dim_has_lengths(d)) {
    raw = Ref(backend::call2(backend::T.flip, x->raw, a_obj.get()));
  } else {
    signed char pos[kMaxDims + 1];
    int k = 0;
    if (!lengths_positions(d, x->dims, true, pos, &k, caller)) {
      PyErr_Clear();
      return reverse_fallback(args, nargs, kwnames);
    }
    Ref device(PyObject_GetAttr(x->raw, backend::T.s_device));
    if (!device || !interned(&tag, "reverse_index")) return nullptr;
    Ref key(layout_key(tag, device.get(), x->sizes, tensor_ndim(x), pos, k + 1));
    if (!key) return nullptr;
    Ref index(cached_on_dim(d, key.get(), [&]() -> PyObject* {
      PyObject* builder = definition("_reverse_index");
      if (!builder) return nullptr;
      return backend::call2(builder, v[0], v[1]);
    }));
    if (!index) return nullptr;
    raw = Ref(backend::call3(backend::T.gather, x->raw, a_obj.get(), index.get()));
  }
  if (!raw) return nullptr;
  return tensor_make(raw.release(), x->dims, x->sizes, x->sparse_dim, x->feature_dim);
}

// ---- pack_padded ------------------------------------------------------------------------------

DIMTORCH_PYTHON_FALLBACK(pack_fallback, "pack_padded")

/// pack_padded(x, *, dims, out_dim=None): the fast path takes `dims` leading x in their order, one
/// of them dynamic with lengths over the others (static or sized from data), and no frames beyond
/// the max length: one flatten (a view) and one index_select. The index of the valid frames
/// (dimtorch._packing._valid_index, from host lengths) and its size are cached on the dynamic
/// dim per sizes of `dims`, places of the lengths' dims and device.
PyObject* f_pack_padded(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "dims", "out_dim"};
  static PyObject* tag = nullptr;
  static PyObject* pack_name = nullptr;
  const char* caller = "dimtorch.pack_padded()";
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 1, 2, v, caller)) {
    PyErr_Clear();
    return pack_fallback(args, nargs, kwnames);
  }
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !PyTuple_CheckExact(v[1])) return pack_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  PyObject* dims = v[1];
  Py_ssize_t n = PyTuple_GET_SIZE(dims);
  Py_ssize_t nd = tensor_ndim(x);
  if (n == 0 || n > nd) return pack_fallback(args, nargs, kwnames);
  DimObject* owner = nullptr;
  for (Py_ssize_t j = 0; j < n; ++j) {
    PyObject* d = PyTuple_GET_ITEM(dims, j);
    if (d != PyTuple_GET_ITEM(x->dims, j)) return pack_fallback(args, nargs, kwnames);
    if (dim_has_lengths(as_dim(d))) {
      if (owner) return pack_fallback(args, nargs, kwnames);
      owner = as_dim(d);
      Py_ssize_t max_len = dim_max_size(owner);
      if (max_len == -2) return nullptr;
      if (max_len != x->sizes[j]) return pack_fallback(args, nargs, kwnames);
    }
  }
  signed char pos[kMaxDims + 1];
  int k = 0;
  if (!owner || !lengths_positions(owner, dims, true, pos, &k, caller)) {
    PyErr_Clear();
    return pack_fallback(args, nargs, kwnames);
  }
  Ref device(PyObject_GetAttr(x->raw, backend::T.s_device));
  if (!device || !interned(&tag, "pack_index")) return nullptr;
  Ref key(layout_key(tag, device.get(), x->sizes, n, pos, k + 1));
  if (!key) return nullptr;
  // (index, number of valid frames)
  Ref entry(cached_on_dim(owner, key.get(), [&]() -> PyObject* {
    PyObject* builder = definition("_valid_index");
    if (!builder) return nullptr;
    Ref sizes(PyList_New(n));
    if (!sizes) return nullptr;
    for (Py_ssize_t j = 0; j < n; ++j) {
      PyObject* s = PyLong_FromSsize_t(x->sizes[j]);
      if (!s) return nullptr;
      PyList_SET_ITEM(sizes.get(), j, s);
    }
    Ref index(backend::call3(builder, dims, sizes.get(), device.get()));
    if (!index) return nullptr;
    Ref shape(PyObject_GetAttr(index.get(), backend::T.s_shape));
    if (!shape) return nullptr;
    Ref total(PySequence_GetItem(shape.get(), 0));
    if (!total) return nullptr;
    return PyTuple_Pack(2, index.get(), total.get());
  }));
  if (!entry) return nullptr;
  PyObject* index = PyTuple_GET_ITEM(entry.get(), 0);
  Py_ssize_t total = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry.get(), 1));
  if (total == -1 && PyErr_Occurred()) return nullptr;
  Ref out_dim;
  if (!v[2] || v[2] == Py_None) {
    if (!interned(&pack_name, "pack")) return nullptr;
    out_dim = Ref(new_static_dim(total, pack_name));
    if (!out_dim) return nullptr;
  } else if (is_dim(v[2]) && as_dim(v[2])->size == total) {
    out_dim = Ref::borrow(v[2]);
  } else {
    return pack_fallback(args, nargs, kwnames);
  }
  Ref flat;
  if (n > 1) {
    Ref last(PyLong_FromSsize_t(n - 1));
    if (!last) return nullptr;
    flat = Ref(backend::call3(backend::T.flatten, x->raw, backend::T.zero, last.get()));
  } else {
    flat = Ref::borrow(x->raw);
  }
  if (!flat) return nullptr;
  Ref raw(backend::call3(backend::T.index_select, flat.get(), backend::T.zero, index));
  if (!raw) return nullptr;
  Ref out_dims(PyTuple_New(nd - n + 1));
  if (!out_dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  PyTuple_SET_ITEM(out_dims.get(), 0, Py_NewRef(out_dim.get()));
  sizes[0] = total;
  for (Py_ssize_t j = n; j < nd; ++j) {
    PyTuple_SET_ITEM(out_dims.get(), j - n + 1, Py_NewRef(PyTuple_GET_ITEM(x->dims, j)));
    sizes[j - n + 1] = x->sizes[j];
  }
  Ref t(tensor_make(raw.release(), out_dims.get(), sizes, x->sparse_dim, kept_feature(x, out_dims.get())));
  if (!t) return nullptr;
  return PyTuple_Pack(2, t.get(), out_dim.get());
}

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
    {"slice", FASTCALL_KW(f_slice),
     "slice(x, *, axis, start=0, end=None, step=1, size=None, out_dim=None) -> (tensor, out_dim): see "
     "dimtorch._slicing.slice."},
    {"shift_right", FASTCALL_KW(f_shift_right),
     "shift_right(x, *, axis, amount=1, pad_value=0) -> tensor: see dimtorch._slicing.shift_right."},
    {"scatter", FASTCALL_KW(f_scatter),
     "scatter(x, *, indices, indices_dim, mode='sum', fill_value=None, out_dim=None, use_mask=None) -> tensor: "
     "see dimtorch._scatter.scatter."},
    {"split", FASTCALL_KW(f_split), "split(x, *, axis, out_dims) -> list of tensors: see dimtorch._stack.split."},
    {"stack", FASTCALL_KW(f_stack),
     "stack(tensors, *, out_dim=None) -> (tensor, out_dim): see dimtorch._stack.stack."},
    {"top_k", FASTCALL_KW(f_top_k),
     "top_k(x, *, axis, k) -> (values, indices, k_dim): see dimtorch._sort.top_k."},
    {"reverse_sequence", FASTCALL_KW(f_reverse_sequence),
     "reverse_sequence(x, *, axis, handle_dynamic_dims=True) -> tensor: see dimtorch._slicing.reverse_sequence."},
    {"pack_padded", FASTCALL_KW(f_pack_padded),
     "pack_padded(x, *, dims, out_dim=None) -> (tensor, pack_dim): see dimtorch._packing.pack_padded."},
    {nullptr}};

#undef FASTCALL_KW

}  // namespace

bool export_ops_array(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
