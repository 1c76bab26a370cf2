// Alignment plans: how the raws of up to three Tensors become views aligned to one output dims
// order, cached per combination of dims tuples.
#pragma once
#include "core/common.h"
#include "core/tensor.h"

namespace dimtorch {

constexpr int kMaxOperands = 3;

/// How one operand's raw becomes a view that torch broadcasting aligns to the output.
struct AlignOp {
  /* Permutation to output order as separate int arguments, or n_perm == 0 when already in order:
     torch parses permute(2, 1, 0) ~0.5 us faster than permute((2, 1, 0)). */
  PyObject* perm[kMaxDims] = {};
  int n_perm = 0;
  int n_insert = 0;          // size-1 axes to insert after the permute
  int unsqueeze_at = 0;      // their position when n_insert == 1
  int rank = 0;              // rank of the aligned view when n_insert > 1
  signed char src[kMaxDims] = {};  // aligned axis -> operand axis, -1 for an inserted size-1 axis
};

struct Plan {
  int refs = 0;
  int n = 0;                  // tensor operands
  bool allow_broadcast_all = false;
  int holder = -1;            // operand whose dims tuple is the output's, or -1 (plan_out_dims)
  int out_ndim = 0;
  signed char size_op[kMaxDims] = {};    // each output size comes from this operand...
  signed char size_axis[kMaxDims] = {};  // ...at this axis
  AlignOp align[kMaxOperands];
  struct Check {
    signed char op_a, ax_a, op_b, ax_b;
  };
  int n_checks = 0;  // raw sizes that must agree (dims that are not static)
  Check checks[kMaxDims * (kMaxOperands - 1)];
  /* The dims this plan was made for, not owned: a cached plan must not keep a batch's dims (and
     their masks) alive. The death of one of them drops the plan (watch_key_dims), so a pointer
     here is always a live dim and pointer equality is identity. */
  signed char key_len[kMaxOperands] = {};
  PyObject* key[kMaxOperands][kMaxDims] = {};
  Py_hash_t hash = 0;
  int slot = -1;  // index in the cache, while cached there
};

/// Plan aligning Tensors with these dims tuples, from the cache or made now; the caller owns one
/// reference (plan_release). NULL with a Python error (naming `caller` and the operands by
/// `names`) for an outer broadcast without permission or too many dims.
Plan* plan_get(PyObject* const* dims, int n, bool allow_broadcast_all, const char* caller,
               const char* const* names);
void plan_release(Plan* p);

/// Checks that dims which are not static have the same raw size in all operands.
bool plan_check_sizes(const Plan* p, TensorObject* const* ts, const char* caller,
                      const char* const* names);
/// The aligned raw of operand i (new reference; the raw itself when no view is needed).
PyObject* plan_align_raw(const Plan* p, int i, TensorObject* t);
/// The output dims (a new tuple) of a plan whose output is no operand's dims (holder == -1).
PyObject* plan_out_dims(const Plan* p, TensorObject* const* ts);

/// Holds a plan reference for a scope.
struct PlanRef {
  Plan* p = nullptr;
  PlanRef() = default;
  explicit PlanRef(Plan* q) : p(q) {}
  PlanRef(const PlanRef&) = delete;
  PlanRef& operator=(const PlanRef&) = delete;
  ~PlanRef() {
    if (p) plan_release(p);
  }
};

/// Empties the plan cache (tests, and before counting live objects).

/* Plan caches (this one and matmul's) hold their key dims without owning them. A cache watches
   the dims of each plan it caches; when a watched dim dies, evict(plan) is called once for every
   plan watching it, and must drop the plan from the cache. */
using EvictPlan = void (*)(void* plan);
/// Watches the distinct dims among dims[0..n) for `plan` (once per plan; unwatch them when it is
/// freed). False with MemoryError set.
bool watch_key_dims(void* plan, EvictPlan evict, PyObject* const* dims, int n);
void unwatch_key_dims(void* plan, PyObject* const* dims, int n);
/// Drops the cache's reference to p, which its slot no longer holds (nothing for NULL).
template <class P>
void uncache_plan(P* p) {
  if (!p) return;
  p->slot = -1;
  plan_release(p);
}
/// Puts the new plan p (refs 1: the caller's) in its cache's slot `index`, watching its key dims
/// dims[0..n); the plan the slot held is released. False (p stays uncached: used once) when there
/// is no memory to watch the dims. Plans of any cache: fields refs and slot, plan_release(P*).
template <class P>
bool cache_plan(P*& slot, int index, P* p, EvictPlan evict, PyObject* const* dims, int n) {
  if (!watch_key_dims(p, evict, dims, n)) {
    PyErr_Clear();  // out of memory for the index
    return false;
  }
  ++p->refs;  // the cache's
  p->slot = index;
  P* old = slot;
  slot = p;
  uncache_plan(old);
  return true;
}
/// Called by a dying Dim: evicts the cached plans made for it.
void plan_caches_dim_died(PyObject* dim);

}  // namespace dimtorch
