"""Label smoothing (rf's): label_smoothing of probabilities or labels, smooth_one_hot, and
label_smoothed_log_prob_gradient (log-probabilities unchanged, their gradient label-smoothed)."""
from __future__ import annotations

from typing import Optional, Sequence, Union

import torch

from .. import _C
from .._C import Dim, Tensor
from .._core.args import axis_of, check_tensor, dim_str, dims_str
from .._core.dtypes import is_integer
from ._support import names_errors
from .gradient_op import scaled_grad


def _aligned(value, dims: tuple, device) -> Union[float, torch.Tensor]:
    """A Python number as it is, a Tensor's raw aligned to `dims` on `device`."""
    if isinstance(value, Tensor):
        raw = value.raw_aligned(dims)
        return raw if raw.device == device else raw.to(device, non_blocking=True)
    return value


def _check_smoothing_dims(smoothing, x: Tensor, what: str, axis: Dim, caller: str) -> None:
    """A Tensor smoothing must be over non-label dims of x (named `what` in the error)."""
    if isinstance(smoothing, Tensor):
        for d in smoothing.dims:
            if d not in x.dims or d is axis:  # Dim equality is identity
                raise ValueError(f"{caller}: smoothing has dim {dim_str(d)}, which is not a non-label dim of {what} "
                                 f"(dims: {dims_str(x.dims)})")


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
    _check_smoothing_dims(smoothing, log_prob, "log_prob", axis, caller)
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
    out = scaled_grad(raw, factor, shift, a, None)  # grad * factor + shift * sum(|grad|) over the labels
    return Tensor(out, dims, sparse_dim=log_prob.sparse_dim, feature_dim=log_prob.feature_dim)


def _check_smoothing_value(value, what: str, caller: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, Tensor)):
        raise TypeError(f"{caller}: {what} must be a number or a Tensor, got {value!r}")


@names_errors("dimtorch.smooth_one_hot()")
def smooth_one_hot(source: Tensor, *, label_prob: Union[Tensor, float]) -> Tensor:
    """The smoothed one-hot of int labels `source` (rf.smooth_one_hot): label_prob at each label,
    (1 - label_prob) / (n - 1) at the other n - 1 entries of source's sparse_dim (static), float32 over
    source's dims then the sparse dim (its feature_dim). label_prob: a number, or a Tensor over dims of
    source (e.g. per sequence). A label outside [0, n) gets the other value everywhere."""
    caller = "dimtorch.smooth_one_hot()"
    check_tensor(source, caller, what="source")
    _check_smoothing_value(label_prob, "label_prob", caller)
    axis = source.sparse_dim
    if axis is None or not is_integer(source.raw.dtype):
        raise ValueError(f"{caller}: source must be int labels with a sparse_dim (dims: {dims_str(source.dims)})")
    if axis.size is None:
        raise ValueError(f"{caller}: the sparse_dim {dim_str(axis)} of source must be static")
    if axis.size < 2:
        raise ValueError(f"{caller}: the sparse_dim {dim_str(axis)} of source needs at least 2 entries")
    if isinstance(label_prob, Tensor):
        for d in label_prob.dims:
            if d not in source.dims:  # Dim equality is identity
                raise ValueError(f"{caller}: label_prob has dim {dim_str(d)}, which source lacks "
                                 f"(source dims: {dims_str(source.dims)})")
    n = axis.size
    other = (1.0 - label_prob) / (n - 1)
    raw = source.raw
    dims = tuple(source.dims) + (axis,)
    if not isinstance(label_prob, Tensor):
        # a fill and a write per label (an extra column takes labels out of range): no comparison per entry
        index = torch.where((raw >= 0) & (raw < n), raw, n).unsqueeze(-1)
        out = torch.full(raw.shape + (n + 1,), float(other), dtype=torch.float32, device=raw.device)
        return Tensor(out.scatter_(-1, index, float(label_prob))[..., :n], dims, feature_dim=axis)
    hit = raw.unsqueeze(-1) == torch.arange(n, dtype=raw.dtype, device=raw.device)
    on = _aligned(label_prob, dims, raw.device)
    off = _aligned(other, dims, raw.device)
    return Tensor(torch.where(hit, on, off), dims, feature_dim=axis)


@names_errors("dimtorch.label_smoothing()")
def label_smoothing(prob: Tensor, smoothing: Union[Tensor, float], *, axis: Optional[Dim] = None) -> Tensor:
    """Label smoothing (rf.label_smoothing), e.g. of cross-entropy targets: probabilities over `axis`
    (default prob's feature_dim, else its sparse_dim; static, n entries) become prob * (1 - n f) + f with
    f = smoothing / (n - 1), so that 1 becomes 1 - smoothing, 0 becomes f, and a distribution stays one.
    Int labels (a sparse_dim, which must be axis) become smooth_one_hot(prob, label_prob=1 - smoothing).
    smoothing: a number, or a Tensor over dims of prob (e.g. per sequence). Elementwise: padding gives
    garbage there, as every elementwise op."""
    caller = "dimtorch.label_smoothing()"
    check_tensor(prob, caller, what="prob")
    _check_smoothing_value(smoothing, "smoothing", caller)
    if axis is None:
        axis = prob.feature_dim if prob.feature_dim is not None else prob.sparse_dim
        if axis is None:
            raise ValueError(f"{caller}: prob has no feature_dim or sparse_dim; give axis "
                             f"(dims: {dims_str(prob.dims)})")
    elif not isinstance(axis, Dim):
        raise TypeError(f"{caller}: axis must be a Dim, got {type(axis).__name__}")
    if prob.sparse_dim is not None and is_integer(prob.raw.dtype):
        if prob.sparse_dim is not axis:
            raise ValueError(f"{caller}: axis {dim_str(axis)} is not the sparse_dim {dim_str(prob.sparse_dim)} of "
                             f"the labels prob")
        try:
            return smooth_one_hot(prob, label_prob=1.0 - smoothing)
        except (TypeError, ValueError) as e:
            raise type(e)(str(e).replace("dimtorch.smooth_one_hot()", caller)) from None
    axis_of(prob, axis, caller, what="axis", of="prob")
    if axis.size is None or axis.size < 2:
        raise ValueError(f"{caller}: axis {dim_str(axis)} must be static with at least 2 entries")
    if isinstance(smoothing, Tensor):
        _check_smoothing_dims(smoothing, prob, "prob", axis, caller)
        floor = smoothing / (axis.size - 1)
        return _C.combine(_C.combine(prob, 1.0 - floor * axis.size, "mul"), floor, "add")
    floor = smoothing / (axis.size - 1)
    factor = 1.0 - axis.size * floor
    # in place on the product (its backward needs neither): one allocation fewer than two ops
    return Tensor((prob.raw * factor).add_(floor), prob.dims, feature_dim=prob.feature_dim)
