// Module functions of the extension. Each is registered as DIMTORCH_OP(fn) through
// add_functions, so that an error torch raises inside it (torch's messages name no dimtorch
// call) comes out as "dimtorch.<name>(): <message>". The wrapper costs nothing on success.
#pragma once
#include "backend.h"
#include "common.h"

namespace dimtorch {

/// Records a wrapper's address (at load time); add_functions accepts only recorded wrappers.
bool remember_wrapper(void* wrapper);
/// The error path of a wrapper: backend::name_error with the name add_functions gave it.
PyObject* name_error_of(void* wrapper);

template <auto F>
struct Named;

template <PyObject* (*F)(PyObject*, PyObject* const*, Py_ssize_t, PyObject*)>
struct Named<F> {  // METH_FASTCALL | METH_KEYWORDS
  static PyObject* call(PyObject* m, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    PyObject* r = F(m, args, nargs, kwnames);
    return r || !known ? r : name_error_of(reinterpret_cast<void*>(&call));
  }
  static inline const bool known = remember_wrapper(reinterpret_cast<void*>(&call));
};

template <PyObject* (*F)(PyObject*, PyObject* const*, Py_ssize_t)>
struct Named<F> {  // METH_FASTCALL
  static PyObject* call(PyObject* m, PyObject* const* args, Py_ssize_t nargs) {
    PyObject* r = F(m, args, nargs);
    return r || !known ? r : name_error_of(reinterpret_cast<void*>(&call));
  }
  static inline const bool known = remember_wrapper(reinterpret_cast<void*>(&call));
};

template <PyObject* (*F)(PyObject*, PyObject*)>
struct Named<F> {  // METH_O or METH_VARARGS
  static PyObject* call(PyObject* m, PyObject* arg) {
    PyObject* r = F(m, arg);
    return r || !known ? r : name_error_of(reinterpret_cast<void*>(&call));
  }
  static inline const bool known = remember_wrapper(reinterpret_cast<void*>(&call));
};

/// The ml_meth of a module function `fn`, wrapped (see Named).
#define DIMTORCH_OP(fn) \
  reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&::dimtorch::Named<fn>::call))

/// PyModule_AddFunctions for defs whose ml_meth are DIMTORCH_OP wrappers (a SystemError for any
/// other, so that no op misses the naming); records each wrapper's name for its errors.
bool add_functions(PyObject* module, PyMethodDef* defs);

}  // namespace dimtorch
