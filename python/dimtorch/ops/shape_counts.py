"""How many elements a shape of dims holds (RETURNN frontend's num_elements_of_shape, masked_fraction_of_shape):
the padding left out, per sequence where the lengths vary. Computed from the dims' host lengths: no device
read."""
from __future__ import annotations

import math
from typing import Sequence, Union

import torch

from .._C import Dim, Tensor, combine, reduce_sum
from .._core.args import dims_arg
from ._support import names_errors, padded_size


def _padded_size(dim: Dim, dims: tuple, caller: str) -> int:
    """dim's padded size: static, the longest length (while tracing: its padded size in the trace), or (a
    batch dim sized from data) the size it has in the lengths of another of `dims`."""
    return padded_size(dim, caller, dims)


@names_errors("dimtorch.num_elements_of_shape()")
def num_elements_of_shape(dims: Union[Dim, Sequence[Dim]], *, use_mask: bool = True, device=None,
                          distributed: bool = False) -> Union[int, Tensor]:
    """The number of elements of a tensor over `dims`: with use_mask, its valid ones (each sequence its
    own length; a dim whose lengths vary over another of `dims` counts per element of that one); an int
    when every dim is static (or use_mask=False), else an int64 Tensor over the lengths' dims that are
    not among `dims` (0-dim when all are), on `device` (default: the host). distributed=True sums it
    over the workers of torch.distributed (a no-op without a process group); the result is then always
    an int64 Tensor on `device`."""
    caller = "dimtorch.num_elements_of_shape()"
    dims = dims_arg(dims, caller, "dims")
    if not use_mask or all(d.lengths is None for d in dims):
        n = math.prod([_padded_size(d, dims, caller) for d in dims])  # (a list: Dynamo traces no generator here)
    else:
        # a dim that the lengths of another vary over is summed over (in the count), not multiplied
        length_dims = [e for d in dims if d.lengths is not None for e in d.lengths.dims]
        factor, count = 1, None
        for d in dims:
            if d.lengths is None:
                if d not in length_dims:  # Dim equality is identity
                    factor *= _padded_size(d, dims, caller)
            else:
                count = d.lengths if count is None else combine(count, d.lengths, "mul",
                                                                 allow_broadcast_all_sources=True)
        inner = [d for d in count.dims if d in dims]  # Dim equality is identity
        if inner:
            count = reduce_sum(count, axis=inner)
        raw = count.raw.to(torch.int64) * factor
        n = Tensor(raw if device is None else raw.to(device), count.dims)
    if not distributed:
        return n
    if not isinstance(n, Tensor):
        n = Tensor(torch.tensor(n, dtype=torch.int64, device=device), ())
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        raw = n.raw.clone()
        torch.distributed.all_reduce(raw)
        n = Tensor(raw, n.dims)
    return n


@names_errors("dimtorch.masked_fraction_of_shape()")
def masked_fraction_of_shape(dims: Union[Dim, Sequence[Dim]], *, inverse: bool = False,
                             device=None) -> Union[int, Tensor]:
    """num_elements_of_shape(dims) / the padded element count (or its inverse): the share of valid
    elements; 1 when no dim of `dims` is dynamic."""
    caller = "dimtorch.masked_fraction_of_shape()"
    dims = dims_arg(dims, caller, "dims")
    if all(d.lengths is None for d in dims):
        return 1
    valid = num_elements_of_shape(dims, device=device)
    total = math.prod([_padded_size(d, dims, caller) for d in dims])
    if type(total) is int:  # (a symbolic size while tracing stays one)
        total = float(total)
    raw = valid.raw.to(torch.float32)
    return Tensor(total / raw if inverse else raw / total, valid.dims)


__all__ = ["num_elements_of_shape", "masked_fraction_of_shape"]
