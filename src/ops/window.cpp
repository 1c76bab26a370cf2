// Fast path of window (definition: python/dimtorch/ops/window.py) for its common call: int or default
// window_left/window_right, an int stride, padding "same" or "valid", a number (or no) pad_value, no given
// out dim, the mask used (use_mask None or True). As the definition: a dynamic spatial axis ("same")
// narrowed to its longest sequence with each sequence's padding set to pad_value (one where with the cached
// mask), one constant pad, one unfold (a view); the out dim by dim math (cached on the dim). Every other call,
// every error included, goes to the Python definition.
#include "core/args.h"
#include "core/backend.h"
#include "core/dim.h"
#include "core/exports.h"
#include "core/functions.h"
#include "core/mask.h"
#include "core/python_fallback.h"
#include "core/tensor.h"
#include "ops/conv_args.h"
#include "ops/fast_path_util.h"

namespace dimtorch {

namespace {

DIMTORCH_PYTHON_FALLBACK(window_fallback, "window")

/// An int width >= 0 (window_left/window_right), or -1 for None / absent; false for any other value.
bool width_arg(PyObject* o, Py_ssize_t* out) {
  *out = -1;
  if (!o || o == Py_None) return true;
  return fast_path::exact_int(o, out) && *out >= 0;
}

/// window(source, *, spatial_dim, window_dim, window_right=None, window_left=None, padding="same",
/// pad_value=None, stride=1, out_spatial_dim=None, use_mask=None) -> (y, out_spatial_dim).
PyObject* f_window(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"source", "spatial_dim", "window_dim", "window_right", "window_left",
                                      "padding", "pad_value", "stride", "out_spatial_dim", "use_mask"};
  const char* caller = "dimtorch.window()";
  PyObject* v[10];
  if (!parse_args(args, nargs, kwnames, names, 10, 1, 3, v, caller)) {
    PyErr_Clear();
    return window_fallback(args, nargs, kwnames);
  }
#define FALLBACK() return window_fallback(args, nargs, kwnames)
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(v[1]) || !is_dim(v[2]) ||
      (v[8] && v[8] != Py_None) || (v[9] && v[9] != Py_None && v[9] != Py_True))
    FALLBACK();
  TensorObject* x = as_tensor(v[0]);
  PyObject* spatial = v[1];
  PyObject* window_dim = v[2];
  int a = dims_index(x->dims, spatial);
  Py_ssize_t size = as_dim(window_dim)->size;
  if (a < 0 || size < 1 || dim_has_lengths(as_dim(window_dim)) || dims_index(x->dims, window_dim) >= 0) FALLBACK();
  bool same = true;
  if (v[5]) {
    if (!PyUnicode_CheckExact(v[5])) FALLBACK();
    if (PyUnicode_CompareWithASCIIString(v[5], "valid") == 0) same = false;
    else if (PyUnicode_CompareWithASCIIString(v[5], "same") != 0) FALLBACK();
  }
  PyObject* pad_value = v[6] && v[6] != Py_None ? v[6] : backend::T.zero;
  if (!PyLong_CheckExact(pad_value) && !PyFloat_CheckExact(pad_value)) FALLBACK();
  Py_ssize_t stride = 1, left = 0, right = 0;
  if (v[7] && (!fast_path::exact_int(v[7], &stride) || stride < 1)) FALLBACK();
  if (same) {  // rf's centered default; one given side completes size - 1
    if (!width_arg(v[4], &left) || !width_arg(v[3], &right)) FALLBACK();
    if (left < 0 && right < 0) right = size / 2;
    if (left < 0) left = size - 1 - right;
    else if (right < 0) right = size - 1 - left;
    if (left < 0 || right < 0 || left + right != size - 1) FALLBACK();
  }
  DimObject* sd = as_dim(spatial);
  bool dynamic = dim_has_lengths(sd);
  if (sd->size < 0 && !dynamic) FALLBACK();  // size from data: a new out dim per call
  PyObject* out_dim =
      conv_args::out_spatial_dim(spatial, size, stride, same ? conv_args::Padding::kSame : conv_args::Padding::kValid,
                                 0, caller);
  if (!out_dim) {
    PyErr_Clear();
    FALLBACK();
  }
  Ref out_dim_ref(out_dim);
  Py_ssize_t want = conv_args::axis_size(out_dim);
  if (want == -2) return nullptr;
  if (want < 0) FALLBACK();
  int nd = static_cast<int>(tensor_ndim(x));
  Py_ssize_t n = x->sizes[a];
  Ref raw;
  if (dynamic && same) {  // each sequence's padding as pad_value: windows near its end read it
    raw = Ref(masked_raw(x, &a, 1, pad_value, nullptr, caller));
    if (!raw) {  // lengths over dims x lacks: the definition says so
      PyErr_Clear();
      FALLBACK();
    }
    Py_ssize_t longest = dim_max_size(sd);
    if (longest == -2) return nullptr;
    if (longest < n) {
      if (!(raw = Ref(fast_path::narrowed(raw.get(), a, 0, longest)))) return nullptr;
      n = longest;
    }
  } else {
    raw = Ref::borrow(x->raw);
  }
#undef FALLBACK
  Py_ssize_t extra = std::max<Py_ssize_t>(0, size - (n + left + right));  // no window at all: narrowed to 0 below
  if (left || right || extra) {
    Py_ssize_t pads[2 * kMaxDims] = {};
    int n_pads = 2 * (nd - a);
    pads[n_pads - 2] = left;
    pads[n_pads - 1] = right + extra;
    Ref pad_list(size_tuple(pads, n_pads));
    if (!pad_list || !(raw = Ref(backend::call3(backend::T.constant_pad_nd, raw.get(), pad_list.get(), pad_value))))
      return nullptr;
  }
  Py_ssize_t padded = n + left + right + extra;
  Py_ssize_t frames = (padded - size) / stride + 1;
  Ref axis_arg(PyLong_FromLong(a)), size_arg(PyLong_FromSsize_t(size)), stride_arg(PyLong_FromSsize_t(stride));
  if (!axis_arg || !size_arg || !stride_arg) return nullptr;
  PyObject* unfold_args[4] = {raw.get(), axis_arg.get(), size_arg.get(), stride_arg.get()};
  Ref out(PyObject_Vectorcall(backend::T.unfold, unfold_args, 4, nullptr));
  if (!out) return nullptr;
  if (frames != want) {
    if (!(out = Ref(fast_path::narrowed(out.get(), a, 0, want)))) return nullptr;
  }
  Ref dims(PyTuple_New(nd + 1));
  if (!dims) return nullptr;
  Py_ssize_t sizes[kMaxDims + 1];
  for (int i = 0; i < nd; ++i) {
    PyTuple_SET_ITEM(dims.get(), i, Py_NewRef(i == a ? out_dim : PyTuple_GET_ITEM(x->dims, i)));
    sizes[i] = i == a ? want : x->sizes[i];
  }
  PyTuple_SET_ITEM(dims.get(), nd, Py_NewRef(window_dim));
  sizes[nd] = size;
  PyObject* feature = x->feature_dim == spatial ? nullptr : x->feature_dim;
  Ref t(tensor_make(out.release(), dims.get(), sizes, x->sparse_dim, feature));
  if (!t) return nullptr;
  return PyTuple_Pack(2, t.get(), out_dim);
}

PyMethodDef kFunctions[] = {
    {"window", DIMTORCH_OP(f_window), METH_FASTCALL | METH_KEYWORDS,
     "window(source, *, spatial_dim, window_dim, window_right=None, window_left=None, padding='same', pad_value=None, "
     "stride=1, out_spatial_dim=None, use_mask=None) -> (y, out_spatial_dim): see dimtorch.ops.window.window; the "
     "common call is one pad and one unfold here (and one where with the cached mask for a dynamic dim)."},
    {nullptr}};

}  // namespace

bool export_ops_window(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
