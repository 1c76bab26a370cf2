// Fast paths in C++ hand every case they do not take (other layouts, options, bad input) to the
// op's Python definition (definitions.h), which also owns the error messages.
#pragma once
#include "core/common.h"
#include "core/definitions.h"

namespace dimtorch {

/// Defines `name(args, nargs, kwnames)`: a call of the Python definition registered as `op`.
#define DIMTORCH_PYTHON_FALLBACK(name, op)                                        \
  PyObject* name(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {   \
    return ::dimtorch::call_definition(op, args, nargs, kwnames);               \
  }

}  // namespace dimtorch
