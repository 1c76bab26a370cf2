"""Packing the valid frames of padded dims into one dim (pack_padded) and back (unpack_padded)."""
from __future__ import annotations

import math
import weakref
from typing import Optional, Sequence

import torch

from . import _dim_cache
from ._C import Dim, Tensor
from ._shape_ops import axis_of, check_tensor, dim_str, dims_arg, dims_str, keep_markers


def _check_dims(x: Tensor, dims, caller: str) -> tuple:
    dims = dims_arg(dims, caller, "dims")
    if not dims:
        raise ValueError(f"{caller}: dims is empty")
    if len({id(d) for d in dims}) != len(dims):
        raise ValueError(f"{caller}: dims lists a dim twice ({dims_str(dims)})")
    for d in dims:
        if d.dyn_size is not None:
            for b in d.dyn_size.dims:
                if not any(b is e for e in dims):
                    raise ValueError(f"{caller}: the lengths of {dim_str(d)} vary over {dim_str(b)}, which is not in "
                                     f"dims ({dims_str(dims)})")
    return dims


def _sizes(dims: tuple, x: Optional[Tensor], caller: str) -> list:
    """Raw size of each dim: dynamic dims their max length, static their size, dims sized from data
    the size they have in x or in the lengths of a dynamic dim among dims (host values)."""
    sizes = []
    for d in dims:
        if d.dyn_size is not None:
            sizes.append(d.get_max_size())
        elif d.size is not None:
            sizes.append(d.size)
        elif x is not None and any(d is e for e in x.dims):
            sizes.append(x.raw.shape[x.dims.index(d)])
        else:
            found = [e.dyn_size.raw.shape[e.dyn_size.dims.index(d)] for e in dims
                     if e.dyn_size is not None and any(d is b for b in e.dyn_size.dims)]
            if not found:
                raise ValueError(f"{caller}: the size of {dim_str(d)} is unknown (it takes its size from data)")
            sizes.append(found[0])
    return sizes


def _valid_index(dims: tuple, sizes: list, device) -> torch.Tensor:
    """int64 positions on `device`, in the row-major order of `dims`, of the frames valid in every
    dynamic dim among dims; computed from host lengths once per dims and sizes, then cached weakly on
    the first dynamic dim (its device copy does not wait for the device)."""
    owner = next((d for d in dims if d.dyn_size is not None), None)
    # Weak refs: the other dims stay out of the owner's lifetime, and a dead one's id is not reused here.
    key = (tuple(map(weakref.ref, dims)), tuple(sizes), device)
    if owner is not None:
        index = _dim_cache.lookup(owner, key)
        if index is not None:
            return index
    valid = torch.ones(sizes, dtype=torch.bool)
    for i, d in enumerate(dims):
        if d.dyn_size is None:
            continue
        lengths = d.dyn_size
        lens = Tensor(lengths.raw.to(torch.int64), lengths.dims).raw_aligned(dims)
        shape = [1] * len(dims)
        shape[i] = sizes[i]
        valid = valid & (torch.arange(sizes[i]).view(shape) < lens)
    index = valid.reshape(-1).nonzero().squeeze(1)
    if index.device != device:
        index = index.to(device, non_blocking=True)
    return index if owner is None else _dim_cache.store(owner, key, index)


def pack_padded(x: Tensor, *, dims: Sequence[Dim], out_dim: Optional[Dim] = None):
    """The valid frames of `dims` (e.g. (batch, time)) packed into one dim, in row-major order of
    `dims` (for (batch, time): all frames of sequence 0, then of sequence 1, ...); returns
    (tensor, pack_dim), the tensor over (pack_dim, x's other dims in their order).

    The packed size is data-dependent: it is the number of valid frames, taken from the HOST
    lengths of the dynamic dims (never read from the device), and so is the index of the frames
    kept (made once per dims and layout, copied to x's device without waiting). A new pack_dim is
    static with that size.

    The common call (dims leading x, one of them dynamic) is dimtorch._C.pack_padded, which keeps
    its index on the dim and comes here for the others."""
    caller = "dimtorch.pack_padded()"
    check_tensor(x, caller)
    raw = x.raw
    dims = _check_dims(x, dims, caller)
    x_dims = x.dims
    for d in dims:
        axis_of(x, d, caller, what="dims entry")
    sizes = _sizes(dims, x, caller)
    index = _valid_index(dims, sizes, raw.device)
    out_dim = _pack_dim(out_dim, index.shape[0], dims, caller)
    n = len(dims)
    if x_dims[:n] == dims and list(raw.shape[:n]) == sizes:
        # dims lead x in their order, no frames beyond the max lengths: one flatten (a view).
        raw = raw.flatten(0, n - 1) if n > 1 else raw
        return keep_markers(x, raw.index_select(0, index), (out_dim,) + x_dims[n:]), out_dim
    rest = tuple(d for d in x_dims if d not in dims)
    for d, size in zip(dims, sizes):
        a = x_dims.index(d)
        if raw.shape[a] > size:
            raw = raw.narrow(a, 0, size)
    raw = Tensor(raw, x_dims).raw_aligned(dims + rest)
    raw = raw.reshape((math.prod(sizes),) + tuple(raw.shape[len(dims):]))
    return keep_markers(x, raw.index_select(0, index), (out_dim,) + rest), out_dim


def _pack_dim(out_dim: Optional[Dim], total: int, dims: tuple, caller: str) -> Dim:
    """A new static pack dim of `total` frames, or the given one after checking its size."""
    if out_dim is None:
        return Dim(total, name="pack")
    if not isinstance(out_dim, Dim):
        raise TypeError(f"{caller}: out_dim must be a Dim, got {type(out_dim).__name__}")
    if out_dim.size != total:
        raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} does not fit the {total} valid frames of "
                         f"({dims_str(dims)})")
    return out_dim


def unpack_padded(x: Tensor, *, dims: Sequence[Dim], in_dim: Dim) -> Tensor:
    """Inverse of pack_padded: the frames of `in_dim` put back at the valid positions of `dims`;
    returns a tensor over (*dims, x's other dims), padding 0. The positions come from the HOST
    lengths (the copy of the index to x's device does not wait)."""
    caller = "dimtorch.unpack_padded()"
    check_tensor(x, caller)
    a = axis_of(x, in_dim, caller, what="in_dim")
    dims = _check_dims(x, dims, caller)
    for d in dims:
        if any(d is e for e in x.dims):
            raise ValueError(f"{caller}: {dim_str(d)} is already a dim of x (dims: {dims_str(x.dims)})")
    sizes = _sizes(dims, None, caller)
    raw = x.raw.movedim(a, 0) if a else x.raw
    index = _valid_index(dims, sizes, raw.device)
    if index.shape[0] != x.raw.shape[a]:
        raise ValueError(f"{caller}: in_dim {dim_str(in_dim)} has {x.raw.shape[a]} frames, but ({dims_str(dims)}) "
                         f"have {index.shape[0]} valid frames")
    rest = tuple(d for d in x.dims if d is not in_dim)
    out = raw.new_zeros((math.prod(sizes),) + tuple(raw.shape[1:])).index_copy(0, index, raw)
    return keep_markers(x, out.reshape(tuple(sizes) + tuple(raw.shape[1:])), dims + rest)
