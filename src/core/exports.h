// What each source file adds to the extension module dimtorch._C, in the order module.cpp adds
// them (one place: a new file's export goes here and into module.cpp's list). Each returns false
// with a Python error set on failure.
#pragma once
#include "core/common.h"

namespace dimtorch {

bool export_definitions(PyObject* module);  // definitions.cpp: the registry of Python definitions (_set_definitions)
bool export_property(PyObject* module);  // property.cpp: the _Property descriptor type
bool export_dim(PyObject* module);  // dim.cpp: Dim
bool export_tensor(PyObject* module);  // tensor.cpp: Tensor
bool export_ops_elementwise(PyObject* module);  // ops_elementwise.cpp: elementwise ops and Tensor operators
bool export_dim_math(PyObject* module);  // dim_math.cpp: dimtorch.ceildiv (Dim operators: install_dim_math_slots)
bool export_dim_binding(PyObject* module);  // dim_binding.cpp: binding a declared dim's lengths, Dim's RETURNN attributes
bool export_mask(PyObject* module);  // mask.cpp: masks of dims, Tensor.copy_masked
bool export_ops_reduce(PyObject* module);  // ops_reduce.cpp: reductions, moments, softmax, log_softmax
bool export_ops_dropout(PyObject* module);  // ops_dropout.cpp: dropout
bool export_ops_normalization(PyObject* module);  // ops_normalization.cpp: layer_norm, rms_norm, batch_norm
bool export_ops_matmul(PyObject* module);  // ops_matmul.cpp: matmul, dot, linear
bool export_creation(PyObject* module);  // creation.cpp: zeros, ones, full
bool export_ops_shape(PyObject* module);  // ops_shape.cpp: merge_dims, _merged_dim
bool export_ops_reshape(PyObject* module);  // ops_reshape.cpp: reshape
bool export_ops_gather(PyObject* module);  // ops_gather.cpp: gather
bool export_ops_concat(PyObject* module);  // ops_concat.cpp: concat
bool export_ops_pad(PyObject* module);  // ops_pad.cpp: pad
bool export_ops_slicing(PyObject* module);  // ops_slicing.cpp: slice, shift_right, reverse_sequence
bool export_ops_stack(PyObject* module);  // ops_stack.cpp: split, stack
bool export_ops_sort(PyObject* module);  // ops_sort.cpp: top_k
bool export_ops_packing(PyObject* module);  // ops_packing.cpp: pack_padded
bool export_ops_scatter(PyObject* module);  // ops_scatter.cpp: scatter, scatter_count
bool export_ops_ctc_align(PyObject* module);  // ops_ctc_align.cpp: ctc_durations_from_path
bool export_ops_repeat(PyObject* module);  // ops_repeat.cpp: repeat
bool export_ops_decoding(PyObject* module);  // ops_decoding.cpp: ctc_greedy_decode
bool export_ops_masked(PyObject* module);  // ops_masked.cpp: masked_select, masked_scatter
bool export_ops_conv(PyObject* module);  // ops/conv.cpp: conv (transposed_conv: its definition)
bool export_ops_pool(PyObject* module);  // ops/pool.cpp: pool
bool export_ops_gating(PyObject* module);  // ops/gating.cpp: gating (the GLU)
bool export_ops_reduce_out(PyObject* module);  // ops/reduce_out.cpp: reduce_out
bool export_ops_signal(PyObject* module);  // ops/signal.cpp: stft
bool export_ops_label_smoothing(PyObject* module);  // ops/label_smoothing.cpp: label_smoothing
bool export_ops_nested(PyObject* module);  // ops/nested.cpp: where_nested (a flat state)
bool export_ops_window(PyObject* module);  // ops/window.cpp: window
bool export_ops_gradient(PyObject* module);  // ops/gradient.cpp: stop_gradient
bool export_ops_safe_log(PyObject* module);  // ops/safe_log.cpp: safe_log
bool export_ops_attention(PyObject* module);  // ops/attention.cpp: dot_attention
bool export_ops_positional(PyObject* module);  // ops/positional.cpp: apply_rope
bool export_ops_loop(PyObject* module);  // ops/loop.cpp: cond, while_loop (Python bool conditions)

/// Empty the plan caches (they hold the dims tuples they were made for): plan.cpp, ops_matmul.cpp.
void plan_cache_clear();
void matmul_cache_clear();

}  // namespace dimtorch
