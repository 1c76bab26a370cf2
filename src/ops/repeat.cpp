// Fast path of repeat (definition: python/dimtorch/ops/repeat.py) for its common call on the host:
// values over (batch..., in_spatial_dim, rest...) and int64 repeats over (batch..., in_spatial_dim), no
// out_spatial_dim or max_len_factor. The definition's torch calls without its Python around them; every
// other case (other layouts, a device, negative repeats and every error) goes to the definition.
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

DIMTORCH_PYTHON_FALLBACK(repeat_fallback, "repeat")

PyObject* method0(PyObject* o, PyObject** name_cache, const char* name) {
  PyObject* n = interned(name_cache, name);
  return n ? PyObject_CallMethodNoArgs(o, n) : nullptr;
}

/// repeat(values, *, in_spatial_dim, repeats, out_spatial_dim=None, max_len_factor=None): frame t of
/// each sequence repeated repeats[..., t] times into a new dim over the batch dims (lengths: the sums,
/// read on the host): cumsum, searchsorted of the output frames, one torch.gather, as the definition.
PyObject* f_repeat(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"values", "in_spatial_dim", "repeats", "out_spatial_dim", "max_len_factor"};
  const char* caller = "dimtorch.repeat()";
  PyObject* v[5];
  if (!parse_args(args, nargs, kwnames, names, 5, 1, 3, v, caller)) {
    PyErr_Clear();
    return repeat_fallback(args, nargs, kwnames);
  }
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(v[1]) || !is_tensor(v[2]) || !as_tensor(v[2])->raw ||
      (v[3] && v[3] != Py_None) || (v[4] && v[4] != Py_None))
    return repeat_fallback(args, nargs, kwnames);
  TensorObject* x = as_tensor(v[0]);
  TensorObject* reps = as_tensor(v[2]);
  PyObject* in_dim = v[1];
  // repeats over (batch..., in_dim); values over the same then the rest: no alignment needed
  Py_ssize_t nb = tensor_ndim(reps) - 1, nd = tensor_ndim(x);
  if (nb < 0 || nd < nb + 1 || PyTuple_GET_ITEM(reps->dims, nb) != in_dim)
    return repeat_fallback(args, nargs, kwnames);
  for (Py_ssize_t j = 0; j <= nb; ++j)
    if (PyTuple_GET_ITEM(x->dims, j) != PyTuple_GET_ITEM(reps->dims, j) || x->sizes[j] != reps->sizes[j])
      return repeat_fallback(args, nargs, kwnames);
  PyObject* dtype = backend::raw_dtype_name(reps->raw);
  if (!dtype) return nullptr;
  if (PyUnicode_CompareWithASCIIString(dtype, "int64") != 0 || reps->sizes[nb] == 0)
    return repeat_fallback(args, nargs, kwnames);
  for (Py_ssize_t j = 0; j < nb; ++j)
    if (reps->sizes[j] == 0) return repeat_fallback(args, nargs, kwnames);
  Ref device(PyObject_GetAttr(reps->raw, backend::T.s_device));
  if (!device) return nullptr;
  static PyObject* cpu_type = nullptr;
  Ref device_type(PyObject_GetAttrString(device.get(), "type"));
  if (!device_type || !interned(&cpu_type, "cpu")) return nullptr;
  if (PyUnicode_Compare(device_type.get(), cpu_type) != 0) return repeat_fallback(args, nargs, kwnames);

  Ref r(Py_NewRef(reps->raw));
  if (dim_has_lengths(as_dim(in_dim))) {  // the padding repeats nothing
    signed char pos[kMaxDims + 1];
    int k = 0;
    if (!lengths_positions(as_dim(in_dim), reps->dims, true, pos, &k, caller)) {
      PyErr_Clear();
      return repeat_fallback(args, nargs, kwnames);
    }
    Ref mask(dim_cached_raw(as_dim(in_dim), MaskKind::kMask, pos, static_cast<int>(nb + 1), reps->sizes[nb],
                            device.get()));
    if (!mask) return nullptr;
    r = Ref(backend::call3(backend::T.where, mask.get(), r.get(), backend::T.zero));
    if (!r) return nullptr;
  }
  // read on the host (r is there): a negative repeat goes to the definition, which says so
  static PyObject* s_min = nullptr;
  Ref lowest(method0(r.get(), &s_min, "min"));
  Ref lowest_int(lowest ? PyNumber_Index(lowest.get()) : nullptr);
  if (!lowest_int) return nullptr;
  long lo = PyLong_AsLong(lowest_int.get());
  if (lo == -1 && PyErr_Occurred()) return nullptr;
  if (lo < 0) return repeat_fallback(args, nargs, kwnames);
  static PyObject* minus_one = PyLong_FromLong(-1);
  if (!minus_one) return nullptr;
  Ref new_lengths(backend::call2(backend::T.sum, r.get(), minus_one));
  Ref batch(new_lengths ? PyTuple_GetSlice(reps->dims, 0, nb) : nullptr);
  if (!batch) return nullptr;
  Ref lengths(tensor_make(new_lengths.release(), batch.get(), reps->sizes, nullptr, nullptr));
  static PyObject* name_kw = Py_BuildValue("(s)", "name");
  static PyObject* name = PyUnicode_InternFromString("repeat");
  if (!lengths || !name_kw || !name) return nullptr;
  PyObject* dim_args[2] = {lengths.get(), name};
  Ref out_dim(PyObject_Vectorcall(reinterpret_cast<PyObject*>(&DimType), dim_args, 1, name_kw));
  if (!out_dim) return nullptr;
  Py_ssize_t n_out = dim_max_size(as_dim(out_dim.get()));
  if (n_out < 0) return n_out == -2 ? nullptr : repeat_fallback(args, nargs, kwnames);

  // output frame j of a sequence comes from the first input frame whose cumulative count exceeds j
  Ref cum(backend::call2(backend::T.cumsum, r.get(), minus_one));
  static PyObject* device_kw = Py_BuildValue("(s)", "device");
  Ref n_obj(PyLong_FromSsize_t(n_out));
  if (!cum || !device_kw || !n_obj) return nullptr;
  PyObject* arange_args[2] = {n_obj.get(), device.get()};
  Ref frames(PyObject_Vectorcall(backend::T.arange, arange_args, 1, device_kw));
  Py_ssize_t sizes[kMaxDims];
  std::copy(reps->sizes, reps->sizes + nb, sizes);
  sizes[nb] = n_out;
  Ref frame_shape(frames ? size_tuple(sizes, nb + 1) : nullptr);
  Ref expanded(frame_shape ? backend::call2(backend::T.expand, frames.get(), frame_shape.get()) : nullptr);
  static PyObject* s_contiguous = nullptr;
  Ref values(expanded ? method0(expanded.get(), &s_contiguous, "contiguous") : nullptr);
  static PyObject* side_kw = Py_BuildValue("(s)", "side");
  static PyObject* right = PyUnicode_InternFromString("right");
  if (!values || !side_kw || !right) return nullptr;
  PyObject* search_args[3] = {cum.get(), values.get(), right};
  Ref found(PyObject_Vectorcall(backend::T.searchsorted, search_args, 2, side_kw));
  Ref last(PyLong_FromSsize_t(reps->sizes[nb] - 1));
  Ref index(found && last ? backend::call2(backend::T.clamp_max, found.get(), last.get()) : nullptr);
  if (!index) return nullptr;
  // index over (batch..., n_out, 1 for each rest dim), expanded over the rest: one gather along in_dim
  Py_ssize_t view[kMaxDims];
  std::copy(sizes, sizes + nb + 1, view);
  std::fill(view + nb + 1, view + nd, 1);
  Ref view_shape(size_tuple(view, nd));
  Ref viewed(view_shape ? backend::call2(backend::T.view, index.get(), view_shape.get()) : nullptr);
  Py_ssize_t out_sizes[kMaxDims];
  std::copy(x->sizes, x->sizes + nd, out_sizes);
  out_sizes[nb] = n_out;
  Ref out_shape(viewed ? size_tuple(out_sizes, nd) : nullptr);
  Ref gather_index(out_shape ? backend::call2(backend::T.expand, viewed.get(), out_shape.get()) : nullptr);
  Ref axis(PyLong_FromSsize_t(nb));
  if (!gather_index || !axis) return nullptr;
  Ref raw(backend::call3(backend::T.gather, x->raw, axis.get(), gather_index.get()));
  Ref dims(raw ? dims_replaced(x->dims, nb, out_dim.get()) : nullptr);
  if (!dims) return nullptr;
  PyObject* feature = x->feature_dim && dims_index(x->dims, x->feature_dim) > nb ? x->feature_dim : nullptr;
  Ref out(tensor_make(raw.release(), dims.get(), out_sizes, x->sparse_dim, feature));  // (kept among the rest)
  if (!out) return nullptr;
  return PyTuple_Pack(2, out.get(), out_dim.get());
}

#define FASTCALL_KW(fn) DIMTORCH_OP(fn), METH_FASTCALL | METH_KEYWORDS

PyMethodDef kFunctions[] = {
    {"repeat", FASTCALL_KW(f_repeat),
     "repeat(values, *, in_spatial_dim, repeats, out_spatial_dim=None, max_len_factor=None) -> (tensor, dim): "
     "see dimtorch.ops.repeat.repeat."},
    {nullptr}};

#undef FASTCALL_KW

}  // namespace

bool export_ops_repeat(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
