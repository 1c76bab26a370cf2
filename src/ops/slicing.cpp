// Fast paths of the slicing family (definitions: python/dimtorch/ops/slicing.py), for their common
// calls: slice (one view), shift_right (one view and one constant_pad_nd), reverse_sequence (one
// flip, or one gather by an index cached on the dim). Every other case goes to the Python
// definition (python_fallback.h), which owns the errors.
#include "core/args.h"
#include "core/backend.h"
#include "core/dim.h"
#include "core/exports.h"
#include "ops/fast_path_util.h"
#include "core/functions.h"
#include "core/mask.h"
#include "core/python_fallback.h"
#include "core/tensor.h"

#include <algorithm>

namespace dimtorch {

namespace {

using namespace fast_path;

// ---- slice ------------------------------------------------------------------------------------

DIMTORCH_PYTHON_FALLBACK(slice_fallback, "slice")

/// slice(x, *, axis, start=0, end=None, step=1): the fast path (size and out_dim go to the Python
/// definition as unknown keywords, a Tensor start as a non-int) takes step 1 and, on a dynamic dim,
/// start >= 0 with end None (each sequence drops its first frames: out dim axis - start by dim
/// math), on a static dim start/end within the size (a new static out dim).
PyObject* f_slice(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "axis", "start", "end", "step"};
  const char* caller = "dimtorch.slice()";
  PyObject* v[5];
  if (!parse_args(args, nargs, kwnames, names, 5, 1, 2, v, caller, 1)) {
    PyErr_Clear();
    return slice_fallback(args, nargs, kwnames);
  }
  Py_ssize_t start = 0, end = 0, step = 1;
  bool has_end = v[3] && v[3] != Py_None;
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(v[1]) ||
      (v[2] && v[2] != Py_None && !exact_int(v[2], &start)) || (has_end && !exact_int(v[3], &end)) ||
      (v[4] && v[4] != Py_None && (!exact_int(v[4], &step) || step != 1)))
    return slice_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  PyObject* axis = v[1];
  DimObject* d = as_dim(axis);
  int a = dims_index(x->dims, axis);
  if (a < 0) return slice_fallback(args, nargs, kwnames);
  Py_ssize_t size = x->sizes[a];
  Py_ssize_t s, n;
  Ref out_dim;
  if (dim_has_lengths(d)) {
    signed char pos[kMaxDims + 1];
    int k = 0;
    if (has_end || start < 0 || !lengths_positions(d, x->dims, false, pos, &k, caller)) {
      PyErr_Clear();
      return slice_fallback(args, nargs, kwnames);
    }
    out_dim = start ? Ref(dim_derive(d, DimOp::kSub, start, nullptr, caller)) : Ref::borrow(axis);
    if (!out_dim) return nullptr;
    Py_ssize_t max_len = dim_max_size(as_dim(out_dim.get()));
    if (max_len < 0) return max_len == -2 ? nullptr : slice_fallback(args, nargs, kwnames);
    s = start < size ? start : size;
    n = max_len < size - s ? max_len : size - s;
  } else if (d->size >= 0) {
    // Python slice semantics within the size; out of range goes to the Python error.
    s = start < 0 ? start + size : start;
    Py_ssize_t e = !has_end ? size : (end < 0 ? end + size : end);
    if (s < 0 || s > size || e < 0 || e > size) return slice_fallback(args, nargs, kwnames);
    n = e > s ? e - s : 0;
    PyObject* name = d->name ? d->name : Py_None;
    Ref label(has_end ? PyUnicode_FromFormat("%S[%zd:%zd]", name, start, end)
                      : PyUnicode_FromFormat("%S[%zd:]", name, start));
    if (!label) return nullptr;
    out_dim = Ref(new_static_dim(n, label.get()));
    if (!out_dim) return nullptr;
  } else {
    return slice_fallback(args, nargs, kwnames);  // size from data
  }
  Ref raw;
  if (s == 0 && n == size) {
    raw = Ref::borrow(x->raw);
  } else {
    raw = Ref(narrowed(x->raw, a, s, n));
    if (!raw) return nullptr;
  }
  Ref dims(dims_replaced(x->dims, a, out_dim.get()));
  if (!dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  std::copy(x->sizes, x->sizes + tensor_ndim(x), sizes);
  sizes[a] = n;
  Ref t(tensor_make(raw.release(), dims.get(), sizes, x->sparse_dim, kept_feature(x, dims.get())));
  if (!t) return nullptr;
  return PyTuple_Pack(2, t.get(), out_dim.get());
}

// ---- shift_right ------------------------------------------------------------------------------

DIMTORCH_PYTHON_FALLBACK(shift_right_fallback, "shift_right")

/// shift_right(x, *, axis, amount=1, pad_value=0): the fast path takes an int amount >= 1 and a
/// Python number as pad_value: the first n - amount frames (a view), then one constant_pad_nd.
PyObject* f_shift_right(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "axis", "amount", "pad_value"};
  PyObject* v[4];
  if (!parse_args(args, nargs, kwnames, names, 4, 1, 2, v, "dimtorch.shift_right()", 1)) {
    PyErr_Clear();
    return shift_right_fallback(args, nargs, kwnames);
  }
  Py_ssize_t amount = 1;
  PyObject* value = v[3] ? v[3] : backend::T.zero;
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(v[1]) || (v[2] && !exact_int(v[2], &amount)) ||
      amount < 1 || !(PyFloat_CheckExact(value) || PyLong_CheckExact(value)))
    return shift_right_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  int a = dims_index(x->dims, v[1]);
  if (a < 0) return shift_right_fallback(args, nargs, kwnames);
  Py_ssize_t n = x->sizes[a];
  Py_ssize_t k = amount < n ? amount : n;
  Ref kept(narrowed(x->raw, a, 0, n - k));
  if (!kept) return nullptr;
  // constant_pad_nd's pairs run from the last axis: zeros after axis a, then (k, 0).
  Py_ssize_t after = tensor_ndim(x) - 1 - a;
  Ref pad(PyTuple_New(2 * after + 2));
  Ref k_obj(PyLong_FromSsize_t(k));
  if (!pad || !k_obj) return nullptr;
  for (Py_ssize_t j = 0; j < 2 * after; ++j) PyTuple_SET_ITEM(pad.get(), j, Py_NewRef(backend::T.zero));
  PyTuple_SET_ITEM(pad.get(), 2 * after, k_obj.release());
  PyTuple_SET_ITEM(pad.get(), 2 * after + 1, Py_NewRef(backend::T.zero));
  PyObject* raw = backend::call3(backend::T.constant_pad_nd, kept.get(), pad.get(), value);
  if (!raw) return nullptr;
  return tensor_make(raw, x->dims, x->sizes, x->sparse_dim, x->feature_dim);
}

// ---- reverse_sequence -------------------------------------------------------------------------

DIMTORCH_PYTHON_FALLBACK(reverse_fallback, "reverse_sequence")

/// reverse_sequence(x, *, axis, handle_dynamic_dims=True): a dim without lengths is one flip; a
/// dynamic dim whose lengths vary over dims of x is one gather, by the index
/// dimtorch.ops.slicing._reverse_index makes from the host lengths, cached on the dim per raw sizes,
/// places of the lengths' dims and device. handle_dynamic_dims other than True goes to Python.
PyObject* f_reverse_sequence(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "axis", "handle_dynamic_dims"};
  static PyObject* tag = nullptr;
  const char* caller = "dimtorch.reverse_sequence()";
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 1, 2, v, caller, 1) || (v[2] && v[2] != Py_True)) {
    PyErr_Clear();
    return reverse_fallback(args, nargs, kwnames);
  }
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(v[1])) return reverse_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  DimObject* d = as_dim(v[1]);
  int a = dims_index(x->dims, v[1]);
  if (a < 0) return reverse_fallback(args, nargs, kwnames);
  Ref a_obj(PyLong_FromLong(a));
  if (!a_obj) return nullptr;
  Ref raw;
  if (!dim_has_lengths(d)) {
    raw = Ref(backend::call2(backend::T.flip, x->raw, a_obj.get()));
  } else {
    signed char pos[kMaxDims + 1];
    int k = 0;
    if (!lengths_positions(d, x->dims, true, pos, &k, caller)) {
      PyErr_Clear();
      return reverse_fallback(args, nargs, kwnames);
    }
    Ref device(PyObject_GetAttr(x->raw, backend::T.s_device));
    if (!device || !interned(&tag, "reverse_index")) return nullptr;
    Ref key(layout_key(tag, device.get(), x->sizes, tensor_ndim(x), pos, k + 1));
    if (!key) return nullptr;
    Ref index(cached_on_dim(d, key.get(), [&]() -> PyObject* {
      PyObject* builder = definition("_reverse_index");
      if (!builder) return nullptr;
      return backend::call2(builder, v[0], v[1]);
    }));
    if (!index) return nullptr;
    raw = Ref(backend::call3(backend::T.gather, x->raw, a_obj.get(), index.get()));
  }
  if (!raw) return nullptr;
  return tensor_make(raw.release(), x->dims, x->sizes, x->sparse_dim, x->feature_dim);
}

#define FASTCALL_KW(fn) DIMTORCH_OP(fn), METH_FASTCALL | METH_KEYWORDS

PyMethodDef kFunctions[] = {
    {"slice", FASTCALL_KW(f_slice),
     "slice(x, /, *, axis, start=None, end=None, step=None, size=None, out_dim=None) -> (tensor, out_dim): see "
     "dimtorch.ops.slicing.slice."},
    {"shift_right", FASTCALL_KW(f_shift_right),
     "shift_right(x, /, *, axis, amount=1, pad_value=0) -> tensor: see dimtorch.ops.slicing.shift_right."},
    {"reverse_sequence", FASTCALL_KW(f_reverse_sequence),
     "reverse_sequence(x, /, *, axis, handle_dynamic_dims=True) -> tensor: see dimtorch.ops.slicing.reverse_sequence."},
    {nullptr}};

#undef FASTCALL_KW

}  // namespace

bool export_ops_slicing(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
