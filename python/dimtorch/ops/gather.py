"""gather (index along a dim by an index tensor or an int), one_hot and sparse_to_dense."""
from __future__ import annotations

import math
from typing import Optional, Union

import torch
import torch.nn.functional as F

from .. import _C
from .._C import Dim, Tensor, clip
from .._core import default_device as _default_device
from .._core.args import axis_of, check_tensor, dim_str, dims_str, keep_markers
from ._support import names_errors

_LENGTHS = 2  # kind of dimtorch._C._dim_cached_raw (src/core/mask.h): the lengths on a device

_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def gather(x: Tensor, /, *, indices: Union[Tensor, int], axis: Optional[Dim] = None,
           clip_to_valid: bool = False) -> Tensor:
    """Values of x at `indices` along `axis` (default: the sparse_dim of indices, as in RETURNN
    frontend). With an int, the one frame at that index (axis removed). With an int Tensor whose
    sparse_dim is `axis` or None (positions computed in a loop body often have none), the output
    dims are x's dims with `axis` replaced by the dims of indices that x lacks; dims in both are
    batch dims (each batch entry gathers with its own indices). Indices over `axis` itself (RETURNN's
    beam backtrack: `gather(target, indices=range_over_dim(beam))`, back-pointers over the beam they
    point into) are new positions along axis: the output keeps axis, now indexed by them (as RETURNN
    frontend, where axis counts among the indices' own dims). Indices must be in range
    everywhere, their padding included (out-of-range values raise torch's error; nothing here
    reads them on the host).

    clip_to_valid=True clips the indices into [0, size - 1], for a dynamic axis into each
    sequence's own [0, length - 1] (on the device, from the lengths' cached device copy): an index
    past a sequence's end reads its last frame, never its padding (an empty axis reads zeros). The
    result then also has the dims the lengths vary over (for an int index: x's dims without axis)."""
    caller = "dimtorch.gather()"
    check_tensor(x, caller)
    if axis is None:
        if not isinstance(indices, Tensor) or indices.sparse_dim is None:
            raise TypeError(f"{caller}: give axis, or indices with a sparse_dim (the dim they index)")
        axis = indices.sparse_dim
    a = axis_of(x, axis, caller)
    if not isinstance(clip_to_valid, bool):
        raise TypeError(f"{caller}: clip_to_valid must be a bool, got {clip_to_valid!r}")
    if isinstance(indices, int) and not isinstance(indices, bool):
        size = x.raw.shape[a]
        if clip_to_valid and axis.lengths is not None:
            # torch.full, not torch.tensor: a tensor from Python data is a blocking host-to-device copy.
            indices = Tensor(torch.full((), indices, dtype=torch.int64, device=x.raw.device), (), sparse_dim=axis)
        else:
            if clip_to_valid:
                indices = min(max(indices, 0), max(size - 1, 0))
            if not 0 <= indices < size:
                raise IndexError(f"{caller}: index {indices} is out of range for axis {dim_str(axis)} of size {size}")
            return keep_markers(x, x.raw.select(a, indices), x.dims[:a] + x.dims[a + 1:])
    if not isinstance(indices, Tensor):
        raise TypeError(f"{caller}: indices must be a dimtorch.Tensor or an int, got {type(indices).__name__}")
    if indices.raw.dtype not in _INT_DTYPES:
        raise TypeError(f"{caller}: indices must be of an integer dtype, got {indices.dtype}")
    if indices.sparse_dim is not axis and indices.sparse_dim is not None:
        raise ValueError(f"{caller}: the sparse_dim of indices is {dim_str(indices.sparse_dim)}, but axis is "
                         f"{dim_str(axis)} (indices dims: {dims_str(indices.dims)})")
    if clip_to_valid:
        indices = _clipped(indices, x, a, axis, caller)

    common = [d for d in x.dims if d is not axis and any(d is e for e in indices.dims)]
    for d in common:
        sx, si = x.raw.shape[x.dims.index(d)], indices.raw.shape[indices.dims.index(d)]
        if sx != si:
            raise ValueError(f"{caller}: dim {dim_str(d)} has size {sx} in x but {si} in indices")
    rest_x = [d for d in x.dims if d is not axis and not any(d is e for e in common)]
    rest_i = [d for d in indices.dims if not any(d is e for e in common)]
    if common and len(rest_i) == 1 and not (clip_to_valid and x.raw.shape[a] == 0):
        return _gather_batched(x, a, indices, rest_i[0])
    # x as (common, axis, rest_x), indices as (common, rest_i), both flattened to 3 and 2 axes.
    xr = x.raw_aligned(tuple(common) + (axis,) + tuple(rest_x))
    if clip_to_valid and xr.shape[len(common)] == 0:
        # No frame to clip to (every sequence is empty): the result reads zeros.
        shape = list(xr.shape)
        shape[len(common)] = 1
        xr = xr.new_zeros(shape)
    ir = indices.raw_aligned(tuple(common) + tuple(rest_i))
    if ir.dtype != torch.int64:
        ir = ir.to(torch.int64)
    c_sizes = list(xr.shape[:len(common)])
    r_sizes = list(xr.shape[len(common) + 1:])
    k_sizes = list(ir.shape[len(common):])
    nc, nr, nk = math.prod(c_sizes), math.prod(r_sizes), math.prod(k_sizes)
    if not common:
        # No batch dims: an embedding lookup. F.embedding (index_select) is one call and ~15x faster
        # than torch.gather on indices expanded over the rest (measured: 13 vs 199 us, 8x50x256).
        raw = torch.nn.functional.embedding(ir, xr.reshape(xr.shape[0], nr))
        if len(r_sizes) != 1:
            raw = raw.reshape(k_sizes + r_sizes)
    else:
        xf = xr.reshape(nc, xr.shape[len(common)], nr)
        index = ir.reshape(nc, nk, 1).expand(nc, nk, nr)
        raw = torch.gather(xf, 1, index).reshape(c_sizes + k_sizes + r_sizes)
    flat_dims = tuple(common) + tuple(rest_i) + tuple(rest_x)
    out_dims = []
    for d in x.dims:
        if d is axis:
            out_dims.extend(rest_i)
        else:
            out_dims.append(d)
    out_dims = tuple(out_dims)
    out = keep_markers(x, raw, flat_dims)
    return out if flat_dims == out_dims else out.copy_transpose(out_dims)


def _gather_batched(x: Tensor, a: int, indices: Tensor, new_dim: Dim) -> Tensor:
    """Indices over one dim x lacks and dims of x (batch dims, e.g. a beam step's back-pointers over
    (batch, beam)): one torch.gather in x's own layout, the indices aligned to it (size 1 where they
    lack a dim of x) and expanded; axis becomes the new dim. (The general form permutes and copies x.)"""
    out_dims = x.dims[:a] + (new_dim,) + x.dims[a + 1:]
    ir = indices.raw_aligned(out_dims)
    if ir.dtype != torch.int64:
        ir = ir.to(torch.int64)
    shape = list(x.raw.shape)
    shape[a] = ir.shape[a]
    raw = torch.gather(x.raw, a, ir.expand(shape))
    return keep_markers(x, raw, out_dims)


def _clipped(indices: Tensor, x: Tensor, a: int, axis: Dim, caller: str) -> Tensor:
    """indices clipped into [0, size - 1] of axis, or per sequence into [0, length - 1] (over the
    lengths' dims too): torch.clamp on the device, with the lengths' cached device copy."""
    raw = indices.raw
    lengths = axis.lengths
    if lengths is None:
        return Tensor(raw.clamp(0, max(x.raw.shape[a] - 1, 0)), indices.dims, sparse_dim=axis)
    for b in lengths.dims:
        if b not in x.dims:  # Dim equality is identity
            raise ValueError(f"{caller}: the lengths of {dim_str(axis)} vary over {dim_str(b)}, which is not a dim "
                             f"of x (dims: {dims_str(x.dims)})")
    last = _C._dim_cached_raw(_LENGTHS, axis, tuple(range(len(lengths.dims))), len(lengths.dims), 0,
                              raw.device) - 1
    last = Tensor(last.clamp(min=0).to(raw.dtype), tuple(lengths.dims))
    clipped = clip(Tensor(raw, indices.dims), 0, last, allow_broadcast_all_sources=True)
    return Tensor(clipped.raw, clipped.dims, sparse_dim=axis)


def one_hot(indices: Tensor, /) -> Tensor:
    """int64 one-hot of `indices` (F.one_hot) over indices' dims then its sparse_dim, which must be
    static. Values must be in range: on CPU F.one_hot checks them (reading the values); on CUDA it
    does not read them back, and an out-of-range value fails in the kernel."""
    caller = "dimtorch.one_hot()"
    check_tensor(indices, caller, what="indices")
    d = indices.sparse_dim
    if d is None:
        raise ValueError(f"{caller}: indices have no sparse_dim (dims: {dims_str(indices.dims)})")
    if d.size is None:
        raise ValueError(f"{caller}: the sparse_dim {dim_str(d)} of indices must be static")
    raw = indices.raw
    dtype = raw.dtype  # (torch's dtype getter costs ~0.15 us: read once)
    if dtype is not torch.int64:  # .to() costs ~0.9 us even when it has nothing to do
        if dtype not in _INT_DTYPES:
            raise TypeError(f"{caller}: indices must be of an integer dtype, got {indices.dtype}")
        raw = raw.to(torch.int64)
    raw = F.one_hot(raw, d.size)
    return Tensor(raw, tuple(indices.dims) + (d,), feature_dim=d)


@names_errors("dimtorch.sparse_to_dense()")
def sparse_to_dense(labels: Union[Tensor, int], *, label_value, other_value, axis: Dim = None) -> Tensor:
    """Dense tensor over labels' dims then `axis` (default: labels' sparse_dim; static): label_value
    where the position along axis equals the label, other_value elsewhere (rf.sparse_to_dense; one_hot
    with chosen values). Values are Python scalars (dtype as torch.where gives it: float32 for
    floats, int64 for ints) or 0-dim Tensors. A label outside [0, size) gives other_value everywhere;
    nothing reads the labels on the host. An int label (RETURNN frontend takes raw scalars; axis is
    then required) is a label over no dims: the result is over (axis,) alone, on the default device."""
    caller = "dimtorch.sparse_to_dense()"
    if isinstance(labels, int) and not isinstance(labels, bool):
        if not isinstance(axis, Dim):
            raise TypeError(f"{caller}: an int label needs axis (a Dim), got {type(axis).__name__}")
        labels = Tensor(torch.full((), labels, dtype=torch.int64, device=_default_device.get()), ())
    check_tensor(labels, caller, what="labels")
    if labels.raw.dtype not in _INT_DTYPES:
        raise TypeError(f"{caller}: labels must be of an integer dtype, got {labels.dtype}")
    if axis is None:
        axis = labels.sparse_dim
        if axis is None:
            raise ValueError(f"{caller}: labels have no sparse_dim; give axis (labels dims: {dims_str(labels.dims)})")
    elif not isinstance(axis, Dim):
        raise TypeError(f"{caller}: axis must be a Dim, got {type(axis).__name__}")
    elif labels.sparse_dim is not None and labels.sparse_dim is not axis:
        raise ValueError(f"{caller}: axis {dim_str(axis)} is not the sparse_dim {dim_str(labels.sparse_dim)} of labels")
    if axis.size is None:
        raise ValueError(f"{caller}: axis {dim_str(axis)} must be static")
    if any(d is axis for d in labels.dims):
        raise ValueError(f"{caller}: axis {dim_str(axis)} is already a dim of labels (dims: {dims_str(labels.dims)})")
    values = []
    for what, v in (("label_value", label_value), ("other_value", other_value)):
        if isinstance(v, Tensor):
            if v.dims:
                raise ValueError(f"{caller}: {what} must be a scalar, got a Tensor over ({dims_str(v.dims)})")
            v = v.raw
        elif isinstance(v, torch.Tensor) or not isinstance(v, (bool, int, float)):
            raise TypeError(f"{caller}: {what} must be a Python scalar or a 0-dim dimtorch.Tensor, got "
                            f"{type(v).__name__}")
        values.append(v)
    raw = labels.raw
    positions = torch.arange(axis.size, dtype=raw.dtype, device=raw.device)
    hit = raw.unsqueeze(-1) == positions
    return Tensor(torch.where(hit, values[0], values[1]), tuple(labels.dims) + (axis,), feature_dim=axis)
