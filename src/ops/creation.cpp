// Creation from dims: zeros, ones, full. The shape comes from the dims (static sizes, max lengths)
// and the result needs no checks, so the whole call is one torch call plus the Tensor.
#include <utility>

#include "core/args.h"
#include "core/backend.h"
#include "core/definitions.h"
#include "core/dim.h"
#include "core/functions.h"
#include "core/tensor.h"
#include "core/exports.h"

namespace dimtorch {

namespace {

enum class Fill { kZeros, kOnes, kFull };

PyObject* g_kw_dtype_device = nullptr;  // ("dtype", "device")
PyObject* g_kw_dtype = nullptr;
PyObject* g_kw_device = nullptr;
/* The device new tensors go to when a call gives none (NULL: torch's default), set by
   dimtorch._core.default_device (RETURNN frontend's rf.set_default_device), which keeps the Python
   definitions' copy of it. */
PyObject* g_default_device = nullptr;

/// constant(fill_value, *, dims, ...) is full with RETURNN frontend's order: fill_value first.
PyObject* create(Fill kind, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                 const char* caller, bool value_first = false) {
  static const char* const names[] = {"dims", "dtype", "device", "sparse_dim", "feature_dim"};
  static const char* const full_names[] = {"dims", "fill_value", "dtype", "device", "sparse_dim",
                                           "feature_dim"};
  static const char* const constant_names[] = {"fill_value", "dims", "dtype", "device", "sparse_dim",
                                               "feature_dim"};
  PyObject* v[6] = {};
  PyObject* fill = nullptr;
  if (kind == Fill::kFull) {
    if (value_first) {
      if (!parse_args(args, nargs, kwnames, constant_names, 6, 1, 2, v, caller)) return nullptr;
      std::swap(v[0], v[1]);
    } else if (!parse_args(args, nargs, kwnames, full_names, 6, 2, 2, v, caller)) {
      return nullptr;
    }
    fill = v[1];
    for (int i = 1; i < 5; ++i) v[i] = v[i + 1];
  } else if (!parse_args(args, nargs, kwnames, names, 5, 1, 1, v, caller)) {
    return nullptr;
  }
  Ref dims(dims_arg_to_tuple(v[0], caller, "dims"));
  if (!dims) return nullptr;
  Py_ssize_t n = PyTuple_GET_SIZE(dims.get());
  if (n > kMaxDims) {
    PyErr_Format(PyExc_ValueError, "%s: at most %d dims are supported, got %zd", caller, kMaxDims, n);
    return nullptr;
  }
  Py_ssize_t sizes[kMaxDims];
  Ref shape(PyTuple_New(n));
  if (!shape) return nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* d = PyTuple_GET_ITEM(dims.get(), i);
    for (Py_ssize_t j = 0; j < i; ++j)
      if (PyTuple_GET_ITEM(dims.get(), j) == d) {
        PyErr_Format(PyExc_ValueError, "%s: dim %s appears twice (dims: %s)", caller,
                     describe_dim(d).c_str(), describe_dims(dims.get(), nullptr).c_str());
        return nullptr;
      }
    sizes[i] = dim_max_size(as_dim(d));
    if (sizes[i] < 0) {
      /* No host size: a dim sized from data (its size may come from the lengths of a dim beside it),
         or a dim being traced (its size is the trace's). The definition knows both, and names the
         error (dimtorch._core.sizes). Only this path pays for the check. */
      if (sizes[i] == -2 && !dim_is_traced(as_dim(d))) return nullptr;
      PyErr_Clear();
      return call_definition(value_first ? "constant"
                             : kind == Fill::kZeros ? "zeros" : kind == Fill::kOnes ? "ones" : "full",
                             args, nargs, kwnames);
    }
    PyTuple_SET_ITEM(shape.get(), i, PyLong_FromSsize_t(sizes[i]));
  }
  PyObject* sparse = v[3] == Py_None ? nullptr : v[3];
  PyObject* feature = v[4] == Py_None ? nullptr : v[4];
  if (sparse && !is_dim(sparse)) {
    PyErr_Format(PyExc_TypeError, "%s: sparse_dim must be a Dim or None, got %.80s", caller,
                 Py_TYPE(sparse)->tp_name);
    return nullptr;
  }
  if (feature && (!is_dim(feature) || dims_index(dims.get(), feature) < 0)) {
    PyErr_Format(PyExc_ValueError, "%s: feature_dim must be one of the dims (%s), got %s", caller,
                 describe_dims(dims.get(), nullptr).c_str(), describe_dim(feature).c_str());
    return nullptr;
  }
  // dtype None: torch's default dtype (float32 unless changed), as torch.zeros does.
  PyObject* dtype = v[1] && v[1] != Py_None ? backend::dtype_from(v[1], caller) : nullptr;
  if (!dtype && PyErr_Occurred()) return nullptr;
  PyObject* device = v[2] && v[2] != Py_None ? v[2] : g_default_device;
  /* zeros/ones take the sizes as separate ints, which torch parses ~0.5 us faster than one tuple
     (full takes the tuple only). */
  PyObject* call[kMaxDims + 3];
  int npos = 0;
  if (fill || n == 0) {
    call[npos++] = shape.get();
    if (fill) call[npos++] = fill;
  } else {
    for (Py_ssize_t i = 0; i < n; ++i) call[npos++] = PyTuple_GET_ITEM(shape.get(), i);
  }
  // Only the keywords given are passed: each one costs torch's argument parser time.
  int nkw = 0;
  if (dtype) call[npos + nkw++] = dtype;
  if (device) call[npos + nkw++] = device;
  PyObject* call_kwnames = dtype && device ? g_kw_dtype_device
                      : dtype         ? g_kw_dtype
                      : device        ? g_kw_device
                                      : nullptr;
  PyObject* fn = kind == Fill::kZeros ? backend::T.zeros
                 : kind == Fill::kOnes ? backend::T.ones
                                       : backend::T.full;
  PyObject* raw = PyObject_Vectorcall(fn, call, npos, call_kwnames);
  if (!raw) return nullptr;
  return tensor_make(raw, dims.get(), sizes, sparse, feature);
}

PyObject* f_zeros(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return create(Fill::kZeros, args, nargs, kwnames, "dimtorch.zeros()");
}
PyObject* f_ones(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return create(Fill::kOnes, args, nargs, kwnames, "dimtorch.ones()");
}
PyObject* f_full(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return create(Fill::kFull, args, nargs, kwnames, "dimtorch.full()");
}
PyObject* f_constant(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return create(Fill::kFull, args, nargs, kwnames, "dimtorch.constant()", true);
}

/// _set_default_device(device or None): see g_default_device.
PyObject* f_set_default_device(PyObject*, PyObject* device) {
  Py_XSETREF(g_default_device, device == Py_None ? nullptr : Py_NewRef(device));
  Py_RETURN_NONE;
}

#define FASTCALL(fn) DIMTORCH_OP(fn), \
                     METH_FASTCALL | METH_KEYWORDS
PyMethodDef kFunctions[] = {
    {"_set_default_device", DIMTORCH_OP(f_set_default_device), METH_O,
     "_set_default_device(device): where zeros/ones/full put a new tensor when the call gives no device "
     "(None: torch's default); set through dimtorch._core.default_device."},
    {"zeros", FASTCALL(f_zeros),
     "zeros(dims, *, dtype=None, device=None, sparse_dim=None, feature_dim=None): zeros over "
     "`dims` (max sizes of dynamic dims); dtype None is torch's default dtype."},
    {"ones", FASTCALL(f_ones), "ones(dims, *, dtype=None, device=None, sparse_dim=None, "
                               "feature_dim=None): ones over `dims`."},
    {"full", FASTCALL(f_full),
     "full(dims, fill_value, *, dtype=None, device=None, sparse_dim=None, feature_dim=None)."},
    {"constant", FASTCALL(f_constant),
     "constant(fill_value, *, dims, dtype=None, device=None, sparse_dim=None, feature_dim=None): full with "
     "RETURNN frontend's order (fill_value first, dims by keyword)."},
    {nullptr}};
#undef FASTCALL

}  // namespace

bool export_creation(PyObject* module) {
  g_kw_dtype_device = Py_BuildValue("(ss)", "dtype", "device");
  g_kw_dtype = Py_BuildValue("(s)", "dtype");
  g_kw_device = Py_BuildValue("(s)", "device");
  if (!g_kw_dtype_device || !g_kw_dtype || !g_kw_device) return false;
  return add_functions(module, kFunctions);
}

}  // namespace dimtorch
