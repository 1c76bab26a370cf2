"""label_smoothed_log_prob_gradient: log-probabilities unchanged, their gradient label-smoothed (as rf)."""
from __future__ import annotations

from typing import Optional, Sequence, Union

import torch

from ._C import Dim, Tensor
from ._args import axis_of, check_tensor, dim_str, dims_str
from .ops._support import names_errors


class _SmoothedGradient(torch.autograd.Function):
    """Identity forward; backward grad * scale + shift * sum(|grad|) over the label axis."""

    @staticmethod
    def forward(ctx, x, scale, shift, axis):
        ctx.scale, ctx.shift, ctx.axis = scale, shift, axis
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        total = grad.abs().sum(dim=ctx.axis, keepdim=True)
        return grad * ctx.scale + ctx.shift * total, None, None, None


def _aligned(value, dims: tuple, device) -> Union[float, torch.Tensor]:
    """A Python number as it is, a Tensor's raw aligned to `dims` on `device`."""
    if isinstance(value, Tensor):
        raw = value.raw_aligned(dims)
        return raw if raw.device == device else raw.to(device, non_blocking=True)
    return value


@names_errors("dimtorch.label_smoothed_log_prob_gradient()")
def label_smoothed_log_prob_gradient(log_prob: Tensor, smoothing: Union[Tensor, float], *, axis: Optional[Dim] = None,
                                     exclude_labels: Optional[Sequence[int]] = None) -> Tensor:
    """log_prob as it is, whose gradient is label-smoothed (rf): for a loss whose negative gradient
    w.r.t. log_prob is a distribution over `axis` (cross entropy, CTC, RNN-T: the target posterior),
    the gradient becomes that of the smoothed distribution, (1 - smoothing) on what had all the
    mass and smoothing / (n - 1) spread over the other labels, scaled by the gradient's total over
    the axis (so frames without gradient, e.g. padding, stay 0). `axis`: the label dim (static;
    default log_prob's feature_dim). `exclude_labels` (e.g. blank) keep their gradient and get no
    share of the smoothing. `smoothing`: a number, or a Tensor over dims of log_prob (e.g. per
    sequence); 0 returns log_prob itself."""
    caller = "dimtorch.label_smoothed_log_prob_gradient()"
    check_tensor(log_prob, caller, what="log_prob")
    if isinstance(smoothing, bool) or not isinstance(smoothing, (int, float, Tensor)):
        raise TypeError(f"{caller}: smoothing must be a number or a Tensor, got {smoothing!r}")
    if not isinstance(smoothing, Tensor) and smoothing == 0:
        return log_prob
    if axis is None:
        axis = log_prob.feature_dim
        if axis is None:
            raise ValueError(f"{caller}: log_prob has no feature_dim; give axis (dims: {dims_str(log_prob.dims)})")
    a = axis_of(log_prob, axis, caller, what="axis", of="log_prob")
    if axis.size is None:
        raise ValueError(f"{caller}: axis {dim_str(axis)} must be static (a label dim)")
    if isinstance(smoothing, Tensor):
        for d in smoothing.dims:
            if d not in log_prob.dims or d is axis:  # Dim equality is identity
                raise ValueError(f"{caller}: smoothing has dim {dim_str(d)}, which is not a non-label dim of log_prob "
                                 f"(dims: {dims_str(log_prob.dims)})")
    labels = list(dict.fromkeys(exclude_labels or ()))
    for label in labels:
        if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < axis.size:
            raise ValueError(f"{caller}: exclude_labels must be ints in [0, {axis.size}), got {label!r}")
    n = axis.size - len(labels)
    if n < 2:
        raise ValueError(f"{caller}: axis {dim_str(axis)} has {n} labels to smooth over; it needs at least 2")
    raw = log_prob.raw
    dims = log_prob.dims
    floor = _aligned(smoothing / (n - 1), dims, raw.device)
    factor = 1.0 - n * floor
    if labels:
        shape = [1] * raw.dim()
        shape[a] = axis.size
        # Made on the device from Python ints: no host-to-device copy.
        positions = torch.arange(axis.size, device=raw.device).view(shape)
        smoothed = positions != labels[0]
        for label in labels[1:]:
            smoothed = smoothed & (positions != label)
        factor = torch.where(smoothed, factor, 1.0)
        floor = torch.where(smoothed, floor, 0.0)
    shift = -floor
    if isinstance(factor, torch.Tensor):  # the gradient keeps log_prob's dtype
        factor = factor.to(raw.dtype)
    if isinstance(shift, torch.Tensor):
        shift = shift.to(raw.dtype)
    out = _SmoothedGradient.apply(raw, factor, shift, a)
    return Tensor(out, dims, sparse_dim=log_prob.sparse_dim, feature_dim=log_prob.feature_dim)
