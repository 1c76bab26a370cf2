"""repeat: each frame of a dim repeated a per-frame number of times, into a new dynamic dim (durations to frames)."""
from __future__ import annotations

from typing import Optional

import torch

from .. import _C
from .._core import sizes as _sizes, tracing as _tracing
from .._C import Dim, Tensor
from .._core.data_dependent import to_host
from .gather import gather
from .._core.args import axis_of, check_tensor, dim_str, dims_str
from ._support import names_errors

_MASK, _LENGTHS = 0, 2  # kinds of dimtorch._C._dim_cached_raw (src/core/mask.h)
_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _limit(r: torch.Tensor, in_len, factor: float) -> torch.Tensor:
    """Repeats scaled down where a sequence would grow beyond factor * its length (rf.limit_repeats):
    every frame with a count keeps one repeat, the surplus of the sequence is scaled by one factor
    (rounded down), so relative durations stay and the bound holds."""
    keep = (r > 0).to(r.dtype)
    surplus = r - keep
    target = in_len * float(factor)
    total = r.sum(-1).to(torch.float32)
    budget = (target - keep.sum(-1).to(torch.float32)).clamp(min=0.0)
    scale = torch.where(total > target, budget / surplus.sum(-1).to(torch.float32).clamp(min=1.0), 1.0)
    return keep + (surplus.to(torch.float32) * scale.unsqueeze(-1)).to(r.dtype)


def _masked_limited(repeats: Tensor, in_spatial_dim: Dim, max_len_factor, caller: str):
    """(batch dims, int64 raw over (batch..., in_spatial_dim)): repeats with 0 in the padding of a dynamic
    in_spatial_dim, scaled down by _limit when max_len_factor is given."""
    batch = tuple(d for d in repeats.dims if d is not in_spatial_dim)
    layout = batch + (in_spatial_dim,)
    r = repeats.raw_aligned(layout)
    if r.dtype != torch.int64:
        r = r.to(torch.int64)
    lengths = in_spatial_dim.lengths
    if lengths is not None:
        for b in lengths.dims:
            if b not in batch:  # Dim equality is identity
                raise ValueError(f"{caller}: the lengths of {dim_str(in_spatial_dim)} vary over {dim_str(b)}, which is "
                                 f"not a dim of repeats (dims: {dims_str(repeats.dims)})")
        pos = tuple(layout.index(b) for b in lengths.dims) + (len(batch),)
        r = torch.where(_C._dim_cached_raw(_MASK, in_spatial_dim, pos, len(layout), r.shape[-1], r.device), r, 0)
    if max_len_factor is not None:
        if lengths is None:
            in_len = float(r.shape[-1])
        else:
            pos = tuple(batch.index(b) for b in lengths.dims)
            in_len = _C._dim_cached_raw(_LENGTHS, in_spatial_dim, pos, len(batch), 0, r.device).to(torch.float32)
        r = _limit(r, in_len, max_len_factor)
    return batch, r


@names_errors("dimtorch.limit_repeats()")
def limit_repeats(repeats: Tensor, *, in_spatial_dim: Dim, max_len_factor: float) -> Tensor:
    """repeats (durations over in_spatial_dim and batch dims) scaled down where a sequence would grow
    beyond max_len_factor * its length under dt.repeat: every nonzero repeat keeps one frame, the
    surplus of such a sequence is scaled by one factor (rounded down), so relative durations stay and
    the bound holds; sequences within the bound are unchanged. The padding gets 0. int64, over
    (repeats' other dims, in_spatial_dim). No device read."""
    caller = "dimtorch.limit_repeats()"
    check_tensor(repeats, caller, what="repeats")
    axis_of(repeats, in_spatial_dim, caller, what="in_spatial_dim", of="repeats")
    if repeats.raw.dtype not in _INT_DTYPES:
        raise TypeError(f"{caller}: repeats must be of an integer dtype, got {repeats.dtype}")
    if isinstance(max_len_factor, bool) or not isinstance(max_len_factor, (int, float)) or not max_len_factor >= 1:
        raise ValueError(f"{caller}: max_len_factor must be a number >= 1 (every frame keeps one repeat), "
                         f"got {max_len_factor!r}")
    batch, r = _masked_limited(repeats, in_spatial_dim, max_len_factor, caller)
    return Tensor(r, batch + (in_spatial_dim,), sparse_dim=repeats.sparse_dim)


@names_errors("dimtorch.repeat()")
def repeat(values: Tensor, *, in_spatial_dim: Dim, repeats: Tensor, out_spatial_dim: Optional[Dim] = None,
           max_len_factor: Optional[float] = None) -> tuple[Tensor, Dim]:
    """Each frame t of `in_spatial_dim` repeated repeats[..., t] times (0 drops it), in order, along a
    new dim; returns (tensor, out_spatial_dim). `repeats` (ints >= 0) is over in_spatial_dim and batch
    dims; out_spatial_dim is dynamic, its lengths over those batch dims the sum of each sequence's
    repeats. The result has values' dims, in_spatial_dim replaced by out_spatial_dim, and repeats'
    batch dims. The padding of a dynamic in_spatial_dim repeats nothing;
    out_spatial_dim's padding holds garbage (copies of frames of values).

    `max_len_factor`: sequences that would grow beyond max_len_factor * their length have their
    repeats scaled down (each nonzero repeat keeps one frame; the rest scaled by one factor per
    sequence, rounded down).

    The size of the result depends on data: the repeats are READ ON THE HOST (one wait for the
    device) for the new lengths, and checked there to be >= 0. A given out_spatial_dim must have
    those lengths.

    While tracing nothing is read on the host: the new lengths are computed in the graph, and the new
    dim's padded size is the bound ceil(in padded size * max_len_factor) when max_len_factor is given,
    else the max of the new lengths read in the graph as an unbacked size (torch.compile needs
    fullgraph=True for it, as for any .item()). A given out_spatial_dim is trusted."""
    caller = "dimtorch.repeat()"
    check_tensor(values, caller, what="values")
    check_tensor(repeats, caller, what="repeats")
    axis_of(values, in_spatial_dim, caller, what="in_spatial_dim", of="values")
    axis_of(repeats, in_spatial_dim, caller, what="in_spatial_dim", of="repeats")
    if repeats.raw.dtype not in _INT_DTYPES:
        raise TypeError(f"{caller}: repeats must be of an integer dtype, got {repeats.dtype}")
    if max_len_factor is not None and not max_len_factor >= 1:
        raise ValueError(f"{caller}: max_len_factor must be >= 1 (every frame keeps one repeat), got {max_len_factor}")
    batch, r = _masked_limited(repeats, in_spatial_dim, max_len_factor, caller)
    if _tracing.tracing():
        out_spatial_dim, n_out = _out_dim_in_graph(r, batch, out_spatial_dim, max_len_factor, caller)
        return _repeated(values, in_spatial_dim, r, batch, out_spatial_dim, n_out)
    host = to_host(r)
    if host.numel() and int(host.min()) < 0:
        raise ValueError(f"{caller}: repeats must be >= 0, got {int(host.min())} (repeats dims: {dims_str(repeats.dims)})")
    new_lengths = host.sum(-1)
    if out_spatial_dim is None:
        out_spatial_dim = Dim(Tensor(new_lengths, batch), name="repeat")
    else:
        _check_out_dim(out_spatial_dim, new_lengths, batch, caller)
    return _repeated(values, in_spatial_dim, r, batch, out_spatial_dim, out_spatial_dim.get_max_size())


def _out_dim_in_graph(r: torch.Tensor, batch: tuple, out_dim: Optional[Dim], max_len_factor, caller: str):
    """repeat while tracing: (out dim, its padded size), lengths the sums of the repeats in the graph."""
    if out_dim is None:
        out_dim = Dim(Tensor(r.sum(-1), batch), name="repeat")
        if max_len_factor is not None:  # a static bound: ceil(T * factor), exact in integers
            num, den = float(max_len_factor).as_integer_ratio()
            _sizes.bind(out_dim, (r.shape[-1] * num + den - 1) // den)
    elif not isinstance(out_dim, Dim):
        raise TypeError(f"{caller}: out_spatial_dim must be a Dim, got {type(out_dim).__name__}")
    return out_dim, _sizes.padded_size(out_dim, caller)  # (else: the max length, an unbacked size)


def _repeated(values: Tensor, in_spatial_dim: Dim, r: torch.Tensor, batch: tuple, out_spatial_dim: Dim, n_out):
    """repeat's frames: output frame j of a sequence from the first input frame whose cumulative count
    exceeds j, n_out output frames."""
    layout = batch + (in_spatial_dim,)
    n_in = r.shape[-1]
    # Output frame j of a sequence comes from the first input frame whose cumulative count exceeds j.
    cum = r.cumsum(-1)
    frames = torch.arange(n_out, device=r.device).expand(list(r.shape[:-1]) + [n_out])
    index = torch.searchsorted(cum, frames.contiguous(), side="right").clamp_(max=torch.sym_max(n_in - 1, 0))
    if all(b in values.dims for b in batch):  # Dim equality is identity
        # values as (batch, in, rest): one torch.gather along in, as the index has the batch dims.
        rest = tuple(d for d in values.dims if d is not in_spatial_dim and d not in batch)
        xr = values.raw_aligned(layout + rest)
        shape = list(xr.shape)
        shape[len(batch)] = n_out
        raw = torch.gather(xr, len(batch), index.view(list(index.shape) + [1] * len(rest)).expand(shape))
        out = Tensor(raw, batch + (out_spatial_dim,) + rest, sparse_dim=values.sparse_dim,
                     feature_dim=values.feature_dim if values.feature_dim in rest else None)
        return out, out_spatial_dim
    indices = Tensor(index, batch + (out_spatial_dim,), sparse_dim=in_spatial_dim)
    return gather(values, indices=indices, axis=in_spatial_dim), out_spatial_dim


def _check_out_dim(out_dim: Dim, new_lengths: torch.Tensor, batch: tuple, caller: str) -> None:
    if not isinstance(out_dim, Dim):
        raise TypeError(f"{caller}: out_spatial_dim must be a Dim, got {type(out_dim).__name__}")
    if out_dim.lengths is None:
        fits = out_dim.size is not None and bool((new_lengths == out_dim.size).all())
    else:
        given = out_dim.lengths
        fits = set(map(id, given.dims)) == set(map(id, batch)) and bool(
            (given.raw_aligned(batch).to(torch.int64) == new_lengths).all())
    if not fits:
        raise ValueError(f"{caller}: out_spatial_dim {dim_str(out_dim)} does not have the repeated lengths "
                         f"{new_lengths.tolist()} (over {dims_str(batch)})")
