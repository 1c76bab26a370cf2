"""Definitions of zeros, ones and full over dims (src/creation.cpp)."""
from __future__ import annotations

import torch

from .._C import Dim, Tensor
from .._dtypes import dtype_from
from .._args import dim_str
from ._support import MAX_DIMS, describe_dims, dims_tuple, index_of, names_errors, padded_size, tp_name


def _create(make, dims, dtype, device, sparse_dim, feature_dim, caller: str) -> Tensor:
    """A new Tensor over `dims` (max sizes of dynamic dims): make(shape, dtype=, device=)."""
    dims = dims_tuple(dims, caller, "dims")
    if len(dims) > MAX_DIMS:
        raise ValueError(f"{caller}: at most {MAX_DIMS} dims are supported, got {len(dims)}")
    shape = []
    for i, d in enumerate(dims):
        if index_of(dims[:i], d) >= 0:
            raise ValueError(f"{caller}: dim {dim_str(d)} appears twice (dims: {describe_dims(dims)})")
        size = padded_size(d, caller)
        if size is None:
            raise ValueError(f"{caller}: dim {d!r} takes its size from data, so a new tensor over it has no size; "
                             f"make it from an existing tensor (zeros_like) or give the dim a size")
        shape.append(size)
    if sparse_dim is not None and not isinstance(sparse_dim, Dim):
        raise TypeError(f"{caller}: sparse_dim must be a Dim or None, got {tp_name(sparse_dim)}")
    if feature_dim is not None and (not isinstance(feature_dim, Dim) or index_of(dims, feature_dim) < 0):
        shown = dim_str(feature_dim) if isinstance(feature_dim, Dim) else str(feature_dim)
        raise ValueError(f"{caller}: feature_dim must be one of the dims ({describe_dims(dims)}), got {shown}")
    torch_dtype = dtype_from(dtype, caller) if dtype is not None else None
    raw = make(shape, dtype=torch_dtype, device=device)
    return Tensor(raw, dims, sparse_dim=sparse_dim, feature_dim=feature_dim)


@names_errors("dimtorch.zeros()")
def zeros(dims, *, dtype=None, device=None, sparse_dim=None, feature_dim=None) -> Tensor:
    """Zeros over `dims` (max sizes of dynamic dims); dtype None is torch's default dtype."""
    return _create(torch.zeros, dims, dtype, device, sparse_dim, feature_dim, "dimtorch.zeros()")


@names_errors("dimtorch.ones()")
def ones(dims, *, dtype=None, device=None, sparse_dim=None, feature_dim=None) -> Tensor:
    """Ones over `dims`; dtype None is torch's default dtype."""
    return _create(torch.ones, dims, dtype, device, sparse_dim, feature_dim, "dimtorch.ones()")


@names_errors("dimtorch.full()")
def full(dims, fill_value, *, dtype=None, device=None, sparse_dim=None, feature_dim=None) -> Tensor:
    """`fill_value` over `dims`; dtype None: as torch.full infers it from the fill value."""
    return _create(lambda shape, **kw: torch.full(shape, fill_value, **kw), dims, dtype, device, sparse_dim,
                   feature_dim, "dimtorch.full()")
