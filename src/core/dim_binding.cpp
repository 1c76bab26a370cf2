// Binding a declared dim to a batch's lengths, and what that resets.
//
// A dim normally has its lengths from construction. RETURNN code declares dims once (module level)
// and gives them each batch's lengths; `_dim_bind` does that on the same Dim object: it replaces the
// lengths and everything computed from them, on the dim and on every dim derived from it by dim math
// (T + 1, ceildiv(T, 4), A + T, ... recursively: they stay the same objects and get the new lengths).
// Nothing here runs on an op's path: ops read the dim's fields as they always do.
#include "core/dim_binding.h"

#include "core/backend.h"
#include "core/functions.h"
#include "core/mask.h"
#include "core/tensor.h"
#include "core/exports.h"

namespace dimtorch {

namespace {

DimExtra* extra_of(DimObject* d) {
  if (!d->extra) {
    try {
      d->extra = new DimExtra();
    } catch (const std::bad_alloc&) {
      PyErr_NoMemory();
    }
  }
  return d->extra;
}

PyObject* weak_target(PyObject* ref) {
  PyObject* o = PyWeakref_GET_OBJECT(ref);
  return o == Py_None ? nullptr : o;
}

}  // namespace

void dim_extra_free(DimObject* d) {
  DimExtra* e = d->extra;
  if (!e) return;
  d->extra = nullptr;
  Py_CLEAR(e->attrs);
  Py_CLEAR(e->lengths_template);
  Py_CLEAR(e->bound_size);
  for (PyObject* w : e->dependents) Py_DECREF(w);
  delete e;
}

int dim_extra_traverse(DimObject* d, visitproc visit, void* arg) {
  DimExtra* e = d->extra;
  if (!e) return 0;
  Py_VISIT(e->attrs);
  Py_VISIT(e->lengths_template);
  Py_VISIT(e->bound_size);
  return 0;
}

bool dim_note_dependent(DimObject* b, PyObject* derived) {
  DimExtra* e = extra_of(b);
  if (!e) return false;
  PyObject* w = PyWeakref_NewRef(derived, nullptr);
  if (!w) return false;
  std::vector<PyObject*> dead;
  try {
    auto& deps = e->dependents;
    for (size_t i = 0; i < deps.size();) {
      if (weak_target(deps[i])) {
        ++i;
        continue;
      }
      dead.push_back(deps[i]);
      deps[i] = deps.back();
      deps.pop_back();
    }
    deps.push_back(w);
  } catch (const std::bad_alloc&) {
    Py_DECREF(w);
    PyErr_NoMemory();
    return false;
  }
  for (PyObject* x : dead) Py_DECREF(x);
  return true;
}

namespace {

constexpr const char* kBind = "dimtorch.Dim.dyn_size_ext = ...";

/// The dims whose lengths come from `d`'s (dim math with d as an operand), still derived from it;
/// new references appended to `out`. False with an error set.
bool children_of(DimObject* d, std::vector<Ref>& out) {
  Ref cache(derived_cache_snapshot(d));
  if (!cache) return false;
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(cache.get(), &pos, &key, &value)) {
    DimObject* x = as_dim(value);
    if (x->derive_op != DimOp::kNone && x->derive_a == d) out.emplace_back(Ref::borrow(value));
  }
  if (d->extra) {
    for (size_t i = 0; i < d->extra->dependents.size(); ++i) {
      PyObject* x = weak_target(d->extra->dependents[i]);
      if (x && as_dim(x)->derive_op == DimOp::kConcat && dim_derive_b(as_dim(x)) == d)
        out.emplace_back(Ref::borrow(x));
    }
  }
  return true;
}

/// Drops what was computed from a dim's lengths: host min, max and total, device copies and masks,
/// index raws.
void drop_computed(DimObject* d) {
  d->min_size = d->max_size = d->total_size = -1;
  mask_cache_free(d);
  Py_CLEAR(d->cache);
}

/// The dims derived from `d`, transitively (each once, `d` excluded), in the order found.
bool derived_closure(DimObject* d, std::vector<Ref>& closure) {
  std::vector<Ref> queue;
  if (!children_of(d, queue)) return false;
  while (!queue.empty()) {
    Ref x = std::move(queue.back());
    queue.pop_back();
    bool seen = x.get() == reinterpret_cast<PyObject*>(d);
    for (const Ref& c : closure) seen = seen || c.get() == x.get();
    if (seen || as_dim(x.get())->size >= 0) continue;  // (a static dim has no lengths to follow)
    if (!children_of(as_dim(x.get()), queue)) return false;
    closure.push_back(std::move(x));
  }
  return true;
}

/// Resets every dim derived from `d` (their lengths then come from d's new ones) and returns the
/// tuple of `d` and them, for the Python caches keyed by dim (dimtorch._core.dim_cache.forget).
PyObject* reset_derived(DimObject* d) {
  std::vector<Ref> closure;
  if (!derived_closure(d, closure)) return nullptr;
  // First all of them: a dim derived from two of them (A + B) reads both when it computes.
  for (const Ref& x : closure) {
    DimObject* xd = as_dim(x.get());
    Py_CLEAR(xd->dyn_size);
    drop_computed(xd);
  }
  /* Then their lengths now, while every operand surely lives (as dim math makes them); one whose
     operand has no lengths now (unbound) stays without, and computes them when asked. */
  for (const Ref& x : closure) {
    DimObject* xd = as_dim(x.get());
    if (!xd->dyn_size && dim_has_lengths(xd) && !dim_dyn_size(xd)) PyErr_Clear();
  }
  Ref out(PyTuple_New(static_cast<Py_ssize_t>(closure.size()) + 1));
  if (!out) return nullptr;
  PyTuple_SET_ITEM(out.get(), 0, Py_NewRef(reinterpret_cast<PyObject*>(d)));
  for (size_t i = 0; i < closure.size(); ++i)
    PyTuple_SET_ITEM(out.get(), static_cast<Py_ssize_t>(i) + 1, Py_NewRef(closure[i].get()));
  return out.release();
}

/// Whether lengths may be bound to `d`; false with a ValueError naming `caller`.
bool bindable(DimObject* d, const char* caller) {
  PyObject* self = reinterpret_cast<PyObject*>(d);
  const char* why = nullptr;
  if (d->size >= 0) why = "is static: it has no lengths";
  else if (d->derive_op != DimOp::kNone) why = "is derived by dim math: its lengths follow its operands' (bind those)";
  else if (!d->sealed || d->pycache) why = "was made while tracing";
  if (!why) return true;
  PyErr_Format(PyExc_ValueError, "%s: dim %s %s", caller, describe_dim(self).c_str(), why);
  return false;
}

/// _dim_bind(dim, lengths): binds `lengths` (a Tensor of ints over batch dims, or None: unbound, the
/// size then comes from data) to a declared dim, resetting what was computed from its old lengths,
/// on it and on the dims derived from it. Returns the tuple of the dims reset.
PyObject* f_dim_bind(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !is_dim(args[0])) {
    PyErr_SetString(PyExc_TypeError, "dimtorch._C._dim_bind(dim, lengths): expected a Dim and a Tensor or None");
    return nullptr;
  }
  DimObject* d = as_dim(args[0]);
  PyObject* lengths = args[1];
  if (!bindable(d, kBind)) return nullptr;
  Ref kept;
  Py_ssize_t lo = -1, hi = -1;
  if (lengths != Py_None) {
    if (!is_tensor(lengths)) {
      PyErr_Format(PyExc_TypeError, "%s: lengths must be a dimtorch.Tensor with a raw, got %.80s", kBind,
                   Py_TYPE(lengths)->tp_name);
      return nullptr;
    }
    if (dims_index(as_tensor(lengths)->dims, args[0]) >= 0) {
      PyErr_Format(PyExc_ValueError, "%s: the lengths of dim %s cannot be over the dim itself", kBind,
                   describe_dim(args[0]).c_str());
      return nullptr;
    }
    if (is_traced_tensor(lengths)) {
      PyErr_Format(PyExc_ValueError, "%s: lengths being traced cannot be bound to a dim made outside the graph",
                   kBind);
      return nullptr;
    }
    kept = Ref(dim_checked_lengths(lengths, &lo, &hi, kBind));
    if (!kept) return nullptr;
    tensor_freeze(kept.get());
  }
  Ref old(d->dyn_size);  // released last: its death may run code
  d->dyn_size = kept.release();
  drop_computed(d);
  d->min_size = lo;
  d->max_size = hi;
  if (d->extra) Py_CLEAR(d->extra->bound_size);
  return reset_derived(d);
}

/// _dim_bind_size(dim, size): binds a 0-dim int Tensor (or None) as the current size of a dim whose
/// size comes from data (RETURNN's batch_dim.dyn_size_ext): what ops that make a tensor over the
/// dim without data take (zeros, range_over_dim), and get_dim_value().
PyObject* f_dim_bind_size(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !is_dim(args[0])) {
    PyErr_SetString(PyExc_TypeError, "dimtorch._C._dim_bind_size(dim, size): expected a Dim and a Tensor or None");
    return nullptr;
  }
  DimObject* d = as_dim(args[0]);
  PyObject* size = args[1];
  if (!bindable(d, kBind)) return nullptr;
  if (d->dyn_size) {
    PyErr_Format(PyExc_ValueError, "%s: dim %s has lengths; a scalar size binds a dim whose size comes from "
                 "data (a batch dim)", kBind, describe_dim(args[0]).c_str());
    return nullptr;
  }
  Py_ssize_t value = -1;
  Ref kept;
  if (size != Py_None) {
    if (!is_tensor(size) || tensor_ndim(as_tensor(size)) != 0) {
      PyErr_Format(PyExc_TypeError, "%s: the size of dim %s must be a 0-dim dimtorch.Tensor of an int, got %R",
                   kBind, describe_dim(args[0]).c_str(), size);
      return nullptr;
    }
    Py_ssize_t lo, hi;
    kept = Ref(dim_checked_lengths(size, &lo, &hi, kBind));
    if (!kept) return nullptr;
    tensor_freeze(kept.get());
    value = hi;
  }
  DimExtra* e = extra_of(d);
  if (!e) return nullptr;
  Ref old(e->bound_size);
  e->bound_size = kept.release();
  drop_computed(d);
  d->min_size = d->max_size = value;
  Py_RETURN_NONE;
}

PyMethodDef kFunctions[] = {
    {"_dim_bind", DIMTORCH_OP(f_dim_bind), METH_FASTCALL,
     "_dim_bind(dim, lengths): binds lengths (or None) to a declared dim, resetting what was computed "
     "from the old ones on it and the dims derived from it; returns the dims reset."},
    {"_dim_bind_size", DIMTORCH_OP(f_dim_bind_size), METH_FASTCALL,
     "_dim_bind_size(dim, size): binds a 0-dim size Tensor (or None) to a dim whose size comes from data."},
    {nullptr}};

// ---- attributes on Dim ---------------------------------------------------------------------------

PyObject* get_rf_attrs(PyObject* self, void*) {
  DimExtra* e = as_dim(self)->extra;
  return Py_NewRef(e && e->attrs ? e->attrs : Py_None);
}
int set_rf_attrs(PyObject* self, PyObject* value, void*) {
  if (!value || (value != Py_None && !PyDict_CheckExact(value))) {
    PyErr_SetString(PyExc_TypeError, "dimtorch.Dim._rf_attrs: expected a dict or None");
    return -1;
  }
  DimExtra* e = extra_of(as_dim(self));
  if (!e) return -1;
  Py_XSETREF(e->attrs, value == Py_None ? nullptr : Py_NewRef(value));
  return 0;
}

PyObject* get_lengths_template(PyObject* self, void*) {
  DimExtra* e = as_dim(self)->extra;
  return Py_NewRef(e && e->lengths_template ? e->lengths_template : Py_None);
}
int set_lengths_template(PyObject* self, PyObject* value, void*) {
  if (!value || (value != Py_None && !is_template(value))) {
    PyErr_Format(PyExc_TypeError, "dimtorch.Dim._lengths_template: expected a template Tensor (no raw) or None, got %.80s",
                 value ? Py_TYPE(value)->tp_name : "nothing");
    return -1;
  }
  if (value != Py_None && !bindable(as_dim(self), kBind)) return -1;
  DimExtra* e = extra_of(as_dim(self));
  if (!e) return -1;
  if (value != Py_None) tensor_freeze(value);  // the dim's: bound by dim.dyn_size_ext = ..., not in place
  Py_XSETREF(e->lengths_template, value == Py_None ? nullptr : Py_NewRef(value));
  return 0;
}

PyObject* get_bound_size(PyObject* self, void*) {
  DimExtra* e = as_dim(self)->extra;
  return Py_NewRef(e && e->bound_size ? e->bound_size : Py_None);
}

PyGetSetDef kGetSets[] = {
    {"_rf_attrs", get_rf_attrs, set_rf_attrs,
     "RETURNN's attributes of the dim (kind, description, ...): a dict, or None before any is set.", nullptr},
    {"_lengths_template", get_lengths_template, set_lengths_template,
     "The lengths declared without data (a template Tensor), or None.", nullptr},
    {"_bound_size", get_bound_size, nullptr,
     "The size bound to a dim whose size comes from data (a 0-dim Tensor), or None.", nullptr},
    {nullptr}};

}  // namespace

bool export_dim_binding(PyObject* module) {
  for (PyGetSetDef* g = kGetSets; g->name; ++g) {
    Ref descr(PyDescr_NewGetSet(&DimType, g));
    if (!descr || PyDict_SetItemString(DimType.tp_dict, g->name, descr.get()) < 0) return false;
  }
  PyType_Modified(&DimType);
  return add_functions(module, kFunctions);
}

}  // namespace dimtorch
