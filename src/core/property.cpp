// A property type for the derived attributes of Tensor and Dim (dtype, shape, dyn_size, ...).
//
// In eager, reading one is a C getter call through the descriptor slot, as fast as a getset. Under
// torch.compile, Dynamo does not run C getters on the objects it makes in a graph (their fields
// live in the graph), and it traces a descriptor only through a Python __get__: so this type's dict
// holds a Python __get__ that calls the property's Python definition, while its tp_descr_get slot
// stays the C getter. One definition each, in dimtorch.ops.tensor / dimtorch.ops.dim.
#include "core/property.h"

#include "core/functions.h"
#include "core/exports.h"

namespace dimtorch {

namespace {

struct PropertyObject {
  PyObject_HEAD
  PyTypeObject* owner;   // Tensor or Dim: the getter and setter read its fields
  getter get;            // the C getter (eager)
  setter set;            // the C setter (eager), or NULL: read-only
  PyObject* name;        // str
  PyObject* definition;  // Python fget (traced), or NULL until set
  PyObject* set_definition;  // Python fset (traced), or NULL
};

PyTypeObject PropertyType = {PyVarObject_HEAD_INIT(nullptr, 0)};

/// Whether `obj` is of the property's type (its C functions read that type's fields); else a TypeError.
bool owner_check(PropertyObject* p, PyObject* obj) {
  if (PyObject_TypeCheck(obj, p->owner)) return true;  // (exact type first; rf.Parameter is a Tensor subclass)
  PyErr_Format(PyExc_TypeError, "%s.%U: expected a %s, got %.80s", p->owner->tp_name, p->name, p->owner->tp_name,
               Py_TYPE(obj)->tp_name);
  return false;
}

PyObject* property_get(PyObject* self, PyObject* obj, PyObject*) {
  if (!obj || obj == Py_None) return Py_NewRef(self);
  PropertyObject* p = reinterpret_cast<PropertyObject*>(self);
  return owner_check(p, obj) ? p->get(obj, nullptr) : nullptr;
}

int property_set(PyObject* self, PyObject* obj, PyObject* value) {
  PropertyObject* p = reinterpret_cast<PropertyObject*>(self);
  if (!owner_check(p, obj)) return -1;
  if (p->set) return p->set(obj, value, nullptr);
  PyErr_Format(PyExc_AttributeError, "dimtorch: attribute '%U' is read-only", p->name);
  return -1;
}

void property_dealloc(PyObject* self) {
  PropertyObject* p = reinterpret_cast<PropertyObject*>(self);
  Py_XDECREF(p->name);
  Py_XDECREF(p->definition);
  Py_XDECREF(p->set_definition);
  Py_TYPE(self)->tp_free(self);
}

PyObject* get_definition(PyObject* self, void*) {
  PyObject* d = reinterpret_cast<PropertyObject*>(self)->definition;
  if (!d) {
    PyErr_Format(PyExc_AttributeError, "dimtorch: property '%U' has no Python definition",
                 reinterpret_cast<PropertyObject*>(self)->name);
    return nullptr;
  }
  return Py_NewRef(d);
}
int set_definition(PyObject* self, PyObject* value, void*) {
  if (!value || !PyCallable_Check(value)) {
    PyErr_SetString(PyExc_TypeError, "dimtorch: a property's definition must be callable");
    return -1;
  }
  Py_XSETREF(reinterpret_cast<PropertyObject*>(self)->definition, Py_NewRef(value));
  return 0;
}
PyObject* get_set_definition(PyObject* self, void*) {
  PyObject* d = reinterpret_cast<PropertyObject*>(self)->set_definition;
  return Py_NewRef(d ? d : Py_None);
}
int set_set_definition(PyObject* self, PyObject* value, void*) {
  if (!value || !PyCallable_Check(value)) {
    PyErr_SetString(PyExc_TypeError, "dimtorch: a property's set definition must be callable");
    return -1;
  }
  Py_XSETREF(reinterpret_cast<PropertyObject*>(self)->set_definition, Py_NewRef(value));
  return 0;
}
PyObject* get_doc(PyObject* self, void*) {
  PyObject* d = reinterpret_cast<PropertyObject*>(self)->definition;
  return d ? PyObject_GetAttrString(d, "__doc__") : Py_NewRef(Py_None);
}

PyGetSetDef property_getset[] = {
    {"definition", get_definition, set_definition, "The Python definition (traced by torch.compile).",
     nullptr},
    {"set_definition", get_set_definition, set_set_definition,
     "The Python definition of assignment (traced by torch.compile), or None: read-only.", nullptr},
    {"__doc__", get_doc, nullptr, nullptr, nullptr},
    {nullptr}};

}  // namespace

bool make_traceable_properties(PyTypeObject* type, const char* const* names) {
  for (const char* const* n = names; *n; ++n) {
    PyObject* descr = PyDict_GetItemString(type->tp_dict, *n);
    if (!descr || !PyObject_TypeCheck(descr, &PyGetSetDescr_Type)) {
      PyErr_Format(PyExc_SystemError, "dimtorch: %s.%s is not a getset", type->tp_name, *n);
      return false;
    }
    PropertyObject* p = PyObject_New(PropertyObject, &PropertyType);
    if (!p) return false;
    p->owner = type;
    p->get = reinterpret_cast<PyGetSetDescrObject*>(descr)->d_getset->get;
    p->set = reinterpret_cast<PyGetSetDescrObject*>(descr)->d_getset->set;
    p->name = PyUnicode_FromString(*n);
    p->definition = nullptr;
    p->set_definition = nullptr;
    int r = p->name ? PyDict_SetItemString(type->tp_dict, *n, reinterpret_cast<PyObject*>(p)) : -1;
    Py_DECREF(p);
    if (r < 0) return false;
  }
  PyType_Modified(type);
  return true;
}

bool export_property(PyObject* module) {
  PropertyType.tp_name = "dimtorch._C._Property";
  PropertyType.tp_basicsize = sizeof(PropertyObject);
  PropertyType.tp_flags = Py_TPFLAGS_DEFAULT;
  PropertyType.tp_doc = "A derived attribute: C getter in eager, Python definition when traced.";
  PropertyType.tp_dealloc = property_dealloc;
  PropertyType.tp_descr_get = property_get;
  PropertyType.tp_descr_set = property_set;
  PropertyType.tp_getset = property_getset;
  if (PyType_Ready(&PropertyType) < 0) return false;
  Py_INCREF(&PropertyType);
  return PyModule_AddObject(module, "_Property", reinterpret_cast<PyObject*>(&PropertyType)) == 0;
}

}  // namespace dimtorch
