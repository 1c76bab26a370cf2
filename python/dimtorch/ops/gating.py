"""gating: a gated linear unit's gate (RETURNN frontend's), act(first half) * gate(second half) of a dim."""
from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch.nn.functional as F

from .._C import Dim, Tensor, sigmoid, split
from .._core.args import axis_of, check_tensor, dim_str
from ._support import names_errors


def _identity(x: Tensor) -> Tensor:
    return x


@names_errors("dimtorch.gating()")
def gating(x: Tensor, *, axis: Optional[Dim] = None, gate_func: Callable = sigmoid, act_func: Callable = _identity,
           out_dim: Optional[Dim] = None) -> Tuple[Tensor, Dim]:
    """act_func(a) * gate_func(b), a and b the two halves of `axis` (default x's feature_dim, static
    and even): GLU with the defaults (sigmoid gate, identity act); returns (y, out_dim), out_dim
    = axis // 2 by dim math unless given."""
    caller = "dimtorch.gating()"
    check_tensor(x, caller)
    for what, fn in (("gate_func", gate_func), ("act_func", act_func)):
        if not callable(fn):
            raise TypeError(f"{caller}: {what} must be callable, got {type(fn).__name__}")
    if axis is None:
        axis = x.feature_dim
        if axis is None:
            raise ValueError(f"{caller}: x has no feature_dim; give axis")
    axis_of(x, axis, caller)
    if axis.size is None or axis.size % 2:
        raise ValueError(f"{caller}: axis {dim_str(axis)} must be static and even")
    if out_dim is None:
        out_dim = axis // 2
    elif not isinstance(out_dim, Dim) or out_dim.size != axis.size // 2:
        raise ValueError(f"{caller}: out_dim must be a Dim of size {axis.size // 2}, got {out_dim!r}")
    if gate_func is sigmoid and act_func is _identity:  # GLU: torch's one kernel
        i = x.dims.index(axis)
        dims = x.dims[:i] + (out_dim,) + x.dims[i + 1:]
        return Tensor(F.glu(x.raw, dim=i), dims, feature_dim=out_dim if x.feature_dim is axis else x.feature_dim), \
            out_dim
    a, b = split(x, axis=axis, out_dims=(out_dim, out_dim))
    return act_func(a) * gate_func(b), out_dim


__all__ = ["gating"]
