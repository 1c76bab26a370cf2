// Dim math: T + k, T - k, T * k, T // k, ceildiv(T, k), A + B. Results are cached on the left
// operand, so the same expression twice gives the same Dim; lengths are derived on the host.
#include <vector>

#include "core/backend.h"
#include "core/definitions.h"
#include "core/dim.h"
#include "core/dim_binding.h"
#include "core/functions.h"
#include "ops/elementwise.h"
#include "core/tensor.h"
#include "core/exports.h"

namespace dimtorch {

/* The dims made from a dim, owned by it: a derived dim lives as long as its operand (its lengths
   and masks are made once per batch, however often an op derives it again), and points back to
   the operand without owning it, so that the two form no reference cycle and a batch's dims go
   with its last reference, garbage collector or not. Keys hold other dims weakly (A + B: B; a
   merge: the dims after the first), so that two dims never own each other through their caches;
   an entry whose weak key died is dropped when the next one is added. */
struct DerivedEntry {
  DimOp op;          // kNone: a merged dim (dim_merged)
  Py_ssize_t k;
  PyObject* other;   // owned: a weak ref to B (A + B), a tuple of weak refs (a merge), or NULL
  PyObject* dim;     // owned
};

struct DerivedCache {
  std::vector<DerivedEntry> entries;
};

namespace {

/// The object a weak ref points to (borrowed), or NULL when it has died.
PyObject* weak_target(PyObject* ref) {
  PyObject* o = PyWeakref_GET_OBJECT(ref);
  return o == Py_None ? nullptr : o;
}

/// Whether every weak ref in `other` (a weak ref or a tuple of them) still points to its dim.
bool keys_alive(PyObject* other) {
  if (!other) return true;
  if (!PyTuple_Check(other)) return weak_target(other) != nullptr;
  for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(other); ++j)
    if (!weak_target(PyTuple_GET_ITEM(other, j))) return false;
  return true;
}

/// Whether lengths d would be derived from are a Tensor whose raw the garbage collector cleared.
bool lengths_cleared(DimObject* d) {
  if (d->dyn_size) return as_tensor(d->dyn_size)->raw == nullptr;
  if (d->derive_op == DimOp::kNone) return false;
  DimObject* b = dim_derive_b(d);
  return lengths_cleared(d->derive_a) || (b && lengths_cleared(b));
}

/// Makes a derived dim stand alone when its operand leaves: it keeps its sizes and lengths (dim
/// math computes them when it makes a dim; one cached by dim_register_derived gets them here).
void detach(DimObject* owner, const DerivedEntry& e) {
  DimObject* d = as_dim(e.dim);
  if (e.op == DimOp::kNone || d->derive_a != owner) return;
  if (!d->dyn_size && dim_has_lengths(d) && !dim_dyn_size(d)) {
    // Left without lengths (its size comes from data). Quietly when the operand is cyclic
    // garbage whose lengths the collector cleared first: nothing to compute them from.
    if (lengths_cleared(d)) PyErr_Clear();
    else PyErr_WriteUnraisable(e.dim);
  }
  d->derive_op = DimOp::kNone;
  d->derive_a = nullptr;
  Py_CLEAR(d->derive_b);
}

/// The cached dim of dim math (op, k, b) on `a` (borrowed), or NULL.
PyObject* lookup_derived(DimObject* a, DimOp op, Py_ssize_t k, DimObject* b) {
  if (!a->derived) return nullptr;
  for (const DerivedEntry& e : a->derived->entries) {
    if (e.op != op) continue;
    if (op == DimOp::kConcat ? weak_target(e.other) == reinterpret_cast<PyObject*>(b) : e.k == k)
      return e.dim;
  }
  return nullptr;
}

/// The cached merge of `dims` on dims[0] (borrowed), or NULL.
PyObject* lookup_merged(DimObject* first, PyObject* dims) {
  if (!first->derived) return nullptr;
  Py_ssize_t n = PyTuple_GET_SIZE(dims);
  for (const DerivedEntry& e : first->derived->entries) {
    if (e.op != DimOp::kNone || PyTuple_GET_SIZE(e.other) != n - 1) continue;
    bool same = true;
    for (Py_ssize_t j = 1; j < n && same; ++j)
      same = weak_target(PyTuple_GET_ITEM(e.other, j - 1)) == PyTuple_GET_ITEM(dims, j);
    if (same) return e.dim;
  }
  return nullptr;
}

/// Adds an entry (taking its references), after dropping entries whose weak keys died. False
/// with an error set (and e's references released) when out of memory.
bool insert_derived(DimObject* owner, DerivedEntry e) {
  std::vector<DerivedEntry> dropped;
  bool ok = true;
  try {
    if (!owner->derived) owner->derived = new DerivedCache();
    auto& entries = owner->derived->entries;
    entries.reserve(entries.size() + 1);
    dropped.reserve(entries.size());
    for (size_t i = 0; i < entries.size();) {
      if (keys_alive(entries[i].other)) {
        ++i;
        continue;
      }
      detach(owner, entries[i]);
      dropped.push_back(entries[i]);
      entries[i] = entries.back();
      entries.pop_back();
    }
    entries.push_back(e);
  } catch (const std::bad_alloc&) {
    ok = false;
  }
  // Releasing may run arbitrary code (a dim's death): only once the cache is consistent again.
  for (DerivedEntry& x : dropped) {
    Py_XDECREF(x.other);
    Py_DECREF(x.dim);
  }
  if (!ok) {
    Py_XDECREF(e.other);
    Py_DECREF(e.dim);
    PyErr_NoMemory();
  }
  return ok;
}

}  // namespace

bool dim_register_derived(DimObject* d) {
  DimObject* a = d->derive_a;
  if (!a || d->derive_op == DimOp::kNone) {
    PyErr_SetString(PyExc_SystemError, "dimtorch: dim_register_derived() of a dim without derivation");
    return false;
  }
  if (!insert_derived(a, {d->derive_op, d->derive_k, Py_XNewRef(d->derive_b),
                          Py_NewRef(reinterpret_cast<PyObject*>(d))}))
    return false;
  DimObject* b = dim_derive_b(d);
  return !b || dim_note_dependent(b, reinterpret_cast<PyObject*>(d));
}

PyObject* derived_cache_snapshot(DimObject* a) {
  Ref dict(PyDict_New());
  if (!dict || !a->derived) return dict.release();
  for (const DerivedEntry& e : a->derived->entries) {
    if (e.op == DimOp::kNone) {  // a merge: ("merge", the other dims)
      if (!keys_alive(e.other)) continue;
      Py_ssize_t n = PyTuple_GET_SIZE(e.other);
      Ref others(PyTuple_New(n));
      if (!others) return nullptr;
      for (Py_ssize_t j = 0; j < n; ++j)
        PyTuple_SET_ITEM(others.get(), j, Py_NewRef(weak_target(PyTuple_GET_ITEM(e.other, j))));
      Ref key(Py_BuildValue("(sO)", "merge", others.get()));
      if (!key || PyDict_SetItem(dict.get(), key.get(), e.dim) < 0) return nullptr;
      continue;
    }
    PyObject* arg = e.op == DimOp::kConcat ? weak_target(e.other) : nullptr;
    if (e.op == DimOp::kConcat && !arg) continue;
    Ref key(arg ? Py_BuildValue("(iO)", static_cast<int>(e.op), arg)
                : Py_BuildValue("(in)", static_cast<int>(e.op), e.k));
    if (!key || PyDict_SetItem(dict.get(), key.get(), e.dim) < 0) return nullptr;
  }
  return dict.release();
}

DimObject* dim_derive_b(DimObject* d) {
  if (!d->derive_b) return nullptr;
  return reinterpret_cast<DimObject*>(weak_target(d->derive_b));
}

void derived_cache_free(DimObject* d) {
  DerivedCache* c = d->derived;
  if (!c) return;
  d->derived = nullptr;
  for (const DerivedEntry& e : c->entries) detach(d, e);
  for (DerivedEntry& e : c->entries) {
    Py_XDECREF(e.other);
    Py_DECREF(e.dim);
  }
  delete c;
}

int derived_cache_traverse(DimObject* d, visitproc visit, void* arg) {
  if (!d->derived) return 0;
  for (const DerivedEntry& e : d->derived->entries) {
    Py_VISIT(e.other);
    Py_VISIT(e.dim);
  }
  return 0;
}

namespace {

const char* const kOpSymbols[] = {"", "+", "-", "*", "//", "ceildiv", "+"};

/// The static size of a op k (or a + b); false where it overflows (sizes are at most 2**63 - 1).
bool static_result(DimOp op, Py_ssize_t a, Py_ssize_t k, Py_ssize_t b, Py_ssize_t* out) {
  switch (op) {
    case DimOp::kAdd: return !__builtin_add_overflow(a, k, out);
    case DimOp::kSub: return !__builtin_sub_overflow(a, k, out);
    case DimOp::kMul: return !__builtin_mul_overflow(a, k, out);
    case DimOp::kFloorDiv: *out = a / k; return true;
    case DimOp::kCeilDiv: *out = a / k + (a % k != 0); return true;  // (a + k - 1 may overflow)
    case DimOp::kConcat: return !__builtin_add_overflow(a, b, out);
    case DimOp::kNone: break;
  }
  *out = a;
  return true;
}

PyObject* overflow_error(DimObject* a, DimOp op, Py_ssize_t k, DimObject* b, const char* caller) {
  std::string rhs = op == DimOp::kConcat ? describe_dim(reinterpret_cast<PyObject*>(b)) : std::to_string(k);
  PyErr_Format(PyExc_OverflowError, "%s: %s %s %s overflows (a size is at most 2**63 - 1)", caller,
               describe_dim(reinterpret_cast<PyObject*>(a)).c_str(), kOpSymbols[static_cast<int>(op)], rhs.c_str());
  return nullptr;
}

PyObject* derived_name(DimObject* a, DimOp op, Py_ssize_t k, DimObject* b) {
  std::string an = a->name ? to_std_string(a->name) : "?";
  std::string s;
  if (op == DimOp::kConcat) s = an + "+" + (b->name ? to_std_string(b->name) : "?");
  else if (op == DimOp::kCeilDiv) s = "ceildiv(" + an + "," + std::to_string(k) + ")";
  else s = an + kOpSymbols[static_cast<int>(op)] + std::to_string(k);
  return PyUnicode_FromString(s.c_str());
}

}  // namespace

PyObject* dim_derive(DimObject* a, DimOp op, Py_ssize_t k, DimObject* b, const char* caller) {
  PyObject* self = reinterpret_cast<PyObject*>(a);
  if ((op == DimOp::kFloorDiv || op == DimOp::kCeilDiv || op == DimOp::kMul) && k <= 0) {
    PyErr_Format(PyExc_ValueError, "%s: factor must be a positive int, got %zd (dim %s)", caller, k,
                 describe_dim(self).c_str());
    return nullptr;
  }
  // Identities keep the dim itself, as in RETURNN's dim math simplification.
  if (((op == DimOp::kAdd || op == DimOp::kSub) && k == 0) ||
      ((op == DimOp::kMul || op == DimOp::kFloorDiv || op == DimOp::kCeilDiv) && k == 1))
    return Py_NewRef(self);
  if ((op == DimOp::kAdd || op == DimOp::kSub) && k == PY_SSIZE_T_MIN) return overflow_error(a, op, k, b, caller);
  if (op == DimOp::kAdd && k < 0) return dim_derive(a, DimOp::kSub, -k, b, caller);
  if (op == DimOp::kSub && k < 0) return dim_derive(a, DimOp::kAdd, -k, b, caller);
  /* A chain of one op folds into one step, so (T + 1) + 2 is T + 3, as RETURNN simplifies dim
     math. Mixed chains stay as they are: (T - 3) + 1 differs from T - 2 where lengths hit 0. */
  if (!b && op != DimOp::kConcat && a->derive_op == op) {
    bool additive = op == DimOp::kAdd || op == DimOp::kSub;
    Py_ssize_t folded;
    if (additive ? __builtin_add_overflow(a->derive_k, k, &folded) : __builtin_mul_overflow(a->derive_k, k, &folded))
      return overflow_error(a, op, k, b, caller);
    // a holds its base only by a borrowed pointer: held here, as making the new dim may run the
    // collector, which could free a base left only in cyclic garbage.
    Ref base = Ref::borrow(reinterpret_cast<PyObject*>(a->derive_a));
    return dim_derive(as_dim(base.get()), op, folded, nullptr, caller);
  }
  if (a->size >= 0 && op == DimOp::kSub && a->size < k) {
    PyErr_Format(PyExc_ValueError, "%s: %s - %zd would have a negative size", caller,
                 describe_dim(self).c_str(), k);
    return nullptr;
  }
  if (op == DimOp::kConcat) {
    bool a_from_data = a->size < 0 && !a->traced_size && !dim_has_lengths(a);
    bool b_from_data = b->size < 0 && !b->traced_size && !dim_has_lengths(b);
    if (a_from_data != b_from_data) {
      PyErr_Format(PyExc_ValueError,
                   "%s: %s + %s: a dim whose size comes from data has neither a static size nor "
                   "lengths to add",
                   caller, describe_dim(self).c_str(),
                   describe_dim(reinterpret_cast<PyObject*>(b)).c_str());
      return nullptr;
    }
  }
  PyObject* hit = lookup_derived(a, op, k, b);
  if (hit) return Py_NewRef(hit);

  bool all_static = a->size >= 0 && (op != DimOp::kConcat || b->size >= 0);
  Py_ssize_t static_size = -1;
  if (all_static && !static_result(op, a->size, k, b ? b->size : 0, &static_size))
    return overflow_error(a, op, k, b, caller);
  if (!all_static && (op == DimOp::kAdd || op == DimOp::kMul) && dim_has_lengths(a) &&
      (a->max_size >= 0 || k >= (Py_ssize_t{1} << 31))) {
    /* Lengths past int64 would wrap in torch's add: refused here where the host max is known (cached,
       or read for a factor that large; with a smaller one only lengths near 2**63 could wrap). */
    Py_ssize_t hi = dim_max_size(a), ignored;
    if (hi == -2) return nullptr;
    if (hi >= 0 && !static_result(op, hi, k, 0, &ignored)) return overflow_error(a, op, k, b, caller);
  }
  Ref size(all_static ? PyLong_FromSsize_t(static_size) : Py_NewRef(Py_None));
  Ref name(derived_name(a, op, k, b));
  if (!size || !name) return nullptr;
  Ref other;
  if (op == DimOp::kConcat && !(other = Ref(PyWeakref_NewRef(reinterpret_cast<PyObject*>(b), nullptr))))
    return nullptr;
  Ref dim(PyObject_CallFunctionObjArgs(reinterpret_cast<PyObject*>(&DimType), size.get(), name.get(),
                                       nullptr));
  if (!dim) return nullptr;
  DimObject* d = as_dim(dim.get());
  // Also for static results: chains fold through them too.
  d->derive_op = op;
  d->derive_a = a;
  d->derive_b = Py_XNewRef(other.get());
  d->derive_k = k;
  d->traced_size = a->traced_size || (b && b->traced_size);  // its size is the same math on theirs
  /* The lengths now, while the operands are surely alive: once cached, the dim may outlive
     them. This calls torch, which may let another thread in: that one may have cached the same
     dim meanwhile, which then wins. */
  if (dim_has_lengths(d) && !dim_dyn_size(d)) return nullptr;
  hit = lookup_derived(a, op, k, b);
  if (hit) return Py_NewRef(hit);
  if (!insert_derived(a, {op, k, other.release(), Py_NewRef(dim.get())})) return nullptr;
  // Binding B to new lengths must reach A + B, which A's cache owns (dim_binding.cpp).
  if (op == DimOp::kConcat && !dim_note_dependent(b, dim.get())) return nullptr;
  return dim.release();
}

PyObject* dim_merged(PyObject* dims, Py_ssize_t total) {
  DimObject* first = as_dim(PyTuple_GET_ITEM(dims, 0));
  PyObject* hit = lookup_merged(first, dims);
  if (hit) return Py_NewRef(hit);
  Py_ssize_t n = PyTuple_GET_SIZE(dims);
  std::string name;
  for (Py_ssize_t j = 0; j < n; ++j) {
    DimObject* d = as_dim(PyTuple_GET_ITEM(dims, j));
    name += (j ? "*" : "") + (d->name ? to_std_string(d->name) : std::string("None"));
  }
  Ref others(PyTuple_New(n - 1));
  if (!others) return nullptr;
  for (Py_ssize_t j = 1; j < n; ++j) {
    PyObject* w = PyWeakref_NewRef(PyTuple_GET_ITEM(dims, j), nullptr);
    if (!w) return nullptr;
    PyTuple_SET_ITEM(others.get(), j - 1, w);
  }
  Ref size(PyLong_FromSsize_t(total));
  Ref py_name(PyUnicode_FromString(name.c_str()));
  if (!size || !py_name) return nullptr;
  Ref dim(PyObject_CallFunctionObjArgs(reinterpret_cast<PyObject*>(&DimType), size.get(), py_name.get(),
                                       nullptr));
  if (!dim) return nullptr;
  if (!insert_derived(first, {DimOp::kNone, total, others.release(), Py_NewRef(dim.get())})) return nullptr;
  return dim.release();
}

namespace {

bool int_operand(PyObject* o, Py_ssize_t* k) {
  if (!PyLong_Check(o) || PyBool_Check(o)) return false;
  *k = PyLong_AsSsize_t(o);
  if (*k == -1 && PyErr_Occurred()) {
    PyErr_Format(PyExc_OverflowError, "dimtorch dim math: the int %R is out of range for a dim size", o);
    return false;
  }
  return true;
}

PyObject* dim_add(PyObject* a, PyObject* b) {
  Py_ssize_t k;
  if (is_dim(a) && is_dim(b))
    return dim_derive(as_dim(a), DimOp::kConcat, 0, as_dim(b), "dimtorch.Dim.__add__()");
  if (is_dim(a) && int_operand(b, &k)) return dim_derive(as_dim(a), DimOp::kAdd, k, nullptr, "dimtorch.Dim.__add__()");
  if (is_dim(b) && int_operand(a, &k)) return dim_derive(as_dim(b), DimOp::kAdd, k, nullptr, "dimtorch.Dim.__radd__()");
  if (PyErr_Occurred()) return nullptr;
  Py_RETURN_NOTIMPLEMENTED;
}

PyObject* dim_sub(PyObject* a, PyObject* b) {
  Py_ssize_t k;
  if (is_dim(a) && int_operand(b, &k)) return dim_derive(as_dim(a), DimOp::kSub, k, nullptr, "dimtorch.Dim.__sub__()");
  if (PyErr_Occurred()) return nullptr;
  Py_RETURN_NOTIMPLEMENTED;
}

PyObject* dim_mul(PyObject* a, PyObject* b) {
  Py_ssize_t k;
  if (is_dim(a) && is_dim(b)) {  // RETURNN's product of dims (a merge): its definition makes it
    PyObject* args[2] = {a, b};
    return call_definition("Dim._mul_dims", args, 2, nullptr);
  }
  if (is_dim(a) && int_operand(b, &k)) return dim_derive(as_dim(a), DimOp::kMul, k, nullptr, "dimtorch.Dim.__mul__()");
  if (is_dim(b) && int_operand(a, &k)) return dim_derive(as_dim(b), DimOp::kMul, k, nullptr, "dimtorch.Dim.__rmul__()");
  if (PyErr_Occurred()) return nullptr;
  Py_RETURN_NOTIMPLEMENTED;
}

PyObject* dim_floordiv(PyObject* a, PyObject* b) {
  Py_ssize_t k;
  if (is_dim(a) && int_operand(b, &k))
    return dim_derive(as_dim(a), DimOp::kFloorDiv, k, nullptr, "dimtorch.Dim.__floordiv__()");
  if (PyErr_Occurred()) return nullptr;
  Py_RETURN_NOTIMPLEMENTED;
}

PyObject* f_ceildiv(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Py_ssize_t k;
  if (nargs != 2 || !is_dim(args[0]) || !int_operand(args[1], &k)) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_TypeError, "dimtorch.ceildiv(): expected (Dim, int)");
    return nullptr;
  }
  return dim_derive(as_dim(args[0]), DimOp::kCeilDiv, k, nullptr, "dimtorch.ceildiv()");
}

PyNumberMethods dim_as_number = {};

PyMethodDef kFunctions[] = {
    {"ceildiv", DIMTORCH_OP(f_ceildiv),
     METH_FASTCALL, "ceildiv(dim, k): the dim of ceil(size / k) frames (strided conv/pool output)."},
    {nullptr}};

}  // namespace

void install_dim_math_slots(PyTypeObject* type) {
  dim_as_number.nb_add = dim_add;
  dim_as_number.nb_subtract = dim_sub;
  dim_as_number.nb_multiply = dim_mul;
  dim_as_number.nb_floor_divide = dim_floordiv;
  type->tp_as_number = &dim_as_number;
}

bool export_dim_math(PyObject* module) { return add_functions(module, kFunctions); }

/* Lengths of derived dims: computed on the host from the operands' by the Tensor ops (A + B's
   lengths may be over different batch dims: broadcast as binary ops do). */
namespace {

/// An operand of dim math as a number to compute with: its lengths (a Tensor, as int64: uint8 or int32
/// lengths would wrap in T - 1 or T * k) or its static size.
PyObject* operand_lengths(DimObject* a) {
  PyObject* lengths = dim_dyn_size(a);
  if (lengths) {
    TensorObject* lt = as_tensor(lengths);
    PyObject* dtype = backend::raw_dtype_name(lt->raw);
    if (!dtype) return nullptr;
    if (PyUnicode_CompareWithASCIIString(dtype, "int64") == 0) return Py_NewRef(lengths);
    PyObject* raw = backend::call2(backend::T.to, lt->raw, backend::T.int64);
    return raw ? tensor_make(raw, lt->dims, lt->sizes, nullptr, nullptr) : nullptr;
  }
  if (PyErr_Occurred()) return nullptr;
  if (a->size >= 0) return PyLong_FromSsize_t(a->size);
  PyErr_Format(PyExc_ValueError, "dimtorch dim math: %s takes its size from data; derived lengths need "
               "lengths or a static size", describe_dim(reinterpret_cast<PyObject*>(a)).c_str());
  return nullptr;
}

/// A reference to a borrowed operand `o`, or none when `o` is being deallocated (reference count 0).
Ref held_operand(DimObject* o) {
  PyObject* p = reinterpret_cast<PyObject*>(o);
  return p && Py_REFCNT(p) > 0 ? Ref::borrow(p) : Ref();
}

/// Whether a derived dim's lengths are >= 0 without clamping (operands' lengths are >= 0).
bool never_negative(DimObject* d) {
  switch (d->derive_op) {
    case DimOp::kAdd: return d->derive_k >= 0;
    case DimOp::kSub: return d->derive_k <= 0;
    case DimOp::kMul: case DimOp::kFloorDiv: case DimOp::kCeilDiv: return d->derive_k > 0;
    case DimOp::kConcat: return true;
    default: return false;
  }
}

}  // namespace

/// Host lengths of a derived dim from its operands' (int64, never below 0), by the Tensor ops.
PyObject* dim_derive_lengths(DimObject* d) {
  // The operands are borrowed (d's owner, and a weak target): held while torch computes, except the
  // one being deallocated (its dealloc detaches d, which computes d's lengths here: a reference taken
  // and dropped would deallocate it twice).
  Ref a_hold = held_operand(d->derive_a);
  Ref a(operand_lengths(d->derive_a));
  if (!a) return nullptr;
  Ref k(PyLong_FromSsize_t(d->derive_k));
  if (!k) return nullptr;
  Ref out;
  switch (d->derive_op) {
    case DimOp::kAdd: out = Ref(PyNumber_Add(a.get(), k.get())); break;
    case DimOp::kSub: out = Ref(PyNumber_Subtract(a.get(), k.get())); break;
    case DimOp::kMul: out = Ref(PyNumber_Multiply(a.get(), k.get())); break;
    case DimOp::kFloorDiv: out = Ref(PyNumber_FloorDivide(a.get(), k.get())); break;
    case DimOp::kCeilDiv: {  // (a + k - 1) // k: lengths are >= 0 and k > 0
      Ref k1(PyLong_FromSsize_t(d->derive_k - 1));
      Ref sum(k1 ? PyNumber_Add(a.get(), k1.get()) : nullptr);
      if (sum) out = Ref(PyNumber_FloorDivide(sum.get(), k.get()));
      break;
    }
    case DimOp::kConcat: {
      DimObject* b_dim = dim_derive_b(d);
      if (!b_dim) {
        PyErr_SetString(PyExc_RuntimeError, "dimtorch dim math: the second operand of A + B has died");
        return nullptr;
      }
      Ref b_hold = held_operand(b_dim);
      Ref b(operand_lengths(b_dim));
      if (!b) return nullptr;
      out = is_tensor(a.get()) && is_tensor(b.get())
                ? Ref(binary_op(Bin::kAdd, a.get(), b.get(), true, "dimtorch dim math"))
                : Ref(PyNumber_Add(a.get(), b.get()));
      break;
    }
    case DimOp::kNone:
      PyErr_SetString(PyExc_RuntimeError, "dimtorch dim math: not a derived dim");
      return nullptr;
  }
  if (!out) return nullptr;
  if (!is_tensor(out.get())) {
    PyErr_SetString(PyExc_TypeError, "dimtorch dim math: derived lengths must be a Tensor");
    return nullptr;
  }
  TensorObject* t = as_tensor(out.get());
  Ref raw = Ref::borrow(t->raw);
  if (!never_negative(d)) {
    raw = Ref(backend::call2(backend::T.clamp_min, raw.get(), backend::T.zero));
    if (!raw) return nullptr;
  }
  PyObject* dtype = backend::raw_dtype_name(raw.get());
  if (!dtype) return nullptr;
  if (PyUnicode_CompareWithASCIIString(dtype, "int64") != 0) {
    raw = Ref(backend::call2(backend::T.to, raw.get(), backend::T.int64));
    if (!raw) return nullptr;
  }
  return tensor_make(raw.release(), t->dims, t->sizes, nullptr, nullptr);
}

/// Host min and max of a derived dim's lengths from its operand's, where the op is monotone
/// (everything but A + B); false when they must be read from the lengths.
bool dim_derived_min_max(DimObject* d, Py_ssize_t* lo, Py_ssize_t* hi) {
  if (d->derive_op == DimOp::kConcat || d->derive_op == DimOp::kNone) return false;
  DimObject* a = d->derive_a;
  Py_ssize_t a_lo = dim_min_size(a), a_hi = dim_max_size(a), k = d->derive_k;
  if (a_lo < 0 || a_hi < 0 || (d->derive_op != DimOp::kAdd && d->derive_op != DimOp::kSub && k <= 0))
    return false;
  Py_ssize_t r_lo, r_hi;  // (an overflow: left to the lengths themselves)
  if (!static_result(d->derive_op, a_lo, k, 0, &r_lo) || !static_result(d->derive_op, a_hi, k, 0, &r_hi))
    return false;
  *lo = r_lo < 0 ? 0 : r_lo;
  *hi = r_hi < 0 ? 0 : r_hi;
  return true;
}

}  // namespace dimtorch
