// The registry of Python definitions: every Python callable the core calls, by name, registered
// from dimtorch._op_table at import.
#pragma once
#include "core/common.h"

namespace dimtorch {

/// The definition registered under `name` (an op "pad", a method "Tensor.raw_aligned", a slot
/// "Tensor.__add__"); borrowed. NULL with an ImportError naming it when none is registered.
PyObject* definition(const char* name);

/// Calls the definition registered under `name` with a vectorcall argument list.
PyObject* call_definition(const char* name, PyObject* const* args, size_t nargsf,
                          PyObject* kwnames);

/// Calls the definition of method `name` ("Dim.get_mask", "Tensor.copy_masked") with `self`
/// before the vectorcall argument list.
PyObject* call_method_definition(const char* name, PyObject* self, PyObject* const* args,
                                 size_t nargsf, PyObject* kwnames);

/// Whether any argument is a Tensor whose raw is not plain (tensor.h: kPlain), looking one level
/// into tuples and lists (concat's (x, dim) pairs, stack's list of tensors).
bool any_traced(PyObject* const* args, Py_ssize_t n);

}  // namespace dimtorch
