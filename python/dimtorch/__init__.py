"""dimtorch: named-dimension tensors for PyTorch, in the style of the RETURNN frontend.

Dims (`Dim`) identify axes; a `Tensor` is a torch.Tensor with one Dim per axis. Ops align operands
by dim identity, and dims with per-sequence lengths mask their padding. The types and the hot ops
live in the C++ extension `dimtorch._C`; this package re-exports them and adds ops composed in
Python.
"""
import torch  # noqa: F401  (the core resolves torch callables when it is imported)

from ._C import *  # noqa: F401,F403  (Dim, Tensor and the ops implemented in C++)
from ._C import Dim, Tensor  # noqa: F401
from .ops.creation import (  # noqa: F401
    convert_to_tensor, ones_like, random_normal, random_uniform, range_over_dim, zeros_like,
)
from .ops.mask import last_frame_position_of_dim, sequence_mask  # noqa: F401
from .ops.gather import sparse_to_dense  # noqa: F401  (gather, pad, scatter: C++ fast paths; one_hot: _C)
from .ops.packing import unpack_padded  # noqa: F401  (pack_padded: C++ fast path)
from .ops.sort import sort, top_p_mask  # noqa: F401  (top_k, search_sorted, top_k_mask: C++ fast paths; cumsum: _C)
from .ops.stack import unstack  # noqa: F401  (split, stack: C++ fast paths)
from .ops.slicing import shift_left  # noqa: F401  (slice, shift_right, reverse_sequence: C++ fast paths)
# conv, pool: C++ fast paths; transposed_conv: _C calls its definition
from .ops.conv_args import make_conv_out_spatial_dims, make_transposed_conv_out_spatial_dims  # noqa: F401
from .ops.shape import expand_dim, expand_dims, replace_dim, split_dims  # noqa: F401  (merge_dims: C++; squeeze: _C)
from .ops.masked_nested import masked_scatter_nested, masked_select_nested  # noqa: F401  (masked_select/scatter: C++)
# reshape, replace_dim_v2: C++ fast paths (definitions in .ops.reshape)
# repeat: C++ fast path (definition in ._repeat)
# window: C++ fast path (definition in .ops.window)
from ._capture import pytree as _pytree  # noqa: F401  (registers Tensor as a pytree node)
from ._capture import compile as _compile
from ._pickle import register_safe_globals as _register_safe_globals
from .ops.loss import cross_entropy, ctc_loss, loss_mean_over_frames  # noqa: F401
from .ops.label_smoothing import label_smoothed_log_prob_gradient, smooth_one_hot  # noqa: F401  (label_smoothing: C++)
# reduce_logmeanexp: C++ fast path (definition in .ops.reduce)
from .ops.elementwise import elu, expm1, is_infinite, is_neg_infinite, selu  # noqa: F401  (lerp: C++ fast path)
# scatter, scatter_count: C++ fast paths (definitions in ._scatter)
# dot_attention: C++ fast path (definition in .ops.attention)
from .ops.loop import scan  # noqa: F401  (cond, while_loop: C++ fast paths)
# stft: C++ fast path (definition in .ops.signal); safe_log: C++ fast path (definition in .ops.safe_log)
from . import audio  # noqa: F401  (dt.audio.mel_filterbank, log_mel_filterbank_from_raw, specaugment, ...)
from .ops.concat import cum_concat_step  # noqa: F401  (concat: C++ fast path)
from .ops.decoding import edit_distance  # noqa: F401  (ctc_greedy_decode: C++ fast path)
from .ops.ctc_align import (  # noqa: F401  (ctc_durations_from_path: C++ fast path)
    ctc_best_path, ctc_no_label_loop_blank_durations_from_path,
)
# gating: C++ fast path (the GLU; definition in .ops.gating)
from .ops.normalize import normalize  # noqa: F401
from .ops.nested import gather_nested, mask_nested  # noqa: F401  (where_nested: C++ fast path)
from .ops.positional import (  # noqa: F401  (apply_rope: C++ fast path)
    relative_positional_encoding, sinusoidal_encoding, sinusoidal_positional_encoding,
)
from .ops.gradient import scaled_gradient, scaled_gradient_ext  # noqa: F401
# reduce_out: C++ fast path (definition in .ops.reduce_out)
from .ops.dim_ranges import linspace_over_dim, range_over_dim_strided, range_over_merged_dims  # noqa: F401
from .ops.shape_counts import masked_fraction_of_shape, num_elements_of_shape  # noqa: F401
from .ops.complex import complex_as_real, make_complex, real_as_complex  # noqa: F401
from .ops.repeat import limit_repeats  # noqa: F401
from .ops.assert_ import assert_  # noqa: F401
from .ops.creation import random_truncated_normal  # noqa: F401
from .ops.sampling import random_choice_with_replacement, random_choice_without_replacement  # noqa: F401
from .ops.slice_update import expand_make_non_empty, slice_update  # noqa: F401
from . import nn  # noqa: F401

_compile.install()  # the Python definitions, for the core's fallbacks and for torch.compile

from ._version import __version__
_register_safe_globals()  # torch.load(weights_only=True) of states holding Dims and Tensors


def _star_exports() -> list:
    """Public names for `from dimtorch import *`, without those that would shadow Python builtins
    (abs, round, slice): those stay reachable as dt.abs etc."""
    import builtins
    return sorted(name for name in globals()
                  if not name.startswith("_") and name != "torch" and not hasattr(builtins, name))


__all__ = _star_exports()
