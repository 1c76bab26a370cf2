// add_functions and the registry that gives each wrapped module function its name for errors.
#include "core/functions.h"

#include <string>
#include <utility>
#include <vector>

namespace dimtorch {

namespace {

struct Wrapper {
  void* address;
  std::string name;     // the op's name, "pad" (empty until add_functions names it)
  std::string caller;   // "dimtorch.pad()", for errors
};

/// Every wrapper, named by add_functions. Read only on the error and traced paths.
std::vector<Wrapper>& wrappers() {
  static std::vector<Wrapper> all;
  return all;
}

Wrapper* find(void* wrapper) {
  for (auto& w : wrappers())
    if (w.address == wrapper) return &w;
  return nullptr;
}

}  // namespace

bool remember_wrapper(void* wrapper) {
  if (!find(wrapper)) wrappers().push_back({wrapper, std::string(), std::string()});
  return true;
}

PyObject* name_error_of(void* wrapper) {
  Wrapper* w = find(wrapper);
  return backend::name_error(w && !w->caller.empty() ? w->caller.c_str() : "dimtorch");
}

PyObject* call_definition_of(void* wrapper, PyObject* const* args, size_t nargsf,
                             PyObject* kwnames) {
  Wrapper* w = find(wrapper);
  if (!w || w->name.empty()) {
    PyErr_SetString(PyExc_SystemError, "dimtorch: a module function without a name");
    return nullptr;
  }
  return call_definition(w->name.c_str(), args, nargsf, kwnames);
}

bool wrapped_functions_defined(PyObject* table) {
  for (const auto& w : wrappers()) {
    if (w.name.empty() || w.name[0] == '_') continue;
    PyObject* fn = PyDict_GetItemString(table, w.name.c_str());
    if (!fn || !PyCallable_Check(fn)) {
      PyErr_Format(PyExc_KeyError, "dimtorch._C._set_definitions(): no Python definition registered for '%s' "
                   "(dimtorch.%s of the core)", w.name.c_str(), w.name.c_str());
      return false;
    }
  }
  return true;
}

bool add_functions(PyObject* module, PyMethodDef* defs) {
  for (PyMethodDef* d = defs; d->ml_name; ++d) {
    Wrapper* w = find(reinterpret_cast<void*>(d->ml_meth));
    if (!w) {
      PyErr_Format(PyExc_SystemError, "dimtorch: %s is not registered with DIMTORCH_OP", d->ml_name);
      return false;
    }
    w->name = d->ml_name;
    w->caller = std::string("dimtorch.") + d->ml_name + "()";
  }
  return PyModule_AddFunctions(module, defs) == 0;
}

}  // namespace dimtorch
