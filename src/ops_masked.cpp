// Fast path of masked_select (dimtorch/_masked.py) for its common call: all of the mask's dims packed, the mask
// and the tensor in one layout with those dims leading. In Python the selection bookkeeping costs several
// times the one boolean-indexing call that does the work on small tensors. Every other case, and all errors,
// go to the Python definition (python_fallback.h).
#include "args.h"
#include "backend.h"
#include "dim.h"
#include "functions.h"
#include "mask.h"
#include "python_fallback.h"
#include "tensor.h"

namespace dimtorch {

namespace {

DIMTORCH_PYTHON_FALLBACK(masked_select_fallback, "dimtorch._masked", "masked_select")

/// masked_select(tensor, *, mask, dims, out_dim=None): the fast path takes a bool mask over exactly `dims`
/// (a tuple, in the mask's order), `dims` leading the tensor in that order with the same sizes, dynamic dims
/// among them with lengths over dims among them, and no out_dim: the padding of the dynamic dims is masked
/// out (their cached masks), then one boolean index of the tensor by the mask over its leading dims. The number of
/// selected entries is data: torch's boolean indexing waits for the device (as the Python definition does).
PyObject* f_masked_select(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"tensor", "mask", "dims", "out_dim"};
  static PyObject* name = nullptr;
  const char* caller = "dimtorch.masked_select()";
  PyObject* v[4];
  if (!parse_args(args, nargs, kwnames, names, 4, 1, 3, v, caller) || (v[3] && v[3] != Py_None) ||
      !is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_tensor(v[1]) || !as_tensor(v[1])->raw ||
      !PyTuple_CheckExact(v[2])) {
    PyErr_Clear();
    return masked_select_fallback(args, nargs, kwnames);
  }
  TensorObject* x = as_tensor(v[0]);
  TensorObject* mask = as_tensor(v[1]);
  PyObject* dims = v[2];
  Py_ssize_t n = PyTuple_GET_SIZE(dims), nd = tensor_ndim(x);
  if (n == 0 || n != tensor_ndim(mask) || n > nd) return masked_select_fallback(args, nargs, kwnames);
  PyObject* dtype = backend::raw_dtype_name(mask->raw);
  if (!dtype) return nullptr;
  if (PyUnicode_CompareWithASCIIString(dtype, "bool") != 0) return masked_select_fallback(args, nargs, kwnames);
  for (Py_ssize_t j = 0; j < n; ++j) {
    PyObject* d = PyTuple_GET_ITEM(dims, j);
    if (d != PyTuple_GET_ITEM(mask->dims, j) || d != PyTuple_GET_ITEM(x->dims, j) || x->sizes[j] != mask->sizes[j])
      return masked_select_fallback(args, nargs, kwnames);
  }
  Ref m = Ref::borrow(mask->raw);
  Ref device;
  for (Py_ssize_t j = 0; j < n; ++j) {
    DimObject* d = as_dim(PyTuple_GET_ITEM(dims, j));
    if (!dim_has_lengths(d)) continue;
    signed char pos[kMaxDims + 1];
    int k = 0;
    if (!lengths_positions(d, dims, true, pos, &k, caller)) {
      PyErr_Clear();  // lengths over a dim that is not packed: each row packs on its own (Python)
      return masked_select_fallback(args, nargs, kwnames);
    }
    if (!device && !(device = Ref(PyObject_GetAttr(mask->raw, backend::T.s_device)))) return nullptr;
    Ref valid(dim_cached_raw(d, MaskKind::kMask, pos, static_cast<int>(n), mask->sizes[j], device.get()));
    if (!valid) return nullptr;
    m = Ref(PyNumber_And(m.get(), valid.get()));
    if (!m) return nullptr;
  }
  // A mask over the leading dims indexes them all at once, in row-major order (as torch's x[m]).
  Ref raw(PyObject_GetItem(x->raw, m.get()));
  if (!raw) return nullptr;
  Ref shape(PyObject_GetAttr(raw.get(), backend::T.s_shape));
  if (!shape) return nullptr;
  Ref count_obj(PySequence_GetItem(shape.get(), 0));
  if (!count_obj) return nullptr;
  if (!name && !(name = PyUnicode_InternFromString("masked_select"))) return nullptr;
  PyObject* call[2] = {count_obj.get(), name};
  Ref out_dim(PyObject_Vectorcall(reinterpret_cast<PyObject*>(&DimType), call, 2, nullptr));
  if (!out_dim) return nullptr;
  Py_ssize_t count = PyLong_AsSsize_t(count_obj.get());
  if (count == -1 && PyErr_Occurred()) return nullptr;
  Ref out_dims(PyTuple_New(nd - n + 1));
  if (!out_dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  PyTuple_SET_ITEM(out_dims.get(), 0, Py_NewRef(out_dim.get()));
  sizes[0] = count;
  for (Py_ssize_t j = n; j < nd; ++j) {
    PyTuple_SET_ITEM(out_dims.get(), j - n + 1, Py_NewRef(PyTuple_GET_ITEM(x->dims, j)));
    sizes[j - n + 1] = x->sizes[j];
  }
  PyObject* feature = x->feature_dim && dims_index(out_dims.get(), x->feature_dim) >= 0 ? x->feature_dim : nullptr;
  Ref t(tensor_make(raw.release(), out_dims.get(), sizes, x->sparse_dim, feature));
  if (!t) return nullptr;
  return PyTuple_Pack(2, t.get(), out_dim.get());
}

PyMethodDef kFunctions[] = {
    {"masked_select", DIMTORCH_OP(f_masked_select), METH_FASTCALL | METH_KEYWORDS,
     "masked_select(tensor, *, mask, dims, out_dim=None) -> (tensor, out_dim): see dimtorch._masked.masked_select; "
     "all of the mask's dims leading the tensor in its order are one boolean index here."},
    {nullptr}};

}  // namespace

bool export_ops_masked(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
