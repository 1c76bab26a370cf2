"""Splitting one dim into parts (split), stacking tensors along a new dim (stack) and its inverse (unstack)."""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from ._C import Dim, Tensor
from ._shape_ops import axis_of, check_tensor, dim_str, dims_str, keep_markers


def split(x: Tensor, *, axis: Dim, out_dims: Sequence[Dim]) -> list:
    """Splits `axis` of x into consecutive parts, one per static Dim in `out_dims` (their sizes
    must add up to the size of axis); returns one tensor per part, each a view with `axis`
    replaced by its out dim. `axis` must not be dynamic (parts of sequences have no lengths)."""
    caller = "dimtorch.split()"
    check_tensor(x, caller)
    a = axis_of(x, axis, caller, what="axis")
    if axis.dyn_size is not None:
        raise ValueError(f"{caller}: axis {dim_str(axis)} is dynamic; only static dims or dims sized from data "
                         f"can be split")
    if isinstance(out_dims, Dim):
        out_dims = (out_dims,)
    out_dims = tuple(out_dims)
    if not out_dims or not all(isinstance(d, Dim) and d.size is not None for d in out_dims):
        raise ValueError(f"{caller}: out_dims must be static Dims, got {out_dims!r}")
    sizes = [d.size for d in out_dims]
    if sum(sizes) != x.raw.shape[a]:
        raise ValueError(f"{caller}: the sizes of out_dims ({dims_str(out_dims)}) add up to {sum(sizes)}, not to the "
                         f"size {x.raw.shape[a]} of axis {dim_str(axis)}")
    for d in out_dims:
        if any(d is e for e in x.dims) and d is not axis:
            raise ValueError(f"{caller}: out dim {dim_str(d)} is already a dim of x (dims: {dims_str(x.dims)})")
    parts = torch.split(x.raw, sizes, dim=a)
    return [keep_markers(x, p, x.dims[:a] + (d,) + x.dims[a + 1:]) for p, d in zip(parts, out_dims)]


def stack(tensors: Sequence[Tensor], *, out_dim: Optional[Dim] = None):
    """Stacks tensors with the same dims (in any order) along a new first dim; returns (tensor,
    out_dim). The result has the first tensor's dims order after out_dim; the others are aligned
    to it. A new out_dim is static with the number of tensors."""
    caller = "dimtorch.stack()"
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{caller}: no tensors to stack")
    for i, t in enumerate(tensors):
        check_tensor(t, caller, what=f"tensors[{i}]")
    first = tensors[0]
    dims = first.dims
    raws = [first.raw]
    for i, t in enumerate(tensors[1:], 1):
        if len(t.dims) != len(dims) or not all(any(d is e for e in t.dims) for d in dims):
            raise ValueError(f"{caller}: tensors[{i}] has dims ({dims_str(t.dims)}), tensors[0] has "
                             f"({dims_str(dims)}); all must have the same dims")
        if t.dtype != first.dtype:
            raise TypeError(f"{caller}: tensors[{i}] has dtype {t.dtype}, tensors[0] has {first.dtype}")
        raws.append(t.raw if t.dims == dims else t.raw_aligned(dims))
    if out_dim is None:
        out_dim = Dim(len(tensors), name="stack")
    elif not isinstance(out_dim, Dim):
        raise TypeError(f"{caller}: out_dim must be a Dim, got {type(out_dim).__name__}")
    elif out_dim.size != len(tensors) or any(out_dim is d for d in dims):
        raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} does not fit {len(tensors)} tensors over "
                         f"({dims_str(dims)})")
    sparse = first.sparse_dim if all(t.sparse_dim is first.sparse_dim for t in tensors) else None
    return Tensor(torch.stack(raws, 0), (out_dim,) + dims, sparse_dim=sparse, feature_dim=first.feature_dim), out_dim


def unstack(x: Tensor, *, axis: Dim) -> list:
    """One tensor per index of `axis` (static or sized from data), without that dim; views."""
    caller = "dimtorch.unstack()"
    check_tensor(x, caller)
    a = axis_of(x, axis, caller, what="axis")
    if axis.dyn_size is not None:
        raise ValueError(f"{caller}: axis {dim_str(axis)} is dynamic; only static dims or dims sized from data "
                         f"can be unstacked")
    dims = x.dims[:a] + x.dims[a + 1:]
    return [keep_markers(x, r, dims) for r in torch.unbind(x.raw, a)]
