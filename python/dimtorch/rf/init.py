"""Parameter initializers (RETURNN frontend's rf.init): called as `init(dims, dtype, *, sparse_dim=None, device=None)`
and giving a Tensor over `dims`; assign one to `param.initial` (or pass `initial=`).

The fans follow RETURNN's positions: one dim: its size both; two dims (in, out): fan_in the first, fan_out
the second (rf's Linear weight is (in, out)); more (a conv filter (out, in, *kernel)): fan_in = dims[1] *
kernel, fan_out = dims[0] * kernel. The distributions are RETURNN's: truncated normal at 2 stddev with
the stddev corrected for the truncation, uniform with limit sqrt(3 scale / n).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch

from .._C import Dim, Tensor
from .._core.dtypes import to_torch_dtype

__all__ = ["ParamInit", "ParamInitType", "Normal", "VarianceScaling", "Glorot", "He", "HeNormal", "HeUniform"]


def _sizes(dims: Sequence[Dim], caller: str) -> list:
    out = []
    for d in dims:
        if not isinstance(d, Dim) or d.size is None:
            raise ValueError(f"{caller}: dims must be static Dims, got {d!r}")
        out.append(d.size)
    return out


def _compute_fans(dims: Sequence[Dim]) -> tuple:
    sizes = [d.size for d in dims]
    if not sizes:
        return 1, 1
    if len(sizes) == 1:
        return sizes[0], sizes[0]
    if len(sizes) == 2:
        return sizes[0], sizes[1]
    field = math.prod(sizes[2:])
    return sizes[1] * field, sizes[0] * field


class ParamInit:
    """Base class: `__call__(dims, dtype, *, sparse_dim=None, device=None, out=None) -> Tensor`."""

    def __call__(self, dims: Sequence[Dim], dtype: Optional[str] = None, *, sparse_dim: Optional[Dim] = None,
                 device=None, out: Optional[Tensor] = None) -> Tensor:
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"


ParamInitType = Union[Tensor, int, float, ParamInit]


def _tensor(raw: torch.Tensor, dims, sparse_dim) -> Tensor:
    return Tensor(raw, tuple(dims), sparse_dim=sparse_dim)


def _truncated_normal(shape, stddev: float, dtype, device) -> torch.Tensor:
    raw = torch.empty(shape, dtype=dtype, device=device)
    return torch.nn.init.trunc_normal_(raw, 0.0, stddev, -2.0 * stddev, 2.0 * stddev)


class Normal(ParamInit):
    """Normal(0, stddev), truncated at 2 stddev by default (independent of the fans)."""

    def __init__(self, stddev: float, *, truncated: bool = True, dtype: Optional[str] = None):
        if stddev <= 0.0:
            raise ValueError(f"dimtorch.rf.init.Normal(): stddev must be positive, got {stddev}")
        self.stddev, self.truncated, self.dtype = stddev, truncated, dtype or "float32"

    def __call__(self, dims, dtype=None, *, sparse_dim=None, device=None, out=None) -> Tensor:
        caller = "dimtorch.rf.init.Normal()"
        shape = _sizes(dims, caller)
        torch_dtype = to_torch_dtype(dtype or self.dtype, caller)
        if self.truncated:
            raw = _truncated_normal(shape, self.stddev, torch_dtype, device)
        else:
            raw = torch.empty(shape, dtype=torch_dtype, device=device).normal_(0.0, self.stddev)
        return _tensor(raw, dims, sparse_dim)


class VarianceScaling(ParamInit):
    """Values of variance scale / n, n = fan_in, fan_out or their mean (`mode`); `distribution`
    "truncated_normal" (= "normal"), "untruncated_normal" or "uniform"."""

    scale = 1.0
    mode = "fan_in"
    distribution = "truncated_normal"

    def __init__(self, scale: float = None, mode: str = None, distribution: str = None, dtype: str = None):
        caller = f"dimtorch.rf.init.{type(self).__name__}()"
        if scale is not None:
            self.scale = scale
        if mode is not None:
            self.mode = mode
        if distribution is not None:
            self.distribution = distribution
        self.dtype = dtype or "float32"
        if self.scale <= 0.0:
            raise ValueError(f"{caller}: scale must be positive, got {self.scale}")
        if self.mode not in ("fan_in", "fan_out", "fan_avg"):
            raise ValueError(f"{caller}: mode must be fan_in, fan_out or fan_avg, got {self.mode!r}")
        if self.distribution not in ("normal", "uniform", "truncated_normal", "untruncated_normal"):
            raise ValueError(f"{caller}: distribution must be normal, uniform, truncated_normal or untruncated_normal, "
                             f"got {self.distribution!r}")

    def __call__(self, dims, dtype=None, *, sparse_dim=None, device=None, out=None) -> Tensor:
        caller = f"dimtorch.rf.init.{type(self).__name__}()"
        shape = _sizes(dims, caller)
        fan_in, fan_out = _compute_fans(dims)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[self.mode]
        scale = self.scale / max(1.0, n)
        torch_dtype = to_torch_dtype(dtype or self.dtype, caller)
        if self.distribution in ("truncated_normal", "normal"):
            raw = _truncated_normal(shape, math.sqrt(scale) / 0.87962566103423978, torch_dtype, device)
        elif self.distribution == "untruncated_normal":
            raw = torch.empty(shape, dtype=torch_dtype, device=device).normal_(0.0, math.sqrt(scale))
        else:
            limit = math.sqrt(3.0 * scale)
            raw = torch.empty(shape, dtype=torch_dtype, device=device).uniform_(-limit, limit)
        return _tensor(raw, dims, sparse_dim)


class Glorot(VarianceScaling):
    """Xavier Glorot: scale 1, fan_avg, uniform."""

    scale = 1.0
    mode = "fan_avg"
    distribution = "uniform"


class He(VarianceScaling):
    """Kaiming He: scale 2, fan_in, (truncated) normal."""

    scale = 2.0
    mode = "fan_in"
    distribution = "normal"


HeNormal = He


class HeUniform(He):
    """He with a uniform distribution."""

    distribution = "uniform"
