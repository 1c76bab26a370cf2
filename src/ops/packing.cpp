// Fast path of the packing family (definitions: python/dimtorch/ops/packing.py): pack_padded of
// leading dims (one index_select by an index cached on the dim). Every other case goes to the
// Python definition (python_fallback.h).
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

// ---- pack_padded ------------------------------------------------------------------------------

DIMTORCH_PYTHON_FALLBACK(pack_fallback, "pack_padded")

/// pack_padded(x, *, dims, out_dim=None): the fast path takes `dims` (a tuple or list) leading x in any order, one
/// of them dynamic with lengths over the others (static or sized from data), and no frames beyond
/// the max length: one flatten (a view) and one index_select. The index of the valid frames
/// (dimtorch.ops.packing._valid_index, from host lengths; _valid_index_in, as places in x's order, when
/// dims lead x in another order) and its size are cached on the dynamic dim per sizes of `dims`, places
/// of the lengths' dims, their order in x and device.
PyObject* f_pack_padded(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"x", "dims", "out_dim", "enforce_sorted"};
  static PyObject* tag = nullptr;
  static PyObject* tag_in = nullptr;
  static PyObject* pack_name = nullptr;
  const char* caller = "dimtorch.pack_padded()";
  PyObject* v[4];
  if (!parse_args(args, nargs, kwnames, names, 4, 1, 2, v, caller, 1) || (v[3] && v[3] != Py_False)) {
    PyErr_Clear();
    return pack_fallback(args, nargs, kwnames);
  }
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !(PyTuple_CheckExact(v[1]) || PyList_CheckExact(v[1])))
    return pack_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  Ref dims_tuple(PyList_CheckExact(v[1]) ? PyList_AsTuple(v[1]) : Py_NewRef(v[1]));  // (RETURNN passes a list)
  if (!dims_tuple) return nullptr;
  PyObject* dims = dims_tuple.get();
  Py_ssize_t n = PyTuple_GET_SIZE(dims);
  Py_ssize_t nd = tensor_ndim(x);
  if (n == 0 || n > nd) return pack_fallback(args, nargs, kwnames);
  // dims lead x, in their order or another (then the index holds the valid frames' places in x's order).
  DimObject* owner = nullptr;
  signed char perm[kMaxDims];  // perm[j]: x's axis of dims[j]
  bool in_order = true;
  for (Py_ssize_t j = 0; j < n; ++j) {
    PyObject* d = PyTuple_GET_ITEM(dims, j);
    int a = 0;
    while (a < n && PyTuple_GET_ITEM(x->dims, a) != d) ++a;
    if (a == n) return pack_fallback(args, nargs, kwnames);
    for (Py_ssize_t i = 0; i < j; ++i)
      if (perm[i] == a) return pack_fallback(args, nargs, kwnames);  // (a dim twice: the definition's error)
    perm[j] = static_cast<signed char>(a);
    in_order = in_order && a == j;
    if (dim_has_lengths(as_dim(d))) {
      if (owner) return pack_fallback(args, nargs, kwnames);
      owner = as_dim(d);
      Py_ssize_t max_len = dim_max_size(owner);
      if (max_len == -2) return nullptr;
      if (max_len != x->sizes[a]) return pack_fallback(args, nargs, kwnames);
    }
  }
  signed char pos[2 * kMaxDims + 1];
  int k = 0;
  if (!owner || !lengths_positions(owner, dims, true, pos, &k, caller)) {
    PyErr_Clear();
    return pack_fallback(args, nargs, kwnames);
  }
  int n_pos = k + 1;
  if (!in_order)
    for (Py_ssize_t j = 0; j < n; ++j) pos[n_pos++] = perm[j];
  Ref device(PyObject_GetAttr(x->raw, backend::T.s_device));
  PyObject* kind = in_order ? interned(&tag, "pack_index") : interned(&tag_in, "pack_index_in");
  if (!device || !kind) return nullptr;
  Ref key(layout_key(kind, device.get(), x->sizes, n, pos, n_pos));
  if (!key) return nullptr;
  // (index, number of valid frames)
  Ref entry(cached_on_dim(owner, key.get(), [&]() -> PyObject* {
    PyObject* builder = definition(in_order ? "_valid_index" : "_valid_index_in");
    if (!builder) return nullptr;
    Ref sizes(PyList_New(n));
    if (!sizes) return nullptr;
    for (Py_ssize_t j = 0; j < n; ++j) {
      PyObject* s = PyLong_FromSsize_t(x->sizes[j]);
      if (!s) return nullptr;
      PyList_SET_ITEM(sizes.get(), j, s);
    }
    Ref index;
    if (in_order) {
      index = Ref(backend::call3(builder, dims, sizes.get(), device.get()));
    } else {
      Ref lead(PyTuple_GetSlice(x->dims, 0, n));
      if (!lead) return nullptr;
      PyObject* call_args[4] = {dims, lead.get(), sizes.get(), device.get()};
      index = Ref(PyObject_Vectorcall(builder, call_args, 4, nullptr));
    }
    if (!index) return nullptr;
    Ref shape(PyObject_GetAttr(index.get(), backend::T.s_shape));
    if (!shape) return nullptr;
    Ref total(PySequence_GetItem(shape.get(), 0));
    if (!total) return nullptr;
    return PyTuple_Pack(2, index.get(), total.get());
  }));
  if (!entry) return nullptr;
  PyObject* index = PyTuple_GET_ITEM(entry.get(), 0);
  Py_ssize_t total = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry.get(), 1));
  if (total == -1 && PyErr_Occurred()) return nullptr;
  Ref out_dim;
  if (!v[2] || v[2] == Py_None) {
    if (!interned(&pack_name, "pack")) return nullptr;
    out_dim = Ref(new_static_dim(total, pack_name));
    if (!out_dim) return nullptr;
  } else if (is_dim(v[2]) && as_dim(v[2])->size == total) {
    out_dim = Ref::borrow(v[2]);
  } else {
    return pack_fallback(args, nargs, kwnames);
  }
  Ref flat;
  if (n > 1) {
    Ref last(PyLong_FromSsize_t(n - 1));
    if (!last) return nullptr;
    flat = Ref(backend::call3(backend::T.flatten, x->raw, backend::T.zero, last.get()));
  } else {
    flat = Ref::borrow(x->raw);
  }
  if (!flat) return nullptr;
  Ref raw(backend::call3(backend::T.index_select, flat.get(), backend::T.zero, index));
  if (!raw) return nullptr;
  Ref out_dims(PyTuple_New(nd - n + 1));
  if (!out_dims) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  PyTuple_SET_ITEM(out_dims.get(), 0, Py_NewRef(out_dim.get()));
  sizes[0] = total;
  for (Py_ssize_t j = n; j < nd; ++j) {
    PyTuple_SET_ITEM(out_dims.get(), j - n + 1, Py_NewRef(PyTuple_GET_ITEM(x->dims, j)));
    sizes[j - n + 1] = x->sizes[j];
  }
  Ref t(tensor_make(raw.release(), out_dims.get(), sizes, x->sparse_dim, kept_feature(x, out_dims.get())));
  if (!t) return nullptr;
  return PyTuple_Pack(2, t.get(), out_dim.get());
}

#define FASTCALL_KW(fn) DIMTORCH_OP(fn), METH_FASTCALL | METH_KEYWORDS

PyMethodDef kFunctions[] = {
    {"pack_padded", FASTCALL_KW(f_pack_padded),
     "pack_padded(x, /, *, dims, enforce_sorted=False, out_dim=None) -> (tensor, pack_dim): see dimtorch.ops.packing.pack_padded."},
    {nullptr}};

#undef FASTCALL_KW

}  // namespace

bool export_ops_packing(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
