"""Embedding: a table over (in_dim (vocabulary), out_dim) looked up by class indices (F.embedding)."""
from __future__ import annotations

import torch.nn.functional as F

from .._C import Dim, Tensor
from .._core.args import dim_str, dims_str
from . import init as _init
from .module import Module, Parameter


class Embedding(Module):
    """Rows of the weight (in_dim, out_dim) at the indices of x, an int Tensor whose sparse_dim is
    in_dim; the output dims are x's dims followed by out_dim. Weight init: normal, stddev 1 (as
    torch.nn.Embedding). Indices must be in range everywhere, padding included (torch raises
    otherwise; nothing is read on the host)."""

    def __init__(self, in_dim: Dim, out_dim: Dim, *, dtype="float32", device=None, weight_init=None):
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.weight = Parameter((in_dim, out_dim), dtype, init=weight_init or _init.Normal(1.0), device=device,
                                in_dims=(in_dim,))

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor):
            raise TypeError(f"Embedding(): x must be a dimtorch.Tensor of class indices, got {type(x).__name__}")
        if x.sparse_dim is not self.in_dim:
            got = "none" if x.sparse_dim is None else dim_str(x.sparse_dim)
            raise ValueError(f"Embedding(): the sparse_dim of x is {got}, but in_dim is {dim_str(self.in_dim)} "
                             f"(x dims: {dims_str(x.dims)}, dtype {x.dtype})")
        return Tensor(F.embedding(x.raw, self.weight.raw), x.dims + (self.out_dim,), feature_dim=self.out_dim)

    def extra_repr(self) -> str:
        return f"in_dim={dim_str(self.in_dim)}, out_dim={dim_str(self.out_dim)}"
