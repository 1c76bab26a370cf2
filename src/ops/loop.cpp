// Fast paths of cond and while_loop (definitions: python/dimtorch/ops/loop.py) for their common call: a
// Python bool predicate or cond result, loop vars whose structure is checked here when it is a Tensor or
// a flat tuple/list of Tensors, ints and floats. The loop machinery then costs no Python frame per step;
// the caller's functions run as they are, and an error raised in them comes out untouched
// (DIMTORCH_USER_CODE_OP). Every other call (a Tensor predicate, bad arguments) goes to the definition,
// and within a loop a cond result that is not a bool, or a structure not checked here, goes to the
// definition's own code for it (_truth, _check_same_structure): the same reads, the same errors.
#include "core/args.h"
#include "core/definitions.h"
#include "core/exports.h"
#include "core/functions.h"
#include "core/python_fallback.h"
#include "core/tensor.h"

#include <utility>

namespace dimtorch {

namespace {

DIMTORCH_PYTHON_FALLBACK(cond_fallback, "cond")
DIMTORCH_PYTHON_FALLBACK(while_loop_fallback, "while_loop")

/// cond(pred, true_fn, false_fn): true_fn() if pred else false_fn(), for a Python bool pred.
PyObject* f_cond(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"pred", "true_fn", "false_fn"};
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 3, 3, v, "dimtorch.cond()")) {
    PyErr_Clear();
    return cond_fallback(args, nargs, kwnames);
  }
  if ((v[0] != Py_True && v[0] != Py_False) || !PyCallable_Check(v[1]) || !PyCallable_Check(v[2]))
    return cond_fallback(args, nargs, kwnames);
  return PyObject_CallNoArgs(v[0] == Py_True ? v[1] : v[2]);
}

bool is_number_or_tensor_type(PyTypeObject* t) {
  return t == &TensorType || t == &PyLong_Type || t == &PyFloat_Type;
}

/// Whether `next` certainly has the structure of `vars` (the definition's _same_structure would say so):
/// both Tensors, or tuples (lists) of one length whose items pair up by type, each a Tensor, int or
/// float. False: not decided here.
bool plainly_same_structure(PyObject* next, PyObject* vars) {
  PyTypeObject* t = Py_TYPE(next);
  if (t != Py_TYPE(vars)) return false;
  if (t == &TensorType) return true;
  if (t != &PyTuple_Type && t != &PyList_Type) return false;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(next);
  if (n != PySequence_Fast_GET_SIZE(vars)) return false;
  PyObject** a = PySequence_Fast_ITEMS(next);
  PyObject** b = PySequence_Fast_ITEMS(vars);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyTypeObject* ti = Py_TYPE(a[i]);
    if (ti != Py_TYPE(b[i]) || !is_number_or_tensor_type(ti)) return false;
  }
  return true;
}

/// The definition's truth of a cond result that is not a Python bool (a scalar bool Tensor is read
/// from the device; anything else raises its TypeError): 1, 0, or -1 with the error set.
int loop_truth(PyObject* value) {
  static PyObject* caller = nullptr;
  static PyObject* what = nullptr;
  if (!caller && !(caller = PyUnicode_InternFromString("dimtorch.while_loop()"))) return -1;
  if (!what && !(what = PyUnicode_InternFromString("cond"))) return -1;
  PyObject* call_args[] = {value, caller, what};
  Ref truth(call_definition("_loop_truth", call_args, 3, nullptr));
  if (!truth) return -1;
  return PyObject_IsTrue(truth.get());
}

/// while_loop(cond, body, initial): `while cond(v): v = body(v)`, returns v.
PyObject* f_while_loop(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"cond", "body", "initial"};
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 3, 3, v, "dimtorch.while_loop()")) {
    PyErr_Clear();
    return while_loop_fallback(args, nargs, kwnames);
  }
  PyObject* cond = v[0];
  PyObject* body = v[1];
  if (!PyCallable_Check(cond) || !PyCallable_Check(body)) return while_loop_fallback(args, nargs, kwnames);
  Ref vars = Ref::borrow(v[2]);
  for (;;) {
    Ref c(PyObject_CallOneArg(cond, vars.get()));
    if (!c) return nullptr;
    if (c.get() == Py_False) return vars.release();
    if (c.get() != Py_True) {
      int truth = loop_truth(c.get());
      if (truth < 0) return nullptr;
      if (!truth) return vars.release();
    }
    Ref next(PyObject_CallOneArg(body, vars.get()));
    if (!next) return nullptr;
    if (!plainly_same_structure(next.get(), vars.get())) {
      PyObject* check_args[] = {next.get(), vars.get()};
      Ref checked(call_definition("_while_loop_check", check_args, 2, nullptr));
      if (!checked) return nullptr;
    }
    vars = std::move(next);
    if (PyErr_CheckSignals() < 0) return nullptr;  // (as the interpreter's loop would: Ctrl-C stops it)
  }
}

PyMethodDef kFunctions[] = {
    {"cond", DIMTORCH_USER_CODE_OP(f_cond), METH_FASTCALL | METH_KEYWORDS,
     "cond(pred, true_fn, false_fn): see dimtorch.ops.loop.cond; a Python bool pred calls its function here."},
    {"while_loop", DIMTORCH_USER_CODE_OP(f_while_loop), METH_FASTCALL | METH_KEYWORDS,
     "while_loop(cond, body, initial): see dimtorch.ops.loop.while_loop; the loop runs here while cond gives "
     "Python bools."},
    {nullptr}};

}  // namespace

bool export_ops_loop(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
