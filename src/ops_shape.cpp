// Fast paths of shape ops composed in Python: merge_dims of adjacent static dims (one reshape),
// reshape of adjacent static dims into new static dims (one reshape),
// concat of tensors in the same layout (one torch.cat; for dynamic dims one cat and one gather by a
// cached index), constant pad of one dim (one constant_pad_nd, plus one where with a cached mask for
// a dynamic dim). Every other case (permuted dims, other modes, bad input) goes to the Python
// definition, which also owns the errors.
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

DIMTORCH_PYTHON_FALLBACK(fallback, "merge_dims")

DIMTORCH_PYTHON_FALLBACK(concat_fallback, "concat")

/* The gather index of a dynamic concat (dimtorch._concat._gather_index builds it from the host
   lengths), expanded to the output's shape and cached in the canonical out dim's cache of index
   raws under a key that starts with a str tag: the raw sizes, the places of the lengths' dims and
   the device. New reference. */
PyObject* concat_index(DimObject* canonical, PyObject* const* args, Py_ssize_t nargs, TensorObject* first,
                       int axis, PyObject* out_dims, const Py_ssize_t* out_sizes, PyObject* device,
                       const char* caller) {
  static PyObject* tag = nullptr;
  if (!tag && !(tag = PyUnicode_InternFromString("concat_index"))) return nullptr;
  signed char pos[kMaxDims + 1];
  int k = 0;
  if (!lengths_positions(canonical, first->dims, false, pos, &k, caller)) return nullptr;
  Py_ssize_t nd = tensor_ndim(first);
  Ref key(PyTuple_New(2 + nargs + nd + k));
  if (!key) return nullptr;
  Py_ssize_t n = 0;
  PyTuple_SET_ITEM(key.get(), n++, Py_NewRef(tag));
  PyTuple_SET_ITEM(key.get(), n++, Py_NewRef(device));
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    TensorObject* x = as_tensor(PyTuple_GET_ITEM(args[i], 0));
    PyTuple_SET_ITEM(key.get(), n++, PyLong_FromSsize_t(x->sizes[axis]));
  }
  for (Py_ssize_t j = 0; j < nd; ++j) PyTuple_SET_ITEM(key.get(), n++, PyLong_FromSsize_t(out_sizes[j]));
  for (int j = 0; j < k; ++j) PyTuple_SET_ITEM(key.get(), n++, PyLong_FromLong(pos[j]));
  for (Py_ssize_t j = 0; j < n; ++j)
    if (!PyTuple_GET_ITEM(key.get(), j)) return nullptr;
  if (!canonical->cache && !(canonical->cache = PyDict_New())) return nullptr;
  PyObject* hit = PyDict_GetItemWithError(canonical->cache, key.get());
  if (hit) return Py_NewRef(hit);
  if (PyErr_Occurred()) return nullptr;
  PyObject* builder = definition("_gather_index");
  if (!builder) return nullptr;
  // The lengths' dims in x's order, and the sources' concat dims and raw sizes.
  std::sort(pos, pos + k);
  Ref bdims(PyTuple_New(k));
  Ref cat_dims(PyList_New(nargs));
  Ref sizes(PyTuple_New(nargs));
  if (!bdims || !cat_dims || !sizes) return nullptr;
  for (int j = 0; j < k; ++j)
    PyTuple_SET_ITEM(bdims.get(), j, Py_NewRef(PyTuple_GET_ITEM(first->dims, pos[j])));
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    PyList_SET_ITEM(cat_dims.get(), i, Py_NewRef(PyTuple_GET_ITEM(args[i], 1)));
    PyTuple_SET_ITEM(sizes.get(), i, Py_NewRef(PyTuple_GET_ITEM(key.get(), 2 + i)));
  }
  Ref axis_obj(PyLong_FromLong(axis));
  if (!axis_obj) return nullptr;
  PyObject* call[7] = {reinterpret_cast<PyObject*>(canonical), cat_dims.get(), sizes.get(), bdims.get(),
                       out_dims, axis_obj.get(), device};
  Ref index(PyObject_Vectorcall(builder, call, 7, nullptr));
  if (!index) return nullptr;
  PyObject* expand_args[kMaxDims + 1];
  expand_args[0] = index.get();
  for (Py_ssize_t j = 0; j < nd; ++j) expand_args[j + 1] = PyTuple_GET_ITEM(key.get(), 2 + nargs + j);
  Ref expanded(PyObject_Vectorcall(backend::T.expand, expand_args, nd + 1, nullptr));
  if (!expanded) return nullptr;
  // The builder and torch may have let another thread in, which stored this key first: keep its.
  return Py_XNewRef(PyDict_SetDefault(canonical->cache, key.get(), expanded.get()));
}

/// concat((x, dim_x), (y, dim_y), ..., out_dim=None): the fast path takes tensors whose other dims
/// are the same, in the same order and sizes, and concat dims that are static (one torch.cat) or
/// have lengths (one cat with a zero frame and one gather by the cached index; out_dim not given).
PyObject* f_concat(PyObject*, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  PyObject* out_dim = nullptr;
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nkw > 1 || (nkw == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "out_dim")))
    return concat_fallback(args, nargsf, kwnames);
  if (nkw == 1 && args[nargs] != Py_None) out_dim = args[nargs];
  if (nargs < 1 || nargs > kMaxDims) return concat_fallback(args, nargsf, kwnames);
  TensorObject* first = nullptr;
  int axis = -1;
  bool dynamic = false;
  Py_ssize_t total = 0;
  Ref raws(PyTuple_New(nargs));  // a tuple: one allocation, where a list makes two
  if (!raws) return nullptr;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    PyObject* pair = args[i];
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) return concat_fallback(args, nargsf, kwnames);
    PyObject* t = PyTuple_GET_ITEM(pair, 0);
    PyObject* d = PyTuple_GET_ITEM(pair, 1);
    if (!is_tensor(t) || !as_tensor(t)->raw || !is_dim(d)) return concat_fallback(args, nargsf, kwnames);
    if (!dim_is_static(d)) {
      if (!dim_has_lengths(as_dim(d))) return concat_fallback(args, nargsf, kwnames);  // size from data
      dynamic = true;
    }
    TensorObject* x = as_tensor(t);
    int a = dims_index(x->dims, d);
    if (a < 0) return concat_fallback(args, nargsf, kwnames);
    if (!first) {
      first = x;
      axis = a;
    } else {
      if (a != axis || tensor_ndim(x) != tensor_ndim(first)) return concat_fallback(args, nargsf, kwnames);
      for (Py_ssize_t j = 0; j < tensor_ndim(x); ++j)
        if (j != a && (PyTuple_GET_ITEM(x->dims, j) != PyTuple_GET_ITEM(first->dims, j) ||
                       x->sizes[j] != first->sizes[j]))
          return concat_fallback(args, nargsf, kwnames);
    }
    total += x->sizes[a];
    PyTuple_SET_ITEM(raws.get(), i, Py_NewRef(x->raw));
  }
  // The out dim: dim_0 + dim_1 + ... by dim math (cached), or the given one when it fits.
  Ref sum = Ref::borrow(PyTuple_GET_ITEM(args[0], 1));
  for (Py_ssize_t i = 1; i < nargs; ++i) {
    sum = Ref(dim_derive(as_dim(sum.get()), DimOp::kConcat, 0, as_dim(PyTuple_GET_ITEM(args[i], 1)),
                         "dimtorch.concat()"));
    if (!sum) return nullptr;
  }
  if (out_dim && (dynamic || !is_dim(out_dim) || as_dim(out_dim)->size != total))
    return concat_fallback(args, nargsf, kwnames);  // a given dynamic out_dim: its lengths are checked there
  PyObject* out = out_dim ? out_dim : sum.get();
  Py_ssize_t n_out = dynamic ? dim_max_size(as_dim(out)) : total;
  if (n_out == -2) return nullptr;
  if (n_out <= 0 || total <= 0) return concat_fallback(args, nargsf, kwnames);
  Py_ssize_t nd = tensor_ndim(first);
  Ref out_dims(PyTuple_New(nd));
  if (!out_dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  for (Py_ssize_t j = 0; j < nd; ++j) {
    PyTuple_SET_ITEM(out_dims.get(), j, Py_NewRef(j == axis ? out : PyTuple_GET_ITEM(first->dims, j)));
    sizes[j] = j == axis ? n_out : first->sizes[j];
  }
  Ref axis_obj(PyLong_FromLong(axis));
  if (!axis_obj) return nullptr;
  PyObject* raw;
  if (!dynamic) {
    raw = backend::call2(backend::T.cat, raws.get(), axis_obj.get());
  } else {
    /* Each sequence's valid frames follow each other: one gather from the sources joined along
       the axis with one zero frame after them, where the index sends every frame beyond a
       sequence's new end. */
    Ref device(PyObject_GetAttr(first->raw, backend::T.s_device));
    if (!device) return nullptr;
    Ref index(concat_index(as_dim(out), args, nargs, first, axis, out_dims.get(), sizes, device.get(),
                           "dimtorch.concat()"));
    if (!index) {
      if (!PyErr_ExceptionMatches(PyExc_ValueError)) return nullptr;
      PyErr_Clear();  // lengths over a dim the tensors lack: the Python definition says so
      return concat_fallback(args, nargsf, kwnames);
    }
    Ref zero_shape(PyTuple_New(nd));
    if (!zero_shape) return nullptr;
    for (Py_ssize_t j = 0; j < nd; ++j) {
      PyObject* size = PyLong_FromSsize_t(j == axis ? 1 : first->sizes[j]);
      if (!size) return nullptr;
      PyTuple_SET_ITEM(zero_shape.get(), j, size);
    }
    Ref zero(backend::call2(backend::T.new_zeros, first->raw, zero_shape.get()));
    if (!zero) return nullptr;
    Ref parts(PyTuple_New(nargs + 1));
    if (!parts) return nullptr;
    for (Py_ssize_t i = 0; i < nargs; ++i)
      PyTuple_SET_ITEM(parts.get(), i, Py_NewRef(PyTuple_GET_ITEM(raws.get(), i)));
    PyTuple_SET_ITEM(parts.get(), nargs, zero.release());
    Ref joined(backend::call2(backend::T.cat, parts.get(), axis_obj.get()));
    if (!joined) return nullptr;
    raw = backend::call3(backend::T.gather, joined.get(), axis_obj.get(), index.get());
  }
  if (!raw) return nullptr;
  PyObject* concat_dim = PyTuple_GET_ITEM(args[0], 1);
  PyObject* feature = first->feature_dim && first->feature_dim != concat_dim ? first->feature_dim : nullptr;
  Ref t(tensor_make(raw, out_dims.get(), sizes, first->sparse_dim, feature));
  if (!t) return nullptr;
  return PyTuple_Pack(2, t.get(), out);
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
    total *= as_dim(d)->size;
  }
  return merged_dim(dims, total);
}

PyObject* f_merge_dims(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "dims", "out_dim"};
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 1, 2, v, "dimtorch.merge_dims()") ||
      !is_tensor(v[0]) || !as_tensor(v[0])->raw || !PyTuple_Check(v[1])) {
    PyErr_Clear();
    return fallback(args, nargs, kwnames);
  }
  TensorObject* x = as_tensor(v[0]);
  PyObject* dims = v[1];
  PyObject* out_dim = v[2] && v[2] != Py_None ? v[2] : nullptr;
  Py_ssize_t n = PyTuple_GET_SIZE(dims), nd = tensor_ndim(x);
  if (n == 0 || n > nd) return fallback(args, nargs, kwnames);
  // Fast path: static dims, adjacent in x and in the given order; any doubt goes to Python.
  int first = is_dim(PyTuple_GET_ITEM(dims, 0)) ? dims_index(x->dims, PyTuple_GET_ITEM(dims, 0)) : -1;
  if (first < 0 || first + n > nd) return fallback(args, nargs, kwnames);
  Py_ssize_t total = 1;
  for (Py_ssize_t j = 0; j < n; ++j) {
    PyObject* d = PyTuple_GET_ITEM(dims, j);
    if (PyTuple_GET_ITEM(x->dims, first + j) != d || !dim_is_static(d))
      return fallback(args, nargs, kwnames);
    total *= x->sizes[first + j];
  }
  // A dim left in x whose lengths vary along a merged dim: the Python definition refuses that.
  for (Py_ssize_t i = 0; i < nd; ++i) {
    if (i >= first && i < first + n) continue;
    DimObject* d = as_dim(PyTuple_GET_ITEM(x->dims, i));
    if (!dim_has_lengths(d)) continue;
    PyObject* lengths = dim_dyn_size(d);
    if (!lengths) return PyErr_Occurred() ? nullptr : fallback(args, nargs, kwnames);
    for (Py_ssize_t j = 0; j < n; ++j)
      if (dims_index(as_tensor(lengths)->dims, PyTuple_GET_ITEM(dims, j)) >= 0)
        return fallback(args, nargs, kwnames);
  }
  Ref out;
  if (out_dim) {
    if (!is_dim(out_dim) || as_dim(out_dim)->size != total || dims_index(x->dims, out_dim) >= 0)
      return fallback(args, nargs, kwnames);
    out = Ref::borrow(out_dim);
  } else {
    out = Ref(merged_dim(dims, total));
    if (!out) return nullptr;
    if (dims_index(x->dims, out.get()) >= 0) return fallback(args, nargs, kwnames);
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
    call[k + 1] = PyLong_FromSsize_t(sizes[k]);
    ++k;
  }
  // reshape(a, b, c): the sizes as separate ints, which torch parses faster than a tuple.
  PyObject* raw = PyObject_Vectorcall(backend::T.reshape, call, out_nd + 1, nullptr);
  for (Py_ssize_t k = 1; k <= out_nd; ++k) Py_XDECREF(call[k]);
  if (!raw) return nullptr;
  PyObject* feature =
      x->feature_dim && dims_index(out_dims.get(), x->feature_dim) >= 0 ? x->feature_dim : nullptr;
  Ref t(tensor_make(raw, out_dims.get(), sizes, x->sparse_dim, feature));
  if (!t) return nullptr;
  return PyTuple_Pack(2, t.get(), out.get());
}

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
    total *= x->sizes[first + j];
  }
  Py_ssize_t out_total = 1;
  for (Py_ssize_t j = 0; j < n_out; ++j) {
    PyObject* d = PyTuple_GET_ITEM(out_dims, j);
    if (!is_dim(d) || !dim_is_static(d) || dims_index(x->dims, d) >= 0) return reshape_fallback(args, nargs, kwnames);
    for (Py_ssize_t k = 0; k < j; ++k)
      if (PyTuple_GET_ITEM(out_dims, k) == d) return reshape_fallback(args, nargs, kwnames);
    out_total *= as_dim(d)->size;
  }
  if (out_total != total) return reshape_fallback(args, nargs, kwnames);
  // A dim left in x whose lengths vary along a reshaped dim: the Python definition refuses that.
  for (Py_ssize_t i = 0; i < nd; ++i) {
    if (i >= first && i < first + n_in) continue;
    DimObject* d = as_dim(PyTuple_GET_ITEM(x->dims, i));
    if (!dim_has_lengths(d)) continue;
    PyObject* lengths = dim_dyn_size(d);
    if (!lengths) return PyErr_Occurred() ? nullptr : reshape_fallback(args, nargs, kwnames);
    for (Py_ssize_t j = 0; j < n_in; ++j)
      if (dims_index(as_tensor(lengths)->dims, PyTuple_GET_ITEM(in_dims, j)) >= 0)
        return reshape_fallback(args, nargs, kwnames);
  }
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


DIMTORCH_PYTHON_FALLBACK(pad_fallback, "pad")

/// A padding amount: an int >= 0 (not a bool).
bool pad_amount(PyObject* o, Py_ssize_t* out) {
  if (!PyLong_CheckExact(o)) return false;
  *out = PyLong_AsSsize_t(o);
  if (*out == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  return *out >= 0;
}

/// pad(x, *, axes, padding, value=0, mode="constant"): the fast path is constant padding of one
/// static or dynamic dim by (left, right), not both 0, with a Python number as value.
PyObject* f_pad(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "axes", "padding", "value", "mode"};
  PyObject* v[5];
  if (!parse_args(args, nargs, kwnames, names, 5, 1, 3, v, "dimtorch.pad()")) {
    PyErr_Clear();
    return pad_fallback(args, nargs, kwnames);
  }
  PyObject* value = v[3] ? v[3] : backend::T.zero;
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !(PyFloat_CheckExact(value) || PyLong_CheckExact(value)) ||
      (v[4] && (!PyUnicode_Check(v[4]) || PyUnicode_CompareWithASCIIString(v[4], "constant") != 0)))
    return pad_fallback(args, nargs, kwnames);
  PyObject* d = v[1];
  if (PyTuple_Check(d) && PyTuple_GET_SIZE(d) == 1) d = PyTuple_GET_ITEM(d, 0);
  PyObject* padding = v[2];
  if (PyTuple_Check(padding) && PyTuple_GET_SIZE(padding) == 1) padding = PyTuple_GET_ITEM(padding, 0);
  Py_ssize_t left, right;
  if (!is_dim(d) || !PyTuple_Check(padding) || PyTuple_GET_SIZE(padding) != 2 ||
      !pad_amount(PyTuple_GET_ITEM(padding, 0), &left) || !pad_amount(PyTuple_GET_ITEM(padding, 1), &right) ||
      left + right == 0)
    return pad_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  int a = dims_index(x->dims, d);
  DimObject* dim = as_dim(d);
  bool dynamic = dim_has_lengths(dim);
  if (a < 0 || (!dynamic && dim->size < 0)) return pad_fallback(args, nargs, kwnames);
  Py_ssize_t nd = tensor_ndim(x);
  signed char pos[kMaxDims + 1];
  int k = 0;
  if (dynamic && !lengths_positions(dim, x->dims, true, pos, &k, "dimtorch.pad()")) {
    PyErr_Clear();  // lengths over a dim x lacks: the Python definition says so
    return pad_fallback(args, nargs, kwnames);
  }
  // The out dim by dim math (cached on the dim): the same object as left + dim + right.
  Ref out_dim(dim_derive(dim, DimOp::kAdd, left + right, nullptr, "dimtorch.pad()"));
  if (!out_dim) return nullptr;
  Py_ssize_t n_out = dynamic ? dim_max_size(as_dim(out_dim.get())) : dim->size + left + right;
  if (n_out < 0) return n_out == -2 ? nullptr : pad_fallback(args, nargs, kwnames);
  /* constant_pad_nd takes (left, right) pairs from the last axis. For a dynamic dim the right
     amount makes the axis n_out long: negative where x's raw axis is longer than its longest
     sequence (constant_pad_nd crops then). */
  Py_ssize_t raw_right = dynamic ? n_out - left - x->sizes[a] : right;
  Py_ssize_t after = nd - 1 - a;
  Ref pad_list(PyTuple_New(2 * after + 2));
  if (!pad_list) return nullptr;
  for (Py_ssize_t j = 0; j < 2 * after; ++j) PyTuple_SET_ITEM(pad_list.get(), j, Py_NewRef(backend::T.zero));
  PyObject* l_obj = PyLong_FromSsize_t(left);
  PyObject* r_obj = PyLong_FromSsize_t(raw_right);
  if (!l_obj || !r_obj) {
    Py_XDECREF(l_obj);
    Py_XDECREF(r_obj);
    return nullptr;
  }
  PyTuple_SET_ITEM(pad_list.get(), 2 * after, l_obj);
  PyTuple_SET_ITEM(pad_list.get(), 2 * after + 1, r_obj);
  Ref raw(backend::call3(backend::T.constant_pad_nd, x->raw, pad_list.get(), value));
  if (!raw) return nullptr;
  if (dynamic) {
    /* F.pad put `value` in the left frames; the frames after each sequence's own end (x's padding
       moved right, and the right padding) are where the mask of dim + left is False. That mask
       is cached on the derived dim per layout and device: one where per call. */
    Ref shifted(dim_derive(dim, DimOp::kAdd, left, nullptr, "dimtorch.pad()"));
    if (!shifted) return nullptr;
    Ref device(PyObject_GetAttr(raw.get(), backend::T.s_device));
    if (!device) return nullptr;
    Ref mask(dim_cached_raw(as_dim(shifted.get()), MaskKind::kMask, pos, static_cast<int>(nd), n_out,
                            device.get()));
    if (!mask) return nullptr;
    raw = Ref(backend::call3(backend::T.where, mask.get(), raw.get(), value));
    if (!raw) return nullptr;
  }
  Ref out_dims(PyTuple_New(nd));
  if (!out_dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  for (Py_ssize_t j = 0; j < nd; ++j) {
    PyTuple_SET_ITEM(out_dims.get(), j, Py_NewRef(j == a ? out_dim.get() : PyTuple_GET_ITEM(x->dims, j)));
    sizes[j] = j == a ? n_out : x->sizes[j];
  }
  PyObject* feature = x->feature_dim != d ? x->feature_dim : nullptr;
  Ref t(tensor_make(raw.release(), out_dims.get(), sizes, x->sparse_dim, feature));
  if (!t) return nullptr;
  Ref out_tuple(PyTuple_Pack(1, out_dim.get()));
  if (!out_tuple) return nullptr;
  return PyTuple_Pack(2, t.get(), out_tuple.get());
}

PyMethodDef kFunctions[] = {
    {"_merged_dim", DIMTORCH_OP(f_merged_dim),
     METH_FASTCALL, "_merged_dim(dims) -> the Dim that merging these static dims gives (cached on the first)."},
    {"gather", DIMTORCH_OP(f_gather),
     METH_FASTCALL | METH_KEYWORDS,
     "gather(x, *, indices, axis, clip_to_valid=False): see dimtorch._gather.gather; an embedding lookup (x over "
     "(axis, feature), int64 indices sharing no dim with x) is one F.embedding here."},
    {"merge_dims", DIMTORCH_OP(f_merge_dims),
     METH_FASTCALL | METH_KEYWORDS,
     "merge_dims(x, *, dims, out_dim=None) -> (tensor, out_dim): merges `dims` (the first varies "
     "slowest) into one dim at the place of the first. Adjacent static dims in order are one "
     "reshape here; other cases are dimtorch._shape_ops.merge_dims."},
    {"reshape", DIMTORCH_OP(f_reshape),
     METH_FASTCALL | METH_KEYWORDS,
     "reshape(source, in_dims, out_dims): see dimtorch._reshape.reshape; static in_dims adjacent in order "
     "into static out_dims are one reshape here."},
    {"concat", DIMTORCH_OP(f_concat),
     METH_FASTCALL | METH_KEYWORDS,
     "concat((x, dim_x), (y, dim_y), ..., out_dim=None) -> (tensor, out_dim): see "
     "dimtorch._concat.concat; static concat dims of tensors in the same layout are one torch.cat "
     "here."},
    {"pad", DIMTORCH_OP(f_pad),
     METH_FASTCALL | METH_KEYWORDS,
     "pad(x, *, axes, padding, value=0, mode='constant') -> (tensor, out_dims): see "
     "dimtorch._pad.pad; constant padding of one dim is one constant_pad_nd here (and one where "
     "with the cached mask for a dynamic dim)."},
    {nullptr}};

}  // namespace

bool export_ops_shape(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
