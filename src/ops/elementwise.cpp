// Elementwise ops: Tensor number slots and comparisons, combine/compare/where/clip/cast, unary
// functions. Each aligns operands by dim identity and makes exactly the torch calls that
// hand-written PyTorch would make.
#include "ops/elementwise.h"

#include <utility>

#include "core/args.h"
#include "core/backend.h"
#include "core/definitions.h"
#include "core/dim.h"
#include "core/functions.h"
#include "core/message_dims.h"
#include "core/python_fallback.h"
#include "core/tensor.h"
#include "core/exports.h"

namespace dimtorch {

namespace {

const char* const kBinaryNames[2] = {"a", "b"};

bool is_comparison(Bin k) { return k >= Bin::kEq && k <= Bin::kGe; }
bool is_logical(Bin k) { return k == Bin::kLogicalAnd || k == Bin::kLogicalOr; }

bool is_scalar_operand(PyObject* o) {
  return PyFloat_Check(o) || PyLong_Check(o) || PyComplex_Check(o);
}

PyObject* as_raw_tensor(PyObject* v) {
  // torch's logical ops and maximum/minimum take tensors only; a 0-dim tensor broadcasts anywhere.
  if (backend::is_raw(v)) return Py_NewRef(v);
  return backend::call1(backend::T.as_tensor, v);
}

PyObject* raw_binary(Bin k, PyObject* a, PyObject* b) {
  using backend::T;
  switch (k) {
    case Bin::kAdd: return PyNumber_Add(a, b);
    case Bin::kSub: return PyNumber_Subtract(a, b);
    case Bin::kMul: return PyNumber_Multiply(a, b);
    case Bin::kTrueDiv: return PyNumber_TrueDivide(a, b);
    case Bin::kFloorDiv: return PyNumber_FloorDivide(a, b);
    case Bin::kMod: return PyNumber_Remainder(a, b);
    case Bin::kPow: return PyNumber_Power(a, b, Py_None);
    case Bin::kBitAnd: return PyNumber_And(a, b);
    case Bin::kBitOr: return PyNumber_Or(a, b);
    case Bin::kBitXor: return PyNumber_Xor(a, b);
    case Bin::kEq: return PyObject_RichCompare(a, b, Py_EQ);
    case Bin::kNe: return PyObject_RichCompare(a, b, Py_NE);
    case Bin::kLt: return PyObject_RichCompare(a, b, Py_LT);
    case Bin::kLe: return PyObject_RichCompare(a, b, Py_LE);
    case Bin::kGt: return PyObject_RichCompare(a, b, Py_GT);
    case Bin::kGe: return PyObject_RichCompare(a, b, Py_GE);
    case Bin::kMaximum:
    case Bin::kMinimum: {
      bool max = k == Bin::kMaximum;
      // With a scalar, clamp is the one-call equivalent (torch.maximum takes tensors only).
      if (!backend::is_raw(a)) return backend::call2(max ? T.clamp_min : T.clamp_max, b, a);
      if (!backend::is_raw(b)) return backend::call2(max ? T.clamp_min : T.clamp_max, a, b);
      return backend::call2(max ? T.maximum : T.minimum, a, b);
    }
    case Bin::kLogicalAnd:
    case Bin::kLogicalOr:
    case Bin::kLogAddExp: {
      Ref ra(as_raw_tensor(a));
      if (!ra) return nullptr;
      Ref rb(as_raw_tensor(b));
      if (!rb) return nullptr;
      PyObject* fn = k == Bin::kLogicalAnd ? T.logical_and : k == Bin::kLogicalOr ? T.logical_or : T.logaddexp;
      return backend::call2(fn, ra.get(), rb.get());
    }
    case Bin::kSquaredDifference: {
      Ref diff(PyNumber_Subtract(a, b));
      if (!diff) return nullptr;
      return backend::call1(T.unary[backend::kSquare], diff.get());
    }
  }
  PyErr_SetString(PyExc_SystemError, "dimtorch: unknown binary op");
  return nullptr;
}

PyObject* bad_operand(PyObject* o, const char* caller) {
  if (is_template(o)) return need_tensor(o, "an operand", caller);  // (a template: says so)
  if (backend::is_raw(o))
    PyErr_Format(PyExc_TypeError,
                 "%s: operand is a raw torch.Tensor of shape %S; wrap it with its dims: "
                 "dimtorch.Tensor(raw, dims=(...))",
                 caller, Ref(PyObject_GetAttr(o, backend::T.s_shape)).get());
  else
    PyErr_Format(PyExc_TypeError,
                 "%s: operands must be dimtorch.Tensor or Python scalars (bool, int, float, "
                 "complex), got %.100s",
                 caller, Py_TYPE(o)->tp_name);
  return nullptr;
}

/// Error for an argument that must be a Tensor (a Python scalar is no help there).
PyObject* not_a_tensor(PyObject* o, const char* caller) {
  if (backend::is_raw(o) || is_template(o)) return bad_operand(o, caller);
  PyErr_Format(PyExc_TypeError, "%s: expected a dimtorch.Tensor, got %.100s", caller,
               Py_TYPE(o)->tp_name);
  return nullptr;
}

PyObject* cleared_raw(const char* caller) {
  PyErr_Format(PyExc_RuntimeError, "%s: the Tensor's raw was cleared by the garbage collector",
               caller);
  return nullptr;
}

PyObject* wrap_like(PyObject* raw, TensorObject* t, bool keep_sparse, const char* caller) {
  if (!raw) return backend::name_error(caller);
  return tensor_make(raw, t->dims, t->sizes, keep_sparse ? t->sparse_dim : nullptr,
                     t->feature_dim);
}

}  // namespace

bool align_operands(PyObject* const* ops, int n, bool allow_bc, bool allow_none,
                    const char* caller, const char* const* names, Aligned* out) {
  TensorObject* ts[kMaxOperands];
  PyObject* dims[kMaxOperands];
  const char* tnames[kMaxOperands];
  int map[kMaxOperands];
  int nt = 0;
  for (int i = 0; i < n; ++i) {
    PyObject* o = ops[i];
    if (is_tensor(o)) {
      ts[nt] = as_tensor(o);
      if (!ts[nt]->raw) return cleared_raw(caller) != nullptr;
      dims[nt] = ts[nt]->dims;
      tnames[nt] = names[i];
      map[nt++] = i;
    } else if (!is_scalar_operand(o) && !(allow_none && o == Py_None)) {
      return bad_operand(o, caller) != nullptr;
    }
  }
  if (nt == 0) {
    PyErr_Format(PyExc_TypeError, "%s: at least one operand must be a dimtorch.Tensor", caller);
    return false;
  }
  for (int i = 0; i < n; ++i) out->args[i] = Ref::borrow(ops[i]);
  PyObject* sparse = ts[0]->sparse_dim;
  PyObject* feature = nullptr;
  for (int j = 0; j < nt; ++j) {
    if (ts[j]->sparse_dim != sparse) sparse = nullptr;
    if (!feature) feature = ts[j]->feature_dim;
  }
  out->sparse_dim = sparse;
  if (nt == 1) {
    out->out_dims = dims[0];
    out->n_out = static_cast<int>(tensor_ndim(ts[0]));
    for (int k = 0; k < out->n_out; ++k) out->sizes[k] = ts[0]->sizes[k];
    out->args[map[0]] = Ref::borrow(ts[0]->raw);
    out->feature_dim = feature;
    return true;
  }
  Plan* p = plan_get(dims, nt, allow_bc, caller, tnames);
  if (!p) return false;
  out->plan.p = p;
  if (!plan_check_sizes(p, ts, caller, tnames)) return false;
  for (int j = 0; j < nt; ++j) {
    out->args[map[j]] = Ref(plan_align_raw(p, j, ts[j]));
    if (!out->args[map[j]]) return false;
  }
  if (p->holder >= 0) {
    out->out_dims = dims[p->holder];
  } else {
    out->out_dims_owned = Ref(plan_out_dims(p, ts));
    if (!(out->out_dims = out->out_dims_owned.get())) return false;
  }
  out->n_out = p->out_ndim;
  for (int k = 0; k < p->out_ndim; ++k) out->sizes[k] = ts[p->size_op[k]]->sizes[p->size_axis[k]];
  if (p->holder >= 0 && ts[p->holder]->feature_dim) feature = ts[p->holder]->feature_dim;
  out->feature_dim = feature;
  return true;
}

/* RETURNN frontend's rule for operators: they broadcast over all sources (its combine_bc), which
   RETURNN code relies on (beam searches: (beam, batch) + (batch, vocab)). dimtorch's own rule refuses
   that (usually a bug); dimtorch.rf turns this on. Read only on the error path of an outer broadcast:
   no cost where an operand holds all dims. Two different Dims of one name stay an error (a product
   of the two axes is never what such code means). */
static bool g_operators_broadcast_all = false;

/// After plan_get failed for `dims` without permission: whether the process rule allows this outer
/// broadcast (then the error is cleared and the caller builds the plan with permission).
static bool outer_broadcast_by_rule(PyObject* const* dims, int n) {
  if (!g_operators_broadcast_all || !PyErr_ExceptionMatches(PyExc_ValueError)) return false;
  if (!MessageDims(dims, n).namesakes_note().empty()) return false;
  PyErr_Clear();
  return true;
}

static PyObject* f_set_operators_broadcast_all_sources(PyObject*, PyObject* arg) {
  int on = PyObject_IsTrue(arg);
  if (on < 0) return nullptr;
  bool previous = g_operators_broadcast_all;
  g_operators_broadcast_all = on != 0;
  return PyBool_FromLong(previous);
}

static PyObject* f_operators_broadcast_all_sources(PyObject*, PyObject*) {
  return PyBool_FromLong(g_operators_broadcast_all);
}

PyObject* binary_op(Bin k, PyObject* a, PyObject* b, bool allow_bc, const char* caller, bool by_rule) {
  bool keep_sparse = !is_comparison(k) && !is_logical(k);
  if (is_tensor(a) && is_tensor(b)) {
    TensorObject* ta = as_tensor(a);
    TensorObject* tb = as_tensor(b);
    if (!ta->raw || !tb->raw) return cleared_raw(caller);
    if (same_dims(ta->dims, tb->dims)) {
      /* Same dims in the same order (the common case inside a model, where results share their
         operand's tuple): no alignment, only the sizes of dims that are not static can differ. */
      for (Py_ssize_t i = 0; i < tensor_ndim(ta); ++i)
        if (ta->sizes[i] != tb->sizes[i]) {
          PyErr_Format(PyExc_ValueError, "%s: dim %s has raw size %zd in a but %zd in b (dims: %s)",
                       caller, describe_dim(PyTuple_GET_ITEM(ta->dims, i)).c_str(), ta->sizes[i],
                       tb->sizes[i], describe_dims(ta->dims, nullptr).c_str());
          return nullptr;
        }
      PyObject* raw = raw_binary(k, ta->raw, tb->raw);
      if (!raw) return backend::name_error(caller);
      bool same_sparse = keep_sparse && ta->sparse_dim == tb->sparse_dim;
      return tensor_make(raw, ta->dims, ta->sizes, same_sparse ? ta->sparse_dim : nullptr,
                         ta->feature_dim ? ta->feature_dim : tb->feature_dim);
    }
    // The two-operand path of align_operands, written out: it is the hottest one.
    PyObject* dims[2] = {ta->dims, tb->dims};
    Plan* p = plan_get(dims, 2, allow_bc, caller, kBinaryNames);
    if (!p && (!by_rule || allow_bc || !outer_broadcast_by_rule(dims, 2) ||
               !(p = plan_get(dims, 2, true, caller, kBinaryNames))))
      return nullptr;
    PlanRef hold(p);
    TensorObject* ts[2] = {ta, tb};
    if (p->n_checks && !plan_check_sizes(p, ts, caller, kBinaryNames)) return nullptr;
    Ref ra(plan_align_raw(p, 0, ta));
    if (!ra) return nullptr;
    Ref rb(plan_align_raw(p, 1, tb));
    if (!rb) return nullptr;
    PyObject* raw = raw_binary(k, ra.get(), rb.get());
    if (!raw) return backend::name_error(caller);
    Py_ssize_t sizes[kMaxDims];
    for (int i = 0; i < p->out_ndim; ++i) sizes[i] = ts[p->size_op[i]]->sizes[p->size_axis[i]];
    TensorObject* holder = p->holder >= 0 ? ts[p->holder] : nullptr;
    PyObject* feature = holder && holder->feature_dim ? holder->feature_dim
                        : ta->feature_dim               ? ta->feature_dim
                                                        : tb->feature_dim;
    bool same_sparse = keep_sparse && ta->sparse_dim == tb->sparse_dim;
    Ref owned_dims;  // the output dims, when no operand has them all (an allowed outer broadcast)
    if (!holder && !(owned_dims = Ref(plan_out_dims(p, ts)))) {
      Py_DECREF(raw);
      return nullptr;
    }
    return tensor_make(raw, holder ? holder->dims : owned_dims.get(), sizes,
                       same_sparse ? ta->sparse_dim : nullptr, feature);
  }
  if (is_tensor(a) && is_scalar_operand(b)) {
    TensorObject* ta = as_tensor(a);
    if (!ta->raw) return cleared_raw(caller);
    return wrap_like(raw_binary(k, ta->raw, b), ta, keep_sparse, caller);
  }
  if (is_tensor(b) && is_scalar_operand(a)) {
    TensorObject* tb = as_tensor(b);
    if (!tb->raw) return cleared_raw(caller);
    return wrap_like(raw_binary(k, a, tb->raw), tb, keep_sparse, caller);
  }
  if (!is_tensor(a) && !is_tensor(b) && is_scalar_operand(a) && is_scalar_operand(b)) {
    PyErr_Format(PyExc_TypeError, "%s: at least one operand must be a dimtorch.Tensor", caller);
    return nullptr;
  }
  return bad_operand(is_tensor(a) ? b : a, caller);
}

namespace {

// ---- number slots -------------------------------------------------------------------------

/* A traced operand (make_fx, torch.export) sends the operator to its Python definition in the
   type dict: Tensor.__add__(a, b), or Tensor.__radd__(b, a) when the Tensor is on the right. */
PyObject* slot_definition(const char* name, const char* rname, PyObject* a, PyObject* b) {
  PyObject* args[2] = {a, b};
  if (is_tensor_type(a)) return call_definition(name, args, 2, nullptr);
  PyObject* reflected[2] = {b, a};
  return call_definition(rname, reflected, 2, nullptr);
}

#define DIMTORCH_BINARY_SLOT(fn, kind, pyname)                                      \
  PyObject* fn(PyObject* a, PyObject* b) {                                          \
    if (is_traced_tensor(a) || is_traced_tensor(b))                                 \
      return slot_definition("Tensor.__" pyname "__", "Tensor.__r" pyname "__", a, b); \
    return binary_op(kind, a, b, false, "dimtorch.Tensor.__" pyname "__()", true);  \
  }
DIMTORCH_BINARY_SLOT(slot_add, Bin::kAdd, "add")
DIMTORCH_BINARY_SLOT(slot_sub, Bin::kSub, "sub")
DIMTORCH_BINARY_SLOT(slot_mul, Bin::kMul, "mul")
DIMTORCH_BINARY_SLOT(slot_truediv, Bin::kTrueDiv, "truediv")
DIMTORCH_BINARY_SLOT(slot_floordiv, Bin::kFloorDiv, "floordiv")
DIMTORCH_BINARY_SLOT(slot_mod, Bin::kMod, "mod")
DIMTORCH_BINARY_SLOT(slot_and, Bin::kBitAnd, "and")
DIMTORCH_BINARY_SLOT(slot_or, Bin::kBitOr, "or")
DIMTORCH_BINARY_SLOT(slot_xor, Bin::kBitXor, "xor")
#undef DIMTORCH_BINARY_SLOT

PyObject* slot_pow(PyObject* a, PyObject* b, PyObject* mod) {
  if (mod != Py_None) {
    PyErr_SetString(PyExc_TypeError, "dimtorch.Tensor.__pow__(): a modulus is not supported");
    return nullptr;
  }
  if (is_traced_tensor(a) || is_traced_tensor(b))
    return slot_definition("Tensor.__pow__", "Tensor.__rpow__", a, b);
  return binary_op(Bin::kPow, a, b, false, "dimtorch.Tensor.__pow__()", true);
}

PyObject* unary_slot(PyObject* self, PyObject* (*fn)(PyObject*), bool keep_sparse) {
  if (!is_tensor(self)) return bad_operand(self, "dimtorch.Tensor");
  TensorObject* t = as_tensor(self);
  if (!t->raw) return cleared_raw("dimtorch.Tensor");
  return wrap_like(fn(t->raw), t, keep_sparse, "dimtorch.Tensor");
}
PyObject* unary_definition(const char* name, PyObject* self) {
  return call_definition(name, &self, 1, nullptr);
}
PyObject* slot_neg(PyObject* self) {
  if (is_traced_tensor(self)) return unary_definition("Tensor.__neg__", self);
  return unary_slot(self, PyNumber_Negative, false);
}
PyObject* slot_abs(PyObject* self) {
  if (is_traced_tensor(self)) return unary_definition("Tensor.__abs__", self);
  return unary_slot(self, PyNumber_Absolute, false);
}
PyObject* slot_invert(PyObject* self) {
  if (is_traced_tensor(self)) return unary_definition("Tensor.__invert__", self);
  return unary_slot(self, PyNumber_Invert, false);
}
PyObject* slot_pos(PyObject* self) { return Py_NewRef(self); }

PyObject* slot_richcompare(PyObject* a, PyObject* b, int op) {
  static const Bin kinds[] = {Bin::kLt, Bin::kLe, Bin::kEq, Bin::kNe, Bin::kGt, Bin::kGe};
  static const char* const names[] = {
      "dimtorch.Tensor.__lt__()", "dimtorch.Tensor.__le__()", "dimtorch.Tensor.__eq__()",
      "dimtorch.Tensor.__ne__()", "dimtorch.Tensor.__gt__()", "dimtorch.Tensor.__ge__()"};
  static const char* const definitions[] = {"Tensor.__lt__", "Tensor.__le__", "Tensor.__eq__",
                                            "Tensor.__ne__", "Tensor.__gt__", "Tensor.__ge__"};
  if (is_traced_tensor(a) || is_traced_tensor(b)) {
    PyObject* args[2] = {a, b};
    return call_definition(definitions[op], args, 2, nullptr);
  }
  return binary_op(kinds[op], a, b, false, names[op], true);
}

// ---- module functions -------------------------------------------------------------------

struct KindName {
  const char* name;
  Bin kind;
};
const KindName kCombineKinds[] = {
    {"add", Bin::kAdd}, {"+", Bin::kAdd}, {"sub", Bin::kSub}, {"-", Bin::kSub},
    {"mul", Bin::kMul}, {"*", Bin::kMul}, {"truediv", Bin::kTrueDiv}, {"/", Bin::kTrueDiv},
    {"floordiv", Bin::kFloorDiv}, {"//", Bin::kFloorDiv}, {"mod", Bin::kMod}, {"%", Bin::kMod},
    {"pow", Bin::kPow}, {"**", Bin::kPow}, {"maximum", Bin::kMaximum}, {"max", Bin::kMaximum},
    {"minimum", Bin::kMinimum}, {"min", Bin::kMinimum}, {"logical_and", Bin::kLogicalAnd},
    {"logical_or", Bin::kLogicalOr}, {"bitwise_and", Bin::kBitAnd}, {"bitwise_or", Bin::kBitOr},
    {"bitwise_xor", Bin::kBitXor}, {"squared_difference", Bin::kSquaredDifference},
    {"logaddexp", Bin::kLogAddExp}};
const KindName kCompareKinds[] = {
    {"equal", Bin::kEq}, {"==", Bin::kEq}, {"not_equal", Bin::kNe}, {"!=", Bin::kNe},
    {"less", Bin::kLt}, {"<", Bin::kLt}, {"less_equal", Bin::kLe}, {"<=", Bin::kLe},
    {"greater", Bin::kGt}, {">", Bin::kGt}, {"greater_equal", Bin::kGe}, {">=", Bin::kGe}};

template <size_t N>
bool lookup_kind(const KindName (&table)[N], PyObject* kind, Bin* out, const char* caller) {
  if (!PyUnicode_Check(kind)) {
    PyErr_Format(PyExc_TypeError, "%s: kind must be a str, got %.80s", caller,
                 Py_TYPE(kind)->tp_name);
    return false;
  }
  for (const auto& e : table)
    if (PyUnicode_CompareWithASCIIString(kind, e.name) == 0) {
      *out = e.kind;
      return true;
    }
  std::string known;
  for (const auto& e : table) known += std::string(known.empty() ? "" : ", ") + e.name;
  PyErr_Format(PyExc_ValueError, "%s: unknown kind %R (known: %s)", caller, kind, known.c_str());
  return false;
}

/// combine(a, b, kind) or RETURNN frontend's order combine(a, kind, b): the str is the kind (a and b
/// are Tensors or numbers). dim_order goes to the definition.
template <size_t N>
PyObject* combine_like(const KindName (&table)[N], PyObject* const* args, Py_ssize_t nargs,
                       PyObject* kwnames, const char* caller, const char* op) {
  static const char* const names[] = {"a", "b", "kind", "allow_broadcast_all_sources", "dim_order"};
  PyObject* v[5];
  if (!parse_args(args, nargs, kwnames, names, 5, 3, 3, v, caller, 3)) return nullptr;
  if (v[4] && v[4] != Py_None) return call_definition(op, args, nargs, kwnames);
  if (PyUnicode_Check(v[1]) && !PyUnicode_Check(v[2])) std::swap(v[1], v[2]);
  Bin k;
  if (!lookup_kind(table, v[2], &k, caller)) return nullptr;
  int allow = flag_arg(v[3], 0, caller, "allow_broadcast_all_sources");
  if (allow < 0) return nullptr;
  return binary_op(k, v[0], v[1], allow, caller, !v[3] || v[3] == Py_None);
}

PyObject* f_combine(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return combine_like(kCombineKinds, args, nargs, kwnames, "dimtorch.combine()", "combine");
}
PyObject* f_compare(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return combine_like(kCompareKinds, args, nargs, kwnames, "dimtorch.compare()", "compare");
}

template <Bin K>
PyObject* f_binary(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"a", "b", "allow_broadcast_all_sources"};
  const char* caller = K == Bin::kMaximum              ? "dimtorch.maximum()"
                       : K == Bin::kMinimum            ? "dimtorch.minimum()"
                       : K == Bin::kLogicalAnd         ? "dimtorch.logical_and()"
                       : K == Bin::kSquaredDifference  ? "dimtorch.squared_difference()"
                       : K == Bin::kLogAddExp          ? "dimtorch.log_add_exp()"
                                                       : "dimtorch.logical_or()";
  PyObject* v[3];
  if ((K == Bin::kMaximum || K == Bin::kMinimum) && PyVectorcall_NARGS(nargs) > 2)  // rf's *other_tensors
    return call_definition(K == Bin::kMaximum ? "maximum" : "minimum", args, nargs, kwnames);
  if (!parse_args(args, nargs, kwnames, names, 3, 2, 2, v, caller)) return nullptr;
  int allow = flag_arg(v[2], 0, caller, "allow_broadcast_all_sources");
  if (allow < 0) return nullptr;
  return binary_op(K, v[0], v[1], allow, caller);
}

PyObject* f_where(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* caller = "dimtorch.where()";
  static const char* const names[] = {"condition", "true_value", "false_value",
                                      "allow_broadcast_all_sources"};
  PyObject* v[4];
  if (!parse_args(args, nargs, kwnames, names, 4, 3, 3, v, caller, 3)) return nullptr;
  int allow = flag_arg(v[3], 0, caller, "allow_broadcast_all_sources");
  if (allow < 0) return nullptr;
  if (!is_tensor(v[0])) {
    if (backend::is_raw(v[0])) return bad_operand(v[0], caller);
    PyErr_Format(PyExc_TypeError, "%s: condition must be a bool dimtorch.Tensor, got %.80s",
                 caller, Py_TYPE(v[0])->tp_name);
    return nullptr;
  }
  Aligned al;
  if (!align_operands(v, 3, allow, false, caller, names, &al)) return nullptr;
  PyObject* raw = backend::call3(backend::T.where, al.args[0].get(), al.args[1].get(),
                                 al.args[2].get());
  if (!raw) return nullptr;
  // The values' sparse dim survives when both values share it (the condition has none).
  PyObject* sparse = nullptr;
  PyObject* sa = is_tensor(v[1]) ? as_tensor(v[1])->sparse_dim : nullptr;
  PyObject* sb = is_tensor(v[2]) ? as_tensor(v[2])->sparse_dim : nullptr;
  if (sa && (sa == sb || !is_tensor(v[2]))) sparse = sa;
  else if (sb && !is_tensor(v[1])) sparse = sb;
  return tensor_make(raw, al.out_dims, al.sizes, sparse, al.feature_dim);
}

PyObject* f_clip(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* caller = "dimtorch.clip()";
  static const char* const names[] = {"x", "min", "max", "allow_broadcast_all_sources"};
  PyObject* v[4];
  if (!parse_args(args, nargs, kwnames, names, 4, 3, 1, v, caller)) return nullptr;
  PyObject* ops[3] = {v[0], v[1] ? v[1] : Py_None, v[2] ? v[2] : Py_None};
  if (!is_tensor(ops[0])) return not_a_tensor(ops[0], caller);
  if (ops[1] == Py_None && ops[2] == Py_None) {
    PyErr_Format(PyExc_ValueError, "%s: give min, max or both (both are None)", caller);
    return nullptr;
  }
  int allow = flag_arg(v[3], 0, caller, "allow_broadcast_all_sources");
  if (allow < 0) return nullptr;
  Aligned al;
  if (!align_operands(ops, 3, allow, true, caller, names, &al)) return nullptr;
  PyObject* lo = al.args[1].get();
  PyObject* hi = al.args[2].get();
  PyObject* raw;
  /* torch.clamp takes two tensor bounds or two number bounds, not one of each; a mixed pair is
     applied in clamp's order (min first, then max), so min > max still gives max. */
  if (is_tensor(ops[1]) && is_scalar_operand(ops[2])) {
    Ref r(backend::call3(backend::T.clamp, al.args[0].get(), lo, Py_None));
    raw = r ? backend::call2(backend::T.clamp_max, r.get(), hi) : nullptr;
  } else if (is_scalar_operand(ops[1]) && is_tensor(ops[2])) {
    Ref r(backend::call2(backend::T.clamp_min, al.args[0].get(), lo));
    raw = r ? backend::call3(backend::T.clamp, r.get(), Py_None, hi) : nullptr;
  } else {
    raw = backend::call3(backend::T.clamp, al.args[0].get(), lo, hi);
  }
  if (!raw) return nullptr;
  return tensor_make(raw, al.out_dims, al.sizes, as_tensor(v[0])->sparse_dim, al.feature_dim);
}

DIMTORCH_PYTHON_FALLBACK(lerp_fallback, "lerp")

/// lerp(start, end, weight, *, allow_broadcast_all_sources=False): the fast path takes the common call,
/// two Tensors over the same dims with one raw shape and float dtype and a float weight: one torch.lerp.
/// All else (alignment, Tensor or int weights, other dtypes, errors) goes to the Python definition.
PyObject* f_lerp(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"start", "end", "weight", "allow_broadcast_all_sources"};
  PyObject* v[4];
  if (!parse_args(args, nargs, kwnames, names, 4, 3, 3, v, "dimtorch.lerp()")) {
    PyErr_Clear();
    return lerp_fallback(args, nargs, kwnames);
  }
  if (!is_tensor(v[0]) || !is_tensor(v[1]) || !PyFloat_CheckExact(v[2]) || (v[3] && !PyBool_Check(v[3])))
    return lerp_fallback(args, nargs, kwnames);
  TensorObject* a = as_tensor(v[0]);
  TensorObject* b = as_tensor(v[1]);
  if (!a->raw || !b->raw || tensor_ndim(a) != tensor_ndim(b)) return lerp_fallback(args, nargs, kwnames);
  for (Py_ssize_t i = 0; i < tensor_ndim(a); ++i)
    if (PyTuple_GET_ITEM(a->dims, i) != PyTuple_GET_ITEM(b->dims, i) || a->sizes[i] != b->sizes[i])
      return lerp_fallback(args, nargs, kwnames);
  PyObject* dtype = backend::raw_dtype_name(a->raw);
  if (!dtype) return nullptr;
  PyObject* dtype_b = backend::raw_dtype_name(b->raw);
  if (!dtype_b) return nullptr;
  if (dtype != dtype_b || !backend::is_floating_dtype_name(dtype)) return lerp_fallback(args, nargs, kwnames);
  PyObject* raw = backend::call3(backend::T.lerp, a->raw, b->raw, v[2]);
  if (!raw) return nullptr;
  return tensor_make(raw, a->dims, a->sizes, nullptr, a->feature_dim ? a->feature_dim : b->feature_dim);
}

PyObject* f_cast(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* caller = "dimtorch.cast()";
  static const char* const names[] = {"x", "dtype"};
  PyObject* v[2];
  if (!parse_args(args, nargs, kwnames, names, 2, 2, 2, v, caller, 1)) return nullptr;
  if (!is_tensor(v[0])) return not_a_tensor(v[0], caller);
  TensorObject* t = as_tensor(v[0]);
  if (!t->raw) return cleared_raw(caller);
  PyObject* dtype = backend::dtype_from(v[1], caller);
  if (!dtype) return nullptr;
  PyObject* name = backend::dtype_name(dtype);
  if (!name) return nullptr;
  PyObject* raw = backend::call2(backend::T.to, t->raw, dtype);
  if (!raw) return nullptr;
  return tensor_make(raw, t->dims, t->sizes,
                     backend::is_integer_dtype_name(name) ? t->sparse_dim : nullptr,
                     t->feature_dim);
}

template <backend::Unary U>
PyObject* f_unary(PyObject*, PyObject* x) {
  static std::string caller = std::string("dimtorch.") + backend::kUnaryNames[U] + "()";
  if (!is_tensor(x)) return not_a_tensor(x, caller.c_str());
  TensorObject* t = as_tensor(x);
  if (!t->raw) return cleared_raw("dimtorch");
  return wrap_like(backend::call1(backend::T.unary[U], t->raw), t, false, caller.c_str());
}

template <int... I>
struct UnaryTable {
  // Named<f>::call has PyCFunction's own signature here (METH_O): no cast, so constexpr.
  static constexpr PyCFunction fns[] = {&Named<f_unary<static_cast<backend::Unary>(I)>>::call...};
};
template <int... I>
UnaryTable<I...> make_unary_table(std::integer_sequence<int, I...>) {
  return {};
}
using Unaries = decltype(make_unary_table(std::make_integer_sequence<int, backend::kNumUnary>()));

#define FASTCALL(fn) DIMTORCH_OP(fn)
PyMethodDef kFunctions[] = {
    {"combine", FASTCALL(f_combine), METH_FASTCALL | METH_KEYWORDS,
     "combine(a, b, kind, /, *, allow_broadcast_all_sources=None, dim_order=None): elementwise a <kind> b "
     "aligned by dims (RETURNN frontend's order a, kind, b works too). "
     "kind: add, sub, mul, truediv, floordiv, mod, pow, maximum, minimum, logical_and, "
     "logical_or, bitwise_and/or/xor, squared_difference, logaddexp (or the operator symbol)."},
    {"compare", FASTCALL(f_compare), METH_FASTCALL | METH_KEYWORDS,
     "compare(a, b, kind, /, *, allow_broadcast_all_sources=None, dim_order=None): bool Tensor (RETURNN "
     "frontend's order a, kind, b works too). kind: equal, "
     "not_equal, less, less_equal, greater, greater_equal (or ==, !=, <, <=, >, >=)."},
    {"maximum", FASTCALL(f_binary<Bin::kMaximum>), METH_FASTCALL | METH_KEYWORDS,
     "maximum(a, b, *other_tensors): elementwise maximum, aligned by dims."},
    {"minimum", FASTCALL(f_binary<Bin::kMinimum>), METH_FASTCALL | METH_KEYWORDS,
     "minimum(a, b, *other_tensors): elementwise minimum, aligned by dims."},
    {"logical_and", FASTCALL(f_binary<Bin::kLogicalAnd>), METH_FASTCALL | METH_KEYWORDS,
     "logical_and(a, b)"},
    {"logical_or", FASTCALL(f_binary<Bin::kLogicalOr>), METH_FASTCALL | METH_KEYWORDS,
     "logical_or(a, b)"},
    {"squared_difference", FASTCALL(f_binary<Bin::kSquaredDifference>), METH_FASTCALL | METH_KEYWORDS,
     "squared_difference(a, b): (a - b) ** 2 elementwise, aligned by dims (rf.squared_difference)."},
    {"log_add_exp", FASTCALL(f_binary<Bin::kLogAddExp>), METH_FASTCALL | METH_KEYWORDS,
     "log_add_exp(a, b): log(exp(a) + exp(b)) elementwise, stable (torch.logaddexp), aligned by dims."},
    {"where", FASTCALL(f_where), METH_FASTCALL | METH_KEYWORDS,
     "where(condition, true_value, false_value, /, *, allow_broadcast_all_sources=False): values "
     "may be Tensors or Python scalars."},
    {"clip", FASTCALL(f_clip), METH_FASTCALL | METH_KEYWORDS,
     "clip(x, min=None, max=None): torch.clamp with bounds aligned by dims."},
    {"lerp", FASTCALL(f_lerp), METH_FASTCALL | METH_KEYWORDS,
     "lerp(start, end, weight, *, allow_broadcast_all_sources=False) -> tensor: see "
     "dimtorch.ops.elementwise.lerp."},
    {"_set_operators_broadcast_all_sources", DIMTORCH_OP(f_set_operators_broadcast_all_sources), METH_O,
     "_set_operators_broadcast_all_sources(on) -> previous: whether Tensor's operators (and combine/"
     "compare without allow_broadcast_all_sources) broadcast over all sources (RETURNN's rule)."},
    {"_operators_broadcast_all_sources", DIMTORCH_OP(f_operators_broadcast_all_sources), METH_NOARGS,
     "_operators_broadcast_all_sources() -> bool: see _set_operators_broadcast_all_sources."},
    {"cast", FASTCALL(f_cast), METH_FASTCALL | METH_KEYWORDS,
     "cast(x, /, dtype): x with the raw converted to dtype (name or torch.dtype)."},
    {nullptr}};
#undef FASTCALL

}  // namespace

void install_elementwise_slots(PyTypeObject* type) {
  PyNumberMethods* nb = type->tp_as_number;
  nb->nb_add = slot_add;
  nb->nb_subtract = slot_sub;
  nb->nb_multiply = slot_mul;
  nb->nb_true_divide = slot_truediv;
  nb->nb_floor_divide = slot_floordiv;
  nb->nb_remainder = slot_mod;
  nb->nb_power = slot_pow;
  nb->nb_and = slot_and;
  nb->nb_or = slot_or;
  nb->nb_xor = slot_xor;
  nb->nb_negative = slot_neg;
  nb->nb_absolute = slot_abs;
  nb->nb_invert = slot_invert;
  nb->nb_positive = slot_pos;
  type->tp_richcompare = slot_richcompare;
}

bool export_ops_elementwise(PyObject* module) {
  if (!add_functions(module, kFunctions)) return false;
  static PyMethodDef unary_defs[backend::kNumUnary + 1];
  for (int i = 0; i < backend::kNumUnary; ++i)
    unary_defs[i] = {backend::kUnaryNames[i], Unaries::fns[i], METH_O,
                     "Elementwise op on the raw; same dims."};
  unary_defs[backend::kNumUnary] = {nullptr};
  return add_functions(module, unary_defs);
}

}  // namespace dimtorch
