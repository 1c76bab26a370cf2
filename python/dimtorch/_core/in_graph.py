"""The pieces op definitions share in their in-graph forms (while tracing): frame positions, masks of a layout, sizes.

In-graph forms read no host data: lengths enter as tensors (`_tracing.lengths_raw`), masks and
indices are torch ops on them, and sizes are the raws' (symbolic while tracing). Nothing here caches.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from . import sizes as _sizes, tracing as _tracing
from .._C import Dim


def positions(shape, axis: int, device, dtype=torch.int64) -> torch.Tensor:
    """0, 1, ..., shape[axis] - 1 along `axis` of a raw of len(shape) axes (size 1 elsewhere)."""
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return torch.arange(shape[axis], dtype=dtype, device=device).reshape(view)


def lengths_in(dim: Dim, dims: Sequence[Dim]) -> bool:
    """Whether every dim the lengths of dynamic `dim` vary over is among `dims`."""
    return all(any(b is d for d in dims) for b in dim.lengths.dims)


def valid_mask(dims: Sequence[Dim], shape, device, among: Optional[Sequence[Dim]] = None) -> Optional[torch.Tensor]:
    """bool raw broadcastable to `shape` (a raw over `dims`), True where every dynamic dim of `dims`
    (only those in `among`, when given) is within its sequence's length; None when none has
    padding here. A dim whose lengths vary over a dim not in `dims` is left out (as the eager
    masks do: without its batch dims the layout has no padding of it)."""
    dims = tuple(dims)
    mask = None
    for d in dims:
        if d.lengths is None or (among is not None and not any(d is e for e in among)):
            continue
        if not lengths_in(d, dims):
            continue
        m = _tracing.mask_raw(d, dims, shape, device)
        mask = m if mask is None else mask & m
    return mask


def masked(raw: torch.Tensor, dims: Sequence[Dim], value, among: Optional[Sequence[Dim]] = None) -> torch.Tensor:
    """raw (over `dims`) with the padding frames of its dynamic dims (those in `among`) set to `value`."""
    mask = valid_mask(dims, raw.shape, raw.device, among)
    return raw if mask is None else torch.where(mask, raw, value)


def padded_size(dim: Dim, caller: str, beside=()):
    """The raw size of a new tensor over `dim` while tracing: its static size, else the size bound to it
    in the trace (dimtorch._core.sizes.padded_size, which names the call when there is none)."""
    return _sizes.padded_size(dim, caller, beside)


def dim_cached_raw(kind: int, dim: Dim, pos, ndim: int, size, device) -> torch.Tensor:
    """The in-graph form of dimtorch._C._dim_cached_raw (src/core/mask.h), nothing cached: dim's mask
    (kind 0: True on valid frames, dim at axis pos[k] of raw size `size`), its lengths clamped to >= 1
    as float32 (kind 1) or its lengths (kind 2), laid out for `ndim` axes with the lengths' dims at
    pos[:k] (size 1 on the other axes)."""
    lengths = dim.lengths.raw
    k = lengths.dim()
    at = [int(p) for p in pos[:k]]
    order = sorted(range(k), key=lambda i: at[i])
    if order != list(range(k)):
        lengths = lengths.permute(order)
    shape = [1] * ndim
    for j, i in enumerate(order):
        shape[at[i]] = lengths.shape[j]
    lengths = lengths.reshape(shape)
    device = torch.device(device) if device is not None else lengths.device
    if lengths.device != device:
        lengths = lengths.to(device, non_blocking=True)
    if kind == 2:
        return lengths
    if kind == 1:
        return lengths.clamp_min(1).to(torch.float32)
    view = [1] * ndim
    view[int(pos[k])] = size
    return torch.arange(size, device=device).reshape(view) < lengths


def scan_frames(step, init, frames: Sequence[Optional[torch.Tensor]], *, dim: int = 0, reverse: bool = False):
    """A frame loop as one torch scan (torch._higher_order_ops.scan, a prototype in torch 2.13), for
    torch.compile/export: the time size stays symbolic, where a Python loop is unrolled per length.
    step(carry, *frame) -> (carry, out) gets each frame of the tensors in `frames` along `dim` (None
    for those that are None); returns (final carry, the outs stacked along `dim`)."""
    from torch._higher_order_ops.scan import scan

    present = [f is not None for f in frames]

    def body(carry, frame):
        given = iter(frame)
        new, out = step(carry, *(next(given) if p else None for p in present))
        carries = new if isinstance(new, tuple) else (new,)
        return new, (out.clone() if any(out is c for c in carries) else out)  # (outs may not alias the carry)

    with _sizes.scan_body_sizes():
        return scan(body, init, [f for f in frames if f is not None], dim=dim, reverse=reverse)
