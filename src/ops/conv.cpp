// Fast path of conv (definition: python/dimtorch/ops/conv.py) for its common call: the filter in
// torch's layout (out_dim, in_dim // groups, *filter_size), the spatial dims static or dynamic with
// inputs at least one window long, padding "valid", "same" with equal sides or ints, no given out
// dims. x's padding zeroed (one where with the cached mask; not with padding_zeroed=True), its axes
// permuted to (rest, in_dim, *spatial) (a view; rest merged into one batch axis unless it is one dim),
// one torch conv (2-D on the CPU: channels-last, or im2col for one input channel; a 1-D depthwise filter over
// an input shorter than its right half: the taps that meet a frame, as windows times taps); the out dims by
// dim math (cached on the dims). Every other case, every error included, goes to the Python definition.
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

DIMTORCH_PYTHON_FALLBACK(conv_fallback, "conv")
DIMTORCH_DEFINITION_ONLY(f_transposed_conv, "transposed_conv")

/// x's raw with the padding of its dynamic dims zeroed (as x.copy_masked(0)), or NULL with no
/// error set when the mask cannot be made here (lengths over dims x lacks: the definition says so).
PyObject* zero_padding(TensorObject* x) {
  int axes[kMaxDims];
  int n = 0;
  for (int i = 0; i < tensor_ndim(x); ++i)
    if (dim_has_lengths(as_dim(PyTuple_GET_ITEM(x->dims, i)))) axes[n++] = i;
  PyObject* raw = masked_raw(x, axes, n, backend::T.zero, nullptr, "dimtorch.conv()");
  if (!raw) PyErr_Clear();
  return raw;
}

/// raw.contiguous(memory_format=torch.channels_last): oneDNN's own layout for a 2-D convolution on the
/// CPU (NCHW input is reordered inside each call, and its backward runs slower). The output keeps the
/// layout, so a chain of convolutions (RETURNN's ConformerConvSubsample) converts once, and the
/// (time, feature, channels) merge after the last one is a view. New reference.
PyObject* channels_last(PyObject* raw) {
  static PyObject* s_contiguous = nullptr;
  static PyObject* kw = nullptr;
  PyObject* name = fast_path::interned(&s_contiguous, "contiguous");
  if (!name || (!kw && !(kw = Py_BuildValue("(s)", "memory_format")))) return nullptr;
  PyObject* call_args[2] = {raw, backend::T.channels_last};
  return PyObject_VectorcallMethod(name, call_args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, kw);
}

/// A 1-D depthwise conv of raw (N, C, T) with the taps [tap0, tap0 + n_taps) of filter (C, 1, k) alone, padded
/// by pads (left, right): the windows times the taps, summed (the definition's ops, so its values and
/// gradients: torch's depthwise conv1d costs ~0.3-2 ms a call on the CPU whatever the size). New reference.
PyObject* depthwise_taps(PyObject* raw, PyObject* filter, PyObject* bias, Py_ssize_t tap0, Py_ssize_t n_taps,
                         const Py_ssize_t* pads) {
  static PyObject* per_channel = nullptr;  // [:, 0, None, :]
  static PyObject* column = nullptr;       // [:, None]
  if (!per_channel && !(per_channel = Py_BuildValue("(NiON)", PySlice_New(nullptr, nullptr, nullptr), 0, Py_None,
                                                    PySlice_New(nullptr, nullptr, nullptr))))
    return nullptr;
  if (!column && !(column = Py_BuildValue("(NO)", PySlice_New(nullptr, nullptr, nullptr), Py_None))) return nullptr;
  Ref w(fast_path::narrowed(filter, 2, tap0, n_taps));
  Ref pad_list(int_arg(pads, 2));
  if (!w || !pad_list) return nullptr;
  Ref padded(backend::call2(backend::T.constant_pad_nd, raw, pad_list.get()));
  Ref dim(PyLong_FromLong(-1)), size(PyLong_FromSsize_t(n_taps)), step(PyLong_FromLong(1));
  if (!padded || !dim || !size || !step) return nullptr;
  PyObject* unfold_args[4] = {padded.get(), dim.get(), size.get(), step.get()};
  Ref windows(PyObject_Vectorcall(backend::T.unfold, unfold_args, 4, nullptr));
  Ref taps(windows ? PyObject_GetItem(w.get(), per_channel) : nullptr);
  Ref product(taps ? PyNumber_Multiply(windows.get(), taps.get()) : nullptr);
  Ref out(product ? backend::call2(backend::T.sum, product.get(), dim.get()) : nullptr);
  if (!out || !bias) return out.release();
  Ref b(PyObject_GetItem(bias, column));
  return b ? PyNumber_Add(out.get(), b.get()) : nullptr;
}

/// conv's result: out (N, out, *S) as a Tensor over x's other dims (x's axes order[0..n_rest), merged into N
/// unless one), out_dim, the out spatial dims; -> (tensor, out_spatial_dims). New reference.
PyObject* conv_result(TensorObject* x, const int* order, int n_rest, PyObject* out_dim, Py_ssize_t out_size,
                      PyObject* out_spatial, const Py_ssize_t* out_sizes, Ref out) {
  int nd_out = n_rest + 1 + static_cast<int>(PyTuple_GET_SIZE(out_spatial));
  Py_ssize_t out_shape[kMaxDims];
  Ref out_dims(out_dims_and_shape(x, order, n_rest, out_dim, out_size, out_spatial, out_sizes, out_shape));
  if (!out_dims) return nullptr;
  if (n_rest != 1 && !(out = Ref(reshaped(out.get(), out_shape, nd_out)))) return nullptr;
  Ref t(tensor_make(out.release(), out_dims.get(), out_shape, nullptr, out_dim));
  if (!t) return nullptr;
  return PyTuple_Pack(2, t.get(), out_spatial);
}

/// conv(x, /, filter, *, in_dim, out_dim, in_spatial_dims, out_spatial_dims=None, filter_size,
/// padding="valid", strides=None, dilation_rate=None, groups=None, bias=None, use_mask=None,
/// dilation=None, padding_zeroed=False) -> (tensor, out_spatial_dims). None is 1 for strides, dilation and
/// groups; dilation_rate is dilation (RETURNN frontend's name); use_mask changes nothing (see the definition);
/// padding_zeroed: the caller's promise that x's padding holds zeros (no where here).
PyObject* f_conv(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "filter", "in_dim", "out_dim", "in_spatial_dims", "filter_size",
                                      "out_spatial_dims", "strides", "dilation", "padding", "groups", "bias",
                                      "use_mask", "dilation_rate", "padding_zeroed"};
  const char* caller = "dimtorch.conv()";
  PyObject* v[15];
  if (!parse_args(args, nargs, kwnames, names, 15, 2, 6, v, caller, 1)) {
    PyErr_Clear();
    return conv_fallback(args, nargs, kwnames);
  }
#define FALLBACK() return conv_fallback(args, nargs, kwnames)
  for (int i : {7, 8, 10, 11, 13})  // None: the default
    if (v[i] == Py_None) v[i] = nullptr;
  if (v[14] && v[14] != Py_True && v[14] != Py_False) FALLBACK();  // (the definition names the error)
  const bool padding_zeroed = v[14] == Py_True;
  if (v[13]) {  // dilation_rate: dilation's other name (both given: the definition's error)
    if (v[8]) FALLBACK();
    v[8] = v[13];
  }
  PyObject *in_dim = v[2], *out_dim = v[3], *bias = v[11];
  if (!is_tensor(v[0]) || !is_tensor(v[1]) || !is_dim(in_dim) || !is_dim(out_dim) || (v[6] && v[6] != Py_None))
    FALLBACK();
  TensorObject* x = as_tensor(v[0]);
  TensorObject* filter = as_tensor(v[1]);
  Py_ssize_t in_size = as_dim(in_dim)->size, out_size = as_dim(out_dim)->size, groups = 1;
  if (in_size < 0 || out_size < 0 || (v[10] && (!fast_path::exact_int(v[10], &groups) || groups < 1)) ||
      in_size % groups || out_size % groups)
    FALLBACK();
  PyObject* spatial[kMaxSpatial];
  int n;
  Py_ssize_t strides[kMaxSpatial], dilation[kMaxSpatial], pads[kMaxSpatial];
  Padding kind;
  if (!spatial_dims(v[4], spatial, &n) || !per_dim(v[7], n, 1, 1, strides) || !per_dim(v[8], n, 1, 1, dilation) ||
      !padding(v[9], n, &kind, pads))
    FALLBACK();
  // filter_size: n static Dims (one Dim for n == 1); the filter's dims exactly (out_dim, filter_in, *filter_size).
  PyObject* fs = v[5];
  PyObject* const* fs_items = &fs;
  if (!is_dim(fs)) {
    if ((!PyTuple_CheckExact(fs) && !PyList_CheckExact(fs)) || PySequence_Fast_GET_SIZE(fs) != n) FALLBACK();
    fs_items = PySequence_Fast_ITEMS(fs);
  } else if (n != 1) {
    FALLBACK();
  }
  Ref filter_in = Ref::borrow(in_dim);
  if (groups > 1 && !(filter_in = Ref(dim_derive(as_dim(in_dim), DimOp::kFloorDiv, groups, nullptr, caller)))) {
    PyErr_Clear();
    FALLBACK();
  }
  if (filter_in.get() == out_dim || tensor_ndim(filter) != 2 + n || PyTuple_GET_ITEM(filter->dims, 0) != out_dim ||
      PyTuple_GET_ITEM(filter->dims, 1) != filter_in.get())
    FALLBACK();
  Py_ssize_t k_eff[kMaxSpatial];
  for (int i = 0; i < n; ++i) {
    PyObject* f = fs_items[i];
    if (!is_dim(f) || as_dim(f)->size < 1 || PyTuple_GET_ITEM(filter->dims, 2 + i) != f) FALLBACK();
    k_eff[i] = dilation[i] * (as_dim(f)->size - 1) + 1;
  }
  if (bias && (!is_tensor(bias) || tensor_ndim(as_tensor(bias)) != 1 ||
               PyTuple_GET_ITEM(as_tensor(bias)->dims, 0) != out_dim))
    FALLBACK();
  // torch's padding: the ints, or "same"'s k_eff - 1 frames when both sides get as many.
  Py_ssize_t torch_pad[kMaxSpatial];
  bool uneven = false;  // an uneven 'same' (even filter): torch cannot pad it (below: the taps, else the definition)
  for (int i = 0; i < n; ++i) {
    torch_pad[i] = pads[i];
    if (kind == Padding::kSame) {
      uneven = uneven || (k_eff[i] - 1) % 2;
      torch_pad[i] = (k_eff[i] - 1) / 2;
    }
  }
  // x's layout: rest (x's other dims, in order), in_dim, the spatial dims.
  int nd = static_cast<int>(tensor_ndim(x));
  int ci = dims_index(x->dims, in_dim);
  int pos[kMaxSpatial];
  bool is_spatial[kMaxDims] = {};
  bool dynamic;
  if (ci < 0 || !locate_spatial(x, spatial, n, pos, is_spatial, &dynamic) || is_spatial[ci]) FALLBACK();
  int order[kMaxDims], n_rest = 0;
  Py_ssize_t lead = 1;
  for (int i = 0; i < nd; ++i)
    if (i != ci && !is_spatial[i]) {
      order[n_rest++] = i;
      lead *= x->sizes[i];
    }
  order[n_rest] = ci;
  for (int i = 0; i < n; ++i) order[n_rest + 1 + i] = pos[i];
  // Sizes the conv sees: a dynamic axis narrowed to its longest sequence; each at least one window.
  Py_ssize_t sizes[kMaxSpatial], out_sizes[kMaxSpatial], od_sizes[kMaxSpatial];
  bool narrow;
  if (!torch_sizes(x, spatial, pos, n, sizes, &narrow)) return nullptr;
  for (int i = 0; i < n; ++i) {
    // No full window (or no frame at all): the definition pads or says so.
    if (sizes[i] < 1 || sizes[i] + 2 * torch_pad[i] < k_eff[i]) FALLBACK();
    out_sizes[i] = (sizes[i] + 2 * torch_pad[i] - k_eff[i]) / strides[i] + 1;
  }
  // 'same' at stride and dilation 1 over an axis shorter than the filter's right half plus one: some taps
  // meet padding zeros alone, and the definition drops them (ops/conv.py _same_taps: faster, and a
  // oneDNN sum over all taps can round differently from the definition's in the last bit).
  // A 1-D depthwise filter (one input channel per group, as many groups as channels; a Conformer's conv
  // module) keeps those taps alone, as the definition does, with its ops (see `taps` below); others go there.
  bool unit = kind == Padding::kSame;
  for (int i = 0; unit && i < n; ++i) unit = strides[i] == 1 && dilation[i] == 1;
  bool taps = false;
  for (int i = 0; unit && i < n; ++i) taps = taps || sizes[i] < k_eff[i] - (k_eff[i] - 1) / 2;
  Py_ssize_t tap0 = 0, n_taps = 0, tap_pads[2] = {0, 0};
  if (taps) {
    if (n != 1 || in_size != groups || out_size != groups) FALLBACK();
    // (ops/conv.py _same_taps: output frame t of the taps [k0, k1] reads x's frame t + k - left as tap k)
    Py_ssize_t k = k_eff[0], left = (k - 1) / 2, size = sizes[0];
    Py_ssize_t k0 = left - size + 1 > 0 ? left - size + 1 : 0, k1 = left + size - 1 < k - 1 ? left + size - 1 : k - 1;
    tap0 = k0, n_taps = k1 - k0 + 1, tap_pads[0] = left - k0, tap_pads[1] = k1 - left;
    out_sizes[0] = size;
  } else if (uneven) {
    FALLBACK();  // the definition pads explicitly
  }
  Ref out_spatial(out_spatial_tuple(spatial, n, k_eff, strides, kind, pads, caller, od_sizes));
  if (!out_spatial) FALLBACK();
  for (int i = 0; i < n; ++i)
    if (od_sizes[i] != out_sizes[i]) FALLBACK();  // (the definition narrows its result)
#undef FALLBACK
  Ref raw(dynamic && !padding_zeroed ? zero_padding(x) : Py_NewRef(x->raw));
  if (!raw) return conv_fallback(args, nargs, kwnames);
  // (in the definition's order: permute, merge, narrow; so that torch gets the same strides)
  if (!(raw = Ref(permuted(raw.get(), order, nd)))) return nullptr;
  Py_ssize_t shape[2 + kMaxSpatial];
  if (n_rest != 1) {
    shape[0] = lead;
    shape[1] = in_size;
    for (int i = 0; i < n; ++i) shape[2 + i] = x->sizes[pos[i]];
    if (!(raw = Ref(reshaped(raw.get(), shape, 2 + n)))) return nullptr;
  }
  for (int i = 0; narrow && i < n; ++i)
    if (sizes[i] < x->sizes[pos[i]] && !(raw = Ref(fast_path::narrowed(raw.get(), 2 + i, 0, sizes[i]))))
      return nullptr;
  Ref out;
  if (taps) {
    if (!(out = Ref(depthwise_taps(raw.get(), filter->raw, bias ? as_tensor(bias)->raw : nullptr, tap0, n_taps,
                                   tap_pads))))
      return nullptr;
    return conv_result(x, order, n_rest, out_dim, out_size, out_spatial.get(), out_sizes, std::move(out));
  }
  Ref stride_arg(int_arg(strides, n)), pad_arg(int_arg(torch_pad, n)), dilation_arg(int_arg(dilation, n));
  Ref groups_arg(PyLong_FromSsize_t(groups));
  if (!stride_arg || !pad_arg || !dilation_arg || !groups_arg) return nullptr;
  // 2-D filters on the CPU: one input channel runs torch's im2col + matmul convolution (thnn_conv2d),
  // 3-6x faster forward and backward than oneDNN's there (as ops/conv.py _conv2d_one_channel); more
  // input channels (float32, groups 1) go to oneDNN channels-last (as _conv2d_channels_last).
  bool cpu_2d = n == 2 && groups == 1 && dilation[0] == 1 && dilation[1] == 1;
  if (cpu_2d) {
    Ref is_cpu(PyObject_GetAttr(raw.get(), backend::T.s_is_cpu));
    if (!is_cpu) return nullptr;
    cpu_2d = is_cpu.get() == Py_True;
  }
  bool one_channel = cpu_2d && in_size == 1;
  if (cpu_2d && !one_channel) {
    Ref dtype(PyObject_GetAttr(raw.get(), backend::T.s_dtype));
    if (!dtype) return nullptr;
    if (dtype.get() == backend::T.float32 && !(raw = Ref(channels_last(raw.get())))) return nullptr;
  }
  PyObject* conv_args[7] = {raw.get(), filter->raw, bias ? as_tensor(bias)->raw : Py_None, stride_arg.get(),
                            pad_arg.get(), dilation_arg.get(), groups_arg.get()};
  if (one_channel) {
    Py_ssize_t kernel[2] = {as_dim(fs_items[0])->size, as_dim(fs_items[1])->size};
    Ref kernel_arg(int_arg(kernel, 2));
    if (!kernel_arg) return nullptr;
    PyObject* thnn_args[6] = {raw.get(), filter->raw, kernel_arg.get(), bias ? as_tensor(bias)->raw : Py_None,
                              stride_arg.get(), pad_arg.get()};
    out = Ref(PyObject_Vectorcall(backend::T.thnn_conv2d, thnn_args, 6, nullptr));
  } else {
    out = Ref(PyObject_Vectorcall(backend::T.conv[n - 1], conv_args, 7, nullptr));
  }
  if (!out) return nullptr;
  return conv_result(x, order, n_rest, out_dim, out_size, out_spatial.get(), out_sizes, std::move(out));
}

PyMethodDef kFunctions[] = {
    {"conv", DIMTORCH_OP(f_conv), METH_FASTCALL | METH_KEYWORDS,
     "conv(x, /, filter, *, in_dim, out_dim, in_spatial_dims, out_spatial_dims=None, filter_size, padding='valid', "
     "strides=None, dilation_rate=None, groups=None, bias=None, use_mask=None, dilation=None, padding_zeroed=False) "
     "-> (tensor, "
     "out_spatial_dims): see "
     "dimtorch.ops.conv.conv; the common call is one torch conv here (and one where with the cached mask "
     "for dynamic spatial dims)."},
    {"transposed_conv", DIMTORCH_OP(f_transposed_conv), METH_FASTCALL | METH_KEYWORDS,
     "transposed_conv(x, /, filter, *, in_dim, out_dim, in_spatial_dims, ...) -> (tensor, out_spatial_dims): see "
     "dimtorch.ops.conv.transposed_conv (no fast path: the definition, called from here so that its errors are "
     "named and dim= gets a hint; ~1 K instructions a call, ~0.3 % of a tiny transposed conv)."},
    {nullptr}};

}  // namespace

bool export_ops_conv(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
