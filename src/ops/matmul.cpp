// matmul over named dims: a cached plan says how a and b become views for one F.linear or
// torch.matmul call (common dims as batch, the rest merged), and how the result is viewed back;
// linear (F.linear).
#include <vector>

#include "core/args.h"
#include "core/message_dims.h"
#include "core/backend.h"
#include "core/dim.h"
#include "core/functions.h"
#include "core/mask.h"
#include "ops/reduce.h"
#include "core/plan.h"
#include "core/definitions.h"
#include "core/tensor.h"
#include "core/exports.h"

namespace dimtorch {

namespace {

/// How one operand's raw is laid out for the torch call: a permute, then a reshape into groups
/// (each group the product of some axes' sizes; an empty group is a size-1 axis).
struct Layout {
  int n_perm = 0;
  PyObject* perm[kMaxDims] = {};  // permute arguments (ints), n_perm == 0 when in order
  bool reshape = false;
  int n_groups = 0;
  signed char group_len[kMaxDims + 2] = {};
  signed char axes[kMaxDims] = {};  // operand axes, group after group
};

struct MatmulPlan {
  int refs = 0;
  Py_hash_t hash = 0;
  /* a dims, b dims, reduce dims, not owned: the death of one of them evicts the plan
     (watch_key_dims), so that a cached plan keeps no batch's dims alive. */
  signed char key_len[3] = {};
  PyObject* key[3][kMaxDims] = {};
  int slot = -1;  // index in g_cache while cached there
  bool use_linear = false;
  bool use_bmm = false;  // one common dim: both operands (batch, m|k, k|n), one torch.bmm
  Layout la, lb;
  int out_ndim = 0;
  signed char out_op[kMaxDims] = {}, out_axis[kMaxDims] = {};
  bool out_view = false;
  int n_checks = 0;
  signed char check_a[kMaxDims] = {}, check_b[kMaxDims] = {};
  int n_reduce = 0;
  signed char reduce_a[kMaxDims] = {}, reduce_b[kMaxDims] = {};
};

constexpr int kSlots = 128;
MatmulPlan* g_cache[kSlots] = {};

int flat_key(const MatmulPlan* p, PyObject** out) {
  int m = 0;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < p->key_len[i]; ++j) out[m++] = p->key[i][j];
  return m;
}

void plan_release(MatmulPlan* p) {
  if (--p->refs > 0) return;
  PyObject* key[3 * kMaxDims];
  unwatch_key_dims(p, key, flat_key(p, key));
  for (Layout* l : {&p->la, &p->lb})
    for (int i = 0; i < l->n_perm; ++i) Py_XDECREF(l->perm[i]);
  delete p;
}

/// A key dim of the plan died: drop it from the cache.
void evict(void* plan) {
  MatmulPlan* p = static_cast<MatmulPlan*>(plan);
  if (p->slot >= 0 && g_cache[p->slot] == p) {
    g_cache[p->slot] = nullptr;
    p->slot = -1;
    plan_release(p);
  }
}

/// The output dims of a call (a new tuple): out_op/out_axis name them in a and b.
PyObject* out_dims_of(const MatmulPlan* p, TensorObject* a, TensorObject* b) {
  PyObject* out = PyTuple_New(p->out_ndim);
  if (!out) return nullptr;
  for (int k = 0; k < p->out_ndim; ++k)
    PyTuple_SET_ITEM(out, k, Py_NewRef(PyTuple_GET_ITEM((p->out_op[k] == 0 ? a : b)->dims, p->out_axis[k])));
  return out;
}

struct PlanHold {
  MatmulPlan* p;
  ~PlanHold() { plan_release(p); }
};

/// Fills a layout from the target axis order and group lengths.
bool make_layout(Layout* l, const std::vector<int>& order, const std::vector<int>& groups,
                 bool reshape) {
  bool identity = true;
  for (size_t i = 0; i < order.size(); ++i) identity = identity && order[i] == static_cast<int>(i);
  if (!identity)
    for (size_t i = 0; i < order.size(); ++i) {
      l->perm[l->n_perm] = PyLong_FromLong(order[i]);
      if (!l->perm[l->n_perm]) return false;
      ++l->n_perm;
    }
  for (size_t i = 0; i < order.size(); ++i) l->axes[i] = static_cast<signed char>(order[i]);
  l->n_groups = static_cast<int>(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) l->group_len[g] = static_cast<signed char>(groups[g]);
  l->reshape = reshape;
  return true;
}

MatmulPlan* build(TensorObject* a, TensorObject* b, PyObject* reduce, const char* caller) {
  int na = static_cast<int>(tensor_ndim(a)), nb = static_cast<int>(tensor_ndim(b));
  int nr = static_cast<int>(PyTuple_GET_SIZE(reduce));
  if (nr == 0) {
    PyErr_Format(PyExc_ValueError, "%s: reduce must name at least one dim", caller);
    return nullptr;
  }
  std::vector<int> ra, rb, ca, cb, a_rest, b_rest;
  for (int j = 0; j < nr; ++j) {
    PyObject* d = PyTuple_GET_ITEM(reduce, j);
    int ia = dims_index(a->dims, d), ib = dims_index(b->dims, d);
    if (ia < 0 || ib < 0) {
      TensorObject* other = ia < 0 ? a : b;
      MessageDims scope{d, other->dims};
      PyErr_Format(PyExc_ValueError, "%s: dim %s is in %s but not in %s (dims: %s)%s", caller,
                   describe_dim(d).c_str(), ia < 0 ? "b" : "a", ia < 0 ? "a" : "b",
                   describe_dims(other->dims, other->sizes).c_str(),
                   scope.namesakes_note().c_str());
      return nullptr;
    }
    for (int k : ra)
      if (k == ia) {
        PyErr_Format(PyExc_ValueError, "%s: dim %s is given twice in reduce", caller,
                     describe_dim(d).c_str());
        return nullptr;
      }
    ra.push_back(ia);
    rb.push_back(ib);
  }
  auto in_reduce = [&](PyObject* d) { return dims_index(reduce, d) >= 0; };
  for (int i = 0; i < na; ++i) {
    PyObject* d = PyTuple_GET_ITEM(a->dims, i);
    if (in_reduce(d)) continue;
    int j = dims_index(b->dims, d);
    if (j >= 0) {
      ca.push_back(i);
      cb.push_back(j);
    } else {
      a_rest.push_back(i);
    }
  }
  for (int j = 0; j < nb; ++j) {
    PyObject* d = PyTuple_GET_ITEM(b->dims, j);
    if (!in_reduce(d) && dims_index(a->dims, d) < 0) b_rest.push_back(j);
  }
  size_t out_ndim = ca.size() + a_rest.size() + b_rest.size();
  if (out_ndim > static_cast<size_t>(kMaxDims)) {  // (the plan's arrays hold kMaxDims)
    PyErr_Format(PyExc_ValueError, "%s: at most %d dims are supported, the result would have %zu", caller, kMaxDims,
                 out_ndim);
    return nullptr;
  }
  MatmulPlan* p = new MatmulPlan();
  p->out_ndim = static_cast<int>(out_ndim);
  int k = 0;
  auto put = [&](int op, int axis) {
    p->out_op[k] = static_cast<signed char>(op);
    p->out_axis[k++] = static_cast<signed char>(axis);
  };
  for (int i : ca) put(0, i);
  for (int i : a_rest) put(0, i);
  for (int j : b_rest) put(1, j);
  for (size_t c = 0; c < ca.size(); ++c)
    if (!dim_is_static(PyTuple_GET_ITEM(a->dims, ca[c]))) {
      p->check_a[p->n_checks] = static_cast<signed char>(ca[c]);
      p->check_b[p->n_checks++] = static_cast<signed char>(cb[c]);
    }
  for (int j = 0; j < nr; ++j) {
    p->reduce_a[j] = static_cast<signed char>(ra[j]);
    p->reduce_b[j] = static_cast<signed char>(rb[j]);
    if (!dim_is_static(PyTuple_GET_ITEM(a->dims, ra[j]))) {
      p->check_a[p->n_checks] = static_cast<signed char>(ra[j]);
      p->check_b[p->n_checks++] = static_cast<signed char>(rb[j]);
    }
  }
  p->n_reduce = nr;
  int n_ar = static_cast<int>(a_rest.size()), n_br = static_cast<int>(b_rest.size());
  std::vector<int> a_order, a_groups, b_order, b_groups;
  bool ok;
  if (ca.empty()) {
    /* No common dims: a's other dims stay leading batch dims of one F.linear / matmul call with a
       2-D (or 1-D) b, as hand-written PyTorch does for a weight matrix. */
    a_order = a_rest;
    a_order.insert(a_order.end(), ra.begin(), ra.end());
    for (int i = 0; i < n_ar; ++i) a_groups.push_back(1);
    a_groups.push_back(nr);
    std::vector<int> lin = b_rest, mm = rb;
    lin.insert(lin.end(), rb.begin(), rb.end());
    mm.insert(mm.end(), b_rest.begin(), b_rest.end());
    bool is_lin = true, is_mm = true;
    for (int j = 0; j < nb; ++j) {
      is_lin = is_lin && lin[j] == j;
      is_mm = is_mm && mm[j] == j;
    }
    p->use_linear = is_lin || !is_mm;
    b_order = p->use_linear ? lin : mm;
    if (p->use_linear) {
      if (n_br) b_groups.push_back(n_br);
      b_groups.push_back(nr);
    } else {
      b_groups.push_back(nr);
      if (n_br) b_groups.push_back(n_br);
    }
    ok = make_layout(&p->la, a_order, a_groups, nr != 1) &&
         make_layout(&p->lb, b_order, b_groups, nr != 1 || n_br > 1);
    p->out_view = n_br > 1;
  } else {
    a_order = ca;
    a_order.insert(a_order.end(), a_rest.begin(), a_rest.end());
    a_order.insert(a_order.end(), ra.begin(), ra.end());
    b_order = cb;
    b_order.insert(b_order.end(), rb.begin(), rb.end());
    b_order.insert(b_order.end(), b_rest.begin(), b_rest.end());
    for (size_t c = 0; c < ca.size(); ++c) {
      a_groups.push_back(1);
      b_groups.push_back(1);
    }
    a_groups.push_back(n_ar);
    a_groups.push_back(nr);
    b_groups.push_back(nr);
    b_groups.push_back(n_br);
    ok = make_layout(&p->la, a_order, a_groups, n_ar != 1 || nr != 1) &&
         make_layout(&p->lb, b_order, b_groups, nr != 1 || n_br != 1);
    p->out_view = n_ar != 1 || n_br != 1;
    /* One common dim: both operands are 3-D with the same batch size (checked above when dynamic), as
       torch.bmm takes them; torch.matmul would expand and view each, and its result (4 ops and nodes). */
    p->use_bmm = ca.size() == 1;
  }
  if (!ok) {
    p->refs = 1;
    plan_release(p);
    return nullptr;
  }
  return p;
}

MatmulPlan* get_plan(TensorObject* a, TensorObject* b, PyObject* reduce, const char* caller) {
  PyObject* key[3] = {a->dims, b->dims, reduce};
  size_t h = 17;
  for (PyObject* t : key) {
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(t); ++j)
      h = (h ^ (reinterpret_cast<size_t>(PyTuple_GET_ITEM(t, j)) >> 4)) * 1000003u;
    h = (h ^ 0x9e3779b9u) * 1000003u;
  }
  size_t index = h & (kSlots - 1);
  MatmulPlan*& slot = g_cache[index];
  if (slot && slot->hash == static_cast<Py_hash_t>(h)) {
    bool same = true;
    for (int i = 0; i < 3 && same; ++i) {
      Py_ssize_t n = PyTuple_GET_SIZE(key[i]);
      same = n == slot->key_len[i];
      for (Py_ssize_t j = 0; same && j < n; ++j) same = slot->key[i][j] == PyTuple_GET_ITEM(key[i], j);
    }
    if (same) {
      ++slot->refs;
      return slot;
    }
  }
  MatmulPlan* p = build(a, b, reduce, caller);
  if (!p) return nullptr;
  p->hash = static_cast<Py_hash_t>(h);
  for (int i = 0; i < 3; ++i) {
    p->key_len[i] = static_cast<signed char>(PyTuple_GET_SIZE(key[i]));
    for (int j = 0; j < p->key_len[i]; ++j) p->key[i][j] = PyTuple_GET_ITEM(key[i], j);
  }
  p->refs = 1;  // the caller's
  PyObject* flat[3 * kMaxDims];
  cache_plan(slot, static_cast<int>(index), p, evict, flat, flat_key(p, flat));
  return p;
}

PyObject* apply_layout(const Layout& l, TensorObject* t, PyObject* raw_in) {
  Ref raw = Ref::borrow(raw_in);
  if (l.n_perm) {
    raw = Ref(backend::permute(raw.get(), l.perm, l.n_perm));
    if (!raw) return nullptr;
  }
  if (!l.reshape) return raw.release();
  Ref shape(PyTuple_New(l.n_groups));
  if (!shape) return nullptr;
  int a = 0;
  for (int g = 0; g < l.n_groups; ++g) {
    Py_ssize_t size = 1;
    for (int i = 0; i < l.group_len[g]; ++i)
      if (__builtin_mul_overflow(size, t->sizes[l.axes[a++]], &size)) {  // (a 0-size tensor's other sizes are free)
        PyErr_SetString(PyExc_OverflowError, "dimtorch.matmul(): a group of merged sizes passes 2**63 - 1");
        return nullptr;
      }
    PyTuple_SET_ITEM(shape.get(), g, PyLong_FromSsize_t(size));
  }
  return backend::call2(backend::T.reshape, raw.get(), shape.get());
}

/// Raw of t with the padding of its reduced dims zeroed, when t holds their lengths' dims.
PyObject* masked_for_reduce(TensorObject* t, const signed char* reduce_axes, int n,
                            const char* caller) {
  int axes[kMaxDims], k = 0;
  for (int j = 0; j < n; ++j) {
    DimObject* d = as_dim(PyTuple_GET_ITEM(t->dims, reduce_axes[j]));
    if (!dim_has_lengths(d)) continue;
    signed char pos[kMaxDims + 1];
    int nk;
    if (!lengths_positions(d, t->dims, true, pos, &nk, caller)) {
      PyErr_Clear();  // this operand cannot hold padding of that dim (no batch dim): leave it
      continue;
    }
    axes[k++] = reduce_axes[j];
  }
  if (k == 0) return Py_NewRef(t->raw);  // no padding to zero (static reduce dims): the raw as it is
  Ref zero(PyLong_FromLong(0));
  return masked_raw(t, axes, k, zero.get(), nullptr, caller);
}

/// matmul(a, b, reduce, use_mask=True) and dot: reduce=[] (no contraction: an outer product, or a
/// product of all dims) goes to the definition, as does a call on other keywords.
PyObject* matmul_impl(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                      const char* caller, const char* op) {
  static const char* const names[] = {"a", "b", "reduce", "use_mask"};
  PyObject* v[4];
  if (!parse_args(args, nargs, kwnames, names, 4, 4, 3, v, caller)) return nullptr;
  for (int i = 0; i < 2; ++i)
    if (!is_tensor(v[i]) || !as_tensor(v[i])->raw) {
      PyErr_Format(PyExc_TypeError, "%s: %s must be a dimtorch.Tensor, got %.80s", caller,
                   names[i], Py_TYPE(v[i])->tp_name);
      return nullptr;
    }
  TensorObject* a = as_tensor(v[0]);
  TensorObject* b = as_tensor(v[1]);
  Ref reduce(dims_arg_to_tuple(v[2], caller, "reduce"));
  if (!reduce) return nullptr;
  if (PyTuple_GET_SIZE(reduce.get()) == 0) return call_definition(op, args, nargs, kwnames);
  int use_mask = flag_arg(v[3], 1, caller, "use_mask");
  if (use_mask < 0) return nullptr;
  MatmulPlan* p = get_plan(a, b, reduce.get(), caller);
  if (!p) return nullptr;
  PlanHold hold{p};
  for (int c = 0; c < p->n_checks; ++c)
    if (a->sizes[p->check_a[c]] != b->sizes[p->check_b[c]]) {
      PyErr_Format(PyExc_ValueError, "%s: dim %s has raw size %zd in a but %zd in b (a dims: %s; b dims: %s)",
                   caller, describe_dim(PyTuple_GET_ITEM(a->dims, p->check_a[c])).c_str(),
                   a->sizes[p->check_a[c]], b->sizes[p->check_b[c]],
                   describe_dims(a->dims, a->sizes).c_str(), describe_dims(b->dims, b->sizes).c_str());
      return nullptr;
    }
  Ref ra = Ref::borrow(a->raw), rb = Ref::borrow(b->raw);
  if (use_mask) {
    ra = Ref(masked_for_reduce(a, p->reduce_a, p->n_reduce, caller));
    if (!ra) return nullptr;
    rb = Ref(masked_for_reduce(b, p->reduce_b, p->n_reduce, caller));
    if (!rb) return nullptr;
  }
  Ref xa(apply_layout(p->la, a, ra.get()));
  if (!xa) return nullptr;
  Ref xb(apply_layout(p->lb, b, rb.get()));
  if (!xb) return nullptr;
  Ref out(backend::call2(p->use_linear ? backend::T.linear : p->use_bmm ? backend::T.bmm : backend::T.matmul, xa.get(),
                         xb.get()));
  if (!out) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  for (int k = 0; k < p->out_ndim; ++k)
    sizes[k] = (p->out_op[k] == 0 ? a : b)->sizes[p->out_axis[k]];
  if (p->out_view) {
    Ref shape(PyTuple_New(p->out_ndim));
    if (!shape) return nullptr;
    for (int k = 0; k < p->out_ndim; ++k) PyTuple_SET_ITEM(shape.get(), k, PyLong_FromSsize_t(sizes[k]));
    out = Ref(backend::call2(backend::T.view, out.get(), shape.get()));
    if (!out) return nullptr;
  }
  Ref out_dims(out_dims_of(p, a, b));
  if (!out_dims) return nullptr;
  PyObject* feature = nullptr;
  for (PyObject* f : {a->feature_dim, b->feature_dim})
    if (!feature && f && dims_index(out_dims.get(), f) >= 0) feature = f;
  return tensor_make(out.release(), out_dims.get(), sizes, nullptr, feature);
}

PyObject* f_matmul(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return matmul_impl(args, nargs, kwnames, "dimtorch.matmul()", "matmul");
}
PyObject* f_dot(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return matmul_impl(args, nargs, kwnames, "dimtorch.dot()", "dot");
}

bool check_same_size(TensorObject* a, int ia, TensorObject* b, int ib, const char* an,
                     const char* bn, const char* caller) {
  if (a->sizes[ia] == b->sizes[ib]) return true;
  PyErr_Format(PyExc_ValueError, "%s: dim %s has raw size %zd in %s but %zd in %s (%s dims: %s; %s dims: %s)",
               caller, describe_dim(PyTuple_GET_ITEM(a->dims, ia)).c_str(), a->sizes[ia], an,
               b->sizes[ib], bn, an, describe_dims(a->dims, a->sizes).c_str(), bn,
               describe_dims(b->dims, b->sizes).c_str());
  return false;
}

/// bias + x @ w for x of nd >= 2 axes, the input last: x folded to (rows, in) (a view when its strides
/// allow, as torch.matmul folds it), one addmm, the result viewed as out_sizes. New reference.
PyObject* linear_in_out_bias(PyObject* x, PyObject* w, PyObject* bias, const Py_ssize_t* out_sizes, int nd,
                             Py_ssize_t in_size) {
  Ref flat = Ref::borrow(x);
  if (nd > 2) {
    Py_ssize_t rows = 1;
    for (int i = 0; i < nd - 1; ++i) rows *= out_sizes[i];  // the sizes of an existing tensor: no overflow
    Ref shape(Py_BuildValue("(nn)", rows, in_size));
    if (!shape) return nullptr;
    flat = Ref(backend::call2(backend::T.reshape, x, shape.get()));
    if (!flat) return nullptr;
  }
  Ref out(backend::call3(backend::T.addmm, bias, flat.get(), w));
  if (!out || nd == 2) return out.release();
  Ref shape(size_tuple(out_sizes, nd));
  if (!shape) return nullptr;
  return backend::call2(backend::T.view, out.get(), shape.get());
}

/// Whether torch.autocast is on for any device (~0.1 us); false with an error set if the call failed.
bool autocasting() {
  PyObject* on = PyObject_CallNoArgs(backend::T.any_autocast);
  if (!on) return false;
  bool result = on == Py_True;
  Py_DECREF(on);
  return result;
}

PyObject* f_linear(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* caller = "dimtorch.linear()";
  static const char* const names[] = {"x", "weight", "bias"};
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 3, 2, v, caller)) return nullptr;
  if (!need_tensor(v[0], "x", caller) || !need_tensor(v[1], "weight", caller)) return nullptr;
  PyObject* bias_obj = v[2] && v[2] != Py_None ? v[2] : nullptr;
  if (bias_obj && !need_tensor(bias_obj, "bias", caller)) return nullptr;
  TensorObject* x = as_tensor(v[0]);
  TensorObject* w = as_tensor(v[1]);
  if (tensor_ndim(w) != 2) {
    PyErr_Format(PyExc_ValueError, "%s: weight must have 2 dims (in, out), got (%s)", caller,
                 describe_dims(w->dims, w->sizes).c_str());
    return nullptr;
  }
  int in_x0 = dims_index(x->dims, PyTuple_GET_ITEM(w->dims, 0));
  int in_x1 = dims_index(x->dims, PyTuple_GET_ITEM(w->dims, 1));
  if ((in_x0 >= 0) == (in_x1 >= 0)) {
    MessageDims scope{w->dims, x->dims};
    PyErr_Format(PyExc_ValueError,
                 "%s: exactly one dim of weight (%s) must be in x (dims: %s): it is the input dim%s",
                 caller, describe_dims(w->dims, w->sizes).c_str(),
                 describe_dims(x->dims, x->sizes).c_str(), scope.namesakes_note().c_str());
    return nullptr;
  }
  int w_in = in_x0 >= 0 ? 0 : 1, w_out = 1 - w_in;
  int in_x = in_x0 >= 0 ? in_x0 : in_x1;
  if (!check_same_size(x, in_x, w, w_in, "x", "weight", caller)) return nullptr;
  PyObject* out_dim = PyTuple_GET_ITEM(w->dims, w_out);
  if (bias_obj) {
    TensorObject* b = as_tensor(bias_obj);
    if (tensor_ndim(b) != 1 || PyTuple_GET_ITEM(b->dims, 0) != out_dim) {
      PyErr_Format(PyExc_ValueError, "%s: bias must have the dims (%s) of the output, got (%s)",
                   caller, describe_dim(out_dim).c_str(), describe_dims(b->dims, b->sizes).c_str());
      return nullptr;
    }
  }
  // The input dim goes last (a permute only when it is not already), the output dim takes its place.
  int nd = static_cast<int>(tensor_ndim(x));
  int order[kMaxDims];
  Py_ssize_t out_sizes[kMaxDims];
  Ref out_dims(PyTuple_New(nd));
  if (!out_dims) return nullptr;
  for (int i = 0, j = 0; i < nd; ++i) {
    if (i == in_x) continue;
    order[j] = i;
    out_sizes[j] = x->sizes[i];
    PyTuple_SET_ITEM(out_dims.get(), j++, Py_NewRef(PyTuple_GET_ITEM(x->dims, i)));
  }
  order[nd - 1] = in_x;
  out_sizes[nd - 1] = w->sizes[w_out];
  PyTuple_SET_ITEM(out_dims.get(), nd - 1, Py_NewRef(out_dim));
  Ref xr(backend::permute_order(x->raw, order, nd));
  if (!xr) return nullptr;
  Ref out;
  PyObject* b_raw = bias_obj ? as_tensor(bias_obj)->raw : Py_None;
  if (w_out == 0) {  // weight (out, in): torch's own layout
    out = Ref(backend::call3(backend::T.linear, xr.get(), w->raw, b_raw));
  } else {  // weight (in, out): x @ w (+ bias)
    if (bias_obj && nd >= 2 && !autocasting()) {
      // x folded to 2-D and bias + x @ w in one addmm: one op and one autograd node fewer than matmul + add
      // (the rf Linear). addmm does not promote dtypes: on its error, matmul + add below promote or explain.
      // Not under torch.autocast: there addmm casts the bias to the autocast dtype, where matmul + add (and
      // RETURNN's rf.Linear) promote the result back to the bias's float32.
      out = Ref(linear_in_out_bias(xr.get(), w->raw, b_raw, out_sizes, nd, w->sizes[w_in]));
      if (!out && PyErr_ExceptionMatches(PyExc_RuntimeError)) PyErr_Clear();
    }
    if (PyErr_Occurred()) return nullptr;
    if (!out) {
      out = Ref(backend::call2(backend::T.matmul, xr.get(), w->raw));
      if (out && bias_obj) out = Ref(PyNumber_Add(out.get(), b_raw));
    }
  }
  if (!out) return nullptr;
  PyObject* in_dim = PyTuple_GET_ITEM(w->dims, w_in);
  PyObject* feature = x->feature_dim == in_dim ? out_dim : x->feature_dim;
  return tensor_make(out.release(), out_dims.get(), out_sizes, nullptr, feature);
}

#define FASTCALL(fn) DIMTORCH_OP(fn), \
                     METH_FASTCALL | METH_KEYWORDS
PyMethodDef kFunctions[] = {
    {"matmul", FASTCALL(f_matmul),
     "matmul(a, b, reduce, use_mask=True): contracts the dim(s) `reduce`; dims in both and not "
     "reduced are batch dims. Result dims: common, then a's rest, then b's rest. use_mask zeroes "
     "the padding of dynamic reduced dims first. reduce=[]: the product over all dims."},
    {"dot", FASTCALL(f_dot), "dot(a, b, reduce, use_mask=True): same as matmul."},
    {"linear", FASTCALL(f_linear),
     "linear(x, weight, bias=None): x contracted with weight over their shared (input) dim, plus "
     "bias over the output dim; F.linear when weight is (out, in)."},
    {nullptr}};
#undef FASTCALL

}  // namespace

bool export_ops_matmul(PyObject* module) { return add_functions(module, kFunctions); }

void matmul_cache_clear() {
  for (auto& slot : g_cache) {
    MatmulPlan* p = slot;
    slot = nullptr;
    uncache_plan(p);
  }
}

}  // namespace dimtorch
