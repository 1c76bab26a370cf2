// The extension module dimtorch._C: sets up the backend table, then each concept in order.
#include <nanobind/nanobind.h>

#include "core/backend.h"
#include "core/dim.h"
#include "core/exports.h"
#include "core/tensor.h"

namespace nb = nanobind;
using namespace dimtorch;

/* Dim and Tensor are plain CPython types (see dim.cpp, tensor.cpp): their slots are the hot path,
   and a nanobind class would add its dispatch to every construction and operator. nanobind
   carries the module itself and the functions that are not per-op. */
NB_MODULE(_C, m) {
  if (!backend::init() || !export_definitions(m.ptr()) || !export_property(m.ptr()) || !export_dim(m.ptr()) || !export_tensor(m.ptr()) ||
      !export_ops_elementwise(m.ptr()) || !export_dim_math(m.ptr()) || !export_dim_binding(m.ptr()) || !export_mask(m.ptr()) ||
      !export_ops_reduce(m.ptr()) || !export_ops_dropout(m.ptr()) || !export_ops_normalization(m.ptr()) ||
      !export_ops_matmul(m.ptr()) || !export_creation(m.ptr()) ||
      !export_ops_shape(m.ptr()) || !export_ops_reshape(m.ptr()) ||
      !export_ops_gather(m.ptr()) || !export_ops_concat(m.ptr()) || !export_ops_pad(m.ptr()) || !export_ops_slicing(m.ptr()) ||
      !export_ops_stack(m.ptr()) || !export_ops_sort(m.ptr()) || !export_ops_packing(m.ptr()) ||
      !export_ops_scatter(m.ptr()) || !export_ops_masked(m.ptr()) || !export_ops_ctc_align(m.ptr()) ||
      !export_ops_repeat(m.ptr()) || !export_ops_decoding(m.ptr()) || !export_ops_conv(m.ptr()) || !export_ops_pool(m.ptr()) ||
      !export_ops_gating(m.ptr()) || !export_ops_nested(m.ptr()) ||
      !export_ops_window(m.ptr()) || !export_ops_reduce_out(m.ptr()) ||
      !export_ops_signal(m.ptr()) || !export_ops_label_smoothing(m.ptr()) || !export_ops_attention(m.ptr()) ||
      !export_ops_positional(m.ptr()) || !export_ops_gradient(m.ptr()) ||
      !export_ops_safe_log(m.ptr()) ||
      !export_ops_loop(m.ptr()))
    throw nb::python_error();

  m.def("_live_counts", [] { return nb::make_tuple(g_live_tensors, g_live_dims); },
        "(live Tensor objects, live Dim objects), for leak tests.");
  m.def("_clear_caches", [] {
    plan_cache_clear();
    matmul_cache_clear();
  },
        "Empties the plan caches (they hold the dims tuples they were made for).");
}
