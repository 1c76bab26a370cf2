// Fast path of concat (definition: python/dimtorch/ops/concat.py): tensors in the same layout (one
// torch.cat; for dynamic dims one cat and one gather by an index cached on the out dim). Every
// other case goes to the Python definition, which owns the errors.
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

DIMTORCH_PYTHON_FALLBACK(concat_fallback, "concat")
DIMTORCH_PYTHON_FALLBACK(rf_concat_features_fallback, "_rf_concat_features")

/* The gather index of a dynamic concat (dimtorch.ops.concat._gather_index builds it from the host
   lengths), expanded to the output's shape and cached in the canonical out dim's cache of index
   raws under a key that starts with a str tag: the raw sizes, the places of the lengths' dims and
   the device. New reference. */
PyObject* concat_index(DimObject* canonical, PyObject* const* args, Py_ssize_t nargs, TensorObject* first,
                       int axis, PyObject* out_dims, const Py_ssize_t* out_sizes, PyObject* device,
                       const char* caller) {
  static PyObject* tag = nullptr;
  if (!tag && !(tag = PyUnicode_InternFromString("concat_index"))) return nullptr;
  signed char pos[kMaxDims + 1];
  int k = 0;
  if (!lengths_positions(canonical, first->dims, false, pos, &k, caller)) return nullptr;
  Py_ssize_t nd = tensor_ndim(first);
  Ref key(PyTuple_New(2 + nargs + nd + k));
  if (!key) return nullptr;
  Py_ssize_t n = 0;
  PyTuple_SET_ITEM(key.get(), n++, Py_NewRef(tag));
  PyTuple_SET_ITEM(key.get(), n++, Py_NewRef(device));
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    TensorObject* x = as_tensor(PyTuple_GET_ITEM(args[i], 0));
    PyTuple_SET_ITEM(key.get(), n++, PyLong_FromSsize_t(x->sizes[axis]));
  }
  for (Py_ssize_t j = 0; j < nd; ++j) PyTuple_SET_ITEM(key.get(), n++, PyLong_FromSsize_t(out_sizes[j]));
  for (int j = 0; j < k; ++j) PyTuple_SET_ITEM(key.get(), n++, PyLong_FromLong(pos[j]));
  for (Py_ssize_t j = 0; j < n; ++j)
    if (!PyTuple_GET_ITEM(key.get(), j)) return nullptr;
  if (!canonical->cache && !(canonical->cache = PyDict_New())) return nullptr;
  PyObject* hit = PyDict_GetItemWithError(canonical->cache, key.get());
  if (hit) return Py_NewRef(hit);
  if (PyErr_Occurred()) return nullptr;
  PyObject* builder = definition("_gather_index");
  if (!builder) return nullptr;
  // The lengths' dims in x's order, and the sources' concat dims and raw sizes.
  std::sort(pos, pos + k);
  Ref bdims(PyTuple_New(k));
  Ref cat_dims(PyList_New(nargs));
  Ref sizes(PyTuple_New(nargs));
  if (!bdims || !cat_dims || !sizes) return nullptr;
  for (int j = 0; j < k; ++j)
    PyTuple_SET_ITEM(bdims.get(), j, Py_NewRef(PyTuple_GET_ITEM(first->dims, pos[j])));
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    PyList_SET_ITEM(cat_dims.get(), i, Py_NewRef(PyTuple_GET_ITEM(args[i], 1)));
    PyTuple_SET_ITEM(sizes.get(), i, Py_NewRef(PyTuple_GET_ITEM(key.get(), 2 + i)));
  }
  Ref axis_obj(PyLong_FromLong(axis));
  if (!axis_obj) return nullptr;
  PyObject* call[7] = {reinterpret_cast<PyObject*>(canonical), cat_dims.get(), sizes.get(), bdims.get(),
                       out_dims, axis_obj.get(), device};
  Ref index(PyObject_Vectorcall(builder, call, 7, nullptr));
  if (!index) return nullptr;
  PyObject* expand_args[kMaxDims + 1];
  expand_args[0] = index.get();
  for (Py_ssize_t j = 0; j < nd; ++j) expand_args[j + 1] = PyTuple_GET_ITEM(key.get(), 2 + nargs + j);
  Ref expanded(PyObject_Vectorcall(backend::T.expand, expand_args, nd + 1, nullptr));
  if (!expanded) return nullptr;
  // The builder and torch may have let another thread in, which stored this key first: keep its.
  return Py_XNewRef(PyDict_SetDefault(canonical->cache, key.get(), expanded.get()));
}

/// concat((x, dim_x), (y, dim_y), ..., allow_broadcast=False, out_dim=None, handle_dynamic_dims=None):
/// the fast path takes tensors whose other dims are the same, in the same order and sizes, and concat
/// dims that are static (one torch.cat) or have lengths (one cat with a zero frame and one gather by the
/// cached index; out_dim not given); allow_broadcast False and handle_dynamic_dims None or True.
PyObject* f_concat(PyObject*, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  PyObject* out_dim = nullptr;
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, k);
    PyObject* value = args[nargs + k];
    if (PyUnicode_CompareWithASCIIString(key, "out_dim") == 0) {
      if (value != Py_None) out_dim = value;
    } else if (!(PyUnicode_CompareWithASCIIString(key, "allow_broadcast") == 0 && value == Py_False) &&
               !(PyUnicode_CompareWithASCIIString(key, "handle_dynamic_dims") == 0 &&
                 (value == Py_None || value == Py_True))) {
      return concat_fallback(args, nargsf, kwnames);
    }
  }
  if (nargs < 1 || nargs > kMaxDims) return concat_fallback(args, nargsf, kwnames);
  TensorObject* first = nullptr;
  int axis = -1;
  bool dynamic = false;
  Py_ssize_t total = 0;
  Ref raws(PyTuple_New(nargs));  // a tuple: one allocation, where a list makes two
  if (!raws) return nullptr;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    PyObject* pair = args[i];
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) return concat_fallback(args, nargsf, kwnames);
    PyObject* t = PyTuple_GET_ITEM(pair, 0);
    PyObject* d = PyTuple_GET_ITEM(pair, 1);
    if (!is_tensor(t) || !as_tensor(t)->raw || !is_dim(d)) return concat_fallback(args, nargsf, kwnames);
    if (!dim_is_static(d)) {
      if (!dim_has_lengths(as_dim(d))) return concat_fallback(args, nargsf, kwnames);  // size from data
      dynamic = true;
    }
    TensorObject* x = as_tensor(t);
    int a = dims_index(x->dims, d);
    if (a < 0) return concat_fallback(args, nargsf, kwnames);
    if (!first) {
      first = x;
      axis = a;
    } else {
      if (a != axis || tensor_ndim(x) != tensor_ndim(first)) return concat_fallback(args, nargsf, kwnames);
      for (Py_ssize_t j = 0; j < tensor_ndim(x); ++j)
        if (j != a && (PyTuple_GET_ITEM(x->dims, j) != PyTuple_GET_ITEM(first->dims, j) ||
                       x->sizes[j] != first->sizes[j]))
          return concat_fallback(args, nargsf, kwnames);
    }
    // (sizes summing past int64, e.g. of expanded or meta tensors: the definition's dim math says so)
    if (__builtin_add_overflow(total, x->sizes[a], &total)) return concat_fallback(args, nargsf, kwnames);
    PyTuple_SET_ITEM(raws.get(), i, Py_NewRef(x->raw));
  }
  // The out dim: dim_0 + dim_1 + ... by dim math (cached), or the given one when it fits.
  Ref sum = Ref::borrow(PyTuple_GET_ITEM(args[0], 1));
  for (Py_ssize_t i = 1; i < nargs; ++i) {
    sum = Ref(dim_derive(as_dim(sum.get()), DimOp::kConcat, 0, as_dim(PyTuple_GET_ITEM(args[i], 1)),
                         "dimtorch.concat()"));
    if (!sum) return nullptr;
  }
  if (out_dim && (dynamic || !is_dim(out_dim) || as_dim(out_dim)->size != total))
    return concat_fallback(args, nargsf, kwnames);  // a given dynamic out_dim: its lengths are checked there
  PyObject* out = out_dim ? out_dim : sum.get();
  Py_ssize_t n_out = dynamic ? dim_max_size(as_dim(out)) : total;
  if (n_out == -2) return nullptr;
  if (n_out <= 0 || total <= 0) return concat_fallback(args, nargsf, kwnames);
  Py_ssize_t nd = tensor_ndim(first);
  Ref out_dims(PyTuple_New(nd));
  if (!out_dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  for (Py_ssize_t j = 0; j < nd; ++j) {
    PyTuple_SET_ITEM(out_dims.get(), j, Py_NewRef(j == axis ? out : PyTuple_GET_ITEM(first->dims, j)));
    sizes[j] = j == axis ? n_out : first->sizes[j];
  }
  Ref axis_obj(PyLong_FromLong(axis));
  if (!axis_obj) return nullptr;
  PyObject* raw;
  if (!dynamic) {
    raw = backend::call2(backend::T.cat, raws.get(), axis_obj.get());
  } else {
    /* Each sequence's valid frames follow each other: one gather from the sources joined along
       the axis with one zero frame after them, where the index sends every frame beyond a
       sequence's new end. */
    Ref device(PyObject_GetAttr(first->raw, backend::T.s_device));
    if (!device) return nullptr;
    Ref index(concat_index(as_dim(out), args, nargs, first, axis, out_dims.get(), sizes, device.get(),
                           "dimtorch.concat()"));
    if (!index) {
      if (!PyErr_ExceptionMatches(PyExc_ValueError)) return nullptr;
      PyErr_Clear();  // lengths over a dim the tensors lack: the Python definition says so
      return concat_fallback(args, nargsf, kwnames);
    }
    Ref zero_shape(PyTuple_New(nd));
    if (!zero_shape) return nullptr;
    for (Py_ssize_t j = 0; j < nd; ++j) {
      PyObject* size = PyLong_FromSsize_t(j == axis ? 1 : first->sizes[j]);
      if (!size) return nullptr;
      PyTuple_SET_ITEM(zero_shape.get(), j, size);
    }
    Ref zero(backend::call2(backend::T.new_zeros, first->raw, zero_shape.get()));
    if (!zero) return nullptr;
    Ref parts(PyTuple_New(nargs + 1));
    if (!parts) return nullptr;
    for (Py_ssize_t i = 0; i < nargs; ++i)
      PyTuple_SET_ITEM(parts.get(), i, Py_NewRef(PyTuple_GET_ITEM(raws.get(), i)));
    PyTuple_SET_ITEM(parts.get(), nargs, zero.release());
    Ref joined(backend::call2(backend::T.cat, parts.get(), axis_obj.get()));
    if (!joined) return nullptr;
    raw = backend::call3(backend::T.gather, joined.get(), axis_obj.get(), index.get());
  }
  if (!raw) return nullptr;
  PyObject* concat_dim = PyTuple_GET_ITEM(args[0], 1);
  PyObject* feature = first->feature_dim && first->feature_dim != concat_dim ? first->feature_dim : nullptr;
  Ref t(tensor_make(raw, out_dims.get(), sizes, first->sparse_dim, feature));
  if (!t) return nullptr;
  return PyTuple_Pack(2, t.get(), out);
}

/// _rf_concat_features(*sources, allow_broadcast=False): dimtorch.rf.concat_features, concat of the
/// sources along their feature dims, the concatenated dim the result's feature dim. Each source with a
/// feature dim goes to concat's fast path (which hands what it does not take to concat's definition);
/// anything else (no feature dim, broadcasting, bad input) to this function's definition.
PyObject* f_rf_concat_features(PyObject* m, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (kwnames && (PyTuple_GET_SIZE(kwnames) != 1 || args[nargs] != Py_False ||
                  PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "allow_broadcast") != 0))
    return rf_concat_features_fallback(args, nargsf, kwnames);
  if (nargs < 1 || nargs > kMaxDims) return rf_concat_features_fallback(args, nargsf, kwnames);
  Ref pairs[kMaxDims];
  PyObject* pair_args[kMaxDims];
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    if (!is_tensor(args[i]) || !as_tensor(args[i])->feature_dim) return rf_concat_features_fallback(args, nargsf, kwnames);
    pairs[i] = Ref(PyTuple_Pack(2, args[i], as_tensor(args[i])->feature_dim));
    if (!pairs[i]) return nullptr;
    pair_args[i] = pairs[i].get();
  }
  Ref result(f_concat(m, pair_args, nargs, nullptr));
  if (!result) return nullptr;
  TensorObject* out = as_tensor(PyTuple_GET_ITEM(result.get(), 0));
  return tensor_make(Py_NewRef(out->raw), out->dims, out->sizes, out->sparse_dim, PyTuple_GET_ITEM(result.get(), 1));
}

PyMethodDef kFunctions[] = {
    {"_rf_concat_features", DIMTORCH_OP(f_rf_concat_features), METH_FASTCALL | METH_KEYWORDS,
     "_rf_concat_features(*sources, allow_broadcast=False)\n--\n\n"
     "dimtorch.rf.concat_features: concat along each source's feature_dim; the result's feature_dim is the "
     "concatenated dim. See dimtorch.ops.concat.rf_concat_features."},
    {"concat", DIMTORCH_OP(f_concat),
     METH_FASTCALL | METH_KEYWORDS,
     "concat((x, dim_x), (y, dim_y), ..., out_dim=None) -> (tensor, out_dim): see "
     "dimtorch.ops.concat.concat; static concat dims of tensors in the same layout are one torch.cat "
     "here."},
    {nullptr}};

}  // namespace

bool export_ops_concat(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
