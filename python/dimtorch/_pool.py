"""Max and average pooling over named spatial dims (dt.pool); padding never counts, lengths by dim math."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch
import torch.nn.functional as F

from ._C import Dim, Tensor
from ._conv_args import check_padding, fit_short_input, is_dynamic, out_spatial_dim, per_dim, same_pads, spatial_dims
from ._shape_ops import check_tensor

_MAX_POOL_FNS = {1: F.max_pool1d, 2: F.max_pool2d}
_AVG_POOL_FNS = {1: F.avg_pool1d, 2: F.avg_pool2d}


def _to_layout(x: Tensor, lead: Sequence[Dim], spatial: Sequence[Dim]):
    """x's raw as (N, C, *S) or (C, *S), the forms torch's pooling takes: the `lead` dims (one axis of
    size 1 when there are none; the first ones merged into N when there are more than two), then
    `spatial`; dynamic spatial axes narrowed to their max size. Two lead dims stay as they are: merging
    them would copy x when they are not adjacent in x (e.g. (batch, feature) of (batch, time, feature))."""
    order = tuple(lead) + tuple(spatial)
    dims = x.dims
    perm = [dims.index(d) for d in order]
    raw = x.raw if perm == list(range(len(perm))) else x.raw.permute(perm)
    n_lead = len(lead)
    lead_shape = tuple(raw.shape[:n_lead])
    if n_lead == 0:
        raw = raw.unsqueeze(0)
    elif n_lead > 2:
        raw = raw.reshape((math.prod(lead_shape[:-1]),) + tuple(raw.shape[n_lead - 1:]))
    for i, d in enumerate(spatial):
        if is_dynamic(d):
            a = raw.dim() - len(spatial) + i
            n = d.get_max_size()
            if raw.shape[a] > n:
                raw = raw.narrow(a, 0, n)
    return raw, lead_shape


def _from_layout(raw: torch.Tensor, lead_shape: tuple, rest: Sequence[Dim]) -> torch.Tensor:
    """Inverse of _to_layout's merge: the leading axes back into the lead dims (`lead_shape`);
    dynamic `rest` axes narrowed to their max size (host value)."""
    base = len(lead_shape)
    if base == 0:
        raw = raw.squeeze(0)
    elif base > 2:
        raw = raw.reshape(lead_shape + tuple(raw.shape[2:]))
    shape = raw.shape
    for i, d in enumerate(rest):
        if d.dyn_size is not None:
            a = base + i
            n = d.get_max_size()
            if shape[a] != n:
                raw = raw.narrow(a, 0, n)
    return raw


def pool(x: Tensor, *, mode: str, pool_size: Union[int, Sequence[int]], in_spatial_dims: Sequence[Dim],
         strides: Optional[Union[int, Sequence[int]]] = None, padding: str = "valid"):
    """Max or average pooling (F.max_pool*/F.avg_pool*) over 1 or 2 spatial dims; returns (tensor,
    out_spatial_dims), the tensor over (x's other dims, *out_spatial_dims). `strides` defaults to
    `pool_size`. Output dims as dimtorch.conv() (same 'same' padding, lengths by dim math).

    Padding never counts: for mode="max", padding frames of dynamic spatial dims and the 'same'
    padding are -inf; for mode="avg", they are excluded from the count (the mean of each window's
    valid frames). Every valid output frame has at least one valid input frame in its window. With
    padding="valid" no window of a valid output frame reaches into padding, so x is not masked
    (output padding frames may then hold NaN from x's padding; they are padding)."""
    caller = "dimtorch.pool()"
    check_tensor(x, caller)
    if mode not in ("max", "avg"):
        raise ValueError(f"{caller}: mode must be 'max' or 'avg', got {mode!r}")
    spatial = spatial_dims(caller, x, in_spatial_dims)
    n = len(spatial)
    ks = per_dim(caller, "pool_size", pool_size, n)
    strides = ks if strides is None else per_dim(caller, "strides", strides, n)
    check_padding(caller, padding)
    if not x.raw.is_floating_point():
        raise TypeError(f"{caller}: x must be floating, got {x.dtype}")
    # With padding="valid", the window of every valid output frame lies inside its sequence, and
    # pooling has no weights whose gradient could meet padding values: no mask is needed then.
    dynamic = padding == "same" and any(is_dynamic(d) for d in spatial)
    lead = tuple(d for d in x.dims if not any(d is s for s in spatial))
    out_spatial = tuple(out_spatial_dim(d, k, s, padding) for d, k, s in zip(spatial, ks, strides))
    pads = same_pads(ks) if padding == "same" else [(0, 0)] * n
    flat_pad = [p for pair in reversed(pads) for p in pair]
    if mode == "max":
        if dynamic:
            x = x.copy_masked(float("-inf"))
        raw, lead_shape = _to_layout(x, lead, spatial)
        if any(flat_pad):
            raw = fit_short_input(raw, spatial, [1] * n, caller, value=float("-inf"))
            raw = F.pad(raw, flat_pad, value=float("-inf"))
        else:
            raw = fit_short_input(raw, spatial, ks, caller, value=float("-inf"))
        out = _MAX_POOL_FNS[n](raw, ks, strides)
    else:
        mask = None
        if dynamic:
            # One mask serves both the zeroing of x's padding and the count of valid frames.
            from ._mask import sequence_mask  # noqa: PLC0415
            mask = sequence_mask(tuple(d for d in x.dims if not is_dynamic(d) or any(d is s for s in spatial)),
                                 device=x.raw.device)
            xr = x.raw
            for d in spatial:
                a = x.dims.index(d)
                if is_dynamic(d) and xr.shape[a] > d.get_max_size():
                    xr = xr.narrow(a, 0, d.get_max_size())
            x = Tensor(torch.where(mask.raw_aligned(x.dims), xr, 0), x.dims, feature_dim=x.feature_dim)
        raw, lead_shape = _to_layout(x, lead, spatial)
        if dynamic or any(flat_pad):
            # Mean over valid frames = pooled sum of x / pooled count of valid frames.
            if dynamic:
                valid = mask.raw_aligned(lead + spatial).to(raw.dtype).expand(lead_shape + tuple(raw.shape[-n:]))
                valid = valid.reshape(raw.shape)
            else:
                valid = raw.new_ones((1,) + tuple(raw.shape[1:]))
            if any(flat_pad):
                raw = fit_short_input(raw, spatial, [1] * n, caller)
                valid = fit_short_input(valid, spatial, [1] * n, caller)
                raw, valid = F.pad(raw, flat_pad), F.pad(valid, flat_pad)
            else:
                raw, valid = fit_short_input(raw, spatial, ks, caller), fit_short_input(valid, spatial, ks, caller)
            total = _AVG_POOL_FNS[n](raw, ks, strides)
            count = _AVG_POOL_FNS[n](valid, ks, strides)
            out = total / count.clamp(min=1.0 / math.prod(ks))
        else:
            raw = fit_short_input(raw, spatial, ks, caller)
            out = _AVG_POOL_FNS[n](raw, ks, strides)
    out = _from_layout(out, lead_shape, out_spatial)
    feature_dim = x.feature_dim if x.feature_dim is not None and any(x.feature_dim is d for d in lead) else None
    return Tensor(out, lead + out_spatial, sparse_dim=None, feature_dim=feature_dim), out_spatial
