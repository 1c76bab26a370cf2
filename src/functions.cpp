// add_functions and the registry that gives each wrapped module function its name for errors.
#include "functions.h"

#include <string>
#include <utility>
#include <vector>

namespace dimtorch {

namespace {

/// Wrapper address -> "dimtorch.<name>()" (empty until add_functions names it). Read only on
/// the error path.
std::vector<std::pair<void*, std::string>>& wrappers() {
  static std::vector<std::pair<void*, std::string>> all;
  return all;
}

std::string* find(void* wrapper) {
  for (auto& w : wrappers())
    if (w.first == wrapper) return &w.second;
  return nullptr;
}

}  // namespace

bool remember_wrapper(void* wrapper) {
  if (!find(wrapper)) wrappers().emplace_back(wrapper, std::string());
  return true;
}

PyObject* name_error_of(void* wrapper) {
  std::string* name = find(wrapper);
  return backend::name_error(name && !name->empty() ? name->c_str() : "dimtorch");
}

bool add_functions(PyObject* module, PyMethodDef* defs) {
  for (PyMethodDef* d = defs; d->ml_name; ++d) {
    std::string* name = find(reinterpret_cast<void*>(d->ml_meth));
    if (!name) {
      PyErr_Format(PyExc_SystemError, "dimtorch: %s is not registered with DIMTORCH_OP", d->ml_name);
      return false;
    }
    *name = std::string("dimtorch.") + d->ml_name + "()";
  }
  return PyModule_AddFunctions(module, defs) == 0;
}

}  // namespace dimtorch
