"""Convolution, transposed convolution and pooling over named spatial dims, with output lengths by dim math."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch
import torch.nn.functional as F

from ._C import Dim, Tensor, ceildiv
from ._shape_ops import axis_of, check_tensor, dim_str, dims_str

_CONV_FNS = {1: F.conv1d, 2: F.conv2d}
_MAX_POOL_FNS = {1: F.max_pool1d, 2: F.max_pool2d}
_AVG_POOL_FNS = {1: F.avg_pool1d, 2: F.avg_pool2d}


def _is_dynamic(d: Dim) -> bool:
    return d.dyn_size is not None


def _per_dim(caller: str, what: str, value, n: int) -> tuple:
    """One int >= 1 per spatial dim, from an int or a sequence of n ints."""
    if type(value) is int and value >= 1:
        return (value,) * n
    if isinstance(value, int) and not isinstance(value, bool):
        values = (value,) * n
    else:
        try:
            values = tuple(value)
        except TypeError:
            raise TypeError(f"{caller}: {what} must be an int or a sequence of {n} ints, got {value!r}") from None
    if len(values) != n or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise TypeError(f"{caller}: {what} must be an int or a sequence of {n} ints, got {value!r}")
    if any(v < 1 for v in values):
        raise ValueError(f"{caller}: {what} must be >= 1, got {value!r}")
    return values


def _spatial_dims(caller: str, x: Tensor, in_spatial_dims) -> tuple:
    if isinstance(in_spatial_dims, Dim):
        in_spatial_dims = (in_spatial_dims,)
    if in_spatial_dims is None:
        raise TypeError(f"{caller}: in_spatial_dims is required (dims of x: {dims_str(x.dims)})")
    dims = tuple(in_spatial_dims)
    if len(dims) not in (1, 2):
        raise ValueError(f"{caller}: {len(dims)} spatial dims ({dims_str(dims)}); only 1-D and 2-D are supported")
    for d in dims:
        axis_of(x, d, caller, what="in_spatial_dims entry")
    if len(dims) == 2 and dims[0] is dims[1]:
        raise ValueError(f"{caller}: in_spatial_dims lists a dim twice ({dims_str(dims)})")
    return dims


def _out_spatial_dim(d: Dim, k_eff: int, stride: int, padding: str) -> Dim:
    """valid: ceildiv(T - (k_eff - 1), s) = (T - k_eff) // s + 1 (0 when T < k_eff);
    same: ceildiv(T, s). By dim math, so lengths follow on the host (and static sizes stay static)."""
    if d.size is None and d.dyn_size is None:
        return Dim(None, name=f"{d.name}:conv")  # size from data: the raw result decides
    if padding == "valid":
        d = d - (k_eff - 1)
    return ceildiv(d, stride)


def _checked_conv_args(caller: str, x, filter, in_dim, out_dim, in_spatial_dims) -> tuple:
    """The checks conv and transposed_conv share; returns the spatial dims."""
    check_tensor(x, caller)
    check_tensor(filter, caller, what="filter")
    for what, d in (("in_dim", in_dim), ("out_dim", out_dim)):
        if not isinstance(d, Dim):
            raise TypeError(f"{caller}: {what} must be a Dim, got {type(d).__name__}")
    axis_of(x, in_dim, caller, what="in_dim")
    return _spatial_dims(caller, x, in_spatial_dims)


def _check_padding(caller: str, padding) -> str:
    if padding not in ("valid", "same"):
        raise ValueError(f"{caller}: padding must be 'valid' or 'same', got {padding!r}")
    return padding


def _to_layout(x: Tensor, lead: Sequence[Dim], spatial: Sequence[Dim], channel: Optional[Dim]):
    """x's raw as (N, [C,] *S): `lead` dims merged into one axis N (size 1 when there are none),
    then `channel`, then `spatial`; dynamic spatial axes narrowed to their max size."""
    order = tuple(lead) + ((channel,) if channel is not None else ()) + tuple(spatial)
    dims = x.dims
    perm = [dims.index(d) for d in order]
    raw = x.raw if perm == list(range(len(perm))) else x.raw.permute(perm)
    n_lead = len(lead)
    lead_shape = tuple(raw.shape[:n_lead])
    if n_lead == 0:
        raw = raw.unsqueeze(0)
    elif n_lead > 1:
        raw = raw.reshape((math.prod(lead_shape),) + tuple(raw.shape[n_lead:]))
    for i, d in enumerate(spatial):
        if _is_dynamic(d):
            a = raw.dim() - len(spatial) + i
            n = d.get_max_size()
            if raw.shape[a] > n:
                raw = raw.narrow(a, 0, n)
    return raw, lead_shape


def _from_layout(raw: torch.Tensor, lead: Sequence[Dim], lead_shape: tuple, rest: Sequence[Dim]) -> torch.Tensor:
    """Inverse of _to_layout's merge: the leading axis back into `lead`; dynamic `rest` axes
    narrowed to their max size (host value)."""
    base = len(lead_shape)
    if base == 0:
        raw = raw.squeeze(0)
    elif base > 1:
        raw = raw.reshape(lead_shape + tuple(raw.shape[1:]))
    for i, d in enumerate(rest):
        if _is_dynamic(d):
            a = base + i
            n = d.get_max_size()
            if raw.shape[a] != n:
                raw = raw.narrow(a, 0, n)
    return raw


def _same_pads(k_effs: Sequence[int]) -> list:
    """(left, right) per spatial dim for 'same': total k_eff - 1 whatever the length, left =
    total // 2, right = the rest (RETURNN's consistent 'same' padding)."""
    return [((k - 1) // 2, (k - 1) - (k - 1) // 2) for k in k_effs]


def _fit_short_input(raw: torch.Tensor, spatial: Sequence[Dim], need: Sequence[int], caller: str,
                     value=0.0) -> torch.Tensor:
    """Right-pads dynamic spatial axes shorter than one window (every sequence gives 0 frames then;
    the result is narrowed to 0). A static axis that short is an error."""
    shape = raw.shape
    if all(shape[len(shape) - len(spatial) + i] >= need[i] for i in range(len(spatial))):
        return raw
    pad = []
    for i in reversed(range(len(spatial))):
        a = raw.dim() - len(spatial) + i
        short = max(0, need[i] - raw.shape[a])
        if short and not _is_dynamic(spatial[i]):
            raise ValueError(f"{caller}: spatial dim {dim_str(spatial[i])} has size {raw.shape[a]}, smaller than "
                             f"the window ({need[i]})")
        pad += [0, short]
    if any(pad):
        raw = F.pad(raw, pad, value=value)
    return raw


def conv(x: Tensor, filter: Tensor, *, in_dim: Dim, out_dim: Dim, in_spatial_dims: Sequence[Dim],
         filter_size: Sequence[Dim], strides: Union[int, Sequence[int]] = 1,
         dilation: Union[int, Sequence[int]] = 1, padding: str = "valid", groups: int = 1,
         bias: Optional[Tensor] = None):
    """1-D or 2-D convolution (F.conv1d/F.conv2d) of x over `in_spatial_dims`, contracting `in_dim`;
    returns (tensor, out_spatial_dims), the tensor over (x's other dims, out_dim, *out_spatial_dims).

    `filter` has dims (out_dim, in_dim // groups, *filter_size) in any order (`in_dim` itself when
    groups == 1); `filter_size` are static Dims; `bias` has dims (out_dim,). All dims of x other
    than in_dim and the spatial dims are batch dims (merged into one axis for torch).

    Padding of dynamic spatial dims is zeroed first. Output spatial dims come from dim math, so
    their lengths are exact per sequence and computed on the host (k_eff = dilation * (k - 1) + 1):
    - padding="valid": ceildiv(T - (k_eff - 1), s), i.e. (T - k_eff) // s + 1, 0 when T < k_eff.
    - padding="same": ceildiv(T, s). The padding is always k_eff - 1 frames in total, left =
      (k_eff - 1) // 2 and right the rest, whatever T and the stride (RETURNN's consistent 'same'
      padding; for stride 1 this is torch's padding='same'). Output frame t then sees input frames
      t*s - left + j*dilation for every sequence alike, so each sequence gets what it gets alone
      (batch independence); unlike TF's 'same' with stride > 1, the padding does not depend on T.
    Output padding frames hold garbage (bias and partial sums), as padding may."""
    caller = "dimtorch.conv()"
    spatial = _checked_conv_args(caller, x, filter, in_dim, out_dim, in_spatial_dims)
    n = len(spatial)
    if any(d is in_dim for d in spatial):
        raise ValueError(f"{caller}: in_dim {dim_str(in_dim)} is also in in_spatial_dims ({dims_str(spatial)})")
    if isinstance(filter_size, Dim):
        filter_size = (filter_size,)
    filter_size = tuple(filter_size)
    if len(filter_size) != n or not all(isinstance(d, Dim) and d.size is not None for d in filter_size):
        raise ValueError(f"{caller}: filter_size must be {n} static Dims (one per spatial dim "
                         f"{dims_str(spatial)}), got {filter_size!r}")
    strides = _per_dim(caller, "strides", strides, n)
    dilation = _per_dim(caller, "dilation", dilation, n)
    _check_padding(caller, padding)
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"{caller}: groups must be an int >= 1, got {groups!r}")
    if in_dim.size is None or out_dim.size is None:
        raise ValueError(f"{caller}: in_dim {dim_str(in_dim)} and out_dim {dim_str(out_dim)} must be static")
    if groups > 1 and (in_dim.size % groups or out_dim.size % groups):
        raise ValueError(f"{caller}: groups={groups} does not divide in_dim {dim_str(in_dim)} and out_dim "
                         f"{dim_str(out_dim)}")
    filter_in = in_dim if groups == 1 else in_dim // groups
    want = (out_dim, filter_in) + filter_size
    if len(filter.dims) != len(want) or {id(d) for d in filter.dims} != {id(d) for d in want}:
        raise ValueError(f"{caller}: filter must have dims ({dims_str(want)}), has ({dims_str(filter.dims)})")
    w = filter.raw_aligned(want)
    b = None
    if bias is not None:
        check_tensor(bias, caller, what="bias")
        if len(bias.dims) != 1 or bias.dims[0] is not out_dim:
            raise ValueError(f"{caller}: bias must have dims ({dim_str(out_dim)}), has ({dims_str(bias.dims)})")
        b = bias.raw

    if any(_is_dynamic(d) for d in spatial):
        x = x.copy_masked(0)
    skip = {id(in_dim)}
    skip.update(map(id, spatial))
    lead = tuple(d for d in x.dims if id(d) not in skip)
    raw, lead_shape = _to_layout(x, lead, spatial, in_dim)
    k_effs = [dl * (fd.size - 1) + 1 for dl, fd in zip(dilation, filter_size)]
    out_spatial = tuple(_out_spatial_dim(d, k, s, padding) for d, k, s in zip(spatial, k_effs, strides))
    if padding == "same":
        raw = _fit_short_input(raw, spatial, [1] * n, caller)
        pads = _same_pads(k_effs)
        if all(l == r for l, r in pads):
            torch_padding = tuple(l for l, _ in pads)
        else:
            raw = F.pad(raw, [p for pair in reversed(pads) for p in pair])
            torch_padding = 0
    else:
        raw = _fit_short_input(raw, spatial, k_effs, caller)
        torch_padding = 0
    out = _CONV_FNS[n](raw, w, b, stride=strides, padding=torch_padding, dilation=dilation, groups=groups)
    out = _from_layout(out, lead, lead_shape, (out_dim,) + out_spatial)
    return Tensor(out, lead + (out_dim,) + out_spatial, feature_dim=out_dim), out_spatial


def transposed_conv(x: Tensor, filter: Tensor, *, in_dim: Dim, out_dim: Dim, in_spatial_dims: Sequence[Dim],
                    filter_size: Sequence[Dim], strides: Union[int, Sequence[int]] = 1,
                    dilation: Union[int, Sequence[int]] = 1, padding: str = "valid",
                    bias: Optional[Tensor] = None):
    """1-D transposed convolution (F.conv_transpose1d) of x over one spatial dim; returns (tensor,
    out_spatial_dims), the tensor over (x's other dims, out_dim, out spatial dim). `filter` has dims
    (in_dim, out_dim, k) in any order (`filter_size` = (k,), a static Dim); `bias` (out_dim,).

    Output lengths by dim math, as RETURNN's deconv output length (k_eff = dilation * (k - 1) + 1):
    - padding="valid": T * s + max(k_eff - s, 0) — every frame some valid input frame touches
      (when k_eff < s, the frames between windows are output too and hold the bias).
    - padding="same": T * s, the valid result cropped by max(k_eff - s, 0) // 2 frames on the left.
    An empty sequence (T = 0) thus gives max(k_eff - s, 0) frames with padding="valid", holding the bias.
    Padding of x is zeroed first, so each sequence gets what it gets alone."""
    caller = "dimtorch.transposed_conv()"
    spatial = _checked_conv_args(caller, x, filter, in_dim, out_dim, in_spatial_dims)
    if len(spatial) != 1:
        raise ValueError(f"{caller}: only 1-D is supported, got spatial dims ({dims_str(spatial)})")
    if spatial[0] is in_dim:
        raise ValueError(f"{caller}: in_dim {dim_str(in_dim)} is also in in_spatial_dims ({dims_str(spatial)})")
    if isinstance(filter_size, Dim):
        filter_size = (filter_size,)
    filter_size = tuple(filter_size)
    if len(filter_size) != 1 or not isinstance(filter_size[0], Dim) or filter_size[0].size is None:
        raise ValueError(f"{caller}: filter_size must be one static Dim, got {filter_size!r}")
    (s,) = _per_dim(caller, "strides", strides, 1)
    (dl,) = _per_dim(caller, "dilation", dilation, 1)
    _check_padding(caller, padding)
    want = (in_dim, out_dim) + filter_size
    if len(filter.dims) != 3 or not all(any(d is w for d in filter.dims) for w in want):
        raise ValueError(f"{caller}: filter must have dims ({dims_str(want)}), has ({dims_str(filter.dims)})")
    w = filter.raw_aligned(want)
    b = None
    if bias is not None:
        check_tensor(bias, caller, what="bias")
        if len(bias.dims) != 1 or bias.dims[0] is not out_dim:
            raise ValueError(f"{caller}: bias must have dims ({dim_str(out_dim)}), has ({dims_str(bias.dims)})")
        b = bias.raw
    (t,) = spatial
    if t.size is None and t.dyn_size is None:
        raise ValueError(f"{caller}: spatial dim {dim_str(t)} takes its size from data; it needs lengths or a size")
    if _is_dynamic(t):
        x = x.copy_masked(0)
    lead = tuple(d for d in x.dims if d is not in_dim and d is not t)
    raw, lead_shape = _to_layout(x, lead, spatial, in_dim)
    k_eff = dl * (filter_size[0].size - 1) + 1
    extra = max(k_eff - s, 0)
    out_t = t * s
    if padding == "valid" and extra:
        out_t = out_t + extra
    # torch gives (T - 1) * s + k_eff + output_padding frames; output_padding fills up to T * s when k_eff < s.
    n_in = raw.shape[-1]
    raw = _fit_short_input(raw, spatial, [1], caller)  # all sequences empty: one zero frame, cropped below
    out = F.conv_transpose1d(raw, w, b, stride=s, output_padding=max(s - k_eff, 0), dilation=dl)
    if padding == "same" and extra:
        out = out.narrow(-1, extra // 2, n_in * s)
    out = _from_layout(out, lead, lead_shape, (out_dim, out_t))
    return Tensor(out, lead + (out_dim, out_t), feature_dim=out_dim), (out_t,)


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
    spatial = _spatial_dims(caller, x, in_spatial_dims)
    n = len(spatial)
    ks = _per_dim(caller, "pool_size", pool_size, n)
    strides = ks if strides is None else _per_dim(caller, "strides", strides, n)
    _check_padding(caller, padding)
    if not x.raw.is_floating_point():
        raise TypeError(f"{caller}: x must be floating, got {x.dtype}")
    # With padding="valid", the window of every valid output frame lies inside its sequence, and
    # pooling has no weights whose gradient could meet padding values: no mask is needed then.
    dynamic = padding == "same" and any(_is_dynamic(d) for d in spatial)
    lead = tuple(d for d in x.dims if not any(d is s for s in spatial))
    out_spatial = tuple(_out_spatial_dim(d, k, s, padding) for d, k, s in zip(spatial, ks, strides))
    pads = _same_pads(ks) if padding == "same" else [(0, 0)] * n
    flat_pad = [p for pair in reversed(pads) for p in pair]
    if mode == "max":
        if dynamic:
            x = x.copy_masked(float("-inf"))
        raw, lead_shape = _to_layout(x, lead, spatial, None)
        if any(flat_pad):
            raw = _fit_short_input(raw, spatial, [1] * n, caller, value=float("-inf"))
            raw = F.pad(raw, flat_pad, value=float("-inf"))
        else:
            raw = _fit_short_input(raw, spatial, ks, caller, value=float("-inf"))
        out = _MAX_POOL_FNS[n](raw, ks, strides)
    else:
        mask = None
        if dynamic:
            # One mask serves both the zeroing of x's padding and the count of valid frames.
            from ._mask import sequence_mask  # noqa: PLC0415
            mask = sequence_mask(tuple(d for d in x.dims if not _is_dynamic(d) or any(d is s for s in spatial)),
                                 device=x.raw.device)
            xr = x.raw
            for d in spatial:
                a = x.dims.index(d)
                if _is_dynamic(d) and xr.shape[a] > d.get_max_size():
                    xr = xr.narrow(a, 0, d.get_max_size())
            x = Tensor(torch.where(mask.raw_aligned(x.dims), xr, 0), x.dims, feature_dim=x.feature_dim)
        raw, lead_shape = _to_layout(x, lead, spatial, None)
        if dynamic or any(flat_pad):
            # Mean over valid frames = pooled sum of x / pooled count of valid frames.
            if dynamic:
                valid = mask.raw_aligned(lead + spatial).to(raw.dtype).expand(lead_shape + tuple(raw.shape[1:]))
                valid = valid.reshape(raw.shape)
            else:
                valid = raw.new_ones((1,) + tuple(raw.shape[1:]))
            if any(flat_pad):
                raw = _fit_short_input(raw, spatial, [1] * n, caller)
                valid = _fit_short_input(valid, spatial, [1] * n, caller)
                raw, valid = F.pad(raw, flat_pad), F.pad(valid, flat_pad)
            else:
                raw, valid = _fit_short_input(raw, spatial, ks, caller), _fit_short_input(valid, spatial, ks, caller)
            total = _AVG_POOL_FNS[n](raw, ks, strides)
            count = _AVG_POOL_FNS[n](valid, ks, strides)
            out = total / count.clamp(min=1.0 / math.prod(ks))
        else:
            raw = _fit_short_input(raw, spatial, ks, caller)
            out = _AVG_POOL_FNS[n](raw, ks, strides)
    out = _from_layout(out, lead, lead_shape, out_spatial)
    feature_dim = x.feature_dim if x.feature_dim is not None and any(x.feature_dim is d for d in lead) else None
    return Tensor(out, lead + out_spatial, sparse_dim=None, feature_dim=feature_dim), out_spatial
