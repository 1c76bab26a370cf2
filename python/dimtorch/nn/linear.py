"""Linear layer: weight stored (out_dim, in_dim) so that dt.linear is one F.linear call."""
from __future__ import annotations

from .. import _C
from .._C import Dim, Tensor
from .._core.args import dim_str, dims_str
from . import init as _init
from .module import Module, Parameter


def check_in_dim(module: Module, x, in_dim: Dim) -> None:
    """Raises the module's error when x is not a dimtorch Tensor or lacks in_dim."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{type(module).__name__}(): x must be a dimtorch.Tensor, got {type(x).__name__}")
    for d in x.dims:
        if d is in_dim:
            return
    raise ValueError(f"{type(module).__name__}(): x lacks the in_dim {dim_str(in_dim)} (x dims: {dims_str(x.dims)})")


class Linear(Module):
    """y = x·W + b over named dims: in_dim of x becomes out_dim. Weight (out_dim, in_dim), Glorot
    uniform (fans from in_dim/out_dim); bias (out_dim,), zeros.

    out_dim may be in_dim itself (e.g. Linear(model, model)): a Tensor cannot hold one dim twice, so
    the weight's output axis is then a private dim of the same size (`weight_out_dim`) and the
    result gets in_dim back in its place."""

    def __init__(self, in_dim: Dim, out_dim: Dim, *, with_bias: bool = True, dtype="float32", device=None,
                 weight_init=None):
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.weight_out_dim = Dim(out_dim.size, name=f"{out_dim.name}_out") if out_dim is in_dim else out_dim
        self.weight = Parameter((self.weight_out_dim, in_dim), dtype, init=weight_init or _init.Glorot(), device=device,
                                in_dims=(in_dim,))
        self.bias = Parameter((self.weight_out_dim,), dtype, init=0.0, device=device) if with_bias else None

    def forward(self, x: Tensor) -> Tensor:
        try:
            y = _C.linear(x, self.weight, self.bias)
        except (TypeError, ValueError):
            check_in_dim(self, x, self.in_dim)  # the error names the module when x lacks in_dim
            raise
        if self.out_dim is self.in_dim:
            tmp, out = self.weight_out_dim, self.out_dim
            return Tensor(y.raw, tuple(out if d is tmp else d for d in y.dims),
                          feature_dim=out if y.feature_dim is tmp else y.feature_dim)
        return y

    def extra_repr(self) -> str:
        return f"in_dim={dim_str(self.in_dim)}, out_dim={dim_str(self.out_dim)}, with_bias={self.bias is not None}"
