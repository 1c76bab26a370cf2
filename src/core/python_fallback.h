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

/// Defines the module function `name` of an op without a fast path that is called often: it calls
/// the definition registered as `op` with its arguments as they are, so that DIMTORCH_OP names its
/// errors (dim= gets the hint of the definition's own keyword) on the error path only, where a
/// Python wrapper (names_errors) would cost a frame and a repacking of the arguments on every call.
#define DIMTORCH_DEFINITION_ONLY(name, op)                                                  \
  PyObject* name(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {   \
    return ::dimtorch::call_definition(op, args, nargs, kwnames);                          \
  }

}  // namespace dimtorch
