// Device lengths and sequence masks of dynamic dims: a small per-dim cache in front of the
// Python builder (dimtorch._mask.build_raw), so that each is made once per device and layout.
#include "mask.h"

#include <cstring>
#include <vector>

#include "backend.h"
#include "tensor.h"

namespace dimtorch {

struct MaskEntry {
  MaskKind kind;
  int ndim;
  int npos;
  signed char pos[kMaxDims + 1];
  Py_ssize_t size;
  PyObject* device;  // strong ref
  PyObject* raw;     // strong ref
};

struct MaskCache {
  std::vector<MaskEntry> entries;
  size_t next_evict = 0;
};

namespace {

constexpr size_t kMaxEntries = 16;  // layouts seen per dim are few; old ones are evicted in turn

PyObject* build_fn() {
  static PyObject* fn = nullptr;
  if (!fn) {
    Ref mod(PyImport_ImportModule("dimtorch._mask"));
    if (!mod) return nullptr;
    fn = PyObject_GetAttrString(mod.get(), "build_raw");
  }
  return fn;
}

void release(MaskEntry& e) {
  Py_CLEAR(e.device);
  Py_CLEAR(e.raw);
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
      PyErr_Format(PyExc_ValueError,
                   "%s: the lengths of dim %s are over %s, which the tensor lacks (dims: %s); add "
                   "that dim (e.g. by broadcasting) first",
                   caller, describe_dim(reinterpret_cast<PyObject*>(d)).c_str(),
                   describe_dim(PyTuple_GET_ITEM(ldims, i)).c_str(),
                   describe_dims(dims, nullptr).c_str());
      return false;
    }
    pos[i] = static_cast<signed char>(p);
  }
  if (with_self) {
    int p = dims_index(dims, reinterpret_cast<PyObject*>(d));
    if (p < 0) {
      PyErr_Format(PyExc_ValueError, "%s: dim %s is not in the tensor (dims: %s)", caller,
                   describe_dim(reinterpret_cast<PyObject*>(d)).c_str(),
                   describe_dims(dims, nullptr).c_str());
      return false;
    }
    pos[n] = static_cast<signed char>(p);
  }
  *k = n;
  return true;
}

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
  if (kind != MaskKind::kMask) size = -1;
  MaskCache* c = d->masks;
  if (c) {
    for (auto& e : c->entries) {
      if (e.kind != kind || e.ndim != ndim || e.size != size || e.npos != npos ||
          std::memcmp(e.pos, pos, npos) != 0)
        continue;
      int same = e.device == device ? 1 : PyObject_RichCompareBool(e.device, device, Py_EQ);
      if (same < 0) return nullptr;
      if (same) return Py_NewRef(e.raw);
    }
  }
  PyObject* fn = build_fn();
  if (!fn) return nullptr;
  Ref pos_tuple(PyTuple_New(npos));
  if (!pos_tuple) return nullptr;
  for (int i = 0; i < npos; ++i) PyTuple_SET_ITEM(pos_tuple.get(), i, PyLong_FromLong(pos[i]));
  Ref raw(PyObject_CallFunction(fn, "iOOinO", static_cast<int>(kind), reinterpret_cast<PyObject*>(d),
                                pos_tuple.get(), ndim, size, device));
  if (!raw) return nullptr;
  if (!d->masks) d->masks = new MaskCache();
  c = d->masks;
  MaskEntry e{kind, ndim, npos, {}, size, Py_NewRef(device), Py_NewRef(raw.get())};
  std::memcpy(e.pos, pos, npos);
  if (c->entries.size() < kMaxEntries) {
    c->entries.push_back(e);
  } else {
    MaskEntry& old = c->entries[c->next_evict];
    release(old);
    old = e;
    c->next_evict = (c->next_evict + 1) % kMaxEntries;
  }
  return raw.release();
}

namespace {

PyObject* f_dim_cached_raw(PyObject*, PyObject* args) {
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
  return dim_cached_raw(as_dim(dim), static_cast<MaskKind>(kind), pos, ndim, size, device);
}

PyMethodDef kFunctions[] = {
    {"_dim_cached_raw", f_dim_cached_raw, METH_VARARGS,
     "_dim_cached_raw(kind, dim, pos, ndim, size, device): cached mask (kind 0), clamped "
     "lengths (kind 1) or lengths (kind 2) raw of a dynamic dim; see src/mask.h."},
    {nullptr}};

}  // namespace

bool export_mask(PyObject* module) { return PyModule_AddFunctions(module, kFunctions) == 0; }

}  // namespace dimtorch
