// Dim math: T + k, T - k, T * k, T // k, ceildiv(T, k), A + B. Results are cached on the left
// operand, so the same expression twice gives the same Dim; lengths are derived lazily on the host.
#include "backend.h"
#include "dim.h"
#include "functions.h"

namespace dimtorch {

namespace {

const char* const kOpSymbols[] = {"", "+", "-", "*", "//", "ceildiv", "+"};

Py_ssize_t static_result(DimOp op, Py_ssize_t a, Py_ssize_t k, Py_ssize_t b) {
  switch (op) {
    case DimOp::kAdd: return a + k;
    case DimOp::kSub: return a - k;
    case DimOp::kMul: return a * k;
    case DimOp::kFloorDiv: return a / k;
    case DimOp::kCeilDiv: return (a + k - 1) / k;
    case DimOp::kConcat: return a + b;
    case DimOp::kNone: break;
  }
  return a;
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
  if (op == DimOp::kAdd && k < 0) return dim_derive(a, DimOp::kSub, -k, b, caller);
  if (op == DimOp::kSub && k < 0) return dim_derive(a, DimOp::kAdd, -k, b, caller);
  /* A chain of one op folds into one step, so (T + 1) + 2 is T + 3, as RETURNN simplifies dim
     math. Mixed chains stay as they are: (T - 3) + 1 differs from T - 2 where lengths hit 0. */
  if (!b && op != DimOp::kConcat && a->derive_op == op) {
    bool additive = op == DimOp::kAdd || op == DimOp::kSub;
    return dim_derive(as_dim(a->derive_a), op, additive ? a->derive_k + k : a->derive_k * k,
                      nullptr, caller);
  }
  if (a->size >= 0 && op == DimOp::kSub && a->size < k) {
    PyErr_Format(PyExc_ValueError, "%s: %s - %zd would have a negative size", caller,
                 describe_dim(self).c_str(), k);
    return nullptr;
  }
  if (op == DimOp::kConcat) {
    bool a_from_data = a->size < 0 && !dim_has_lengths(a);
    bool b_from_data = b->size < 0 && !dim_has_lengths(b);
    if (a_from_data != b_from_data) {
      PyErr_Format(PyExc_ValueError,
                   "%s: %s + %s: a dim whose size comes from data has neither a static size nor "
                   "lengths to add",
                   caller, describe_dim(self).c_str(),
                   describe_dim(reinterpret_cast<PyObject*>(b)).c_str());
      return nullptr;
    }
  }
  if (!a->cache) {
    a->cache = PyDict_New();
    if (!a->cache) return nullptr;
  }
  /* Cached strongly on the operand: a derived dim made again and again (pad, conv in a loop) keeps
     its lengths and masks. The operand and its derived dims form a cycle, which the cyclic
     collector frees once nothing else holds them. */
  // (op, k) or (op, b), built directly: Py_BuildValue's format parsing was half of a cache hit.
  Ref key(PyTuple_New(2));
  if (!key) return nullptr;
  PyObject* op_obj = PyLong_FromLong(static_cast<long>(op));
  PyObject* arg_obj = op == DimOp::kConcat ? Py_NewRef(reinterpret_cast<PyObject*>(b)) : PyLong_FromSsize_t(k);
  if (op_obj) PyTuple_SET_ITEM(key.get(), 0, op_obj);
  if (arg_obj) PyTuple_SET_ITEM(key.get(), 1, arg_obj);
  if (!op_obj || !arg_obj) return nullptr;
  PyObject* hit = PyDict_GetItemWithError(a->cache, key.get());
  if (hit) return Py_NewRef(hit);
  if (PyErr_Occurred()) return nullptr;

  bool all_static = a->size >= 0 && (op != DimOp::kConcat || b->size >= 0);
  Ref size(all_static ? PyLong_FromSsize_t(static_result(op, a->size, k, b ? b->size : 0))
                      : Py_NewRef(Py_None));
  Ref name(derived_name(a, op, k, b));
  if (!size || !name) return nullptr;
  Ref dim(PyObject_CallFunctionObjArgs(reinterpret_cast<PyObject*>(&DimType), size.get(), name.get(),
                                       nullptr));
  if (!dim) return nullptr;
  DimObject* d = as_dim(dim.get());
  {  // also for static results: chains fold through them too
    d->derive_op = op;
    d->derive_a = Py_NewRef(self);
    d->derive_b = b ? Py_NewRef(reinterpret_cast<PyObject*>(b)) : nullptr;
    d->derive_k = k;
  }
  if (PyDict_SetItem(a->cache, key.get(), dim.get()) < 0) return nullptr;
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

}  // namespace dimtorch
