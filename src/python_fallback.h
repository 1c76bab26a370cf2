// Fast paths in C++ hand every case they do not take (other layouts, options, bad input) to the
// op's full Python definition, which also owns the error messages.
#pragma once
#include "common.h"

namespace dimtorch {

/// Calls dimtorch.<module>.<name>(*args, **kwargs), the function looked up once into `*cache`.
inline PyObject* call_python(PyObject** cache, const char* module, const char* name,
                             PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (!*cache) {
    Ref mod(PyImport_ImportModule(module));
    if (!mod) return nullptr;
    *cache = PyObject_GetAttrString(mod.get(), name);
    if (!*cache) return nullptr;
  }
  return PyObject_Vectorcall(*cache, args, nargs, kwnames);
}

/// Defines `name(args, nargs, kwnames)`: a call of dimtorch.<module>.<function>.
#define DIMTORCH_PYTHON_FALLBACK(name, module, function)                               \
  PyObject* name(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {          \
    static PyObject* fn = nullptr;                                                      \
    return ::dimtorch::call_python(&fn, module, function, args, nargs, kwnames);        \
  }

}  // namespace dimtorch
