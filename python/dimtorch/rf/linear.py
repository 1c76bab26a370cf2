"""rf.Linear and rf.Embedding (RETURNN frontend's, with its parameter layouts: weight (in_dim, out_dim)).

Linear runs dimtorch's linear (its C++ fast path; a weight (in, out) is one torch.matmul plus the bias
add, measured 1.03-1.05x of F.linear on a (out, in) weight for tiny inputs, the same for larger ones), so a
RETURNN state dict loads as it is. Embedding is one F.embedding on the (in_dim, out_dim) table.
"""
from __future__ import annotations

import torch.nn.functional as F

from .. import _C
from .._C import Dim, Tensor
from .._core.args import dim_str, dims_str
from . import init as _init
from .module import Module
from .parameter import Parameter

__all__ = ["Linear", "Embedding"]


def _check_x(module, source, in_dim: Dim) -> None:
    if not isinstance(source, Tensor):
        raise TypeError(f"{type(module).__name__}(): source must be a dimtorch.Tensor, got {type(source).__name__}")
    if in_dim not in source.dims:
        raise ValueError(f"{type(module).__name__}(): source lacks the in_dim {dim_str(in_dim)} (source dims: "
                         f"{dims_str(source.dims)})")


class Linear(Module):
    """Linear(in_dim, out_dim, *, with_bias=True): y = source · weight + bias over named dims, in_dim of the
    source replaced by out_dim (the feature dim of the result). weight (in_dim, out_dim), Glorot;
    bias (out_dim,), zeros. out_dim may be in_dim itself (the weight's first dim is then a copy of it,
    `weight_in_dim`, as RETURNN's match priority does)."""

    def __init__(self, in_dim: Dim, out_dim: Dim, *, with_bias: bool = True):
        super().__init__()
        if not isinstance(in_dim, Dim) or not isinstance(out_dim, Dim):
            raise TypeError(f"dimtorch.rf.Linear(): in_dim and out_dim must be Dims, got {in_dim!r}, {out_dim!r}")
        self.in_dim, self.out_dim, self.with_bias = in_dim, out_dim, with_bias
        self.weight_in_dim = Dim(in_dim.size, name=f"{in_dim.name}_in") if in_dim is out_dim else in_dim
        self.weight = Parameter((self.weight_in_dim, out_dim))
        self.weight.initial = _init.Glorot()
        self.bias = None
        if with_bias:
            self.bias = Parameter((out_dim,))
            self.bias.initial = 0.0

    def __call__(self, source: Tensor) -> Tensor:
        if self.weight_in_dim is not self.in_dim:
            return self._call_same_dim(source)
        try:
            y = _C.linear(source, self.weight, self.bias)
        except (TypeError, ValueError):
            _check_x(self, source, self.in_dim)
            raise
        if y.feature_dim is not self.out_dim:
            y = Tensor(y.raw, y.dims, feature_dim=self.out_dim)
        return y

    def _call_same_dim(self, source: Tensor) -> Tensor:
        """out_dim is in_dim: the weight read with its copy as the output dim, then in_dim put back."""
        _check_x(self, source, self.in_dim)
        tmp = self.weight_in_dim
        w = Tensor(self.weight.raw, (self.in_dim, tmp))
        b = Tensor(self.bias.raw, (tmp,)) if self.bias is not None else None
        y = _C.linear(source, w, b)
        return Tensor(y.raw, tuple(self.out_dim if d is tmp else d for d in y.dims), feature_dim=self.out_dim)

    def extra_repr(self) -> str:
        return f"in_dim={dim_str(self.in_dim)}, out_dim={dim_str(self.out_dim)}, with_bias={self.with_bias}"


class Embedding(Module):
    """Embedding(in_dim, out_dim): rows of weight (in_dim, out_dim) (Glorot, as RETURNN's) at the indices of
    `source`, an int Tensor whose sparse_dim is in_dim; result dims: source's dims, then out_dim."""

    def __init__(self, in_dim: Dim, out_dim: Dim):
        super().__init__()
        if not isinstance(in_dim, Dim) or not isinstance(out_dim, Dim):
            raise TypeError(f"dimtorch.rf.Embedding(): in_dim and out_dim must be Dims, got {in_dim!r}, {out_dim!r}")
        self.in_dim, self.out_dim = in_dim, out_dim
        self.weight_in_dim = Dim(in_dim.size, name=f"{in_dim.name}_in") if in_dim is out_dim else in_dim
        self.weight = Parameter((self.weight_in_dim, out_dim))
        self.weight.initial = _init.Glorot()

    def __call__(self, source: Tensor) -> Tensor:
        if not isinstance(source, Tensor):
            raise TypeError(f"dimtorch.rf.Embedding(): source must be a dimtorch.Tensor of indices, got "
                            f"{type(source).__name__}")
        if source.sparse_dim is not self.in_dim:
            got = "none" if source.sparse_dim is None else dim_str(source.sparse_dim)
            raise ValueError(f"dimtorch.rf.Embedding(): the sparse_dim of source is {got}, in_dim is "
                             f"{dim_str(self.in_dim)} (source dims: {dims_str(source.dims)}, dtype {source.dtype})")
        return Tensor(F.embedding(source.raw, self.weight.raw), source.dims + (self.out_dim,), feature_dim=self.out_dim)

    def extra_repr(self) -> str:
        return f"in_dim={dim_str(self.in_dim)}, out_dim={dim_str(self.out_dim)}"
