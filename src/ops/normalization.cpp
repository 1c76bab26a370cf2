// Normalization over named dims: layer_norm and rms_norm (F.layer_norm / F.rms_norm with the
// normalized dims viewed last); batch_norm over a static feature dim (F.batch_norm when nothing is
// masked, else masked statistics over valid frames with the running-stat update and affine here).
#include "core/args.h"
#include "core/backend.h"
#include "core/dim.h"
#include "core/functions.h"
#include "ops/reduce.h"
#include "core/definitions.h"
#include "core/message_dims.h"
#include "core/mask.h"
#include "core/tensor.h"
#include "core/exports.h"

namespace dimtorch {

namespace {

constexpr const char* kCaller = "dimtorch.batch_norm()";

/// A per-feature parameter: None (NULL) or a Tensor over exactly (axis,).
bool check_param(PyObject* p, const char* name, PyObject* axis) {
  if (!p) return true;
  if (!is_tensor(p) || !as_tensor(p)->raw) {
    PyErr_Format(PyExc_TypeError, "%s: %s must be a dimtorch.Tensor over (%s,), got %.80s", kCaller,
                 name, describe_dim(axis).c_str(), Py_TYPE(p)->tp_name);
    return false;
  }
  TensorObject* t = as_tensor(p);
  if (tensor_ndim(t) != 1 || PyTuple_GET_ITEM(t->dims, 0) != axis) {
    PyErr_Format(PyExc_ValueError, "%s: %s must have dims (%s,), got (%s)", kCaller, name,
                 describe_dim(axis).c_str(), describe_dims(t->dims, t->sizes).c_str());
    return false;
  }
  return true;
}

PyObject* raw_of(PyObject* p) { return p ? as_tensor(p)->raw : Py_None; }

/// raw (F,) viewed to broadcast against a tensor whose feature axis is `ax` of `nd`.
PyObject* feature_view(PyObject* raw, Py_ssize_t features, int ax, int nd) {
  if (ax == nd - 1) return Py_NewRef(raw);
  Ref shape(PyTuple_New(nd - ax));
  if (!shape) return nullptr;
  PyTuple_SET_ITEM(shape.get(), 0, PyLong_FromSsize_t(features));
  for (int i = 1; i < nd - ax; ++i) PyTuple_SET_ITEM(shape.get(), i, PyLong_FromLong(1));
  return backend::call2(backend::T.view, raw, shape.get());
}

/// F.batch_norm on x with the feature axis moved to position 1 (views, no copy).
PyObject* fused(TensorObject* x, int ax, PyObject* const* params, PyObject* training,
                PyObject* momentum, PyObject* eps) {
  using backend::T;
  int nd = static_cast<int>(tensor_ndim(x));
  int order[kMaxDims], inverse[kMaxDims];
  Ref raw;
  if (nd == 1) {
    raw = Ref(backend::call2(T.unsqueeze, x->raw, T.zero));
  } else {
    // movedim(ax, 1): the first other axis, the feature axis, then the remaining others.
    int j = 0;
    for (int i = 0; i < nd; ++i) {
      if (i == ax) continue;
      order[j] = i;
      j += j == 0 ? 2 : 1;  // slot 1 is kept for the feature axis
    }
    order[1] = ax;
    for (int i = 0; i < nd; ++i) inverse[order[i]] = i;
    raw = Ref(backend::permute_order(x->raw, order, nd));
  }
  if (!raw) return nullptr;
  PyObject* call_args[8] = {raw.get(), raw_of(params[0]), raw_of(params[1]), raw_of(params[2]),
                            raw_of(params[3]), training, momentum, eps};
  Ref out(PyObject_Vectorcall(T.batch_norm, call_args, 8, nullptr));
  if (!out) return nullptr;
  if (nd == 1) {
    out = Ref(PyObject_CallMethod(out.get(), "squeeze", "i", 0));
  } else {
    out = Ref(backend::permute_order(out.get(), inverse, nd));
  }
  if (!out) return nullptr;
  return tensor_make(out.release(), x->dims, x->sizes, nullptr, x->feature_dim);
}

/// running <- (1 - momentum) * running + momentum * stat, as F.batch_norm does; `stat` is detached
/// so that the buffer never joins the autograd graph.
bool update_running(PyObject* running, PyObject* stat, PyObject* momentum) {
  using backend::T;
  Ref detached(backend::call1(T.detach, stat));
  if (!detached) return false;
  Ref r(backend::call3(T.lerp_, as_tensor(running)->raw, detached.get(), momentum));
  return static_cast<bool>(r);
}

/// Training statistics over the valid frames of every dim but `ax`; None when moments masked nothing.
PyObject* masked(TensorObject* x, int ax, PyObject* const* params, double momentum, PyObject* eps) {
  using backend::T;
  int nd = static_cast<int>(tensor_ndim(x));
  Ref reduced(PyTuple_New(nd - 1));
  if (!reduced) return nullptr;
  for (int i = 0, j = 0; i < nd; ++i)
    if (i != ax) PyTuple_SET_ITEM(reduced.get(), j++, Py_NewRef(PyTuple_GET_ITEM(x->dims, i)));
  PyObject* count = nullptr;
  PyObject* centered = nullptr;
  PyObject* m_args[2] = {reinterpret_cast<PyObject*>(x), reduced.get()};
  Ref stats(moments_impl(m_args, 2, nullptr, &count, &centered, kCaller));
  Ref count_ref(count), centered_ref(centered);
  if (!stats) return nullptr;
  PyObject* mean = as_tensor(PyTuple_GET_ITEM(stats.get(), 0))->raw;
  PyObject* var = as_tensor(PyTuple_GET_ITEM(stats.get(), 1))->raw;
  if (!centered) return Py_NewRef(Py_None);  // nothing needed masking after all: F.batch_norm
  if (params[0]) {
    // The running variance is unbiased: var * n / (n - 1), n the valid frames per feature (n = 1
    // counts as n / 1, where torch would raise).
    Ref var_d(backend::call1(T.detach, var));
    if (!var_d) return nullptr;
    Ref unbiased;
    if (PyFloat_Check(count)) {
      double n = PyFloat_AS_DOUBLE(count);
      Ref factor(PyFloat_FromDouble(n / (n - 1.0 > 1.0 ? n - 1.0 : 1.0)));
      if (!factor) return nullptr;
      unbiased = Ref(PyNumber_Multiply(var_d.get(), factor.get()));
    } else {
      Ref one(PyLong_FromLong(1));
      Ref n1(PyNumber_Subtract(count, one.get()));
      if (!n1) return nullptr;
      Ref n1c(backend::call2(T.clamp_min, n1.get(), one.get()));
      if (!n1c) return nullptr;
      Ref factor(PyNumber_TrueDivide(count, n1c.get()));
      if (!factor) return nullptr;
      unbiased = Ref(PyNumber_Multiply(var_d.get(), factor.get()));
    }
    if (!unbiased) return nullptr;
    Ref m(PyFloat_FromDouble(momentum));
    if (!m || !update_running(params[0], mean, m.get()) ||
        !update_running(params[1], unbiased.get(), m.get()))
      return nullptr;
  }
  // out = centered * (rsqrt(var + eps) * weight) + bias: the per-feature factor is made on (F,)
  // first, so the full-size work is one multiply (one addcmul with a bias).
  Ref var_eps(PyNumber_Add(var, eps));
  if (!var_eps) return nullptr;
  Ref scale(backend::call1(T.unary[backend::kRsqrt], var_eps.get()));
  if (!scale) return nullptr;
  if (params[2]) {
    scale = Ref(PyNumber_Multiply(scale.get(), as_tensor(params[2])->raw));
    if (!scale) return nullptr;
  }
  TensorObject* c = as_tensor(centered);
  int c_nd = static_cast<int>(tensor_ndim(c));
  int c_ax = dims_index(c->dims, PyTuple_GET_ITEM(x->dims, ax));
  Py_ssize_t features = x->sizes[ax];
  Ref scale_v(feature_view(scale.get(), features, c_ax, c_nd));
  if (!scale_v) return nullptr;
  Ref out;
  if (params[3]) {
    Ref bias_v(feature_view(as_tensor(params[3])->raw, features, c_ax, c_nd));
    if (!bias_v) return nullptr;
    out = Ref(backend::call3(T.addcmul, bias_v.get(), c->raw, scale_v.get()));
  } else {
    out = Ref(PyNumber_Multiply(c->raw, scale_v.get()));
  }
  if (!out) return nullptr;
  return tensor_make(out.release(), c->dims, c->sizes, nullptr, x->feature_dim);
}

PyObject* f_batch_norm(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x",        "axis",     "running_mean", "running_var",
                                      "weight",   "bias",     "training",     "momentum",
                                      "eps",      "use_mask"};
  PyObject* v[10];
  if (!parse_args(args, nargs, kwnames, names, 10, 10, 1, v, kCaller)) return nullptr;
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw) {
    PyErr_Format(PyExc_TypeError, "%s: x must be a dimtorch.Tensor, got %.80s", kCaller,
                 Py_TYPE(v[0])->tp_name);
    return nullptr;
  }
  TensorObject* x = as_tensor(v[0]);
  PyObject* axis = v[1] && v[1] != Py_None ? v[1] : x->feature_dim;
  if (!axis) {
    PyErr_Format(PyExc_ValueError, "%s: x has no feature_dim; pass axis= (dims: %s)", kCaller,
                 describe_dims(x->dims, x->sizes).c_str());
    return nullptr;
  }
  if (!is_dim(axis)) {
    PyErr_Format(PyExc_TypeError, "%s: axis must be one Dim (the feature dim), got %.80s", kCaller,
                 Py_TYPE(axis)->tp_name);
    return nullptr;
  }
  int axes[1], n_axes;
  if (!axes_arg(x, axis, axes, &n_axes, kCaller)) return nullptr;
  int ax = axes[0];
  PyObject* params[4];
  for (int i = 0; i < 4; ++i) params[i] = v[2 + i] == Py_None ? nullptr : v[2 + i];
  if (!params[0] != !params[1]) {
    PyErr_Format(PyExc_ValueError, "%s: give both running_mean and running_var, or neither", kCaller);
    return nullptr;
  }
  int training = flag_arg(v[6], 1, kCaller, "training");
  int use_mask = flag_arg(v[9], 1, kCaller, "use_mask");
  if (training < 0 || use_mask < 0) return nullptr;
  if (!training && !params[0]) {
    PyErr_Format(PyExc_ValueError, "%s: training=False needs running_mean and running_var", kCaller);
    return nullptr;
  }
  if (dim_has_lengths(as_dim(axis))) {
    PyErr_Format(PyExc_ValueError, "%s: axis %s has lengths; batch norm needs a static feature dim",
                 kCaller, describe_dim(axis).c_str());
    return nullptr;
  }
  static const char* const param_names[] = {"running_mean", "running_var", "weight", "bias"};
  for (int i = 0; i < 4; ++i)
    if (!check_param(params[i], param_names[i], axis)) return nullptr;
  double momentum = 0.1;
  if (v[7]) {
    momentum = PyFloat_AsDouble(v[7]);
    if (momentum == -1.0 && PyErr_Occurred()) {
      PyErr_Format(PyExc_TypeError, "%s: momentum must be a float, got %.80s", kCaller,
                   Py_TYPE(v[7])->tp_name);
      return nullptr;
    }
  }
  Ref momentum_obj(PyFloat_FromDouble(momentum));
  Ref eps(v[8] ? Py_NewRef(v[8]) : PyFloat_FromDouble(1e-5));
  if (!momentum_obj || !eps) return nullptr;
  // Every dim but the (static) axis is reduced, so padding needs masking iff any dim has lengths.
  bool any_lengths = false;
  for (Py_ssize_t i = 0; i < tensor_ndim(x); ++i)
    any_lengths = any_lengths || dim_has_lengths(as_dim(PyTuple_GET_ITEM(x->dims, i)));
  if (training && use_mask && any_lengths) {
    PyObject* out = masked(x, ax, params, momentum, eps.get());
    if (out != Py_None) return out;
    Py_DECREF(out);
  }
  return fused(x, ax, params, training ? Py_True : Py_False, momentum_obj.get(), eps.get());
}

/// Shared by layer_norm and rms_norm: the normalized dims viewed last, one fused torch call.
PyObject* norm_like(bool rms, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                    const char* caller) {
  static const char* const names[] = {"x", "axis", "weight", "bias", "eps"};
  static const char* const rms_names[] = {"x", "axis", "weight", "eps"};
  PyObject* v[5] = {};
  PyObject* weight_obj;
  PyObject* bias_obj = nullptr;
  PyObject* eps_obj;
  if (rms) {
    PyObject* r[4];
    if (!parse_args(args, nargs, kwnames, rms_names, 4, 2, 2, r, caller)) return nullptr;
    v[0] = r[0];
    v[1] = r[1];
    weight_obj = r[2];
    eps_obj = r[3];
  } else {
    if (!parse_args(args, nargs, kwnames, names, 5, 2, 2, v, caller)) return nullptr;
    weight_obj = v[2];
    bias_obj = v[3];
    eps_obj = v[4];
  }
  if (weight_obj == Py_None) weight_obj = nullptr;
  if (bias_obj == Py_None) bias_obj = nullptr;
  if (!need_tensor(v[0], "x", caller)) return nullptr;
  if (weight_obj && !need_tensor(weight_obj, "weight", caller)) return nullptr;
  if (bias_obj && !need_tensor(bias_obj, "bias", caller)) return nullptr;
  TensorObject* x = as_tensor(v[0]);
  int axes[kMaxDims], n_axes;
  if (!axes_arg(x, v[1], axes, &n_axes, caller)) return nullptr;
  for (int j = 0; j < n_axes; ++j) {
    PyObject* d = PyTuple_GET_ITEM(x->dims, axes[j]);
    if (dim_has_lengths(as_dim(d))) {
      PyErr_Format(PyExc_ValueError,
                   "%s: normalizing over dim %s, which has padding, would mix padding into the "
                   "statistics; use dimtorch.moments (masked) for that",
                   caller, describe_dim(d).c_str());
      return nullptr;
    }
  }
  int nd = static_cast<int>(tensor_ndim(x));
  bool normalized[kMaxDims] = {};
  for (int j = 0; j < n_axes; ++j) normalized[axes[j]] = true;
  int order[kMaxDims], k = 0;
  for (int i = 0; i < nd; ++i)
    if (!normalized[i]) order[k++] = i;
  for (int j = 0; j < n_axes; ++j) order[k++] = axes[j];
  Py_ssize_t out_sizes[kMaxDims];
  bool in_order = true;
  for (int i = 0; i < nd; ++i) {
    out_sizes[i] = x->sizes[order[i]];
    in_order = in_order && order[i] == i;
  }
  Ref out_dims;
  if (in_order) {
    out_dims = Ref::borrow(x->dims);
  } else {
    out_dims = Ref(PyTuple_New(nd));
    if (!out_dims) return nullptr;
    for (int i = 0; i < nd; ++i)
      PyTuple_SET_ITEM(out_dims.get(), i, Py_NewRef(PyTuple_GET_ITEM(x->dims, order[i])));
  }
  Ref shape(PyTuple_New(n_axes));
  if (!shape) return nullptr;
  for (int j = 0; j < n_axes; ++j)
    PyTuple_SET_ITEM(shape.get(), j, PyLong_FromSsize_t(x->sizes[axes[j]]));
  // weight/bias over exactly the normalized dims, aligned to the order of `axis`.
  Ref affine[2];
  PyObject* objs[2] = {weight_obj, bias_obj};
  for (int a = 0; a < 2; ++a) {
    if (!objs[a]) {
      affine[a] = Ref::borrow(Py_None);
      continue;
    }
    TensorObject* p = as_tensor(objs[a]);
    int porder[kMaxDims];
    bool ok = tensor_ndim(p) == n_axes;
    for (int j = 0; ok && j < n_axes; ++j) {
      porder[j] = dims_index(p->dims, PyTuple_GET_ITEM(x->dims, axes[j]));
      ok = porder[j] >= 0 && p->sizes[porder[j]] == x->sizes[axes[j]];
    }
    if (!ok) {
      PyErr_Format(PyExc_ValueError, "%s: %s must have exactly the normalized dims, got (%s)", caller,
                   a == 0 ? "weight" : "bias", describe_dims(p->dims, p->sizes).c_str());
      return nullptr;
    }
    affine[a] = Ref(backend::permute_order(p->raw, porder, n_axes));
    if (!affine[a]) return nullptr;
  }
  Ref xr(backend::permute_order(x->raw, order, nd));
  if (!xr) return nullptr;
  Ref eps(eps_obj && eps_obj != Py_None ? Py_NewRef(eps_obj)
                                        : PyFloat_FromDouble(rms ? 1e-6 : 1e-5));
  if (!eps) return nullptr;
  Ref out;
  if (rms) {
    PyObject* call_args[4] = {xr.get(), shape.get(), affine[0].get(), eps.get()};
    out = Ref(PyObject_Vectorcall(backend::T.rms_norm, call_args, 4, nullptr));
  } else {
    PyObject* call_args[5] = {xr.get(), shape.get(), affine[0].get(), affine[1].get(), eps.get()};
    out = Ref(PyObject_Vectorcall(backend::T.layer_norm, call_args, 5, nullptr));
  }
  if (!out) return nullptr;
  return tensor_make(out.release(), out_dims.get(), out_sizes, nullptr, x->feature_dim);
}

PyObject* f_layer_norm(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return norm_like(false, args, nargs, kwnames, "dimtorch.layer_norm()");
}
PyObject* f_rms_norm(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return norm_like(true, args, nargs, kwnames, "dimtorch.rms_norm()");
}

#define FASTCALL(fn) DIMTORCH_OP(fn), \
                     METH_FASTCALL | METH_KEYWORDS
PyMethodDef kFunctions[] = {
    {"batch_norm", FASTCALL(f_batch_norm),
     "batch_norm(x, axis=None, running_mean=None, running_var=None, weight=None, bias=None, "
     "training=True, momentum=0.1, eps=1e-5, use_mask=True)\n\n"
     "Batch normalization over the static feature dim `axis` (default: x.feature_dim). Statistics "
     "are over all other dims, counting valid frames only (the padding of dynamic dims is "
     "excluded). In training, running_mean/running_var (Tensors over (axis,), e.g. views of module "
     "buffers) are updated in place as F.batch_norm does (unbiased variance); with training=False "
     "they are used instead of batch statistics. Without padding to mask (no dynamic dims, "
     "use_mask=False, or eval) this is one F.batch_norm call. No host-device sync."},
    {"layer_norm", FASTCALL(f_layer_norm),
     "layer_norm(x, axis, weight=None, bias=None, eps=1e-5): F.layer_norm over the dim(s) `axis` "
     "(viewed last; the result keeps that order)."},
    {"rms_norm", FASTCALL(f_rms_norm),
     "rms_norm(x, axis, weight=None, eps=1e-6): F.rms_norm over the dim(s) `axis`."},
    {nullptr, nullptr, 0, nullptr}};
#undef FASTCALL

}  // namespace

bool export_ops_normalization(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
