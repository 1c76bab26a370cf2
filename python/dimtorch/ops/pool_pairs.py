"""The max over pairs, for pool's fast path (src/ops/pool.cpp) when windows of 2 lie side by side along the
input's last axis (RETURNN's Conformer frontend pools (1, 2) over (time, feature)): the axis split into
(windows, 2) and the max of each pair.

torch's max over a last axis of 2 runs a scalar loop per window, and its backward a scatter (8x32x8x80:
~0.75 ms forward, ~0.3 ms backward). Here the values are one elementwise maximum (~0.08 ms), and the
gradient goes where torch's max pool puts it (the first maximum; a NaN wins, the later of two) exactly, by
bit operations (branch-free where a `where` over the chosen element would stall on each mispredicted
branch, and a broadcast into the pairs' axis of 2 runs a scalar loop): each gradient's bits, zero-extended
to an integer of twice their width, shifted into the high half where the pair's second element took it,
are the pair (first, second) as a little-endian machine lays it out (~0.06 ms where bit-ands into the
interleaved halves took ~0.12 ms, and three times that within a training step)."""
from __future__ import annotations

import sys

import torch

from .conv import runs_channels_last

# floating dtypes and the integer dtype of their width, whose view carries their bits
_BITS = {torch.float32: torch.int32, torch.float64: torch.int64, torch.float16: torch.int16,
         torch.bfloat16: torch.int16}
# floating dtypes -> (unsigned integer of their width, signed integer of twice it, their width in bits):
# a pair of them is one of the wide integers (float64 has no 128-bit integer: it takes the bit-ands)
_PAIRS = {torch.float32: (torch.uint32, torch.int64, 32), torch.float16: (torch.uint16, torch.int32, 16),
          torch.bfloat16: (torch.uint16, torch.int32, 16)} if sys.byteorder == "little" else {}


def pair_max(windows: torch.Tensor) -> torch.Tensor:
    """The max over windows' last axis (of size 2), with torch's max pool's values (NaN if either is) and
    gradient (to the first maximum; a NaN wins, the later of two NaN)."""
    if windows.dtype not in _BITS:
        return windows.max(-1)[0]
    if not (windows.requires_grad and torch.is_grad_enabled()):
        return _maximum(windows[..., 0], windows[..., 1])
    return _PairMax.apply(windows)


def _maximum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.maximum(a, b); a 2-D pool's (N, C, H, W) on the CPU in float32 channels-last, the layout the
    convolutions there take (ops/conv.py _conv2d_channels_last): a conv after the pool (RETURNN's Conformer
    frontend: conv, pool, conv) then reorders nothing, the max writes the reordered values itself, and the
    gradient is reordered by the backward's widening copy (the separate reorder copy goes; with the bit-shift
    backward the demo's step ~0.6% faster in a paired A/B of 1000 steps)."""
    if a.dim() == 4 and a.shape[1] > 1 and runs_channels_last(a):
        return torch.maximum(a, b, out=torch.empty(a.shape, dtype=a.dtype, device=a.device,
                                                    memory_format=torch.channels_last))
    return torch.maximum(a, b)


class _PairMax(torch.autograd.Function):

    @staticmethod
    def forward(ctx, windows):
        a, b = windows[..., 0], windows[..., 1]
        take_b = b.gt(a).logical_or_(b.isnan())  # as torch's max pool: the later only if greater or NaN
        ctx.save_for_backward(take_b)
        return _maximum(a, b)

    @staticmethod
    def backward(ctx, grad):
        (take_b,) = ctx.saved_tensors
        if torch.is_grad_enabled():  # a double backward: differentiable ops (the gradient's own graph)
            zero = grad.new_zeros(())
            return torch.stack((torch.where(take_b, zero, grad), torch.where(take_b, grad, zero)), -1)
        pair = _PAIRS.get(grad.dtype)
        if pair is not None:
            unsigned, wide, width = pair
            # zero-extended (unsigned source), contiguous (the float view of the pairs needs a unit stride)
            out = grad.view(unsigned).to(wide, memory_format=torch.contiguous_format)
            out.bitwise_left_shift_(take_b.view(torch.uint8) * width)  # into the high half where b took it
            return out.view(grad.dtype).view(take_b.shape + (2,))
        bits_dtype = _BITS[grad.dtype]
        bits = grad.view(bits_dtype)  # (same width: any strides; a channels-last grad is not copied first)
        keep = take_b.to(bits_dtype).neg_()  # all bits set where the gradient goes to b
        out = grad.new_empty(take_b.shape + (2,)).view(bits_dtype)
        torch.bitwise_and(bits, keep, out=out[..., 1])
        torch.bitwise_xor(bits, out[..., 1], out=out[..., 0])  # the bits b did not take, a takes
        return out.view(grad.dtype)
