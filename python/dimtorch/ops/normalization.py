"""Definitions of layer_norm, rms_norm (src/ops_nn.cpp) and batch_norm with masked statistics (src/ops_batch_norm.cpp)."""
from __future__ import annotations

import operator

import torch
import torch.nn.functional as F

from .._C import Dim, Tensor
from .._core.args import dim_str
from ._support import axes_arg, describe_dims, flag, has_lengths, index_of, names_errors, need_tensor, tp_name
from .reduce import moments_raw


def _norm_like(rms: bool, x, axis, weight, bias, eps, caller: str) -> Tensor:
    """F.layer_norm / F.rms_norm over the dims `axis`, viewed last (the result keeps that order)."""
    need_tensor(x, caller, "x")
    if weight is not None:
        need_tensor(weight, caller, "weight")
    if bias is not None:
        need_tensor(bias, caller, "bias")
    axes = axes_arg(x, axis, caller)
    for i in axes:
        if has_lengths(x.dims[i]):
            raise ValueError(f"{caller}: normalizing over dim {dim_str(x.dims[i])}, which has padding, would mix "
                             f"padding into the statistics; use dimtorch.moments (masked) for that")
    order = [i for i in range(len(x.dims)) if i not in axes] + axes
    shape = [x.raw.shape[i] for i in axes]
    affine = []
    for what, p in (("weight", weight), ("bias", bias)):
        if p is None:
            affine.append(None)
            continue
        p_order = [index_of(p.dims, x.dims[i]) for i in axes]
        if len(p.dims) != len(axes) or any(
                j < 0 or p.raw.shape[j] != x.raw.shape[i] for i, j in zip(axes, p_order)):
            raise ValueError(f"{caller}: {what} must have exactly the normalized dims, got "
                             f"({describe_dims(p.dims, p.raw.shape)})")
        affine.append(p.raw.permute(p_order))
    xr = x.raw.permute(order)
    if rms:
        out = F.rms_norm(xr, shape, affine[0], 1e-6 if eps is None else eps)
    else:
        out = F.layer_norm(xr, shape, affine[0], affine[1], 1e-5 if eps is None else eps)
    return Tensor(out, tuple(x.dims[i] for i in order), feature_dim=x.feature_dim)


@names_errors("dimtorch.layer_norm()")
def layer_norm(x, axis, *, weight=None, bias=None, eps=None) -> Tensor:
    """F.layer_norm over the dim(s) `axis` (static dims; eps default 1e-5); weight and bias over
    exactly those dims. The result has x's other dims, then `axis` in its order."""
    return _norm_like(False, x, axis, weight, bias, eps, "dimtorch.layer_norm()")


@names_errors("dimtorch.rms_norm()")
def rms_norm(x, axis, *, weight=None, eps=None) -> Tensor:
    """F.rms_norm over the dim(s) `axis` (eps default 1e-6), as layer_norm."""
    return _norm_like(True, x, axis, weight, None, eps, "dimtorch.rms_norm()")


_CALLER = "dimtorch.batch_norm()"


def _check_param(p, name: str, axis: Dim) -> None:
    if p is None:
        return
    if not isinstance(p, Tensor):
        raise TypeError(f"{_CALLER}: {name} must be a dimtorch.Tensor over ({dim_str(axis)},), got {tp_name(p)}")
    if len(p.dims) != 1 or p.dims[0] is not axis:
        raise ValueError(f"{_CALLER}: {name} must have dims ({dim_str(axis)},), got ({describe_dims(p.dims, p.raw.shape)})")


def _raw(p):
    return None if p is None else p.raw


def _fused(x: Tensor, ax: int, params: list, training: bool, momentum: float, eps) -> Tensor:
    """F.batch_norm on x with the feature axis moved to position 1 (views, no copy)."""
    nd = len(x.dims)
    args = [_raw(p) for p in params] + [training, momentum, eps]
    if nd == 1:
        out = F.batch_norm(x.raw.unsqueeze(0), *args).squeeze(0)
    else:
        rest = [i for i in range(nd) if i != ax]
        order = rest[:1] + [ax] + rest[1:]
        out = F.batch_norm(x.raw.permute(order), *args)
        out = out.permute([order.index(i) for i in range(nd)])
    return Tensor(out, x.dims, feature_dim=x.feature_dim)


def _feature_view(raw: torch.Tensor, ax: int, nd: int) -> torch.Tensor:
    """raw (F,) viewed to broadcast against a tensor whose feature axis is `ax` of `nd`."""
    return raw if ax == nd - 1 else raw.reshape([raw.shape[0]] + [1] * (nd - 1 - ax))


def _masked(x: Tensor, ax: int, params: list, momentum: float, eps) -> Tensor:
    """Training statistics over the valid frames of every dim but `ax` (moments), the running-stat
    update, and the affine output: centered * (rsqrt(var + eps) * weight) + bias."""
    running_mean, running_var, weight, bias = params
    m = moments_raw(x, tuple(d for i, d in enumerate(x.dims) if i != ax), True, _CALLER)
    if running_mean is not None:
        # The running variance is unbiased: var * n / (n - 1), n the valid frames per feature (n = 1
        # counts as n / 1, where torch would raise). The buffers never join the autograd graph.
        n = m.count
        unbiased = m.var.detach() * (n / torch.clamp_min(n - 1, 1))
        running_mean.raw.lerp_(m.mean.detach(), momentum)
        running_var.raw.lerp_(unbiased.detach(), momentum)
    scale = torch.rsqrt(m.var + eps)
    if weight is not None:
        scale = scale * weight.raw
    nd = len(x.dims)
    scale = _feature_view(scale, ax, nd)
    if bias is not None:
        out = torch.addcmul(_feature_view(bias.raw, ax, nd), m.centered, scale)
    else:
        out = m.centered * scale
    return Tensor(out, x.dims, feature_dim=x.feature_dim)


def _as_float(v) -> float:
    """v as a float, as PyFloat_AsDouble takes it (__float__ or __index__, no str parsing)."""
    t = type(v)
    if hasattr(t, "__float__"):
        return float(v)
    if hasattr(t, "__index__"):
        return float(operator.index(v))
    raise TypeError(f"{_CALLER}: momentum must be a float, got {tp_name(v)}")


@names_errors("dimtorch.batch_norm()")
def batch_norm(x, axis=None, running_mean=None, running_var=None, weight=None, bias=None, training=True,
               momentum=0.1, eps=1e-5, use_mask=True) -> Tensor:
    """Batch normalization over the static feature dim `axis` (default: x.feature_dim). Statistics
    are over all other dims, counting valid frames only (the padding of dynamic dims is excluded).
    In training, running_mean/running_var (Tensors over (axis,), e.g. views of module buffers) are
    updated in place as F.batch_norm does (unbiased variance); with training=False they are used
    instead of batch statistics. Without padding to mask (no dynamic dims, use_mask=False, or eval)
    this is one F.batch_norm call."""
    need_tensor(x, _CALLER, "x")
    if axis is None:
        axis = x.feature_dim
        if axis is None:
            raise ValueError(f"{_CALLER}: x has no feature_dim; pass axis= (dims: {describe_dims(x.dims, x.raw.shape)})")
    if not isinstance(axis, Dim):
        raise TypeError(f"{_CALLER}: axis must be one Dim (the feature dim), got {tp_name(axis)}")
    (ax,) = axes_arg(x, axis, _CALLER)
    params = [running_mean, running_var, weight, bias]
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{_CALLER}: give both running_mean and running_var, or neither")
    training = flag(training, _CALLER, "training")
    use_mask = flag(use_mask, _CALLER, "use_mask")
    if not training and running_mean is None:
        raise ValueError(f"{_CALLER}: training=False needs running_mean and running_var")
    if has_lengths(axis):
        raise ValueError(f"{_CALLER}: axis {dim_str(axis)} has lengths; batch norm needs a static feature dim")
    for p, name in zip(params, ("running_mean", "running_var", "weight", "bias")):
        _check_param(p, name, axis)
    momentum = _as_float(momentum)
    # Every dim but the (static) axis is reduced, so padding needs masking iff any dim has lengths.
    if training and use_mask and any(has_lengths(d) for d in x.dims):
        return _masked(x, ax, params, momentum, eps)
    return _fused(x, ax, params, training, momentum, eps)
