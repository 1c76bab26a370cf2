// Fast path of dot_attention (definition: python/dimtorch/ops/attention.py) for its common call: query
// (batch..., query dim, key_dim), keys (batch..., axis, key_dim) and values (batch..., axis, value dim), each
// already in that order (the definition's plan then aligns nothing), no causal dim, no dropout (att_dropout 0
// or training False). As the definition: queries zeroed at the padding of a dynamic query dim, keys and values
// at the padding of a dynamic axis (wheres with the dims' cached masks, laid out with the size-1 axes the
// definition's [..., None] views add), the key mask (batch..., 1, axis) to one
// F.scaled_dot_product_attention. Every other call, and any error, goes to the Python definition.
#include "core/args.h"
#include "core/backend.h"
#include "core/dim.h"
#include "core/exports.h"
#include "core/functions.h"
#include "core/mask.h"
#include "core/python_fallback.h"
#include "core/tensor.h"
#include "ops/fast_path_util.h"

namespace dimtorch {

namespace {

DIMTORCH_PYTHON_FALLBACK(dot_attention_fallback, "dot_attention")

/// F.scaled_dot_product_attention (backend::T.sdpa) and its keywords, made once; borrowed.
bool sdpa(PyObject** fn, PyObject** kwnames) {
  static PyObject* k = nullptr;
  if (!k && !(k = Py_BuildValue("(ssss)", "attn_mask", "dropout_p", "is_causal", "scale"))) return false;
  *fn = backend::T.sdpa;
  *kwnames = k;
  return true;
}

/// Whether the first n dims of tuples a and b are the same Dim objects.
bool same_prefix(PyObject* a, PyObject* b, Py_ssize_t n) {
  for (Py_ssize_t i = 0; i < n; ++i)
    if (PyTuple_GET_ITEM(a, i) != PyTuple_GET_ITEM(b, i)) return false;
  return true;
}

/// The mask of dynamic dim d (at axis `at`, raw size `size`) for a raw of `ndim` axes whose first nb are the
/// batch dims `dims`: false (no error) when one of its lengths' dims is not among them.
PyObject* mask_at(PyObject* d, PyObject* dims, Py_ssize_t nb, int at, int ndim, Py_ssize_t size, PyObject* device,
                  bool* fall_back) {
  PyObject* lengths = dim_dyn_size(as_dim(d));
  if (!lengths) {
    if (!PyErr_Occurred()) *fall_back = true;
    return nullptr;
  }
  PyObject* ldims = as_tensor(lengths)->dims;
  Py_ssize_t k = PyTuple_GET_SIZE(ldims);
  signed char pos[kMaxDims + 1];
  for (Py_ssize_t j = 0; j < k; ++j) {
    int p = dims_index(dims, PyTuple_GET_ITEM(ldims, j));
    if (p < 0 || p >= nb) {
      *fall_back = true;
      return nullptr;
    }
    pos[j] = static_cast<signed char>(p);
  }
  pos[k] = static_cast<signed char>(at);
  return dim_cached_raw(as_dim(d), MaskKind::kMask, pos, ndim, size, device);
}

/// dot_attention(query, keys, values, *, key_dim, axis, att_dropout=0.0, att_dropout_broadcast=None,
/// causal_query_spatial_dim=None, scale=None, training=True).
PyObject* f_dot_attention(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"query", "keys", "values", "key_dim", "axis", "att_dropout",
                                      "att_dropout_broadcast", "causal_query_spatial_dim", "scale", "training"};
  const char* caller = "dimtorch.dot_attention()";
  PyObject* v[10];
  if (!parse_args(args, nargs, kwnames, names, 10, 3, 5, v, caller)) {
    PyErr_Clear();
    return dot_attention_fallback(args, nargs, kwnames);
  }
#define FALLBACK() return dot_attention_fallback(args, nargs, kwnames)
  for (int i = 0; i < 3; ++i)
    if (!Py_IS_TYPE(v[i], &TensorType) || !is_tensor(v[i]) || !as_tensor(v[i])->raw) FALLBACK();
  if (!is_dim(v[3]) || !is_dim(v[4]) || v[3] == v[4]) FALLBACK();
  if (v[7] && v[7] != Py_None) FALLBACK();  // (a causal dim: the definition)
  PyObject* training = v[9] ? v[9] : Py_True;
  if (training != Py_True && training != Py_False) FALLBACK();
  if (v[5]) {  // no dropout: 0 (an exact float or int), or any number in [0, 1] when not training
    double p;
    if (PyFloat_CheckExact(v[5])) {
      p = PyFloat_AS_DOUBLE(v[5]);
    } else if (PyLong_CheckExact(v[5])) {
      p = PyLong_AsDouble(v[5]);
      if (p == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        FALLBACK();
      }
    } else {
      FALLBACK();
    }
    if (!(p == 0.0 || (training == Py_False && p >= 0.0 && p <= 1.0))) FALLBACK();
  }
  PyObject* scale = v[8] ? v[8] : Py_None;
  if (scale != Py_None && !PyFloat_CheckExact(scale) && !PyLong_CheckExact(scale)) FALLBACK();
  TensorObject* q = as_tensor(v[0]);
  TensorObject* k = as_tensor(v[1]);
  TensorObject* val = as_tensor(v[2]);
  PyObject* key_dim = v[3];
  PyObject* axis = v[4];
  // query (B..., Tq, key_dim), keys (B..., axis, key_dim), values (B..., axis, Dv): the definition's plan keeps
  // them as they are when Tq is the query's own dim (not in keys/values, or the axis itself) and Dv the values'
  // own (key_dim, or a dim neither query nor keys have).
  Py_ssize_t nd = tensor_ndim(q);
  if (nd < 2 || tensor_ndim(k) != nd || tensor_ndim(val) != nd) FALLBACK();
  Py_ssize_t nb = nd - 2;
  PyObject* tq = PyTuple_GET_ITEM(q->dims, nb);
  PyObject* dv = PyTuple_GET_ITEM(val->dims, nb + 1);
  if (PyTuple_GET_ITEM(q->dims, nb + 1) != key_dim || PyTuple_GET_ITEM(k->dims, nb) != axis ||
      PyTuple_GET_ITEM(k->dims, nb + 1) != key_dim || PyTuple_GET_ITEM(val->dims, nb) != axis ||
      !same_prefix(q->dims, k->dims, nb) || !same_prefix(q->dims, val->dims, nb))
    FALLBACK();
  if (tq != axis && tq == dv) FALLBACK();  // (Tq also a dim of the values: not the query's own)
  if (q->sizes[nb + 1] != k->sizes[nb + 1] || k->sizes[nb] != val->sizes[nb]) FALLBACK();
  for (Py_ssize_t i = 0; i < nb; ++i)
    if (q->sizes[i] != k->sizes[i] || q->sizes[i] != val->sizes[i]) FALLBACK();
  bool q_dynamic = dim_has_lengths(as_dim(tq));
  bool k_dynamic = dim_has_lengths(as_dim(axis));
  Ref device(PyObject_GetAttr(k->raw, backend::T.s_device));
  if (!device) return nullptr;
  int n4 = static_cast<int>(nd);
  bool fall_back = false;
  Ref qr = Ref::borrow(q->raw), kr = Ref::borrow(k->raw), vr = Ref::borrow(val->raw);
  static PyObject* zero_float = nullptr;
  if (!zero_float && !(zero_float = PyFloat_FromDouble(0.0))) return nullptr;
  if (q_dynamic) {  // valid[..., None]: the query dim's mask with a size-1 key_dim axis
    Ref valid(mask_at(tq, q->dims, nb, static_cast<int>(nb), n4, q->sizes[nb], device.get(), &fall_back));
    if (!valid) {
      if (fall_back) FALLBACK();
      return nullptr;
    }
    qr = Ref(backend::call3(backend::T.where, valid.get(), qr.get(), zero_float));
    if (!qr) return nullptr;
  }
  Ref mask = Ref::borrow(Py_None);
  if (k_dynamic) {  // key_valid[..., None] on keys and values, key_valid[..., None, :] the attention mask
    Ref kv_valid(mask_at(axis, k->dims, nb, static_cast<int>(nb), n4, k->sizes[nb], device.get(), &fall_back));
    if (!kv_valid) {
      if (fall_back) FALLBACK();
      return nullptr;
    }
    Ref key_mask(mask_at(axis, k->dims, nb, static_cast<int>(nb) + 1, n4, k->sizes[nb], device.get(), &fall_back));
    if (!key_mask) return nullptr;
    kr = Ref(backend::call3(backend::T.where, kv_valid.get(), kr.get(), zero_float));
    if (!kr) return nullptr;
    vr = Ref(backend::call3(backend::T.where, kv_valid.get(), vr.get(), zero_float));
    if (!vr) return nullptr;
    mask = std::move(key_mask);
  }
#undef FALLBACK
  PyObject* fn;
  PyObject* kw;
  if (!sdpa(&fn, &kw)) return nullptr;
  static PyObject* zero_p = nullptr;
  if (!zero_p && !(zero_p = PyFloat_FromDouble(0.0))) return nullptr;
  PyObject* call[7] = {qr.get(), kr.get(), vr.get(), mask.get(), zero_p, Py_False, scale};
  Ref out(PyObject_Vectorcall(fn, call, 3, kw));
  if (!out) {  // (e.g. raws of different dtypes: the definition raises, in its words)
    PyErr_Clear();
    return dot_attention_fallback(args, nargs, kwnames);
  }
  Ref dims(PyTuple_New(nd));
  if (!dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  for (Py_ssize_t i = 0; i < nd; ++i) {
    PyObject* d = i < nb ? PyTuple_GET_ITEM(q->dims, i) : i == nb ? tq : dv;
    PyTuple_SET_ITEM(dims.get(), i, Py_NewRef(d));
    sizes[i] = i <= nb ? q->sizes[i] : val->sizes[nb + 1];
  }
  PyObject* feature = val->feature_dim == dv ? dv : nullptr;
  return tensor_make(out.release(), dims.get(), sizes, nullptr, feature);
}

PyMethodDef kFunctions[] = {
    {"dot_attention", DIMTORCH_OP(f_dot_attention), METH_FASTCALL | METH_KEYWORDS,
     "dot_attention(query, keys, values, *, key_dim, axis, att_dropout=0.0, att_dropout_broadcast=None, "
     "causal_query_spatial_dim=None, scale=None, training=True) -> Tensor: see "
     "dimtorch.ops.attention.dot_attention; one scaled_dot_product_attention here, with the dims' cached masks."},
    {nullptr}};

}  // namespace

bool export_ops_attention(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
