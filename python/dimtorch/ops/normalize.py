"""normalize: mean and variance normalization over dims (RETURNN frontend's), valid frames only."""
from __future__ import annotations

from typing import Sequence, Union

from .._C import Dim, Tensor, moments, rsqrt
from .._core.args import axis_of, check_tensor, dims_arg
from ._support import names_errors


@names_errors("dimtorch.normalize()")
def normalize(a: Tensor, *, axis: Union[Dim, Sequence[Dim]], epsilon: float = 1e-6) -> Tensor:
    """(a - mean) * rsqrt(variance + epsilon), mean and (biased) variance over the dim(s) `axis`
    (dt.moments: the padding of a dynamic dim among them is excluded). Where `axis` holds a dynamic
    dim, a's padding is zeroed first, so NaN there reaches neither valid values nor gradients; the
    padding frames of the result are finite garbage."""
    caller = "dimtorch.normalize()"
    check_tensor(a, caller)
    axes = [axis] if isinstance(axis, Dim) else list(dims_arg(axis, caller, "axis"))
    if not axes:
        raise ValueError(f"{caller}: axis is empty; give the dim(s) to normalize over")
    for d in axes:
        axis_of(a, d, caller, what="axis")
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)):
        raise TypeError(f"{caller}: epsilon must be a number, got {type(epsilon).__name__}")
    if any(d.lengths is not None for d in axes):
        a = a.copy_masked(0.0)
    mean, variance = moments(a, axes)
    return (a - mean) * rsqrt(variance + epsilon)


__all__ = ["normalize"]
