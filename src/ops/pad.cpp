// Fast path of pad (definition: python/dimtorch/ops/pad.py): constant padding of one dim (one
// constant_pad_nd, plus one where with the cached mask for a dynamic dim). Every other case goes
// to the Python definition, which owns the errors.
#include "core/args.h"
#include "core/backend.h"
#include "core/dim.h"
#include "core/functions.h"
#include "core/mask.h"
#include "core/python_fallback.h"
#include "core/tensor.h"
#include "core/exports.h"

#include <algorithm>

namespace dimtorch {

namespace {

DIMTORCH_PYTHON_FALLBACK(pad_fallback, "pad")

/// A padding amount: an int >= 0 (not a bool).
bool pad_amount(PyObject* o, Py_ssize_t* out) {
  if (!PyLong_CheckExact(o)) return false;
  *out = PyLong_AsSsize_t(o);
  if (*out == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  return *out >= 0;
}

/// pad(x, /, *, axes, padding, out_dims=None, mode="constant", value=None, handle_dynamic_dims=None):
/// the fast path is constant padding of one static or dynamic dim by (left, right), not both 0, with
/// a Python number (or None) as value, no out_dims and handle_dynamic_dims None or True.
PyObject* f_pad(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "axes", "padding", "value", "mode", "out_dims", "handle_dynamic_dims"};
  PyObject* v[7];
  if (!parse_args(args, nargs, kwnames, names, 7, 1, 3, v, "dimtorch.pad()", 1)) {
    PyErr_Clear();
    return pad_fallback(args, nargs, kwnames);
  }
  PyObject* value = v[3] && v[3] != Py_None ? v[3] : backend::T.zero;
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !(PyFloat_CheckExact(value) || PyLong_CheckExact(value)) ||
      (v[4] && (!PyUnicode_Check(v[4]) || PyUnicode_CompareWithASCIIString(v[4], "constant") != 0)) ||
      (v[5] && v[5] != Py_None) || (v[6] && v[6] != Py_None && v[6] != Py_True))
    return pad_fallback(args, nargs, kwnames);
  PyObject* d = v[1];
  if (PyTuple_Check(d) && PyTuple_GET_SIZE(d) == 1) d = PyTuple_GET_ITEM(d, 0);
  PyObject* padding = v[2];
  if (PyTuple_Check(padding) && PyTuple_GET_SIZE(padding) == 1) padding = PyTuple_GET_ITEM(padding, 0);
  Py_ssize_t left, right, total;
  // (amounts whose sum passes int64 go to the definition, whose dim math says so)
  if (!is_dim(d) || !PyTuple_Check(padding) || PyTuple_GET_SIZE(padding) != 2 ||
      !pad_amount(PyTuple_GET_ITEM(padding, 0), &left) || !pad_amount(PyTuple_GET_ITEM(padding, 1), &right) ||
      __builtin_add_overflow(left, right, &total) || total == 0)
    return pad_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  int a = dims_index(x->dims, d);
  DimObject* dim = as_dim(d);
  bool dynamic = dim_has_lengths(dim);
  if (a < 0 || (!dynamic && dim->size < 0)) return pad_fallback(args, nargs, kwnames);
  Py_ssize_t nd = tensor_ndim(x);
  signed char pos[kMaxDims + 1];
  int k = 0;
  if (dynamic && !lengths_positions(dim, x->dims, true, pos, &k, "dimtorch.pad()")) {
    PyErr_Clear();  // lengths over a dim x lacks: the Python definition says so
    return pad_fallback(args, nargs, kwnames);
  }
  // The out dim by dim math (cached on the dim): the same object as left + dim + right.
  Ref out_dim(dim_derive(dim, DimOp::kAdd, total, nullptr, "dimtorch.pad()"));
  if (!out_dim) return nullptr;
  Py_ssize_t n_out = dynamic ? dim_max_size(as_dim(out_dim.get())) : as_dim(out_dim.get())->size;
  if (n_out < 0) return n_out == -2 ? nullptr : pad_fallback(args, nargs, kwnames);
  /* constant_pad_nd takes (left, right) pairs from the last axis. For a dynamic dim the right
     amount makes the axis n_out long: negative where x's raw axis is longer than its longest
     sequence (constant_pad_nd crops then). */
  Py_ssize_t raw_right = dynamic ? n_out - left - x->sizes[a] : right;
  Py_ssize_t after = nd - 1 - a;
  Ref pad_list(PyTuple_New(2 * after + 2));
  if (!pad_list) return nullptr;
  for (Py_ssize_t j = 0; j < 2 * after; ++j) PyTuple_SET_ITEM(pad_list.get(), j, Py_NewRef(backend::T.zero));
  PyObject* l_obj = PyLong_FromSsize_t(left);
  PyObject* r_obj = PyLong_FromSsize_t(raw_right);
  if (!l_obj || !r_obj) {
    Py_XDECREF(l_obj);
    Py_XDECREF(r_obj);
    return nullptr;
  }
  PyTuple_SET_ITEM(pad_list.get(), 2 * after, l_obj);
  PyTuple_SET_ITEM(pad_list.get(), 2 * after + 1, r_obj);
  Ref raw(backend::call3(backend::T.constant_pad_nd, x->raw, pad_list.get(), value));
  if (!raw) return nullptr;
  if (dynamic) {
    /* F.pad put `value` in the left frames; the frames after each sequence's own end (x's padding
       moved right, and the right padding) are where the mask of dim + left is False. That mask
       is cached on the derived dim per layout and device: one where per call. */
    Ref shifted(dim_derive(dim, DimOp::kAdd, left, nullptr, "dimtorch.pad()"));
    if (!shifted) return nullptr;
    Ref device(PyObject_GetAttr(raw.get(), backend::T.s_device));
    if (!device) return nullptr;
    Ref mask(dim_cached_raw(as_dim(shifted.get()), MaskKind::kMask, pos, static_cast<int>(nd), n_out,
                            device.get()));
    if (!mask) return nullptr;
    raw = Ref(backend::call3(backend::T.where, mask.get(), raw.get(), value));
    if (!raw) return nullptr;
  }
  Ref out_dims(PyTuple_New(nd));
  if (!out_dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  for (Py_ssize_t j = 0; j < nd; ++j) {
    PyTuple_SET_ITEM(out_dims.get(), j, Py_NewRef(j == a ? out_dim.get() : PyTuple_GET_ITEM(x->dims, j)));
    sizes[j] = j == a ? n_out : x->sizes[j];
  }
  PyObject* feature = x->feature_dim != d ? x->feature_dim : nullptr;
  Ref t(tensor_make(raw.release(), out_dims.get(), sizes, x->sparse_dim, feature));
  if (!t) return nullptr;
  Ref out_list(PyList_New(1));  // RETURNN frontend's convention: a list of out dims
  if (!out_list) return nullptr;
  PyList_SET_ITEM(out_list.get(), 0, out_dim.release());
  return PyTuple_Pack(2, t.get(), out_list.get());
}

PyMethodDef kFunctions[] = {
    {"pad", DIMTORCH_OP(f_pad),
     METH_FASTCALL | METH_KEYWORDS,
     "pad(x, /, *, axes, padding, out_dims=None, mode='constant', value=None, handle_dynamic_dims=None) "
     "-> (tensor, [out_dim, ...]): see "
     "dimtorch.ops.pad.pad; constant padding of one dim is one constant_pad_nd here (and one where "
     "with the cached mask for a dynamic dim)."},
    {nullptr}};

}  // namespace

bool export_ops_pad(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
