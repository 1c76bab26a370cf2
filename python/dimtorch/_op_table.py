"""The op table: every public op's one Python definition and, where it has one, its C++ fast path.

The definition is the op's semantics: readable, traceable by torch.compile, and what runs for every
call the fast path does not take. A fast path (a function of dimtorch._C) takes the common eager
call on real tensors and must give what the definition gives; the property tests run every row of
this table to check that. While torch.compile traces, Dynamo inlines the definition in place of the
fast path (dimtorch._compile registers each row with torch.compiler.substitute_in_graph).
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
    "pad": "_pad",
    "concat": "_concat",
    "gather": "_gather",
    "merge_dims": "_shape_ops",
    "slice": "_slicing",
    "shift_right": "_slicing",
    "reverse_sequence": "_slicing",
    "split": "_stack",
    "stack": "_stack",
    "top_k": "_sort",
    "pack_padded": "_packing",
    "scatter": "_scatter",
    "dropout": "_dropout",
    "ceildiv": "_dim",
    "reshape": "_reshape",
    "masked_select": "_masked",
    "masked_scatter": "_masked",
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
    **{name: "ops.creation" for name in ("zeros", "ones", "full")},
    # Python-only ops (no fast path): their definitions are all there is.
    "one_hot": "_gather",
    "sparse_to_dense": "_gather",
    "unpack_padded": "_packing",
    "cumsum": "_sort",
    "sort": "_sort",
    "unstack": "_stack",
    "shift_left": "_slicing",
    "split_dims": "_shape_ops",
    "expand_dim": "_shape_ops",
    "expand_dims": "_shape_ops",
    "squeeze": "_shape_ops",
    "replace_dim": "_shape_ops",
    "conv": "_conv",
    "transposed_conv": "_conv",
    "pool": "_pool",
    "cross_entropy": "_loss",
    "ctc_loss": "_loss",
    "loss_mean_over_frames": "_loss",
    "sequence_mask": "_mask",
    "convert_to_tensor": "_creation",
    "zeros_like": "_creation",
    "ones_like": "_creation",
    "range_over_dim": "_creation",
    "random_uniform": "_creation",
    "random_normal": "_creation",
    # RETURNN frontend coverage (Python only)
    "apply_rope": "_positional",
    "cond": "_loop",
    "ctc_best_path": "_ctc_align",
    "ctc_durations_from_path": "_ctc_align",
    "ctc_greedy_decode": "_decoding",
    "ctc_no_label_loop_blank_durations_from_path": "_ctc_align",
    "cum_concat_step": "_concat",
    "dot_attention": "_attention",
    "edit_distance": "_decoding",
    "gather_nested": "_nested",
    "gating": "_gating",
    "normalize": "_normalize",
    "label_smoothed_log_prob_gradient": "_label_smoothing",
    "label_smoothing": "_label_smoothing",
    "smooth_one_hot": "_label_smoothing",
    "last_frame_position_of_dim": "_mask",
    "make_conv_out_spatial_dims": "_conv_args",
    "make_transposed_conv_out_spatial_dims": "_conv_args",
    "mask_nested": "_nested",
    "masked_scatter_nested": "_masked_nested",
    "masked_select_nested": "_masked_nested",
    "relative_positional_encoding": "_positional",
    "repeat": "_repeat",
    "replace_dim_v2": "_reshape",
    "safe_log": "_safe_log",
    "scan": "_loop",
    "scatter_count": "_scatter",
    "search_sorted": "_sort",
    "sinusoidal_encoding": "_positional",
    "sinusoidal_positional_encoding": "_positional",
    "stft": "_signal",
    "top_k_mask": "_sort",
    "top_p_mask": "_sort",
    "where_nested": "_nested",
    "while_loop": "_loop",
    "scaled_gradient": "_gradient",
    "scaled_gradient_ext": "_gradient",
    "reduce_out": "_reduce_out",
    "range_over_dim_strided": "_dim_ranges",
    "range_over_merged_dims": "_dim_ranges",
    "linspace_over_dim": "_dim_ranges",
    "num_elements_of_shape": "_shape_counts",
    "masked_fraction_of_shape": "_shape_counts",
    "real_as_complex": "_complex",
    "complex_as_real": "_complex",
    "make_complex": "_complex",
    "limit_repeats": "_repeat",
    "assert_": "_assert",
    "random_truncated_normal": "_creation",
    "random_choice_without_replacement": "_sampling",
    "random_choice_with_replacement": "_sampling",
    "slice_update": "_slice_update",
    "expand_make_non_empty": "_slice_update",
    "window": "_window",
}


def _load() -> dict:
    table = {}
    for name, module in _DEFINITIONS.items():
        definition = getattr(importlib.import_module(f"{__package__}.{module}"), name)
        table[name] = Op(name, definition, getattr(_C, name, None))
    return table


OPS: dict = _load()
