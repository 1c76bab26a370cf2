// The native Dim type: construction, identity semantics, sizes and lengths, repr.
#include "dim.h"

#include "backend.h"
#include "tensor.h"

namespace dimtorch {

PyTypeObject DimType = {PyVarObject_HEAD_INIT(nullptr, 0)};
Py_ssize_t g_live_dims = 0;

namespace {

PyObject* s_cpu = nullptr;
PyObject* s_aminmax = nullptr;

/// Checks host lengths and returns the Tensor to keep (moved to the host if needed); new ref.
PyObject* checked_lengths(PyObject* lengths, Py_ssize_t* max_out) {
  TensorObject* t = as_tensor(lengths);
  PyObject* dtype = backend::raw_dtype_name(t->raw);
  if (!dtype) return nullptr;
  if (!backend::is_integer_dtype_name(dtype)) {
    PyErr_Format(PyExc_TypeError,
                 "dimtorch.Dim(): lengths must be an integer Tensor, got dtype %U (dims: %s)", dtype,
                 describe_dims(t->dims, t->sizes).c_str());
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < tensor_ndim(t); ++i) {
    DimObject* bd = as_dim(PyTuple_GET_ITEM(t->dims, i));
    if (bd->dyn_size) {
      PyErr_Format(PyExc_ValueError,
                   "dimtorch.Dim(): lengths must be over batch dims without lengths of their own, "
                   "but dim %s has lengths (dims: %s)",
                   describe_dim(PyTuple_GET_ITEM(t->dims, i)).c_str(),
                   describe_dims(t->dims, t->sizes).c_str());
      return nullptr;
    }
  }
  Ref kept = Ref::borrow(lengths);
  Ref device(PyObject_GetAttr(t->raw, backend::T.s_device));
  if (!device) return nullptr;
  Ref device_type(PyObject_GetAttrString(device.get(), "type"));
  if (!device_type) return nullptr;
  int on_cpu = PyUnicode_Check(device_type.get()) &&
               PyUnicode_CompareWithASCIIString(device_type.get(), "cpu") == 0;
  if (!on_cpu) {
    /* Lengths are host data by design; a device copy is made once per dim and cached. Moving them
       here happens once, when the batch's dims are made, never inside ops. */
    PyObject* host_raw = backend::call2(backend::T.to, t->raw, s_cpu);
    if (!host_raw) return nullptr;
    kept = Ref(tensor_make(host_raw, t->dims, t->sizes, nullptr, nullptr));
    if (!kept) return nullptr;
  }
  Py_ssize_t numel = 1;
  for (Py_ssize_t i = 0; i < tensor_ndim(t); ++i) numel *= t->sizes[i];
  Py_ssize_t min_len = 0, max_len = 0;
  if (numel > 0) {
    Ref mm(PyObject_CallMethodNoArgs(as_tensor(kept.get())->raw, s_aminmax));
    if (!mm) return nullptr;
    Ref lo(PySequence_GetItem(mm.get(), 0)), hi(PySequence_GetItem(mm.get(), 1));
    if (!lo || !hi) return nullptr;
    Ref lo_i(PyNumber_Index(lo.get())), hi_i(PyNumber_Index(hi.get()));
    if (!lo_i || !hi_i) return nullptr;
    min_len = PyLong_AsSsize_t(lo_i.get());
    max_len = PyLong_AsSsize_t(hi_i.get());
    if (PyErr_Occurred()) return nullptr;
  }
  if (min_len < 0) {
    PyErr_Format(PyExc_ValueError, "dimtorch.Dim(): lengths must be >= 0, got min %zd (dims: %s)",
                 min_len, describe_dims(t->dims, t->sizes).c_str());
    return nullptr;
  }
  *max_out = max_len;
  return kept.release();
}

DimObject* dim_alloc() {
  DimObject* d = PyObject_GC_New(DimObject, &DimType);
  if (!d) return nullptr;
  d->name = nullptr;
  d->size = -1;
  d->dyn_size = nullptr;
  d->max_size = -1;
  d->cache = nullptr;
  d->derive_op = DimOp::kNone;
  d->derive_a = d->derive_b = nullptr;
  d->derive_k = 0;
  d->weakreflist = nullptr;
  ++g_live_dims;
  PyObject_GC_Track(d);
  return d;
}

PyObject* dim_create(PyObject* size, PyObject* name) {
  if (name && name != Py_None && !PyUnicode_Check(name)) {
    PyErr_Format(PyExc_TypeError, "dimtorch.Dim(): name must be a str or None, got %.80s",
                 Py_TYPE(name)->tp_name);
    return nullptr;
  }
  Py_ssize_t static_size = -1, max_size = -1;
  Ref lengths;
  if (size == nullptr || size == Py_None) {
  } else if (PyLong_Check(size) && !PyBool_Check(size)) {
    static_size = PyLong_AsSsize_t(size);
    if (static_size == -1 && PyErr_Occurred()) return nullptr;
    if (static_size < 0) {
      PyErr_Format(PyExc_ValueError, "dimtorch.Dim(): size must be >= 0, got %zd", static_size);
      return nullptr;
    }
    max_size = static_size;
  } else if (is_tensor(size)) {
    lengths = Ref(checked_lengths(size, &max_size));
    if (!lengths) return nullptr;
  } else if (backend::is_raw(size)) {
    PyErr_SetString(PyExc_TypeError,
                    "dimtorch.Dim(): lengths must be a dimtorch.Tensor over batch dims, e.g. "
                    "dimtorch.Dim(dimtorch.Tensor(lengths, dims=(batch,)), name='time'); got a raw "
                    "torch.Tensor");
    return nullptr;
  } else {
    PyErr_Format(PyExc_TypeError,
                 "dimtorch.Dim(): size must be an int, None, or an integer dimtorch.Tensor of "
                 "lengths, got %.80s",
                 Py_TYPE(size)->tp_name);
    return nullptr;
  }
  DimObject* d = dim_alloc();
  if (!d) return nullptr;
  d->size = static_size;
  d->max_size = max_size;
  d->dyn_size = lengths.release();
  if (name && name != Py_None) {
    Py_INCREF(name);
    d->name = name;
  }
  return reinterpret_cast<PyObject*>(d);
}

PyObject* dim_vectorcall(PyObject*, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  PyObject* size = nullptr;
  PyObject* name = nullptr;
  if (nargs > 2) {
    PyErr_Format(PyExc_TypeError, "dimtorch.Dim() takes at most 2 positional arguments (%zd given)",
                 nargs);
    return nullptr;
  }
  if (nargs > 0) size = args[0];
  if (nargs > 1) name = args[1];
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nkw; ++i) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, i);
    PyObject* value = args[nargs + i];
    PyObject** slot = nullptr;
    if (PyUnicode_CompareWithASCIIString(key, "name") == 0) slot = &name;
    else if (PyUnicode_CompareWithASCIIString(key, "size") == 0 ||
             PyUnicode_CompareWithASCIIString(key, "dimension") == 0) slot = &size;
    if (!slot) {
      PyErr_Format(PyExc_TypeError, "dimtorch.Dim() got an unexpected keyword argument %R", key);
      return nullptr;
    }
    if (*slot) {
      PyErr_Format(PyExc_TypeError, "dimtorch.Dim() got multiple values for argument %R", key);
      return nullptr;
    }
    *slot = value;
  }
  return dim_create(size, name);
}

PyObject* dim_new(PyTypeObject*, PyObject* args, PyObject* kwargs) {
  static const char* kw[] = {"size", "name", nullptr};
  PyObject* size = nullptr;
  PyObject* name = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:Dim", const_cast<char**>(kw), &size, &name))
    return nullptr;
  return dim_create(size, name);
}

int dim_traverse(PyObject* self, visitproc visit, void* arg) {
  DimObject* d = as_dim(self);
  Py_VISIT(d->dyn_size);
  Py_VISIT(d->cache);
  Py_VISIT(d->derive_a);
  Py_VISIT(d->derive_b);
  return 0;
}

int dim_clear(PyObject* self) {
  DimObject* d = as_dim(self);
  Py_CLEAR(d->dyn_size);
  Py_CLEAR(d->cache);
  Py_CLEAR(d->derive_a);
  Py_CLEAR(d->derive_b);
  return 0;
}

void dim_dealloc(PyObject* self) {
  DimObject* d = as_dim(self);
  PyObject_GC_UnTrack(self);
  if (d->weakreflist) PyObject_ClearWeakRefs(self);
  dim_clear(self);
  Py_CLEAR(d->name);
  --g_live_dims;
  PyObject_GC_Del(self);
}

PyObject* dim_repr(PyObject* self) {
  return PyUnicode_FromFormat("Dim{%s}", describe_dim(self).c_str());
}

PyObject* get_name(PyObject* self, void*) {
  PyObject* n = as_dim(self)->name;
  return Py_NewRef(n ? n : Py_None);
}
PyObject* get_size(PyObject* self, void*) {
  Py_ssize_t s = as_dim(self)->size;
  if (s < 0) Py_RETURN_NONE;
  return PyLong_FromSsize_t(s);
}
PyObject* get_dyn_size(PyObject* self, void*) {
  PyObject* ds = dim_dyn_size(as_dim(self));
  if (!ds) {
    if (PyErr_Occurred()) return nullptr;
    Py_RETURN_NONE;
  }
  return Py_NewRef(ds);
}

PyObject* m_is_static(PyObject* self, PyObject*) { return PyBool_FromLong(as_dim(self)->size >= 0); }
PyObject* m_is_dynamic(PyObject* self, PyObject*) {
  DimObject* d = as_dim(self);
  return PyBool_FromLong(d->size < 0 && (d->dyn_size || d->derive_op != DimOp::kNone));
}
PyObject* m_get_max_size(PyObject* self, PyObject*) {
  Py_ssize_t m = dim_max_size(as_dim(self));
  if (m == -2) return nullptr;
  if (m < 0) Py_RETURN_NONE;
  return PyLong_FromSsize_t(m);
}
/* Dims are identities: copying one must give the same object, or copies of a model would stop
   matching the dims of the data. */
PyObject* m_copy(PyObject* self, PyObject*) { return Py_NewRef(self); }

PyGetSetDef dim_getset[] = {
    {"name", get_name, nullptr, "The name given at construction, or None.", nullptr},
    {"size", get_size, nullptr, "Static size (int), or None for a dynamic or size-from-data dim.",
     nullptr},
    {"dimension", get_size, nullptr, "Alias of size (RETURNN's name).", nullptr},
    {"dyn_size", get_dyn_size, nullptr, "Lengths Tensor (host, over batch dims), or None.", nullptr},
    {nullptr}};

PyMethodDef dim_methods[] = {
    {"is_static", m_is_static, METH_NOARGS, "Whether the size is known without data."},
    {"is_dynamic", m_is_dynamic, METH_NOARGS, "Whether the dim has per-sequence lengths."},
    {"get_max_size", m_get_max_size, METH_NOARGS,
     "Max size as a host int (static size, or max of the lengths, computed once); None if the size "
     "comes from data only. Never reads device memory."},
    {"__copy__", m_copy, METH_NOARGS, nullptr},
    {"__deepcopy__", m_copy, METH_O, nullptr},
    {nullptr}};

}  // namespace

std::string describe_dim(PyObject* dim) {
  if (!is_dim(dim)) return to_std_string(dim);
  DimObject* d = as_dim(dim);
  std::string s = "'" + (d->name ? to_std_string(d->name) : std::string("<unnamed>")) + "'";
  if (d->size >= 0) return s + "(" + std::to_string(d->size) + ")";
  if (d->dyn_size) {
    PyObject* dims = as_tensor(d->dyn_size)->dims;
    s += "[";
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(dims); ++i) {
      DimObject* bd = as_dim(PyTuple_GET_ITEM(dims, i));
      if (i) s += ",";
      s += bd->name ? to_std_string(bd->name) : std::string("<unnamed>");
    }
    return s + "]";
  }
  if (d->derive_op != DimOp::kNone) return s + "[derived]";
  return s + "(?)";
}

Py_ssize_t dim_max_size(DimObject* d) {
  if (d->max_size >= 0) return d->max_size;
  return -1;
}

PyObject* dim_dyn_size(DimObject* d) { return d->dyn_size; }

bool export_dim(PyObject* module) {
  s_cpu = PyUnicode_InternFromString("cpu");
  s_aminmax = PyUnicode_InternFromString("aminmax");
  if (!s_cpu || !s_aminmax) return false;
  DimType.tp_name = "dimtorch.Dim";
  DimType.tp_basicsize = sizeof(DimObject);
  DimType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
  DimType.tp_doc =
      "Dim(size=None, name=None)\n\nThe identity of one axis. size: an int (static), None (size "
      "from data, e.g. batch), or an integer dimtorch.Tensor of lengths over batch dims (dynamic, "
      "kept on the host). Equality and hash are identity.";
  DimType.tp_new = dim_new;
  DimType.tp_dealloc = dim_dealloc;
  DimType.tp_traverse = dim_traverse;
  DimType.tp_clear = dim_clear;
  DimType.tp_repr = dim_repr;
  DimType.tp_getset = dim_getset;
  DimType.tp_methods = dim_methods;
  DimType.tp_weaklistoffset = offsetof(DimObject, weakreflist);
  if (PyType_Ready(&DimType) < 0) return false;
  DimType.tp_vectorcall = dim_vectorcall;
  Py_INCREF(&DimType);
  return PyModule_AddObject(module, "Dim", reinterpret_cast<PyObject*>(&DimType)) == 0;
}

}  // namespace dimtorch
