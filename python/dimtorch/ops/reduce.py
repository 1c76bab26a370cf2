"""Definitions of the reductions over named dims (src/ops/reduce.cpp) and of softmax/log_softmax (src/ops_nn.cpp), padding masked."""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch

from .. import _C
from .._C import Dim, Tensor
from .._core.dtypes import dtype_name, is_floating
from .._core.args import dim_str
from .._core.tracing import lengths_raw, tracing
from ._support import (
    axes_arg, describe_dims, flag, index_of, masked_by_reduction, masked_raw, names_errors, need_tensor, product,
    tp_name, valid_mask,
)

_INT_LIMITS = {
    torch.int8: (-128, 127), torch.int16: (-32768, 32767), torch.int32: (-2**31, 2**31 - 1),
    torch.int64: (-2**63, 2**63 - 1), torch.uint8: (0, 255), torch.bool: (False, True),
}


def neutral_fill(dtype: torch.dtype, low: bool, caller: str):
    """The neutral element of max (low: -inf or the dtype's lowest value) or of min (high), so that
    torch.where keeps the dtype."""
    if is_floating(dtype):
        return -math.inf if low else math.inf
    if dtype in _INT_LIMITS:
        return _INT_LIMITS[dtype][0 if low else 1]
    raise TypeError(f"{caller}: no neutral element for dtype {dtype_name(dtype)}")


class Reduction(NamedTuple):
    """What a reduction over named dims needs from its (x, axis, use_mask) arguments."""
    x: Tensor
    axes: list           # x's reduced axes, in the order of `axis`
    reduced: tuple       # the same axes, ascending
    mask_axes: list      # x's axes whose padding the reduction masks
    out_dims: tuple      # x's dims without the reduced ones
    dim: object          # torch's dim argument: an int, or a tuple of ints
    feature: Optional[Dim]  # x's feature dim where the output keeps it


def prepare(x, axis, use_mask, caller: str) -> Reduction:
    need_tensor(x, caller)
    use_mask = flag(use_mask, caller, "use_mask")
    axes = axes_arg(x, axis, caller)
    reduced = tuple(sorted(axes))
    mask_axes = [i for i in range(len(x.dims)) if masked_by_reduction(x, i, reduced)] if use_mask else []
    out_dims = tuple(d for i, d in enumerate(x.dims) if i not in reduced)
    feature = x.feature_dim if x.feature_dim is not None and index_of(out_dims, x.feature_dim) >= 0 else None
    return Reduction(x, axes, reduced, mask_axes, out_dims, axes[0] if len(axes) == 1 else tuple(axes), feature)



def mean_count(r: Reduction, mask: torch.Tensor) -> torch.Tensor:
    """The divisor of a masked mean, laid out for the output: the number of valid frames each
    output element is over, at least 1 (an empty sequence gives 0 / 1). Built in the graph from
    the lengths; where one dim is masked, from its lengths directly (as the C++ core does)."""
    x, reduced, shape = r.x, r.reduced, r.x.raw.shape
    device = x.raw.device
    if len(r.mask_axes) == 1 and r.mask_axes[0] in reduced:
        m = r.mask_axes[0]
        d = x.dims[m]
        ldims = d.lengths.dims
        if all(index_of(x.dims, b) in reduced for b in ldims):
            # The dim and all its lengths' dims are reduced: the total of the lengths.
            others = [shape[i] for i in reduced if i != m and index_of(ldims, x.dims[i]) < 0]
            total = lengths_raw(d, ldims, device).sum()
            if others:
                total = total * product(others)
            return total.clamp_min(1).to(torch.float32)
        if all(index_of(r.out_dims, b) >= 0 for b in ldims):
            # Its lengths stay in the output: they are the count (times the other reduced sizes).
            count = lengths_raw(d, r.out_dims, device).clamp_min(1).to(torch.float32)
            others = [shape[i] for i in reduced if i != m]
            return count * product(others) if others else count
    # General case: valid frames of the reduced axes that the mask covers, times the sizes of the others.
    covered = list(r.mask_axes)
    for i in r.mask_axes:
        covered += [index_of(x.dims, b) for b in x.dims[i].lengths.dims]
    count = torch.sum(mask, r.dim)
    others = [shape[i] for i in reduced if i not in covered]
    if others:
        count = count * product(others)
    return torch.clamp_min(count, 1)


def divide_by_count(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """total / count in total's dtype (a float count is float32: other float dtypes convert it)."""
    if is_floating(total.dtype) and total.dtype != torch.float32:
        count = count.to(total.dtype)
    return total / count


def _empty_extreme(raw: torch.Tensor, dim, for_max: bool, is_arg: bool, caller: str) -> torch.Tensor:
    """Max/min (or arg index 0) over axes of which one is empty, where torch refuses: the neutral
    value, still connected to x for autograd (an index has no gradient: a detached sum)."""
    if is_arg:
        return torch.sum(raw.detach(), dim, dtype=torch.int64)
    return torch.sum(raw, dim, dtype=raw.dtype) + neutral_fill(raw.dtype, for_max, caller)


def _reduce(mode: str, x, axis, use_mask, caller: str) -> Tensor:
    r = prepare(x, axis, use_mask, caller)
    x = r.x
    is_arg = mode in ("argmax", "argmin")
    if is_arg and len(r.axes) != 1:
        raise ValueError(f"{caller}: axis must be a single dim")
    if mode in ("sum", "mean"):
        fill = 0
    elif mode in ("any", "all"):
        fill = mode == "all"
    else:
        low = mode in ("max", "argmax", "logsumexp")
        fill = neutral_fill(x.raw.dtype, low, caller) if r.mask_axes else None
    raw, mask = masked_raw(x, r.mask_axes, fill, caller)
    dim = r.dim
    if mode in ("max", "min", "argmax", "argmin") and any(raw.shape[i] == 0 for i in r.axes):
        # torch's amax/argmax refuse an empty axis (e.g. a batch of length-0 sequences only): what
        # a length-0 sequence gives inside a batch.
        out = _empty_extreme(raw, dim, mode == "max", is_arg, caller)
    elif mode == "sum":
        out = torch.sum(raw, dim)
    elif mode == "mean":
        out = torch.mean(raw, dim) if mask is None else divide_by_count(torch.sum(raw, dim), mean_count(r, mask))
    elif mode == "max":
        out = torch.amax(raw, dim)
    elif mode == "min":
        out = torch.amin(raw, dim)
    elif mode == "logsumexp":
        out = torch.logsumexp(raw, dim)
    elif mode == "any":
        out = torch.any(raw, dim)
    elif mode == "all":
        out = torch.all(raw, dim)
    elif mode == "argmax":
        out = torch.argmax(raw, dim)
    else:
        out = torch.argmin(raw, dim)
    sparse = x.dims[r.axes[0]] if is_arg else x.sparse_dim if mode in ("max", "min") else None
    return Tensor(out, r.out_dims, sparse_dim=sparse, feature_dim=r.feature)


@names_errors("dimtorch.reduce_sum()")
def reduce_sum(x, /, axis, use_mask=True) -> Tensor:
    """Sum over the dim(s) `axis`; padding counts as 0."""
    return _reduce("sum", x, axis, use_mask, "dimtorch.reduce_sum()")


@names_errors("dimtorch.reduce_mean()")
def reduce_mean(x, /, axis, use_mask=True) -> Tensor:
    """Mean over `axis`, dividing by the lengths of dynamic dims (an empty sequence gives 0)."""
    return _reduce("mean", x, axis, use_mask, "dimtorch.reduce_mean()")


@names_errors("dimtorch.reduce_max()")
def reduce_max(x, /, axis, use_mask=True) -> Tensor:
    """Max over `axis`; padding never wins (an empty sequence gives the dtype's lowest value)."""
    return _reduce("max", x, axis, use_mask, "dimtorch.reduce_max()")


@names_errors("dimtorch.reduce_min()")
def reduce_min(x, /, axis, use_mask=True) -> Tensor:
    """Min over `axis`; padding never wins (an empty sequence gives the dtype's highest value)."""
    return _reduce("min", x, axis, use_mask, "dimtorch.reduce_min()")


@names_errors("dimtorch.reduce_logsumexp()")
def reduce_logsumexp(x, /, axis, use_mask=True) -> Tensor:
    """Log-sum-exp over `axis`; padding ignored (an empty sequence gives -inf)."""
    return _reduce("logsumexp", x, axis, use_mask, "dimtorch.reduce_logsumexp()")


@names_errors("dimtorch.reduce_any()")
def reduce_any(x, /, axis, use_mask=True) -> Tensor:
    """Bool any over `axis`; padding counts as False."""
    return _reduce("any", x, axis, use_mask, "dimtorch.reduce_any()")


@names_errors("dimtorch.reduce_all()")
def reduce_all(x, /, axis, use_mask=True) -> Tensor:
    """Bool all over `axis`; padding counts as True."""
    return _reduce("all", x, axis, use_mask, "dimtorch.reduce_all()")


@names_errors("dimtorch.reduce_argmax()")
def reduce_argmax(x, /, axis, use_mask=True) -> Tensor:
    """int64 index of the max along the one dim `axis` (its sparse_dim); never padding."""
    return _reduce("argmax", x, axis, use_mask, "dimtorch.reduce_argmax()")


@names_errors("dimtorch.reduce_argmin()")
def reduce_argmin(x, /, axis, use_mask=True) -> Tensor:
    """int64 index of the min along the one dim `axis`; never padding."""
    return _reduce("argmin", x, axis, use_mask, "dimtorch.reduce_argmin()")


_LENGTHS = 2  # kind of dimtorch._C._dim_cached_raw (src/core/mask.h)


def _log_count(r: Reduction, caller: str):
    """The log of the number of frames each output element of the reduction is over (at least 1): a Python
    float without masking, else a raw over the out dims (from the lengths, cached on the dim, where one
    reduced dim is masked and its lengths stay in the output; else the mask's count)."""
    x, shape = r.x, r.x.raw.shape
    if not r.mask_axes:
        return math.log(max(product(shape[i] for i in r.reduced), 1))
    if len(r.mask_axes) == 1 and r.mask_axes[0] in r.reduced:
        m = r.mask_axes[0]
        d = x.dims[m]
        pos = tuple(index_of(r.out_dims, b) for b in d.lengths.dims)
        if all(p >= 0 for p in pos):
            if tracing():
                lengths = lengths_raw(d, r.out_dims, x.raw.device)
            else:
                lengths = _C._dim_cached_raw(_LENGTHS, d, pos, len(r.out_dims), 0, x.raw.device)
            others = product(shape[i] for i in r.reduced if i != m)
            count = lengths.clamp_min(1) if others == 1 else (lengths * others).clamp_min(1)
            return torch.log(count)
    return torch.log(mean_count(r, valid_mask(r.x, r.mask_axes, caller)))


def _logmeanexp_over_one_dim(x: Tensor, axis: Dim) -> Optional[Tensor]:
    """The common call in few steps, or None: one dim of x, either static or with lengths over dims that
    stay in the output, and no other dim of x whose lengths vary along it."""
    for d in x.dims:
        if d is not axis and d.lengths is not None and index_of(d.lengths.dims, axis) >= 0:
            return None
    lengths = axis.lengths
    if lengths is None:
        i = index_of(x.dims, axis)
        if i < 0:
            return None
        total = _C.reduce_logsumexp(x, axis)
        return Tensor(total.raw - math.log(max(x.raw.shape[i], 1)), total.dims, feature_dim=total.feature_dim)
    total = _C.reduce_logsumexp(x, axis)
    pos = tuple(index_of(total.dims, b) for b in lengths.dims)
    if any(p < 0 for p in pos):
        return None
    n = _C._dim_cached_raw(_LENGTHS, axis, pos, len(total.dims), 0, x.raw.device)
    log_n = torch.log(n.clamp_min(1))
    if log_n.dtype != total.raw.dtype:
        log_n = log_n.to(total.raw.dtype)
    return Tensor(total.raw - log_n, total.dims, feature_dim=total.feature_dim)


@names_errors("dimtorch.reduce_logmeanexp()")
def reduce_logmeanexp(x, /, axis, use_mask=True) -> Tensor:
    """log(mean(exp(x))) over `axis` (rf.reduce_logmeanexp): reduce_logsumexp minus the log of the number
    of frames, each sequence's own (its lengths) for dynamic dims; padding ignored (an empty sequence gives
    -inf)."""
    caller = "dimtorch.reduce_logmeanexp()"
    if type(x) is Tensor and type(axis) is Dim and use_mask is True and not tracing():
        out = _logmeanexp_over_one_dim(x, axis)
        if out is not None:
            return out
    r = prepare(x, axis, use_mask, caller)
    total = _C.reduce_logsumexp(x, axis, use_mask)
    log_count = _log_count(r, caller)
    if isinstance(log_count, torch.Tensor) and log_count.dtype != total.raw.dtype:
        log_count = log_count.to(total.raw.dtype)
    return Tensor(total.raw - log_count, total.dims, feature_dim=total.feature_dim)


class Moments(NamedTuple):
    mean: torch.Tensor
    var: torch.Tensor
    reduction: Reduction
    count: Optional[torch.Tensor]     # valid frames per statistic, when something was masked
    centered: Optional[torch.Tensor]  # x's raw with zeroed padding minus the mean, when masked


def moments_raw(x, axis, use_mask, caller: str) -> Moments:
    """Mean and biased variance over `axis` as raws over the reduction's out dims. Padding is zeroed
    before the mean, so that its deviation is finite and no NaN reaches the gradients; the squared
    deviations are masked again for the variance."""
    r = prepare(x, axis, use_mask, caller)
    if not r.mask_axes:
        var, mean = torch.var_mean(r.x.raw, r.dim, correction=0)
        return Moments(mean, var, r, None, None)
    xz, mask = masked_raw(r.x, r.mask_axes, 0, caller)
    count = mean_count(r, mask)
    mean = divide_by_count(torch.sum(xz, r.dim), count)
    mean_x = mean  # aligned to x: size 1 at the reduced axes (a 0-dim mean broadcasts as it is)
    if r.out_dims:
        for i in r.reduced:
            mean_x = mean_x.unsqueeze(i)
    centered = xz - mean_x
    var = divide_by_count(torch.sum(torch.where(mask, torch.square(centered), 0), r.dim), count)
    return Moments(mean, var, r, count, centered)


@names_errors("dimtorch.moments()")
def moments(x, /, axis, use_mask=True):
    """(mean, variance) over the dim(s) `axis`; the variance is biased (as in layer and batch norm);
    padding of dynamic dims is excluded and gets no gradient; an empty sequence gives 0 and 0."""
    m = moments_raw(x, axis, use_mask, "dimtorch.moments()")
    r = m.reduction
    return Tensor(m.mean, r.out_dims, feature_dim=r.feature), Tensor(m.var, r.out_dims, feature_dim=r.feature)


def _softmax_like(log: bool, x, axis, use_mask, caller: str) -> Tensor:
    need_tensor(x, caller)
    if not isinstance(axis, Dim):
        raise TypeError(f"{caller}: axis must be a Dim, got {tp_name(axis)}")
    (k,) = axes_arg(x, axis, caller)
    if x.raw.shape[k] == 0:
        raise ValueError(f"{caller}: dim {dim_str(axis)} has size 0 in x (dims: {describe_dims(x.dims, x.raw.shape)}); "
                         f"softmax over nothing is undefined")
    use_mask = flag(use_mask, caller, "use_mask")
    reduced = (k,)
    mask_axes = [i for i in range(len(x.dims)) if masked_by_reduction(x, i, reduced)] if use_mask else []
    raw, mask = masked_raw(x, mask_axes, -math.inf, caller)
    out = torch.log_softmax(raw, k) if log else torch.softmax(raw, k)
    if mask is not None:
        # A row without valid frames (a sequence of length 0, or frames beyond the longest sequence
        # in a softmax over batch) has softmax NaN: all padding, which gets probability 0 (log:
        # -inf); the where also stops the NaN in the backward pass. Other rows pass as they are
        # (their padding is 0, or -inf, already).
        out = torch.where(mask.any(k, keepdim=True), out, -math.inf if log else 0)
    return Tensor(out, x.dims, feature_dim=x.feature_dim)


@names_errors("dimtorch.softmax()")
def softmax(x, /, axis, use_mask=True) -> Tensor:
    """Softmax over the dim `axis`; padding gets probability 0."""
    return _softmax_like(False, x, axis, use_mask, "dimtorch.softmax()")


@names_errors("dimtorch.log_softmax()")
def log_softmax(x, /, axis, use_mask=True) -> Tensor:
    """Log-softmax over `axis`; padding gets -inf."""
    return _softmax_like(True, x, axis, use_mask, "dimtorch.log_softmax()")
