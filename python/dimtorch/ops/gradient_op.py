"""dimtorch::scaled_grad, an identity whose gradient is scaled and shifted, as one op that torch.export keeps.

scaled_gradient(_ext) and label_smoothed_log_prob_gradient change only the gradient: eagerly and under
torch.compile an autograd.Function does it (Dynamo traces its forward and backward). Non-strict
torch.export and make_fx trace through the Function's forward and lose its backward (the exported
graph's gradient would be the identity's); a custom op with a registered backward stays one node there,
its backward traced from `_backward`.

The gradient g becomes g * scale + shift, or with `axis`, g * scale + shift * sum(|g|) over that axis
(only where `valid` holds, when given); scale and shift are numbers or raws broadcastable to g.
"""
from __future__ import annotations

from typing import Optional

import torch

from .._core import tracing as _tracing


class _ScaledGradient(torch.autograd.Function):
    """x as it is; backward: the gradient scaled and shifted (see the module)."""

    @staticmethod
    def forward(ctx, x, scale, shift, axis, valid):
        ctx.scale, ctx.shift, ctx.axis, ctx.valid = scale, shift, axis, valid
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _scaled(grad, ctx.scale, ctx.shift, ctx.axis, ctx.valid), None, None, None, None


def _scaled(grad, scale, shift, axis, valid):
    out = grad
    if isinstance(scale, torch.Tensor) or scale != 1.0:
        out = out * scale
    if shift is not None:
        if axis is None:
            out = out + shift
        else:
            # Padding frames' gradient (whatever it holds) stays out of the sum: batch independence.
            size = grad.abs() if valid is None else torch.where(valid, grad, 0.0).abs()
            out = out + shift * size.sum(axis, keepdim=True)
    return out


@torch.library.custom_op("dimtorch::scaled_grad", mutates_args=())
def _scaled_grad(x: torch.Tensor, scale: Optional[torch.Tensor], scale_value: float, shift: Optional[torch.Tensor],
                 shift_value: Optional[float], axis: Optional[int], valid: Optional[torch.Tensor]) -> torch.Tensor:
    return x.clone()  # (a custom op's output may not alias its input)


@_scaled_grad.register_fake
def _(x, scale, scale_value, shift, shift_value, axis, valid):
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output):
    x, scale, scale_value, shift, shift_value, axis, valid = inputs
    ctx.scale = scale if scale is not None else scale_value
    ctx.shift = shift if shift is not None else shift_value
    ctx.axis, ctx.valid = axis, valid


def _backward(ctx, grad):
    return _scaled(grad, ctx.scale, ctx.shift, ctx.axis, ctx.valid), None, None, None, None, None, None


_scaled_grad.register_autograd(_backward, setup_context=_setup_context)


def scaled_grad(x: torch.Tensor, scale, shift, axis: Optional[int], valid: Optional[torch.Tensor]) -> torch.Tensor:
    """x, its gradient scaled and shifted (see the module): scale a float or raw, shift None, a float or raw."""
    if _tracing.tracing() and not _tracing.dynamo_tracing():  # make_fx, non-strict export: one kept node
        tensor_scale = scale if isinstance(scale, torch.Tensor) else None
        tensor_shift = shift if isinstance(shift, torch.Tensor) else None
        return _scaled_grad(x, tensor_scale, 1.0 if tensor_scale is not None else float(scale), tensor_shift,
                            None if shift is None or tensor_shift is not None else float(shift), axis, valid)
    return _ScaledGradient.apply(x, scale, shift, axis, valid)
