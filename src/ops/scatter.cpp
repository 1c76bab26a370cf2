// Fast path of scatter (definition: python/dimtorch/ops/scatter.py) along one dim (one
// scatter_add_, or one scatter_reduce_ for max, min and mean; logsumexp, logmeanexp and argmax by the
// definition's steps). Every other case goes to the Python definition (python_fallback.h).
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
#include <initializer_list>

namespace dimtorch {

namespace {

using namespace fast_path;

// ---- scatter ----------------------------------------------------------------------------------

DIMTORCH_PYTHON_FALLBACK(scatter_fallback, "scatter")
DIMTORCH_PYTHON_FALLBACK(scatter_count_fallback, "scatter_count")

/// The reduction of a common call: sum (scatter_add_), or max, min, mean (scatter_reduce_ into a tensor of
/// the fill value, include_self=False, as the definition's _reduce_along); logsumexp, logmeanexp and argmax
/// as the definition's _reduce_along makes them from the counts and the max per position (scatter_top_modes).
enum class Reduce { kSum, kMax, kMin, kMean, kLogSumExp, kLogMeanExp, kArgMax };

/// args[0].<name>(args[1:]...) through vectorcall, the method name interned in `*cache`. New reference.
PyObject* method(PyObject** cache, const char* name, std::initializer_list<PyObject*> args) {
  if (!fast_path::interned(cache, name)) return nullptr;
  PyObject* stack[4];
  size_t n = 0;
  for (PyObject* a : args) stack[n++] = a;
  return PyObject_VectorcallMethod(*cache, stack, n, nullptr);
}

/// Keyword names tuple ("dtype", "device") etc., made once. Borrowed.
PyObject* kwnames_of(PyObject** cache, std::initializer_list<const char*> names) {
  if (*cache) return *cache;
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(names.size()));
  if (!t) return nullptr;
  Py_ssize_t i = 0;
  for (const char* n : names) {
    PyObject* u = PyUnicode_InternFromString(n);
    if (!u) {
      Py_DECREF(t);
      return nullptr;
    }
    PyTuple_SET_ITEM(t, i++, u);
  }
  return *cache = t;
}

/// logsumexp, logmeanexp and argmax of `source` (x's raw, its padding already -inf) along axis a into
/// `rows` rows at `index` (ir expanded as source; ir itself over `ir_sizes`): the definition's
/// _reduce_along, step by step (the same torch calls in the same order: the same values and gradients).
/// `fill`: the value of positions nothing reaches, NULL for the mode's default. New reference.
PyObject* scatter_top_modes(PyObject* source, PyObject* ir, const Py_ssize_t* ir_sizes, PyObject* index, int a,
                            Py_ssize_t nd, const Py_ssize_t* out_sizes, Py_ssize_t nk, Reduce reduce,
                            PyObject* fill) {
  using backend::T;
  static PyObject *s_expand = nullptr, *s_isfinite = nullptr, *amax = nullptr, *amin = nullptr,
                  *k_dtype_device = nullptr, *k_device = nullptr, *k_include_self = nullptr;
  if (!fast_path::interned(&amax, "amax") || !fast_path::interned(&amin, "amin") ||
      !kwnames_of(&k_dtype_device, {"dtype", "device"}) || !kwnames_of(&k_device, {"device"}) ||
      !kwnames_of(&k_include_self, {"include_self"}))
    return nullptr;
  Ref device(PyObject_GetAttr(source, T.s_device));
  Ref a_obj(PyLong_FromLong(a));
  Ref count_shape(size_tuple(ir_sizes, nd));
  Ref out_shape(size_tuple(out_sizes, nd));
  if (!device || !a_obj || !count_shape || !out_shape) return nullptr;
  // counts = zeros(count_shape, int64).scatter_add_(a, ir, ones((), int64).expand(ir.shape)); filled = counts > 0
  PyObject* zeros_call[3] = {count_shape.get(), T.int64, device.get()};
  Ref counts(PyObject_Vectorcall(T.zeros, zeros_call, 1, k_dtype_device));
  Ref empty_shape(PyTuple_New(0));
  if (!counts || !empty_shape) return nullptr;
  PyObject* ones_call[3] = {empty_shape.get(), T.int64, device.get()};
  Ref one(PyObject_Vectorcall(T.ones, ones_call, 1, k_dtype_device));
  if (!one) return nullptr;
  Ref ir_shape(PyObject_GetAttr(ir, T.s_shape));
  if (!ir_shape) return nullptr;
  Ref ones(method(&s_expand, "expand", {one.get(), ir_shape.get()}));
  if (!ones) return nullptr;
  {
    PyObject* call[4] = {counts.get(), a_obj.get(), ir, ones.get()};
    Ref r(PyObject_Vectorcall(T.scatter_add_, call, 4, nullptr));
    if (!r) return nullptr;
  }
  Ref filled(PyObject_RichCompare(counts.get(), T.zero, Py_GT));
  if (!filled) return nullptr;
  // top = new_full(out_shape, -inf).scatter_reduce_(a, index, source, "amax", include_self=False), no gradient
  Ref detached(backend::call1(T.detach, source));
  Ref top(backend::call3(T.new_full, source, out_shape.get(), T.float_neg_inf));
  if (!detached || !top) return nullptr;
  {
    PyObject* call[6] = {top.get(), a_obj.get(), index, detached.get(), amax, Py_False};
    Ref r(PyObject_Vectorcall(T.scatter_reduce_, call, 5, k_include_self));
    if (!r) return nullptr;
  }
  Ref raw;
  if (reduce == Reduce::kArgMax) {
    Ref n(PyLong_FromSsize_t(nk));
    if (!n) return nullptr;
    PyObject* arange_call[2] = {n.get(), device.get()};
    Ref positions(PyObject_Vectorcall(T.arange, arange_call, 1, k_device));
    if (!positions) return nullptr;
    Py_ssize_t view_sizes[kMaxDims];
    for (Py_ssize_t i = 0; i < nd; ++i) view_sizes[i] = i == a ? nk : 1;
    Ref view_shape(size_tuple(view_sizes, nd));
    if (!view_shape) return nullptr;
    positions = Ref(backend::call2(T.view, positions.get(), view_shape.get()));
    if (!positions) return nullptr;
    Ref top_at(backend::call3(T.gather, top.get(), a_obj.get(), index));
    if (!top_at) return nullptr;
    Ref is_top(PyObject_RichCompare(source, top_at.get(), Py_EQ));
    if (!is_top) return nullptr;
    Ref candidates(backend::call3(T.where, is_top.get(), positions.get(), n.get()));
    if (!candidates) return nullptr;
    PyObject* full_call[4] = {out_shape.get(), n.get(), T.int64, device.get()};
    Ref first(PyObject_Vectorcall(T.full, full_call, 2, k_dtype_device));
    if (!first) return nullptr;
    {
      PyObject* call[5] = {first.get(), a_obj.get(), index, candidates.get(), amin};
      Ref r(PyObject_Vectorcall(T.scatter_reduce_, call, 5, nullptr));
      if (!r) return nullptr;
    }
    Ref below(PyObject_RichCompare(first.get(), n.get(), Py_LT));
    if (!below) return nullptr;
    Ref found(PyNumber_And(filled.get(), below.get()));
    if (!found) return nullptr;
    Ref minus_one(PyLong_FromLong(-1));
    if (!minus_one) return nullptr;
    return backend::call3(T.where, found.get(), first.get(), fill ? fill : minus_one.get());
  }
  // shift = where(isfinite(top), top, 0.0); total = new_zeros(out_shape).scatter_add_(a, index, exp(source - shift
  // gathered)); raw = log(total) + shift (- log(counts.clamp(min=1).to(dtype)) for logmeanexp)
  static PyObject* zero_float = nullptr;
  if (!zero_float && !(zero_float = PyFloat_FromDouble(0.0))) return nullptr;
  Ref finite(method(&s_isfinite, "isfinite", {top.get()}));
  if (!finite) return nullptr;
  Ref shift(backend::call3(T.where, finite.get(), top.get(), zero_float));
  if (!shift) return nullptr;
  Ref shift_at(backend::call3(T.gather, shift.get(), a_obj.get(), index));
  if (!shift_at) return nullptr;
  Ref centered(PyNumber_Subtract(source, shift_at.get()));
  if (!centered) return nullptr;
  Ref exps(backend::call1(T.unary[backend::kExp], centered.get()));
  Ref total(backend::call2(T.new_zeros, source, out_shape.get()));
  if (!exps || !total) return nullptr;
  {
    PyObject* call[4] = {total.get(), a_obj.get(), index, exps.get()};
    Ref r(PyObject_Vectorcall(T.scatter_add_, call, 4, nullptr));
    if (!r) return nullptr;
  }
  Ref logs(backend::call1(T.unary[backend::kLog], total.get()));
  if (!logs) return nullptr;
  raw = Ref(PyNumber_Add(logs.get(), shift.get()));
  if (!raw) return nullptr;
  if (reduce == Reduce::kLogMeanExp) {
    Ref one_int(PyLong_FromLong(1));
    if (!one_int) return nullptr;
    Ref clamped(backend::call2(T.clamp_min, counts.get(), one_int.get()));
    if (!clamped) return nullptr;
    Ref dtype(PyObject_GetAttr(raw.get(), T.s_dtype));
    if (!dtype) return nullptr;
    Ref as_float(backend::call2(T.to, clamped.get(), dtype.get()));
    if (!as_float) return nullptr;
    Ref log_counts(backend::call1(T.unary[backend::kLog], as_float.get()));
    if (!log_counts) return nullptr;
    raw = Ref(PyNumber_Subtract(raw.get(), log_counts.get()));
    if (!raw) return nullptr;
  }
  if (fill) return backend::call3(T.where, filled.get(), raw.get(), fill);
  return raw.release();
}

/// The common call of scatter and scatter_count: raw `x_raw` over `x_dims` (sizes `x_sizes`; x's own,
/// or the indices' for scatter_count's ones) reduced along `d` into the static `out_dim` at the int64
/// indices `idx`, whose dims are all among x_dims with the same sizes and of which no other than `d`
/// has lengths: one scatter_add_ (sum) or scatter_reduce_ (max, min, mean of a float x: `fill` the value
/// of positions nothing reaches, NULL for the mode's default) in x's layout. The padding of a dynamic
/// `d` goes to an extra last row that is cut off (where with the dim's cached mask, on the indices; for
/// max and min also on x, the padding values made neutral, as the definition). `x` (the markers kept)
/// may be null. NULL with an error set, or with *fall_back set (no error) for a call that is not the
/// common one.
PyObject* scatter_common(TensorObject* x, PyObject* x_raw, PyObject* x_dims, const Py_ssize_t* x_sizes,
                         TensorObject* idx, PyObject* d, PyObject* out_dim, Reduce reduce, PyObject* fill,
                         const char* caller, bool* fall_back) {
  *fall_back = true;
  if (!out_dim || !is_dim(out_dim) || as_dim(out_dim)->size < 0 || (idx->sparse_dim && idx->sparse_dim != out_dim))
    return nullptr;
  int a = dims_index(x_dims, d);
  if (a < 0 || dims_index(idx->dims, d) < 0 || dims_index(x_dims, out_dim) >= 0) return nullptr;
  for (Py_ssize_t j = 0; j < tensor_ndim(idx); ++j) {
    PyObject* e = PyTuple_GET_ITEM(idx->dims, j);
    int i = dims_index(x_dims, e);
    if (i < 0 || x_sizes[i] != idx->sizes[j] || (e != d && dim_has_lengths(as_dim(e)))) return nullptr;
  }
  PyObject* dtype = backend::raw_dtype_name(idx->raw);
  if (!dtype) {
    *fall_back = false;
    return nullptr;
  }
  if (PyUnicode_CompareWithASCIIString(dtype, "int64") != 0) return nullptr;
  if (reduce != Reduce::kSum) {  // (an int x: the definition's float32 mean, iinfo extremes)
    PyObject* x_dtype = backend::raw_dtype_name(x_raw);
    if (!x_dtype) {
      *fall_back = false;
      return nullptr;
    }
    if (!backend::is_floating_dtype_name(x_dtype)) return nullptr;
  }
  Py_ssize_t nd = PyTuple_GET_SIZE(x_dims);
  Py_ssize_t n_out = as_dim(out_dim)->size;
  bool dynamic = dim_has_lengths(as_dim(d));
  if (dynamic && n_out == PY_SSIZE_T_MAX) return nullptr;  // (no room for the extra row: the definition)
  signed char pos[kMaxDims + 1];
  int k = 0;
  if (dynamic && !lengths_positions(as_dim(d), x_dims, true, pos, &k, caller)) {
    PyErr_Clear();
    return nullptr;
  }
  *fall_back = false;
  Ref ir(tensor_raw_aligned(idx, x_dims, caller));
  if (!ir) return nullptr;
  Ref source = Ref::borrow(x_raw);
  if (dynamic) {
    Ref device(PyObject_GetAttr(x_raw, backend::T.s_device));
    if (!device) return nullptr;
    Ref mask(dim_cached_raw(as_dim(d), MaskKind::kMask, pos, static_cast<int>(nd), x_sizes[a], device.get()));
    Ref extra_row(PyLong_FromSsize_t(n_out));
    if (!mask || !extra_row) return nullptr;
    ir = Ref(backend::call3(backend::T.where, mask.get(), ir.get(), extra_row.get()));
    if (!ir) return nullptr;
    if (reduce != Reduce::kSum && reduce != Reduce::kMean) {  // (a NaN there would reach the backward pass)
      PyObject* neutral = reduce == Reduce::kMin ? backend::T.float_inf : backend::T.float_neg_inf;
      source = Ref(backend::call3(backend::T.where, mask.get(), x_raw, neutral));
      if (!source) return nullptr;
    }
  }
  Py_ssize_t out_sizes[kMaxDims];
  std::copy(x_sizes, x_sizes + nd, out_sizes);
  out_sizes[a] = n_out + (dynamic ? 1 : 0);  // a dynamic dim's padding goes to the extra last row
  Ref shape(size_tuple(out_sizes, nd));
  if (!shape) return nullptr;
  bool top_mode = reduce == Reduce::kLogSumExp || reduce == Reduce::kLogMeanExp || reduce == Reduce::kArgMax;
  Ref target;
  if (top_mode) {
    target = Ref::borrow(Py_None);
  } else if (reduce == Reduce::kSum) {
    target = Ref(backend::call2(backend::T.new_zeros, x_raw, shape.get()));
  } else {
    if (!fill) fill = reduce == Reduce::kMax ? backend::T.float_neg_inf
                      : reduce == Reduce::kMin ? backend::T.float_inf : backend::T.zero;
    target = Ref(backend::call3(backend::T.new_full, x_raw, shape.get(), fill));
  }
  // indices over all of x's dims (checked: the same sizes) need no expand (~0.7 us)
  Ref index(tensor_ndim(idx) == nd ? Ref::borrow(ir.get()) : Ref(backend::call2(backend::T.expand_as, ir.get(), x_raw)));
  Ref a_obj(PyLong_FromLong(a));
  if (!target || !index || !a_obj) return nullptr;
  Ref raw;
  if (top_mode) {
    Py_ssize_t ir_sizes[kMaxDims];
    for (Py_ssize_t i = 0; i < nd; ++i)
      ir_sizes[i] = i == a ? out_sizes[a] : dims_index(idx->dims, PyTuple_GET_ITEM(x_dims, i)) >= 0 ? x_sizes[i] : 1;
    raw = Ref(scatter_top_modes(source.get(), ir.get(), ir_sizes, index.get(), a, nd, out_sizes, x_sizes[a], reduce,
                                fill));
  } else if (reduce == Reduce::kSum) {
    PyObject* call[4] = {target.get(), a_obj.get(), index.get(), source.get()};
    raw = Ref(PyObject_Vectorcall(backend::T.scatter_add_, call, 4, nullptr));
  } else {
    static PyObject* names[3] = {};
    static PyObject* kwnames = nullptr;
    if (!kwnames) {
      Ref k(Py_BuildValue("(s)", "include_self"));
      if (!k) return nullptr;
      kwnames = k.release();
    }
    PyObject* how = reduce == Reduce::kMax ? fast_path::interned(&names[0], "amax")
                    : reduce == Reduce::kMin ? fast_path::interned(&names[1], "amin")
                                             : fast_path::interned(&names[2], "mean");
    if (!how) return nullptr;
    PyObject* call[6] = {target.get(), a_obj.get(), index.get(), source.get(), how, Py_False};
    raw = Ref(PyObject_Vectorcall(backend::T.scatter_reduce_, call, 5, kwnames));
  }
  if (!raw) return nullptr;
  if (dynamic) {
    raw = Ref(narrowed(raw.get(), a, 0, n_out));
    if (!raw) return nullptr;
  }
  Ref dims(dims_replaced(x_dims, a, out_dim));
  if (!dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  std::copy(x_sizes, x_sizes + nd, sizes);
  sizes[a] = n_out;
  if (reduce == Reduce::kArgMax) return tensor_make(raw.release(), dims.get(), sizes, d, nullptr);
  return tensor_make(raw.release(), dims.get(), sizes, x ? x->sparse_dim : nullptr,
                     x ? kept_feature(x, dims.get()) : nullptr);
}

/// scatter(x, /, *, indices, indices_dim, mode="sum", fill_value=None, out_dim=None, use_mask=None): the
/// fast path (its common call) reduces along one indices dim into a static out dim, with int64 indices
/// over dims of x of the same sizes, where no other indices dim has lengths (scatter_common): mode sum
/// (no fill_value), or max, min, mean, logsumexp, logmeanexp, argmax of a float x (fill_value None or a
/// number); use_mask None or True.
/// Other modes and calls go to the Python definition.
PyObject* f_scatter(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "indices", "indices_dim", "mode", "fill_value", "out_dim", "use_mask"};
  const char* caller = "dimtorch.scatter()";
  PyObject* v[7];
  if (!parse_args(args, nargs, kwnames, names, 7, 1, 3, v, caller, 1)) {
    PyErr_Clear();
    return scatter_fallback(args, nargs, kwnames);
  }
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_tensor(v[1]) || !as_tensor(v[1])->raw || !is_dim(v[2]))
    return scatter_fallback(args, nargs, kwnames);
  Reduce reduce = Reduce::kSum;
  if (v[3]) {
    static PyObject* modes[7] = {};
    const char* const mode_names[7] = {"sum", "max", "min", "mean", "logsumexp", "logmeanexp", "argmax"};
    int m = 0;
    while (m < 7 && v[3] != fast_path::interned(&modes[m], mode_names[m])) ++m;
    if (m == 7 && PyUnicode_CheckExact(v[3])) {  // a str made at run time: compared by value
      m = 0;
      while (m < 7 && PyUnicode_CompareWithASCIIString(v[3], mode_names[m]) != 0) ++m;
    }
    if (m == 7) return scatter_fallback(args, nargs, kwnames);
    reduce = static_cast<Reduce>(m);
  }
  PyObject* fill = v[4] && v[4] != Py_None ? v[4] : nullptr;
  if (fill && (reduce == Reduce::kSum || !(PyFloat_CheckExact(fill) || PyLong_CheckExact(fill))))
    return scatter_fallback(args, nargs, kwnames);
  if (v[6] && v[6] != Py_None && v[6] != Py_True) return scatter_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  TensorObject* idx = as_tensor(v[1]);
  PyObject* out_dim = v[5] && v[5] != Py_None ? v[5] : idx->sparse_dim;
  bool fall_back;
  PyObject* out = scatter_common(x, x->raw, x->dims, x->sizes, idx, v[2], out_dim, reduce, fill, caller, &fall_back);
  return fall_back ? scatter_fallback(args, nargs, kwnames) : out;
}

/// scatter_count(*, indices, indices_dim, out_dim=None, fill_value=None): the fast path (fill_value None
/// or 0) counts as scatter's common call of cached int32 ones over the indices' dims.
PyObject* f_scatter_count(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"indices", "indices_dim", "out_dim", "fill_value"};
  const char* caller = "dimtorch.scatter_count()";
  PyObject* v[4];
  if (!parse_args(args, nargs, kwnames, names, 4, 0, 2, v, caller)) {
    PyErr_Clear();
    return scatter_count_fallback(args, nargs, kwnames);
  }
  bool plain_fill = !v[3] || v[3] == Py_None || (PyLong_CheckExact(v[3]) && PyLong_AsLong(v[3]) == 0);
  if (PyErr_Occurred()) PyErr_Clear();
  if (!plain_fill || !is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(v[1]))
    return scatter_count_fallback(args, nargs, kwnames);
  TensorObject* idx = as_tensor(v[0]);
  PyObject* out_dim = v[2] && v[2] != Py_None ? v[2] : idx->sparse_dim;
  Ref device(PyObject_GetAttr(idx->raw, backend::T.s_device));
  if (!device) return nullptr;
  Ref ones(int32_ones(idx->sizes, tensor_ndim(idx), device.get()));
  if (!ones) return nullptr;
  bool fall_back;
  PyObject* out = scatter_common(nullptr, ones.get(), idx->dims, idx->sizes, idx, v[1], out_dim, Reduce::kSum,
                                 nullptr, caller, &fall_back);
  return fall_back ? scatter_count_fallback(args, nargs, kwnames) : out;
}

#define FASTCALL_KW(fn) DIMTORCH_OP(fn), METH_FASTCALL | METH_KEYWORDS

PyMethodDef kFunctions[] = {
    {"scatter", FASTCALL_KW(f_scatter),
     "scatter(x, /, *, indices, indices_dim, mode='sum', fill_value=None, out_dim=None, use_mask=None) -> tensor: "
     "see dimtorch.ops.scatter.scatter."},
    {"scatter_count", FASTCALL_KW(f_scatter_count),
     "scatter_count(*, indices, indices_dim, out_dim=None, fill_value=None) -> tensor: "
     "see dimtorch.ops.scatter.scatter_count."},
    {nullptr}};

#undef FASTCALL_KW

}  // namespace

// Contiguous int32 ones of the last few index shapes, per device: scatter_count's increments
// (scatter_add_ from a contiguous source is ~2x faster than from an expanded 0-dim one, and making them
// each call costs ~1.5 us). Eager only (a traced call never reaches a fast path); kept for the process.
namespace {
struct OnesEntry {
  Py_ssize_t ndim = -1;
  Py_ssize_t sizes[kMaxDims];
  PyObject* device = nullptr;  // strong
  PyObject* ones = nullptr;    // strong
};
constexpr int kOnesEntries = 8;
OnesEntry g_ones[kOnesEntries];
int g_ones_next = 0;

}  // namespace

PyObject* fast_path::int32_ones(const Py_ssize_t* sizes, Py_ssize_t nd, PyObject* device) {
  for (OnesEntry& e : g_ones) {
    if (e.ndim != nd || !std::equal(sizes, sizes + nd, e.sizes)) continue;
    int same = e.device == device ? 1 : PyObject_RichCompareBool(e.device, device, Py_EQ);
    if (same < 0) return nullptr;
    if (same) return Py_NewRef(e.ones);
  }
  static PyObject* int32_name = PyUnicode_InternFromString("int32");
  PyObject* int32 = int32_name ? backend::dtype_from(int32_name, "dimtorch.int32_ones()") : nullptr;
  Ref shape(int32 ? size_tuple(sizes, nd) : nullptr);
  Ref kwargs(shape ? Py_BuildValue("{sOsO}", "dtype", int32, "device", device) : nullptr);
  if (!kwargs) return nullptr;
  PyObject* call[1] = {shape.get()};
  Ref ones(PyObject_VectorcallDict(backend::T.ones, call, 1, kwargs.get()));
  if (!ones) return nullptr;
  OnesEntry& e = g_ones[g_ones_next];
  g_ones_next = (g_ones_next + 1) % kOnesEntries;
  // The new entry first, the old one released after: releasing may run code that reads the cache.
  PyObject* old_device = e.device;
  PyObject* old_ones = e.ones;
  e.ndim = nd;
  std::copy(sizes, sizes + nd, e.sizes);
  e.device = Py_NewRef(device);
  e.ones = Py_NewRef(ones.get());
  Py_XDECREF(old_device);
  Py_XDECREF(old_ones);
  return ones.release();
}

bool export_ops_scatter(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
