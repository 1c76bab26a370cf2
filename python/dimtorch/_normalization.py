"""batch_norm composed in Python (masked statistics); dimtorch.moments is in the C++ core."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import _C
from ._C import Dim, Tensor

def _axes(x: Tensor, axis, caller: str) -> list:
    """Raw axes of x named by `axis` (a Dim or a sequence of Dims)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{caller}: x must be a dimtorch.Tensor, got {type(x).__name__}")
    dims = (axis,) if isinstance(axis, Dim) else tuple(axis)
    if not dims:
        raise ValueError(f"{caller}: axis must name at least one dim")
    axes = []
    x_dims = x.dims
    for d in dims:
        if not isinstance(d, Dim):
            raise TypeError(f"{caller}: axis must be a Dim or a sequence of Dims, got {type(d).__name__}")
        try:
            i = x_dims.index(d)  # Dim equality is identity
        except ValueError:
            raise ValueError(f"{caller}: dim {d!r} is not in x (dims: {_describe(x)})") from None
        if i in axes:
            raise ValueError(f"{caller}: dim {d!r} is given twice in axis")
        axes.append(i)
    return axes


def _describe(x: Tensor) -> str:
    return ", ".join(f"{d.name}:{n}" for d, n in zip(x.dims, x.shape))


def _param_raw(p, name: str, axis: Dim, ndim: int, ax: int, caller: str, for_fused: bool):
    """Raw of a per-feature Tensor over (axis,): as is for F.batch_norm, else viewed for broadcasting."""
    if p is None:
        return None
    if not isinstance(p, Tensor):
        raise TypeError(f"{caller}: {name} must be a dimtorch.Tensor over ({axis.name},), got {type(p).__name__}")
    if len(p.dims) != 1 or p.dims[0] is not axis:
        raise ValueError(f"{caller}: {name} must have dims ({axis!r},), got {p.dims}")
    if for_fused:
        return p.raw
    shape = [1] * ndim
    shape[ax] = p.shape[0]
    return p.raw.view(shape)


def batch_norm(x: Tensor, axis: Dim = None, running_mean: Tensor = None, running_var: Tensor = None,
               weight: Tensor = None, bias: Tensor = None, training: bool = True,
               momentum: float = 0.1, eps: float = 1e-5, use_mask: bool = True) -> Tensor:
    """Batch normalization over the feature dim `axis` (default: x.feature_dim).

    Statistics are over all other dims, counting valid frames only (the padding of dynamic dims is
    excluded). In training, running_mean/running_var (Tensors over (axis,), e.g. views of module
    buffers) are updated in place under no_grad as F.batch_norm does (unbiased variance); with
    training=False they are used instead of batch statistics. Without padding to mask (no dynamic
    dims, use_mask=False, or eval) this is one F.batch_norm call. No host-device sync.
    """
    caller = "dimtorch.batch_norm()"
    if not isinstance(x, Tensor):
        raise TypeError(f"{caller}: x must be a dimtorch.Tensor, got {type(x).__name__}")
    if axis is None:
        axis = x.feature_dim
        if axis is None:
            raise ValueError(f"{caller}: x has no feature_dim; pass axis= (dims: {_describe(x)})")
    if not isinstance(axis, Dim):
        raise TypeError(f"{caller}: axis must be one Dim (the feature dim), got {type(axis).__name__}")
    ax = _axes(x, axis, caller)[0]
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{caller}: give both running_mean and running_var, or neither")
    if not training and running_mean is None:
        raise ValueError(f"{caller}: training=False needs running_mean and running_var")
    if axis.is_dynamic():
        raise ValueError(f"{caller}: axis {axis!r} has lengths; batch norm needs a static feature dim")
    x_dims = x.dims
    # Every dim but the (static) axis is reduced, so padding needs masking iff any dim has lengths.
    masked = training and use_mask and any(d.dyn_size is not None for d in x_dims)
    ndim = len(x_dims)
    if not masked:
        # Fused path: F.batch_norm with the feature axis at position 1 (a view; no copy).
        raw = x.raw
        if ndim == 1:
            raw = raw.unsqueeze(0)
        elif ax != 1:
            raw = raw.movedim(ax, 1)
        args = [_param_raw(p, n, axis, ndim, ax, caller, True)
                for p, n in ((running_mean, "running_mean"), (running_var, "running_var"),
                             (weight, "weight"), (bias, "bias"))]
        out = F.batch_norm(raw, *args, training=training, momentum=momentum, eps=eps)
        if ndim == 1:
            out = out.squeeze(0)
        elif ax != 1:
            out = out.movedim(1, ax)
        return Tensor(out, x.dims, feature_dim=x.feature_dim)

    for p, n in ((running_mean, "running_mean"), (running_var, "running_var"), (weight, "weight"),
                 (bias, "bias")):
        _param_raw(p, n, axis, ndim, ax, caller, True)
    # Masked statistics from the C++ core: the count is a host number in the common case (all
    # batch and time frames reduced), so the running update below needs no device count.
    reduced_dims = x_dims[:ax] + x_dims[ax + 1:]
    mean, var, count, centered = _C._moments_with_count(x, reduced_dims)
    if running_mean is not None:
        with torch.no_grad():
            # F.batch_norm's update: the unbiased variance n/(n-1) * var, n the valid frames per
            # feature (n=1 counts as n/1, where torch would raise).
            if isinstance(count, float):
                unbiased = var.raw * (count / max(count - 1.0, 1.0))
            else:
                unbiased = var.raw * (count / (count - 1).clamp(min=1))
            # The statistics are over (axis,) alone, the running stats' layout.
            running_mean.raw.mul_(1 - momentum).add_(mean.raw, alpha=momentum)
            running_var.raw.mul_(1 - momentum).add_(unbiased, alpha=momentum)
    out = centered * _C.rsqrt(var + eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return Tensor(out.raw, x.dims, feature_dim=x.feature_dim)
