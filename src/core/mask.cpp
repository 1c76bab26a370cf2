// Device lengths and sequence masks of dynamic dims: a small per-dim cache, so that each is made
// once per device and layout (the first use of a new dim, i.e. once per batch, builds it here).
#include "core/mask.h"
#include "core/message_dims.h"

#include "core/definitions.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/args.h"
#include "core/backend.h"
#include "core/functions.h"
#include "core/tensor.h"
#include "core/exports.h"

namespace dimtorch {

struct MaskEntry {
  MaskKind kind;
  int ndim;
  int npos;
  signed char pos[kMaxDims + 1];
  Py_ssize_t size;
  PyObject* device;  // strong ref
  PyObject* raw;     // strong ref
  /* Weak ref to the Tensor Dim.get_mask last made of this raw (kMask), or NULL: get_mask gives the
     same Tensor while it lives. Weak, as its dims hold the dim whose cache this is. */
  PyObject* tensor_ref;
};

struct MaskCache {
  std::vector<MaskEntry> entries;
  size_t next_evict = 0;
};

namespace {

constexpr size_t kMaxEntries = 16;  // layouts seen per dim are few; old ones are evicted in turn


void release(MaskEntry& e) {
  Py_CLEAR(e.device);
  Py_CLEAR(e.raw);
  Py_CLEAR(e.tensor_ref);
}

}  // namespace

void mask_cache_free(DimObject* d) {
  MaskCache* c = d->masks;
  if (!c) return;
  d->masks = nullptr;
  for (auto& e : c->entries) release(e);
  delete c;
}

bool lengths_positions(DimObject* d, PyObject* dims, bool with_self, signed char* pos, int* k,
                       const char* caller) {
  PyObject* lengths = dim_dyn_size(d);
  if (!lengths) {
    if (!PyErr_Occurred())
      PyErr_Format(PyExc_ValueError, "%s: dim %s has no lengths, so it has no mask", caller,
                   describe_dim(reinterpret_cast<PyObject*>(d)).c_str());
    return false;
  }
  PyObject* ldims = as_tensor(lengths)->dims;
  int n = static_cast<int>(PyTuple_GET_SIZE(ldims));
  for (int i = 0; i < n; ++i) {
    int p = dims_index(dims, PyTuple_GET_ITEM(ldims, i));
    if (p < 0) {
      MessageDims scope{reinterpret_cast<PyObject*>(d), PyTuple_GET_ITEM(ldims, i), dims};
      PyErr_Format(PyExc_ValueError,
                   "%s: the lengths of dim %s are over %s, which the tensor lacks (dims: %s); add "
                   "that dim (e.g. by broadcasting) first%s",
                   caller, describe_dim(reinterpret_cast<PyObject*>(d)).c_str(),
                   describe_dim(PyTuple_GET_ITEM(ldims, i)).c_str(),
                   describe_dims(dims, nullptr).c_str(), scope.namesakes_note().c_str());
      return false;
    }
    pos[i] = static_cast<signed char>(p);
  }
  if (with_self) {
    int p = dims_index(dims, reinterpret_cast<PyObject*>(d));
    if (p < 0) {
      MessageDims scope{reinterpret_cast<PyObject*>(d), dims};
      PyErr_Format(PyExc_ValueError, "%s: dim %s is not in the tensor (dims: %s)%s", caller,
                   describe_dim(reinterpret_cast<PyObject*>(d)).c_str(),
                   describe_dims(dims, nullptr).c_str(), scope.namesakes_note().c_str());
      return false;
    }
    pos[n] = static_cast<signed char>(p);
  }
  *k = n;
  return true;
}

namespace {

/// raw.to(device, non_blocking=True): from host memory this never waits for the device.
PyObject* to_device(PyObject* raw, PyObject* device) {
  static PyObject* kw = Py_BuildValue("(s)", "non_blocking");
  if (!kw) return nullptr;
  PyObject* args[3] = {raw, device, Py_True};
  return PyObject_Vectorcall(backend::T.to, args, 2, kw);
}

/// torch.arange(size, device=device).
PyObject* arange(Py_ssize_t size, PyObject* device) {
  static PyObject* kw = Py_BuildValue("(s)", "device");
  if (!kw) return nullptr;
  Ref n(PyLong_FromSsize_t(size));
  if (!n) return nullptr;
  PyObject* args[2] = {n.get(), device};
  return PyObject_Vectorcall(backend::T.arange, args, 1, kw);
}

/// The device raw of one cache entry (see dim_cached_raw), made on the entry's first use: the
/// lengths copied to the device once (every other layout starts from that copy), their axes put at
/// `pos` with size 1 elsewhere; a count is clamped to >= 1 as float32 (dividing a float sum by an
/// int64 count costs torch a slow mixed-type kernel); a mask compares positions with the lengths.
PyObject* build_raw(DimObject* d, TensorObject* lengths, MaskKind kind, const signed char* pos,
                    int ndim, Py_ssize_t size, PyObject* device) {
  using backend::T;
  int k = static_cast<int>(tensor_ndim(lengths));
  Ref raw = Ref::borrow(lengths->raw);
  Ref raw_device(PyObject_GetAttr(raw.get(), T.s_device));
  if (!raw_device) return nullptr;
  int same = PyObject_RichCompareBool(raw_device.get(), device, Py_EQ);
  if (same < 0) return nullptr;
  if (!same) {
    // The lengths in their own layout are the device copy itself; other layouts start from it.
    bool own_layout = kind == MaskKind::kLengths && ndim == k;
    for (int i = 0; own_layout && i < k; ++i) own_layout = pos[i] == i;
    if (own_layout) return to_device(raw.get(), device);
    signed char identity[kMaxDims];
    for (int i = 0; i < k; ++i) identity[i] = static_cast<signed char>(i);
    raw = Ref(dim_cached_raw(d, MaskKind::kLengths, identity, k, 0, device));
    if (!raw) return nullptr;
  }
  int order[kMaxDims];
  for (int i = 0; i < k; ++i) order[i] = i;
  std::sort(order, order + k, [pos](int a, int b) { return pos[a] < pos[b]; });
  raw = Ref(backend::permute_order(raw.get(), order, k));
  if (!raw) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  for (int i = 0; i < ndim; ++i) sizes[i] = 1;
  for (int i = 0; i < k; ++i) sizes[pos[i]] = lengths->sizes[i];
  Ref shape(size_tuple(sizes, ndim));
  if (!shape) return nullptr;
  raw = Ref(backend::call2(T.reshape, raw.get(), shape.get()));
  if (!raw) return nullptr;
  if (kind == MaskKind::kLengths) return raw.release();
  if (kind == MaskKind::kCount) {
    Ref one(PyLong_FromLong(1));
    Ref clamped(backend::call2(T.clamp_min, raw.get(), one.get()));
    if (!clamped) return nullptr;
    return backend::call2(T.to, clamped.get(), T.float32);
  }
  Ref frames(arange(size, device));
  if (!frames) return nullptr;
  for (int i = 0; i < ndim; ++i) sizes[i] = i == pos[k] ? size : 1;
  Ref frame_shape(size_tuple(sizes, ndim));
  if (!frame_shape) return nullptr;
  frames = Ref(backend::call2(T.view, frames.get(), frame_shape.get()));
  if (!frames) return nullptr;
  return PyObject_RichCompare(frames.get(), raw.get(), Py_LT);
}

}  // namespace

namespace {

/// The cached raw for this layout and device (new reference); NULL without an error when there
/// is none. Index-based: comparing devices may run code that lets another thread change the cache.
PyObject* find_raw(DimObject* d, MaskKind kind, const signed char* pos, int npos, int ndim,
                   Py_ssize_t size, PyObject* device) {
  for (size_t i = 0; d->masks && i < d->masks->entries.size(); ++i) {
    const MaskEntry& e = d->masks->entries[i];
    if (e.kind != kind || e.ndim != ndim || e.size != size || e.npos != npos ||
        std::memcmp(e.pos, pos, npos) != 0)
      continue;
    if (e.device == device) return Py_NewRef(e.raw);
    Ref entry_device = Ref::borrow(e.device), raw = Ref::borrow(e.raw);
    int same = PyObject_RichCompareBool(entry_device.get(), device, Py_EQ);
    if (same < 0) return nullptr;
    if (same) return raw.release();
  }
  return nullptr;
}

}  // namespace

PyObject* dim_cached_raw(DimObject* d, MaskKind kind, const signed char* pos, int ndim,
                         Py_ssize_t size, PyObject* device) {
  PyObject* lengths = dim_dyn_size(d);
  if (!lengths) {
    if (!PyErr_Occurred())
      PyErr_Format(PyExc_ValueError, "dimtorch: dim %s has no lengths",
                   describe_dim(reinterpret_cast<PyObject*>(d)).c_str());
    return nullptr;
  }
  int npos = static_cast<int>(tensor_ndim(as_tensor(lengths))) + (kind == MaskKind::kMask ? 1 : 0);
  if (ndim > kMaxDims || npos > ndim) {  // (the layouts' arrays hold kMaxDims; every position is an axis)
    PyErr_Format(PyExc_ValueError, "dimtorch: at most %d dims are supported, the %s of dim %s would have %d",
                 kMaxDims, kind == MaskKind::kMask ? "mask" : "lengths",
                 describe_dim(reinterpret_cast<PyObject*>(d)).c_str(), npos > ndim ? npos : ndim);
    return nullptr;
  }
  if (kind != MaskKind::kMask) size = -1;
  PyObject* hit = find_raw(d, kind, pos, npos, ndim, size, device);
  if (hit || PyErr_Occurred()) return hit;
  Ref raw(build_raw(d, as_tensor(lengths), kind, pos, ndim, size, device));
  if (!raw) return nullptr;
  /* torch let other threads in while it built the raw: one of them may have cached the same
     entry meanwhile, which then wins (one entry per layout, the same raw for every caller). */
  hit = find_raw(d, kind, pos, npos, ndim, size, device);
  if (hit || PyErr_Occurred()) return hit;
  MaskEntry e{kind, ndim, npos, {}, size, Py_NewRef(device), Py_NewRef(raw.get()), nullptr};
  std::memcpy(e.pos, pos, npos);
  MaskEntry evicted{};
  try {
    if (!d->masks) d->masks = new MaskCache();
    MaskCache* c = d->masks;
    if (c->entries.size() < kMaxEntries) {
      c->entries.push_back(e);
    } else {
      evicted = c->entries[c->next_evict];
      c->entries[c->next_evict] = e;
      c->next_evict = (c->next_evict + 1) % kMaxEntries;
    }
  } catch (const std::bad_alloc&) {
    release(e);
    return PyErr_NoMemory();
  }
  release(evicted);  // may run code (a tensor's death): only once the cache is consistent
  return raw.release();
}

namespace {

/// The cache entry holding `raw` (compared by identity), or NULL.
MaskEntry* entry_of_raw(DimObject* d, PyObject* raw) {
  if (!d->masks) return nullptr;
  for (MaskEntry& e : d->masks->entries)
    if (e.raw == raw) return &e;
  return nullptr;
}

}  // namespace

PyObject* dim_cached_mask_tensor(DimObject* d, const signed char* pos, int ndim, Py_ssize_t size,
                                 PyObject* device, PyObject* order, const Py_ssize_t* sizes) {
  Ref raw(dim_cached_raw(d, MaskKind::kMask, pos, ndim, size, device));
  if (!raw) return nullptr;
  MaskEntry* e = entry_of_raw(d, raw.get());
  if (e && e->tensor_ref) {
    PyObject* t = PyWeakref_GET_OBJECT(e->tensor_ref);
    if (t != Py_None && Py_REFCNT(t) > 0 && is_tensor(t) && same_dims(as_tensor(t)->dims, order))
      return Py_NewRef(t);
  }
  PyObject* r = raw.get();
  PyObject* t = tensor_make(raw.release(), order, sizes, nullptr, nullptr);
  if (!t) return nullptr;
  tensor_freeze(t);  // handed out more than once: nobody may change it
  PyObject* w = PyWeakref_NewRef(t, nullptr);
  if (!w) {
    Py_DECREF(t);
    return nullptr;
  }
  e = entry_of_raw(d, r);  // (found again: making the Tensor may have run code that changed the cache)
  if (e) Py_XSETREF(e->tensor_ref, w);
  else Py_DECREF(w);
  return t;
}

bool masked_by_reduction(TensorObject* x, int i, const bool* reduced) {
  DimObject* d = as_dim(PyTuple_GET_ITEM(x->dims, i));
  if (!dim_has_lengths(d)) return false;
  if (reduced[i]) return true;
  PyObject* lengths = dim_dyn_size(d);
  if (!lengths) {
    PyErr_Clear();
    return false;
  }
  PyObject* ldims = as_tensor(lengths)->dims;
  for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(ldims); ++j) {
    int k = dims_index(x->dims, PyTuple_GET_ITEM(ldims, j));
    if (k >= 0 && reduced[k]) return true;
  }
  return false;
}

PyObject* mask_for(TensorObject* x, const int* axes, int n, PyObject* device, const char* caller) {
  Ref mask;
  for (int j = 0; j < n; ++j) {
    DimObject* d = as_dim(PyTuple_GET_ITEM(x->dims, axes[j]));
    signed char pos[kMaxDims + 1];
    int k;
    if (!lengths_positions(d, x->dims, true, pos, &k, caller)) return nullptr;
    Ref m(dim_cached_raw(d, MaskKind::kMask, pos, static_cast<int>(tensor_ndim(x)),
                         x->sizes[axes[j]], device));
    if (!m) return nullptr;
    mask = mask ? Ref(PyNumber_And(mask.get(), m.get())) : std::move(m);
    if (!mask) return nullptr;
  }
  return mask.release();
}

PyObject* masked_raw(TensorObject* x, const int* axes, int n, PyObject* fill, PyObject** mask_out,
                     const char* caller) {
  if (n == 0) {
    if (mask_out) *mask_out = nullptr;
    return Py_NewRef(x->raw);
  }
  Ref device(PyObject_GetAttr(x->raw, backend::T.s_device));
  if (!device) return nullptr;
  Ref mask(mask_for(x, axes, n, device.get(), caller));
  if (!mask) return nullptr;
  PyObject* r = backend::call3(backend::T.where, mask.get(), x->raw, fill);
  if (r && mask_out) *mask_out = mask.release();
  return r;
}

PyObject* tensor_copy_masked(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                             PyObject* kwnames) {
  static const char* caller = "dimtorch.Tensor.copy_masked()";
  static const char* const names[] = {"value", "dims"};
  PyObject* v[2];
  if (!is_tensor(self)) {
    PyErr_SetString(PyExc_AttributeError, "dimtorch.Tensor: not initialized");
    return nullptr;
  }
  if (is_traced_tensor(self) || any_traced(args, nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0))) {
    return call_method_definition("Tensor.copy_masked", self, args, nargs, kwnames);
  }
  if (!parse_args(args, nargs, kwnames, names, 2, 2, 1, v, caller)) return nullptr;
  TensorObject* x = as_tensor(self);
  if (!x->raw) {
    PyErr_Format(PyExc_RuntimeError, "%s: raw was cleared", caller);
    return nullptr;
  }
  if (!is_python_scalar(v[0]) && !PyFloat_Check(v[0]) && !PyLong_Check(v[0])) {
    PyErr_Format(PyExc_TypeError, "%s: value must be a Python number, got %.80s", caller,
                 Py_TYPE(v[0])->tp_name);
    return nullptr;
  }
  int axes[kMaxDims];
  int n = 0;
  if (v[1] && v[1] != Py_None) {
    Ref dims(dims_arg_to_tuple(v[1], caller, "dims"));
    if (!dims) return nullptr;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(dims.get()); ++j) {
      PyObject* d = PyTuple_GET_ITEM(dims.get(), j);
      int i = dims_index(x->dims, d);
      if (i < 0) {
        MessageDims scope{d, x->dims};
        PyErr_Format(PyExc_ValueError, "%s: dim %s is not in the tensor (dims: %s)%s", caller,
                     describe_dim(d).c_str(), describe_dims(x->dims, x->sizes).c_str(),
                     scope.namesakes_note().c_str());
        return nullptr;
      }
      if (!dim_has_lengths(as_dim(d))) continue;  // static dims have no padding
      if (std::find(axes, axes + n, i) != axes + n) continue;  // given twice: masked once (axes holds kMaxDims)
      axes[n++] = i;
    }
  } else {
    for (int i = 0; i < tensor_ndim(x); ++i)
      if (dim_has_lengths(as_dim(PyTuple_GET_ITEM(x->dims, i)))) axes[n++] = i;
  }
  PyObject* raw = masked_raw(x, axes, n, v[0], nullptr, caller);
  if (!raw) {
    // A dim whose lengths are over a dim the tensor lacks: the definition skips it, as RETURNN does
    // (and raises what else is wrong). Only on this failure path: the common call pays nothing.
    if (PyErr_ExceptionMatches(PyExc_ValueError)) {
      PyErr_Clear();
      return call_method_definition("Tensor.copy_masked", self, args, nargs, kwnames);
    }
    return backend::name_error(caller);  // e.g. a value out of the dtype's range
  }
  return tensor_make(raw, x->dims, x->sizes, x->sparse_dim, x->feature_dim);
}

namespace {

/* While make_fx/torch.export trace, a symbolic size or a dim whose lengths are traced: the raw is built
   in the graph by the definition (dimtorch._core.in_graph.dim_cached_raw), nothing cached; converting
   the SymInt here would fix the traced size in the graph. Eagerly: one exact-int check. */
bool cached_raw_in_graph(PyObject* args) {
  if (PyTuple_GET_SIZE(args) != 6 || !is_dim(PyTuple_GET_ITEM(args, 1))) return false;
  PyObject* size = PyTuple_GET_ITEM(args, 4);
  if (!PyLong_CheckExact(size) && backend::is_symint(size)) return true;
  DimObject* d = as_dim(PyTuple_GET_ITEM(args, 1));
  return d->dyn_size ? is_traced_tensor(d->dyn_size) : dim_is_traced(d);
}

PyObject* f_dim_cached_raw(PyObject*, PyObject* args) {
  if (cached_raw_in_graph(args))
    return call_definition("_dim_cached_raw", &PyTuple_GET_ITEM(args, 0), 6, nullptr);
  int kind, ndim;
  Py_ssize_t size;
  PyObject *dim, *pos_seq, *device;
  if (!PyArg_ParseTuple(args, "iO!OinO:_dim_cached_raw", &kind, &DimType, &dim, &pos_seq, &ndim,
                        &size, &device))
    return nullptr;
  Ref pos_t(PySequence_Tuple(pos_seq));
  if (!pos_t) return nullptr;
  Py_ssize_t n = PyTuple_GET_SIZE(pos_t.get());
  if (n > kMaxDims + 1 || ndim > kMaxDims || ndim < 0 || kind < 0 || kind > 2) {
    PyErr_SetString(PyExc_ValueError, "dimtorch._dim_cached_raw(): bad layout");
    return nullptr;
  }
  signed char pos[kMaxDims + 1];
  for (Py_ssize_t i = 0; i < n; ++i) {
    long p = PyLong_AsLong(PyTuple_GET_ITEM(pos_t.get(), i));
    if (p == -1 && PyErr_Occurred()) return nullptr;
    if (p < 0 || p >= ndim) {
      PyErr_SetString(PyExc_ValueError, "dimtorch._dim_cached_raw(): axis out of range");
      return nullptr;
    }
    pos[i] = static_cast<signed char>(p);
  }
  // One position per axis of the lengths (and the dim's own for a mask): dim_cached_raw reads that many.
  PyObject* lengths = dim_dyn_size(as_dim(dim));
  if (lengths && n != tensor_ndim(as_tensor(lengths)) + (kind == 0 ? 1 : 0)) {
    PyErr_SetString(PyExc_ValueError, "dimtorch._dim_cached_raw(): one position per axis of the lengths is needed");
    return nullptr;
  }
  if (!lengths && PyErr_Occurred()) return nullptr;
  return dim_cached_raw(as_dim(dim), static_cast<MaskKind>(kind), pos, ndim, size, device);
}

/// _dim_cached_mask(dim, pos, order, device): Dim.get_mask's Tensor over `order` (a tuple holding
/// the lengths' dims and dim, whose axes in it are `pos`), the same while it lives.
PyObject* f_dim_cached_mask(PyObject*, PyObject* args) {
  PyObject *dim, *pos_seq, *order, *device;
  if (!PyArg_ParseTuple(args, "O!OO!O:_dim_cached_mask", &DimType, &dim, &pos_seq, &PyTuple_Type, &order,
                        &device))
    return nullptr;
  DimObject* d = as_dim(dim);
  PyObject* lengths = dim_dyn_size(d);
  if (!lengths) {
    if (!PyErr_Occurred())
      PyErr_Format(PyExc_ValueError, "dimtorch._dim_cached_mask(): dim %s has no lengths", describe_dim(dim).c_str());
    return nullptr;
  }
  TensorObject* lt = as_tensor(lengths);
  Py_ssize_t n = PyTuple_GET_SIZE(order), k = tensor_ndim(lt);
  Ref pos_t(PySequence_Tuple(pos_seq));
  if (!pos_t) return nullptr;
  if (n > kMaxDims || PyTuple_GET_SIZE(pos_t.get()) != k + 1 || n != k + 1) {
    PyErr_SetString(PyExc_ValueError, "dimtorch._dim_cached_mask(): order must hold the lengths' dims and the dim");
    return nullptr;
  }
  Py_ssize_t max_len = dim_max_size(d);
  if (max_len < 0) return nullptr;  // (a dim with lengths has a max, or an error is set)
  signed char pos[kMaxDims + 1];
  Py_ssize_t sizes[kMaxDims + 1];
  for (Py_ssize_t i = 0; i <= k; ++i) {
    long p = PyLong_AsLong(PyTuple_GET_ITEM(pos_t.get(), i));
    if (p == -1 && PyErr_Occurred()) return nullptr;
    PyObject* expected = i < k ? PyTuple_GET_ITEM(lt->dims, i) : dim;
    if (p < 0 || p >= n || PyTuple_GET_ITEM(order, p) != expected) {
      PyErr_SetString(PyExc_ValueError, "dimtorch._dim_cached_mask(): bad positions");
      return nullptr;
    }
    pos[i] = static_cast<signed char>(p);
    sizes[p] = i < k ? lt->sizes[i] : max_len;
  }
  return dim_cached_mask_tensor(d, pos, static_cast<int>(n), max_len, device, order, sizes);
}

PyMethodDef kFunctions[] = {
    {"_dim_cached_mask", DIMTORCH_OP(f_dim_cached_mask), METH_VARARGS,
     "_dim_cached_mask(dim, pos, order, device): Dim.get_mask's Tensor over `order`, cached (the same "
     "Tensor while it lives)."},
    {"_dim_cached_raw", DIMTORCH_OP(f_dim_cached_raw), METH_VARARGS,
     "_dim_cached_raw(kind, dim, pos, ndim, size, device): cached mask (kind 0), clamped "
     "lengths (kind 1) or lengths (kind 2) raw of a dynamic dim; see src/core/mask.h."},
    {nullptr}};

}  // namespace

bool export_mask(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
