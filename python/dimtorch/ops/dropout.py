"""Dropout composed in Python: F.dropout per element, or one mask over chosen dims broadcast over the rest."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .._C import Tensor
from .._core.args import dims_arg, has_namesake, namesakes_note


def dropout(x: Tensor, p: float, axis=None, training: bool = True) -> Tensor:
    """Zeroes elements of x with probability `p` and scales the rest by 1/(1-p).

    axis=None: an independent draw per element (F.dropout). `axis` a Dim or sequence of Dims: one
    draw per position over those dims only, the same for every position of x's other dims (e.g.
    axis=feature drops the same features in every time frame). p=0 or training=False returns x.
    """
    caller = "dimtorch.dropout()"
    if not isinstance(x, Tensor):
        raise TypeError(f"{caller}: x must be a dimtorch.Tensor, got {type(x).__name__}")
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise TypeError(f"{caller}: p must be a Python float, got {type(p).__name__}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{caller}: p must be in [0, 1], got {p}")
    if isinstance(training, (Tensor, torch.Tensor)):
        raise TypeError(f"{caller}: training must be a bool, got a {type(training).__name__}")
    if not training or p == 0:
        return x
    if axis is None:
        return Tensor(F.dropout(x.raw, p, True), x.dims, sparse_dim=x.sparse_dim, feature_dim=x.feature_dim)
    dims = dims_arg(axis, caller, "axis")
    x_dims, x_shape = x.dims, x.shape
    shape = [1] * len(x_dims)
    for d in dims:
        try:
            i = x_dims.index(d)  # Dim equality is identity
        except ValueError:
            desc = ", ".join(f"{e.name}:{n}" + (e._message_id if has_namesake(e, (x_dims, d)) else "")
                             for e, n in zip(x_dims, x_shape))
            raise ValueError(f"{caller}: dim {d!r} is not in x (dims: {desc}){namesakes_note(d, x_dims)}") from None
        shape[i] = x_shape[i]
    raw = x.raw
    if p == 1:
        mask = raw.new_zeros(shape)
    else:
        mask = raw.new_empty(shape).bernoulli_(1 - p).div_(1 - p)
    return Tensor(raw * mask, x.dims, sparse_dim=x.sparse_dim, feature_dim=x.feature_dim)
