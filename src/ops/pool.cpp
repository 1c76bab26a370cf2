// Fast path of pool (definition: python/dimtorch/ops/pool.py) for its common call: mode "max" (or "avg"
// when no count is needed: padding "valid" or static spatial dims), 1 to 3 spatial dims static or with
// lengths, padding that torch's own padding and ceil_mode give (the definition's torch_padding), inputs at
// least one window long, no given out dims. As the definition's plan: x's padding set to -inf (max, one
// where with the cached mask; padding "valid" needs none), a dynamic axis narrowed to its longest
// sequence, x's axes permuted to (lead..., *spatial) (a view; lead merged to torch's (N, C) when not one
// or two dims), one torch pool; the out dims by dim math (cached on the dims). Every other case, every
// error included, goes to the Python definition.
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

using namespace conv_args;

DIMTORCH_PYTHON_FALLBACK(pool_fallback, "pool")

/// a // b (Python's: toward -inf) for b > 0.
Py_ssize_t floordiv(Py_ssize_t a, Py_ssize_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/// torch's pooling output length of `size` frames, `pad` on both sides (ops/pool.py torch_out_size).
Py_ssize_t torch_out_size(Py_ssize_t size, Py_ssize_t k, Py_ssize_t s, Py_ssize_t pad, bool ceil_mode) {
  Py_ssize_t n = floordiv(size + 2 * pad - k + (ceil_mode ? s - 1 : 0), s) + 1;
  if (ceil_mode && (n - 1) * s >= size + pad) --n;  // the last window starts inside the input or its left padding
  return n;
}

/// The ceil_mode with which torch's padding `left` gives the windows of explicit (left, right)
/// padding, as ops/pool.py torch_padding: 0 no, 1 yes, -1 none does (the definition pads explicitly).
int implicit_ceil_mode(int n, const Py_ssize_t* sizes, const Py_ssize_t* ks, const Py_ssize_t* strides,
                       const Py_ssize_t* left, const Py_ssize_t* right) {
  for (int i = 0; i < n; ++i)
    if (2 * left[i] > ks[i]) return -1;  // torch's limit on its padding
  for (int ceil_mode = 0; ceil_mode < 2; ++ceil_mode) {
    bool all = true;
    for (int i = 0; all && i < n; ++i) {
      Py_ssize_t explicit_n = floordiv(sizes[i] + left[i] + right[i] - ks[i], strides[i]) + 1;
      all = torch_out_size(sizes[i], ks[i], strides[i], left[i], ceil_mode) == explicit_n;
    }
    if (all) return ceil_mode;
  }
  return -1;
}

/// pool(x, /, *, nd=None, mode, pool_size, padding="valid", dilation_rate=1, strides=None,
/// in_spatial_dims, out_spatial_dims=None, use_mask=None) -> (tensor, out_spatial_dims).
PyObject* f_pool(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "mode", "pool_size", "in_spatial_dims", "nd", "padding",
                                      "dilation_rate", "strides", "out_spatial_dims", "use_mask"};
  const char* caller = "dimtorch.pool()";
  PyObject* v[10];
  if (!parse_args(args, nargs, kwnames, names, 10, 1, 4, v, caller, 1)) {
    PyErr_Clear();
    return pool_fallback(args, nargs, kwnames);
  }
#define FALLBACK() return pool_fallback(args, nargs, kwnames)
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !PyUnicode_CheckExact(v[1]) || (v[8] && v[8] != Py_None)) FALLBACK();
  TensorObject* x = as_tensor(v[0]);
  bool max_mode;
  if (PyUnicode_CompareWithASCIIString(v[1], "max") == 0) max_mode = true;
  else if (PyUnicode_CompareWithASCIIString(v[1], "avg") == 0) max_mode = false;
  else FALLBACK();
  PyObject* spatial[kMaxSpatial];
  int n;
  Py_ssize_t ks[kMaxSpatial], strides[kMaxSpatial], dilation[kMaxSpatial], pads[kMaxSpatial], nd = 0;
  Padding kind;
  if (!spatial_dims(v[3], spatial, &n) || !per_dim(v[2], n, 1, 1, ks) ||
      !per_dim(v[7] == Py_None ? nullptr : v[7], n, 1, 1, strides) || !per_dim(v[6], n, 1, 1, dilation) ||
      !padding(v[5], n, &kind, pads) || (v[4] && v[4] != Py_None && (!fast_path::exact_int(v[4], &nd) || nd != n)))
    FALLBACK();
  if (!v[7] || v[7] == Py_None)
    for (int i = 0; i < n; ++i) strides[i] = ks[i];  // strides default to pool_size
  for (int i = 0; i < n; ++i)
    if (dilation[i] != 1) FALLBACK();
  PyObject* dtype = backend::raw_dtype_name(x->raw);
  if (!dtype) return nullptr;
  if (!backend::is_floating_dtype_name(dtype)) FALLBACK();
  // x's layout: lead (x's other dims, in order), then the spatial dims.
  int ndim = static_cast<int>(tensor_ndim(x));
  int pos[kMaxSpatial];
  bool is_spatial[kMaxDims] = {};
  bool dynamic;
  if (!locate_spatial(x, spatial, n, pos, is_spatial, &dynamic)) FALLBACK();
  // (a 'same' window of one frame never reaches padding: no mask for that axis)
  bool reaches_padding = false;
  for (int i = 0; dynamic && i < n; ++i)
    reaches_padding =
        reaches_padding || (dim_has_lengths(as_dim(spatial[i])) && !(kind == Padding::kSame && ks[i] == 1));
  // Padding is masked (-inf for max) when a window of a valid output frame can reach it; an avg then
  // divides by the count of valid frames: the definition does that.
  bool masked = kind != Padding::kValid && reaches_padding;
  if (masked && !max_mode) FALLBACK();
  int order[kMaxDims], n_lead = 0;
  for (int i = 0; i < ndim; ++i)
    if (!is_spatial[i]) order[n_lead++] = i;
  for (int i = 0; i < n; ++i) order[n_lead + i] = pos[i];
  // Sizes the pool sees: a dynamic axis narrowed to its longest sequence; each at least one window.
  Py_ssize_t sizes[kMaxSpatial], left[kMaxSpatial], right[kMaxSpatial], out_sizes[kMaxSpatial];
  bool narrow;
  if (!torch_sizes(x, spatial, pos, n, sizes, &narrow)) return nullptr;
  for (int i = 0; i < n; ++i) {
    if (kind == Padding::kSame) {
      left[i] = (ks[i] - 1) / 2;
      right[i] = ks[i] - 1 - left[i];
    } else {
      left[i] = right[i] = pads[i];
    }
    Py_ssize_t need = kind == Padding::kSame    ? 1
                      : kind == Padding::kValid ? ks[i]
                                                : std::max<Py_ssize_t>(1, ks[i] - 2 * pads[i]);
    if (sizes[i] < need) FALLBACK();  // shorter than a window: the definition pads or says so
    // torch's avg_pool3d refuses an input shorter than the window before its own padding
    if (!max_mode && n == 3 && sizes[i] < ks[i]) FALLBACK();
    out_sizes[i] = floordiv(sizes[i] + left[i] + right[i] - ks[i], strides[i]) + 1;
  }
  int ceil_mode = implicit_ceil_mode(n, sizes, ks, strides, left, right);
  if (ceil_mode < 0) FALLBACK();
  Py_ssize_t narrow_out[kMaxSpatial];
  Ref out_spatial(out_spatial_tuple(spatial, n, ks, strides, kind, pads, caller, narrow_out));
  if (!out_spatial) FALLBACK();
  bool narrow_any_out = false;
  for (int i = 0; i < n; ++i) {
    if (narrow_out[i] < 0 || narrow_out[i] > out_sizes[i]) FALLBACK();
    narrow_any_out = narrow_any_out || narrow_out[i] < out_sizes[i];
  }
#undef FALLBACK
  Ref raw;
  if (masked) {
    int axes[kMaxDims];
    int n_axes = 0;
    for (int i = 0; i < ndim; ++i)
      if (dim_has_lengths(as_dim(PyTuple_GET_ITEM(x->dims, i)))) axes[n_axes++] = i;
    raw = Ref(masked_raw(x, axes, n_axes, backend::T.float_neg_inf, nullptr, caller));
    if (!raw) {  // lengths over dims x lacks: the definition says so
      PyErr_Clear();
      return pool_fallback(args, nargs, kwnames);
    }
  } else {
    raw = Ref::borrow(x->raw);
  }
  // (in the definition's order: narrow, permute, merge; so that torch gets the same strides)
  for (int i = 0; narrow && i < n; ++i)
    if (sizes[i] < x->sizes[pos[i]] && !(raw = Ref(fast_path::narrowed(raw.get(), pos[i], 0, sizes[i]))))
      return nullptr;
  if (!(raw = Ref(permuted(raw.get(), order, ndim)))) return nullptr;
  // torch pools (N, C, *S) or (C, *S): no lead dim becomes an axis of 1; more than two merge all but the last.
  Py_ssize_t shape[2 + kMaxSpatial];
  int n_shape = 0;
  if (n_lead == 0) {
    shape[n_shape++] = 1;
  } else if (n_lead > 2) {
    Py_ssize_t merged = 1;
    for (int j = 0; j < n_lead - 1; ++j) merged *= x->sizes[order[j]];
    shape[n_shape++] = merged;
    shape[n_shape++] = x->sizes[order[n_lead - 1]];
  }
  bool merge = n_shape > 0;
  if (merge) {
    for (int i = 0; i < n; ++i) shape[n_shape++] = sizes[i];
    if (!(raw = Ref(reshaped(raw.get(), shape, n_shape)))) return nullptr;
  }
  Ref k_arg(int_arg(ks, n)), s_arg(int_arg(strides, n)), p_arg(int_arg(left, n));
  if (!k_arg || !s_arg || !p_arg) return nullptr;
  Ref out;
  // Windows along one axis only, side by side and within the input (RETURNN's Conformer frontend: (1, 2)
  // over (time, feature)): that axis split into (windows, k) and a max over k. torch's N-d max pool is
  // scalar per output frame over (N, C, ...) (8x32x8x80: ~1 ms forward); the max over the last axis is
  // vectorized and its backward writes the gradient where torch's pool does (the first maximum; NaN
  // wins): forward and backward together ~0.85 ms instead of ~1.5 ms, the result and gradient contiguous;
  // pairs along the last axis by ops/pool_pairs.py's elementwise max and bitwise gradient (~0.35 ms).
  // Only 2-D and 3-D pools of at least kSplitMaxMin elements: torch's max_pool1d is 8x faster without grad
  // (8x256x50: 40 vs 340 us; its indices cost only with grad), and on tiny inputs the split's own calls
  // cost more than the loop (3x4x7x8: 10 vs 6.5 us).
  constexpr Py_ssize_t kSplitMaxMin = 16384;
  Py_ssize_t numel = 1;
  for (int i = 0; i < ndim; ++i) numel *= x->sizes[i];
  int window_axis = -1;
  bool side_by_side = max_mode && !ceil_mode && n >= 2 && numel >= kSplitMaxMin;
  for (int i = 0; side_by_side && i < n; ++i) {
    side_by_side =
        strides[i] == ks[i] && left[i] == 0 && sizes[i] % ks[i] == 0 && out_sizes[i] == sizes[i] / ks[i];
    if (ks[i] > 1) {
      side_by_side = side_by_side && window_axis < 0;
      window_axis = i;
    }
  }
  if (side_by_side && window_axis >= 0) {
    Py_ssize_t split[kMaxDims + 1];
    int n_before = merge ? n_shape - n : n_lead, n_split = 0;
    for (int j = 0; j < n_before; ++j) split[n_split++] = merge ? shape[j] : x->sizes[order[j]];
    for (int i = 0; i < n; ++i) {
      split[n_split++] = i == window_axis ? out_sizes[i] : sizes[i];
      if (i == window_axis) split[n_split++] = ks[i];
    }
    Ref windows(reshaped(raw.get(), split, n_split));
    if (!windows) return nullptr;
    if (ks[window_axis] == 2 && window_axis == n - 1) {  // pairs along the last axis: ops/pool_pairs.py
      PyObject* pair_max = definition("_pair_max");
      if (!pair_max) return nullptr;
      out = Ref(PyObject_CallOneArg(pair_max, windows.get()));
    } else {
      Ref last(PyLong_FromLong(n_before + window_axis + 1));
      if (!last) return nullptr;
      Ref values_indices(PyObject_CallMethod(windows.get(), "max", "O", last.get()));
      if (!values_indices) return nullptr;
      out = Ref(PySequence_GetItem(values_indices.get(), 0));
    }
    if (!out) return nullptr;
  } else if (max_mode) {  // torch.max_pool*d(x, k, s, p, dilation, ceil_mode)
    static PyObject* one = PyLong_FromLong(1);
    PyObject* pool_args[6] = {raw.get(), k_arg.get(), s_arg.get(), p_arg.get(), one, ceil_mode ? Py_True : Py_False};
    out = Ref(PyObject_Vectorcall(backend::T.max_pool[n - 1], pool_args, 6, nullptr));
  } else {  // F.avg_pool*d(x, k, s, p, ceil_mode, count_include_pad=False)
    PyObject* pool_args[6] = {raw.get(), k_arg.get(), s_arg.get(), p_arg.get(), ceil_mode ? Py_True : Py_False,
                              Py_False};
    out = Ref(PyObject_Vectorcall(backend::T.avg_pool[n - 1], pool_args, 6, nullptr));
  }
  if (!out) return nullptr;
  // The output: x's other dims, the out spatial dims.
  int nd_out = n_lead + n;
  Py_ssize_t out_shape[kMaxDims];
  Ref out_dims(out_dims_and_shape(x, order, n_lead, nullptr, 0, out_spatial.get(), out_sizes, out_shape));
  if (!out_dims) return nullptr;
  if (merge && !(out = Ref(reshaped(out.get(), out_shape, nd_out)))) return nullptr;
  for (int i = 0; narrow_any_out && i < n; ++i)
    if (narrow_out[i] < out_sizes[i]) {
      if (!(out = Ref(fast_path::narrowed(out.get(), n_lead + i, 0, narrow_out[i])))) return nullptr;
      out_shape[n_lead + i] = narrow_out[i];
    }
  PyObject* feature = x->feature_dim;  // kept unless pooled over
  for (int i = 0; feature && i < n; ++i)
    if (spatial[i] == feature) feature = nullptr;
  Ref t(tensor_make(out.release(), out_dims.get(), out_shape, nullptr, feature));
  if (!t) return nullptr;
  return PyTuple_Pack(2, t.get(), out_spatial.get());
}

PyMethodDef kFunctions[] = {
    {"pool", DIMTORCH_OP(f_pool), METH_FASTCALL | METH_KEYWORDS,
     "pool(x, /, *, nd=None, mode, pool_size, padding='valid', dilation_rate=1, strides=None, in_spatial_dims, "
     "out_spatial_dims=None, use_mask=None) -> (tensor, out_spatial_dims): see dimtorch.ops.pool.pool; the common "
     "call is one torch pool here (and one where with the cached mask for max over dynamic spatial dims)."},
    {nullptr}};

}  // namespace

bool export_ops_pool(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
