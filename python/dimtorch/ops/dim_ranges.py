"""Index and value ranges over dims (RETURNN frontend's): range_over_dim_strided, range_over_merged_dims,
linspace_over_dim."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

import torch

from .._C import Dim, Tensor, ceildiv, combine
from .._core.args import dims_arg, dims_str
from .creation import range_over_dim
from ._support import names_errors


@names_errors("dimtorch.range_over_dim_strided()")
def range_over_dim_strided(dim: Dim, *, stride: int, out_dim: Optional[Dim] = None, dtype: Optional[str] = None,
                           device=None) -> Tuple[Tensor, Dim]:
    """(0, stride, 2*stride, ...) over out_dim = ceildiv(dim, stride) (per sequence for a dynamic dim):
    the positions in `dim` of every stride-th frame; returns (tensor over out_dim, out_dim). rf also
    takes a stride Tensor (known only on the device): not here, the lengths of dimtorch's dims are
    host values."""
    caller = "dimtorch.range_over_dim_strided()"
    if not isinstance(dim, Dim):
        raise TypeError(f"{caller}: dim must be a Dim, got {type(dim).__name__}")
    if type(stride) is not int or stride < 1:
        raise ValueError(f"{caller}: stride must be an int >= 1, got {stride!r}")
    if out_dim is None:
        out_dim = ceildiv(dim, stride)
    elif not isinstance(out_dim, Dim):
        raise TypeError(f"{caller}: out_dim must be a Dim, got {type(out_dim).__name__}")
    kw = {} if dtype is None else {"dtype": dtype}
    return range_over_dim(out_dim, device=device, **kw) * stride, out_dim


@names_errors("dimtorch.range_over_merged_dims()")
def range_over_merged_dims(dims: Sequence[Dim], *, dtype: Optional[str] = None, device=None) -> Tensor:
    """The positions 0 .. prod(sizes) - 1 over `dims` (row-major: the last dim varies fastest), with
    the merged dim as sparse_dim: the index of each element in merge_dims(x, dims=dims,
    out_dim=result.sparse_dim). dims[0] may be dynamic (the merged dim is then T * k by dim math, the
    dim merge_dims makes), the others must be static."""
    caller = "dimtorch.range_over_merged_dims()"
    dims = dims_arg(dims, caller, "dims")
    if not dims:
        raise ValueError(f"{caller}: dims is empty")
    if any(d.size is None for d in dims[1:]):
        raise ValueError(f"{caller}: only the first of dims may be dynamic (dims: {dims_str(dims)})")
    k = math.prod([d.size for d in dims[1:]])  # (a list: Dynamo traces no generator here)
    if dims[0].size is None:
        merged = dims[0] * k  # dim math: merge_dims makes the same dim (T * k)
    else:
        merged = Dim(dims[0].size * k, name="*".join(d.name for d in dims))
    kw = {} if dtype is None else {"dtype": dtype}
    # position = i0 * (n1 * n2 ...) + i1 * (n2 ...) + ...: one range per dim, broadcast by dims
    indices, stride = None, 1
    for d in reversed(dims):
        term = range_over_dim(d, device=device, **kw)
        term = term * stride if stride != 1 else term
        indices = term if indices is None else combine(term, indices, "add", allow_broadcast_all_sources=True)
        stride *= d.size if d.size is not None else 1
    return Tensor(indices.raw, dims, sparse_dim=merged)


@names_errors("dimtorch.linspace_over_dim()")
def linspace_over_dim(dim: Dim, start: Union[float, Tensor] = 0.0, end: Union[float, Tensor] = 1.0, *,
                      dtype: Optional[str] = None, device=None) -> Tensor:
    """start + (end - start) * i / n for frame i of `dim`, n its size (per sequence: each sequence's own
    length, so the result is over the lengths' dims and `dim`); end is not reached (rf's definition)."""
    caller = "dimtorch.linspace_over_dim()"
    if not isinstance(dim, Dim):
        raise TypeError(f"{caller}: dim must be a Dim, got {type(dim).__name__}")
    indices = range_over_dim(dim, dtype=dtype or "float32", device=device)
    if dim.lengths is None:
        n = float(max(dim.size, 1))
    else:
        lengths = dim.lengths
        n = Tensor(torch.clamp(lengths.raw, min=1).to(device=indices.raw.device, dtype=indices.raw.dtype),
                   lengths.dims)
    out = indices / n if isinstance(n, float) else combine(indices, n, "truediv", allow_broadcast_all_sources=True)
    span = end - start
    if not isinstance(span, (int, float)) or span != 1:
        out = out * span
    if not isinstance(start, (int, float)) or start != 0:
        out = out + start
    return out


__all__ = ["range_over_dim_strided", "range_over_merged_dims", "linspace_over_dim"]
