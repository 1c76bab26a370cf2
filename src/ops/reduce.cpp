// Reductions over named dims (sum, mean, max, min, logsumexp, any, all, argmax, argmin) with the
// padding of dynamic dims masked: one torch.where in front of one torch reduction; moments; softmax
// and log_softmax (masked).
#include <cmath>

#include "core/args.h"
#include "core/message_dims.h"
#include "core/backend.h"
#include "core/dim.h"
#include "core/functions.h"
#include "core/mask.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "core/definitions.h"
#include "core/tensor.h"
#include "core/exports.h"
#include "core/python_fallback.h"
#include "ops/fast_path_util.h"

namespace dimtorch {

bool axes_arg(TensorObject* x, PyObject* axis, int* axes, int* n_axes, const char* caller) {
  Ref dims(dims_arg_to_tuple(axis, caller, "axis"));
  if (!dims) return false;
  Py_ssize_t n = PyTuple_GET_SIZE(dims.get());
  if (n == 0) {
    PyErr_Format(PyExc_ValueError, "%s: axis must name at least one dim", caller);
    return false;
  }
  for (Py_ssize_t j = 0; j < n; ++j) {
    PyObject* d = PyTuple_GET_ITEM(dims.get(), j);
    int i = dims_index(x->dims, d);
    if (i < 0) {
      MessageDims scope{d, x->dims};
      PyErr_Format(PyExc_ValueError, "%s: dim %s is not in x (dims: %s)%s", caller,
                   describe_dim(d).c_str(), describe_dims(x->dims, x->sizes).c_str(),
                   scope.namesakes_note().c_str());
      return false;
    }
    for (Py_ssize_t k = 0; k < j; ++k)
      if (axes[k] == i) {
        PyErr_Format(PyExc_ValueError, "%s: dim %s is given twice in axis", caller,
                     describe_dim(d).c_str());
        return false;
      }
    axes[j] = i;
  }
  *n_axes = static_cast<int>(n);
  return true;
}

PyObject* dims_without(TensorObject* x, const bool* removed, Py_ssize_t* sizes_out) {
  Py_ssize_t n = tensor_ndim(x), k = 0;
  for (Py_ssize_t i = 0; i < n; ++i) k += removed[i] ? 0 : 1;
  PyObject* out = PyTuple_New(k);
  if (!out) return nullptr;
  k = 0;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (removed[i]) continue;
    sizes_out[k] = x->sizes[i];
    PyTuple_SET_ITEM(out, k++, Py_NewRef(PyTuple_GET_ITEM(x->dims, i)));
  }
  return out;
}

PyObject* extreme_fill(PyObject* raw, bool want_max_neutral_low, const char* caller) {
  /* The neutral element of max is the lowest value of the dtype (of min the highest): -inf/+inf
     for floats, the integer limits for ints, so that torch.where keeps the dtype. */
  PyObject* name = backend::raw_dtype_name(raw);
  if (!name) return nullptr;
  if (backend::is_floating_dtype_name(name))
    return Py_NewRef(want_max_neutral_low ? backend::T.float_neg_inf : backend::T.float_inf);
  struct Limits {
    const char* name;
    long long lo, hi;
  };
  static const Limits limits[] = {{"int8", -128, 127},
                                  {"int16", -32768, 32767},
                                  {"int32", -2147483648LL, 2147483647LL},
                                  {"int64", INT64_MIN, INT64_MAX},
                                  {"uint8", 0, 255},
                                  {"bool", 0, 1}};
  for (const auto& l : limits)
    if (PyUnicode_CompareWithASCIIString(name, l.name) == 0) {
      if (l.name[0] == 'b') return PyBool_FromLong(want_max_neutral_low ? 0 : 1);
      return PyLong_FromLongLong(want_max_neutral_low ? l.lo : l.hi);
    }
  PyErr_Format(PyExc_TypeError, "%s: no neutral element for dtype %U", caller, name);
  return nullptr;
}

namespace {

enum class Reduce { kSum, kMean, kMax, kMin, kLogSumExp, kAny, kAll, kArgMax, kArgMin };

PyObject* dim_arg(const int* axes, int n) {
  if (n == 1) return PyLong_FromLong(axes[0]);
  PyObject* t = PyTuple_New(n);
  if (!t) return nullptr;
  for (int j = 0; j < n; ++j) PyTuple_SET_ITEM(t, j, PyLong_FromLong(axes[j]));
  return t;
}

/// Divisor of a masked mean, laid out for the output: the lengths where one dim is masked and its
/// lengths stay in the output (the common case, cached on the dim), else the mask count.
PyObject* mean_count(TensorObject* x, PyObject* out_dims, int n_out, const int* mask_axes,
                     int n_mask, PyObject* mask, PyObject* dim_arg_obj, const bool* reduced,
                     const char* caller) {
  if (n_mask == 1 && reduced[mask_axes[0]]) {
    /* The dim and all its lengths' dims are reduced (e.g. statistics over batch and time): the count
       is the host total of the lengths times the other reduced sizes, a Python number. */
    DimObject* d = as_dim(PyTuple_GET_ITEM(x->dims, mask_axes[0]));
    PyObject* lengths = dim_dyn_size(d);
    if (!lengths) return nullptr;  // masked dims have lengths: NULL means their derivation failed
    PyObject* ldims = as_tensor(lengths)->dims;
    bool all_reduced = true;
    Py_ssize_t factor = 1;
    for (int i = 0; i < tensor_ndim(x); ++i) {
      PyObject* xd = PyTuple_GET_ITEM(x->dims, i);
      bool is_lengths_dim = dims_index(ldims, xd) >= 0;
      if (is_lengths_dim && !reduced[i]) all_reduced = false;
      if (reduced[i] && i != mask_axes[0] && !is_lengths_dim) factor *= x->sizes[i];
    }
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(ldims); ++j)
      if (dims_index(x->dims, PyTuple_GET_ITEM(ldims, j)) < 0) all_reduced = false;
    if (all_reduced) {
      Py_ssize_t total = dim_total_size(d);
      if (total == -2) return nullptr;
      Py_ssize_t n = total * factor;
      return PyFloat_FromDouble(static_cast<double>(n > 0 ? n : 1));
    }
  }
  if (n_mask == 1 && reduced[mask_axes[0]]) {
    DimObject* d = as_dim(PyTuple_GET_ITEM(x->dims, mask_axes[0]));
    signed char pos[kMaxDims + 1];
    int k;
    PyObject* ldims = as_tensor(dim_dyn_size(d))->dims;  // known to exist: checked just above
    bool lengths_kept = true;  // checked here: the failing lengths_positions would format an error
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(ldims); ++j)
      lengths_kept = lengths_kept && dims_index(out_dims, PyTuple_GET_ITEM(ldims, j)) >= 0;
    if (lengths_kept && lengths_positions(d, out_dims, false, pos, &k, caller)) {
      Ref device(PyObject_GetAttr(x->raw, backend::T.s_device));
      if (!device) return nullptr;
      Ref count(dim_cached_raw(d, MaskKind::kCount, pos, n_out, -1, device.get()));
      if (!count) return nullptr;
      // Every frame of the other reduced dims counts: multiply by their sizes.
      Py_ssize_t factor = 1;
      for (int i = 0; i < tensor_ndim(x); ++i)
        if (reduced[i] && i != mask_axes[0]) factor *= x->sizes[i];
      if (factor == 1) return count.release();
      Ref f(PyLong_FromSsize_t(factor));
      if (!f) return nullptr;
      return PyNumber_Multiply(count.get(), f.get());
    }
    if (PyErr_Occurred()) return nullptr;
  }
  // General case: count valid frames over the reduced axes of the broadcast mask.
  Ref count(backend::call2(backend::T.sum, mask, dim_arg_obj));
  if (!count) return nullptr;
  Ref mask_shape(PyObject_GetAttr(mask, backend::T.s_shape));
  if (!mask_shape) return nullptr;
  Py_ssize_t factor = 1;
  for (int i = 0; i < tensor_ndim(x); ++i) {
    if (!reduced[i]) continue;
    Py_ssize_t ms = PyLong_AsSsize_t(PyTuple_GET_ITEM(mask_shape.get(), i));
    if (ms == 1) factor *= x->sizes[i];
  }
  if (factor != 1) {
    Ref f(PyLong_FromSsize_t(factor));
    count = Ref(PyNumber_Multiply(count.get(), f.get()));
    if (!count) return nullptr;
  }
  Ref one(PyLong_FromLong(1));
  return backend::call2(backend::T.clamp_min, count.get(), one.get());
}

/// Max/min (or arg index 0) over axes of which one is empty: sum(dim) + neutral value.
PyObject* empty_extreme(PyObject* raw, PyObject* dim, bool max, bool is_arg, const char* caller) {
  // An index has no gradient: sum a detached raw (autograd refuses an int64 result).
  Ref source(is_arg ? PyObject_CallMethod(raw, "detach", nullptr) : Py_NewRef(raw));
  if (!source) return nullptr;
  Ref sum_fn(PyObject_GetAttrString(source.get(), "sum"));
  if (!sum_fn) return nullptr;
  Ref dtype_name(PyUnicode_FromString("int64"));
  if (!dtype_name) return nullptr;
  PyObject* dtype = is_arg ? backend::dtype_from(dtype_name.get(), "dimtorch.reduce")
                           : PyObject_GetAttr(raw, backend::T.s_dtype);
  if (!dtype) return nullptr;
  Ref dtype_ref = is_arg ? Ref::borrow(dtype) : Ref(dtype);
  Ref kwargs(Py_BuildValue("{sO}", "dtype", dtype));
  Ref args(PyTuple_Pack(1, dim));
  if (!kwargs || !args) return nullptr;
  Ref zeros(PyObject_Call(sum_fn.get(), args.get(), kwargs.get()));
  if (!zeros || is_arg) return zeros.release();
  Ref fill(extreme_fill(raw, max, caller));
  if (!fill) return nullptr;
  return PyNumber_Add(zeros.get(), fill.get());
}

/// sum / count in the sum's dtype (the cached count is float32).
PyObject* divide_by_count(PyObject* sum, PyObject* count) {
  PyObject* dtype = backend::raw_dtype_name(sum);
  if (!dtype) return nullptr;
  Ref c = Ref::borrow(count);
  if (backend::is_raw(count) && PyUnicode_CompareWithASCIIString(dtype, "float32") != 0 &&
      backend::is_floating_dtype_name(dtype)) {
    Ref torch_dtype(PyObject_GetAttr(sum, backend::T.s_dtype));
    if (!torch_dtype) return nullptr;
    c = Ref(backend::call2(backend::T.to, count, torch_dtype.get()));
    if (!c) return nullptr;
  }
  return PyNumber_TrueDivide(sum, c.get());
}

/// What a reduction over named dims needs from its (x, axis, use_mask) arguments.
struct Reduction {
  TensorObject* x = nullptr;
  int axes[kMaxDims];
  int n_axes = 0;
  bool reduced[kMaxDims] = {};
  int mask_axes[kMaxDims];  // x's axes whose padding the reduction must mask
  int n_mask = 0;
  Ref out_dims;             // x's dims without the reduced ones
  Py_ssize_t out_sizes[kMaxDims];
  Ref dim;                  // torch's dim argument: an int, or a tuple of ints
  PyObject* feature = nullptr;  // x's feature dim where the output keeps it
};

/// Parses (x, axis, use_mask=True) and fills `r`; false with a Python error naming `caller`.
bool prepare_reduction(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                       const char* caller, Reduction* r) {
  static const char* const names[] = {"x", "axis", "use_mask"};
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 3, 2, v, caller, 1)) return false;
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw) {
    PyErr_Format(PyExc_TypeError, "%s: x must be a dimtorch.Tensor, got %.80s", caller,
                 Py_TYPE(v[0])->tp_name);
    return false;
  }
  TensorObject* x = r->x = as_tensor(v[0]);
  int use_mask = flag_arg(v[2], 1, caller, "use_mask");
  if (use_mask < 0 || !axes_arg(x, v[1], r->axes, &r->n_axes, caller)) return false;
  for (int j = 0; j < r->n_axes; ++j) r->reduced[r->axes[j]] = true;
  if (use_mask)
    for (int i = 0; i < tensor_ndim(x); ++i)
      if (masked_by_reduction(x, i, r->reduced)) r->mask_axes[r->n_mask++] = i;
  r->out_dims = Ref(dims_without(x, r->reduced, r->out_sizes));
  if (!r->out_dims) return false;
  r->dim = Ref(dim_arg(r->axes, r->n_axes));
  if (!r->dim) return false;
  if (x->feature_dim && dims_index(r->out_dims.get(), x->feature_dim) >= 0) r->feature = x->feature_dim;
  return true;
}

PyObject* reduce(Reduce mode, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                 const char* caller) {
  Reduction r;
  if (!prepare_reduction(args, nargs, kwnames, caller, &r)) return nullptr;
  TensorObject* x = r.x;
  const int* axes = r.axes;
  const int n_axes = r.n_axes;
  const bool* reduced = r.reduced;
  const int* mask_axes = r.mask_axes;
  const int n_mask = r.n_mask;
  Ref& out_dims = r.out_dims;
  Py_ssize_t* out_sizes = r.out_sizes;
  Ref& dim = r.dim;
  bool is_arg = mode == Reduce::kArgMax || mode == Reduce::kArgMin;
  if (is_arg && n_axes != 1) {
    PyErr_Format(PyExc_ValueError, "%s: axis must be a single dim", caller);
    return nullptr;
  }

  Ref fill;
  switch (mode) {
    case Reduce::kSum: case Reduce::kMean: fill = Ref(PyLong_FromLong(0)); break;
    case Reduce::kAny: fill = Ref::borrow(Py_False); break;
    case Reduce::kAll: fill = Ref::borrow(Py_True); break;
    case Reduce::kMax: case Reduce::kArgMax: case Reduce::kLogSumExp:
      fill = Ref(n_mask ? extreme_fill(x->raw, true, caller) : Py_NewRef(Py_None)); break;
    case Reduce::kMin: case Reduce::kArgMin:
      fill = Ref(n_mask ? extreme_fill(x->raw, false, caller) : Py_NewRef(Py_None)); break;
  }
  if (!fill) return nullptr;
  PyObject* mask = nullptr;
  Ref raw(masked_raw(x, mask_axes, n_mask, fill.get(), mode == Reduce::kMean ? &mask : nullptr,
                     caller));
  Ref mask_ref(mask);
  if (!raw) return nullptr;

  using backend::T;
  Ref out;
  bool empty_axis = false;
  for (int j = 0; j < n_axes; ++j) empty_axis |= x->sizes[axes[j]] == 0;
  if (empty_axis && (mode == Reduce::kMax || mode == Reduce::kMin || is_arg)) {
    /* torch's amax/argmax refuse an empty axis (e.g. a batch whose sequences all have length 0);
       give what a length-0 sequence gives inside a batch: the neutral value (index 0), still
       connected to x for autograd. */
    out = Ref(empty_extreme(raw.get(), dim.get(), mode == Reduce::kMax, is_arg, caller));
  } else switch (mode) {
    case Reduce::kSum: out = Ref(backend::call2(T.sum, raw.get(), dim.get())); break;
    case Reduce::kMean:
      if (!n_mask) {
        out = Ref(backend::call2(T.mean, raw.get(), dim.get()));
      } else {
        Ref sum(backend::call2(T.sum, raw.get(), dim.get()));
        if (!sum) return nullptr;
        Ref count(mean_count(x, out_dims.get(), static_cast<int>(PyTuple_GET_SIZE(out_dims.get())),
                             mask_axes, n_mask, mask, dim.get(), reduced, caller));
        if (!count) return nullptr;
        out = Ref(divide_by_count(sum.get(), count.get()));
      }
      break;
    case Reduce::kMax: out = Ref(backend::call2(T.amax, raw.get(), dim.get())); break;
    case Reduce::kMin: out = Ref(backend::call2(T.amin, raw.get(), dim.get())); break;
    case Reduce::kLogSumExp: out = Ref(backend::call2(T.logsumexp, raw.get(), dim.get())); break;
    case Reduce::kAny: out = Ref(backend::call2(T.any, raw.get(), dim.get())); break;
    case Reduce::kAll: out = Ref(backend::call2(T.all, raw.get(), dim.get())); break;
    case Reduce::kArgMax: out = Ref(backend::call2(T.argmax, raw.get(), dim.get())); break;
    case Reduce::kArgMin: out = Ref(backend::call2(T.argmin, raw.get(), dim.get())); break;
  }
  if (!out) return nullptr;
  PyObject* sparse = is_arg ? PyTuple_GET_ITEM(x->dims, axes[0])
                     : (mode == Reduce::kMax || mode == Reduce::kMin) ? x->sparse_dim
                                                                      : nullptr;
  return tensor_make(out.release(), out_dims.get(), out_sizes, sparse, r.feature);
}

}  // namespace

PyObject* moments_impl(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                       PyObject** count_out, PyObject** centered_out, const char* caller) {
  Reduction r;
  if (!prepare_reduction(args, nargs, kwnames, caller, &r)) return nullptr;
  TensorObject* x = r.x;
  const bool* reduced = r.reduced;
  const int* mask_axes = r.mask_axes;
  const int n_mask = r.n_mask;
  Ref& out_dims = r.out_dims;
  Py_ssize_t* out_sizes = r.out_sizes;
  Ref& dim = r.dim;
  PyObject* feature = r.feature;
  using backend::T;
  Ref mean_raw, var_raw;
  if (!n_mask) {  // one fused torch call
    static PyObject* kw_correction = Py_BuildValue("(s)", "correction");
    if (!kw_correction) return nullptr;
    PyObject* call_args[3] = {x->raw, dim.get(), T.zero};
    Ref var_mean(PyObject_Vectorcall(T.var_mean, call_args, 2, kw_correction));
    if (!var_mean || !PyTuple_Check(var_mean.get()) || PyTuple_GET_SIZE(var_mean.get()) != 2) return nullptr;
    var_raw = Ref::borrow(PyTuple_GET_ITEM(var_mean.get(), 0));
    mean_raw = Ref::borrow(PyTuple_GET_ITEM(var_mean.get(), 1));
  } else {
    /* Padding is zeroed before the mean, so that its deviation from the mean is finite and no NaN
       reaches the gradients; the squared deviations are masked again for the variance. */
    PyObject* mask = nullptr;
    Ref xz(masked_raw(x, mask_axes, n_mask, T.zero, &mask, caller));
    Ref mask_ref(mask);
    if (!xz) return nullptr;
    Ref sum(backend::call2(T.sum, xz.get(), dim.get()));
    if (!sum) return nullptr;
    Ref count(mean_count(x, out_dims.get(), static_cast<int>(PyTuple_GET_SIZE(out_dims.get())),
                         mask_axes, n_mask, mask, dim.get(), reduced, caller));
    if (!count) return nullptr;
    mean_raw = Ref(divide_by_count(sum.get(), count.get()));
    if (!mean_raw) return nullptr;
    // xz - mean, with the mean aligned to x by the elementwise plans (a view only where needed).
    Ref xz_t(tensor_make(Py_NewRef(xz.get()), x->dims, x->sizes, nullptr, nullptr));
    Ref mean_t(tensor_make(Py_NewRef(mean_raw.get()), out_dims.get(), out_sizes, nullptr, nullptr));
    if (!xz_t || !mean_t) return nullptr;
    Ref dev(binary_op(Bin::kSub, xz_t.get(), mean_t.get(), false, caller));
    if (!dev) return nullptr;
    Ref sq(backend::call1(T.unary[backend::kSquare], as_tensor(dev.get())->raw));
    if (!sq) return nullptr;
    Ref sq_masked(backend::call3(T.where, mask, sq.get(), T.zero));
    if (!sq_masked) return nullptr;
    Ref sq_sum(backend::call2(T.sum, sq_masked.get(), dim.get()));
    if (!sq_sum) return nullptr;
    var_raw = Ref(divide_by_count(sq_sum.get(), count.get()));
    if (!var_raw) return nullptr;
    if (count_out) {
      *count_out = count.release();
      *centered_out = dev.release();
    }
  }
  Ref mean_t(tensor_make(mean_raw.release(), out_dims.get(), out_sizes, nullptr, feature));
  if (!mean_t) return nullptr;
  Ref var_t(tensor_make(var_raw.release(), out_dims.get(), out_sizes, nullptr, feature));
  if (!var_t) return nullptr;
  return PyTuple_Pack(2, mean_t.get(), var_t.get());
}

namespace {

PyObject* f_moments(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return moments_impl(args, nargs, kwnames, nullptr, nullptr, "dimtorch.moments()");
}

#define DIMTORCH_REDUCE(fn, mode, pyname)                                                   \
  PyObject* fn(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {     \
    return reduce(mode, args, nargs, kwnames, "dimtorch." pyname "()");                     \
  }
DIMTORCH_REDUCE(f_sum, Reduce::kSum, "reduce_sum")
DIMTORCH_REDUCE(f_mean, Reduce::kMean, "reduce_mean")
DIMTORCH_REDUCE(f_max, Reduce::kMax, "reduce_max")
DIMTORCH_REDUCE(f_min, Reduce::kMin, "reduce_min")
DIMTORCH_REDUCE(f_logsumexp, Reduce::kLogSumExp, "reduce_logsumexp")
DIMTORCH_REDUCE(f_any, Reduce::kAny, "reduce_any")
DIMTORCH_REDUCE(f_all, Reduce::kAll, "reduce_all")
DIMTORCH_REDUCE(f_argmax, Reduce::kArgMax, "reduce_argmax")
DIMTORCH_REDUCE(f_argmin, Reduce::kArgMin, "reduce_argmin")
#undef DIMTORCH_REDUCE

DIMTORCH_PYTHON_FALLBACK(reduce_logmeanexp_fallback, "reduce_logmeanexp")

/// log(clamp_min(lengths, 1)) of dynamic dim `d` laid out for its logsumexp over `n_out` dims (its
/// lengths' dims at pos), in `dtype`: the definition's torch.log of the int lengths (in torch's default
/// dtype), cast to dtype when that differs. Cached on the dim per (device, dtype, default dtype, layout).
PyObject* log_count(DimObject* d, const signed char* pos, int k, int n_out, PyObject* device, PyObject* dtype) {
  using backend::T;
  static PyObject* tag = nullptr;
  if (!fast_path::interned(&tag, "logmeanexp_log_count")) return nullptr;
  Ref default_dtype(PyObject_CallNoArgs(T.get_default_dtype));
  if (!default_dtype) return nullptr;
  Ref key(PyTuple_New(5 + k));
  if (!key) return nullptr;
  PyTuple_SET_ITEM(key.get(), 0, Py_NewRef(tag));
  PyTuple_SET_ITEM(key.get(), 1, Py_NewRef(device));
  PyTuple_SET_ITEM(key.get(), 2, Py_NewRef(dtype));
  PyTuple_SET_ITEM(key.get(), 3, default_dtype.release());
  for (int j = -1; j < k; ++j) {
    PyObject* v = PyLong_FromLong(j < 0 ? n_out : pos[j]);
    if (!v) return nullptr;
    PyTuple_SET_ITEM(key.get(), 5 + j, v);
  }
  return fast_path::cached_on_dim(d, key.get(), [&]() -> PyObject* {
    Ref n(dim_cached_raw(d, MaskKind::kLengths, pos, n_out, 0, device));
    if (!n) return nullptr;
    Ref one(PyLong_FromLong(1));
    if (!one) return nullptr;
    Ref clamped(backend::call2(T.clamp_min, n.get(), one.get()));
    if (!clamped) return nullptr;
    Ref logs(backend::call1(T.unary[backend::kLog], clamped.get()));
    if (!logs) return nullptr;
    Ref logs_dtype(PyObject_GetAttr(logs.get(), T.s_dtype));
    if (!logs_dtype) return nullptr;
    if (logs_dtype.get() == dtype) return logs.release();
    return backend::call2(T.to, logs.get(), dtype);
  });
}

/// reduce_logmeanexp(x, /, axis, use_mask=True), the common call (the definition's own shortcut): one Dim
/// of x, static or with lengths over dims that stay in the output, and no other dim of x whose lengths vary
/// along it: the masked logsumexp (reduce_logsumexp's code) minus the log of each sequence's length, cached
/// on the dim (the definition computes it per call), or minus log(size) for a static dim. Everything else to
/// the definition.
PyObject* f_logmeanexp(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "axis", "use_mask"};
  const char* caller = "dimtorch.reduce_logmeanexp()";
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 3, 2, v, caller, 1)) {
    PyErr_Clear();
    return reduce_logmeanexp_fallback(args, nargs, kwnames);
  }
  if (!Py_IS_TYPE(v[0], &TensorType) || !is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(v[1]) ||
      (v[2] && v[2] != Py_True))
    return reduce_logmeanexp_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  PyObject* axis = v[1];
  int a = dims_index(x->dims, axis);
  if (a < 0) return reduce_logmeanexp_fallback(args, nargs, kwnames);
  for (Py_ssize_t i = 0, nd = tensor_ndim(x); i < nd; ++i) {
    DimObject* d = as_dim(PyTuple_GET_ITEM(x->dims, i));
    if (i == a || !dim_has_lengths(d)) continue;
    PyObject* lengths = dim_dyn_size(d);
    if (!lengths) {
      PyErr_Clear();
      return reduce_logmeanexp_fallback(args, nargs, kwnames);
    }
    if (dims_index(as_tensor(lengths)->dims, axis) >= 0) return reduce_logmeanexp_fallback(args, nargs, kwnames);
  }
  PyObject* lengths = nullptr;
  if (dim_has_lengths(as_dim(axis))) {
    lengths = dim_dyn_size(as_dim(axis));
    if (!lengths) {
      PyErr_Clear();
      return reduce_logmeanexp_fallback(args, nargs, kwnames);
    }
    // The lengths' dims must stay in the output (not the axis itself, and in x).
    PyObject* ldims = as_tensor(lengths)->dims;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(ldims); ++j) {
      int p = dims_index(x->dims, PyTuple_GET_ITEM(ldims, j));
      if (p < 0 || p == a) return reduce_logmeanexp_fallback(args, nargs, kwnames);
    }
  }
  PyObject* lse_args[2] = {v[0], axis};
  Ref total(reduce(Reduce::kLogSumExp, lse_args, 2, nullptr, caller));
  if (!total) {  // (e.g. an int x: the definition raises, in its own words)
    PyErr_Clear();
    return reduce_logmeanexp_fallback(args, nargs, kwnames);
  }
  TensorObject* t = as_tensor(total.get());
  Ref out;
  if (!lengths) {
    Py_ssize_t n = x->sizes[a];
    Ref log_n(PyFloat_FromDouble(std::log(static_cast<double>(n > 1 ? n : 1))));
    if (!log_n) return nullptr;
    out = Ref(PyNumber_Subtract(t->raw, log_n.get()));
  } else {
    PyObject* ldims = as_tensor(lengths)->dims;
    int k = static_cast<int>(PyTuple_GET_SIZE(ldims));
    signed char pos[kMaxDims];
    for (int j = 0; j < k; ++j) pos[j] = static_cast<signed char>(dims_index(t->dims, PyTuple_GET_ITEM(ldims, j)));
    Ref device(PyObject_GetAttr(x->raw, backend::T.s_device));
    if (!device) return nullptr;
    Ref dtype(PyObject_GetAttr(t->raw, backend::T.s_dtype));
    if (!dtype) return nullptr;
    Ref log_n(log_count(as_dim(axis), pos, k, static_cast<int>(tensor_ndim(t)), device.get(), dtype.get()));
    if (!log_n) return nullptr;
    out = Ref(PyNumber_Subtract(t->raw, log_n.get()));
  }
  if (!out) return nullptr;
  return tensor_make(out.release(), t->dims, t->sizes, nullptr, t->feature_dim);
}

PyObject* softmax_like(bool log, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                       const char* caller) {
  static const char* const names[] = {"x", "axis", "use_mask"};
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 3, 2, v, caller, 1)) return nullptr;
  if (!need_tensor(v[0], "x", caller)) return nullptr;
  TensorObject* x = as_tensor(v[0]);
  if (!is_dim(v[1])) {
    PyErr_Format(PyExc_TypeError, "%s: axis must be a Dim, got %.80s", caller, Py_TYPE(v[1])->tp_name);
    return nullptr;
  }
  int axes[1], n_axes;
  if (!axes_arg(x, v[1], axes, &n_axes, caller)) return nullptr;
  int k = axes[0];
  if (x->sizes[k] == 0) {
    PyErr_Format(PyExc_ValueError, "%s: dim %s has size 0 in x (dims: %s); softmax over nothing is "
                 "undefined", caller, describe_dim(v[1]).c_str(),
                 describe_dims(x->dims, x->sizes).c_str());
    return nullptr;
  }
  int use_mask = flag_arg(v[2], 1, caller, "use_mask");
  if (use_mask < 0) return nullptr;
  bool reduced[kMaxDims] = {};
  reduced[k] = true;
  int mask_axes[kMaxDims], n_mask = 0;
  bool any_empty = false;
  if (use_mask)
    for (int i = 0; i < tensor_ndim(x); ++i)
      if (masked_by_reduction(x, i, reduced)) {
        mask_axes[n_mask++] = i;
        Py_ssize_t lo = dim_min_size(as_dim(PyTuple_GET_ITEM(x->dims, i)));
        if (lo == -2) return nullptr;
        /* A row along the axis can lack valid frames where a sequence is empty, or where the
           masked dim is another one (softmax over batch: frames beyond the longest sequence). */
        if (lo == 0 || i != k) any_empty = true;
      }
  PyObject* mask = nullptr;
  Ref raw(masked_raw(x, mask_axes, n_mask, backend::T.float_neg_inf, any_empty ? &mask : nullptr,
                     caller));
  Ref mask_ref(mask);
  if (!raw) return nullptr;
  Ref axis(PyLong_FromLong(k));
  Ref out(backend::call2(log ? backend::T.log_softmax : backend::T.softmax, raw.get(), axis.get()));
  if (!out) return nullptr;
  if (mask) {
    /* A row without valid frames (a sequence of length 0) has softmax NaN. Its frames are all
       padding, which gets probability 0 (log: -inf); the where also stops the NaN in the backward
       pass. Rows with valid frames pass as they are, as when no row is empty (so that a sequence
       gets the same gradients in any batch). */
    Ref row_valid(PyObject_CallMethod(mask, "any", "iO", k, Py_True));
    if (!row_valid) return nullptr;
    PyObject* fill = log ? backend::T.float_neg_inf : nullptr;
    Ref zero(PyLong_FromLong(0));
    out = Ref(backend::call3(backend::T.where, row_valid.get(), out.get(), fill ? fill : zero.get()));
    if (!out) return nullptr;
  }
  return tensor_make(out.release(), x->dims, x->sizes, nullptr, x->feature_dim);
}

PyObject* f_softmax(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return softmax_like(false, args, nargs, kwnames, "dimtorch.softmax()");
}
PyObject* f_log_softmax(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return softmax_like(true, args, nargs, kwnames, "dimtorch.log_softmax()");
}

#define FASTCALL(fn) DIMTORCH_OP(fn), \
                     METH_FASTCALL | METH_KEYWORDS
PyMethodDef kFunctions[] = {
    {"moments", FASTCALL(f_moments),
     "moments(x, /, axis, use_mask=True) -> (mean, variance) over the dim(s) `axis`; the variance is "
     "biased (as in layer and batch norm); padding of dynamic dims is excluded and gets no "
     "gradient; an empty sequence gives 0 and 0."},
    {"reduce_sum", FASTCALL(f_sum),
     "reduce_sum(x, /, axis, use_mask=True): sum over the dim(s) `axis`; padding counts as 0."},
    {"reduce_mean", FASTCALL(f_mean),
     "reduce_mean(x, /, axis, use_mask=True): mean over `axis`, dividing by the lengths of dynamic "
     "dims (an empty sequence gives 0)."},
    {"reduce_max", FASTCALL(f_max), "reduce_max(x, /, axis, use_mask=True): max; padding never wins."},
    {"reduce_min", FASTCALL(f_min), "reduce_min(x, /, axis, use_mask=True): min; padding never wins."},
    {"reduce_logsumexp", FASTCALL(f_logsumexp),
     "reduce_logsumexp(x, /, axis, use_mask=True): log-sum-exp; padding ignored."},
    {"reduce_logmeanexp", FASTCALL(f_logmeanexp),
     "reduce_logmeanexp(x, /, axis, use_mask=True): log of the mean of exp over `axis` (each sequence's own "
     "frames): see dimtorch.ops.reduce.reduce_logmeanexp; the log of the lengths cached on the dim here."},
    {"reduce_any", FASTCALL(f_any), "reduce_any(x, /, axis, use_mask=True): bool any; padding False."},
    {"reduce_all", FASTCALL(f_all), "reduce_all(x, /, axis, use_mask=True): bool all; padding True."},
    {"reduce_argmax", FASTCALL(f_argmax),
     "reduce_argmax(x, /, axis, use_mask=True): int64 index along `axis` (its sparse_dim); never "
     "padding."},
    {"reduce_argmin", FASTCALL(f_argmin),
     "reduce_argmin(x, /, axis, use_mask=True): int64 index along `axis`; never padding."},
    {"softmax", FASTCALL(f_softmax),
     "softmax(x, /, axis, use_mask=True): softmax over the dim `axis`; padding gets probability 0."},
    {"log_softmax", FASTCALL(f_log_softmax),
     "log_softmax(x, /, axis, use_mask=True): log-softmax over `axis`; padding gets -inf."},
    {nullptr}};
#undef FASTCALL

}  // namespace

bool export_ops_reduce(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
