// add_functions and the registry that gives each wrapped module function its name for errors.
#include "core/functions.h"

#include "core/keyword_hints.h"

#include <algorithm>
#include <cstring>
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

/// For a TypeError "f() got an unexpected keyword argument 'dim'" that the op's Python definition
/// raised in binding its arguments (a fast path hands such calls to it): the message named after
/// the call with the hint of the definition's own keyword (use axis=, in_spatial_dims=, ...), as
/// parse_args and the Python wrapper names_errors give it. False (the error untouched) otherwise.
static bool name_keyword_error(const Wrapper& w) {
  if (!PyErr_ExceptionMatches(PyExc_TypeError) || w.name.empty()) return false;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  Ref text(type == PyExc_TypeError && value ? PyObject_Str(value) : nullptr);
  const char* s = text ? PyUnicode_AsUTF8(text.get()) : nullptr;
  const char* marker = "got an unexpected keyword argument 'dim'";
  PyObject* fn = s && std::strstr(s, marker) && std::strncmp(s, "dimtorch", 8) != 0 ? definition(w.name.c_str()) : nullptr;
  Ref code(fn ? PyObject_GetAttrString(fn, "__code__") : nullptr);
  Ref names(code ? PyObject_GetAttrString(code.get(), "co_varnames") : nullptr);
  Ref argcount(code ? PyObject_GetAttrString(code.get(), "co_argcount") : nullptr);
  Ref kwonly(code ? PyObject_GetAttrString(code.get(), "co_kwonlyargcount") : nullptr);
  if (!names || !argcount || !kwonly || !PyTuple_Check(names.get())) {
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
    return false;
  }
  Py_ssize_t n = std::min(PyTuple_GET_SIZE(names.get()), PyLong_AsSsize_t(argcount.get()) + PyLong_AsSsize_t(kwonly.get()));
  std::vector<const char*> keys;
  for (Py_ssize_t i = 0; i < n; ++i) {
    const char* k = PyUnicode_AsUTF8(PyTuple_GET_ITEM(names.get(), i));
    if (k) keys.push_back(k);
  }
  PyErr_Clear();
  std::string hint = torch_keyword_hint("dim", keys.data(), static_cast<int>(keys.size()));
  PyErr_Format(PyExc_TypeError, "%s: %s%s", w.caller.c_str(), s, hint.c_str());
  Py_DECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return true;
}

PyObject* name_error_of(void* wrapper) {
  Wrapper* w = find(wrapper);
  if (w && name_keyword_error(*w)) return nullptr;
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
    // _rf_<name> implements dimtorch.rf.<name> (its errors name that); the rest are dimtorch.<name>.
    std::string name = d->ml_name;
    w->caller = name.rfind("_rf_", 0) == 0 ? "dimtorch.rf." + name.substr(4) + "()" : "dimtorch." + name + "()";
  }
  return PyModule_AddFunctions(module, defs) == 0;
}

}  // namespace dimtorch
