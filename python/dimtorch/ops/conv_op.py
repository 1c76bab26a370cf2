"""dimtorch::convolution, torch's convolution as one opaque op for convolutions in graphs on the CPU: no second
graph when a batch crosses 16 sequences.

torch 2.13's fake convolution (torch/_subclasses/fake_impls.py) asks `_select_conv_backend` for the CPU
backend to pick the output's memory format whenever the sizes have hints, and that choice depends on the
batch size (2 <= B <= 15 or B >= 16): the graph guards on it, and a batch on the other side compiles a
second graph. This op's fake kernel computes the output shape only. Inside the op it is aten.convolution
itself, bias included (made contiguous, as the fake says); its backward is aten.convolution_backward in a
second op, for the inputs that need a gradient: the same kernels, and values, as F.conv1d/2d/3d. dt.conv
uses it for every convolution traced on the CPU: the guard appeared with the depthwise 1-D convolution of a
Conformer block and with the 2-D convolutions of RETURNN's ConformerConvSubsample (a 2-D output that torch
would keep channels-last is made contiguous here, which can change the next kernel's rounding, not values
beyond it).
"""
from __future__ import annotations

from typing import List, Optional

import torch

_NAMESPACE = "dimtorch"


@torch.library.custom_op(f"{_NAMESPACE}::convolution", mutates_args=())
def convolution(x: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor], stride: List[int],
                padding: List[int], dilation: List[int], transposed: bool, output_padding: List[int],
                groups: int) -> torch.Tensor:
    """aten.convolution (x: (N, C, *S), w: torch's filter layout, bias (C_out,) or None)."""
    return torch.ops.aten.convolution(x, w, bias, stride, padding, dilation, transposed, output_padding,
                                      groups).contiguous()


@convolution.register_fake
def _(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    shape = [x.shape[0], w.shape[1] * groups if transposed else w.shape[0]]
    for i in range(len(stride)):
        n, k = x.shape[2 + i], dilation[i] * (w.shape[2 + i] - 1) + 1
        if transposed:
            shape.append((n - 1) * stride[i] - 2 * padding[i] + k + output_padding[i])
        else:
            shape.append((n + 2 * padding[i] - k) // stride[i] + 1)
    return x.new_empty(shape)


@torch.library.custom_op(f"{_NAMESPACE}::convolution_backward", mutates_args=())
def convolution_backward(grad: torch.Tensor, x: torch.Tensor, w: torch.Tensor, stride: List[int], padding: List[int],
                         dilation: List[int], transposed: bool, output_padding: List[int], groups: int,
                         need: List[bool]) -> List[torch.Tensor]:
    """[gradient of x, of w, of the bias] (an empty tensor for those not needed)."""
    bias_sizes = [w.shape[1] * groups if transposed else w.shape[0]]
    grads = torch.ops.aten.convolution_backward(grad, x, w, bias_sizes, stride, padding, dilation, transposed,
                                                output_padding, groups, need)
    return [g.contiguous() if n else grad.new_empty(0) for g, n in zip(grads, need)]


@convolution_backward.register_fake
def _(grad, x, w, stride, padding, dilation, transposed, output_padding, groups, need):
    bias_shape = (w.shape[1] * groups if transposed else w.shape[0],)
    return [grad.new_empty(shape if n else (0,)) for shape, n in zip((x.shape, w.shape, bias_shape), need)]


def _setup_context(ctx, inputs, output):
    x, w, bias, stride, padding, dilation, transposed, output_padding, groups = inputs
    ctx.save_for_backward(x, w)
    ctx.args = (stride, padding, dilation, transposed, output_padding, groups)


def _backward(ctx, grad):
    x, w = ctx.saved_tensors
    need = list(ctx.needs_input_grad[:3])
    grads = convolution_backward(grad.contiguous(), x, w, *ctx.args, need)
    return tuple(g if n else None for g, n in zip(grads, need)) + (None,) * 6


convolution.register_autograd(_backward, setup_context=_setup_context)
