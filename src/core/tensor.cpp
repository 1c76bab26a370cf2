// The native Tensor type: checked construction, properties, transposes and aligned raw views.
#include "core/tensor.h"

#include "core/args.h"
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
  t->template_dtype = nullptr;
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

/// RETURNN's form of the constructor, Tensor(name, dims=, dtype=, *, sparse_dim=, feature_dim=,
/// feature_dim_axis=, raw_tensor=): a str first, or no positional argument and no `raw` keyword.
/// The Python definition makes it (a template while it has no raw_tensor).
bool rf_form(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs > 0) return PyUnicode_Check(args[0]);
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nkw; ++i)
    if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), "raw") == 0) return false;
  return nkw > 0;
}

/* A traced raw (make_fx, torch.export: FakeTensor, symbolic sizes) is checked by the Python
   definition of the constructor, whose comparisons of symbolic sizes become guards there; it sets
   the fields through the setters below. RETURNN's form (rf_form) is made there too; it may leave
   a template (dims without a raw). */
PyObject* construct_by_definition(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  Ref self(tensor_alloc(&TensorType, 0));
  if (!self) return nullptr;
  Py_ssize_t total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
  PyObject* stack[16];
  if (total + 1 > 16) {
    PyErr_Format(PyExc_TypeError, "%s: too many arguments", kCtor);
    return nullptr;
  }
  stack[0] = self.get();
  for (Py_ssize_t i = 0; i < total; ++i) stack[i + 1] = args[i];
  Ref r(call_definition("Tensor.__init__", stack, nargs + 1, kwnames));
  if (!r) return nullptr;
  if (!is_tensor(self.get()) && !is_template(self.get())) {
    PyErr_Format(PyExc_RuntimeError, "%s: the definition left the Tensor incomplete", kCtor);
    return nullptr;
  }
  return self.release();
}

PyObject* tensor_vectorcall(PyObject*, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs == 0 || PyUnicode_Check(args[0])) {
    if (rf_form(args, nargs, kwnames)) return construct_by_definition(args, nargs, kwnames);
  }
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
  return t->raw || t->dims || t->sparse_dim || t->feature_dim || t->name || t->template_dtype;
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
  PyObject* stack[16];
  Py_ssize_t total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames.get()) : 0);
  if (total > 15) {
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
  if (rf_form(stack + 1, nargs, kwnames.get())) {
    Ref r(call_definition("Tensor.__init__", stack, nargs + 1, kwnames.get()));
    return r ? 0 : -1;
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
  Py_CLEAR(t->template_dtype);
  if (t->sizes != t->inline_sizes) PyMem_Free(t->sizes);
  if (Py_IS_TYPE(self, &TensorType)) --g_live_tensors;  // (a subclass's instances are not counted: tensor_alloc is Tensor's own)
  PyObject_GC_Del(self);
}

PyObject* tensor_repr(PyObject* self) {
  TensorObject* t = as_tensor(self);
  if (is_template(self)) {
    std::string s = "Tensor{";
    if (t->name) s += "'" + to_std_string(t->name) + "', ";
    s += "dims=(" + describe_dims(t->dims, nullptr) + ")";
    if (t->template_dtype) s += ", dtype='" + to_std_string(t->template_dtype) + "'";
    if (t->sparse_dim) s += ", sparse_dim=" + describe_dim(t->sparse_dim);
    if (t->feature_dim) s += ", feature_dim=" + describe_dim(t->feature_dim);
    return PyUnicode_FromString((s + ", template}").c_str());
  }
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

/// "dimtorch.Tensor: 'x' is a template ..." for a Tensor with dims but no raw, else "not initialized".
PyObject* incomplete_error(TensorObject* t, PyObject* exc) {
  if (t->dims && !t->raw && !(t->flags & kComplete)) {
    std::string name = t->name ? "'" + to_std_string(t->name) + "' " : std::string();
    PyErr_Format(exc,
                 "dimtorch.Tensor: %sis a template without a raw (dims: %s); assign its raw_tensor "
                 "first",
                 name.c_str(), describe_dims(t->dims, nullptr).c_str());
  } else {
    PyErr_SetString(exc, "dimtorch.Tensor: not initialized");
  }
  return nullptr;
}

PyObject* raw_or_error(TensorObject* t) {
  if (!t->raw) {
    if (t->flags & kComplete) PyErr_SetString(PyExc_RuntimeError, "dimtorch.Tensor: raw was cleared");
    else incomplete_error(t, PyExc_RuntimeError);
  }
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
  incomplete_error(as_tensor(self), PyExc_AttributeError);
  return false;
}
PyObject* get_ndim(PyObject* self, void*) {
  if (is_template(self)) return PyLong_FromSsize_t(PyTuple_GET_SIZE(as_tensor(self)->dims));
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
  TensorObject* t = as_tensor(self);
  if (is_template(self) && t->template_dtype) return Py_NewRef(t->template_dtype);
  if (!check_complete(self)) return nullptr;
  PyObject* raw = raw_or_error(t);
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

/* Setters. raw and dims are set once: the constructor sets them at once; a Tensor made by
   object.__new__(Tensor) (torch.compile replays a Tensor made in a graph that way) gets them one
   by one, and becomes complete, checked as the constructor checks, when raw and dims are both set.
   The markers (sparse_dim, feature_dim, name) and raw_tensor may change later, as RETURNN code
   changes them on a fresh copy, except on a frozen Tensor (kFrozen): one that dimtorch caches and
   hands out more than once. */
int read_only(const char* name) {
  PyErr_Format(PyExc_AttributeError, "dimtorch.Tensor: attribute '%s' is read-only", name);
  return -1;
}
int frozen_error(const char* name) {
  PyErr_Format(PyExc_AttributeError,
               "dimtorch.Tensor.%s = ...: this Tensor is frozen: dimtorch caches it and hands it out "
               "more than once (a dim's lengths, Dim.get_mask()'s result, a module's parameter); "
               "copy() it first (a dim's new lengths: dim.dyn_size_ext = Tensor(...))",
               name);
  return -1;
}

/// Stores `sizes` (n of them) in t, in the storage it has when that holds n (its inline sizes, or
/// the heap array of an earlier completion), else in a new heap array. False when out of memory.
bool store_sizes(TensorObject* t, const Py_ssize_t* sizes, Py_ssize_t n) {
  if (!t->sizes || Py_SIZE(t) != n) {
    Py_ssize_t* heap = PyMem_New(Py_ssize_t, n > 0 ? n : 1);
    if (!heap) {
      PyErr_NoMemory();
      return false;
    }
    if (t->sizes && t->sizes != t->inline_sizes) PyMem_Free(t->sizes);
    t->sizes = heap;
    Py_SET_SIZE(t, n);
  }
  for (Py_ssize_t i = 0; i < n; ++i) t->sizes[i] = sizes[i];
  return true;
}

/// The flags of a Tensor completed with `raw` and `sizes` (-1: symbolic), keeping kFrozen.
unsigned char complete_flags(TensorObject* t, PyObject* raw, const Py_ssize_t* sizes, Py_ssize_t n) {
  unsigned char flags = kComplete | (t->flags & kFrozen);
  if (!backend::is_plain_raw(raw)) return flags;
  for (Py_ssize_t i = 0; i < n; ++i)
    if (sizes[i] < 0) return flags;
  return flags | kPlain;
}

/// Whether `raw`'s dtype is the one a template declared; false with a ValueError naming `caller`.
bool check_template_dtype(TensorObject* t, PyObject* raw, const char* caller) {
  if (!t->template_dtype) return true;
  PyObject* dtype = backend::raw_dtype_name(raw);
  if (!dtype) return false;
  int same = PyUnicode_Compare(dtype, t->template_dtype) == 0;
  if (same) return true;
  if (PyErr_Occurred()) return false;
  PyErr_Format(PyExc_ValueError, "%s: the Tensor has dtype '%U' but the raw has dtype '%U' (dims: %s)",
               caller, t->template_dtype, dtype, describe_dims(t->dims, nullptr).c_str());
  return false;
}

/// Makes t complete once raw and dims are set; on a failed check the field just set is undone.
int complete_if_ready(TensorObject* t, PyObject** just_set) {
  if (!t->raw || !t->dims) return 0;
  static const char* caller = "dimtorch.Tensor";
  Py_ssize_t sizes[kMaxDims];
  PyObject *sparse = t->sparse_dim, *feature = t->feature_dim, *name = t->name;
  if (!check_raw_dims(t->raw, t->dims, caller, sizes) ||
      !check_markers(t->dims, &sparse, &feature, &name, caller) ||
      !check_template_dtype(t, t->raw, caller)) {
    Py_CLEAR(*just_set);
    return -1;
  }
  Py_ssize_t n = PyTuple_GET_SIZE(t->dims);
  if (!store_sizes(t, sizes, n)) {
    Py_CLEAR(*just_set);
    return -1;
  }
  t->flags = complete_flags(t, t->raw, sizes, n);
  Py_CLEAR(t->template_dtype);
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

/* raw_tensor (RETURNN's name): the raw, or None for a template. Assigning a raw checks it against
   the dims as the constructor does (and against the dtype: the template's, or the old raw's);
   assigning None makes the Tensor a template again (ops refuse it until it has a raw). */
PyObject* get_raw_tensor(PyObject* self, void*) {
  TensorObject* t = as_tensor(self);
  if (t->raw) return Py_NewRef(t->raw);
  if (t->dims || !(t->flags & kComplete)) Py_RETURN_NONE;
  return raw_or_error(t);
}
/// What RETURNN code assigns that the setter itself refuses: a numpy raw, or the raw of a declared
/// dim's lengths template (a binding). The Python definition takes it, or gives NotImplemented, and
/// then `refuse` raises the setter's own error. Only on those failure paths: no cost otherwise.
template <class Refuse>
int assign_raw_fallback(PyObject* self, PyObject* value, Refuse refuse) {
  PyObject* args[2] = {self, value};
  Ref r(call_definition("Tensor._assign_raw_fallback", args, 2, nullptr));
  if (!r) return -1;
  return r.get() == Py_NotImplemented ? refuse() : 0;
}

int set_raw_tensor(PyObject* self, PyObject* value, void*) {
  static const char* caller = "dimtorch.Tensor.raw_tensor = ...";
  TensorObject* t = as_tensor(self);
  if (!value) return read_only("raw_tensor");
  if (t->flags & kFrozen)
    return assign_raw_fallback(self, value, [] { return frozen_error("raw_tensor"); });
  if (!t->dims) {
    PyErr_Format(PyExc_AttributeError, "%s: the Tensor has no dims yet", caller);
    return -1;
  }
  if (value == Py_None) {
    if (!t->raw) return 0;
    PyObject* dtype = backend::raw_dtype_name(t->raw);
    if (!dtype) return -1;
    Py_XSETREF(t->template_dtype, Py_NewRef(dtype));
    t->flags &= kFrozen;  // a template: no C++ path takes it as a Tensor
    Py_CLEAR(t->raw);
    return 0;
  }
  if (!backend::is_raw(value)) {
    return assign_raw_fallback(self, value, [&] {
      PyErr_Format(PyExc_TypeError, "%s: raw must be a torch.Tensor or None, got %.80s", caller,
                   Py_TYPE(value)->tp_name);
      return -1;
    });
  }
  Py_ssize_t sizes[kMaxDims];
  if (!check_raw_dims(value, t->dims, caller, sizes)) return -1;
  if (t->raw && !t->template_dtype) {  // the dtype stays the old raw's
    PyObject* dtype = backend::raw_dtype_name(t->raw);
    if (!dtype) return -1;
    t->template_dtype = Py_NewRef(dtype);
    bool ok = check_template_dtype(t, value, caller);
    Py_CLEAR(t->template_dtype);
    if (!ok) return -1;
  } else if (!check_template_dtype(t, value, caller)) {
    return -1;
  }
  if (t->feature_dim && dims_index(t->dims, t->feature_dim) < 0) {  // (set on an incomplete Tensor)
    PyErr_Format(PyExc_ValueError, "%s: feature_dim %s is not one of the dims (%s)", caller,
                 describe_dim(t->feature_dim).c_str(), describe_dims(t->dims, nullptr).c_str());
    return -1;
  }
  Py_ssize_t n = PyTuple_GET_SIZE(t->dims);
  if (!store_sizes(t, sizes, n)) return -1;
  t->flags = complete_flags(t, value, sizes, n);
  Py_CLEAR(t->template_dtype);
  Py_XSETREF(t->raw, Py_NewRef(value));
  return 0;
}

/// The dtype a template declares (set by RETURNN's form of the constructor, and copy_template).
PyObject* get_template_dtype(PyObject* self, void*) {
  PyObject* d = as_tensor(self)->template_dtype;
  return Py_NewRef(d ? d : Py_None);
}
int set_template_dtype(PyObject* self, PyObject* value, void*) {
  TensorObject* t = as_tensor(self);
  if (!value || t->raw) return read_only("_template_dtype");
  if (value != Py_None && !PyUnicode_Check(value)) {
    PyErr_Format(PyExc_TypeError, "dimtorch.Tensor: a template's dtype must be a str, got %.80s",
                 Py_TYPE(value)->tp_name);
    return -1;
  }
  Py_XSETREF(t->template_dtype, value == Py_None ? nullptr : Py_NewRef(value));
  return 0;
}

PyObject* get_frozen(PyObject* self, void*) { return PyBool_FromLong(as_tensor(self)->flags & kFrozen); }
int set_frozen(PyObject* self, PyObject* value, void*) {
  int on = value ? PyObject_IsTrue(value) : 0;
  if (on < 0) return -1;
  if (!on) {
    PyErr_SetString(PyExc_AttributeError,
                    "dimtorch.Tensor._frozen: a frozen Tensor stays frozen; copy() it for one you may change");
    return -1;
  }
  tensor_freeze(self);
  return 0;
}

/// sparse_dim, feature_dim, name: changeable (None clears), except on a frozen Tensor. On a Tensor
/// with dims, a feature_dim must be one of them (else it is checked on completion).
int set_marker(PyObject* self, PyObject* value, PyObject** field, const char* name) {
  TensorObject* t = as_tensor(self);
  if (!value) return read_only(name);
  if (value == Py_None && !*field) return 0;
  if (t->flags & kFrozen) return frozen_error(name);
  if (value != Py_None) {
    bool is_name = field == &t->name;
    if (is_name ? !PyUnicode_Check(value) : !is_dim(value)) {
      PyErr_Format(PyExc_TypeError, "dimtorch.Tensor.%s = ...: expected %s or None, got %.80s", name,
                   is_name ? "a str" : "a Dim", Py_TYPE(value)->tp_name);
      return -1;
    }
    if (field == &t->feature_dim && t->dims && dims_index(t->dims, value) < 0) {
      PyErr_Format(PyExc_ValueError, "dimtorch.Tensor.feature_dim = ...: %s is not one of the dims (%s)",
                   describe_dim(value).c_str(), describe_dims(t->dims, nullptr).c_str());
      return -1;
    }
  }
  Py_XSETREF(*field, value == Py_None ? nullptr : Py_NewRef(value));
  return 0;
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
    {"sparse_dim", get_sparse_dim, set_sparse_dim,
     "Vocabulary dim of class-index tensors, or None (assignable, except on a frozen Tensor).", nullptr},
    {"feature_dim", get_feature_dim, set_feature_dim,
     "Marked feature dim, or None (assignable, except on a frozen Tensor).", nullptr},
    {"name", get_name, set_name, "Name, or None (assignable, except on a frozen Tensor).", nullptr},
    {"raw_tensor", get_raw_tensor, set_raw_tensor,
     "RETURNN's name of the raw: None for a template; assigning checks the raw against the dims and "
     "dtype (None makes a template).",
     nullptr},
    {"_template_dtype", get_template_dtype, set_template_dtype,
     "The dtype a template (a Tensor without raw) declares, or None.", nullptr},
    {"_frozen", get_frozen, set_frozen,
     "Whether the Tensor refuses assignments to raw_tensor and its markers (set True to freeze).",
     nullptr},
    {nullptr}};

PyObject* m_copy(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"name"};
  PyObject* v[1];
  if (!parse_args(args, nargs, kwnames, names, 1, 1, 0, v, "dimtorch.Tensor.copy()")) return nullptr;
  if (v[0] == Py_None) v[0] = nullptr;
  if (!(as_tensor(self)->flags & kComplete) || (v[0] && !PyUnicode_Check(v[0])))
    return call_method_definition("Tensor.copy", self, args, nargs, kwnames);
  TensorObject* t = as_tensor(self);
  PyObject* raw = raw_or_error(t);
  if (!raw) return nullptr;
  Py_INCREF(raw);
  PyObject* r = tensor_make(raw, t->dims, t->sizes, t->sparse_dim, t->feature_dim);
  PyObject* name = v[0] ? v[0] : t->name;
  if (r && name) as_tensor(r)->name = Py_NewRef(name);
  return r;
}
PyObject* m_copy_noargs(PyObject* self, PyObject*) { return m_copy(self, nullptr, 0, nullptr); }

PyObject* m_reduce(PyObject* self, PyObject*) {
  if (!is_template(self) && !check_complete(self)) return nullptr;
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
  if (is_template(self)) return call_method_definition("Tensor.copy", self, nullptr, 0, nullptr);
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

/// Whether `arg` is a list or tuple holding an int (RETURNN's axes by position: the definition's).
bool holds_int(PyObject* arg) {
  if (!PyList_Check(arg) && !PyTuple_Check(arg)) return false;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(arg); ++i)
    if (PyLong_Check(PySequence_Fast_GET_ITEM(arg, i))) return true;
  return false;
}

PyObject* m_copy_transpose(PyObject* self, PyObject* arg) {
  static const char* caller = "dimtorch.Tensor.copy_transpose()";
  if (!check_complete(self)) return nullptr;
  if (method_traced(self, arg)) return method_definition("Tensor.copy_transpose", self, arg);
  TensorObject* t = as_tensor(self);
  if (!raw_or_error(t)) return nullptr;
  Ref target(dims_arg_to_tuple(arg, caller, "dims"));
  if (!target) {
    if (!holds_int(arg)) return nullptr;
    PyErr_Clear();  // RETURNN's axes by position: the definition's
    return method_definition("Tensor.copy_transpose", self, arg);
  }
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

/// Whether `arg` is a list or tuple holding None.
bool holds_none(PyObject* arg) {
  if (!PyList_Check(arg) && !PyTuple_Check(arg)) return false;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(arg); ++i)
    if (PySequence_Fast_GET_ITEM(arg, i) == Py_None) return true;
  return false;
}

/* remaining_dims(remove=None): a list, as RETURNN gives it (code appends to it); None in `remove`
   (RETURNN code passes a feature_dim that may be None) and remove=None remove nothing. */
PyObject* m_remaining_dims(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* caller = "dimtorch.Tensor.remaining_dims()";
  static const char* const names[] = {"remove"};
  PyObject* v[1];
  if (!parse_args(args, nargs, kwnames, names, 1, 1, 0, v, caller)) return nullptr;
  TensorObject* t = as_tensor(self);
  if (!t->dims && !check_complete(self)) return nullptr;
  PyObject* arg = v[0] ? v[0] : Py_None;
  Ref remove;
  if (arg == Py_None) {
    remove = Ref(PyTuple_New(0));
  } else if (holds_none(arg)) {
    Ref kept(PyList_New(0));
    if (!kept) return nullptr;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(arg); ++i) {
      PyObject* d = PySequence_Fast_GET_ITEM(arg, i);
      if (d != Py_None && PyList_Append(kept.get(), d) < 0) return nullptr;
    }
    remove = Ref(dims_arg_to_tuple(kept.get(), caller, "remove"));
  } else {
    remove = Ref(dims_arg_to_tuple(arg, caller, "remove"));
  }
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
  Py_ssize_t n = PyTuple_GET_SIZE(t->dims), kept = 0, k = 0;
  for (Py_ssize_t j = 0; j < n; ++j) kept += dims_index(remove.get(), PyTuple_GET_ITEM(t->dims, j)) < 0;
  Ref out(PyList_New(kept));
  if (!out) return nullptr;
  for (Py_ssize_t j = 0; j < n; ++j) {
    PyObject* d = PyTuple_GET_ITEM(t->dims, j);
    if (dims_index(remove.get(), d) >= 0) continue;
    PyList_SET_ITEM(out.get(), k++, Py_NewRef(d));
  }
  return out.release();
}

PyObject* m_get_axis(PyObject* self, PyObject* arg) {
  if (!is_template(self) && !check_complete(self)) return nullptr;
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
        {"copy", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(m_copy)),
     METH_FASTCALL | METH_KEYWORDS,
     "copy(name=None): a new Tensor sharing the raw and metadata (a template's copy is a template); "
     "`name` replaces the name."},
    {"__copy__", m_copy_noargs, METH_NOARGS, nullptr},
    {"__deepcopy__", m_deepcopy, METH_O, nullptr},
    {"__reduce__", m_reduce, METH_NOARGS, "Pickled as (raw, dims, sparse_dim, feature_dim, name)."},
    {"copy_transpose", m_copy_transpose, METH_O,
     "copy_transpose(dims): the same values with the raw permuted to `dims` (a permutation of "
     "self.dims)."},
    {"raw_aligned", m_raw_aligned, METH_O,
     "raw_aligned(dims): raw view with axes in `dims` order and size-1 axes for dims the tensor "
     "lacks. Every dim of the tensor must be in `dims`."},
    {"remaining_dims", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(m_remaining_dims)),
     METH_FASTCALL | METH_KEYWORDS,
     "remaining_dims(remove=None): a list of self.dims without `remove` (a Dim or sequence of Dims; "
     "None entries are skipped)."},
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
  static const char* const derived[] = {"ndim", "shape", "dtype", "device", "requires_grad", "raw_tensor",
                                       nullptr};
  if (!make_traceable_properties(&TensorType, derived)) return false;
  PyType_Modified(&TensorType);
  TensorType.tp_vectorcall = tensor_vectorcall;
  Py_INCREF(&TensorType);
  return PyModule_AddObject(module, "Tensor", reinterpret_cast<PyObject*>(&TensorType)) == 0;
}

}  // namespace dimtorch
