// Fast path of stft (definition: python/dimtorch/ops/signal.py) for its common call: a float32/float64 x,
// int frame_step/frame_length/fft_length, bool window flags, no given out dims, the mask used (use_mask None
// or True) over a static in_spatial_dim or a dynamic one whose lengths are over x's dims. As the definition:
// the padding zeroed (one where with the cached mask), the spatial axis moved last and the rest flattened,
// cut to the longest sequence, zeros up to fft_length past the last window, one stft with the cached Hann
// window (the definition's own _window, one call per configuration), frames cut to the out dim's longest
// sequence; the out spatial dim by dim math (cached on the dim), a new static freq dim. Every other call
// (half precision, no whole window, every error) goes to the Python definition.
#include "core/args.h"
#include "core/backend.h"
#include "core/definitions.h"
#include "core/dim.h"
#include "core/exports.h"
#include "core/functions.h"
#include "core/mask.h"
#include "core/python_fallback.h"
#include "core/tensor.h"
#include "ops/conv_args.h"
#include "ops/fast_path_util.h"

#include <algorithm>

namespace dimtorch {

namespace {

DIMTORCH_PYTHON_FALLBACK(stft_fallback, "stft")

/// A flag given as exactly True or False (absent: `absent`); false for anything else.
bool exact_flag(PyObject* o, bool absent, bool* out) {
  if (!o) {
    *out = absent;
    return true;
  }
  if (o != Py_True && o != Py_False) return false;
  *out = o == Py_True;
  return true;
}

/// The raw size of an axis over `d`: its static size or its longest sequence; -1 for a dim sized from
/// data, -2 with an error set.
Py_ssize_t padded_axis_size(DimObject* d) { return dim_has_lengths(d) ? dim_max_size(d) : d->size; }

// The windows of the last few configurations, made by the definition's _window (the same tensors it
// caches): a call per configuration instead of a Python frame per call. Eager only; kept for the process.
struct WindowEntry {
  Py_ssize_t frame_length = -1, fft = -1;
  bool align_left = false, enforce_even = false;
  PyObject* dtype = nullptr;   // strong (a torch.dtype: compared by identity)
  PyObject* device = nullptr;  // strong
  PyObject* window = nullptr;  // strong
};
constexpr int kWindowEntries = 8;
WindowEntry g_windows[kWindowEntries];
int g_windows_next = 0;

PyObject* cached_window(Py_ssize_t frame_length, Py_ssize_t fft, bool align_left, bool enforce_even, PyObject* dtype,
                        PyObject* device) {
  for (WindowEntry& e : g_windows) {
    if (e.frame_length != frame_length || e.fft != fft || e.align_left != align_left ||
        e.enforce_even != enforce_even || e.dtype != dtype)
      continue;
    int same = e.device == device ? 1 : PyObject_RichCompareBool(e.device, device, Py_EQ);
    if (same < 0) return nullptr;
    if (same) return Py_NewRef(e.window);
  }
  PyObject* make = definition("_stft_window");
  if (!make) return nullptr;
  Ref window(PyObject_CallFunction(make, "nnOOOO", frame_length, fft, align_left ? Py_True : Py_False,
                                   enforce_even ? Py_True : Py_False, dtype, device));
  if (!window) return nullptr;
  WindowEntry& e = g_windows[g_windows_next];
  g_windows_next = (g_windows_next + 1) % kWindowEntries;
  // The new entry first, the old references released after: releasing may run code that reads the cache.
  PyObject* old[3] = {e.dtype, e.device, e.window};
  e.frame_length = frame_length;
  e.fft = fft;
  e.align_left = align_left;
  e.enforce_even = enforce_even;
  e.dtype = Py_NewRef(dtype);
  e.device = Py_NewRef(device);
  e.window = Py_NewRef(window.get());
  for (PyObject* o : old) Py_XDECREF(o);
  return window.release();
}

/// stft(x, *, in_spatial_dim, frame_step, frame_length, fft_length=None, window_use_frame_length=True,
/// align_window_left=True, window_enforce_even=True, out_spatial_dim=None, out_dim=None, use_mask=None)
/// -> (y, out_spatial_dim, out_dim).
PyObject* f_stft(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "in_spatial_dim", "frame_step", "frame_length", "fft_length",
                                      "window_use_frame_length", "align_window_left", "window_enforce_even",
                                      "out_spatial_dim", "out_dim", "use_mask"};
  const char* caller = "dimtorch.stft()";
  PyObject* v[11];
  if (!parse_args(args, nargs, kwnames, names, 11, 1, 4, v, caller)) {
    PyErr_Clear();
    return stft_fallback(args, nargs, kwnames);
  }
#define FALLBACK() return stft_fallback(args, nargs, kwnames)
  Py_ssize_t step, frame_length, fft;
  bool use_frame_length, align_left, enforce_even;
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(v[1]) || !fast_path::exact_int(v[2], &step) ||
      !fast_path::exact_int(v[3], &frame_length) || step < 1 || frame_length < 1 ||
      !exact_flag(v[5], true, &use_frame_length) || !exact_flag(v[6], true, &align_left) ||
      !exact_flag(v[7], true, &enforce_even) || (v[8] && v[8] != Py_None) || (v[9] && v[9] != Py_None) ||
      (v[10] && v[10] != Py_None && v[10] != Py_True))
    FALLBACK();
  if (!v[4] || v[4] == Py_None) {
    fft = frame_length;
  } else if (!fast_path::exact_int(v[4], &fft) || fft < frame_length) {
    FALLBACK();
  }
  TensorObject* x = as_tensor(v[0]);
  DimObject* in = as_dim(v[1]);
  int a = dims_index(x->dims, v[1]);
  if (a < 0) FALLBACK();
  Py_ssize_t nd = tensor_ndim(x);
  if (nd + 1 > kMaxDims) FALLBACK();
  PyObject* dtype_name = backend::raw_dtype_name(x->raw);
  if (!dtype_name) return nullptr;
  if (PyUnicode_CompareWithASCIIString(dtype_name, "float32") != 0 &&
      PyUnicode_CompareWithASCIIString(dtype_name, "float64") != 0)
    FALLBACK();  // (half precision: the definition computes in float32; ints and complex: its errors)
  bool dynamic = dim_has_lengths(in);
  signed char pos[kMaxDims + 1];
  int n_pos = 0;
  if (dynamic && !lengths_positions(in, x->dims, true, pos, &n_pos, caller)) {
    PyErr_Clear();  // (lengths over a dim x lacks: the definition leaves the padding as it is)
    FALLBACK();
  }
  Py_ssize_t longest = padded_axis_size(in);
  if (longest < 0) {
    if (longest == -2) PyErr_Clear();
    FALLBACK();
  }
  Py_ssize_t window_span = use_frame_length ? frame_length : fft;
  Py_ssize_t n_samples = std::min(x->sizes[a], longest) + (window_span < fft ? fft - window_span : 0);
  if (n_samples < fft) FALLBACK();  // no sequence holds a whole window: the definition's zeros
  Ref out_spatial(conv_args::out_spatial_dim(v[1], window_span, step, conv_args::Padding::kValid, 0, caller));
  if (!out_spatial) {
    PyErr_Clear();
    FALLBACK();
  }
  if (dims_index(x->dims, out_spatial.get()) >= 0) FALLBACK();  // (the definition's error)
  Py_ssize_t n_out = padded_axis_size(as_dim(out_spatial.get()));
  if (n_out < 0) {
    if (n_out == -2) PyErr_Clear();
    FALLBACK();
  }
  Py_ssize_t n_frames = (n_samples - fft) / step + 1;
  if (n_frames < n_out) FALLBACK();  // (the definition's error)
#undef FALLBACK
  static PyObject* s_freq_name = nullptr;
  PyObject* freq_name = fast_path::interned(&s_freq_name, "stft-freq");
  if (!freq_name) return nullptr;
  Ref out_dim(fast_path::new_static_dim(fft / 2 + 1, freq_name));
  if (!out_dim) return nullptr;
  Ref device(PyObject_GetAttr(x->raw, backend::T.s_device));
  Ref dtype(device ? PyObject_GetAttr(x->raw, backend::T.s_dtype) : nullptr);
  if (!dtype) return nullptr;
  Ref raw = Ref::borrow(x->raw);
  if (dynamic) {
    Ref mask(dim_cached_raw(in, MaskKind::kMask, pos, static_cast<int>(nd), x->sizes[a], device.get()));
    if (!mask) return nullptr;
    raw = Ref(backend::call3(backend::T.where, mask.get(), raw.get(), backend::T.zero));
    if (!raw) return nullptr;
  }
  if (a != nd - 1) {
    int order[kMaxDims];
    for (int i = 0, j = 0; i < nd; ++i)
      if (i != a) order[j++] = i;
    order[nd - 1] = a;
    raw = Ref(backend::permute_order(raw.get(), order, static_cast<int>(nd)));
    if (!raw) return nullptr;
  }
  Py_ssize_t batch_sizes[kMaxDims];
  Py_ssize_t rows = 1;
  for (Py_ssize_t i = 0, j = 0; i < nd; ++i)
    if (i != a) rows *= (batch_sizes[j++] = x->sizes[i]);
  Py_ssize_t flat[2] = {rows, x->sizes[a]};
  Ref flat_shape(size_tuple(flat, 2));
  if (!flat_shape) return nullptr;
  raw = Ref(backend::call2(backend::T.reshape, raw.get(), flat_shape.get()));
  if (!raw) return nullptr;
  if (x->sizes[a] > longest) {
    raw = Ref(fast_path::narrowed(raw.get(), 1, 0, longest));
    if (!raw) return nullptr;
  }
  if (window_span < fft) {  // windows of frame_length: the samples up to fft_length past the last window are 0
    Ref pad(Py_BuildValue("(nn)", Py_ssize_t{0}, fft - window_span));
    if (!pad) return nullptr;
    raw = Ref(backend::call2(backend::T.constant_pad_nd, raw.get(), pad.get()));
    if (!raw) return nullptr;
  }
  Ref window(cached_window(frame_length, fft, align_left, enforce_even, dtype.get(), device.get()));
  Ref fft_obj(PyLong_FromSsize_t(fft));
  Ref step_obj(PyLong_FromSsize_t(step));
  if (!window || !fft_obj || !step_obj) return nullptr;
  // What torch.stft(center=False) calls: (input, n_fft, hop_length, win_length, window, normalized, onesided,
  // return_complex, align_to_window).
  PyObject* call[9] = {raw.get(), fft_obj.get(), step_obj.get(), fft_obj.get(), window.get(), Py_False, Py_None,
                       Py_True, Py_None};
  Ref y(PyObject_Vectorcall(backend::T.vf_stft, call, 9, nullptr));
  if (!y && PyErr_ExceptionMatches(PyExc_TypeError)) {  // a torch before align_to_window: torch.stft's own way
    PyErr_Clear();
    return stft_fallback(args, nargs, kwnames);
  }
  if (!y) return nullptr;
  if (n_frames != n_out) {
    y = Ref(fast_path::narrowed(y.get(), 2, 0, n_out));
    if (!y) return nullptr;
  }
  Py_ssize_t sizes[kMaxDims];
  std::copy(batch_sizes, batch_sizes + nd - 1, sizes);
  sizes[nd - 1] = fft / 2 + 1;
  sizes[nd] = n_out;
  Ref shape(size_tuple(sizes, nd + 1));
  if (!shape) return nullptr;
  y = Ref(backend::call2(backend::T.reshape, y.get(), shape.get()));
  if (!y) return nullptr;
  Ref dims(PyTuple_New(nd + 1));
  if (!dims) return nullptr;
  for (Py_ssize_t i = 0, j = 0; i < nd; ++i)
    if (i != a) PyTuple_SET_ITEM(dims.get(), j++, Py_NewRef(PyTuple_GET_ITEM(x->dims, i)));
  PyTuple_SET_ITEM(dims.get(), nd - 1, Py_NewRef(out_dim.get()));
  PyTuple_SET_ITEM(dims.get(), nd, Py_NewRef(out_spatial.get()));
  Ref t(tensor_make(y.release(), dims.get(), sizes, nullptr, out_dim.get()));
  if (!t) return nullptr;
  return PyTuple_Pack(3, t.get(), out_spatial.get(), out_dim.get());
}

// ---- mel_filterbank (dt.audio; its definition: python/dimtorch/audio/mel.py) ------------------------------------

DIMTORCH_PYTHON_FALLBACK(mel_filterbank_fallback, "_mel_filterbank")

/// A number argument the definition keeps as it is: an exact int or float.
bool plain_number(PyObject* o) { return PyLong_CheckExact(o) || PyFloat_CheckExact(o); }

/// dt.audio.mel_filterbank(x, *, in_dim, out_dim, sampling_rate, fft_length=None, f_min=None, f_max=None): in_dim
/// (static) x's last dim, out_dim a static Dim x lacks, the numbers plain ints or floats with the definition's
/// checks passing: x's raw times the definition's matrix (mel_filterbank_matrix's own, looked up once per
/// (filters, rate, fft length, f_min, f_max, dtype, device) and cached on in_dim), one torch.matmul; over x's other
/// dims and out_dim, the feature dim. Every other call and any error: the definition.
PyObject* f_mel_filterbank(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "in_dim", "out_dim", "sampling_rate", "fft_length", "f_min", "f_max"};
  const char* caller = "dimtorch.audio.mel_filterbank()";
  PyObject* v[7];
  if (!parse_args(args, nargs, kwnames, names, 7, 1, 4, v, caller)) {
    PyErr_Clear();
    return mel_filterbank_fallback(args, nargs, kwnames);
  }
#define FALLBACK() return mel_filterbank_fallback(args, nargs, kwnames)
  if (!Py_IS_TYPE(v[0], &TensorType) || !is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(v[1]) || !is_dim(v[2]))
    FALLBACK();
  TensorObject* x = as_tensor(v[0]);
  PyObject* in_dim = v[1];
  PyObject* out_dim = v[2];
  Py_ssize_t nd = tensor_ndim(x);
  Py_ssize_t n_in = as_dim(in_dim)->size, n_out = as_dim(out_dim)->size;
  if (nd < 1 || PyTuple_GET_ITEM(x->dims, nd - 1) != in_dim || n_in < 1 || n_out < 0 ||
      dims_index(x->dims, out_dim) >= 0 || dim_has_lengths(as_dim(out_dim)))
    FALLBACK();
  PyObject* rate = v[3];
  PyObject* fft_arg = v[4] ? v[4] : Py_None;
  PyObject* f_min_arg = v[5] ? v[5] : Py_None;
  PyObject* f_max_arg = v[6] ? v[6] : Py_None;
  if (!plain_number(rate) || (fft_arg != Py_None && !PyLong_CheckExact(fft_arg)) ||
      (f_min_arg != Py_None && !plain_number(f_min_arg)) || (f_max_arg != Py_None && !plain_number(f_max_arg)))
    FALLBACK();
  // The definition's defaults (`fft_length or ...`, `f_min or 0`, `f_max or sampling_rate / 2.0`) and checks.
  Py_ssize_t fft = 0;
  if (fft_arg != Py_None && !fast_path::exact_int(fft_arg, &fft)) FALLBACK();
  if (fft == 0) fft = (n_in - 1) * 2;
  if (fft < 0 || fft / 2 + 1 != n_in) FALLBACK();
  int falsy = f_min_arg == Py_None ? 1 : !PyObject_IsTrue(f_min_arg);
  Ref f_min(falsy ? PyLong_FromLong(0) : Py_NewRef(f_min_arg));
  Ref two(PyFloat_FromDouble(2.0));
  if (!f_min || !two) return nullptr;
  falsy = f_max_arg == Py_None ? 1 : !PyObject_IsTrue(f_max_arg);
  Ref f_max(falsy ? PyNumber_TrueDivide(rate, two.get()) : Py_NewRef(f_max_arg));
  if (!f_max) return nullptr;
  Ref zero(PyLong_FromLong(0));
  if (!zero) return nullptr;
  int ok = PyObject_RichCompareBool(zero.get(), f_min.get(), Py_LE);
  if (ok == 1) ok = PyObject_RichCompareBool(f_min.get(), f_max.get(), Py_LT);
  if (ok < 0) return nullptr;
  if (!ok) FALLBACK();
#undef FALLBACK
  using backend::T;
  Ref dtype(PyObject_GetAttr(x->raw, T.s_dtype));
  Ref device(PyObject_GetAttr(x->raw, T.s_device));
  Ref fft_obj(PyLong_FromSsize_t(fft));
  Ref filters(PyLong_FromSsize_t(n_out));
  static PyObject* tag = nullptr;
  if (!dtype || !device || !fft_obj || !filters || !fast_path::interned(&tag, "mel_filterbank_matrix")) return nullptr;
  Ref key(PyTuple_Pack(8, tag, f_min.get(), f_max.get(), rate, fft_obj.get(), filters.get(), dtype.get(), device.get()));
  if (!key) return nullptr;
  Ref w(fast_path::cached_on_dim(as_dim(in_dim), key.get(), [&]() -> PyObject* {
    Ref matrix_fn(Py_XNewRef(definition("_mel_filterbank_matrix")));  // (dimtorch.audio.mel_filterbank_matrix)
    if (!matrix_fn) return nullptr;
    Ref kw(Py_BuildValue("(sssssss)", "f_min", "f_max", "sampling_rate", "fft_length", "n_filters", "dtype", "device"));
    if (!kw) return nullptr;
    PyObject* call[7] = {f_min.get(), f_max.get(), rate, fft_obj.get(), filters.get(), dtype.get(), device.get()};
    return PyObject_Vectorcall(matrix_fn.get(), call, 0, kw.get());
  }));
  if (!w) return nullptr;
  Ref y(backend::call2(T.matmul, x->raw, w.get()));
  if (!y) {  // (the definition raises it, in its words)
    PyErr_Clear();
    return mel_filterbank_fallback(args, nargs, kwnames);
  }
  Ref dims(fast_path::dims_replaced(x->dims, nd - 1, out_dim));
  if (!dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  for (Py_ssize_t i = 0; i < nd; ++i) sizes[i] = i == nd - 1 ? n_out : x->sizes[i];
  return tensor_make(y.release(), dims.get(), sizes, nullptr, out_dim);
}

PyMethodDef kFunctions[] = {
    {"stft", DIMTORCH_OP(f_stft), METH_FASTCALL | METH_KEYWORDS,
     "stft(x, *, in_spatial_dim, frame_step, frame_length, fft_length=None, window_use_frame_length=True, "
     "align_window_left=True, window_enforce_even=True, out_spatial_dim=None, out_dim=None, use_mask=None) -> "
     "(y, out_spatial_dim, out_dim): see dimtorch.ops.signal.stft; one stft with a cached window here."},
    {"_mel_filterbank", DIMTORCH_OP(f_mel_filterbank), METH_FASTCALL | METH_KEYWORDS,
     "_mel_filterbank($module, x, *, in_dim, out_dim, sampling_rate, fft_length=None, f_min=None, f_max=None)\n--\n\n"
     "dimtorch.audio.mel_filterbank's fast path: see dimtorch.audio.mel for its definition; one matmul with the "
     "cached matrix here."},
    {nullptr}};

}  // namespace

bool export_ops_signal(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
