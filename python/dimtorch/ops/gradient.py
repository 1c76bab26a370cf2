"""stop_gradient, scaled_gradient, scaled_gradient_ext (RETURNN frontend's): identity forward, the gradient scaled (and shifted)
on its way back, e.g. a gradient reversal layer (scale -1) or a down-weighted auxiliary branch."""
from __future__ import annotations

from typing import Optional, Union

import torch

from .._C import Dim, Tensor
from .._core.args import axis_of, check_tensor, dims_str, keep_markers
from .._core.tracing import mask_raw
from ._support import names_errors
from .gradient_op import scaled_grad


def _factor(value, x: Tensor, caller: str, what: str):
    """A number as a float; a Tensor as its raw aligned to x's dims (its dims must be among x's)."""
    if isinstance(value, Tensor):
        extra = [d for d in value.dims if d not in x.dims]
        if extra:
            raise ValueError(f"{caller}: {what} has dims ({dims_str(extra)}) that source (dims: "
                             f"{dims_str(x.dims)}) lacks")
        return value.raw_aligned(tuple(d for d in x.dims if d in value.dims)).reshape(
            [x.raw.shape[i] if d in value.dims else 1 for i, d in enumerate(x.dims)])
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{caller}: {what} must be a number or a dimtorch.Tensor, got {type(value).__name__}")
    return float(value)


@names_errors("dimtorch.stop_gradient()")
def stop_gradient(source: Tensor) -> Tensor:
    """source with its raw detached: the same values, dims and markers; no gradient flows back through it
    (RETURNN frontend's stop_gradient)."""
    check_tensor(source, "dimtorch.stop_gradient()", what="source")
    return keep_markers(source, source.raw.detach(), source.dims)


@names_errors("dimtorch.scaled_gradient()")
def scaled_gradient(source: Tensor, scale: Union[float, Tensor]) -> Tensor:
    """source unchanged; its gradient times `scale` (a number, or a Tensor over some of source's dims).
    scale 0 stops the gradient (as rf's stop_gradient)."""
    caller = "dimtorch.scaled_gradient()"
    check_tensor(source, caller, what="source")
    factor = _factor(scale, source, caller, "scale")
    if not isinstance(factor, torch.Tensor) and factor == 0.0:
        return keep_markers(source, source.raw.detach(), source.dims)
    return keep_markers(source, scaled_grad(source.raw, factor, None, None, None), source.dims)


@names_errors("dimtorch.scaled_gradient_ext()")
def scaled_gradient_ext(source: Tensor, *, scale: Union[float, Tensor] = 1.0,
                        shift: Optional[Union[float, Tensor]] = None,
                        scale_shift_by_sum_over_axis: Optional[Dim] = None) -> Tensor:
    """source unchanged; its gradient g becomes g * scale + shift, or with scale_shift_by_sum_over_axis,
    g * scale + shift * sum(|g|) over that axis (its valid frames only). scale and shift are numbers or
    Tensors over some of source's dims."""
    caller = "dimtorch.scaled_gradient_ext()"
    check_tensor(source, caller, what="source")
    factor = _factor(scale, source, caller, "scale")
    offset = None if shift is None else _factor(shift, source, caller, "shift")
    if offset is not None and not isinstance(offset, torch.Tensor) and offset == 0.0:
        offset = None
    axis, valid = None, None
    if scale_shift_by_sum_over_axis is not None:
        axis = axis_of(source, scale_shift_by_sum_over_axis, caller, what="scale_shift_by_sum_over_axis",
                       of="source")
        d = scale_shift_by_sum_over_axis
        if d.lengths is not None:
            valid = mask_raw(d, source.dims, source.raw.shape, source.raw.device)
    return keep_markers(source, scaled_grad(source.raw, factor, offset, axis, valid), source.dims)


__all__ = ["scaled_gradient", "scaled_gradient_ext"]
