// Fast path of label_smoothing (definition: python/dimtorch/ops/label_smoothing.py) for a number smoothing
// over a static axis of >= 2 entries: float probabilities (one mul, one in-place add), or int64 labels with
// that axis as their sparse_dim (smooth_one_hot's number path: labels out of range sent to an extra column,
// one full, one scatter_, the column cut off). Every other call (a Tensor smoothing, other dtypes, every
// error) goes to the Python definition.
#include "core/args.h"
#include "core/backend.h"
#include "core/dim.h"
#include "core/exports.h"
#include "core/functions.h"
#include "core/python_fallback.h"
#include "core/tensor.h"
#include "ops/fast_path_util.h"

#include <algorithm>

namespace dimtorch {

namespace {

DIMTORCH_PYTHON_FALLBACK(label_smoothing_fallback, "label_smoothing")

/// smooth_one_hot(labels, label_prob=1 - smoothing) of int64 labels over their static sparse dim of n >= 2
/// entries, as the definition computes it (its number path).
PyObject* smooth_one_hot_common(TensorObject* labels, PyObject* axis, double label_prob, const char* caller) {
  Py_ssize_t n = as_dim(axis)->size;
  Py_ssize_t nd = tensor_ndim(labels);
  double other = (1.0 - label_prob) / static_cast<double>(n - 1);
  Ref n_obj(PyLong_FromSsize_t(n));
  Ref low(n_obj ? PyObject_RichCompare(labels->raw, backend::T.zero, Py_GE) : nullptr);
  Ref high(low ? PyObject_RichCompare(labels->raw, n_obj.get(), Py_LT) : nullptr);
  Ref in_range(high ? backend::call2(backend::T.logical_and, low.get(), high.get()) : nullptr);
  Ref index(in_range ? backend::call3(backend::T.where, in_range.get(), labels->raw, n_obj.get()) : nullptr);
  static PyObject* last = nullptr;
  if (!index || (!last && !(last = PyLong_FromLong(-1)))) return nullptr;
  index = Ref(backend::call2(backend::T.unsqueeze, index.get(), last));
  if (!index) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  std::copy(labels->sizes, labels->sizes + nd, sizes);
  sizes[nd] = n + 1;  // (an extra column takes the labels out of range)
  Ref shape(size_tuple(sizes, nd + 1));
  Ref fill(PyFloat_FromDouble(other));
  Ref device(PyObject_GetAttr(labels->raw, backend::T.s_device));
  if (!shape || !fill || !device) return nullptr;
  static PyObject* kwnames = nullptr;
  if (!kwnames && !(kwnames = Py_BuildValue("(ss)", "dtype", "device"))) return nullptr;
  PyObject* full_args[4] = {shape.get(), fill.get(), backend::T.float32, device.get()};
  Ref out(PyObject_Vectorcall(backend::T.full, full_args, 2, kwnames));
  Ref value(out ? PyFloat_FromDouble(label_prob) : nullptr);
  if (!value) return nullptr;
  static PyObject* s_scatter_ = nullptr;
  PyObject* scatter_ = fast_path::interned(&s_scatter_, "scatter_");
  if (!scatter_) return nullptr;
  PyObject* scatter_args[4] = {out.get(), last, index.get(), value.get()};
  Ref scattered(PyObject_VectorcallMethod(scatter_, scatter_args, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr));
  if (!scattered) return nullptr;
  Ref raw(fast_path::narrowed(scattered.get(), static_cast<int>(nd), 0, n));
  if (!raw) return nullptr;
  Ref dims(PyTuple_New(nd + 1));
  if (!dims) return nullptr;
  for (Py_ssize_t j = 0; j < nd; ++j) PyTuple_SET_ITEM(dims.get(), j, Py_NewRef(PyTuple_GET_ITEM(labels->dims, j)));
  PyTuple_SET_ITEM(dims.get(), nd, Py_NewRef(axis));
  sizes[nd] = n;
  (void)caller;
  return tensor_make(raw.release(), dims.get(), sizes, nullptr, axis);
}

/// label_smoothing(prob, smoothing, *, axis=None) -> Tensor.
PyObject* f_label_smoothing(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"prob", "smoothing", "axis"};
  const char* caller = "dimtorch.label_smoothing()";
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 2, 2, v, caller)) {
    PyErr_Clear();
    return label_smoothing_fallback(args, nargs, kwnames);
  }
#define FALLBACK() return label_smoothing_fallback(args, nargs, kwnames)
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !(PyFloat_CheckExact(v[1]) || PyLong_CheckExact(v[1])))
    FALLBACK();
  double smoothing;
  if (PyFloat_CheckExact(v[1])) {
    smoothing = PyFloat_AS_DOUBLE(v[1]);
  } else {  // an int exactly a double (Python divides larger ints exactly first)
    long long i = PyLong_AsLongLong(v[1]);
    if ((i == -1 && PyErr_Occurred()) || i > (1LL << 53) || i < -(1LL << 53)) {
      PyErr_Clear();
      FALLBACK();
    }
    smoothing = static_cast<double>(i);
  }
  TensorObject* x = as_tensor(v[0]);
  PyObject* axis = v[2] && v[2] != Py_None ? v[2] : (x->feature_dim ? x->feature_dim : x->sparse_dim);
  if (!axis || !is_dim(axis) || dim_has_lengths(as_dim(axis)) || as_dim(axis)->size < 2) FALLBACK();
  Py_ssize_t n = as_dim(axis)->size;
  PyObject* dtype = backend::raw_dtype_name(x->raw);
  if (!dtype) return nullptr;
  if (x->sparse_dim && backend::is_integer_dtype_name(dtype)) {  // int labels: smooth_one_hot
    // (the sparse dim also a dim of the labels: the result would hold it twice; the definition says so)
    if (axis != x->sparse_dim || PyUnicode_CompareWithASCIIString(dtype, "int64") != 0 ||
        tensor_ndim(x) + 1 > kMaxDims || dims_index(x->dims, axis) >= 0)
      FALLBACK();
    return smooth_one_hot_common(x, axis, 1.0 - smoothing, caller);
  }
  if (!backend::is_floating_dtype_name(dtype) || dims_index(x->dims, axis) < 0) FALLBACK();
#undef FALLBACK
  double floor = smoothing / static_cast<double>(n - 1);
  Ref factor(PyFloat_FromDouble(1.0 - static_cast<double>(n) * floor));
  Ref floor_obj(PyFloat_FromDouble(floor));
  if (!factor || !floor_obj) return nullptr;
  // in place on the product (its backward needs neither): one allocation fewer than two ops
  Ref product(PyNumber_Multiply(x->raw, factor.get()));
  if (!product) return nullptr;
  static PyObject* s_add_ = nullptr;
  PyObject* add_ = fast_path::interned(&s_add_, "add_");
  if (!add_) return nullptr;
  PyObject* add_args[2] = {product.get(), floor_obj.get()};
  PyObject* raw = PyObject_VectorcallMethod(add_, add_args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
  if (!raw) return nullptr;
  return tensor_make(raw, x->dims, x->sizes, nullptr, x->feature_dim);
}

PyMethodDef kFunctions[] = {
    {"label_smoothing", DIMTORCH_OP(f_label_smoothing), METH_FASTCALL | METH_KEYWORDS,
     "label_smoothing(prob, smoothing, *, axis=None) -> Tensor: see dimtorch.ops.label_smoothing.label_smoothing; "
     "a number smoothing of float probabilities or int64 labels is computed here."},
    {nullptr}};

}  // namespace

bool export_ops_label_smoothing(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
