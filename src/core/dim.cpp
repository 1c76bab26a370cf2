// The native Dim type: construction, identity semantics, sizes and lengths, repr.
#include "core/dim.h"
#include "core/dim_binding.h"
#include "core/message_dims.h"

#include "core/args.h"
#include "core/backend.h"
#include "core/definitions.h"
#include "core/mask.h"
#include "core/property.h"
#include "core/plan.h"
#include "core/tensor.h"
#include "core/exports.h"

namespace dimtorch {

PyTypeObject DimType = {PyVarObject_HEAD_INIT(nullptr, 0)};
Py_ssize_t g_live_dims = 0;

namespace {

PyObject* s_cpu = nullptr;
PyObject* s_aminmax = nullptr;
PyObject* s_tolist = nullptr;

/// Folds the ints of tolist()'s result (an int, or nested lists of ints) into [*lo, *hi].
bool fold_min_max(PyObject* o, Py_ssize_t* lo, Py_ssize_t* hi) {
  if (PyList_Check(o)) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(o); ++i)
      if (!fold_min_max(PyList_GET_ITEM(o, i), lo, hi)) return false;
    return true;
  }
  Py_ssize_t v = PyLong_AsSsize_t(o);
  if (v == -1 && PyErr_Occurred()) return false;
  if (v < *lo) *lo = v;
  if (v > *hi) *hi = v;
  return true;
}

/// Host min and max of an integer lengths Tensor (0, 0 when empty).
bool lengths_min_max(TensorObject* t, Py_ssize_t* min_out, Py_ssize_t* max_out) {
  Py_ssize_t numel = 1;
  *min_out = *max_out = 0;
  for (Py_ssize_t i = 0; i < tensor_ndim(t); ++i)
    if (t->sizes[i] == 0) return true;  // (before the product: an empty tensor's other sizes are free)
  for (Py_ssize_t i = 0; i < tensor_ndim(t); ++i) numel *= t->sizes[i];
  if (numel <= 1024) {
    // A batch's lengths: one tolist() is a few times cheaper than aminmax and two item() calls.
    Ref values(PyObject_CallMethodNoArgs(t->raw, s_tolist));
    if (!values) return false;
    Py_ssize_t lo = PY_SSIZE_T_MAX, hi = PY_SSIZE_T_MIN;
    if (!fold_min_max(values.get(), &lo, &hi)) return false;
    *min_out = lo;
    *max_out = hi;
    return true;
  }
  Ref mm(PyObject_CallMethodNoArgs(t->raw, s_aminmax));
  if (!mm) return false;
  Ref lo(PySequence_GetItem(mm.get(), 0)), hi(PySequence_GetItem(mm.get(), 1));
  if (!lo || !hi) return false;
  Ref lo_i(PyNumber_Index(lo.get())), hi_i(PyNumber_Index(hi.get()));
  if (!lo_i || !hi_i) return false;
  *min_out = PyLong_AsSsize_t(lo_i.get());
  *max_out = PyLong_AsSsize_t(hi_i.get());
  return !PyErr_Occurred();
}

/// Checks host lengths and returns the Tensor to keep (moved to the host if needed); new ref.
PyObject* checked_lengths(PyObject* lengths, Py_ssize_t* min_out, Py_ssize_t* max_out, const char* caller) {
  TensorObject* t = as_tensor(lengths);
  if (!t->raw) {  // (a Tensor the garbage collector cleared, resurrected by a finalizer)
    PyErr_Format(PyExc_ValueError, "%s: the lengths Tensor has no raw (cleared)", caller);
    return nullptr;
  }
  PyObject* dtype = backend::raw_dtype_name(t->raw);
  if (!dtype) return nullptr;
  if (!backend::is_integer_dtype_name(dtype)) {
    PyErr_Format(PyExc_TypeError,
                 "%s: lengths must be an integer Tensor, got dtype %U (dims: %s)", caller, dtype,
                 describe_dims(t->dims, t->sizes).c_str());
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < tensor_ndim(t); ++i) {
    DimObject* bd = as_dim(PyTuple_GET_ITEM(t->dims, i));
    if (bd->dyn_size) {
      PyErr_Format(PyExc_ValueError,
                   "%s: lengths must be over batch dims without lengths of their own, "
                   "but dim %s has lengths (dims: %s)",
                   caller, describe_dim(PyTuple_GET_ITEM(t->dims, i)).c_str(),
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
    if (!host_raw) return backend::name_error(caller);  // e.g. meta lengths: no data
    kept = Ref(tensor_make(host_raw, t->dims, t->sizes, nullptr, nullptr));
    if (!kept) return nullptr;
  }
  Py_ssize_t min_len = 0, max_len = 0;
  if (!lengths_min_max(as_tensor(kept.get()), &min_len, &max_len)) return nullptr;
  if (min_len < 0) {
    PyErr_Format(PyExc_ValueError, "%s: lengths must be >= 0, got min %zd (dims: %s)",
                 caller, min_len, describe_dims(t->dims, t->sizes).c_str());
    return nullptr;
  }
  *min_out = min_len;
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
  d->min_size = -1;
  d->total_size = -1;
  d->masks = nullptr;
  d->cache = nullptr;
  d->derived = nullptr;
  d->derive_op = DimOp::kNone;
  d->derive_a = nullptr;
  d->derive_b = nullptr;
  d->derive_k = 0;
  d->weakreflist = nullptr;
  d->pycache = nullptr;
  d->extra = nullptr;
  d->sealed = true;
  d->message_id = 0;
  d->traced_size = false;
  ++g_live_dims;
  PyObject_GC_Track(d);
  return d;
}

/// object.__new__(Dim): an unnamed dim whose size comes from data, unsealed (setters below).
PyObject* dim_tp_alloc(PyTypeObject* type, Py_ssize_t nitems) {
  PyObject* o = PyType_GenericAlloc(type, nitems);
  if (!o) return nullptr;
  DimObject* d = as_dim(o);
  d->size = d->max_size = d->min_size = d->total_size = -1;
  d->derive_op = DimOp::kNone;
  d->sealed = false;
  ++g_live_dims;
  return o;
}

PyObject* dim_create(PyObject* size, PyObject* name) {
  if (name && name != Py_None && !PyUnicode_Check(name)) {
    PyErr_Format(PyExc_TypeError, "dimtorch.Dim(): name must be a str or None, got %.80s",
                 Py_TYPE(name)->tp_name);
    return nullptr;
  }
  Py_ssize_t static_size = -1, max_size = -1, min_size = -1;
  Ref lengths;
  if (size == nullptr || size == Py_None) {
  } else if (PyLong_Check(size) && !PyBool_Check(size)) {
    static_size = PyLong_AsSsize_t(size);
    if (static_size == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      PyErr_Format(PyExc_ValueError, "dimtorch.Dim(): size %R is out of range", size);
      return nullptr;
    }
    if (static_size < 0) {
      PyErr_Format(PyExc_ValueError, "dimtorch.Dim(): size must be >= 0, got %zd", static_size);
      return nullptr;
    }
    max_size = min_size = static_size;
  } else if (is_tensor(size)) {
    lengths = Ref(checked_lengths(size, &min_size, &max_size, "dimtorch.Dim()"));
    if (lengths) tensor_freeze(lengths.get());  // a dim's lengths never change under it
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
  d->min_size = min_size;
  d->dyn_size = lengths.release();
  if (name && name != Py_None) {
    Py_INCREF(name);
    d->name = name;
  }
  return reinterpret_cast<PyObject*>(d);
}

/// Whether Dim(size) is made by the Python definition: traced lengths, or a symbolic size (make_fx,
/// torch.export: Dim(raw.shape[0])). An int costs one type check, as before.
inline bool needs_definition(PyObject* size) {
  return !PyLong_CheckExact(size) && (is_traced_tensor(size) || backend::is_symint(size));
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
    if (!slot) {  // RETURNN's options (kind=, description=, ...): its definition takes them
      return call_definition("Dim._rf_new", args, nargs, kwnames);
    }
    if (*slot) {
      PyErr_Format(PyExc_TypeError, "dimtorch.Dim() got multiple values for argument %R", key);
      return nullptr;
    }
    *slot = value;
  }
  if (size && is_template(size)) {  // RETURNN's Dim(Tensor("time", [batch_dim], dtype="int32"))
    return call_definition("Dim._rf_new", args, nargs, kwnames);
  }
  if (size && needs_definition(size)) {
    /* Lengths being traced (make_fx, torch.export) have no host values, and a symbolic size is the
       trace's: the Python definition keeps them as they are, unread. */
    Ref self(dim_tp_alloc(&DimType, 0));
    if (!self) return nullptr;
    PyObject* stack[3] = {self.get(), size, name ? name : Py_None};
    Ref r(call_definition("Dim.__init__", stack, 3, nullptr));
    return r ? self.release() : nullptr;
  }
  return dim_create(size, name);
}

/// Dim.__init__ for an object made by object.__new__(Dim) (the constructor does not come here).
int dim_init(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kw[] = {"size", "name", nullptr};
  DimObject* d = as_dim(self);
  if (d->sealed) {
    PyErr_SetString(PyExc_TypeError, "dimtorch.Dim.__init__(): the Dim is already initialized");
    return -1;
  }
  PyObject* size = nullptr;
  PyObject* name = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:Dim", const_cast<char**>(kw), &size, &name))
    return -1;
  if (size && needs_definition(size)) {
    PyObject* stack[3] = {self, size, name ? name : Py_None};
    Ref r(call_definition("Dim.__init__", stack, 3, nullptr));
    return r ? 0 : -1;
  }
  Ref made(dim_create(size, name));
  if (!made) return -1;
  DimObject* m = as_dim(made.get());
  d->name = Py_XNewRef(m->name);
  d->size = m->size;
  d->dyn_size = Py_XNewRef(m->dyn_size);
  d->max_size = m->max_size;
  d->min_size = m->min_size;
  d->sealed = true;
  return 0;
}

int dim_traverse(PyObject* self, visitproc visit, void* arg) {
  DimObject* d = as_dim(self);
  Py_VISIT(d->dyn_size);
  Py_VISIT(d->cache);
  Py_VISIT(d->pycache);
  Py_VISIT(d->derive_b);
  if (int r = dim_extra_traverse(d, visit, arg)) return r;
  return derived_cache_traverse(d, visit, arg);
}

int dim_clear(PyObject* self) {
  DimObject* d = as_dim(self);
  derived_cache_free(d);  // first: a derived dim that has not yet made its lengths reads this dim's
  Py_CLEAR(d->dyn_size);
  Py_CLEAR(d->cache);
  Py_CLEAR(d->pycache);
  Py_CLEAR(d->derive_b);
  mask_cache_free(d);
  dim_extra_free(d);
  return 0;
}

void dim_dealloc(PyObject* self) {
  DimObject* d = as_dim(self);
  PyObject_GC_UnTrack(self);
  plan_caches_dim_died(self);  // before the address can be reused by a new dim
  if (d->weakreflist) PyObject_ClearWeakRefs(self);
  // Detaching derived dims may run torch and clear errors: a pending one (a dim dying while an
  // error unwinds) is kept.
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  dim_clear(self);
  PyErr_Restore(type, value, traceback);
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
  if (s < 0) {
    if (as_dim(self)->traced_size) return call_definition("Dim._traced_size", &self, 1, nullptr);
    Py_RETURN_NONE;
  }
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

PyObject* get_derivation(PyObject* self, void*) {
  static const char* const ops[] = {"", "add", "sub", "mul", "floordiv", "ceildiv", "concat"};
  DimObject* d = as_dim(self);
  if (d->derive_op == DimOp::kNone) Py_RETURN_NONE;
  PyObject* b = reinterpret_cast<PyObject*>(dim_derive_b(d));
  if (d->derive_op == DimOp::kConcat && !b) Py_RETURN_NONE;  // B died: no longer a derivation
  return Py_BuildValue("(sOOn)", ops[static_cast<int>(d->derive_op)],
                       reinterpret_cast<PyObject*>(d->derive_a), b ? b : Py_None,
                       d->derive_k);
}

PyObject* m_is_static(PyObject* self, PyObject*) { return PyBool_FromLong(as_dim(self)->size >= 0); }
PyObject* m_is_dynamic(PyObject* self, PyObject*) {
  DimObject* d = as_dim(self);
  return PyBool_FromLong(dim_has_lengths(d));
}
PyObject* m_get_max_size(PyObject* self, PyObject*) {
  if (dim_is_traced(as_dim(self))) return call_definition("Dim.get_max_size", &self, 1, nullptr);
  if (PyErr_Occurred()) return nullptr;
  Py_ssize_t m = dim_max_size(as_dim(self));
  if (m == -2) return nullptr;
  if (m < 0) Py_RETURN_NONE;
  return PyLong_FromSsize_t(m);
}
/* The min of the lengths as a host int (the static size for a static dim), computed once with the max
   (no device read after the lengths are on the host); None when unknown or while tracing. What the
   eager scan reads to skip its per-step state masking on the steps every sequence still runs. */
PyObject* m_min_size(PyObject* self, PyObject*) {
  DimObject* d = as_dim(self);
  if (dim_is_traced(d)) Py_RETURN_NONE;
  if (PyErr_Occurred()) return nullptr;
  if (d->size >= 0) return PyLong_FromSsize_t(d->size);
  Py_ssize_t m = dim_min_size(d);
  if (m == -2) return nullptr;
  if (m < 0) Py_RETURN_NONE;
  return PyLong_FromSsize_t(m);
}
/* Dims are identities: copying one must give the same object, or copies of a model would stop
   matching the dims of the data. */
PyObject* m_copy(PyObject* self, PyObject*) { return Py_NewRef(self); }

PyObject* m_reduce(PyObject* self, PyObject*) {
  return call_definition("Dim.__reduce__", &self, 1, nullptr);
}
/* get_mask runs for every new dim and layout (per batch, several times): the common call, with
   dims_order a tuple (or None) and device a torch.device (or None), is done here; anything else,
   errors included, goes to the Python definition (dimtorch.ops.mask.get_mask). */
PyObject* m_get_mask(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kw) {
  static const char* const names[] = {"dims_order", "device"};
  PyObject* v[2];
  DimObject* d = as_dim(self);
  if (!parse_args(args, nargs, kw, names, 2, 2, 0, v, "dimtorch.Dim.get_mask()")) return nullptr;
  PyObject* dims_order = v[0] && v[0] != Py_None ? v[0] : nullptr;
  if (dim_is_traced(d)) return call_method_definition("Dim.get_mask", self, args, nargs, kw);
  if (PyErr_Occurred()) return nullptr;
  PyObject* device = v[1] && v[1] != Py_None ? v[1] : backend::cpu_device();
  if (!device) return nullptr;
  if ((dims_order && !PyTuple_Check(dims_order)) || !backend::is_device(device) || !dim_has_lengths(d))
    return call_method_definition("Dim.get_mask", self, args, nargs, kw);
  PyObject* lengths = dim_dyn_size(d);
  if (!lengths) return nullptr;
  TensorObject* lt = as_tensor(lengths);
  int k = static_cast<int>(tensor_ndim(lt));
  // Lengths over kMaxDims dims: the mask would have one more than a Tensor may; the definition says so.
  if (k + 1 > kMaxDims) return call_method_definition("Dim.get_mask", self, args, nargs, kw);
  Py_ssize_t size = dim_max_size(d);
  if (size < 0) return nullptr;
  // The mask's dims: the lengths' dims and d itself, in dims_order's order (default: that order).
  Ref order(PyTuple_New(k + 1));
  if (!order) return nullptr;
  if (!dims_order) {
    for (int i = 0; i < k; ++i) PyTuple_SET_ITEM(order.get(), i, Py_NewRef(PyTuple_GET_ITEM(lt->dims, i)));
    PyTuple_SET_ITEM(order.get(), k, Py_NewRef(self));
  } else {
    int n = 0;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(dims_order); ++j) {
      PyObject* o = PyTuple_GET_ITEM(dims_order, j);
      if (o != self && dims_index(lt->dims, o) < 0) continue;
      if (n == k + 1 || dims_index(order.get(), o) >= 0)  // given twice: the Python definition says so
        return call_method_definition("Dim.get_mask", self, args, nargs, kw);
      PyTuple_SET_ITEM(order.get(), n++, Py_NewRef(o));
    }
    if (n != k + 1) {  // dims_order lacks one: the Python definition names it
      return call_method_definition("Dim.get_mask", self, args, nargs, kw);
    }
  }
  signed char pos[kMaxDims + 1];
  Py_ssize_t sizes[kMaxDims + 1];
  for (int i = 0; i <= k; ++i) {
    PyObject* o = PyTuple_GET_ITEM(order.get(), i);
    int li = o == self ? k : dims_index(lt->dims, o);
    pos[li] = static_cast<signed char>(i);
    sizes[i] = o == self ? size : lt->sizes[li];
  }
  return dim_cached_mask_tensor(d, pos, k + 1, size, device, order.get(), sizes);
}
PyObject* m_get_size_tensor(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kw) {
  return call_method_definition("Dim.get_size_tensor", self, args, nargs, kw);
}

/* Setters: only a Dim made by object.__new__(Dim) has any, and each field is set once. That is how
   torch.compile replays a Dim made in a graph (its Python definition sets these fields); a Dim
   made by the constructor or dim math is sealed from the start. */
bool settable(DimObject* d, PyObject* value, bool unset, const char* name) {
  if (d->sealed || !value || !unset) {
    PyErr_Format(PyExc_AttributeError, "dimtorch.Dim: attribute '%s' is read-only", name);
    return false;
  }
  return true;
}
int set_name(PyObject* self, PyObject* value, void*) {
  DimObject* d = as_dim(self);
  if (!settable(d, value, !d->name, "name")) return -1;
  if (value == Py_None) return 0;
  if (!PyUnicode_Check(value)) {
    PyErr_Format(PyExc_TypeError, "dimtorch.Dim: name must be a str or None, got %.80s",
                 Py_TYPE(value)->tp_name);
    return -1;
  }
  d->name = Py_NewRef(value);
  return 0;
}
/* Dim(SymInt) under make_fx/torch.export: the trace's table keeps the size (dimtorch._core.sizes), so that
   no Dim holds a SymInt (and through it the trace's ShapeEnv) past the trace; the flag routes the
   getter there. */
int set_traced_size(PyObject* self, PyObject* value) {
  PyObject* stack[2] = {self, value};
  Ref r(call_definition("Dim._set_traced_size", stack, 2, nullptr));
  if (!r) return -1;
  as_dim(self)->traced_size = true;
  return 0;
}
int set_size(PyObject* self, PyObject* value, void*) {
  DimObject* d = as_dim(self);
  if (!settable(d, value, d->size < 0, "size"))
    return -1;
  if (value == Py_None) return 0;
  if (backend::is_symint(value)) return set_traced_size(self, value);
  Py_ssize_t n = PyLong_Check(value) && !PyBool_Check(value) ? PyLong_AsSsize_t(value) : -1;
  if (n < 0) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "dimtorch.Dim: size must be an int >= 0 or None, got %R", value);
    return -1;
  }
  d->size = d->max_size = d->min_size = n;
  return 0;
}
/// The lengths given at construction (None for a derived dim, whose dyn_size is computed).
PyObject* get_lengths(PyObject* self, void*) {
  DimObject* d = as_dim(self);
  return Py_NewRef(d->derive_op == DimOp::kNone && d->dyn_size ? d->dyn_size : Py_None);
}
int set_lengths(PyObject* self, PyObject* value, void*) {
  DimObject* d = as_dim(self);
  if (!settable(d, value, !d->dyn_size, "_lengths"))
    return -1;
  if (value == Py_None) return 0;
  // Not is_tensor(): torch.compile's replay may set the lengths Tensor's own fields after this.
  if (!Py_IS_TYPE(value, &TensorType)) {
    PyErr_Format(PyExc_TypeError, "dimtorch.Dim: lengths must be a dimtorch.Tensor, got %.80s",
                 Py_TYPE(value)->tp_name);
    return -1;
  }
  d->dyn_size = Py_NewRef(value);  // min and max are read from it when first needed
  return 0;
}
const char* const kDeriveOps[] = {"", "add", "sub", "mul", "floordiv", "ceildiv", "concat"};
/// Whether `target` is `x` or one of the dims x is derived from (a derivation may not make a cycle:
/// readers recurse through the operands). Every setter checks, so the walk ends.
bool derives_from(DimObject* x, DimObject* target) {
  if (!x) return false;
  if (x == target) return true;
  if (x->derive_op == DimOp::kNone) return false;
  return derives_from(x->derive_a, target) || derives_from(dim_derive_b(x), target);
}
int set_derivation(PyObject* self, PyObject* value, void*) {
  DimObject* d = as_dim(self);
  if (!settable(d, value, d->derive_op == DimOp::kNone, "derivation"))
    return -1;
  if (value == Py_None) return 0;
  PyObject *op, *a, *b;
  Py_ssize_t k;
  if (!PyTuple_Check(value) || !PyArg_ParseTuple(value, "UO!On", &op, &DimType, &a, &b, &k)) {
    PyErr_Clear();
    PyErr_SetString(PyExc_TypeError, "dimtorch.Dim: derivation must be (op, Dim, Dim or None, int)");
    return -1;
  }
  int i = 1;
  while (i <= 6 && PyUnicode_CompareWithASCIIString(op, kDeriveOps[i]) != 0) ++i;
  // As dim math makes them: a positive k for + - * // ceildiv (the identities and negative k are normalized).
  if (i > 6 || (b != Py_None && !is_dim(b)) || ((i == 6) != (b != Py_None)) || (i < 6 && k <= 0)) {
    PyErr_Format(PyExc_ValueError, "dimtorch.Dim: bad derivation %R", value);
    return -1;
  }
  if (derives_from(as_dim(a), d) || (b != Py_None && derives_from(as_dim(b), d))) {
    PyErr_Format(PyExc_ValueError, "dimtorch.Dim: derivation %R would derive the dim from itself", value);
    return -1;
  }
  PyObject* weak_b = b == Py_None ? nullptr : PyWeakref_NewRef(b, nullptr);
  if (b != Py_None && !weak_b) return -1;
  d->derive_op = static_cast<DimOp>(i);
  d->derive_a = as_dim(a);  // borrowed: a's cache owns d (dim_register_derived), as dim math's dims
  d->derive_b = weak_b;
  d->derive_k = k;
  if (!dim_register_derived(d)) {
    d->derive_op = DimOp::kNone;
    d->derive_a = nullptr;
    Py_CLEAR(d->derive_b);
    return -1;
  }
  return 0;
}
/// The dim-math cache as the Python definition reads it: {(op code, k or other dim): dim}; the
/// dict set on a Dim made in a graph, else a snapshot of the core's cache.
PyObject* get_math_cache(PyObject* self, void*) {
  DimObject* d = as_dim(self);
  if (d->pycache) return Py_NewRef(d->pycache);
  return derived_cache_snapshot(d);
}
int set_math_cache(PyObject* self, PyObject* value, void*) {
  DimObject* d = as_dim(self);
  if (!settable(d, value, !d->pycache, "_math_cache")) return -1;
  if (!PyDict_CheckExact(value)) {
    PyErr_SetString(PyExc_TypeError, "dimtorch.Dim: _math_cache must be a dict");
    return -1;
  }
  d->pycache = Py_NewRef(value);
  return 0;
}

/* The padded size bound to the dim while Dynamo traces (dimtorch._core.sizes): Dynamo keeps a store to
   this attribute as the object's state in the trace, and replays the store after the graph through
   this setter, which drops it, so that no Dim keeps a traced size. Read (by Dynamo only: a torch scan's
   body under make_fx/export is traced by Dynamo), it is the size bound in the make_fx/export trace
   around, else None. */
PyObject* get_padded_size(PyObject* self, void*) { return call_definition("Dim._padded_size", &self, 1, nullptr); }
int set_padded_size(PyObject*, PyObject*, void*) { return 0; }

PyObject* get_message_id(PyObject* self, void*) {
  return PyUnicode_FromString(dim_message_id(self).c_str());
}

PyGetSetDef dim_getset[] = {
    {"name", get_name, set_name, "The name given at construction, or None.", nullptr},
    {"size", get_size, set_size, "Static size (int), or None for a dynamic or size-from-data dim.",
     nullptr},
    {"dimension", get_size, nullptr, "Alias of size (RETURNN's name).", nullptr},
    {"lengths", get_dyn_size, nullptr,
     "Lengths Tensor (host, over batch dims), or None (RETURNN's dyn_size_ext; its dyn_size is the raw).",
     nullptr},
    {"derivation", get_derivation, set_derivation,
     "(op, a, b, k) for a dim made by dim math (op: add, sub, mul, floordiv, ceildiv, concat), "
     "else None.",
     nullptr},
    {"_lengths", get_lengths, set_lengths, "The lengths given at construction, or None.", nullptr},
    {"_math_cache", get_math_cache, set_math_cache, "Dim math results made from this dim.", nullptr},
    {"_padded_size", get_padded_size, set_padded_size,
     "The padded size bound to the dim while torch.compile traces (dimtorch._core.sizes); None "
     "outside a trace.",
     nullptr},
    {"_message_id", get_message_id, nullptr,
     "'#n': the number error messages append to tell this Dim from others of its name.", nullptr},
    {nullptr}};

PyMethodDef dim_methods[] = {
    {"is_static", m_is_static, METH_NOARGS, "Whether the size is known without data."},
    {"is_dynamic", m_is_dynamic, METH_NOARGS, "Whether the dim has per-sequence lengths."},
    {"get_max_size", m_get_max_size, METH_NOARGS,
     "Max size as a host int (static size, or max of the lengths, computed once); None if the size "
     "comes from data only. Never reads device memory."},
    {"_min_size", m_min_size, METH_NOARGS,
     "Min of the lengths as a host int (static size for a static dim), computed once; None if unknown "
     "or while tracing. Never reads device memory after the lengths are known on the host."},
    {"get_mask", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(m_get_mask)),
     METH_FASTCALL | METH_KEYWORDS,
     "get_mask(dims_order=None, device=None): bool Tensor, True on valid frames, over the lengths' "
     "dims and this dim (in dims_order's order); cached on the dim per order and device."},
    {"get_size_tensor",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(m_get_size_tensor)),
     METH_FASTCALL | METH_KEYWORDS,
     "get_size_tensor(device=None): the lengths Tensor on `device` (copied once, cached), or a "
     "0-dim Tensor with the static size."},
    {"__copy__", m_copy, METH_NOARGS, nullptr},
    {"__deepcopy__", m_copy, METH_O, nullptr},
    {"__reduce__", m_reduce, METH_NOARGS,
     "Pickling rebuilds a new Dim with the same size, lengths or derivation (dimtorch._pickle)."},
    {nullptr}};

}  // namespace

namespace {
std::string describe_dim_plain(DimObject* d) {
  std::string s = "'" + (d->name ? to_std_string(d->name) : std::string("<unnamed>")) + "'";
  if (d->size >= 0) return s + "(" + std::to_string(d->size) + ")";
  if (d->dyn_size) {
    PyObject* dims = as_tensor(d->dyn_size)->dims;
    if (!dims) return s + "[?]";  // (lengths not set up yet)
    s += "[";
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(dims); ++i) {
      DimObject* bd = as_dim(PyTuple_GET_ITEM(dims, i));
      if (i) s += ",";
      s += bd->name ? to_std_string(bd->name) : std::string("<unnamed>");
    }
    return s + "]";
  }
  if (d->derive_op != DimOp::kNone) return s + "[derived]";
  if (d->traced_size) return s + "(symbolic)";
  return s + "(?)";
}
}  // namespace

std::string describe_dim(PyObject* dim) {
  if (!is_dim(dim)) return to_std_string(dim);
  std::string s = describe_dim_plain(as_dim(dim));
  return dim_has_namesake(dim, nullptr) ? s + dim_message_id(dim) : s;
}

bool dim_is_traced(DimObject* d) {
  if (d->traced_size) return true;
  if (d->size >= 0 || !dim_has_lengths(d)) return false;
  PyObject* lengths = dim_dyn_size(d);
  if (!lengths) {
    PyErr_Clear();
    return false;
  }
  return is_traced_tensor(lengths);
}

bool dim_has_lengths(DimObject* d) {
  if (d->size >= 0) return false;
  if (d->dyn_size) return true;
  if (d->derive_op == DimOp::kNone) return false;
  DimObject* b = dim_derive_b(d);
  return dim_has_lengths(d->derive_a) || (b && dim_has_lengths(b));
}

/// Host min and max of lengths set without them (by the setter, i.e. torch.compile's replay).
static bool fill_min_max(DimObject* d) {
  if (d->max_size >= 0 || !d->dyn_size || d->size >= 0) return true;
  if (is_traced_tensor(d->dyn_size)) {
    PyErr_SetString(PyExc_RuntimeError, "dimtorch.Dim: the host max of lengths being traced is not "
                    "known; take the size from a tensor's axis");
    return false;
  }
  Py_ssize_t lo, hi;
  if (!lengths_min_max(as_tensor(d->dyn_size), &lo, &hi)) return false;
  d->min_size = lo;
  d->max_size = hi;
  return true;
}

PyObject* dim_dyn_size(DimObject* d) {
  if (d->dyn_size) {
    /* Readers take the lengths' raw, dims and sizes: a Tensor whose fields are not all set yet (the
       _lengths setter takes one that torch.compile's replay completes later), or one whose raw the
       garbage collector cleared, is an error here, not a NULL read there. */
    const TensorObject* lt = as_tensor(d->dyn_size);
    if (!(lt->flags & kComplete) || !lt->raw || !lt->dims) {
      PyErr_Format(PyExc_RuntimeError, "dimtorch: the lengths of dim '%s' are not a complete Tensor (not set "
                   "up yet, or cleared by the garbage collector)", d->name ? to_std_string(d->name).c_str() : "?");
      return nullptr;
    }
    return d->dyn_size;
  }
  if (!dim_has_lengths(d)) return nullptr;
  Ref lengths(dim_derive_lengths(d));
  if (!lengths) return nullptr;
  tensor_freeze(lengths.get());  // handed out as the dim's lengths: nobody may change it
  if (is_traced_tensor(lengths.get())) {  // being traced: no host min and max
    d->dyn_size = lengths.release();
    return d->dyn_size;
  }
  Py_ssize_t lo, hi;
  if (!dim_derived_min_max(d, &lo, &hi) && !lengths_min_max(as_tensor(lengths.get()), &lo, &hi))
    return nullptr;
  // torch may have let another thread in, which set them first: keep theirs.
  if (d->dyn_size) return d->dyn_size;
  d->min_size = lo;
  d->max_size = hi;
  d->dyn_size = lengths.release();
  return d->dyn_size;
}

Py_ssize_t dim_max_size(DimObject* d) {
  if (d->max_size >= 0) return d->max_size;
  if (!dim_has_lengths(d)) return -1;
  if (!dim_dyn_size(d) || !fill_min_max(d)) return -2;
  return d->max_size;
}

Py_ssize_t dim_total_size(DimObject* d) {
  if (d->total_size >= 0) return d->total_size;
  PyObject* lengths = dim_dyn_size(d);
  if (!lengths) return PyErr_Occurred() ? -2 : -1;
  Ref sum(PyObject_CallMethod(as_tensor(lengths)->raw, "sum", nullptr));
  if (!sum) return -2;
  Ref value(PyNumber_Index(sum.get()));
  if (!value) return -2;
  Py_ssize_t total = PyLong_AsSsize_t(value.get());
  if (total == -1 && PyErr_Occurred()) return -2;
  d->total_size = total;
  return total;
}

Py_ssize_t dim_min_size(DimObject* d) {
  if (d->min_size >= 0) return d->min_size;
  if (!dim_has_lengths(d)) return -1;
  if (!dim_dyn_size(d) || !fill_min_max(d)) return -2;
  return d->min_size;
}

PyObject* dim_checked_lengths(PyObject* lengths, Py_ssize_t* min_out, Py_ssize_t* max_out,
                              const char* caller) {
  return checked_lengths(lengths, min_out, max_out, caller);
}

bool export_dim(PyObject* module) {
  s_cpu = PyUnicode_InternFromString("cpu");
  s_aminmax = PyUnicode_InternFromString("aminmax");
  s_tolist = PyUnicode_InternFromString("tolist");
  if (!s_cpu || !s_aminmax || !s_tolist) return false;
  DimType.tp_name = "dimtorch.Dim";
  DimType.tp_basicsize = sizeof(DimObject);
  DimType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
  DimType.tp_doc =
      "Dim(size=None, name=None)\n\nThe identity of one axis. size: an int (static), None (size "
      "from data, e.g. batch), or an integer dimtorch.Tensor of lengths over batch dims (dynamic, "
      "kept on the host). Equality and hash are identity.";
  /* object's tp_new and no __new__ in the type dict, as for Tensor (tensor.cpp): torch.compile
     makes a graph's Dims with object.__new__(Dim). The constructor is tp_vectorcall. */
  DimType.tp_new = PyBaseObject_Type.tp_new;
  DimType.tp_init = dim_init;
  DimType.tp_alloc = dim_tp_alloc;
  DimType.tp_dealloc = dim_dealloc;
  DimType.tp_traverse = dim_traverse;
  DimType.tp_clear = dim_clear;
  DimType.tp_repr = dim_repr;
  DimType.tp_getset = dim_getset;
  DimType.tp_methods = dim_methods;
  DimType.tp_weaklistoffset = offsetof(DimObject, weakreflist);
  install_dim_math_slots(&DimType);
  if (PyType_Ready(&DimType) < 0) return false;
  if (PyDict_DelItemString(DimType.tp_dict, "__new__") < 0) return false;
  static const char* const derived[] = {"lengths", "dimension", nullptr};
  if (!make_traceable_properties(&DimType, derived)) return false;
  PyType_Modified(&DimType);
  DimType.tp_vectorcall = dim_vectorcall;
  Py_INCREF(&DimType);
  return PyModule_AddObject(module, "Dim", reinterpret_cast<PyObject*>(&DimType)) == 0;
}

}  // namespace dimtorch
