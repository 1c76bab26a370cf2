// Fast path of ctc_durations_from_path (definition: python/dimtorch/ops/ctc_align.py) for its common
// call: a path with time last, the targets' dim given and checked (rf's defaults). The same torch
// calls as the definition, without its Python around them. Every other case goes to the definition.
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

DIMTORCH_PYTHON_FALLBACK(durations_fallback, "ctc_durations_from_path")

/// True for a flag argument that is absent or exactly True (rf's defaults of check_dims and
/// stop_on_failed_check).
bool default_true(PyObject* v) { return !v || v == Py_True; }

/// ctc_durations_from_path(*, path, path_spatial_dim, blank_index, targets_spatial_dim=None,
/// out_spatial_dim=None, check_dims=True, stop_on_failed_check=True): the fast path takes an int64 path
/// over (*batch, time), the targets' dim given with lengths over batch dims, no out_spatial_dim and both
/// checks on. out_spatial_dim is targets_spatial_dim * 2 + 1 (dim math); the label counts are asserted
/// on the device (no wait) to be the targets' lengths; padding frames count nowhere.
PyObject* f_ctc_durations_from_path(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"path", "path_spatial_dim", "blank_index", "targets_spatial_dim",
                                      "out_spatial_dim", "check_dims", "stop_on_failed_check"};
  const char* caller = "dimtorch.ctc_durations_from_path()";
  PyObject* v[7];
  if (!parse_args(args, nargs, kwnames, names, 7, 0, 3, v, caller)) {
    PyErr_Clear();
    return durations_fallback(args, nargs, kwnames);
  }
  PyObject* time = v[1];
  PyObject* targets = v[3];
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(time) || !PyLong_CheckExact(v[2]) || !targets ||
      !is_dim(targets) || !dim_has_lengths(as_dim(targets)) || (v[4] && v[4] != Py_None) ||
      !default_true(v[5]) || !default_true(v[6]))
    return durations_fallback(args, nargs, kwnames);
  TensorObject* path = as_tensor(v[0]);
  Py_ssize_t nd = tensor_ndim(path);
  if (nd < 1 || PyTuple_GET_ITEM(path->dims, nd - 1) != time || path->sizes[nd - 1] < 1)
    return durations_fallback(args, nargs, kwnames);
  int overflow = 0;
  PyLong_AsLongLongAndOverflow(v[2], &overflow);
  if (overflow) return durations_fallback(args, nargs, kwnames);
  PyObject* dtype = backend::raw_dtype_name(path->raw);
  if (!dtype) return nullptr;
  if (PyUnicode_CompareWithASCIIString(dtype, "int64") != 0) return durations_fallback(args, nargs, kwnames);
  Ref batch(PyTuple_GetSlice(path->dims, 0, nd - 1));
  if (!batch) return nullptr;
  bool dynamic = dim_has_lengths(as_dim(time));
  signed char time_pos[kMaxDims + 1], targets_pos[kMaxDims + 1];
  int k_time = 0, k_targets = 0;
  if ((dynamic && !lengths_positions(as_dim(time), path->dims, true, time_pos, &k_time, caller)) ||
      !lengths_positions(as_dim(targets), batch.get(), false, targets_pos, &k_targets, caller)) {
    PyErr_Clear();
    return durations_fallback(args, nargs, kwnames);
  }
  Ref twice(dim_derive(as_dim(targets), DimOp::kMul, 2, nullptr, caller));
  Ref out_dim(twice ? dim_derive(as_dim(twice.get()), DimOp::kAdd, 1, nullptr, caller) : nullptr);
  if (!out_dim) return nullptr;
  Py_ssize_t n_out = dim_max_size(as_dim(out_dim.get()));
  if (n_out < 0) return n_out == -2 ? nullptr : durations_fallback(args, nargs, kwnames);
  if (n_out == PY_SSIZE_T_MAX) return durations_fallback(args, nargs, kwnames);  // (no room for the extra column)

  Py_ssize_t n_time = path->sizes[nd - 1];
  PyObject* raw = path->raw;
  PyObject* blank = v[2];
  Ref device(PyObject_GetAttr(raw, backend::T.s_device));
  if (!device) return nullptr;
  Ref frames(dynamic ? dim_cached_raw(as_dim(time), MaskKind::kMask, time_pos, static_cast<int>(nd), n_time,
                                      device.get())
                     : nullptr);
  if (dynamic && !frames) return nullptr;
  // a label frame that differs from the frame before (blank before the first) begins a label
  Ref is_label(PyObject_RichCompare(raw, blank, Py_NE));
  Ref before(narrowed(raw, static_cast<int>(nd - 1), 0, n_time - 1));
  Ref pad(Py_BuildValue("(ii)", 1, 0));
  if (!is_label || !before || !pad) return nullptr;
  Ref prev(backend::call3(backend::T.constant_pad_nd, before.get(), pad.get(), blank));
  Ref changed(prev ? PyObject_RichCompare(raw, prev.get(), Py_NE) : nullptr);
  Ref new_label(changed ? PyNumber_And(is_label.get(), changed.get()) : nullptr);
  if (!new_label) return nullptr;
  if (dynamic) {
    new_label = Ref(PyNumber_And(new_label.get(), frames.get()));
    if (!new_label) return nullptr;
  }
  static PyObject* minus_one = PyLong_FromLong(-1);
  if (!minus_one) return nullptr;
  Ref seen(backend::call2(backend::T.cumsum, new_label.get(), minus_one));  // labels begun so far
  if (!seen) return nullptr;
  // the label counts (the last frame's) against the targets' lengths, on the device
  Ref counts(backend::call3(backend::T.select, seen.get(), minus_one, minus_one));
  Ref lengths(counts ? dim_cached_raw(as_dim(targets), MaskKind::kLengths, targets_pos,
                                      static_cast<int>(nd - 1), 0, device.get())
                     : nullptr);
  Ref same(lengths ? PyObject_RichCompare(lengths.get(), counts.get(), Py_EQ) : nullptr);
  Ref all(same ? backend::call1(backend::T.all, same.get()) : nullptr);
  static PyObject* message = PyUnicode_FromString(
      "dimtorch.ctc_durations_from_path(): the lengths of targets_spatial_dim differ from the path's");
  if (!all || !message) return nullptr;
  Ref checked(backend::call2(backend::T.assert_async, all.get(), message));
  if (!checked) return nullptr;
  // the state of each frame: the blank after label k is 2 k, label k is 2 k - 1
  static PyObject* two = PyLong_FromLong(2);
  Ref doubled(two ? PyNumber_Multiply(seen.get(), two) : nullptr);
  Ref label_ints(doubled ? backend::call2(backend::T.to, is_label.get(), backend::T.int64) : nullptr);
  Ref state(label_ints ? PyNumber_Subtract(doubled.get(), label_ints.get()) : nullptr);
  if (!state) return nullptr;
  if (dynamic) {  // padding frames go to an extra last column, cut off
    Ref extra(PyLong_FromSsize_t(n_out));
    state = Ref(extra ? backend::call3(backend::T.where, frames.get(), state.get(), extra.get()) : nullptr);
    if (!state) return nullptr;
  }
  Py_ssize_t sizes[kMaxDims];
  std::copy(path->sizes, path->sizes + nd, sizes);
  sizes[nd - 1] = n_out + 1;
  Ref ones(int32_ones(path->sizes, nd, device.get()));
  Ref shape(ones ? size_tuple(sizes, nd) : nullptr);
  Ref zeros(shape ? backend::call2(backend::T.new_zeros, ones.get(), shape.get()) : nullptr);
  if (!zeros) return nullptr;
  PyObject* call[4] = {zeros.get(), minus_one, state.get(), ones.get()};
  Ref counted(PyObject_Vectorcall(backend::T.scatter_add_, call, 4, nullptr));
  Ref durations(counted ? narrowed(counted.get(), static_cast<int>(nd - 1), 0, n_out) : nullptr);
  Ref dims(durations ? dims_replaced(path->dims, nd - 1, out_dim.get()) : nullptr);
  if (!dims) return nullptr;
  sizes[nd - 1] = n_out;
  Ref result(tensor_make(durations.release(), dims.get(), sizes, nullptr, nullptr));
  if (!result) return nullptr;
  return PyTuple_Pack(2, result.get(), out_dim.get());
}

#define FASTCALL_KW(fn) DIMTORCH_OP(fn), METH_FASTCALL | METH_KEYWORDS

PyMethodDef kFunctions[] = {
    {"ctc_durations_from_path", FASTCALL_KW(f_ctc_durations_from_path),
     "ctc_durations_from_path(*, path, path_spatial_dim, blank_index, targets_spatial_dim=None, "
     "out_spatial_dim=None, check_dims=True, stop_on_failed_check=True) -> (tensor, dim): see "
     "dimtorch.ops.ctc_align.ctc_durations_from_path."},
    {nullptr}};

#undef FASTCALL_KW

}  // namespace

bool export_ops_ctc_align(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
