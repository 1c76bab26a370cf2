// Fused neural-network ops over named dims: softmax/log_softmax (masked), linear (F.linear),
// layer_norm and rms_norm (F.layer_norm / F.rms_norm with the normalized dims viewed last).
#include "args.h"
#include "message_dims.h"
#include "backend.h"
#include "definitions.h"
#include "dim.h"
#include "functions.h"
#include "mask.h"
#include "ops_reduce.h"
#include "tensor.h"
#include "exports.h"

namespace dimtorch {

namespace {

PyObject* need_tensor(PyObject* o, const char* what, const char* caller) {
  if (is_tensor(o) && as_tensor(o)->raw) return o;
  PyErr_Format(PyExc_TypeError, "%s: %s must be a dimtorch.Tensor, got %.80s", caller, what,
               Py_TYPE(o)->tp_name);
  return nullptr;
}

PyObject* softmax_like(bool log, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                       const char* caller) {
  static const char* const names[] = {"x", "axis", "use_mask"};
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 3, 2, v, caller)) return nullptr;
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


bool check_same_size(TensorObject* a, int ia, TensorObject* b, int ib, const char* an,
                     const char* bn, const char* caller) {
  if (a->sizes[ia] == b->sizes[ib]) return true;
  PyErr_Format(PyExc_ValueError, "%s: dim %s has raw size %zd in %s but %zd in %s (%s dims: %s; %s dims: %s)",
               caller, describe_dim(PyTuple_GET_ITEM(a->dims, ia)).c_str(), a->sizes[ia], an,
               b->sizes[ib], bn, an, describe_dims(a->dims, a->sizes).c_str(), bn,
               describe_dims(b->dims, b->sizes).c_str());
  return false;
}

PyObject* f_linear(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* caller = "dimtorch.linear()";
  static const char* const names[] = {"x", "weight", "bias"};
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 3, 2, v, caller)) return nullptr;
  if (!need_tensor(v[0], "x", caller) || !need_tensor(v[1], "weight", caller)) return nullptr;
  PyObject* bias_obj = v[2] && v[2] != Py_None ? v[2] : nullptr;
  if (bias_obj && !need_tensor(bias_obj, "bias", caller)) return nullptr;
  TensorObject* x = as_tensor(v[0]);
  TensorObject* w = as_tensor(v[1]);
  if (tensor_ndim(w) != 2) {
    PyErr_Format(PyExc_ValueError, "%s: weight must have 2 dims (in, out), got (%s)", caller,
                 describe_dims(w->dims, w->sizes).c_str());
    return nullptr;
  }
  int in_x0 = dims_index(x->dims, PyTuple_GET_ITEM(w->dims, 0));
  int in_x1 = dims_index(x->dims, PyTuple_GET_ITEM(w->dims, 1));
  if ((in_x0 >= 0) == (in_x1 >= 0)) {
    MessageDims scope{w->dims, x->dims};
    PyErr_Format(PyExc_ValueError,
                 "%s: exactly one dim of weight (%s) must be in x (dims: %s): it is the input dim%s",
                 caller, describe_dims(w->dims, w->sizes).c_str(),
                 describe_dims(x->dims, x->sizes).c_str(), scope.namesakes_note().c_str());
    return nullptr;
  }
  int w_in = in_x0 >= 0 ? 0 : 1, w_out = 1 - w_in;
  int in_x = in_x0 >= 0 ? in_x0 : in_x1;
  if (!check_same_size(x, in_x, w, w_in, "x", "weight", caller)) return nullptr;
  PyObject* out_dim = PyTuple_GET_ITEM(w->dims, w_out);
  if (bias_obj) {
    TensorObject* b = as_tensor(bias_obj);
    if (tensor_ndim(b) != 1 || PyTuple_GET_ITEM(b->dims, 0) != out_dim) {
      PyErr_Format(PyExc_ValueError, "%s: bias must have the dims (%s) of the output, got (%s)",
                   caller, describe_dim(out_dim).c_str(), describe_dims(b->dims, b->sizes).c_str());
      return nullptr;
    }
  }
  // The input dim goes last (a permute only when it is not already), the output dim takes its place.
  int nd = static_cast<int>(tensor_ndim(x));
  int order[kMaxDims];
  Py_ssize_t out_sizes[kMaxDims];
  Ref out_dims(PyTuple_New(nd));
  if (!out_dims) return nullptr;
  for (int i = 0, j = 0; i < nd; ++i) {
    if (i == in_x) continue;
    order[j] = i;
    out_sizes[j] = x->sizes[i];
    PyTuple_SET_ITEM(out_dims.get(), j++, Py_NewRef(PyTuple_GET_ITEM(x->dims, i)));
  }
  order[nd - 1] = in_x;
  out_sizes[nd - 1] = w->sizes[w_out];
  PyTuple_SET_ITEM(out_dims.get(), nd - 1, Py_NewRef(out_dim));
  Ref xr(backend::permute_order(x->raw, order, nd));
  if (!xr) return nullptr;
  Ref out;
  PyObject* b_raw = bias_obj ? as_tensor(bias_obj)->raw : Py_None;
  if (w_out == 0) {  // weight (out, in): torch's own layout
    out = Ref(backend::call3(backend::T.linear, xr.get(), w->raw, b_raw));
  } else {  // weight (in, out): x @ w (+ bias)
    out = Ref(backend::call2(backend::T.matmul, xr.get(), w->raw));
    if (out && bias_obj) out = Ref(PyNumber_Add(out.get(), b_raw));
  }
  if (!out) return nullptr;
  PyObject* in_dim = PyTuple_GET_ITEM(w->dims, w_in);
  PyObject* feature = x->feature_dim == in_dim ? out_dim : x->feature_dim;
  return tensor_make(out.release(), out_dims.get(), out_sizes, nullptr, feature);
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
    {"softmax", FASTCALL(f_softmax),
     "softmax(x, axis, use_mask=True): softmax over the dim `axis`; padding gets probability 0."},
    {"log_softmax", FASTCALL(f_log_softmax),
     "log_softmax(x, axis, use_mask=True): log-softmax over `axis`; padding gets -inf."},
    {"linear", FASTCALL(f_linear),
     "linear(x, weight, bias=None): x contracted with weight over their shared (input) dim, plus "
     "bias over the output dim; F.linear when weight is (out, in)."},
    {"layer_norm", FASTCALL(f_layer_norm),
     "layer_norm(x, axis, weight=None, bias=None, eps=1e-5): F.layer_norm over the dim(s) `axis` "
     "(viewed last; the result keeps that order)."},
    {"rms_norm", FASTCALL(f_rms_norm),
     "rms_norm(x, axis, weight=None, eps=1e-6): F.rms_norm over the dim(s) `axis`."},
    {nullptr}};
#undef FASTCALL

}  // namespace

bool export_ops_nn(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
