"""weight_dropout, weight_noise (RETURNN frontend's): a parameter dropped out or noised on each read in training,
as parametrizations (dt.nn.register_parametrization); unchanged in eval."""
from __future__ import annotations

import torch

from .._C import Tensor
from .._C import dropout as _dropout
from .module import Module
from .parametrize import register_parametrization

__all__ = ["WeightDropout", "WeightNoise", "weight_dropout", "weight_noise"]


class WeightDropout(Module):
    """A parametrization: dropout of the parameter with drop_prob, in training (the module it is
    registered on decides: train()/eval() reach it). Each read draws anew."""

    def __init__(self, drop_prob: float):
        super().__init__()
        if isinstance(drop_prob, bool) or not isinstance(drop_prob, (int, float)) or not 0.0 <= drop_prob < 1.0:
            raise ValueError(f"dimtorch.nn.WeightDropout(): drop_prob must be a number in [0, 1), got {drop_prob!r}")
        self.drop_prob = float(drop_prob)

    def forward(self, param: Tensor) -> Tensor:
        if not self.training or not self.drop_prob:
            return param
        return _dropout(param, self.drop_prob, training=True)


class WeightNoise(Module):
    """A parametrization: the parameter plus Gaussian noise of standard deviation std (variational
    noise), in training. Each read draws anew."""

    def __init__(self, std: float):
        super().__init__()
        if isinstance(std, bool) or not isinstance(std, (int, float)) or not std >= 0.0:
            raise ValueError(f"dimtorch.nn.WeightNoise(): std must be a number >= 0, got {std!r}")
        self.std = float(std)

    def forward(self, param: Tensor) -> Tensor:
        if not self.training or not self.std:
            return param
        raw = param.raw
        return Tensor(raw + torch.randn_like(raw) * self.std, param.dims)


def weight_dropout(module: Module, param_name: str, *, drop_prob: float) -> Module:
    """module.<param_name> with weight dropout in training (register_parametrization of WeightDropout)."""
    return register_parametrization(module, param_name, WeightDropout(drop_prob))


def weight_noise(module: Module, param_name: str, *, std: float) -> Module:
    """module.<param_name> with Gaussian weight noise in training (register_parametrization of WeightNoise)."""
    return register_parametrization(module, param_name, WeightNoise(std))
