"""reduce_out (RETURNN frontend's): the feature dim split into groups of num_pieces and each group reduced,
e.g. maxout in an attention decoder's readout."""
from __future__ import annotations

from typing import Optional

import torch

from .._C import Dim, Tensor
from .._core.args import check_tensor, dim_str, dims_str
from ._support import names_errors

# The pieces are a static dim of their own: no padding to mask, one view and one torch reduction.
_REDUCE = {"max": torch.amax, "sum": torch.sum, "mean": torch.mean, "min": torch.amin}


@names_errors("dimtorch.reduce_out()")
def reduce_out(source: Tensor, *, mode: str, num_pieces: int, out_dim: Optional[Dim] = None) -> Tensor:
    """source's feature dim F split into (out_dim, num_pieces) (consecutive features form a group, as rf's
    split_dims) and reduced over the pieces with `mode` ("max", "sum", "mean", "min"); the result has
    out_dim (default F // num_pieces, by dim math) in F's place, as its feature dim."""
    caller = "dimtorch.reduce_out()"
    check_tensor(source, caller, what="source")
    feature = source.feature_dim
    if feature is None:
        raise ValueError(f"{caller}: source has no feature_dim (dims: {dims_str(source.dims)})")
    if mode not in _REDUCE:
        raise ValueError(f"{caller}: mode must be one of {', '.join(map(repr, _REDUCE))}, got {mode!r}")
    if type(num_pieces) is not int or num_pieces < 1:
        raise ValueError(f"{caller}: num_pieces must be an int >= 1, got {num_pieces!r}")
    if feature.size is None or feature.size % num_pieces:
        raise ValueError(f"{caller}: the feature dim {dim_str(feature)} must be static and a multiple of "
                         f"num_pieces={num_pieces}")
    if out_dim is None:
        out_dim = feature // num_pieces  # dim math: the same dim for the same feature dim and num_pieces
    elif not isinstance(out_dim, Dim) or out_dim.size != feature.size // num_pieces:
        got = dim_str(out_dim) if isinstance(out_dim, Dim) else type(out_dim).__name__
        raise ValueError(f"{caller}: out_dim must be a Dim of size {feature.size // num_pieces} "
                         f"({dim_str(feature)} // {num_pieces}), got {got}")
    dims = source.dims
    a = dims.index(feature)
    raw = source.raw
    shape = tuple(raw.shape)
    raw = _REDUCE[mode](raw.reshape(shape[:a] + (out_dim.size, num_pieces) + shape[a + 1:]), a + 1)
    return Tensor(raw, dims[:a] + (out_dim,) + dims[a + 1:], sparse_dim=source.sparse_dim, feature_dim=out_dim)


__all__ = ["reduce_out"]
