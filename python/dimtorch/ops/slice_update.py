"""slice_update (RETURNN frontend's): one frame written into a tensor at a position of a dim, e.g. a preallocated
decoder cache filled step by step; and expand_make_non_empty: an empty dim given one zero frame."""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch

from .._C import Dim, Tensor
from .._core.args import axis_of, check_tensor, dim_str, dims_str, keep_markers
from ._support import names_errors


@names_errors("dimtorch.slice_update()")
def slice_update(target: Tensor, value: Tensor, *, axis: Dim, start: Union[int, Tensor]) -> Tensor:
    """target with `value` written at position `start` of `axis` (a new tensor: target is not changed;
    gradients reach both). value has target's dims but axis (a subset broadcasts); start is an int or a
    0-dim integer Tensor (a device index: no wait for the device)."""
    caller = "dimtorch.slice_update()"
    check_tensor(target, caller, what="target")
    check_tensor(value, caller, what="value")
    a = axis_of(target, axis, caller, of="target")
    if axis in value.dims:  # Dim equality is identity
        raise ValueError(f"{caller}: value must not have axis {dim_str(axis)} (value dims: {dims_str(value.dims)})")
    rest = target.dims[:a] + target.dims[a + 1:]
    extra = [d for d in value.dims if d not in rest]
    if extra:
        raise ValueError(f"{caller}: value has dims ({dims_str(extra)}) that target (dims: "
                         f"{dims_str(target.dims)}) lacks")
    raw = target.raw
    shape = [1 if i == a else n for i, n in enumerate(raw.shape)]
    src = value.raw_aligned(tuple(d for d in rest if d in value.dims)).reshape(
        [1 if d is axis or d not in value.dims else n for d, n in zip(target.dims, raw.shape)])
    src = src.to(raw.dtype).expand(shape)
    if isinstance(start, Tensor):
        if start.dims or start.raw.dtype.is_floating_point or start.raw.dtype is torch.bool:
            raise TypeError(f"{caller}: start must be an int or a 0-dim integer Tensor, got dims "
                            f"({dims_str(start.dims)}), {start.dtype}")
        index = start.raw.reshape(1).to(device=raw.device, dtype=torch.int64)
    elif isinstance(start, int) and not isinstance(start, bool):
        n = raw.shape[a]
        if not -n <= start < n:
            raise IndexError(f"{caller}: start {start} is out of range for {dim_str(axis)} of size {n}")
        index = torch.tensor([start % n], device=raw.device)
    else:
        raise TypeError(f"{caller}: start must be an int or a 0-dim integer Tensor, got {type(start).__name__}")
    return keep_markers(target, raw.index_copy(a, index, src), target.dims)


@names_errors("dimtorch.expand_make_non_empty()")
def expand_make_non_empty(source: Tensor, *, axis: Dim, out_dim: Optional[Dim] = None) -> Tuple[Tensor, Dim]:
    """(source, axis) when source has at least one frame along axis; else source with one frame of
    zeros there, over a new dim of size 1 (out_dim, or lengths max(length, 1) for a dynamic axis)."""
    caller = "dimtorch.expand_make_non_empty()"
    check_tensor(source, caller, what="source")
    a = axis_of(source, axis, caller, of="source")
    raw = source.raw
    if raw.shape[a] > 0:
        return source, axis
    if out_dim is None:
        lengths = axis.lengths
        if lengths is None:
            out_dim = Dim(1, name=f"{axis.name}_non_empty")
        else:
            out_dim = Dim(Tensor(torch.clamp(lengths.raw, min=1), lengths.dims), name=f"{axis.name}_non_empty")
    elif not isinstance(out_dim, Dim) or out_dim.get_max_size() != 1:
        got = dim_str(out_dim) if isinstance(out_dim, Dim) else type(out_dim).__name__
        raise ValueError(f"{caller}: out_dim must be a Dim of (max) size 1, got {got}")
    shape = list(raw.shape)
    shape[a] = 1
    dims = source.dims[:a] + (out_dim,) + source.dims[a + 1:]
    return keep_markers(source, raw.new_zeros(shape), dims), out_dim


__all__ = ["slice_update", "expand_make_non_empty"]
