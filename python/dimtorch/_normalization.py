"""batch_norm composed in Python (masked statistics); dimtorch.moments is in the C++ core."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import _C
from ._C import Dim, Tensor

_MASK, _COUNT = 0, 1  # kinds of dimtorch._C._dim_cached_raw (see src/mask.h)


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


def _lengths_positions(x: Tensor, d: Dim, caller: str) -> tuple:
    """Axes of x holding the lengths' dims of `d`, in the lengths' order."""
    pos = []
    for bd in d.dyn_size.dims:
        i = next((i for i, e in enumerate(x.dims) if e is bd), None)
        if i is None:
            raise ValueError(f"{caller}: the lengths of dim {d!r} are over {bd!r}, which x lacks "
                             f"(dims: {_describe(x)}); add that dim (e.g. by broadcasting) first")
        pos.append(i)
    return tuple(pos)


def _masked_axes(x: Tensor, reduced: list) -> list:
    """Axes of x whose padding a reduction over `reduced` must mask: dims with lengths that are
    reduced themselves or whose lengths vary along a reduced dim (the rule of src/ops_reduce.cpp)."""
    out = []
    for i, d in enumerate(x.dims):
        if not d.is_dynamic():
            continue
        if i in reduced or any(any(bd is x.dims[j] for j in reduced) for bd in d.dyn_size.dims):
            out.append(i)
    return out


def _masked_statistics(x: Tensor, reduced: list, masked: list, caller: str):
    """(x's raw minus the mean with masked padding at -mean (finite), mean, variance, valid-frame
    count), the statistics kept with size-1 reduced axes; without masking the first is None (not
    computed) and count is None, else count is a raw broadcastable to the statistics."""
    raw = x.raw
    red = reduced[0] if len(reduced) == 1 else reduced  # an int dim is the cheaper torch call
    if not masked:
        var, mean = torch.var_mean(raw, red, correction=0, keepdim=True)
        return None, mean, var, None
    device, ndim = raw.device, raw.dim()
    mask = None
    for i in masked:
        d = x.dims[i]
        pos = _lengths_positions(x, d, caller)
        m = _C._dim_cached_raw(_MASK, d, pos + (i,), ndim, x.shape[i], device)
        mask = m if mask is None else mask & m
    if len(masked) == 1 and masked[0] in reduced and not any(p in reduced for p in pos):
        # Common case (one dynamic dim reduced, its batch dims kept): the clamped lengths, cached on
        # the dim, are the count; other reduced dims multiply it by their size.
        count = _C._dim_cached_raw(_COUNT, x.dims[masked[0]], pos, ndim, -1, device)
        factor = 1
        for j in reduced:
            if j != masked[0]:
                factor *= x.shape[j]
        if factor != 1:
            count = count * factor
    else:
        count = mask.sum(red, keepdim=True)
        factor = 1
        for j in reduced:
            if mask.shape[j] == 1:
                factor *= x.shape[j]
        count = (count * factor if factor != 1 else count).clamp(min=1)
    xm = torch.where(mask, raw, 0)
    # In-place division keeps x's dtype whatever the count's (float32 or int64) is.
    mean = xm.sum(red, keepdim=True).div_(count)
    diff = xm - mean
    var = torch.where(mask, diff * diff, 0).sum(red, keepdim=True).div_(count)
    return diff, mean, var, count


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
    reduced = [i for i in range(x.ndim) if i != ax]
    masked = _masked_axes(x, reduced) if training and use_mask else []
    ndim = x.ndim
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

    w = _param_raw(weight, "weight", axis, ndim, ax, caller, False)
    b = _param_raw(bias, "bias", axis, ndim, ax, caller, False)
    for p, n in ((running_mean, "running_mean"), (running_var, "running_var")):
        _param_raw(p, n, axis, ndim, ax, caller, True)
    diff, mean, var, count = _masked_statistics(x, reduced, masked, caller)
    if running_mean is not None:
        with torch.no_grad():
            # F.batch_norm's update: the unbiased variance n/(n-1) * var, n the valid frames per
            # feature (a device tensor: no sync; n=1 counts as n/1, where torch would raise).
            unbiased = var * (count / (count - 1).clamp(min=1))
            running_mean.raw.mul_(1 - momentum).add_(mean.reshape(-1), alpha=momentum)
            running_var.raw.mul_(1 - momentum).add_(unbiased.reshape(-1), alpha=momentum)
    out = diff * torch.rsqrt(var + eps)
    if w is not None:
        out = out * w
    if b is not None:
        out = out + b
    return Tensor(out, x.dims, feature_dim=x.feature_dim)
