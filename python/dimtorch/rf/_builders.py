"""Shared option handling of rf's composite modules: NotSpecified, make_norm, make_ff, activations, dropout."""
from __future__ import annotations

import copy as _copy
from typing import Any, Callable, Dict, Union

import torch

from .. import _C
from .._C import Dim, Tensor
from .build_from_dict import build_from_dict


class NotSpecified:
    """An option left at the module's default (RETURNN's NotSpecified is taken as this too)."""


def not_specified(value) -> bool:
    return value is NotSpecified or (isinstance(value, type) and value.__name__ == "NotSpecified")


def identity(x: Tensor) -> Tensor:
    return x


def swish(x: Tensor) -> Tensor:
    return _C.silu(x)


def make_norm(norm: Union[type, Dict[str, Any], torch.nn.Module, Callable], out_dim: Dim) -> Callable:
    """A block's norm over out_dim: a class built as norm(out_dim), a config dict, a module (deep-copied: its
    own parameters), or a callable used as it is."""
    if isinstance(norm, type):
        norm = norm(out_dim)
    elif isinstance(norm, dict):
        norm = build_from_dict(norm, out_dim)
    elif isinstance(norm, torch.nn.Module):
        norm = _copy.deepcopy(norm)
    if not callable(norm):
        raise TypeError(f"dimtorch.rf.make_norm(): unexpected norm {norm!r}")
    return norm


def make_activation(activation):
    """An activation from a callable, a config dict, a module (deep-copied) or a module class."""
    if isinstance(activation, dict):
        activation = build_from_dict(activation)
    elif isinstance(activation, torch.nn.Module):
        activation = _copy.deepcopy(activation)
    elif isinstance(activation, type):
        activation = activation()
    if not callable(activation):
        raise TypeError(f"dimtorch.rf: unexpected activation {activation!r}")
    return activation


def dropout(module, x: Tensor, p: float) -> Tensor:
    """x with dropout p in training (the module's train flag: the run context's)."""
    if not p or not module.training:
        return x
    return _C.dropout(x, p, training=True)


def finite_padding_inside(layers) -> None:
    """The layers of an encoder whose input padding is zeroed once: their own zeroing of x's padding (a
    `zero_padding` switch of a layer and of its self-attention) is turned off (every layer maps finite
    padding to finite padding)."""
    for layer in layers:
        if isinstance(getattr(layer, "zero_padding", None), bool):
            layer.zero_padding = False
        att = getattr(layer, "self_att", None)
        if isinstance(getattr(att, "zero_padding", None), bool):
            att.zero_padding = False


def zero_padding(module, x: Tensor, spatial_dim: Dim) -> Tensor:
    """x with its padding frames along spatial_dim zeroed when module.zero_padding (NaN there would reach
    the weight gradients of per-frame layers as 0 * NaN)."""
    if module.zero_padding and spatial_dim.lengths is not None:
        return x.copy_masked(0.0, (spatial_dim,))
    return x
