// merge_dims fast path: adjacent static dims in order merge by one reshape; every other case
// (permuted or dynamic dims, bad input) is handled by the Python definition it falls back to.
#include "args.h"
#include "backend.h"
#include "dim.h"
#include "tensor.h"

namespace dimtorch {

namespace {

PyObject* fallback(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static PyObject* fn = nullptr;
  if (!fn) {
    Ref mod(PyImport_ImportModule("dimtorch._shape_ops"));
    if (!mod) return nullptr;
    fn = PyObject_GetAttrString(mod.get(), "merge_dims");
    if (!fn) return nullptr;
  }
  return PyObject_Vectorcall(fn, args, nargs, kwnames);
}

PyObject* f_merge_dims(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "dims", "out_dim"};
  PyObject* v[3];
  if (!parse_args(args, nargs, kwnames, names, 3, 1, 2, v, "dimtorch.merge_dims()") ||
      !is_tensor(v[0]) || !as_tensor(v[0])->raw || !PyTuple_Check(v[1])) {
    PyErr_Clear();
    return fallback(args, nargs, kwnames);
  }
  TensorObject* x = as_tensor(v[0]);
  PyObject* dims = v[1];
  PyObject* out_dim = v[2] && v[2] != Py_None ? v[2] : nullptr;
  Py_ssize_t n = PyTuple_GET_SIZE(dims), nd = tensor_ndim(x);
  if (n == 0 || n > nd) return fallback(args, nargs, kwnames);
  // Fast path: static dims, adjacent in x and in the given order; any doubt goes to Python.
  int first = is_dim(PyTuple_GET_ITEM(dims, 0)) ? dims_index(x->dims, PyTuple_GET_ITEM(dims, 0)) : -1;
  if (first < 0 || first + n > nd) return fallback(args, nargs, kwnames);
  Py_ssize_t total = 1;
  for (Py_ssize_t j = 0; j < n; ++j) {
    PyObject* d = PyTuple_GET_ITEM(dims, j);
    if (PyTuple_GET_ITEM(x->dims, first + j) != d || !dim_is_static(d))
      return fallback(args, nargs, kwnames);
    total *= x->sizes[first + j];
  }
  Ref out;
  if (out_dim) {
    if (!is_dim(out_dim) || as_dim(out_dim)->size != total || dims_index(x->dims, out_dim) >= 0)
      return fallback(args, nargs, kwnames);
    out = Ref::borrow(out_dim);
  } else {
    std::string name;
    for (Py_ssize_t j = 0; j < n; ++j) {
      DimObject* d = as_dim(PyTuple_GET_ITEM(dims, j));
      name += (j ? "*" : "") + (d->name ? to_std_string(d->name) : std::string("None"));
    }
    Ref size(PyLong_FromSsize_t(total));
    Ref py_name(PyUnicode_FromString(name.c_str()));
    if (!size || !py_name) return nullptr;
    out = Ref(PyObject_CallFunctionObjArgs(reinterpret_cast<PyObject*>(&DimType), size.get(),
                                           py_name.get(), nullptr));
    if (!out) return nullptr;
  }
  Py_ssize_t out_nd = nd - n + 1;
  Ref out_dims(PyTuple_New(out_nd));
  if (!out_dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  PyObject* call[kMaxDims + 1];
  call[0] = x->raw;
  Py_ssize_t k = 0;
  for (Py_ssize_t i = 0; i < nd; ++i) {
    if (i > first && i < first + n) continue;
    PyObject* d = i == first ? out.get() : PyTuple_GET_ITEM(x->dims, i);
    sizes[k] = i == first ? total : x->sizes[i];
    PyTuple_SET_ITEM(out_dims.get(), k, Py_NewRef(d));
    call[k + 1] = PyLong_FromSsize_t(sizes[k]);
    ++k;
  }
  // reshape(a, b, c): the sizes as separate ints, which torch parses faster than a tuple.
  PyObject* raw = PyObject_Vectorcall(backend::T.reshape, call, out_nd + 1, nullptr);
  for (Py_ssize_t k = 1; k <= out_nd; ++k) Py_XDECREF(call[k]);
  if (!raw) return nullptr;
  PyObject* feature =
      x->feature_dim && dims_index(out_dims.get(), x->feature_dim) >= 0 ? x->feature_dim : nullptr;
  Ref t(tensor_make(raw, out_dims.get(), sizes, x->sparse_dim, feature));
  if (!t) return nullptr;
  return PyTuple_Pack(2, t.get(), out.get());
}

PyMethodDef kFunctions[] = {
    {"merge_dims", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f_merge_dims)),
     METH_FASTCALL | METH_KEYWORDS,
     "merge_dims(x, *, dims, out_dim=None) -> (tensor, out_dim): merges `dims` (the first varies "
     "slowest) into one dim at the place of the first. Adjacent static dims in order are one "
     "reshape here; other cases are dimtorch._shape_ops.merge_dims."},
    {nullptr}};

}  // namespace

bool export_ops_shape(PyObject* module) { return PyModule_AddFunctions(module, kFunctions) == 0; }

}  // namespace dimtorch
