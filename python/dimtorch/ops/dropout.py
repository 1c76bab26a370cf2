"""Dropout composed in Python: F.dropout per element, or one mask over chosen dims broadcast over the rest; and\ndropout switched by the run context's train flag, as RETURNN frontend applies it."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import _C
from .._C import Dim, Tensor
from .._core.args import dims_arg, has_namesake, namesakes_note
from .._core.run_ctx import DROPOUT_KEY, is_train_flag_enabled
from .creation import random_uniform


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


def train_flag_dropout(source: Tensor, drop_prob, *, axis=None, on_forward: bool = False) -> Tensor:
    """Dropout as RETURNN frontend applies it (dimtorch.rf.dropout): only when the installed run
    context's train flag is set for this function (dimtorch._core.run_ctx), or on_forward; else source
    itself. axis: None or False, a draw per entry; a Dim or Dims, the mask varies over those only.
    drop_prob may be a Tensor (e.g. a schedule on the device). The C++ fast path reads the flag the
    run context publishes; this definition asks the context."""
    if axis is False:
        axis = None
    elif axis is True:
        raise ValueError("dimtorch.rf.dropout(): axis=True is not valid (a Dim, Dims, None or False)")
    if not on_forward and not is_train_flag_enabled(DROPOUT_KEY):
        return source
    if isinstance(drop_prob, Tensor):
        return _dropout_tensor_prob(source, drop_prob, axis)
    if not 0.0 <= drop_prob < 1.0:
        raise ValueError(f"dimtorch.rf.dropout(): drop_prob must be in [0, 1), got {drop_prob}")
    return _C.dropout(source, drop_prob, axis, True)


def _dropout_tensor_prob(source: Tensor, drop_prob: Tensor, axis) -> Tensor:
    """A drop probability given as a Tensor: the mask by a uniform draw (floor(keep + u) is 1 with
    probability keep)."""
    dims = source.dims if axis is None else (axis,) if isinstance(axis, Dim) else tuple(axis)
    keep = 1.0 - drop_prob
    u = random_uniform(dims, dtype=source.dtype, device=source.raw.device)
    return source * (_C.floor(keep + u) / keep)
