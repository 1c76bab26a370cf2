// Fast paths of the sort family (definitions: python/dimtorch/ops/sort.py): top_k over a static dim
// (one topk), cumsum (one cumsum), search_sorted, top_k_mask (topk + scatter_). Every other case goes to
// the Python definition (python_fallback.h).
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

// ---- search_sorted --------------------------------------------------------------------------------

DIMTORCH_PYTHON_FALLBACK(search_sorted_fallback, "search_sorted")

/// search_sorted(sorted_seq, values, *, axis, side="left", out_dtype="int32"): the fast path searches
/// one sorted sequence (sorted_seq over axis alone, static) for values of its dtype over any dims: one
/// searchsorted (of contiguous raws, as the definition), the result over values' dims, sparse_dim axis.
PyObject* f_search_sorted(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"sorted_seq", "values", "axis", "side", "out_dtype"};
  PyObject* v[5];
  if (!parse_args(args, nargs, kwnames, names, 5, 2, 3, v, "dimtorch.search_sorted()")) {
    PyErr_Clear();
    return search_sorted_fallback(args, nargs, kwnames);
  }
#define FALLBACK() return search_sorted_fallback(args, nargs, kwnames)
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_tensor(v[1]) || !as_tensor(v[1])->raw || !is_dim(v[2]))
    FALLBACK();
  TensorObject* seq = as_tensor(v[0]);
  TensorObject* values = as_tensor(v[1]);
  PyObject* axis = v[2];
  if (tensor_ndim(seq) != 1 || PyTuple_GET_ITEM(seq->dims, 0) != axis || dim_has_lengths(as_dim(axis)) ||
      tensor_ndim(values) == 0)
    FALLBACK();
  static PyObject *s_left = nullptr, *s_right = nullptr;
  PyObject* left = interned(&s_left, "left");
  PyObject* right = interned(&s_right, "right");
  if (!left || !right) return nullptr;
  PyObject* side = v[3] ? v[3] : left;
  if (!PyUnicode_CheckExact(side) ||
      (PyUnicode_Compare(side, left) != 0 && PyUnicode_Compare(side, right) != 0))
    FALLBACK();
  bool int32 = true;
  if (v[4]) {
    if (!PyUnicode_CheckExact(v[4])) FALLBACK();
    if (PyUnicode_CompareWithASCIIString(v[4], "int64") == 0) int32 = false;
    else if (PyUnicode_CompareWithASCIIString(v[4], "int32") != 0) FALLBACK();
  }
  PyObject* dtype = backend::raw_dtype_name(seq->raw);
  if (!dtype) return nullptr;
  PyObject* values_dtype = backend::raw_dtype_name(values->raw);
  if (!values_dtype) return nullptr;
  if (dtype != values_dtype ||
      (!backend::is_floating_dtype_name(dtype) && !backend::is_integer_dtype_name(dtype)))
    FALLBACK();  // (other dtypes are promoted to a common one there)
#undef FALLBACK
  static PyObject* s_contiguous = nullptr;
  PyObject* name = interned(&s_contiguous, "contiguous");
  if (!name) return nullptr;
  Ref seq_raw(PyObject_CallMethodNoArgs(seq->raw, name));
  Ref values_raw(seq_raw ? PyObject_CallMethodNoArgs(values->raw, name) : nullptr);
  static PyObject* kw = nullptr;
  if (!values_raw || (!kw && !(kw = Py_BuildValue("(ss)", "side", "out_int32")))) return nullptr;
  PyObject* call_args[4] = {seq_raw.get(), values_raw.get(), side, int32 ? Py_True : Py_False};
  PyObject* out = PyObject_Vectorcall(backend::T.searchsorted, call_args, 2, kw);
  if (!out) return nullptr;
  return tensor_make(out, values->dims, values->sizes, axis, nullptr);
}

// ---- top_k_mask -------------------------------------------------------------------------------

DIMTORCH_PYTHON_FALLBACK(top_k_mask_fallback, "top_k_mask")

/// top_k_mask(values, *, axis, k): the fast path (an int k >= 1; a dynamic axis of a float values whose
/// lengths' dims are values' own) as the definition: the padding of a dynamic axis set to -inf by the
/// dim's cached mask, one topk, one bool zeros scattered True at its indices, and with the mask.
PyObject* f_top_k_mask(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"values", "axis", "k"};
  const char* caller = "dimtorch.top_k_mask()";
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 1, 3, v, caller)) {
    PyErr_Clear();
    return top_k_mask_fallback(args, nargs, kwnames);
  }
#define FALLBACK() return top_k_mask_fallback(args, nargs, kwnames)
  Py_ssize_t k;
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(v[1]) || !exact_int(v[2], &k) || k < 1) FALLBACK();
  TensorObject* x = as_tensor(v[0]);
  DimObject* axis = as_dim(v[1]);
  int a = dims_index(x->dims, v[1]);
  if (a < 0) FALLBACK();
  Py_ssize_t nd = tensor_ndim(x);
  bool dynamic = dim_has_lengths(axis);
  signed char pos[kMaxDims + 1];
  int n_pos = 0;
  if (dynamic) {
    PyObject* dtype = backend::raw_dtype_name(x->raw);
    if (!dtype) return nullptr;
    if (!backend::is_floating_dtype_name(dtype)) FALLBACK();  // (ints: the definition's iinfo minimum)
    if (!lengths_positions(axis, x->dims, true, pos, &n_pos, caller)) {
      PyErr_Clear();
      FALLBACK();
    }
  }
#undef FALLBACK
  static PyObject* s_bool = nullptr;
  PyObject* bool_name = interned(&s_bool, "bool");
  PyObject* bool_dtype = bool_name ? backend::dtype_from(bool_name, caller) : nullptr;
  if (!bool_dtype) return nullptr;
  Ref raw = Ref::borrow(x->raw);
  Ref valid;
  if (dynamic) {
    Ref device(PyObject_GetAttr(x->raw, backend::T.s_device));
    if (!device) return nullptr;
    valid = Ref(dim_cached_raw(axis, MaskKind::kMask, pos, static_cast<int>(nd), x->sizes[a], device.get()));
    if (!valid) return nullptr;
    raw = Ref(backend::call3(backend::T.where, valid.get(), x->raw, backend::T.float_neg_inf));
    if (!raw) return nullptr;
  }
  Ref a_obj(PyLong_FromLong(a));
  Ref k_obj(PyLong_FromSsize_t(std::min(k, x->sizes[a])));
  Ref shape(size_tuple(x->sizes, nd));
  if (!a_obj || !k_obj || !shape) return nullptr;
  Ref top(backend::call3(backend::T.topk, raw.get(), k_obj.get(), a_obj.get()));
  if (!top) return nullptr;
  if (!PyTuple_Check(top.get()) || PyTuple_GET_SIZE(top.get()) != 2) {
    PyErr_SetString(PyExc_RuntimeError, "dimtorch.top_k_mask(): topk did not return (values, indices)");
    return nullptr;
  }
  static PyObject* dtype_kw = nullptr;
  if (!dtype_kw && !(dtype_kw = Py_BuildValue("(s)", "dtype"))) return nullptr;
  PyObject* zeros_args[3] = {raw.get(), shape.get(), bool_dtype};
  Ref zeros(PyObject_Vectorcall(backend::T.new_zeros, zeros_args, 2, dtype_kw));
  if (!zeros) return nullptr;
  PyObject* scatter_args[4] = {zeros.get(), a_obj.get(), PyTuple_GET_ITEM(top.get(), 1), Py_True};
  Ref mask(PyObject_Vectorcall(backend::T.scatter_, scatter_args, 4, nullptr));
  if (!mask) return nullptr;
  if (dynamic) {
    mask = Ref(backend::call2(backend::T.logical_and, mask.get(), valid.get()));
    if (!mask) return nullptr;
  }
  return tensor_make(mask.release(), x->dims, x->sizes, nullptr, nullptr);
}

#define FASTCALL_KW(fn) DIMTORCH_OP(fn), METH_FASTCALL | METH_KEYWORDS

PyMethodDef kFunctions[] = {
    {"top_k", FASTCALL_KW(f_top_k),
     "top_k(x, /, *, axis, k=None, k_dim=None, sorted=True) -> (values, indices, k_dim): see "
     "dimtorch.ops.sort.top_k."},
    {"cumsum", FASTCALL_KW(f_cumsum),
     "cumsum(x, /, *, spatial_dim=None, axis=None) -> Tensor: see dimtorch.ops.sort.cumsum; one cumsum here (and one where with the cached mask for a dynamic axis)."},
    {"top_k_mask", FASTCALL_KW(f_top_k_mask),
     "top_k_mask(values, *, axis, k) -> Tensor: see dimtorch.ops.sort.top_k_mask; one topk and one scatter_ here."},
    {"search_sorted", FASTCALL_KW(f_search_sorted),
     "search_sorted(sorted_seq, values, *, axis, side='left', out_dtype='int32') -> Tensor: see "
     "dimtorch.ops.sort.search_sorted; one searchsorted here for one static sorted sequence."},
    {nullptr}};

#undef FASTCALL_KW

}  // namespace

bool export_ops_sort(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
