// Fast path of ctc_greedy_decode (definition: python/dimtorch/ops/decoding.py) for its common call on the
// host: logits over (batch..., time, classes), no out_spatial_dim or target_dim. The definition's torch
// calls without its Python around them; every other case (other layouts, a device, every error) goes to
// the definition.
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

DIMTORCH_PYTHON_FALLBACK(greedy_fallback, "ctc_greedy_decode")

/// ctc_greedy_decode(logits, *, in_spatial_dim, blank_index, out_spatial_dim=None, target_dim=None,
/// wb_target_dim=None): the best class per frame, repeats collapsed, blanks and padding frames dropped, the
/// labels moved to the front of a new dim whose lengths (the counts) are read on the host.
PyObject* f_ctc_greedy_decode(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"logits", "in_spatial_dim", "blank_index", "out_spatial_dim", "target_dim",
                                      "wb_target_dim"};
  const char* caller = "dimtorch.ctc_greedy_decode()";
  PyObject* v[6];
  if (!parse_args(args, nargs, kwnames, names, 6, 1, 3, v, caller)) {
    PyErr_Clear();
    return greedy_fallback(args, nargs, kwnames);
  }
  if (!is_tensor(v[0]) || !as_tensor(v[0])->raw || !is_dim(v[1]) || !PyLong_CheckExact(v[2]) ||
      (v[3] && v[3] != Py_None) || (v[4] && v[4] != Py_None))
    return greedy_fallback(args, nargs, kwnames);
  TensorObject* logits = as_tensor(v[0]);
  PyObject* time = v[1];
  PyObject* wb = v[5] && v[5] != Py_None ? v[5] : logits->feature_dim;
  Py_ssize_t nd = tensor_ndim(logits), nb = nd - 2;
  if (!wb || !is_dim(wb) || nb < 0 || PyTuple_GET_ITEM(logits->dims, nd - 1) != wb ||
      PyTuple_GET_ITEM(logits->dims, nd - 2) != time || as_dim(wb)->size < 0)
    return greedy_fallback(args, nargs, kwnames);
  long blank = PyLong_AsLong(v[2]);
  if (blank == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return greedy_fallback(args, nargs, kwnames);
  }
  if (blank < 0 || blank >= as_dim(wb)->size) return greedy_fallback(args, nargs, kwnames);
  for (Py_ssize_t j = 0; j < nd; ++j)
    if (logits->sizes[j] == 0) return greedy_fallback(args, nargs, kwnames);
  Ref device(PyObject_GetAttr(logits->raw, backend::T.s_device));
  if (!device) return nullptr;
  static PyObject* cpu_name = nullptr;
  Ref device_type(PyObject_GetAttrString(device.get(), "type"));
  if (!device_type || !interned(&cpu_name, "cpu")) return nullptr;
  if (PyUnicode_Compare(device_type.get(), cpu_name) != 0) return greedy_fallback(args, nargs, kwnames);
  Ref batch(PyTuple_GetSlice(logits->dims, 0, nb));
  if (!batch) return nullptr;
  bool dynamic = dim_has_lengths(as_dim(time));
  signed char pos[kMaxDims + 1];
  int k = 0;
  if (dynamic && !lengths_positions(as_dim(time), logits->dims, true, pos, &k, caller)) {
    PyErr_Clear();
    return greedy_fallback(args, nargs, kwnames);
  }

  Py_ssize_t n_time = logits->sizes[nd - 2];
  static PyObject* minus_one = PyLong_FromLong(-1);
  if (!minus_one) return nullptr;
  Ref labels(backend::call2(backend::T.argmax, logits->raw, minus_one));  // (*batch, T)
  Ref before(labels ? narrowed(labels.get(), static_cast<int>(nb), 0, n_time - 1) : nullptr);
  Ref pad(Py_BuildValue("(ii)", 1, 0));
  if (!before || !pad) return nullptr;
  Ref prev(backend::call3(backend::T.constant_pad_nd, before.get(), pad.get(), v[2]));
  Ref changed(prev ? PyObject_RichCompare(labels.get(), prev.get(), Py_NE) : nullptr);
  Ref not_blank(changed ? PyObject_RichCompare(labels.get(), v[2], Py_NE) : nullptr);
  Ref keep(not_blank ? PyNumber_And(changed.get(), not_blank.get()) : nullptr);
  if (!keep) return nullptr;
  if (dynamic) {  // the dim's cached mask: padding frames are dropped
    Ref mask(dim_cached_raw(as_dim(time), MaskKind::kMask, pos, static_cast<int>(nb + 1), n_time, device.get()));
    keep = Ref(mask ? PyNumber_InPlaceAnd(keep.get(), mask.get()) : nullptr);
    if (!keep) return nullptr;
  }
  Ref counts(backend::call2(backend::T.sum, keep.get(), minus_one));  // on the host already
  Ref lengths(counts ? tensor_make(counts.release(), batch.get(), logits->sizes, nullptr, nullptr) : nullptr);
  static PyObject* name_kw = Py_BuildValue("(s)", "name");
  static PyObject* name = PyUnicode_InternFromString("ctc_decoded");
  if (!lengths || !name_kw || !name) return nullptr;
  PyObject* dim_args[2] = {lengths.get(), name};
  Ref out_dim(PyObject_Vectorcall(reinterpret_cast<PyObject*>(&DimType), dim_args, 1, name_kw));
  if (!out_dim) return nullptr;
  Py_ssize_t n_out = dim_max_size(as_dim(out_dim.get()));
  if (n_out < 0) return n_out == -2 ? nullptr : greedy_fallback(args, nargs, kwnames);

  // each kept frame's label to its place among its sequence's labels; the others to an extra column
  Ref begun(backend::call2(backend::T.cumsum, keep.get(), minus_one));
  static PyObject* one = PyLong_FromLong(1);
  Ref place(begun && one ? PyNumber_Subtract(begun.get(), one) : nullptr);
  Ref extra(PyLong_FromSsize_t(n_out));
  Ref position(place && extra ? backend::call3(backend::T.where, keep.get(), place.get(), extra.get()) : nullptr);
  Py_ssize_t sizes[kMaxDims];
  std::copy(logits->sizes, logits->sizes + nb, sizes);
  sizes[nb] = n_out + 1;
  Ref shape(position ? size_tuple(sizes, nb + 1) : nullptr);
  Ref zeros(shape ? backend::call2(backend::T.new_zeros, labels.get(), shape.get()) : nullptr);
  static PyObject* s_scatter_ = nullptr;
  if (!zeros || !interned(&s_scatter_, "scatter_")) return nullptr;
  PyObject* call[4] = {zeros.get(), minus_one, position.get(), labels.get()};
  Ref scattered(PyObject_VectorcallMethod(s_scatter_, call, 4, nullptr));
  Ref kept(scattered ? narrowed(scattered.get(), static_cast<int>(nb), 0, n_out) : nullptr);
  static PyObject* int32_name = PyUnicode_InternFromString("int32");
  PyObject* int32 = int32_name ? backend::dtype_from(int32_name, caller) : nullptr;
  Ref out_raw(kept && int32 ? backend::call2(backend::T.to, kept.get(), int32) : nullptr);
  if (!out_raw) return nullptr;
  Ref dims(PyTuple_New(nb + 1));
  if (!dims) return nullptr;
  for (Py_ssize_t j = 0; j < nb; ++j) PyTuple_SET_ITEM(dims.get(), j, Py_NewRef(PyTuple_GET_ITEM(batch.get(), j)));
  PyTuple_SET_ITEM(dims.get(), nb, Py_NewRef(out_dim.get()));
  sizes[nb] = n_out;
  Ref out(tensor_make(out_raw.release(), dims.get(), sizes, wb, nullptr));
  if (!out) return nullptr;
  return PyTuple_Pack(2, out.get(), out_dim.get());
}

#define FASTCALL_KW(fn) DIMTORCH_OP(fn), METH_FASTCALL | METH_KEYWORDS

PyMethodDef kFunctions[] = {
    {"ctc_greedy_decode", FASTCALL_KW(f_ctc_greedy_decode),
     "ctc_greedy_decode(logits, *, in_spatial_dim, blank_index, out_spatial_dim=None, target_dim=None, "
     "wb_target_dim=None) -> (tensor, dim): see dimtorch.ops.decoding.ctc_greedy_decode."},
    {nullptr}};

#undef FASTCALL_KW

}  // namespace

bool export_ops_decoding(PyObject* module) { return add_functions(module, kFunctions); }

}  // namespace dimtorch
