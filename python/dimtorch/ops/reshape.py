"""reshape (any regrouping of some dims into others) and replace_dim_v2 (a dim replaced by one of another size)."""
from __future__ import annotations

import math
from typing import Sequence

import torch

from .. import _C
from .._core import tracing as _tracing
from .._C import Dim, Tensor
from .._core.args import axis_of, check_tensor, dim_str, dims_arg, dims_str, distinct_axes, repeats_a_dim
from .shape import _check_lengths_kept, _regroup
from ._support import names_errors, padded_size

_MASK = 0  # kind of dimtorch._C._dim_cached_raw (src/core/mask.h)


def reshape(source: Tensor, in_dims: Sequence[Dim], out_dims: Sequence[Dim]) -> Tensor:
    """The raw data of `in_dims` (in this order, the first the slowest-varying) read as `out_dims`
    (torch.reshape), in the place of the first of in_dims in source; source's other dims stay.

    For splitting or merging dims with per-sequence lengths that stay true use split_dims and
    merge_dims: this is any other reshape (a dynamic dim among in_dims brings its padding frames
    along; a dynamic out dim takes its max length as raw size, its lengths are the caller's promise).
    Out dims are static, dynamic, or at most one sized from data (its size is what is left)."""
    caller = "dimtorch.reshape()"
    check_tensor(source, caller, what="source")
    in_dims = dims_arg(in_dims, caller, "in_dims")
    out_dims = dims_arg(out_dims, caller, "out_dims")
    axes = distinct_axes(source, in_dims, caller, "in_dims", "in_dims entry", "; give the dims to reshape")
    if repeats_a_dim(out_dims):
        raise ValueError(f"{caller}: out_dims lists a dim twice ({dims_str(out_dims)})")
    for d in out_dims:
        if d in source.dims and d not in in_dims:  # Dim equality is identity
            raise ValueError(f"{caller}: out dim {dim_str(d)} is already a dim of source (dims: {dims_str(source.dims)})")
    _check_lengths_kept(source, in_dims, caller)
    in_sizes = [source.raw.shape[a] for a in axes]
    total = math.prod(in_sizes)
    sizes, free = [], []
    for i, d in enumerate(out_dims):
        if d.size is None and d.lengths is None:
            free.append(i)
            sizes.append(1)
        else:
            sizes.append(padded_size(d, caller))
    known = math.prod(sizes)
    if len(free) > 1:
        raise ValueError(f"{caller}: out_dims has {len(free)} dims sized from data ({dims_str([out_dims[i] for i in free])}); "
                         f"at most one can take the size that is left")
    if free and known and total % known == 0:
        sizes[free[0]] = total // known
    if math.prod(sizes) != total or (free and not known):
        raise ValueError(f"{caller}: in_dims ({dims_str(in_dims)}) have sizes {in_sizes} ({total} entries), which "
                         f"do not fit out_dims ({dims_str(out_dims)}) of sizes {sizes}")
    return _regroup(source, axes, sizes, out_dims)


def _within(out_dim: Dim, in_dim: Dim) -> bool:
    """Whether every valid frame of out_dim is known, from host lengths, to be a valid frame of the
    dynamic in_dim (no frame of in_dim's padding can land in out_dim's valid frames)."""
    lengths = in_dim.lengths
    if out_dim.get_max_size() > in_dim.get_max_size():
        return False  # the sequence with the longest out length is longer than any in length
    if out_dim.lengths is None:
        return out_dim.size is not None and (lengths.raw.numel() == 0 or out_dim.size <= int(lengths.raw.min()))
    out_lengths = out_dim.lengths
    if set(map(id, out_lengths.dims)) != set(map(id, lengths.dims)):
        return False
    return bool((out_lengths.raw_aligned(lengths.dims) <= lengths.raw).all())


@names_errors("dimtorch.replace_dim_v2()")
def replace_dim_v2(source: Tensor, *, in_dim: Dim, out_dim: Dim, allow_expand: bool = True,
                   allow_shrink: bool = True) -> Tensor:
    """source with `in_dim` replaced by `out_dim`, whose size may differ: the first frames are kept,
    cut to out_dim's size (allow_shrink) or followed by zeros (allow_expand). For a dynamic in_dim
    (lengths over dims of source) frames at or beyond each sequence's own length read 0, so out_dim's
    valid frames never hold in_dim's padding (skipped when out_dim's lengths are known on the host to
    fit within in_dim's). A dynamic out_dim takes its max length as raw size. Nothing is read from the
    device."""
    caller = "dimtorch.replace_dim_v2()"
    check_tensor(source, caller, what="source")
    a = axis_of(source, in_dim, caller, what="in_dim")
    if not isinstance(out_dim, Dim):
        raise TypeError(f"{caller}: out_dim must be a Dim, got {type(out_dim).__name__}")
    if out_dim in source.dims:  # Dim equality is identity
        raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} is already a dim of source (dims: {dims_str(source.dims)})")
    new = padded_size(out_dim, caller, what="out_dim")  # (while tracing: its padded size in the trace)
    raw = source.raw
    old = raw.shape[a]
    if new > old and not allow_expand:
        raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} (size {new}) is larger than in_dim {dim_str(in_dim)} "
                         f"(size {old}) and allow_expand=False")
    if new < old and not allow_shrink:
        raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} (size {new}) is smaller than in_dim {dim_str(in_dim)} "
                         f"(size {old}) and allow_shrink=False")
    if new < old:
        raw = raw.narrow(a, 0, new)
    elif new > old:
        raw = torch.constant_pad_nd(raw, (0, 0) * (raw.dim() - 1 - a) + (0, new - old))
    lengths = in_dim.lengths
    if lengths is not None and all(b in source.dims for b in lengths.dims) and (
            _tracing.tracing() or not _within(out_dim, in_dim)):  # (_within reads host lengths)
        pos = tuple(source.dims.index(b) for b in lengths.dims) + (a,)
        mask = _C._dim_cached_raw(_MASK, in_dim, pos, raw.dim(), new, raw.device)
        raw = torch.where(mask, raw, False if raw.dtype == torch.bool else 0)
    dims = source.dims[:a] + (out_dim,) + source.dims[a + 1:]
    sparse_dim = out_dim if source.sparse_dim is in_dim else source.sparse_dim
    feature_dim = out_dim if source.feature_dim is in_dim else source.feature_dim
    return Tensor(raw, dims, sparse_dim=sparse_dim, feature_dim=feature_dim)
