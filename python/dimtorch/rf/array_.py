"""rf.array_: RETURNN frontend's array functions. Each name is dimtorch's op itself (the same object,
so its speed and graph capture are dimtorch's) where the op takes rf's signature; the few whose
conventions differ (argument order, return shape, a mode argument) are thin functions that call the op."""
from __future__ import annotations

import functools as _functools
from typing import Optional, Tuple

import dimtorch as _dt
from dimtorch import _C
from dimtorch import Dim, Tensor

__all__ = [
    "convert_to_tensor", "constant", "copy", "cast", "merge_dims", "split_dims", "reshape", "split", "expand_dim",
    "expand_dims", "squeeze", "window", "concat", "concat_features", "pad", "cum_concat_step", "slice_update",
    "stack", "unstack", "masked_select", "masked_scatter", "sequence_mask", "pack_padded", "pad_packed", "gather",
    "scatter", "scatter_mean", "scatter_argmax", "scatter_logsumexp", "scatter_logmeanexp", "scatter_count", "slice",
    "shift_right", "shift_left", "reverse_sequence", "where", "sort", "search_sorted", "sparse_to_dense", "one_hot",
    "top_k_mask", "top_p_mask", "repeat", "limit_repeats", "expand_make_non_empty", "real_as_complex",
    "complex_as_real", "make_complex",
]

# dimtorch's ops, bound as they are
convert_to_tensor = _dt.convert_to_tensor
constant = _dt.convert_to_tensor  # rf.array_.constant; the package's rf.constant is rf.const.constant
cast = _dt.cast
split_dims = _dt.split_dims
reshape = _dt.reshape
split = _dt.split
expand_dim = _dt.expand_dim
expand_dims = _dt.expand_dims
squeeze = _dt.squeeze
window = _dt.window
concat = _dt.concat
pad = _dt.pad
cum_concat_step = _dt.cum_concat_step
slice_update = _dt.slice_update
stack = _dt.stack
unstack = _dt.unstack
masked_select = _dt.masked_select
masked_scatter = _dt.masked_scatter
sequence_mask = _dt.sequence_mask
pack_padded = _dt.pack_padded
pad_packed = _dt.unpack_padded
gather = _dt.gather
scatter = _dt.scatter
scatter_count = _dt.scatter_count
slice = _dt.slice  # noqa: A001 (rf's name)
shift_right = _dt.shift_right
shift_left = _dt.shift_left
reverse_sequence = _dt.reverse_sequence
where = _dt.where
search_sorted = _dt.search_sorted
sparse_to_dense = _dt.sparse_to_dense
one_hot = _dt.one_hot
top_k_mask = _dt.top_k_mask
top_p_mask = _dt.top_p_mask
repeat = _dt.repeat
limit_repeats = _dt.limit_repeats
expand_make_non_empty = _dt.expand_make_non_empty
real_as_complex = _dt.real_as_complex
complex_as_real = _dt.complex_as_real
make_complex = _dt.make_complex


_merge_dims = _dt.merge_dims


def merge_dims(source: Tensor, *, dims, out_dim: Optional[Dim] = None) -> Tuple[Tensor, Dim]:
    """dimtorch.merge_dims, and, as RETURNN frontend, the feature marker follows the merge: when the
    source's feature_dim is among `dims`, the result's feature_dim is out_dim (dimtorch's op drops a
    marker whose dim is gone)."""
    out, out_dim = _merge_dims(source, dims=dims, out_dim=out_dim)
    feature = source.feature_dim
    if feature is not None and any(d is feature for d in dims):
        out = Tensor(out.raw, out.dims, sparse_dim=out.sparse_dim, feature_dim=out_dim)
    return out, out_dim


def copy(tensor: Tensor) -> Tensor:
    """A copy of the values (torch's clone: differentiable, a new raw), markers kept, as RETURNN frontend's
    rf.copy: a later in-place change of the source (Parameter.assign) does not show in it. (Tensor.copy()
    is the new object over the same raw.)"""
    return Tensor(tensor.raw.clone(), tensor.dims, sparse_dim=tensor.sparse_dim, feature_dim=tensor.feature_dim)


# concat along each source's feature dim, the concatenated dim the result's feature dim: C++ (the definition:
# dimtorch.ops.concat.rf_concat_features)
concat_features = _C._rf_concat_features


_concat = _dt.concat


# dimtorch.scatter with a mode: partials (C) of the op, no Python frame
scatter_mean = _functools.partial(_dt.scatter, mode="mean")
scatter_logsumexp = _functools.partial(_dt.scatter, mode="logsumexp")
scatter_logmeanexp = _functools.partial(_dt.scatter, mode="logmeanexp")


def scatter_argmax(source: Tensor, *, indices: Tensor, indices_dim: Dim, invalid_idx: Optional[int] = -1,
                   out_dim: Optional[Dim] = None) -> Tensor:
    """For each out position, the position along indices_dim of the largest value scattered there
    (dimtorch.scatter(mode="argmax")); positions nothing reaches get invalid_idx."""
    return _dt.scatter(source, indices=indices, indices_dim=indices_dim, mode="argmax", out_dim=out_dim,
                       fill_value=invalid_idx)


def sort(source: Tensor, *, axis: Dim, descending: bool = False, stable: bool = True) -> Tuple[Tensor, Tensor, Dim]:
    """(sorted, indices, out_dim): dimtorch.sort (always stable) with `axis` replaced by a new dim of its
    size (or lengths), as RETURNN frontend returns it; indices have sparse_dim=axis."""
    values, indices = _dt.sort(source, axis=axis, descending=descending)
    values, out_dim = _dt.replace_dim(values, in_dim=axis)
    indices, _ = _dt.replace_dim(indices, in_dim=axis, out_dim=out_dim)
    return values, indices, out_dim


