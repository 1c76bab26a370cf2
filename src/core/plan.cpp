// Alignment plans: built from dims tuples, kept in a direct-mapped cache keyed by dim identities.
#include "core/plan.h"

#include <unordered_map>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/dim.h"
#include "core/exports.h"
#include "core/message_dims.h"

namespace dimtorch {

namespace {

/// dim -> the cached plans made for it, and how to evict each. Made once, never freed (plans
/// may be released while the interpreter shuts down).
using Watchers = std::vector<std::pair<void*, EvictPlan>>;
std::unordered_map<PyObject*, Watchers>* g_watched = new std::unordered_map<PyObject*, Watchers>();

bool seen_before(PyObject* const* dims, int i) {
  for (int j = 0; j < i; ++j)
    if (dims[j] == dims[i]) return true;
  return false;
}

}  // namespace

bool watch_key_dims(void* plan, EvictPlan evict, PyObject* const* dims, int n) {
  try {
    for (int i = 0; i < n; ++i)
      if (!seen_before(dims, i)) (*g_watched)[dims[i]].emplace_back(plan, evict);
  } catch (const std::bad_alloc&) {
    unwatch_key_dims(plan, dims, n);
    PyErr_NoMemory();
    return false;
  }
  return true;
}

void unwatch_key_dims(void* plan, PyObject* const* dims, int n) {
  for (int i = 0; i < n; ++i) {
    if (seen_before(dims, i)) continue;
    auto it = g_watched->find(dims[i]);
    if (it == g_watched->end()) continue;
    Watchers& w = it->second;
    for (size_t k = 0; k < w.size(); ++k)
      if (w[k].first == plan) {
        w[k] = w.back();
        w.pop_back();
        break;
      }
    if (w.empty()) g_watched->erase(it);
  }
}

void plan_caches_dim_died(PyObject* dim) {
  if (g_watched->empty()) return;
  auto it = g_watched->find(dim);
  if (it == g_watched->end()) return;
  Watchers w = std::move(it->second);
  g_watched->erase(it);
  for (auto& [plan, evict] : w) evict(plan);
}

namespace {

/// The key dims of a plan, operand after operand.
int flat_key(const Plan* p, PyObject** out) {
  int m = 0;
  for (int i = 0; i < p->n; ++i)
    for (int j = 0; j < p->key_len[i]; ++j) out[m++] = p->key[i][j];
  return m;
}

constexpr int kCacheSlots = 512;
Plan* g_cache[kCacheSlots] = {};
Plan* g_last = nullptr;  // holds a reference

void set_last(Plan* p);
void evict(void* plan);

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

/* Items compared by pointer: a plan's key dims are alive (the death of one evicts the plan), so
   a Dim at the same address is the same object. */
bool key_equal(const Plan* p, PyObject* const* dims, int n, bool allow) {
  if (p->n != n || p->allow_broadcast_all != allow) return false;
  for (int i = 0; i < n; ++i) {
    PyObject* b = dims[i];
    Py_ssize_t m = PyTuple_GET_SIZE(b);
    if (p->key_len[i] != m) return false;
    for (Py_ssize_t j = 0; j < m; ++j)
      if (p->key[i][j] != PyTuple_GET_ITEM(b, j)) return false;
  }
  return true;
}

void plan_free(Plan* p) {
  PyObject* key[kMaxOperands * kMaxDims];
  unwatch_key_dims(p, key, flat_key(p, key));
  for (int i = 0; i < p->n; ++i)
    for (int k = 0; k < p->align[i].n_perm; ++k) Py_XDECREF(p->align[i].perm[k]);
  delete p;
}

bool covers(PyObject* big, PyObject* small) {
  for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(small); ++j)
    if (dims_index(big, PyTuple_GET_ITEM(small, j)) < 0) return false;
  return true;
}

/* Two different Dim objects of one name are the usual cause of an outer broadcast, and then
   allow_broadcast_all_sources would silently make a product of the two axes: say so instead. */
static void raise_outer_broadcast(PyObject* const* dims, int n, const char* caller,
                                  const char* const* names) {
  MessageDims scope(dims, n);
  std::string ops;
  for (int i = 0; i < n; ++i)
    ops += std::string(i ? "; " : "") + names[i] + ": (" + describe_dims(dims[i], nullptr) + ")";
  std::string note = scope.namesakes_note();
  if (!note.empty()) {
    PyErr_Format(PyExc_ValueError,
                 "%s: no operand has all dims of the others (%s)%s: use one Dim object per axis "
                 "(a Dim is its identity, not its name)",
                 caller, ops.c_str(), note.c_str());
    return;
  }
  PyErr_Format(PyExc_ValueError,
               "%s: no operand has all dims of the others (%s). This outer broadcast is usually "
               "a bug; if it is intended, use dimtorch.combine(..., "
               "allow_broadcast_all_sources=True)",
               caller, ops.c_str());
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
  Ref out;  // the output dims while building
  if (holder >= 0) {
    out = Ref::borrow(dims[holder]);
  } else {
    if (!allow) {
      raise_outer_broadcast(dims, n, caller, names);
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
  PyObject* out_dims = out.get();
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
    p->key_len[i] = static_cast<signed char>(PyTuple_GET_SIZE(dims[i]));
    for (int j = 0; j < p->key_len[i]; ++j) p->key[i][j] = PyTuple_GET_ITEM(dims[i], j);
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
  /* The plan used last, when called with the same dims (an op in a loop, a model step): found
     without hashing. */
  if (g_last && key_equal(g_last, dims, n, allow)) {
    ++g_last->refs;
    return g_last;
  }
  Py_hash_t h = key_hash(dims, n, allow);
  size_t index = static_cast<size_t>(h) & (kCacheSlots - 1);
  Plan*& slot = g_cache[index];
  if (slot && slot->hash == h && key_equal(slot, dims, n, allow)) {
    set_last(slot);
    ++slot->refs;
    return slot;
  }
  Plan* p = plan_build(dims, n, allow, caller, names);
  if (!p) return nullptr;
  p->hash = h;
  p->refs = 1;  // the caller's
  PyObject* key[kMaxOperands * kMaxDims];
  if (cache_plan(slot, static_cast<int>(index), p, evict, key, flat_key(p, key))) set_last(p);
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

/// A key dim of the plan died: drop it from the cache and from g_last.
void evict(void* plan) {
  Plan* p = static_cast<Plan*>(plan);
  ++p->refs;  // alive until the end of this function
  if (g_last == p) set_last(nullptr);
  if (p->slot >= 0 && g_cache[p->slot] == p) {
    g_cache[p->slot] = nullptr;
    p->slot = -1;
    plan_release(p);
  }
  plan_release(p);
}
}  // namespace

void plan_cache_clear() {
  set_last(nullptr);
  for (auto& slot : g_cache) {
    Plan* p = slot;
    slot = nullptr;
    uncache_plan(p);
  }
}

PyObject* plan_out_dims(const Plan* p, TensorObject* const* ts) {
  PyObject* out = PyTuple_New(p->out_ndim);
  if (!out) return nullptr;
  for (int k = 0; k < p->out_ndim; ++k)
    PyTuple_SET_ITEM(out, k, Py_NewRef(PyTuple_GET_ITEM(ts[p->size_op[k]]->dims, p->size_axis[k])));
  return out;
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
