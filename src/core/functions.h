// Module functions of the extension. Each is registered as DIMTORCH_OP(fn) through
// add_functions, so that an error torch raises inside it (torch's messages name no dimtorch
// call) comes out as "dimtorch.<name>(): <message>", and so that a call on a traced tensor (a raw
// that is not a plain torch.Tensor: make_fx, torch.export, FakeTensor) goes to the op's Python
// definition. The wrapper costs a type check per argument.
#pragma once
#include "core/backend.h"
#include "core/common.h"
#include "core/definitions.h"

namespace dimtorch {

/// Records a wrapper's address (at load time); add_functions accepts only recorded wrappers.
bool remember_wrapper(void* wrapper);
/// The error path of a wrapper: backend::name_error with the name add_functions gave it.
PyObject* name_error_of(void* wrapper);
/// The traced path of a wrapper: the Python definition registered under its name.
PyObject* call_definition_of(void* wrapper, PyObject* const* args, size_t nargsf, PyObject* kwnames);

template <auto F>
struct Named;

template <PyObject* (*F)(PyObject*, PyObject* const*, Py_ssize_t, PyObject*)>
struct Named<F> {  // METH_FASTCALL | METH_KEYWORDS
  static PyObject* call(PyObject* m, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    if (any_traced(args, nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0)))
      return call_definition_of(reinterpret_cast<void*>(&call), args, nargs, kwnames);
    PyObject* r = F(m, args, nargs, kwnames);
    return r || !known ? r : name_error_of(reinterpret_cast<void*>(&call));
  }
  static inline const bool known = remember_wrapper(reinterpret_cast<void*>(&call));
};

template <PyObject* (*F)(PyObject*, PyObject* const*, Py_ssize_t)>
struct Named<F> {  // METH_FASTCALL
  static PyObject* call(PyObject* m, PyObject* const* args, Py_ssize_t nargs) {
    if (any_traced(args, nargs))
      return call_definition_of(reinterpret_cast<void*>(&call), args, nargs, nullptr);
    PyObject* r = F(m, args, nargs);
    return r || !known ? r : name_error_of(reinterpret_cast<void*>(&call));
  }
  static inline const bool known = remember_wrapper(reinterpret_cast<void*>(&call));
};

template <PyObject* (*F)(PyObject*, PyObject*)>
struct Named<F> {  // METH_O or METH_VARARGS
  static PyObject* call(PyObject* m, PyObject* arg) {
    if (arg && any_traced(&arg, 1)) {
      // METH_VARARGS gets its arguments as one tuple; METH_O its one argument.
      if (PyTuple_CheckExact(arg))
        return call_definition_of(reinterpret_cast<void*>(&call), PySequence_Fast_ITEMS(arg),
                                  PyTuple_GET_SIZE(arg), nullptr);
      return call_definition_of(reinterpret_cast<void*>(&call), &arg, 1, nullptr);
    }
    PyObject* r = F(m, arg);
    return r || !known ? r : name_error_of(reinterpret_cast<void*>(&call));
  }
  static inline const bool known = remember_wrapper(reinterpret_cast<void*>(&call));
};

/// The ml_meth of a module function `fn`, wrapped (see Named).
#define DIMTORCH_OP(fn) \
  reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&::dimtorch::Named<fn>::call))

/// The wrapper of a module function that runs the caller's own functions (cond, while_loop): as Named, a
/// call on a traced tensor goes to the definition, but no error is renamed, so that an error raised
/// inside the caller's functions comes out as it was raised. Such a function hands every call it does
/// not take (bad arguments included) to its definition, which names its own errors.
template <PyObject* (*F)(PyObject*, PyObject* const*, Py_ssize_t, PyObject*)>
struct RunsUserCode {  // METH_FASTCALL | METH_KEYWORDS
  static PyObject* call(PyObject* m, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    if (!known || any_traced(args, nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0)))
      return call_definition_of(reinterpret_cast<void*>(&call), args, nargs, kwnames);
    return F(m, args, nargs, kwnames);
  }
  static inline const bool known = remember_wrapper(reinterpret_cast<void*>(&call));
};

/// The ml_meth of a module function `fn` that runs the caller's functions, wrapped (see RunsUserCode).
#define DIMTORCH_USER_CODE_OP(fn) \
  reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&::dimtorch::RunsUserCode<fn>::call))

/// PyModule_AddFunctions for defs whose ml_meth are DIMTORCH_OP (or DIMTORCH_USER_CODE_OP) wrappers (a
/// SystemError for any other, so that no op misses the naming); records each wrapper's name for its errors.
bool add_functions(PyObject* module, PyMethodDef* defs);
/// Whether `table` (name -> callable) has a definition for every public function added by
/// add_functions (each calls its definition on traced tensors); false with a KeyError naming the
/// first one missing.
bool wrapped_functions_defined(PyObject* table);

}  // namespace dimtorch
