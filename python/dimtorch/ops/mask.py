"""Sequence masks of dynamic dims: the public mask API around the C++ per-dim cache (src/core/mask.cpp)."""
from __future__ import annotations

import torch

from .. import _C
from .._core import dim_cache as _dim_cache, sizes as _sizes, tracing as _tracing
from .._C import Dim, Tensor
from .._core.args import dims_arg
from ._support import flag, names_errors

_MASK, _LENGTHS = 0, 2  # kinds of src/core/mask.h's per-dim cache
_MAX_DIMS = 24  # src/core/common.h's kMaxDims (tests/core/test_mask.py checks it)


def _device(device, caller: str) -> torch.device:
    if device is None:
        return torch.device("cpu")
    try:
        return torch.device(device)
    except (TypeError, ValueError, RuntimeError) as e:
        raise ValueError(f"{caller}: device must be a torch.device or a device name, got {device!r} "
                         f"({str(e).splitlines()[0]})") from None


def get_mask(dim: Dim, dims_order=None, device=None) -> Tensor:
    """Bool Tensor, True on the valid frames of `dim`, over its lengths' dims and `dim` itself, in
    the order these have in `dims_order` (default: lengths' dims, then `dim`). Cached on the dim.
    While tracing, built in the graph at the dim's padded size in the trace (dimtorch._core.sizes)."""
    caller = "dimtorch.Dim.get_mask()"
    lengths = dim.lengths
    if lengths is None:
        raise ValueError(f"{caller}: dim {dim!r} has no lengths (it is static or takes its size from "
                         f"data), so it has no mask")
    relevant = list(lengths.dims) + [dim]
    if dims_order is None:
        order = relevant
    else:
        order = [d for d in dims_arg(dims_order, caller, "dims_order") if any(d is r for r in relevant)]
        missing = [r for r in relevant if not any(r is d for d in order)]
        if missing:
            raise ValueError(f"{caller}: dims_order lacks {missing} needed for the mask of {dim!r}")
    if len(order) > _MAX_DIMS:
        raise ValueError(f"{caller}: at most {_MAX_DIMS} dims are supported, the mask of {dim!r} would have "
                         f"{len(order)}")
    if _tracing.tracing():
        shape = [1] * len(order)
        shape[order.index(dim)] = _sizes.padded_size(dim, caller, order)
        return Tensor(_tracing.mask_raw(dim, tuple(order), shape, _device(device, caller)).expand(
            *[_size_in_mask(d, lengths, dim, shape[i]) for i, d in enumerate(order)]), tuple(order))
    pos = tuple(next(i for i, d in enumerate(order) if d is r) for r in relevant)
    # The same (frozen) Tensor for the same dims while it lives, as RETURNN's get_mask caches it.
    return _C._dim_cached_mask(dim, pos, tuple(order), _device(device, caller))


def _size_in_mask(d: Dim, lengths: Tensor, dim: Dim, size):
    """The raw size of d in a mask of dim: `size` for dim itself, else that of d in the lengths."""
    return size if d is dim else lengths.raw.shape[lengths.dims.index(d)]


def get_size_tensor(dim: Dim, device=None) -> Tensor:
    """Sizes of `dim` as a Tensor: its lengths (over batch dims) on `device` (copied once and
    cached), or a 0-dim int64 Tensor with the static size. While tracing, the lengths are copied
    in the graph (nothing cached)."""
    if dim.lengths is None:
        size = dim.size
        bound = dim._bound_size  # a batch dim's size bound for the step (RETURNN's batch_dim.dyn_size_ext)
        if size is None and bound is not None:
            return Tensor(bound.raw.to(_device(device, "dimtorch.Dim.get_size_tensor()"), non_blocking=True), ())
        if size is None:
            raise ValueError(f"dimtorch.Dim.get_size_tensor(): dim {dim!r} takes its size from data; "
                             f"it has no size without a tensor")
        # torch.full, not torch.tensor: a tensor from Python data is a blocking host-to-device copy.
        return Tensor(torch.full((), size, dtype=torch.int64, device=_device(device, "dimtorch.Dim.get_size_tensor()")), ())
    lengths = dim.lengths
    if _tracing.tracing():
        device = _device(device, "dimtorch.Dim.get_size_tensor()")
        return Tensor(_tracing.lengths_raw(dim, lengths.dims, device), lengths.dims)
    k = lengths.ndim
    raw = _C._dim_cached_raw(_LENGTHS, dim, tuple(range(k)), k, 0,
                             _device(device, "dimtorch.Dim.get_size_tensor()"))
    return Tensor(raw, lengths.dims)


@names_errors("dimtorch.sequence_mask()")
def sequence_mask(dims, device=None) -> Tensor:
    """Bool Tensor, True where every dynamic dim among `dims` is within its sequence's length.
    While tracing, from get_mask's in-graph form (see there)."""
    from .._C import logical_and  # noqa: PLC0415
    caller = "dimtorch.sequence_mask()"
    dims = dims_arg(dims, caller, "dims")
    device = _device(device, caller)
    mask = None
    for d in dims:
        if d.lengths is None:
            continue
        m = get_mask(d, dims_order=dims, device=device)
        mask = m if mask is None else logical_and(mask, m, allow_broadcast_all_sources=True)
    if mask is None:
        return Tensor(torch.ones((), dtype=torch.bool, device=device), ())
    return mask.copy_transpose([d for d in dims if d in mask.dims])


@names_errors("dimtorch.last_frame_position_of_dim()")
def last_frame_position_of_dim(dim: Dim, *, device=None, allow_scalar_on_cpu: bool = True) -> int | Tensor:
    """The position of each sequence's last frame: dim's lengths - 1 as a Tensor over its lengths'
    dims on `device` (the lengths' device copy is cached), or size - 1 for a static dim (a Python
    int when allow_scalar_on_cpu and no device is asked for, as RETURNN frontend gives it)."""
    caller = "dimtorch.last_frame_position_of_dim()"
    if not isinstance(dim, Dim):
        raise TypeError(f"{caller}: expected a Dim, got {type(dim).__name__}")
    allow_scalar_on_cpu = flag(allow_scalar_on_cpu, caller, "allow_scalar_on_cpu")
    if dim.lengths is None and dim.size is not None and allow_scalar_on_cpu and device is None:
        return dim.size - 1
    if _tracing.tracing():  # in the graph: no per-dim cache holds a traced raw
        size = get_size_tensor(dim, device=device)
        return Tensor(size.raw - 1, size.dims)
    key = ("last_frame", device)
    raw = _dim_cache.lookup(dim, key)
    if raw is None:
        size = get_size_tensor(dim, device=device)
        raw = _dim_cache.store(dim, key, size.raw - 1)
    return Tensor(raw, dim.lengths.dims if dim.lengths is not None else ())
