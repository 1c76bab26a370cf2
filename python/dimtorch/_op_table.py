"""The op table: every public op's one Python definition and, where it has one, its C++ fast path.

The definition is the op's semantics: readable, traceable by torch.compile, and what runs for every
call the fast path does not take. A fast path (a function of dimtorch._C) takes the common eager
call on real tensors and must give what the definition gives; the property tests run every row of
this table to check that. While torch.compile traces, Dynamo inlines the definition in place of the
fast path (dimtorch._capture.compile registers each row with torch.compiler.substitute_in_graph).
"""
from __future__ import annotations

import importlib
from typing import Callable, NamedTuple, Optional

from . import _C


class Op(NamedTuple):
    name: str                        # public name: dimtorch.<name>
    definition: Callable             # the Python definition
    fast_path: Optional[Callable]    # the C++ function of dimtorch._C, or None


# name -> module holding its definition (a function of the same name), relative to this package.
# Rows whose name is a function of dimtorch._C have a fast path.
_DEFINITIONS = {
    "pad": "ops.pad",
    "concat": "ops.concat",
    "gather": "ops.gather",
    "merge_dims": "ops.shape",
    "slice": "ops.slicing",
    "shift_right": "ops.slicing",
    "reverse_sequence": "ops.slicing",
    "split": "ops.stack",
    "stack": "ops.stack",
    "top_k": "ops.sort",
    "pack_padded": "ops.packing",
    "scatter": "ops.scatter",
    "dropout": "ops.dropout",
    "ceildiv": "ops.dim",
    "reshape": "ops.reshape",
    "masked_select": "ops.masked",
    "masked_scatter": "ops.masked",
    **{name: "ops.elementwise" for name in (
        "combine", "compare", "maximum", "minimum", "logical_and", "logical_or", "where", "clip", "cast",
        "exp", "log", "log1p", "sqrt", "rsqrt", "square", "tanh", "sigmoid", "relu", "gelu", "silu",
        "softplus", "sin", "cos", "floor", "ceil", "round", "is_finite", "logical_not", "abs", "neg",
        "squared_difference", "log_add_exp", "log_sigmoid",
        # Python only (no fast path)
        "is_infinite", "is_neg_infinite", "expm1", "elu", "selu", "lerp")},
    **{name: "ops.reduce" for name in (
        "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_logsumexp", "reduce_any",
        "reduce_all", "reduce_argmax", "reduce_argmin", "moments", "softmax", "log_softmax")},
    **{name: "ops.matmul" for name in ("matmul", "dot", "linear")},
    "reduce_logmeanexp": "ops.reduce",
    **{name: "ops.normalization" for name in ("layer_norm", "rms_norm", "batch_norm")},
    **{name: "ops.creation" for name in ("zeros", "ones", "full", "constant")},
    # Python-only ops (no fast path): their definitions are all there is.
    "one_hot": "ops.gather",
    "sparse_to_dense": "ops.gather",
    "unpack_padded": "ops.packing",
    "cumsum": "ops.sort",
    "sort": "ops.sort",
    "unstack": "ops.stack",
    "shift_left": "ops.slicing",
    "split_dims": "ops.shape",
    "expand_dim": "ops.shape",
    "expand_dims": "ops.shape",
    "squeeze": "ops.shape",
    "replace_dim": "ops.shape",
    "conv": "ops.conv",
    "transposed_conv": "ops.conv",
    "pool": "ops.pool",
    "cross_entropy": "ops.loss",
    "ctc_loss": "ops.loss",
    "loss_mean_over_frames": "ops.loss",
    "sequence_mask": "ops.mask",
    "convert_to_tensor": "ops.creation",
    "zeros_like": "ops.creation",
    "ones_like": "ops.creation",
    "range_over_dim": "ops.creation",
    "random_uniform": "ops.creation",
    "random_normal": "ops.creation",
    # RETURNN frontend coverage (Python only)
    "apply_rope": "ops.positional",
    "cond": "ops.loop",
    "ctc_best_path": "ops.ctc_align",
    "ctc_durations_from_path": "ops.ctc_align",
    "ctc_greedy_decode": "ops.decoding",
    "ctc_no_label_loop_blank_durations_from_path": "ops.ctc_align",
    "cum_concat_step": "ops.concat",
    "dot_attention": "ops.attention",
    "edit_distance": "ops.decoding",
    "gather_nested": "ops.nested",
    "gating": "ops.gating",
    "normalize": "ops.normalize",
    "label_smoothed_log_prob_gradient": "ops.label_smoothing",
    "label_smoothing": "ops.label_smoothing",
    "smooth_one_hot": "ops.label_smoothing",
    "last_frame_position_of_dim": "ops.mask",
    "make_conv_out_spatial_dims": "ops.conv_args",
    "make_transposed_conv_out_spatial_dims": "ops.conv_args",
    "mask_nested": "ops.nested",
    "masked_scatter_nested": "ops.masked_nested",
    "masked_select_nested": "ops.masked_nested",
    "relative_positional_encoding": "ops.positional",
    "repeat": "ops.repeat",
    "replace_dim_v2": "ops.reshape",
    "safe_log": "ops.safe_log",
    "scan": "ops.loop",
    "scatter_count": "ops.scatter",
    "search_sorted": "ops.sort",
    "sinusoidal_encoding": "ops.positional",
    "sinusoidal_positional_encoding": "ops.positional",
    "stft": "ops.signal",
    "top_k_mask": "ops.sort",
    "top_p_mask": "ops.sort",
    "where_nested": "ops.nested",
    "while_loop": "ops.loop",
    "scaled_gradient": "ops.gradient",
    "stop_gradient": "ops.gradient",
    "scaled_gradient_ext": "ops.gradient",
    "reduce_out": "ops.reduce_out",
    "range_over_dim_strided": "ops.dim_ranges",
    "range_over_merged_dims": "ops.dim_ranges",
    "linspace_over_dim": "ops.dim_ranges",
    "num_elements_of_shape": "ops.shape_counts",
    "masked_fraction_of_shape": "ops.shape_counts",
    "real_as_complex": "ops.complex",
    "complex_as_real": "ops.complex",
    "make_complex": "ops.complex",
    "limit_repeats": "ops.repeat",
    "assert_": "ops.assert_",
    "random_truncated_normal": "ops.creation",
    "random_choice_without_replacement": "ops.sampling",
    "random_choice_with_replacement": "ops.sampling",
    "slice_update": "ops.slice_update",
    "expand_make_non_empty": "ops.slice_update",
    "window": "ops.window",
}


def _load() -> dict:
    table = {}
    for name, module in _DEFINITIONS.items():
        definition = getattr(importlib.import_module(f"{__package__}.{module}"), name)
        table[name] = Op(name, definition, getattr(_C, name, None))
    return table


OPS: dict = _load()
