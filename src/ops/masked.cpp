// Fast paths of masked_select and masked_scatter (python/dimtorch/ops/masked.py) for their common calls: the packed dims
// trailing the mask after its row dims, mask and tensor in one layout. In Python the selection bookkeeping costs
// as much as the few torch calls that do the work on small tensors. Every other case, and all errors, go to the
// Python definition (python_fallback.h).
#include "core/args.h"
#include "core/backend.h"
#include "core/dim.h"
#include "core/functions.h"
#include "core/mask.h"
#include "core/python_fallback.h"
#include "core/tensor.h"
#include "core/exports.h"

namespace dimtorch {

namespace {

DIMTORCH_PYTHON_FALLBACK(masked_select_fallback, "masked_select")
DIMTORCH_PYTHON_FALLBACK(masked_scatter_fallback, "masked_scatter")
DIMTORCH_PYTHON_FALLBACK(to_host, "to_host")

/// raw.<name>(args) by an interned method name (made once into *cache). New reference.
PyObject* method(PyObject** cache, const char* name, PyObject* raw, PyObject* a0, PyObject* a1 = nullptr,
                 PyObject* a2 = nullptr) {
  if (!*cache && !(*cache = PyUnicode_InternFromString(name))) return nullptr;
  PyObject* args[4] = {raw, a0, a1, a2};
  size_t n = a2 ? 4 : a1 ? 3 : 2;
  return PyObject_VectorcallMethod(*cache, args, n | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
}

/// A tuple of ints; new reference.
PyObject* ints(const Py_ssize_t* v, Py_ssize_t n) { return size_tuple(v, n); }

/// The common layout: `dims` (a tuple) the trailing dims of the bool `mask`, in its order, after k rows
/// without lengths; dynamic dims among `dims` with lengths over the mask's dims (their positions in *pos_of).
/// The valid mask (the caller's mask and the cached masks of the dynamic dims) into *valid. False (no error
/// set) when the call is not of this form.
bool common_layout(TensorObject* mask, PyObject* dims, Py_ssize_t* k, Ref* valid, const char* caller) {
  Py_ssize_t n = PyTuple_GET_SIZE(dims), nm = tensor_ndim(mask);
  if (n == 0 || n > nm) return false;
  PyObject* dtype = backend::raw_dtype_name(mask->raw);
  if (!dtype) {
    PyErr_Clear();
    return false;
  }
  if (PyUnicode_CompareWithASCIIString(dtype, "bool") != 0) return false;
  *k = nm - n;
  for (Py_ssize_t j = 0; j < nm; ++j) {
    PyObject* d = PyTuple_GET_ITEM(mask->dims, j);
    if (j >= *k ? d != PyTuple_GET_ITEM(dims, j - *k) : dim_has_lengths(as_dim(d))) return false;
  }
  Ref m = Ref::borrow(mask->raw);
  Ref device;
  for (Py_ssize_t j = *k; j < nm; ++j) {
    DimObject* d = as_dim(PyTuple_GET_ITEM(mask->dims, j));
    if (!dim_has_lengths(d)) continue;
    signed char pos[kMaxDims + 1];
    int kk = 0;
    if (!lengths_positions(d, mask->dims, true, pos, &kk, caller)) {
      PyErr_Clear();  // lengths over a dim the mask lacks: the rows grow (Python)
      return false;
    }
    if (!device && !(device = Ref(PyObject_GetAttr(mask->raw, backend::T.s_device)))) return false;
    Ref cached(dim_cached_raw(d, MaskKind::kMask, pos, static_cast<int>(nm), mask->sizes[j], device.get()));
    if (!cached) return false;
    m = Ref(PyNumber_And(m.get(), cached.get()));
    if (!m) return false;
  }
  *valid = std::move(m);
  return true;
}

/// Whether x's leading dims are the mask's dims with the same sizes.
bool leads(TensorObject* x, TensorObject* mask) {
  Py_ssize_t nm = tensor_ndim(mask);
  if (nm > tensor_ndim(x)) return false;
  for (Py_ssize_t j = 0; j < nm; ++j)
    if (PyTuple_GET_ITEM(x->dims, j) != PyTuple_GET_ITEM(mask->dims, j) || x->sizes[j] != mask->sizes[j]) return false;
  return true;
}

/// The valid mask with the packed dims (after k rows) flattened into one axis; new reference.
PyObject* flat_packed(PyObject* raw, Py_ssize_t k, Py_ssize_t n) {
  if (n == 1) return Py_NewRef(raw);
  Ref first(PyLong_FromSsize_t(k)), last(PyLong_FromSsize_t(k + n - 1));
  if (!first || !last) return nullptr;
  return backend::call3(backend::T.flatten, raw, first.get(), last.get());
}

/// masked_select(tensor, *, mask, dims, out_dim=None): the fast path takes a bool mask whose trailing dims are
/// `dims` (a tuple, in the mask's order) after k row dims without lengths, leading the tensor in that order with
/// the same sizes, dynamic dims among `dims` with lengths over the mask's dims, and no out_dim. The padding of
/// the dynamic dims is masked out (their cached masks). k = 0: one boolean index by the mask over the leading
/// dims, a static out dim of the count. k > 0: per row, the counts read on the host (dimtorch._core.data_dependent
/// .to_host) as the lengths of the out dim, then one scatter_add_ of each row's entries to their places.
/// The size of the result is data: both read the device (as the Python definition does).
PyObject* f_masked_select(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"tensor", "mask", "dims", "out_dim"};
  static PyObject* name = nullptr;
  static PyObject *s_sum = nullptr, *s_cumsum = nullptr, *s_scatter_add_ = nullptr, *s_narrow = nullptr;
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
  Py_ssize_t k = 0, n = PyTuple_GET_SIZE(dims), nm = tensor_ndim(mask), nd = tensor_ndim(x);
  Ref m;
  if (!leads(x, mask) || !common_layout(mask, dims, &k, &m, caller)) {
    if (PyErr_Occurred()) return nullptr;
    return masked_select_fallback(args, nargs, kwnames);
  }
  if (!name && !(name = PyUnicode_InternFromString("masked_select"))) return nullptr;
  Py_ssize_t sizes[kMaxDims];
  Ref out_dims(PyTuple_New(nd - n + 1));
  if (!out_dims) return nullptr;
  for (Py_ssize_t j = 0; j < k; ++j) {
    PyTuple_SET_ITEM(out_dims.get(), j, Py_NewRef(PyTuple_GET_ITEM(x->dims, j)));
    sizes[j] = x->sizes[j];
  }
  for (Py_ssize_t j = nm; j < nd; ++j) {
    PyTuple_SET_ITEM(out_dims.get(), j - n + 1, Py_NewRef(PyTuple_GET_ITEM(x->dims, j)));
    sizes[j - n + 1] = x->sizes[j];
  }
  Ref raw, out_dim;
  if (k == 0) {
    // A mask over the leading dims indexes them all at once, in row-major order (as torch's x[m]).
    raw = Ref(PyObject_GetItem(x->raw, m.get()));
    if (!raw) return nullptr;
    Ref shape(PyObject_GetAttr(raw.get(), backend::T.s_shape));
    if (!shape) return nullptr;
    Ref count(PySequence_GetItem(shape.get(), 0));
    if (!count) return nullptr;
    PyObject* call[2] = {count.get(), name};
    out_dim = Ref(PyObject_Vectorcall(reinterpret_cast<PyObject*>(&DimType), call, 2, nullptr));
    if (!out_dim) return nullptr;
    sizes[0] = PyLong_AsSsize_t(count.get());
    if (sizes[0] == -1 && PyErr_Occurred()) return nullptr;
  } else {
    Ref flat(flat_packed(m.get(), k, n));
    Ref fx(flat_packed(x->raw, k, n));
    if (!flat || !fx) return nullptr;
    Ref minus_one(PyLong_FromLong(-1));
    if (!minus_one) return nullptr;
    Ref counts(method(&s_sum, "sum", flat.get(), minus_one.get()));
    if (!counts) return nullptr;
    PyObject* host_args[1] = {counts.get()};
    Ref host(to_host(host_args, 1, nullptr));
    if (!host) return nullptr;
    Ref row_dims(PyTuple_GetSlice(x->dims, 0, k));
    if (!row_dims) return nullptr;
    Ref lengths(tensor_make(host.release(), row_dims.get(), x->sizes, nullptr, nullptr));
    if (!lengths) return nullptr;
    PyObject* call[2] = {lengths.get(), name};
    out_dim = Ref(PyObject_Vectorcall(reinterpret_cast<PyObject*>(&DimType), call, 2, nullptr));
    if (!out_dim) return nullptr;
    Py_ssize_t n_out = dim_max_size(as_dim(out_dim.get()));
    if (n_out < 0) return nullptr;
    sizes[k] = n_out;
    // Entry j of a row goes to place (number of selected entries before it); the others to an extra place
    // n_out that is cut off.
    Ref cum(method(&s_cumsum, "cumsum", flat.get(), minus_one.get()));
    if (!cum) return nullptr;
    Ref before(PyNumber_Add(cum.get(), minus_one.get()));
    Ref extra(PyLong_FromSsize_t(n_out));
    if (!before || !extra) return nullptr;
    Ref pos(backend::call3(backend::T.where, flat.get(), before.get(), extra.get()));
    if (!pos) return nullptr;
    Py_ssize_t fx_sizes[kMaxDims];
    Py_ssize_t n_fx = 0;
    for (Py_ssize_t j = 0; j < k; ++j) fx_sizes[n_fx++] = x->sizes[j];
    Py_ssize_t packed = 1;
    for (Py_ssize_t j = k; j < nm; ++j) packed *= x->sizes[j];
    fx_sizes[n_fx++] = packed;
    for (Py_ssize_t j = nm; j < nd; ++j) fx_sizes[n_fx++] = 1;
    Ref view_shape(ints(fx_sizes, n_fx));
    if (!view_shape) return nullptr;
    Ref viewed(backend::call2(backend::T.view, pos.get(), view_shape.get()));
    if (!viewed) return nullptr;
    Ref index(backend::call2(backend::T.expand_as, viewed.get(), fx.get()));
    if (!index) return nullptr;
    Py_ssize_t z_sizes[kMaxDims];
    for (Py_ssize_t j = 0; j < nd - n + 1; ++j) z_sizes[j] = j == k ? n_out + 1 : sizes[j];
    Ref z_shape(ints(z_sizes, nd - n + 1));
    if (!z_shape) return nullptr;
    Ref zeros(backend::call2(backend::T.new_zeros, x->raw, z_shape.get()));
    Ref axis(PyLong_FromSsize_t(k));
    if (!zeros || !axis) return nullptr;
    Ref added(method(&s_scatter_add_, "scatter_add_", zeros.get(), axis.get(), index.get(), fx.get()));
    if (!added) return nullptr;
    raw = Ref(method(&s_narrow, "narrow", added.get(), axis.get(), backend::T.zero, extra.get()));
    if (!raw) return nullptr;
  }
  PyTuple_SET_ITEM(out_dims.get(), k, Py_NewRef(out_dim.get()));
  PyObject* feature = x->feature_dim && dims_index(out_dims.get(), x->feature_dim) >= 0 ? x->feature_dim : nullptr;
  Ref t(tensor_make(raw.release(), out_dims.get(), sizes, x->sparse_dim, feature));
  if (!t) return nullptr;
  return PyTuple_Pack(2, t.get(), out_dim.get());
}

/// masked_scatter(source, backup=None, *, mask, dims, in_dim): the fast path takes no backup, a mask in the
/// masked_select fast path's layout (dims trailing after k rows), source over (rows, in_dim, rest) in that order
/// with the rows' sizes, in_dim static (k = 0) or with lengths over exactly the rows in their order (k > 0), and
/// at least one frame: one gather of each entry's frame (clamped into in_dim) and one where. Where the mask is
/// on the CPU the counts are checked against in_dim first (free there); a mismatch goes to the Python
/// definition, which says so.
PyObject* f_masked_scatter(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"source", "backup", "mask", "dims", "in_dim"};
  static PyObject *s_sum = nullptr, *s_cumsum = nullptr, *s_clamp_ = nullptr, *s_gather = nullptr;
  static PyObject* s_equal = nullptr;
  const char* caller = "dimtorch.masked_scatter()";
  PyObject* v[5];
  if (!parse_args(args, nargs, kwnames, names, 5, 2, 1, v, caller) || (v[1] && v[1] != Py_None) || !v[2] ||
      !v[3] || !v[4] || !is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_tensor(v[2]) || !as_tensor(v[2])->raw ||
      !PyTuple_CheckExact(v[3]) || !is_dim(v[4])) {
    PyErr_Clear();
    return masked_scatter_fallback(args, nargs, kwnames);
  }
  TensorObject* src = as_tensor(v[0]);
  TensorObject* mask = as_tensor(v[2]);
  PyObject* dims = v[3];
  PyObject* in_dim = v[4];
  Py_ssize_t k = 0, n = PyTuple_GET_SIZE(dims), nm = tensor_ndim(mask), ns = tensor_ndim(src);
  if (n > nm || ns < nm - n + 1 || PyTuple_GET_ITEM(src->dims, nm - n) != in_dim)
    return masked_scatter_fallback(args, nargs, kwnames);
  Ref m;
  if (!common_layout(mask, dims, &k, &m, caller)) {
    if (PyErr_Occurred()) return nullptr;
    return masked_scatter_fallback(args, nargs, kwnames);
  }
  for (Py_ssize_t j = 0; j < k; ++j)
    if (PyTuple_GET_ITEM(src->dims, j) != PyTuple_GET_ITEM(mask->dims, j) || src->sizes[j] != mask->sizes[j])
      return masked_scatter_fallback(args, nargs, kwnames);
  for (Py_ssize_t j = k + 1; j < ns; ++j)  // the rest: no dim of the mask
    if (dims_index(mask->dims, PyTuple_GET_ITEM(src->dims, j)) >= 0) return masked_scatter_fallback(args, nargs, kwnames);
  // The result has the mask's dims and src's rest: past kMaxDims the definition says so.
  if (nm + (ns - k - 1) > kMaxDims) return masked_scatter_fallback(args, nargs, kwnames);
  DimObject* in = as_dim(in_dim);
  Py_ssize_t n_in = src->sizes[k];
  PyObject* lengths = nullptr;
  if (k == 0 ? dim_has_lengths(in) : !dim_has_lengths(in)) return masked_scatter_fallback(args, nargs, kwnames);
  if (k > 0) {
    lengths = dim_dyn_size(in);
    if (!lengths) return PyErr_Occurred() ? nullptr : masked_scatter_fallback(args, nargs, kwnames);
    TensorObject* lt = as_tensor(lengths);
    if (tensor_ndim(lt) != k) return masked_scatter_fallback(args, nargs, kwnames);
    for (Py_ssize_t j = 0; j < k; ++j)
      if (PyTuple_GET_ITEM(lt->dims, j) != PyTuple_GET_ITEM(mask->dims, j)) return masked_scatter_fallback(args, nargs, kwnames);
    PyObject* ldtype = backend::raw_dtype_name(lt->raw);
    if (!ldtype) return nullptr;
    if (PyUnicode_CompareWithASCIIString(ldtype, "int64") != 0) return masked_scatter_fallback(args, nargs, kwnames);
  }
  if (n_in == 0 || (k == 0 && in->size != n_in)) return masked_scatter_fallback(args, nargs, kwnames);
  Ref flat(flat_packed(m.get(), k, n));
  Ref minus_one(PyLong_FromLong(-1));
  if (!flat || !minus_one) return nullptr;
  Ref device(PyObject_GetAttr(mask->raw, backend::T.s_device));
  if (!device) return nullptr;
  Ref device_type(PyObject_GetAttrString(device.get(), "type"));
  if (!device_type) return nullptr;
  if (PyUnicode_Check(device_type.get()) && PyUnicode_CompareWithASCIIString(device_type.get(), "cpu") == 0) {
    // The counts against in_dim, free on the CPU: a mismatch is the Python definition's error.
    Ref counts(method(&s_sum, "sum", flat.get(), minus_one.get()));
    if (!counts) return nullptr;
    int same;
    if (k == 0) {
      Ref c(PyNumber_Index(counts.get()));
      if (!c) return nullptr;
      same = PyLong_AsSsize_t(c.get()) == n_in;
    } else {
      Ref eq(method(&s_equal, "equal", counts.get(), as_tensor(lengths)->raw));
      if (!eq) return nullptr;
      same = PyObject_IsTrue(eq.get());
      if (same < 0) return nullptr;
    }
    if (!same) return masked_scatter_fallback(args, nargs, kwnames);
  }
  // Entry j of a row takes that row's frame (number of selected entries before it); the others take a
  // clamped frame that the where drops.
  Ref cum(method(&s_cumsum, "cumsum", flat.get(), minus_one.get()));
  if (!cum) return nullptr;
  Ref before(PyNumber_Add(cum.get(), minus_one.get()));
  Ref top(PyLong_FromSsize_t(n_in - 1));
  if (!before || !top) return nullptr;
  Ref pos(method(&s_clamp_, "clamp_", before.get(), backend::T.zero, top.get()));
  if (!pos) return nullptr;
  Py_ssize_t packed = 1;
  for (Py_ssize_t j = k; j < nm; ++j) packed *= mask->sizes[j];
  Py_ssize_t r = ns - k - 1;
  Py_ssize_t view_sizes[kMaxDims], index_sizes[kMaxDims];
  for (Py_ssize_t j = 0; j < k; ++j) view_sizes[j] = index_sizes[j] = mask->sizes[j];
  view_sizes[k] = index_sizes[k] = packed;
  for (Py_ssize_t j = 0; j < r; ++j) {
    view_sizes[k + 1 + j] = 1;
    index_sizes[k + 1 + j] = src->sizes[k + 1 + j];
  }
  Ref view_shape(ints(view_sizes, k + 1 + r)), index_shape(ints(index_sizes, k + 1 + r));
  if (!view_shape || !index_shape) return nullptr;
  Ref viewed(backend::call2(backend::T.view, pos.get(), view_shape.get()));
  if (!viewed) return nullptr;
  Ref index(backend::call2(backend::T.expand, viewed.get(), index_shape.get()));
  Ref axis(PyLong_FromSsize_t(k));
  if (!index || !axis) return nullptr;
  Ref values(method(&s_gather, "gather", src->raw, axis.get(), index.get()));
  if (!values) return nullptr;
  Py_ssize_t out_sizes[kMaxDims], cond_sizes[kMaxDims];
  Py_ssize_t nout = nm + r;
  for (Py_ssize_t j = 0; j < nm; ++j) out_sizes[j] = cond_sizes[j] = mask->sizes[j];
  for (Py_ssize_t j = 0; j < r; ++j) {
    out_sizes[nm + j] = src->sizes[k + 1 + j];
    cond_sizes[nm + j] = 1;
  }
  if (n > 1) {
    Ref out_shape(ints(out_sizes, nout));
    if (!out_shape) return nullptr;
    values = Ref(backend::call2(backend::T.reshape, values.get(), out_shape.get()));
    if (!values) return nullptr;
  }
  Ref cond_shape(ints(cond_sizes, nout));
  if (!cond_shape) return nullptr;
  Ref cond(backend::call2(backend::T.view, m.get(), cond_shape.get()));
  if (!cond) return nullptr;
  Ref raw(backend::call3(backend::T.where, cond.get(), values.get(), backend::T.zero));
  if (!raw) return nullptr;
  Ref out_dims(PyTuple_New(nout));
  if (!out_dims) return nullptr;
  for (Py_ssize_t j = 0; j < nm; ++j) PyTuple_SET_ITEM(out_dims.get(), j, Py_NewRef(PyTuple_GET_ITEM(mask->dims, j)));
  for (Py_ssize_t j = 0; j < r; ++j)
    PyTuple_SET_ITEM(out_dims.get(), nm + j, Py_NewRef(PyTuple_GET_ITEM(src->dims, k + 1 + j)));
  PyObject* feature =
      src->feature_dim && src->feature_dim != in_dim && dims_index(out_dims.get(), src->feature_dim) >= 0
          ? src->feature_dim : nullptr;
  return tensor_make(raw.release(), out_dims.get(), out_sizes, src->sparse_dim, feature);
}

PyMethodDef kFunctions[] = {
    {"masked_select", DIMTORCH_OP(f_masked_select), METH_FASTCALL | METH_KEYWORDS,
     "masked_select(tensor, *, mask, dims, out_dim=None) -> (tensor, out_dim): see dimtorch.ops.masked.masked_select; "
     "all of the mask's dims leading the tensor in its order are one boolean index here."},
    {"masked_scatter", DIMTORCH_OP(f_masked_scatter), METH_FASTCALL | METH_KEYWORDS,
     "masked_scatter(source, backup=None, *, mask, dims, in_dim) -> tensor: see "
     "dimtorch.ops.masked.masked_scatter; without backup, in the common layout, one gather and one where here."},
    {nullptr}};

}  // namespace

bool export_ops_masked(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
