"""Normalization layers: LayerNorm, RMSNorm, BatchNorm (masked statistics, running-stat buffers)."""
from __future__ import annotations

from .. import _C
from .._C import Dim, Tensor, batch_norm
from .._args import dim_str
from .linear import check_in_dim
from .module import Buffer, Module, Parameter


class LayerNorm(Module):
    """Layer norm over in_dim (F.layer_norm) with scale (ones) and bias (zeros) over (in_dim,)."""

    def __init__(self, in_dim: Dim, *, eps: float = 1e-5, with_bias: bool = True, dtype="float32", device=None):
        super().__init__()
        self.in_dim, self.eps = in_dim, eps
        self.scale = Parameter((in_dim,), dtype, init=1.0, device=device)
        self.bias = Parameter((in_dim,), dtype, init=0.0, device=device) if with_bias else None

    def forward(self, x: Tensor) -> Tensor:
        try:
            return _C.layer_norm(x, self.in_dim, weight=self.scale, bias=self.bias, eps=self.eps)
        except (TypeError, ValueError):
            check_in_dim(self, x, self.in_dim)
            raise

    def extra_repr(self) -> str:
        return f"in_dim={dim_str(self.in_dim)}, eps={self.eps}"


class RMSNorm(Module):
    """RMS norm over in_dim (F.rms_norm) with scale (ones) over (in_dim,)."""

    def __init__(self, in_dim: Dim, *, eps: float = 1e-6, dtype="float32", device=None):
        super().__init__()
        self.in_dim, self.eps = in_dim, eps
        self.scale = Parameter((in_dim,), dtype, init=1.0, device=device)

    def forward(self, x: Tensor) -> Tensor:
        try:
            return _C.rms_norm(x, self.in_dim, weight=self.scale, eps=self.eps)
        except (TypeError, ValueError):
            check_in_dim(self, x, self.in_dim)
            raise

    def extra_repr(self) -> str:
        return f"in_dim={dim_str(self.in_dim)}, eps={self.eps}"


class BatchNorm(Module):
    """Batch norm over the feature dim in_dim (dt.batch_norm): statistics over all other dims, valid
    frames only (use_mask); running_mean/running_var buffers (persistent) updated in training with
    `momentum` as torch does; eval uses them. affine=False drops scale and bias."""

    def __init__(self, in_dim: Dim, *, momentum: float = 0.1, eps: float = 1e-5, use_mask: bool = True,
                 affine: bool = True, dtype="float32", device=None):
        super().__init__()
        self.in_dim, self.momentum, self.eps, self.use_mask = in_dim, momentum, eps, use_mask
        self.affine = affine
        self.running_mean = Buffer((in_dim,), dtype, init=0.0, device=device)
        self.running_var = Buffer((in_dim,), dtype, init=1.0, device=device)
        self.scale = Parameter((in_dim,), dtype, init=1.0, device=device) if affine else None
        self.bias = Parameter((in_dim,), dtype, init=0.0, device=device) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor) or self.in_dim not in x.dims:
            check_in_dim(self, x, self.in_dim)
        return batch_norm(x, self.in_dim, running_mean=self.running_mean, running_var=self.running_var,
                          weight=self.scale, bias=self.bias, training=self.training, momentum=self.momentum,
                          eps=self.eps, use_mask=self.use_mask)

    def extra_repr(self) -> str:
        return f"in_dim={dim_str(self.in_dim)}, momentum={self.momentum}, eps={self.eps}, use_mask={self.use_mask}"
