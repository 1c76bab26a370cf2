// Fast path of where_nested (definition: python/dimtorch/ops/nested.py) for its common call, a flat state:
// x and y tuples (or lists) of Tensors, pair by pair where(condition, x_i, y_i) as dt.where does it (no
// outer broadcast). The condition is aligned once for all pairs over the same dims (one view, not one per
// pair). Nested structures, pairs that need an outer broadcast and every error go to the Python definition.
#include "core/args.h"
#include "core/backend.h"
#include "core/exports.h"
#include "core/functions.h"
#include "core/python_fallback.h"
#include "core/tensor.h"
#include "ops/elementwise.h"

namespace dimtorch {

namespace {

DIMTORCH_PYTHON_FALLBACK(where_nested_fallback, "where_nested")

/// Whether two Tensors have the same dims (by identity) and sizes.
bool same_layout(TensorObject* a, TensorObject* b) {
  Py_ssize_t n = tensor_ndim(a);
  if (tensor_ndim(b) != n) return false;
  for (Py_ssize_t i = 0; i < n; ++i)
    if (PyTuple_GET_ITEM(a->dims, i) != PyTuple_GET_ITEM(b->dims, i) || a->sizes[i] != b->sizes[i]) return false;
  return true;
}

/// The sparse dim of where(condition, a, b) (dt.where's rule: the values' one when both share it).
PyObject* values_sparse(TensorObject* a, TensorObject* b) {
  return a->sparse_dim && a->sparse_dim == b->sparse_dim ? a->sparse_dim : nullptr;
}

/// where_nested(x, y, *, condition, condition_cpu=None).
PyObject* f_where_nested(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "y", "condition", "condition_cpu"};
  static const char* const where_names[] = {"condition", "true_value", "false_value"};
  const char* caller = "dimtorch.where_nested()";
  PyObject* v[4];
  if (!parse_args(args, nargs, kwnames, names, 4, 2, 3, v, caller)) {
    PyErr_Clear();
    return where_nested_fallback(args, nargs, kwnames);
  }
#define FALLBACK() return where_nested_fallback(args, nargs, kwnames)
  PyObject *x = v[0], *y = v[1], *cond = v[2];
  bool is_tuple = PyTuple_CheckExact(x);
  if ((!is_tuple && !PyList_CheckExact(x)) || Py_TYPE(y) != Py_TYPE(x) || !is_tensor(cond) || !as_tensor(cond)->raw)
    FALLBACK();
  Py_ssize_t n = PySequence_Fast_GET_SIZE(x);
  if (PySequence_Fast_GET_SIZE(y) != n) FALLBACK();
  PyObject** xs = PySequence_Fast_ITEMS(x);
  PyObject** ys = PySequence_Fast_ITEMS(y);
  for (Py_ssize_t i = 0; i < n; ++i)
    if (!is_tensor(xs[i]) || !is_tensor(ys[i]) || !as_tensor(xs[i])->raw || !as_tensor(ys[i])->raw) FALLBACK();
  Ref out(is_tuple ? PyTuple_New(n) : PyList_New(n));
  if (!out) return nullptr;
  Aligned first;  // the first pair's alignment; later pairs over its dims reuse its condition raw
  TensorObject *a0 = nullptr, *b0 = nullptr;
  bool values_raw = false;  // whether the first pair's values went to torch unaligned
  for (Py_ssize_t i = 0; i < n; ++i) {
    TensorObject* a = as_tensor(xs[i]);
    TensorObject* b = as_tensor(ys[i]);
    PyObject* raw;
    PyObject* out_dims;
    const Py_ssize_t* sizes;
    PyObject* feature;
    Aligned al;
    if (a0 && values_raw && same_layout(a, a0) && same_layout(b, a0) && same_layout(b0, a0) &&
        a->feature_dim == a0->feature_dim && b->feature_dim == a0->feature_dim && b0->feature_dim == a0->feature_dim) {
      // (the same operand dims, sizes and markers as the first pair: the same alignment, the values as they are)
      raw = backend::call3(backend::T.where, first.args[0].get(), a->raw, b->raw);
      out_dims = first.out_dims;
      sizes = first.sizes;
      feature = first.feature_dim;
    } else {
      Aligned& use = a0 ? al : first;
      PyObject* ops[3] = {cond, xs[i], ys[i]};
      if (!align_operands(ops, 3, false, false, caller, where_names, &use)) {
        PyErr_Clear();  // an outer broadcast (or an error): the definition's
        FALLBACK();
      }
      if (!a0) {
        a0 = a;
        b0 = b;
        values_raw = first.args[1].get() == a->raw && first.args[2].get() == b->raw;
      }
      raw = backend::call3(backend::T.where, use.args[0].get(), use.args[1].get(), use.args[2].get());
      out_dims = use.out_dims;
      sizes = use.sizes;
      feature = use.feature_dim;
    }
    if (!raw) return nullptr;
    PyObject* t = tensor_make(raw, out_dims, sizes, values_sparse(a, b), feature);
    if (!t) return nullptr;
    if (is_tuple) PyTuple_SET_ITEM(out.get(), i, t);
    else PyList_SET_ITEM(out.get(), i, t);
  }
#undef FALLBACK
  return out.release();
}

PyMethodDef kFunctions[] = {
    {"where_nested", DIMTORCH_OP(f_where_nested), METH_FASTCALL | METH_KEYWORDS,
     "where_nested(x, y, *, condition, condition_cpu=None): see dimtorch.ops.nested.where_nested; a flat "
     "tuple or list of Tensors is one where per pair here (the condition aligned once)."},
    {nullptr}};

}  // namespace

bool export_ops_nested(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
