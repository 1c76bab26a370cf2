"""rf.parametrizations (RETURNN frontend's): weight_dropout / WeightDropout, weight_noise / WeightNoise, applied in
training only (the run context's train flag, for WeightDropout.__call__ / WeightNoise.__call__). The dropped or
noised weight is kept for backward (rf recomputes it in a gradient checkpoint scope)."""
from __future__ import annotations

import torch

from .. import _C
from .._C import Tensor
from .parametrize import register_parametrization
from .run_ctx import get_run_ctx

__all__ = ["weight_dropout", "WeightDropout", "weight_noise", "WeightNoise"]


def weight_dropout(module, param_name: str, *, drop_prob: float):
    """module.<param_name> reads with dropout drop_prob in training; returns module."""
    return register_parametrization(module, param_name, WeightDropout(drop_prob))


class WeightDropout:
    """A parametrization: dropout of the parameter in training."""

    def __init__(self, drop_prob: float):
        self.drop_prob = drop_prob

    def __call__(self, param: Tensor) -> Tensor:
        if not get_run_ctx().is_train_flag_enabled(func=WeightDropout.__call__):
            return param
        return _C.dropout(param, self.drop_prob, training=True)


def weight_noise(module, param_name: str, *, std: float):
    """module.<param_name> reads with Gaussian noise (stddev std) added in training; returns module."""
    return register_parametrization(module, param_name, WeightNoise(std))


class WeightNoise:
    """A parametrization: the parameter plus normal noise of stddev `std` in training."""

    def __init__(self, std: float):
        self.std = std

    def __call__(self, param: Tensor) -> Tensor:
        if not get_run_ctx().is_train_flag_enabled(func=WeightNoise.__call__):
            return param
        raw = param.raw
        return Tensor(raw + torch.randn_like(raw) * self.std, param.dims)
