"""The max over pairs, for pool's fast path (src/ops/pool.cpp) when windows of 2 lie side by side along the
input's last axis (RETURNN's Conformer frontend pools (1, 2) over (time, feature)): the axis split into
(windows, 2) and the max of each pair.

torch's max over a last axis of 2 runs a scalar loop per window, and its backward a scatter (8x32x8x80:
~0.75 ms forward, ~0.3 ms backward). Here the values are one elementwise maximum (~0.08 ms), and the
gradient goes where torch's max pool puts it (the first maximum; a NaN wins, the later of two) by a bitwise and of its bits
with a mask of the chosen element (exact, and branch-free where a `where` over such a mask would stall on
each mispredicted branch)."""
from __future__ import annotations

import torch

# floating dtypes and the integer dtype of their width, whose view carries their bits
_BITS = {torch.float32: torch.int32, torch.float64: torch.int64, torch.float16: torch.int16,
         torch.bfloat16: torch.int16}


def pair_max(windows: torch.Tensor) -> torch.Tensor:
    """The max over windows' last axis (of size 2), with torch's max pool's values (NaN if either is) and
    gradient (to the first maximum; a NaN wins, the later of two NaN)."""
    if windows.dtype not in _BITS:
        return windows.max(-1)[0]
    if not (windows.requires_grad and torch.is_grad_enabled()):
        return torch.maximum(windows[..., 0], windows[..., 1])
    return _PairMax.apply(windows)


class _PairMax(torch.autograd.Function):

    @staticmethod
    def forward(ctx, windows):
        a, b = windows[..., 0], windows[..., 1]
        take_b = b.gt(a).logical_or_(b.isnan())  # as torch's max pool: the later only if greater or NaN
        ctx.save_for_backward(take_b)
        return torch.maximum(a, b)

    @staticmethod
    def backward(ctx, grad):
        (take_b,) = ctx.saved_tensors
        if torch.is_grad_enabled():  # a double backward: differentiable ops (the gradient's own graph)
            zero = grad.new_zeros(())
            return torch.stack((torch.where(take_b, zero, grad), torch.where(take_b, grad, zero)), -1)
        bits_dtype = _BITS[grad.dtype]
        bits = grad.view(bits_dtype)  # (same width: any strides; a channels-last grad is not copied first)
        keep = take_b.to(bits_dtype).neg_()  # all bits set where the gradient goes to b
        out = grad.new_empty(take_b.shape + (2,)).view(bits_dtype)
        torch.bitwise_and(bits, keep, out=out[..., 1])
        torch.bitwise_xor(bits, out[..., 1], out=out[..., 0])  # the bits b did not take, a takes
        return out.view(grad.dtype)
