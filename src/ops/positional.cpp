// Fast path of apply_rope (definition: python/dimtorch/ops/positional.py) for its common call: feat_dim (static,
// even) the last dim of x, pos_enc over feat_dim and dims of x of x's raw sizes (or size 1 after alignment): the
// definition's steps without its Python (pos_enc aligned to x, chunked into sin and cos, each pair of x rotated:
// unflatten, two selects, four products, a difference and a sum, stack, flatten). Every other call (another place
// of feat_dim, raws of other sizes, every error) goes to the Python definition.
#include "core/args.h"
#include "core/backend.h"
#include "core/dim.h"
#include "core/exports.h"
#include "core/functions.h"
#include "core/python_fallback.h"
#include "core/tensor.h"
#include "ops/fast_path_util.h"

namespace dimtorch {

namespace {

DIMTORCH_PYTHON_FALLBACK(apply_rope_fallback, "apply_rope")

/// args[0].<name>(args[1:]...), the method name interned in `*cache`. New reference.
PyObject* method(PyObject** cache, const char* name, PyObject* const* args, size_t n) {
  if (!fast_path::interned(cache, name)) return nullptr;
  return PyObject_VectorcallMethod(*cache, args, n, nullptr);
}

/// apply_rope(x, pos_enc, feat_dim) -> Tensor.
PyObject* f_apply_rope(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "pos_enc", "feat_dim"};
  const char* caller = "dimtorch.apply_rope()";
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 3, 3, v, caller)) {
    PyErr_Clear();
    return apply_rope_fallback(args, nargs, kwnames);
  }
#define FALLBACK() return apply_rope_fallback(args, nargs, kwnames)
  if (!Py_IS_TYPE(v[0], &TensorType) || !is_tensor(v[0]) || !as_tensor(v[0])->raw ||
      !Py_IS_TYPE(v[1], &TensorType) || !is_tensor(v[1]) || !as_tensor(v[1])->raw || !is_dim(v[2]))
    FALLBACK();
  TensorObject* x = as_tensor(v[0]);
  TensorObject* pe = as_tensor(v[1]);
  PyObject* feat = v[2];
  Py_ssize_t size = as_dim(feat)->size;
  Py_ssize_t nd = tensor_ndim(x);
  if (size < 2 || size % 2 || nd < 1 || PyTuple_GET_ITEM(x->dims, nd - 1) != feat) FALLBACK();
  // pos_enc over feat_dim and dims of x only, each of x's raw size or 1
  if (dims_index(pe->dims, feat) < 0) FALLBACK();
  for (Py_ssize_t j = 0; j < tensor_ndim(pe); ++j) {
    int i = dims_index(x->dims, PyTuple_GET_ITEM(pe->dims, j));
    if (i < 0 || (pe->sizes[j] != 1 && pe->sizes[j] != x->sizes[i])) FALLBACK();
  }
#undef FALLBACK
  // pos_enc's dims the last of x's (e.g. (time, feat_dim) of a (batch, heads, time, feat_dim) x): its raw
  // broadcasts as it is, as the definition's aligned view (size-1 leading axes) does.
  Py_ssize_t np = tensor_ndim(pe);
  bool suffix = np <= nd;
  for (Py_ssize_t j = 0; suffix && j < np; ++j) suffix = PyTuple_GET_ITEM(pe->dims, j) == PyTuple_GET_ITEM(x->dims, nd - np + j);
  Ref pe_raw(suffix ? Py_NewRef(pe->raw) : tensor_raw_aligned(pe, x->dims, caller));
  if (!pe_raw) return nullptr;
  static PyObject *s_chunk = nullptr, *s_unflatten = nullptr, *pair_shape = nullptr, *two = nullptr,
                  *minus_one = nullptr, *minus_two = nullptr;
  if (!pair_shape) {
    two = PyLong_FromLong(2);
    minus_one = PyLong_FromLong(-1);
    minus_two = PyLong_FromLong(-2);
    if (!two || !minus_one || !minus_two) return nullptr;
    pair_shape = PyTuple_Pack(2, minus_one, two);
    if (!pair_shape) return nullptr;
  }
  // sin, cos = pe.chunk(2, dim=-1)
  PyObject* chunk_args[3] = {pe_raw.get(), two, minus_one};
  Ref halves(method(&s_chunk, "chunk", chunk_args, 3));
  if (!halves) return nullptr;
  if (!PyTuple_Check(halves.get()) || PyTuple_GET_SIZE(halves.get()) != 2) {
    PyErr_SetString(PyExc_RuntimeError, "dimtorch.apply_rope(): chunk did not give two halves");
    return nullptr;
  }
  PyObject* sin = PyTuple_GET_ITEM(halves.get(), 0);
  PyObject* cos = PyTuple_GET_ITEM(halves.get(), 1);
  // pairs = x.unflatten(-1, (-1, 2)); a, b = pairs[..., 0], pairs[..., 1]
  PyObject* unflatten_args[3] = {x->raw, minus_one, pair_shape};
  Ref pairs(method(&s_unflatten, "unflatten", unflatten_args, 3));
  if (!pairs) return nullptr;
  Ref zero(PyLong_FromLong(0)), one(PyLong_FromLong(1));
  if (!zero || !one) return nullptr;
  Ref a(backend::call3(backend::T.select, pairs.get(), minus_one, zero.get()));
  Ref b(backend::call3(backend::T.select, pairs.get(), minus_one, one.get()));
  if (!a || !b) return nullptr;
  // stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
  Ref a_cos(PyNumber_Multiply(a.get(), cos));
  if (!a_cos) return nullptr;
  Ref b_sin(PyNumber_Multiply(b.get(), sin));
  if (!b_sin) return nullptr;
  Ref first(PyNumber_Subtract(a_cos.get(), b_sin.get()));
  if (!first) return nullptr;
  Ref a_sin(PyNumber_Multiply(a.get(), sin));
  if (!a_sin) return nullptr;
  Ref b_cos(PyNumber_Multiply(b.get(), cos));
  if (!b_cos) return nullptr;
  Ref second(PyNumber_Add(a_sin.get(), b_cos.get()));
  if (!second) return nullptr;
  Ref both(PyTuple_Pack(2, first.get(), second.get()));
  if (!both) return nullptr;
  Ref stacked(backend::call2(backend::T.stack, both.get(), minus_one));
  if (!stacked) return nullptr;
  PyObject* out = backend::call2(backend::T.flatten, stacked.get(), minus_two);
  if (!out) return nullptr;
  return tensor_make(out, x->dims, x->sizes, x->sparse_dim, x->feature_dim);
}

PyMethodDef kFunctions[] = {
    {"apply_rope", DIMTORCH_OP(f_apply_rope), METH_FASTCALL | METH_KEYWORDS,
     "apply_rope(x, pos_enc, feat_dim) -> Tensor: see dimtorch.ops.positional.apply_rope; its steps without its "
     "Python here (feat_dim x's last dim)."},
    {nullptr}};

}  // namespace

bool export_ops_positional(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
