// Alignment plans: built from dims tuples, kept in a direct-mapped cache keyed by dim identities.
#include "plan.h"

#include "backend.h"
#include "dim.h"

namespace dimtorch {

namespace {

constexpr int kCacheSlots = 512;
Plan* g_cache[kCacheSlots] = {};
Plan* g_last = nullptr;  // holds a reference

void set_last(Plan* p);

Py_hash_t key_hash(PyObject* const* dims, int n, bool allow) {
  size_t h = static_cast<size_t>(n) * 31u + (allow ? 7u : 0u);
  for (int i = 0; i < n; ++i) {
    Py_ssize_t m = PyTuple_GET_SIZE(dims[i]);
    for (Py_ssize_t j = 0; j < m; ++j)
      h = (h ^ (reinterpret_cast<size_t>(PyTuple_GET_ITEM(dims[i], j)) >> 4)) * 1000003u;
    h = (h ^ 0x9e3779b9u) * 1000003u;  // operand boundary
  }
  return static_cast<Py_hash_t>(h);
}

/* Items compared by pointer: the cached plan holds its key tuples, which hold their Dims, so a Dim
   at the same address is the same live object. */
bool key_equal(const Plan* p, PyObject* const* dims, int n, bool allow) {
  if (p->n != n || p->allow_broadcast_all != allow) return false;
  for (int i = 0; i < n; ++i) {
    PyObject* a = p->key[i];
    PyObject* b = dims[i];
    if (a == b) continue;
    Py_ssize_t m = PyTuple_GET_SIZE(a);
    if (PyTuple_GET_SIZE(b) != m) return false;
    for (Py_ssize_t j = 0; j < m; ++j)
      if (PyTuple_GET_ITEM(a, j) != PyTuple_GET_ITEM(b, j)) return false;
  }
  return true;
}

void plan_free(Plan* p) {
  for (int i = 0; i < p->n; ++i) {
    Py_XDECREF(p->key[i]);
    for (int k = 0; k < p->align[i].n_perm; ++k) Py_XDECREF(p->align[i].perm[k]);
  }
  Py_XDECREF(p->out_dims);
  delete p;
}

bool covers(PyObject* big, PyObject* small) {
  for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(small); ++j)
    if (dims_index(big, PyTuple_GET_ITEM(small, j)) < 0) return false;
  return true;
}

Plan* plan_build(PyObject* const* dims, int n, bool allow, const char* caller,
                 const char* const* names) {
  int holder = -1;
  for (int i = 0; i < n && holder < 0; ++i) {
    bool all = true;
    for (int j = 0; j < n && all; ++j)
      if (j != i) all = covers(dims[i], dims[j]);
    if (all) holder = i;
  }
  Ref out;
  if (holder >= 0) {
    out = Ref::borrow(dims[holder]);
  } else {
    if (!allow) {
      std::string ops;
      for (int i = 0; i < n; ++i)
        ops += std::string(i ? "; " : "") + names[i] + ": (" + describe_dims(dims[i], nullptr) + ")";
      PyErr_Format(PyExc_ValueError,
                   "%s: no operand has all dims of the others (%s). This outer broadcast is usually "
                   "a bug; if it is intended, use dimtorch.combine(..., "
                   "allow_broadcast_all_sources=True)",
                   caller, ops.c_str());
      return nullptr;
    }
    Ref list(PyList_New(0));
    if (!list) return nullptr;
    for (int i = 0; i < n; ++i)
      for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(dims[i]); ++j) {
        PyObject* d = PyTuple_GET_ITEM(dims[i], j);
        int present = PySequence_Contains(list.get(), d);  // identity-equal Dims only
        if (present < 0) return nullptr;
        if (!present && PyList_Append(list.get(), d) < 0) return nullptr;
      }
    out = Ref(PyList_AsTuple(list.get()));
    if (!out) return nullptr;
  }
  Py_ssize_t out_ndim = PyTuple_GET_SIZE(out.get());
  if (out_ndim > kMaxDims) {
    PyErr_Format(PyExc_ValueError, "%s: at most %d dims are supported, the result would have %zd",
                 caller, kMaxDims, out_ndim);
    return nullptr;
  }
  Plan* p = new Plan();
  p->n = n;
  p->allow_broadcast_all = allow;
  p->holder = holder;
  p->out_ndim = static_cast<int>(out_ndim);
  if (holder < 0) p->out_dims = out.release();
  PyObject* out_dims = holder >= 0 ? dims[holder] : p->out_dims;
  for (int k = 0; k < p->out_ndim; ++k) p->size_op[k] = -1;
  // Sizes come from the holder where there is one, else from the first operand with the dim.
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < n; ++i) {
      if ((pass == 0) != (i == holder)) continue;
      for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(dims[i]); ++j) {
        int k = dims_index(out_dims, PyTuple_GET_ITEM(dims[i], j));
        if (p->size_op[k] < 0) {
          p->size_op[k] = static_cast<signed char>(i);
          p->size_axis[k] = static_cast<signed char>(j);
        }
      }
    }
  for (int i = 0; i < n; ++i) {
    p->key[i] = Py_NewRef(dims[i]);
    AlignOp& al = p->align[i];
    Py_ssize_t nd = PyTuple_GET_SIZE(dims[i]);
    if (nd == 0) continue;  // a 0-dim raw broadcasts by itself
    int pos[kMaxDims];
    int first = p->out_ndim;
    bool in_order = true;
    for (Py_ssize_t j = 0; j < nd; ++j) {
      PyObject* d = PyTuple_GET_ITEM(dims[i], j);
      pos[j] = dims_index(out_dims, d);
      if (pos[j] < first) first = pos[j];
      if (j > 0 && pos[j] < pos[j - 1]) in_order = false;
      if (p->size_op[pos[j]] != i && !dim_is_static(d) && p->n_checks < kMaxDims * (kMaxOperands - 1))
        p->checks[p->n_checks++] = {p->size_op[pos[j]], p->size_axis[pos[j]],
                                    static_cast<signed char>(i), static_cast<signed char>(j)};
    }
    // Operand axes in output order: src over the aligned span out[first:].
    al.rank = p->out_ndim - first;
    for (int r = 0; r < al.rank; ++r) al.src[r] = -1;
    for (Py_ssize_t j = 0; j < nd; ++j) al.src[pos[j] - first] = static_cast<signed char>(j);
    if (!in_order) {
      for (int r = 0; r < al.rank; ++r)
        if (al.src[r] >= 0) {
          al.perm[al.n_perm] = PyLong_FromLong(al.src[r]);
          if (!al.perm[al.n_perm]) {
            plan_free(p);
            return nullptr;
          }
          ++al.n_perm;
        }
    }
    al.n_insert = al.rank - static_cast<int>(nd);
    if (al.n_insert == 1)
      for (int r = 0; r < al.rank; ++r)
        if (al.src[r] < 0) al.unsqueeze_at = r;
  }
  return p;
}

}  // namespace

Plan* plan_get(PyObject* const* dims, int n, bool allow, const char* caller,
               const char* const* names) {
  /* The plan used last, when called with the very same dims tuples (an op in a loop, a model
     step): found without hashing. */
  if (g_last && g_last->n == n && g_last->allow_broadcast_all == allow) {
    bool same = true;
    for (int i = 0; i < n && same; ++i) same = g_last->key[i] == dims[i];
    if (same) {
      ++g_last->refs;
      return g_last;
    }
  }
  Py_hash_t h = key_hash(dims, n, allow);
  Plan*& slot = g_cache[static_cast<size_t>(h) & (kCacheSlots - 1)];
  if (slot && slot->hash == h && key_equal(slot, dims, n, allow)) {
    // Keep the latest tuples as the key, so that the next call with them takes the path above.
    for (int i = 0; i < n; ++i)
      if (slot->key[i] != dims[i]) {
        PyObject* old = slot->key[i];
        slot->key[i] = Py_NewRef(dims[i]);
        Py_DECREF(old);
      }
    set_last(slot);
    ++slot->refs;
    return slot;
  }
  Plan* p = plan_build(dims, n, allow, caller, names);
  if (!p) return nullptr;
  p->hash = h;
  p->refs = 2;  // the cache's and the caller's
  Plan* old = slot;
  slot = p;
  if (old) plan_release(old);
  set_last(p);
  return p;
}

void plan_release(Plan* p) {
  if (--p->refs == 0) plan_free(p);
}

namespace {
void set_last(Plan* p) {
  if (p == g_last) return;
  if (p) ++p->refs;
  Plan* old = g_last;
  g_last = p;
  if (old) plan_release(old);
}
}  // namespace

void plan_cache_clear() {
  set_last(nullptr);
  for (auto& slot : g_cache) {
    Plan* p = slot;
    slot = nullptr;
    if (p) plan_release(p);
  }
}

bool plan_check_sizes(const Plan* p, TensorObject* const* ts, const char* caller,
                      const char* const* names) {
  for (int c = 0; c < p->n_checks; ++c) {
    const Plan::Check& k = p->checks[c];
    Py_ssize_t sa = ts[k.op_a]->sizes[k.ax_a], sb = ts[k.op_b]->sizes[k.ax_b];
    if (sa != sb) {
      PyErr_Format(PyExc_ValueError,
                   "%s: dim %s has raw size %zd in %s but %zd in %s (%s dims: %s; %s dims: %s)",
                   caller, describe_dim(PyTuple_GET_ITEM(ts[k.op_a]->dims, k.ax_a)).c_str(), sa,
                   names[k.op_a], sb, names[k.op_b], names[k.op_a],
                   describe_dims(ts[k.op_a]->dims, ts[k.op_a]->sizes).c_str(), names[k.op_b],
                   describe_dims(ts[k.op_b]->dims, ts[k.op_b]->sizes).c_str());
      return false;
    }
  }
  return true;
}

PyObject* plan_align_raw(const Plan* p, int i, TensorObject* t) {
  const AlignOp& al = p->align[i];
  if (!al.n_perm && !al.n_insert) return Py_NewRef(t->raw);
  Ref r = Ref::borrow(t->raw);
  if (al.n_perm) {
    r = Ref(backend::permute(r.get(), al.perm, al.n_perm));
    if (!r) return nullptr;
  }
  if (al.n_insert == 1) {
    Ref at(PyLong_FromLong(al.unsqueeze_at));
    if (!at) return nullptr;
    return backend::call2(backend::T.unsqueeze, r.get(), at.get());
  }
  if (al.n_insert > 1) {
    Ref shape(PyTuple_New(al.rank));
    if (!shape) return nullptr;
    for (int k = 0; k < al.rank; ++k) {
      PyObject* v = PyLong_FromSsize_t(al.src[k] >= 0 ? t->sizes[al.src[k]] : 1);
      if (!v) return nullptr;
      PyTuple_SET_ITEM(shape.get(), k, v);
    }
    return backend::call2(backend::T.view, r.get(), shape.get());
  }
  return r.release();
}

}  // namespace dimtorch
