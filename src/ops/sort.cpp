// Fast paths of the sort family (definitions: python/dimtorch/ops/sort.py): top_k over a static dim
// (one topk), cumsum (one cumsum). Every other case goes to the Python definition (python_fallback.h).
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

namespace dimtorch {

namespace {

using namespace fast_path;

// ---- top_k ------------------------------------------------------------------------------------

DIMTORCH_PYTHON_FALLBACK(top_k_fallback, "top_k")

/// top_k(x, /, *, axis, k=None, k_dim=None, sorted=True): the fast path ranks one dim without
/// lengths (nothing to mask) with an int k within its size (or a static k_dim giving it), for int
/// and float dtypes: one topk; k_dim is the given one or a new static Dim. Always sorted.
PyObject* f_top_k(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "axis", "k", "k_dim", "sorted"};
  PyObject* v[5];
  if (!parse_args(args, nargs, kwnames, names, 5, 1, 2, v, "dimtorch.top_k()", 1)) {
    PyErr_Clear();
    return top_k_fallback(args, nargs, kwnames);
  }
  PyObject* given_k_dim = v[3] && v[3] != Py_None ? v[3] : nullptr;
  Py_ssize_t k = -1;
  if (v[2] && v[2] != Py_None && !exact_int(v[2], &k)) return top_k_fallback(args, nargs, kwnames);
  if (given_k_dim) {
    if (!is_dim(given_k_dim) || dim_has_lengths(as_dim(given_k_dim)) || as_dim(given_k_dim)->size < 1 ||
        (k >= 0 && k != as_dim(given_k_dim)->size))
      return top_k_fallback(args, nargs, kwnames);
    k = as_dim(given_k_dim)->size;
  }
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(v[1]) || dim_has_lengths(as_dim(v[1])) || k < 0)
    return top_k_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  PyObject* axis = v[1];
  int a = dims_index(x->dims, axis);
  if (a < 0 || k < 1 || k > x->sizes[a]) return top_k_fallback(args, nargs, kwnames);
  PyObject* dtype = backend::raw_dtype_name(x->raw);
  if (!dtype) return nullptr;
  if (!backend::is_floating_dtype_name(dtype) && !backend::is_integer_dtype_name(dtype))
    return top_k_fallback(args, nargs, kwnames);
  Ref k_dim;
  if (given_k_dim) {
    k_dim = Ref::borrow(given_k_dim);
  } else {
    static PyObject* labels[16] = {};  // "top1".."top15", made once each
    Ref label = k < 16 && labels[k] ? Ref::borrow(labels[k]) : Ref(PyUnicode_FromFormat("top%zd", k));
    if (!label) return nullptr;
    if (k < 16 && !labels[k]) labels[k] = Py_NewRef(label.get());
    k_dim = Ref(new_static_dim(k, label.get()));
  }
  Ref a_obj(PyLong_FromLong(a));
  Ref k_obj(PyLong_FromSsize_t(k));
  if (!k_dim || !a_obj || !k_obj) return nullptr;
  PyObject* call[3] = {x->raw, k_obj.get(), a_obj.get()};
  Ref result(PyObject_Vectorcall(backend::T.topk, call, 3, nullptr));
  if (!result) return nullptr;
  PyObject* pair = result.get();  // torch.return_types.topk: a tuple (values, indices)
  if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
    PyErr_SetString(PyExc_RuntimeError, "dimtorch.top_k(): topk did not return (values, indices)");
    return nullptr;
  }
  Ref dims(dims_replaced(x->dims, a, k_dim.get()));
  if (!dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  std::copy(x->sizes, x->sizes + tensor_ndim(x), sizes);
  sizes[a] = k;
  PyObject* feature = x->feature_dim != axis ? x->feature_dim : nullptr;
  Ref values(tensor_make(Py_NewRef(PyTuple_GET_ITEM(pair, 0)), dims.get(), sizes, x->sparse_dim, feature));
  if (!values) return nullptr;
  Ref indices(tensor_make(Py_NewRef(PyTuple_GET_ITEM(pair, 1)), dims.get(), sizes, axis, nullptr));
  if (!indices) return nullptr;
  return PyTuple_Pack(3, values.get(), indices.get(), k_dim.get());
}

// ---- cumsum -----------------------------------------------------------------------------------

DIMTORCH_PYTHON_FALLBACK(cumsum_fallback, "cumsum")

/// cumsum(x, /, *, spatial_dim=None, axis=None) (one of the two): one cumsum over the raw axis; a
/// dynamic axis as long as its longest sequence gets its padding zeroed first (one where with the
/// mask cached on the dim), as the definition does.
PyObject* f_cumsum(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "spatial_dim", "axis"};
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 1, 1, v, "dimtorch.cumsum()", 1)) {
    PyErr_Clear();
    return cumsum_fallback(args, nargs, kwnames);
  }
  PyObject* spatial = v[1] == Py_None ? nullptr : v[1];
  PyObject* axis = v[2] == Py_None ? nullptr : v[2];
  if (spatial && axis && spatial != axis) return cumsum_fallback(args, nargs, kwnames);
  v[1] = spatial ? spatial : axis;
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !v[1] || !is_dim(v[1]))
    return cumsum_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  int a = dims_index(x->dims, v[1]);
  if (a < 0) return cumsum_fallback(args, nargs, kwnames);
  Ref raw = Ref::borrow(x->raw);
  if (dim_has_lengths(as_dim(v[1]))) {
    Py_ssize_t longest = dim_max_size(as_dim(v[1]));
    if (longest == -2) return nullptr;
    if (longest != x->sizes[a]) return cumsum_fallback(args, nargs, kwnames);  // (frames beyond it: dropped there)
    raw = Ref(masked_raw(x, &a, 1, backend::T.zero, nullptr, "dimtorch.cumsum()"));
    if (!raw) {  // lengths over dims x lacks: the definition says so
      PyErr_Clear();
      return cumsum_fallback(args, nargs, kwnames);
    }
  }
  Ref axis_arg(PyLong_FromLong(a));
  if (!axis_arg) return nullptr;
  PyObject* out = backend::call2(backend::T.cumsum, raw.get(), axis_arg.get());
  if (!out) return nullptr;
  return tensor_make(out, x->dims, x->sizes, x->sparse_dim, x->feature_dim);
}

#define FASTCALL_KW(fn) DIMTORCH_OP(fn), METH_FASTCALL | METH_KEYWORDS

PyMethodDef kFunctions[] = {
    {"top_k", FASTCALL_KW(f_top_k),
     "top_k(x, /, *, axis, k=None, k_dim=None, sorted=True) -> (values, indices, k_dim): see "
     "dimtorch.ops.sort.top_k."},
    {"cumsum", FASTCALL_KW(f_cumsum),
     "cumsum(x, /, *, spatial_dim=None, axis=None) -> Tensor: see dimtorch.ops.sort.cumsum; one cumsum here (and one where with the cached mask for a dynamic axis)."},
    {nullptr}};

#undef FASTCALL_KW

}  // namespace

bool export_ops_sort(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
