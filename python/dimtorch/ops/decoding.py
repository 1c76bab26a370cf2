"""Decoding and scoring helpers (RETURNN frontend's): ctc_greedy_decode, edit_distance, per sequence."""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from .. import _C
from .._core import in_graph as _in_graph, tracing as _tracing
from .._C import Dim, Tensor
from .._core.data_dependent import to_host
from .._core.dtypes import to_torch_dtype
from .._core.args import axis_of, check_tensor, dim_str, dims_str, lengths_positions
from ._support import names_errors

_MASK, _LENGTHS = 0, 2  # kinds of dimtorch._C._dim_cached_raw (src/core/mask.h)


def _lengths_raw(dim: Dim, order: tuple, device) -> torch.Tensor:
    """dim's lengths laid out for the batch dims `order` (size 1 for dims they do not vary over), on
    device (cached on the dim); a static dim's size as a 0-dim tensor."""
    if dim.lengths is None:
        return torch.full((), dim.get_max_size(), dtype=torch.int64, device=device)
    pos = []
    for b in dim.lengths.dims:
        if not any(e is b for e in order):
            raise ValueError(f"the lengths of {dim_str(dim)} vary over {dim_str(b)}, which the inputs lack")
        pos.append(next(i for i, e in enumerate(order) if e is b))
    return _C._dim_cached_raw(_LENGTHS, dim, tuple(pos), len(order), 0, device)


@names_errors("dimtorch.ctc_greedy_decode()")
def ctc_greedy_decode(logits: Tensor, *, in_spatial_dim: Dim, blank_index: int, out_spatial_dim: Optional[Dim] = None,
                      target_dim: Optional[Dim] = None, wb_target_dim: Optional[Dim] = None) -> Tuple[Tensor, Dim]:
    """Greedy CTC decoding: the best label per frame (over wb_target_dim, default logits'
    feature_dim), repeats collapsed, blanks dropped, each sequence within its own frames; returns
    (int32 labels over logits' other dims and out_spatial_dim, out_spatial_dim). out_spatial_dim's
    lengths are the label counts per sequence: they are read from the device (the output size
    depends on data). labels' sparse_dim: target_dim (its size must be blank_index: blank last) or
    wb_target_dim."""
    caller = "dimtorch.ctc_greedy_decode()"
    check_tensor(logits, caller, what="logits")
    wb = logits.feature_dim if wb_target_dim is None else wb_target_dim
    if not isinstance(wb, Dim):
        raise ValueError(f"{caller}: logits have no feature_dim; give wb_target_dim (dims: {dims_str(logits.dims)})")
    axis_of(logits, wb, caller, what="wb_target_dim", of="logits")
    axis_of(logits, in_spatial_dim, caller, what="in_spatial_dim", of="logits")
    if type(blank_index) is not int or not 0 <= blank_index < wb.size:
        raise ValueError(f"{caller}: blank_index must be an int in [0, {wb.size}), got {blank_index!r}")
    if target_dim is not None and (not isinstance(target_dim, Dim) or target_dim.size != blank_index):
        raise ValueError(f"{caller}: target_dim must be a Dim of size blank_index ({blank_index}), got {target_dim!r}")
    batch = tuple(d for d in logits.dims if d is not wb and d is not in_spatial_dim)
    order = batch + (in_spatial_dim, wb)
    raw = logits.raw if logits.dims == order else logits.raw_aligned(order)
    labels = raw.argmax(-1)  # (*batch, T)
    prev = torch.constant_pad_nd(labels[..., :-1], (1, 0), blank_index)  # (F.pad's Python: +1 us)
    keep = (labels != prev) & (labels != blank_index)
    if in_spatial_dim.lengths is not None:
        order = batch + (in_spatial_dim,)
        pos = lengths_positions(in_spatial_dim, batch, caller, "the logits lack")
        keep &= _C._dim_cached_raw(_MASK, in_spatial_dim, tuple(pos) + (len(batch),), len(order), labels.shape[-1],
                                   labels.device)  # the dim's cached mask
    counts = keep.sum(-1)
    if _tracing.tracing():
        return _greedy_in_graph(labels, keep, counts, batch, out_spatial_dim, target_dim if target_dim is not None
                                else wb)
    counts_host = to_host(counts)  # the new dim's lengths: a device read
    if out_spatial_dim is None:
        out_spatial_dim = Dim(Tensor(counts_host, batch), name="ctc_decoded")
        n_out = out_spatial_dim.get_max_size() if counts_host.numel() else 0  # (the new dim's, read once)
    elif not isinstance(out_spatial_dim, Dim) or out_spatial_dim.lengths is None or \
            not torch.equal(out_spatial_dim.lengths.raw_aligned(batch).to(torch.int64).expand(counts_host.shape),
                            counts_host):
        raise ValueError(f"{caller}: out_spatial_dim must have the decoded lengths {counts_host.tolist()}, got "
                         f"{out_spatial_dim!r}")
    else:
        n_out = int(counts_host.max()) if counts_host.numel() else 0
    position = torch.where(keep, keep.cumsum(-1) - 1, n_out)  # dropped frames go to an extra column
    out = labels.new_zeros(labels.shape[:-1] + (n_out + 1,)).scatter_(-1, position, labels)[..., :n_out]
    sparse = target_dim if target_dim is not None else wb
    return Tensor(out.to(torch.int32), batch + (out_spatial_dim,), sparse_dim=sparse), out_spatial_dim


def _greedy_in_graph(labels, keep, counts, batch: tuple, out_spatial_dim, sparse) -> Tuple[Tensor, Dim]:
    """ctc_greedy_decode while tracing: the decoded dim's lengths are the counts, in the graph, and its
    padded size the input's frames (a static bound: no size read from data, no device sync)."""
    if out_spatial_dim is None:
        out_spatial_dim = Dim(Tensor(counts, batch), name="ctc_decoded")
    elif not isinstance(out_spatial_dim, Dim) or out_spatial_dim.lengths is None:
        raise ValueError(f"dimtorch.ctc_greedy_decode(): out_spatial_dim must be a dynamic Dim with the decoded "
                         f"lengths, got {out_spatial_dim!r}")
    n = labels.shape[-1]
    position = torch.where(keep, keep.cumsum(-1) - 1, n)  # dropped frames go to an extra column
    out = labels.new_zeros(labels.shape[:-1] + (n + 1,)).scatter_(-1, position, labels)[..., :n]
    return Tensor(out.to(torch.int32), batch + (out_spatial_dim,), sparse_dim=sparse), out_spatial_dim


_COST_TABLE_MAX = 1 << 24  # elements of edit_distance's table of substitution costs (bool): 16 MiB


@names_errors("dimtorch.edit_distance()")
def edit_distance(a: Tensor, a_spatial_dim: Dim, b: Tensor, b_spatial_dim: Dim, *, dtype: str = "int32") -> Tensor:
    """Levenshtein distance between the label sequences a (over a_spatial_dim) and b (over
    b_spatial_dim), each sequence within its own length: a Tensor over the batch dims (a's other
    dims; b's must be among them or broadcast). Row by row over a's frames (the longest a), each row
    a few vectorized torch ops over the batch and b's frames; no device reads."""
    caller = "dimtorch.edit_distance()"
    check_tensor(a, caller, what="a")
    check_tensor(b, caller, what="b")
    axis_of(a, a_spatial_dim, caller, what="a_spatial_dim", of="a")
    axis_of(b, b_spatial_dim, caller, what="b_spatial_dim", of="b")
    out_dtype = to_torch_dtype(dtype, caller)
    batch = tuple(d for d in a.dims if d is not a_spatial_dim)
    extra = [d for d in b.dims if d is not b_spatial_dim and d not in batch]
    if extra:
        raise ValueError(f"{caller}: b has dims ({dims_str(extra)}) that a lacks (a dims: {dims_str(a.dims)})")
    ra = a.raw if a.dims == batch + (a_spatial_dim,) else a.raw_aligned(batch + (a_spatial_dim,))
    rb = b.raw if b.dims == batch + (b_spatial_dim,) else b.raw_aligned(batch + (b_spatial_dim,))
    device = ra.device
    try:
        la = _lengths_raw(a_spatial_dim, batch, device)
        lb = _lengths_raw(b_spatial_dim, batch, device)
    except ValueError as e:
        raise ValueError(f"{caller}: {e}") from None
    if _tracing.tracing():
        return Tensor(_edit_distance_in_graph(ra, rb, la, lb).to(out_dtype), batch)
    n_a, n_b = a_spatial_dim.get_max_size(), b_spatial_dim.get_max_size()
    ra, rb = ra[..., :n_a], rb[..., :n_b]
    shape = torch.broadcast_shapes(ra.shape[:-1], rb.shape[:-1], la.shape, lb.shape)
    j = torch.arange(n_b + 1, device=device)
    row = j.expand(shape + (n_b + 1,))  # D[0][j] = j
    final = row.clone()  # D[len_a] per sequence; length 0 takes row 0
    # Made once, not per row: the substitution costs of all rows (bool; per row where the table would be
    # large) and where each sequence of a ends (12 torch calls a row instead of 16).
    costs = ra.unsqueeze(-1) != rb.unsqueeze(-2) if ra.numel() * max(n_b, 1) <= _COST_TABLE_MAX else None
    ends = la.unsqueeze(-1) == torch.arange(n_a + 1, device=device)  # (*batch, Ta + 1)
    for i in range(1, n_a + 1):
        cost = costs[..., i - 1, :] if costs is not None else ra[..., i - 1:i] != rb  # (*batch, Tb) bool
        candidate = torch.minimum(row[..., :-1] + cost, row[..., 1:] + 1)  # substitute / delete, j >= 1
        candidate = torch.constant_pad_nd(candidate, (1, 0), i)  # D[i][0] = i
        row = torch.cummin(candidate - j, dim=-1).values + j  # then insertions along j
        final = torch.where(ends[..., i:i + 1], row, final)
    index = lb.expand(shape).unsqueeze(-1)
    return Tensor(final.gather(-1, index).squeeze(-1).to(out_dtype), batch)


def _edit_distance_in_graph(ra, rb, la, lb) -> torch.Tensor:
    """edit_distance's rows while tracing: the loop over a's frames as one torch scan over the raw's
    (symbolic) size, so one graph serves every length (a Python loop would be unrolled per length)."""
    n_b = rb.shape[-1]
    shape = torch.broadcast_shapes(ra.shape[:-1], rb.shape[:-1], la.shape, lb.shape)
    device = ra.device
    row0 = torch.arange(n_b + 1, device=device).expand(shape + (n_b + 1,)).clone()  # D[0][j] = j
    costs = (ra.unsqueeze(-1) != rb.unsqueeze(-2)).expand(shape + (ra.shape[-1], n_b)).movedim(-2, 0)
    steps = torch.arange(1, ra.shape[-1] + 1, device=device)
    ends = (la.unsqueeze(0) == steps.reshape((-1,) + (1,) * la.dim())).expand((ra.shape[-1],) + shape)

    def step(carry, cost, end, i):  # (closes over no sizes: a scan body takes tensors only)
        row, final = carry
        j = torch.arange(row.shape[-1], device=row.device)
        candidate = torch.minimum(row[..., :-1] + cost, row[..., 1:] + 1)  # substitute / delete, j >= 1
        candidate = torch.cat((i.expand(row[..., :1].shape), candidate), -1)  # D[i][0] = i
        row = torch.cummin(candidate - j, dim=-1).values + j  # then insertions along j
        return (row, torch.where(end.unsqueeze(-1), row, final)), i + 0  # (a scan must give an output)

    (_, final), _ = _in_graph.scan_frames(step, (row0, row0.clone()), [costs, ends, steps])
    return final.gather(-1, lb.expand(shape).unsqueeze(-1)).squeeze(-1)


__all__ = ["ctc_greedy_decode", "edit_distance"]
