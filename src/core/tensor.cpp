// The native Tensor type: checked construction, properties, transposes and aligned raw views.
#include "core/tensor.h"

#include "core/backend.h"
#include "core/definitions.h"
#include "core/dim.h"
#include "core/mask.h"
#include "core/message_dims.h"
#include "core/property.h"
#include "core/exports.h"

#include <cstring>

namespace dimtorch {

PyTypeObject TensorType = {PyVarObject_HEAD_INIT(nullptr, 0)};
Py_ssize_t g_live_tensors = 0;

/// Number slots and rich comparison of Tensor (ops_elementwise.cpp).
void install_elementwise_slots(PyTypeObject* type);

std::string describe_dims(PyObject* dims, const Py_ssize_t* sizes) {
  std::string s;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(dims); ++i) {
    if (i) s += ", ";
    PyObject* d = PyTuple_GET_ITEM(dims, i);
    DimObject* dd = as_dim(d);
    s += dd->name ? to_std_string(dd->name) : std::string("<unnamed>");
    if (sizes) s += ":" + std::to_string(sizes[i]);
    else if (dd->size >= 0) s += "(" + std::to_string(dd->size) + ")";
    if (dim_has_namesake(d, dims)) s += dim_message_id(d);
  }
  return s;
}

PyObject* dims_arg_to_tuple(PyObject* arg, const char* caller, const char* what) {
  Ref tuple;
  if (is_dim(arg)) {
    tuple = Ref(PyTuple_Pack(1, arg));
  } else if (PyTuple_CheckExact(arg)) {
    tuple = Ref::borrow(arg);
  } else if (PyList_Check(arg) || PyTuple_Check(arg)) {
    tuple = Ref(PySequence_Tuple(arg));
  } else {
    PyErr_Format(PyExc_TypeError, "%s: %s must be a Dim or a sequence of Dims, got %.80s", caller,
                 what, Py_TYPE(arg)->tp_name);
    return nullptr;
  }
  if (!tuple) return nullptr;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple.get()); ++i) {
    PyObject* d = PyTuple_GET_ITEM(tuple.get(), i);
    if (!is_dim(d)) {
      PyErr_Format(PyExc_TypeError, "%s: %s[%zd] must be a Dim, got %.80s", caller, what, i,
                   Py_TYPE(d)->tp_name);
      return nullptr;
    }
  }
  return tuple.release();
}

PyObject* tensor_make(PyObject* raw, PyObject* dims, const Py_ssize_t* sizes, PyObject* sparse_dim,
                      PyObject* feature_dim) {
  Py_ssize_t n = PyTuple_GET_SIZE(dims);
  if (n > kMaxDims) {  // (the fast paths' arrays hold kMaxDims: such a Tensor must never exist)
    Py_DECREF(raw);
    PyErr_Format(PyExc_ValueError, "dimtorch: at most %d dims are supported, got %zd", kMaxDims, n);
    return nullptr;
  }
  TensorObject* t = PyObject_GC_NewVar(TensorObject, &TensorType, n);
  if (!t) {
    Py_DECREF(raw);
    return nullptr;
  }
  t->raw = raw;
  Py_INCREF(dims);
  t->dims = dims;
  Py_XINCREF(sparse_dim);
  t->sparse_dim = sparse_dim;
  Py_XINCREF(feature_dim);
  t->feature_dim = feature_dim;
  t->name = nullptr;
  t->weakreflist = nullptr;
  t->sizes = t->inline_sizes;
  t->flags = backend::is_plain_raw(raw) ? kComplete | kPlain : kComplete;
  for (Py_ssize_t i = 0; i < n; ++i) t->sizes[i] = sizes[i];
  ++g_live_tensors;
  PyObject_GC_Track(t);
  return reinterpret_cast<PyObject*>(t);
}

namespace {

/// Checks `raw` against `dims` (a tuple of Dims) as the constructor does and fills `sizes` (-1 for
/// a symbolic size of a traced raw). False with an error naming `caller`.
bool check_raw_dims(PyObject* raw, PyObject* dims, const char* caller, Py_ssize_t* sizes) {
  Py_ssize_t n = PyTuple_GET_SIZE(dims);
  if (n > kMaxDims) {
    PyErr_Format(PyExc_ValueError, "%s: at most %d dims are supported, got %zd", caller, kMaxDims,
                 n);
    return false;
  }
  Ref shape(PyObject_GetAttr(raw, backend::T.s_shape));
  if (!shape) return false;
  Py_ssize_t raw_ndim = PyTuple_Check(shape.get()) ? PyTuple_GET_SIZE(shape.get()) : -1;
  if (raw_ndim != n) {
    PyErr_Format(PyExc_ValueError, "%s: raw has shape %S (%zd axes) but %zd dims were given (dims: %s)",
                 caller, shape.get(), raw_ndim, n, describe_dims(dims, nullptr).c_str());
    return false;
  }
  /* A traced raw's sizes may be symbolic (SymInt): those are -1 here, and the checks that need
     them are the Python definition's (Tensor.__init__), which ran when the raw was traced. */
  bool plain = backend::is_plain_raw(raw);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* v = PyTuple_GET_ITEM(shape.get(), i);
    if (!plain && !PyLong_CheckExact(v)) {
      sizes[i] = -1;
      continue;
    }
    sizes[i] = PyLong_AsSsize_t(v);
    if (sizes[i] == -1 && PyErr_Occurred()) {
      backend::explain_jit_trace(caller);
      return false;
    }
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* di = PyTuple_GET_ITEM(dims, i);
    for (Py_ssize_t j = 0; j < i; ++j) {
      if (PyTuple_GET_ITEM(dims, j) == di) {
        PyErr_Format(PyExc_ValueError, "%s: dim %s appears twice (dims: %s)", caller,
                     describe_dim(di).c_str(), describe_dims(dims, sizes).c_str());
        return false;
      }
    }
    if (sizes[i] < 0) continue;
    DimObject* d = as_dim(di);
    if (d->size >= 0 && d->size != sizes[i]) {
      PyErr_Format(PyExc_ValueError, "%s: dim %s has raw size %zd at axis %zd (raw shape %S, dims: %s)",
                   caller, describe_dim(di).c_str(), sizes[i], i, shape.get(),
                   describe_dims(dims, nullptr).c_str());
      return false;
    }
    if (!plain) continue;  // a traced raw's lengths are graph values: nothing to read here
    PyObject* lengths = d->size < 0 ? dim_dyn_size(d) : nullptr;
    if (!lengths) {
      if (PyErr_Occurred()) return false;
      continue;
    }
    TensorObject* lt = as_tensor(lengths);
    if (!(lt->flags & kPlain)) continue;
    Py_ssize_t max_len = dim_max_size(d);
    if (max_len == -2) return false;
    if (sizes[i] < max_len) {
      PyErr_Format(PyExc_ValueError,
                   "%s: dim %s has max length %zd but raw axis %zd has only size %zd (raw shape %S)",
                   caller, describe_dim(di).c_str(), max_len, i, sizes[i], shape.get());
      return false;
    }
    // The lengths' batch dims must agree with this tensor's sizes of them.
    for (Py_ssize_t k = 0; k < tensor_ndim(lt); ++k) {
      int j = dims_index(dims, PyTuple_GET_ITEM(lt->dims, k));
      if (j >= 0 && sizes[j] >= 0 && sizes[j] != lt->sizes[k]) {
        PyErr_Format(PyExc_ValueError,
                     "%s: dim %s has lengths over %s of size %zd, but the raw has size %zd there "
                     "(raw shape %S)",
                     caller, describe_dim(di).c_str(),
                     describe_dim(PyTuple_GET_ITEM(lt->dims, k)).c_str(), lt->sizes[k], sizes[j],
                     shape.get());
        return false;
      }
    }
  }
  return true;
}

/// Checks the markers and name of a Tensor over `dims`; None is taken as "none". False with error.
bool check_markers(PyObject* dims, PyObject** sparse_dim, PyObject** feature_dim, PyObject** name,
                   const char* caller) {
  if (*sparse_dim == Py_None) *sparse_dim = nullptr;
  if (*feature_dim == Py_None) *feature_dim = nullptr;
  if (*name == Py_None) *name = nullptr;
  if (*sparse_dim && !is_dim(*sparse_dim)) {
    PyErr_Format(PyExc_TypeError, "%s: sparse_dim must be a Dim or None, got %.80s", caller,
                 Py_TYPE(*sparse_dim)->tp_name);
    return false;
  }
  if (*feature_dim && (!is_dim(*feature_dim) || dims_index(dims, *feature_dim) < 0)) {
    PyErr_Format(PyExc_ValueError, "%s: feature_dim must be one of the dims (%s), got %s", caller,
                 describe_dims(dims, nullptr).c_str(), describe_dim(*feature_dim).c_str());
    return false;
  }
  if (*name && !PyUnicode_Check(*name)) {
    PyErr_Format(PyExc_TypeError, "%s: name must be a str or None, got %.80s", caller,
                 Py_TYPE(*name)->tp_name);
    return false;
  }
  return true;
}

}  // namespace

PyObject* tensor_make_checked(PyObject* raw, PyObject* dims_arg, PyObject* sparse_dim,
                              PyObject* feature_dim, PyObject* name, const char* caller) {
  if (!raw || !backend::is_raw(raw)) {
    PyErr_Format(PyExc_TypeError, "%s: raw must be a torch.Tensor, got %.80s", caller,
                 raw ? Py_TYPE(raw)->tp_name : "nothing");
    return nullptr;
  }
  if (!dims_arg) {
    PyErr_Format(PyExc_TypeError, "%s: missing argument 'dims'", caller);
    return nullptr;
  }
  Ref dims(dims_arg_to_tuple(dims_arg, caller, "dims"));
  if (!dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  if (!check_raw_dims(raw, dims.get(), caller, sizes)) return nullptr;
  if (!check_markers(dims.get(), &sparse_dim, &feature_dim, &name, caller)) return nullptr;
  Py_INCREF(raw);
  PyObject* t = tensor_make(raw, dims.get(), sizes, sparse_dim, feature_dim);
  if (t && name) {
    Py_INCREF(name);
    as_tensor(t)->name = name;
  }
  return t;
}

namespace {

constexpr const char* kCtor = "dimtorch.Tensor()";

/// The constructor's arguments (raw, dims, sparse_dim, feature_dim, name) from a vectorcall list.
bool ctor_args(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, PyObject* v[5]) {
  if (nargs > 2) {
    PyErr_Format(PyExc_TypeError, "%s takes 2 positional arguments (raw, dims), %zd given", kCtor,
                 nargs);
    return false;
  }
  v[0] = nargs > 0 ? args[0] : nullptr;
  v[1] = nargs > 1 ? args[1] : nullptr;
  v[2] = v[3] = v[4] = nullptr;
  static const char* const names[5] = {"raw", "dims", "sparse_dim", "feature_dim", "name"};
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nkw; ++i) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, i);
    int k = 0;
    while (k < 5 && PyUnicode_CompareWithASCIIString(key, names[k]) != 0) ++k;
    if (k == 5) {
      PyErr_Format(PyExc_TypeError, "%s got an unexpected keyword argument %R", kCtor, key);
      return false;
    }
    if (v[k]) {
      PyErr_Format(PyExc_TypeError, "%s got multiple values for argument %R", kCtor, key);
      return false;
    }
    v[k] = args[nargs + i];
  }
  return true;
}

/// A Tensor with no fields set (object.__new__(Tensor) gives the same).
PyObject* tensor_alloc(PyTypeObject* type, Py_ssize_t nitems) {
  PyObject* o = PyType_GenericAlloc(type, nitems);
  if (o) ++g_live_tensors;
  return o;
}

/* A traced raw (make_fx, torch.export: FakeTensor, symbolic sizes) is checked by the Python
   definition of the constructor, whose comparisons of symbolic sizes become guards there; it sets
   the fields through the setters below. */
PyObject* construct_by_definition(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  Ref self(tensor_alloc(&TensorType, 0));
  if (!self) return nullptr;
  Py_ssize_t total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
  PyObject* stack[8];
  if (total + 1 > 8) {
    PyErr_Format(PyExc_TypeError, "%s: too many arguments", kCtor);
    return nullptr;
  }
  stack[0] = self.get();
  for (Py_ssize_t i = 0; i < total; ++i) stack[i + 1] = args[i];
  Ref r(call_definition("Tensor.__init__", stack, nargs + 1, kwnames));
  if (!r) return nullptr;
  if (!is_tensor(self.get())) {
    PyErr_Format(PyExc_RuntimeError, "%s: the definition left the Tensor incomplete", kCtor);
    return nullptr;
  }
  return self.release();
}

PyObject* tensor_vectorcall(PyObject*, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  PyObject* v[5];
  if (!ctor_args(args, nargs, kwnames, v)) return nullptr;
  if (v[0] && backend::is_raw(v[0]) && !backend::is_plain_raw(v[0]))
    return construct_by_definition(args, nargs, kwnames);
  return tensor_make_checked(v[0], v[1], v[2], v[3], v[4], kCtor);
}

/// Moves the fields of the complete Tensor `from` into `self`, which has none set.
void take_fields(TensorObject* self, TensorObject* from, Py_ssize_t* heap_sizes) {
  Py_ssize_t n = tensor_ndim(from);
  for (Py_ssize_t i = 0; i < n; ++i) heap_sizes[i] = from->sizes[i];
  self->sizes = heap_sizes;
  Py_SET_SIZE(self, n);
  self->raw = Py_XNewRef(from->raw);
  self->dims = Py_XNewRef(from->dims);
  self->sparse_dim = Py_XNewRef(from->sparse_dim);
  self->feature_dim = Py_XNewRef(from->feature_dim);
  self->name = Py_XNewRef(from->name);
  self->flags = from->flags;
}

bool any_field_set(TensorObject* t) {
  return t->raw || t->dims || t->sparse_dim || t->feature_dim || t->name;
}

/// Tensor.__init__ for an object made by object.__new__(Tensor) (the constructor itself does not
/// come here). Construction is once: a Tensor's fields never change.
int tensor_init(PyObject* self, PyObject* args, PyObject* kwargs) {
  TensorObject* t = as_tensor(self);
  if (any_field_set(t)) {
    PyErr_Format(PyExc_TypeError, "dimtorch.Tensor.__init__(): the Tensor is already initialized");
    return -1;
  }
  // tuple + dict -> vectorcall arguments
  Py_ssize_t nargs = PyTuple_GET_SIZE(args);
  Ref kwnames(kwargs && PyDict_GET_SIZE(kwargs) ? PyTuple_New(PyDict_GET_SIZE(kwargs)) : nullptr);
  PyObject* stack[8];
  Py_ssize_t total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames.get()) : 0);
  if (total > 7) {
    PyErr_Format(PyExc_TypeError, "%s: too many arguments", kCtor);
    return -1;
  }
  stack[0] = self;
  for (Py_ssize_t i = 0; i < nargs; ++i) stack[i + 1] = PyTuple_GET_ITEM(args, i);
  if (kwnames) {
    Py_ssize_t pos = 0, i = 0;
    PyObject *key, *value;
    while (PyDict_Next(kwargs, &pos, &key, &value)) {
      PyTuple_SET_ITEM(kwnames.get(), i, Py_NewRef(key));
      stack[1 + nargs + i++] = value;
    }
  }
  PyObject* v[5];
  if (!ctor_args(stack + 1, nargs, kwnames.get(), v)) return -1;
  if (v[0] && backend::is_raw(v[0]) && !backend::is_plain_raw(v[0])) {
    Ref r(call_definition("Tensor.__init__", stack, nargs + 1, kwnames.get()));
    return r ? 0 : -1;
  }
  Ref made(tensor_make_checked(v[0], v[1], v[2], v[3], v[4], kCtor));
  if (!made) return -1;
  Py_ssize_t n = tensor_ndim(as_tensor(made.get()));
  Py_ssize_t* heap = PyMem_New(Py_ssize_t, n > 0 ? n : 1);
  if (!heap) {
    PyErr_NoMemory();
    return -1;
  }
  take_fields(t, as_tensor(made.get()), heap);
  return 0;
}

int tensor_traverse(PyObject* self, visitproc visit, void* arg) {
  TensorObject* t = as_tensor(self);
  Py_VISIT(t->raw);
  Py_VISIT(t->dims);
  Py_VISIT(t->sparse_dim);
  Py_VISIT(t->feature_dim);
  return 0;
}

int tensor_clear(PyObject* self) {
  TensorObject* t = as_tensor(self);
  Py_CLEAR(t->raw);
  Py_CLEAR(t->sparse_dim);
  Py_CLEAR(t->feature_dim);
  return 0;
}

void tensor_dealloc(PyObject* self) {
  TensorObject* t = as_tensor(self);
  PyObject_GC_UnTrack(self);
  if (t->weakreflist) PyObject_ClearWeakRefs(self);
  tensor_clear(self);
  /* dims is kept until here (not cleared by tp_clear) so that a cleared Tensor still has a valid
     dims tuple of its own size; a tuple of Dims cannot form a cycle through a Tensor by itself. */
  Py_CLEAR(t->dims);
  Py_CLEAR(t->name);
  if (t->sizes != t->inline_sizes) PyMem_Free(t->sizes);
  if (Py_IS_TYPE(self, &TensorType)) --g_live_tensors;  // (a subclass's instances are not counted: tensor_alloc is Tensor's own)
  PyObject_GC_Del(self);
}

PyObject* tensor_repr(PyObject* self) {
  TensorObject* t = as_tensor(self);
  if (!(t->flags & kComplete)) return PyUnicode_FromString("Tensor{<not initialized>}");
  std::string s = "Tensor{";
  if (t->name) s += "'" + to_std_string(t->name) + "', ";
  s += "dims=(" + describe_dims(t->dims, t->sizes) + ")";
  if (t->raw) {
    PyObject* dt = backend::raw_dtype_name(t->raw);
    if (dt) s += ", dtype='" + to_std_string(dt) + "'";
    else PyErr_Clear();
  }
  if (t->sparse_dim) s += ", sparse_dim=" + describe_dim(t->sparse_dim);
  if (t->feature_dim) s += ", feature_dim=" + describe_dim(t->feature_dim);
  s += "}";
  return PyUnicode_FromString(s.c_str());
}

PyObject* raw_or_error(TensorObject* t) {
  if (!t->raw)
    PyErr_SetString(PyExc_RuntimeError, t->flags & kComplete ? "dimtorch.Tensor: raw was cleared"
                                                              : "dimtorch.Tensor: not initialized");
  return t->raw;
}

PyObject* get_raw(PyObject* self, void*) {
  PyObject* r = raw_or_error(as_tensor(self));
  return r ? Py_NewRef(r) : nullptr;
}
PyObject* get_dims(PyObject* self, void*) {
  PyObject* d = as_tensor(self)->dims;
  if (!d) {
    PyErr_SetString(PyExc_AttributeError, "dimtorch.Tensor: not initialized");
    return nullptr;
  }
  return Py_NewRef(d);
}
bool check_complete(PyObject* self) {
  if (as_tensor(self)->flags & kComplete) return true;
  PyErr_SetString(PyExc_AttributeError, "dimtorch.Tensor: not initialized");
  return false;
}
PyObject* get_ndim(PyObject* self, void*) {
  return check_complete(self) ? PyLong_FromSsize_t(Py_SIZE(self)) : nullptr;
}
PyObject* get_shape(PyObject* self, void*) {
  TensorObject* t = as_tensor(self);
  if (!check_complete(self)) return nullptr;
  if (!(t->flags & kPlain) && t->raw) return PyObject_GetAttr(t->raw, backend::T.s_shape);
  PyObject* r = PyTuple_New(tensor_ndim(t));
  if (!r) return nullptr;
  for (Py_ssize_t i = 0; i < tensor_ndim(t); ++i) {
    PyObject* v = PyLong_FromSsize_t(t->sizes[i]);
    if (!v) {
      Py_DECREF(r);
      return nullptr;
    }
    PyTuple_SET_ITEM(r, i, v);
  }
  return r;
}
PyObject* get_dtype(PyObject* self, void*) {
  if (!check_complete(self)) return nullptr;
  PyObject* raw = raw_or_error(as_tensor(self));
  if (!raw) return nullptr;
  PyObject* n = backend::raw_dtype_name(raw);
  return n ? Py_NewRef(n) : nullptr;
}
PyObject* get_raw_attr(PyObject* self, PyObject* attr) {
  if (!check_complete(self)) return nullptr;
  PyObject* raw = raw_or_error(as_tensor(self));
  return raw ? PyObject_GetAttr(raw, attr) : nullptr;
}
PyObject* get_device(PyObject* self, void*) { return get_raw_attr(self, backend::T.s_device); }
PyObject* get_requires_grad(PyObject* self, void*) {
  return get_raw_attr(self, backend::T.s_requires_grad);
}
PyObject* get_sparse_dim(PyObject* self, void*) {
  PyObject* d = as_tensor(self)->sparse_dim;
  return Py_NewRef(d ? d : Py_None);
}
PyObject* get_feature_dim(PyObject* self, void*) {
  PyObject* d = as_tensor(self)->feature_dim;
  return Py_NewRef(d ? d : Py_None);
}
PyObject* get_name(PyObject* self, void*) {
  PyObject* n = as_tensor(self)->name;
  return Py_NewRef(n ? n : Py_None);
}

/* Setters: a Tensor's fields are set once. The constructor sets them all at once; a Tensor made by
   object.__new__(Tensor) (torch.compile replays a Tensor made in a graph that way) gets them one by
   one, and becomes complete, checked as the constructor checks, when raw and dims are both set. */
int read_only(const char* name) {
  PyErr_Format(PyExc_AttributeError, "dimtorch.Tensor: attribute '%s' is read-only", name);
  return -1;
}

/// Makes t complete once raw and dims are set; on a failed check the field just set is undone.
int complete_if_ready(TensorObject* t, PyObject** just_set) {
  if (!t->raw || !t->dims) return 0;
  static const char* caller = "dimtorch.Tensor";
  Py_ssize_t sizes[kMaxDims];
  PyObject *sparse = t->sparse_dim, *feature = t->feature_dim, *name = t->name;
  if (!check_raw_dims(t->raw, t->dims, caller, sizes) ||
      !check_markers(t->dims, &sparse, &feature, &name, caller)) {
    Py_CLEAR(*just_set);
    return -1;
  }
  Py_ssize_t n = PyTuple_GET_SIZE(t->dims);
  Py_ssize_t* heap = PyMem_New(Py_ssize_t, n > 0 ? n : 1);
  if (!heap) {
    Py_CLEAR(*just_set);
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; ++i) heap[i] = sizes[i];
  t->sizes = heap;
  Py_SET_SIZE(t, n);
  t->flags = kComplete;
  if (backend::is_plain_raw(t->raw)) {
    t->flags |= kPlain;
    for (Py_ssize_t i = 0; i < n; ++i)
      if (sizes[i] < 0) t->flags = kComplete;
  }
  return 0;
}

int set_raw(PyObject* self, PyObject* value, void*) {
  TensorObject* t = as_tensor(self);
  if (t->flags & kComplete || t->raw || !value) return read_only("raw");
  if (!backend::is_raw(value)) {
    PyErr_Format(PyExc_TypeError, "dimtorch.Tensor: raw must be a torch.Tensor, got %.80s",
                 Py_TYPE(value)->tp_name);
    return -1;
  }
  t->raw = Py_NewRef(value);
  return complete_if_ready(t, &t->raw);
}
int set_dims(PyObject* self, PyObject* value, void*) {
  TensorObject* t = as_tensor(self);
  if (t->flags & kComplete || t->dims || !value) return read_only("dims");
  PyObject* dims = dims_arg_to_tuple(value, "dimtorch.Tensor", "dims");
  if (!dims) return -1;
  t->dims = dims;
  return complete_if_ready(t, &t->dims);
}
/// sparse_dim, feature_dim, name: once, before the Tensor is complete (checked on completion);
/// None is no change.
int set_marker(PyObject* self, PyObject* value, PyObject** field, const char* name) {
  TensorObject* t = as_tensor(self);
  if (!value) return read_only(name);
  if (value == Py_None && !*field) return 0;
  if (t->flags & kComplete || *field) return read_only(name);
  *field = Py_NewRef(value);
  return complete_if_ready(t, field);
}
int set_sparse_dim(PyObject* self, PyObject* value, void*) {
  return set_marker(self, value, &as_tensor(self)->sparse_dim, "sparse_dim");
}
int set_feature_dim(PyObject* self, PyObject* value, void*) {
  return set_marker(self, value, &as_tensor(self)->feature_dim, "feature_dim");
}
int set_name(PyObject* self, PyObject* value, void*) {
  return set_marker(self, value, &as_tensor(self)->name, "name");
}

PyGetSetDef tensor_getset[] = {
    {"raw", get_raw, set_raw, "The torch.Tensor, axes in dims order.", nullptr},
    {"dims", get_dims, set_dims, "Tuple of Dim, one per raw axis.", nullptr},
    {"ndim", get_ndim, nullptr, "Number of dims.", nullptr},
    {"shape", get_shape, nullptr, "Raw sizes, one per dim (host ints).", nullptr},
    {"dtype", get_dtype, nullptr, "dtype name, e.g. 'float32'.", nullptr},
    {"device", get_device, nullptr, "torch.device of the raw.", nullptr},
    {"requires_grad", get_requires_grad, nullptr, "raw.requires_grad.", nullptr},
    {"sparse_dim", get_sparse_dim, set_sparse_dim, "Vocabulary dim of class-index tensors, or None.",
     nullptr},
    {"feature_dim", get_feature_dim, set_feature_dim, "Marked feature dim, or None.", nullptr},
    {"name", get_name, set_name, "Name given at construction, or None.", nullptr},
    {nullptr}};

PyObject* m_copy(PyObject* self, PyObject*) {
  if (!check_complete(self)) return nullptr;
  TensorObject* t = as_tensor(self);
  PyObject* raw = raw_or_error(t);
  if (!raw) return nullptr;
  Py_INCREF(raw);
  PyObject* r = tensor_make(raw, t->dims, t->sizes, t->sparse_dim, t->feature_dim);
  if (r && t->name) as_tensor(r)->name = Py_NewRef(t->name);
  return r;
}

PyObject* m_reduce(PyObject* self, PyObject*) {
  if (!check_complete(self)) return nullptr;
  return call_definition("Tensor.__reduce__", &self, 1, nullptr);
}

/// A method's call on a traced Tensor (or with one as its argument) goes to its definition.
bool method_traced(PyObject* self, PyObject* arg) {
  return is_traced_tensor(self) || (arg && any_traced(&arg, 1));
}
PyObject* method_definition(const char* name, PyObject* self, PyObject* arg) {
  return call_method_definition(name, self, &arg, arg ? 1 : 0, nullptr);
}

PyObject* m_deepcopy(PyObject* self, PyObject* memo) {
  if (!check_complete(self)) return nullptr;
  TensorObject* t = as_tensor(self);
  PyObject* raw = raw_or_error(t);
  if (!raw) return nullptr;
  PyObject* raw_copy = backend::call2(backend::T.deepcopy, raw, memo);
  if (!raw_copy) return nullptr;
  PyObject* r = tensor_make(raw_copy, t->dims, t->sizes, t->sparse_dim, t->feature_dim);
  if (r && t->name) as_tensor(r)->name = Py_NewRef(t->name);
  return r;
}

/// Axis of each target dim in `t` (-1 where t lacks it); error if t has a dim not in target.
bool map_to_target(TensorObject* t, PyObject* target, int* src, const char* caller) {
  Py_ssize_t n = PyTuple_GET_SIZE(target);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* d = PyTuple_GET_ITEM(target, i);
    for (Py_ssize_t j = 0; j < i; ++j)
      if (PyTuple_GET_ITEM(target, j) == d) {
        PyErr_Format(PyExc_ValueError, "%s: dim %s appears twice in the target dims", caller,
                     describe_dim(d).c_str());
        return false;
      }
    src[i] = dims_index(t->dims, d);
  }
  for (Py_ssize_t j = 0; j < tensor_ndim(t); ++j) {
    PyObject* d = PyTuple_GET_ITEM(t->dims, j);
    if (dims_index(target, d) < 0) {
      MessageDims scope{t->dims, target};
      PyErr_Format(PyExc_ValueError, "%s: dim %s of the tensor is not in the target dims (%s); tensor dims: %s%s",
                   caller, describe_dim(d).c_str(), describe_dims(target, nullptr).c_str(),
                   describe_dims(t->dims, t->sizes).c_str(), scope.namesakes_note().c_str());
      return false;
    }
  }
  return true;
}

/// Raw permuted so that t's dims follow the order they have in `src` (target order); new ref.
PyObject* permuted_raw(TensorObject* t, const int* src, Py_ssize_t n_target) {
  int order[kMaxDims];
  int k = 0;
  for (Py_ssize_t i = 0; i < n_target; ++i)
    if (src[i] >= 0) order[k++] = src[i];
  return backend::permute_order(t->raw, order, k);
}

PyObject* m_raw_aligned(PyObject* self, PyObject* arg) {
  static const char* caller = "dimtorch.Tensor.raw_aligned()";
  if (!check_complete(self)) return nullptr;
  if (method_traced(self, arg)) return method_definition("Tensor.raw_aligned", self, arg);
  TensorObject* t = as_tensor(self);
  if (!raw_or_error(t)) return nullptr;
  Ref target(dims_arg_to_tuple(arg, caller, "dims"));
  if (!target) return nullptr;
  return tensor_raw_aligned(t, target.get(), caller);
}

PyObject* m_copy_transpose(PyObject* self, PyObject* arg) {
  static const char* caller = "dimtorch.Tensor.copy_transpose()";
  if (!check_complete(self)) return nullptr;
  if (method_traced(self, arg)) return method_definition("Tensor.copy_transpose", self, arg);
  TensorObject* t = as_tensor(self);
  if (!raw_or_error(t)) return nullptr;
  Ref target(dims_arg_to_tuple(arg, caller, "dims"));
  if (!target) return nullptr;
  Py_ssize_t n = PyTuple_GET_SIZE(target.get());
  if (n != tensor_ndim(t)) {
    PyErr_Format(PyExc_ValueError, "%s: dims must be a permutation of the tensor's dims (%s), got (%s)",
                 caller, describe_dims(t->dims, t->sizes).c_str(),
                 describe_dims(target.get(), nullptr).c_str());
    return nullptr;
  }
  int src[kMaxDims];
  if (!map_to_target(t, target.get(), src, caller)) return nullptr;
  PyObject* raw = permuted_raw(t, src, n);
  if (!raw) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  for (Py_ssize_t i = 0; i < n; ++i) sizes[i] = t->sizes[src[i]];
  PyObject* r = tensor_make(raw, target.get(), sizes, t->sparse_dim, t->feature_dim);
  if (r && t->name) as_tensor(r)->name = Py_NewRef(t->name);
  return r;
}

PyObject* m_remaining_dims(PyObject* self, PyObject* arg) {
  static const char* caller = "dimtorch.Tensor.remaining_dims()";
  if (!check_complete(self)) return nullptr;
  TensorObject* t = as_tensor(self);
  Ref remove(dims_arg_to_tuple(arg, caller, "remove"));
  if (!remove) return nullptr;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(remove.get()); ++i) {
    PyObject* d = PyTuple_GET_ITEM(remove.get(), i);
    if (dims_index(t->dims, d) < 0) {
      MessageDims scope{d, t->dims};
      PyErr_Format(PyExc_ValueError, "%s: dim %s is not in the tensor (dims: %s)%s", caller,
                   describe_dim(d).c_str(), describe_dims(t->dims, t->sizes).c_str(),
                   scope.namesakes_note().c_str());
      return nullptr;
    }
  }
  // The kept dims counted first: `remove` may name a dim twice, so its length is not what goes.
  Py_ssize_t n = tensor_ndim(t), kept = 0, k = 0;
  for (Py_ssize_t j = 0; j < n; ++j) kept += dims_index(remove.get(), PyTuple_GET_ITEM(t->dims, j)) < 0;
  Ref out(PyTuple_New(kept));
  if (!out) return nullptr;
  for (Py_ssize_t j = 0; j < n; ++j) {
    PyObject* d = PyTuple_GET_ITEM(t->dims, j);
    if (dims_index(remove.get(), d) >= 0) continue;
    PyTuple_SET_ITEM(out.get(), k++, Py_NewRef(d));
  }
  return out.release();
}

PyObject* m_get_axis(PyObject* self, PyObject* arg) {
  if (!check_complete(self)) return nullptr;
  TensorObject* t = as_tensor(self);
  if (!is_dim(arg)) {
    PyErr_Format(PyExc_TypeError, "dimtorch.Tensor.get_axis(): expected a Dim, got %.80s",
                 Py_TYPE(arg)->tp_name);
    return nullptr;
  }
  int i = dims_index(t->dims, arg);
  if (i < 0) {
    MessageDims scope{arg, t->dims};
    PyErr_Format(PyExc_ValueError, "dimtorch.Tensor.get_axis(): dim %s is not in the tensor (dims: %s)%s",
                 describe_dim(arg).c_str(), describe_dims(t->dims, t->sizes).c_str(),
                 scope.namesakes_note().c_str());
    return nullptr;
  }
  return PyLong_FromLong(i);
}

/// Tensor.__init_subclass__: a subclass may add behaviour but no fields (`__slots__ = ()`): its
/// instances must have Tensor's layout, which the core reads (and whose item count a Tensor made
/// by object.__new__ changes when it is completed, which would move an instance dict).
PyObject* m_init_subclass(PyObject* cls, PyObject* args, PyObject* kwargs) {
  if ((args && PyTuple_GET_SIZE(args)) || (kwargs && PyDict_GET_SIZE(kwargs))) {
    PyErr_SetString(PyExc_TypeError, "dimtorch.Tensor.__init_subclass__() takes no arguments");
    return nullptr;
  }
  PyTypeObject* t = reinterpret_cast<PyTypeObject*>(cls);
  if (t->tp_dictoffset != 0 || t->tp_basicsize != TensorType.tp_basicsize ||
      t->tp_itemsize != TensorType.tp_itemsize) {
    PyErr_Format(PyExc_TypeError,
                 "dimtorch.Tensor subclass %.100s must add no fields: declare __slots__ = () (keep "
                 "per-object data elsewhere, e.g. on the raw)", t->tp_name);
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyMethodDef tensor_methods[] = {
    {"__init_subclass__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(m_init_subclass)),
     METH_VARARGS | METH_KEYWORDS | METH_CLASS, nullptr},
    {"copy", m_copy, METH_NOARGS, "A new Tensor sharing the raw and metadata."},
    {"__copy__", m_copy, METH_NOARGS, nullptr},
    {"__deepcopy__", m_deepcopy, METH_O, nullptr},
    {"__reduce__", m_reduce, METH_NOARGS, "Pickled as (raw, dims, sparse_dim, feature_dim, name)."},
    {"copy_transpose", m_copy_transpose, METH_O,
     "copy_transpose(dims): the same values with the raw permuted to `dims` (a permutation of "
     "self.dims)."},
    {"raw_aligned", m_raw_aligned, METH_O,
     "raw_aligned(dims): raw view with axes in `dims` order and size-1 axes for dims the tensor "
     "lacks. Every dim of the tensor must be in `dims`."},
    {"remaining_dims", m_remaining_dims, METH_O,
     "remaining_dims(remove): self.dims without `remove` (a Dim or sequence of Dims)."},
    {"get_axis", m_get_axis, METH_O, "get_axis(dim): raw axis index of `dim`."},
    {"copy_masked", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(tensor_copy_masked)),
     METH_FASTCALL | METH_KEYWORDS,
     "copy_masked(value, dims=None): the padding frames of the dynamic dims (all, or those in "
     "`dims`) set to `value`."},
    {nullptr}};

int tensor_bool(PyObject*) {
  PyErr_SetString(PyExc_TypeError,
                  "dimtorch.Tensor.__bool__(): the truth value of a Tensor is ambiguous and "
                  "reading it would sync with the device; reduce it (dimtorch.reduce_any / "
                  "reduce_all) and read .raw explicitly");
  return -1;
}

Py_ssize_t tensor_len(PyObject* self) {
  if (!check_complete(self)) return -1;
  PyErr_Format(PyExc_TypeError,
               "dimtorch.Tensor.__len__(): a Tensor has no length, it has dims (%s); use .dims "
               "or dim.get_max_size()",
               describe_dims(as_tensor(self)->dims, as_tensor(self)->sizes).c_str());
  return -1;
}

Py_hash_t tensor_hash(PyObject* self) { return identity_hash(self); }

PyNumberMethods tensor_as_number = {};
PySequenceMethods tensor_as_sequence = {};

}  // namespace

PyObject* tensor_raw_aligned(TensorObject* t, PyObject* target, const char* caller) {
  Py_ssize_t n = PyTuple_GET_SIZE(target);
  if (n > kMaxDims) {
    PyErr_Format(PyExc_ValueError, "%s: at most %d dims are supported", caller, kMaxDims);
    return nullptr;
  }
  int src[kMaxDims];
  if (!map_to_target(t, target, src, caller)) return nullptr;
  Ref r(permuted_raw(t, src, n));
  if (!r || n == tensor_ndim(t)) return r.release();
  Py_ssize_t sizes[kMaxDims];
  for (Py_ssize_t i = 0; i < n; ++i) sizes[i] = src[i] >= 0 ? t->sizes[src[i]] : 1;
  Ref shape(size_tuple(sizes, n));
  if (!shape) return nullptr;
  return backend::call2(backend::T.view, r.get(), shape.get());
}

bool export_tensor(PyObject* module) {
  TensorType.tp_name = "dimtorch.Tensor";
  TensorType.tp_basicsize = offsetof(TensorObject, inline_sizes);
  TensorType.tp_itemsize = sizeof(Py_ssize_t);
  /* BASETYPE: Python subclasses with `__slots__ = ()` (no fields of their own), e.g. dimtorch.rf's
     Parameter, which is a Tensor as in RETURNN frontend; is_tensor() takes them. */
  TensorType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE;
  TensorType.tp_doc =
      "Tensor(raw, dims, *, sparse_dim=None, feature_dim=None, name=None)\n\nA torch.Tensor with "
      "one Dim per raw axis. Construction checks the raw shape against the dims.";
  /* object's own tp_new, and no __new__ of our own in the type dict: torch.compile makes the
     Tensors of a graph with object.__new__(Tensor) and sets their fields (setters above); the
     constructor is tp_vectorcall, and tp_init serves object.__new__(Tensor).__init__(...). */
  TensorType.tp_new = PyBaseObject_Type.tp_new;
  TensorType.tp_init = tensor_init;
  TensorType.tp_alloc = tensor_alloc;
  TensorType.tp_dealloc = tensor_dealloc;
  TensorType.tp_traverse = tensor_traverse;
  TensorType.tp_clear = tensor_clear;
  TensorType.tp_repr = tensor_repr;
  TensorType.tp_hash = tensor_hash;
  TensorType.tp_getset = tensor_getset;
  TensorType.tp_methods = tensor_methods;
  TensorType.tp_weaklistoffset = offsetof(TensorObject, weakreflist);
  tensor_as_number.nb_bool = tensor_bool;
  tensor_as_sequence.sq_length = tensor_len;
  TensorType.tp_as_number = &tensor_as_number;
  TensorType.tp_as_sequence = &tensor_as_sequence;
  install_elementwise_slots(&TensorType);
  if (PyType_Ready(&TensorType) < 0) return false;
  /* numpy would otherwise take `array + tensor` itself and make an object array of Tensors;
     None makes it return NotImplemented, so our reflected slot raises a clear TypeError. */
  if (PyDict_SetItemString(TensorType.tp_dict, "__array_ufunc__", Py_None) < 0) return false;
  if (PyDict_DelItemString(TensorType.tp_dict, "__new__") < 0) return false;
  static const char* const derived[] = {"ndim", "shape", "dtype", "device", "requires_grad", nullptr};
  if (!make_traceable_properties(&TensorType, derived)) return false;
  PyType_Modified(&TensorType);
  TensorType.tp_vectorcall = tensor_vectorcall;
  Py_INCREF(&TensorType);
  return PyModule_AddObject(module, "Tensor", reinterpret_cast<PyObject*>(&TensorType)) == 0;
}

}  // namespace dimtorch
