"""Packing the valid frames of padded dims into one dim (pack_padded) and back (unpack_padded)."""
from __future__ import annotations

import math
import weakref
from typing import Optional, Sequence

import torch

from . import _dim_cache, _in_graph, _tracing
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
    return [d.get_max_size() if d.dyn_size is not None else _size_without_lengths(d, dims, x, caller) for d in dims]


def _size_without_lengths(d: Dim, dims: tuple, x: Optional[Tensor], caller: str) -> int:
    """Raw size of a dim without lengths: static, or from data (x, or the lengths of a dim among dims)."""
    if d.size is not None:
        return d.size
    if x is not None and any(d is e for e in x.dims):
        return x.raw.shape[x.dims.index(d)]
    found = [e.dyn_size.raw.shape[e.dyn_size.dims.index(d)] for e in dims
             if e.dyn_size is not None and any(d is b for b in e.dyn_size.dims)]
    if not found:
        raise ValueError(f"{caller}: the size of {dim_str(d)} is unknown (it takes its size from data)")
    return found[0]


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
    its index on the dim and comes here for the others.

    While tracing, the packed size cannot be data: pack_dim is a dynamic dim whose lengths are a
    0-dim tensor holding the number of valid frames (over no batch dims), with the static upper
    bound prod(raw sizes of dims) as its raw size; the valid frames come first, in the order
    above, then the padding frames (whatever x held there). A given out_dim must be such a dim
    (its lengths are not compared with the count: that reads them)."""
    caller = "dimtorch.pack_padded()"
    check_tensor(x, caller)
    raw = x.raw
    dims = _check_dims(x, dims, caller)
    x_dims = x.dims
    for d in dims:
        axis_of(x, d, caller, what="dims entry")
    if _tracing.tracing():
        return _pack_in_graph(x, dims, out_dim, caller)
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


def _packing_order(dims: tuple, sizes, device):
    """While tracing: (index, valid), `index` the int64 frames of the row-major flattening of `dims`
    (raw `sizes`) with the valid ones first, each group in its order, and `valid` their flat bool
    mask (None when dims have no padding), on `device`; built in the graph from the lengths."""
    n = 1
    for s in sizes:
        n = n * s
    frames = torch.arange(n, device=device)
    mask = _in_graph.valid_mask(dims, sizes, device)
    if mask is None:
        return frames, None
    valid = mask.expand(tuple(sizes)).reshape(n)
    before = valid.to(torch.int64).cumsum(0)  # valid frames up to each frame, itself included
    total = before[-1:].sum()  # 0-dim, also for n == 0
    dest = torch.where(valid, before - 1, total + frames - before)
    return torch.empty_like(frames).scatter_(0, dest, frames), valid


def _valid_count(dims: tuple, sizes) -> torch.Tensor:
    """While tracing, the 0-dim int64 number of valid frames of `dims` (raw `sizes`), computed
    where the lengths live (the pack dim's lengths stay with the other lengths)."""
    device = next((d.dyn_size.raw.device for d in dims if d.dyn_size is not None), torch.device("cpu"))
    mask = _in_graph.valid_mask(dims, sizes, device)
    if mask is None:
        n = 1
        for s in sizes:
            n = n * s
        return torch.full((), n, dtype=torch.int64, device=device)
    return mask.expand(tuple(sizes)).sum()


def _pack_in_graph(x: Tensor, dims: tuple, out_dim: Optional[Dim], caller: str):
    """pack_padded while tracing (see its docstring)."""
    rest = tuple(d for d in x.dims if not any(d is e for e in dims))
    raw = x.raw_aligned(dims + rest)
    sizes = tuple(raw.shape[:len(dims)])
    index, _ = _packing_order(dims, sizes, raw.device)
    if out_dim is None:
        out_dim = Dim(Tensor(_valid_count(dims, sizes), ()), name="pack")
    elif not isinstance(out_dim, Dim):
        raise TypeError(f"{caller}: out_dim must be a Dim, got {type(out_dim).__name__}")
    elif out_dim.dyn_size is None or out_dim.dyn_size.dims:
        raise ValueError(f"{caller}: while tracing, the pack dim has the number of valid frames as 0-dim lengths "
                         f"(its size is data); out_dim {dim_str(out_dim)} must be such a dim, or give none")
    flat = raw.reshape((index.shape[0],) + tuple(raw.shape[len(dims):]))
    return keep_markers(x, flat.index_select(0, index), (out_dim,) + rest), out_dim


def _unpack_in_graph(x: Tensor, a: int, dims: tuple, in_dim: Dim, caller: str) -> Tensor:
    """unpack_padded while tracing (see its docstring)."""
    if in_dim.dyn_size is None or in_dim.dyn_size.dims:
        raise ValueError(f"{caller}: while tracing, in_dim must be a pack dim of pack_padded traced too (lengths: "
                         f"the 0-dim count of valid frames), got {dim_str(in_dim)}")
    n = x.raw.shape[a]
    known = 1
    unknown = [i for i, d in enumerate(dims) if d.dyn_size is not None]
    if len(unknown) != 1:
        raise ValueError(f"{caller}: while tracing, dims must hold exactly one dynamic dim (its padded size is "
                         f"in_dim's size over the others'), got ({dims_str(dims)})")
    sizes = []
    for i, d in enumerate(dims):
        if i == unknown[0]:
            sizes.append(None)
            continue
        size = _size_without_lengths(d, dims, None, caller)
        sizes.append(size)
        known = known * size
    sizes[unknown[0]] = n // known
    raw = x.raw.movedim(a, 0) if a else x.raw
    index, valid = _packing_order(dims, sizes, raw.device)
    out = raw.new_zeros(raw.shape).index_copy(0, index, raw)
    if valid is not None:
        out = torch.where(valid.reshape((n,) + (1,) * (raw.dim() - 1)), out, 0)
    rest = tuple(d for d in x.dims if d is not in_dim)
    return keep_markers(x, out.reshape(tuple(sizes) + tuple(raw.shape[1:])), dims + rest)


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
    lengths (the copy of the index to x's device does not wait).

    While tracing, in_dim must be the pack dim of a traced pack_padded (0-dim lengths, raw size the
    product of the padded sizes of dims) and dims must hold one dynamic dim: its padded size is
    in_dim's raw size over the product of the others'. Positions are built in the graph."""
    caller = "dimtorch.unpack_padded()"
    check_tensor(x, caller)
    a = axis_of(x, in_dim, caller, what="in_dim")
    dims = _check_dims(x, dims, caller)
    for d in dims:
        if any(d is e for e in x.dims):
            raise ValueError(f"{caller}: {dim_str(d)} is already a dim of x (dims: {dims_str(x.dims)})")
    if _tracing.tracing():
        return _unpack_in_graph(x, a, dims, in_dim, caller)
    sizes = _sizes(dims, None, caller)
    raw = x.raw.movedim(a, 0) if a else x.raw
    index = _valid_index(dims, sizes, raw.device)
    if index.shape[0] != x.raw.shape[a]:
        raise ValueError(f"{caller}: in_dim {dim_str(in_dim)} has {x.raw.shape[a]} frames, but ({dims_str(dims)}) "
                         f"have {index.shape[0]} valid frames")
    rest = tuple(d for d in x.dims if d is not in_dim)
    out = raw.new_zeros((math.prod(sizes),) + tuple(raw.shape[1:])).index_copy(0, index, raw)
    return keep_markers(x, out.reshape(tuple(sizes) + tuple(raw.shape[1:])), dims + rest)
