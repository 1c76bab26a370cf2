"""Convolution, transposed convolution and pooling over named spatial dims, with output lengths by dim math."""
from __future__ import annotations

import math
import weakref
from typing import Optional, Sequence, Union

import torch
import torch.nn.functional as F

from ._C import Dim, Tensor, ceildiv
from ._shape_ops import axis_of, check_tensor, dim_str, dims_str

_CONV_FNS = {1: F.conv1d, 2: F.conv2d}
_TRANSPOSED_CONV_FNS = {1: F.conv_transpose1d, 2: F.conv_transpose2d}
_MAX_POOL_FNS = {1: F.max_pool1d, 2: F.max_pool2d}
_AVG_POOL_FNS = {1: F.avg_pool1d, 2: F.avg_pool2d}


def _is_dynamic(d: Dim) -> bool:
    return d.dyn_size is not None


def _per_dim(caller: str, what: str, value, n: int, minimum: int = 1) -> tuple:
    """One int >= minimum per spatial dim, from an int or a sequence of n ints."""
    if type(value) is int and value >= minimum:
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
    if any(v < minimum for v in values):
        raise ValueError(f"{caller}: {what} must be >= {minimum}, got {value!r}")
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


def _check_padding(caller: str, padding) -> str:
    if padding not in ("valid", "same"):
        raise ValueError(f"{caller}: padding must be 'valid' or 'same', got {padding!r}")
    return padding


def _check_x_args(caller: str, x, in_dim, in_spatial_dims) -> tuple:
    """The checks of x and its dims that conv and transposed_conv share; returns the spatial dims."""
    check_tensor(x, caller)
    if not isinstance(in_dim, Dim):
        raise TypeError(f"{caller}: in_dim must be a Dim, got {type(in_dim).__name__}")
    axis_of(x, in_dim, caller, what="in_dim")
    spatial = _spatial_dims(caller, x, in_spatial_dims)
    if any(d is in_dim for d in spatial):
        raise ValueError(f"{caller}: in_dim {dim_str(in_dim)} is also in in_spatial_dims ({dims_str(spatial)})")
    return spatial


def _x_positions(caller: str, x, in_dim, in_spatial_dims) -> tuple:
    """(spatial dims, their axes in x, in_dim's axis), checked; the full checks run only to raise."""
    try:
        spatial = (in_spatial_dims,) if isinstance(in_spatial_dims, Dim) else tuple(in_spatial_dims)
        if isinstance(x, Tensor) and isinstance(in_dim, Dim) and len(spatial) in (1, 2):
            dims = x.dims
            ci = dims.index(in_dim)
            pos = [dims.index(d) for d in spatial]
            if ci not in pos and (len(pos) == 1 or pos[0] != pos[1]):
                return spatial, pos, ci
    except (TypeError, ValueError):
        pass
    _check_x_args(caller, x, in_dim, in_spatial_dims)
    raise AssertionError(f"{caller}: argument check missed a case")  # the full checks raise on every case above


def _filter_size(caller: str, filter_size, spatial: tuple) -> tuple:
    if isinstance(filter_size, Dim):
        filter_size = (filter_size,)
    try:
        filter_size = tuple(filter_size)
    except TypeError:
        filter_size = (filter_size,)
    n = len(spatial)
    if len(filter_size) != n or not all(isinstance(d, Dim) and d.size is not None for d in filter_size):
        raise ValueError(f"{caller}: filter_size must be {n} static Dims (one per spatial dim "
                         f"{dims_str(spatial)}), got {filter_size!r}")
    return filter_size


def _check_channels(caller: str, in_dim, out_dim, groups) -> None:
    if not isinstance(out_dim, Dim):
        raise TypeError(f"{caller}: out_dim must be a Dim, got {type(out_dim).__name__}")
    if type(groups) is not int or groups < 1:
        raise ValueError(f"{caller}: groups must be an int >= 1, got {groups!r}")
    if in_dim.size is None or out_dim.size is None:
        raise ValueError(f"{caller}: in_dim {dim_str(in_dim)} and out_dim {dim_str(out_dim)} must be static")
    if groups > 1 and (in_dim.size % groups or out_dim.size % groups):
        raise ValueError(f"{caller}: groups={groups} does not divide in_dim {dim_str(in_dim)} and out_dim "
                         f"{dim_str(out_dim)}")


def _check_filter_dims(caller: str, filter, want: tuple) -> None:
    check_tensor(filter, caller, what="filter")
    if len(filter.dims) != len(want) or {id(d) for d in filter.dims} != {id(d) for d in want}:
        raise ValueError(f"{caller}: filter must have dims ({dims_str(want)}), has ({dims_str(filter.dims)})")


def _bias_raw(caller: str, bias, out_dim: Dim):
    if bias is None:
        return None
    if isinstance(bias, Tensor) and len(bias.dims) == 1 and bias.dims[0] is out_dim:
        return bias.raw
    check_tensor(bias, caller, what="bias")
    raise ValueError(f"{caller}: bias must have dims ({dim_str(out_dim)}), has ({dims_str(bias.dims)})")


class _Plan:
    """What conv/transposed_conv derive from the filter and the static arguments alone (checks,
    filter layout, torch arguments, output dim math), kept per filter Tensor.

    /* A module's weight reads as the same Tensor object call after call (dt.nn.Module caches its
       view), so the checks and arithmetic here run once per filter and arguments, and a call does
       only what depends on x. The filter is held weakly: its plan goes with it. */
    """

    __slots__ = ("ref", "args", "n", "want", "aligned", "torch_args", "pre_pad", "need", "out_math", "crops")

    def matches(self, filter, args: tuple, n: int) -> bool:
        return self.ref() is filter and self.n == n and self.args == args


_CONV_PLANS: dict = {}
_TRANSPOSED_PLANS: dict = {}


def _frozen(args: tuple) -> tuple:
    """args with lists copied, so that a caller's later change of a list cannot match a stale plan."""
    return tuple(list(a) if type(a) is list else a for a in args)


def _store(plans: dict, filter: Tensor, plan: _Plan, args: tuple, n: int) -> _Plan:
    key = id(filter)

    def forget(ref, plans=plans, key=key):
        if plans.get(key) is not None and plans[key].ref is ref:
            del plans[key]

    plan.ref, plan.args, plan.n = weakref.ref(filter, forget), _frozen(args), n
    plans[key] = plan
    return plan


_IDENTITY = [list(range(n)) for n in range(25)]  # up to kMaxDims (src/common.h) axes
_SWAP_LAST = [None, None] + [list(range(n - 2)) + [n - 1, n - 2] for n in range(2, 25)]


def _torch_input(x: Tensor, spatial: tuple, pos: list, ci: int):
    """x's raw as torch's conv wants it, (N, C, *S): padding of dynamic spatial dims zeroed (so that
    it never reaches valid output frames or the filter's gradient), x's other dims (lead) merged
    into N, dynamic spatial axes narrowed to their max size. Returns (raw, lead dims, lead shape)."""
    dims = x.dims
    nd = len(dims)
    for d in spatial:
        if d.dyn_size is not None:
            x = x.copy_masked(0)
            break
    raw = x.raw
    if nd == len(pos) + 2:  # one lead dim, the usual batch
        li = (nd * (nd - 1)) // 2 - ci - sum(pos)
        order = [li, ci] + pos
        lead = (dims[li],)
        lead_shape = None
    else:
        used = set(pos)
        used.add(ci)
        rest = [i for i in range(nd) if i not in used]
        order = rest + [ci] + pos
        lead = tuple(dims[i] for i in rest)
    if order == _SWAP_LAST[nd]:
        raw = raw.mT  # (batch, time, feature) -> (batch, feature, time): the cheapest view call
    elif order != _IDENTITY[nd]:
        raw = raw.permute(*order)
    shape = raw.shape
    if len(lead) != 1:
        lead_shape = tuple(shape[:len(lead)])
        raw = raw.unsqueeze(0) if not lead else raw.reshape((math.prod(lead_shape),) + tuple(shape[len(lead):]))
        shape = raw.shape
    for i, d in enumerate(spatial):
        if d.dyn_size is not None:
            n = d.get_max_size()
            if shape[2 + i] > n:
                raw = raw.narrow(2 + i, 0, n)
    return raw, lead, lead_shape


def _to_layout(x: Tensor, lead: Sequence[Dim], spatial: Sequence[Dim]):
    """x's raw as (N, *S) (pooling): `lead` dims merged into one axis N (size 1 when there are none),
    then `spatial`; dynamic spatial axes narrowed to their max size."""
    order = tuple(lead) + tuple(spatial)
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


def _from_layout(raw: torch.Tensor, lead_shape: Optional[tuple], rest: Sequence[Dim]) -> torch.Tensor:
    """Inverse of the lead merge: the leading axis back into the lead dims (`lead_shape`; None: one
    lead dim, nothing to do); dynamic `rest` axes narrowed to their max size (host value)."""
    base = 1
    if lead_shape is not None:
        base = len(lead_shape)
        if base == 0:
            raw = raw.squeeze(0)
        elif base > 1:
            raw = raw.reshape(lead_shape + tuple(raw.shape[1:]))
    shape = raw.shape
    for i, d in enumerate(rest):
        if d.dyn_size is not None:
            a = base + i
            n = d.get_max_size()
            if shape[a] != n:
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
    first = len(shape) - len(spatial)
    for i, k in enumerate(need):
        if shape[first + i] < k:
            break
    else:
        return raw
    pad = []
    for i in reversed(range(len(spatial))):
        a = first + i
        short = max(0, need[i] - shape[a])
        if short and not _is_dynamic(spatial[i]):
            raise ValueError(f"{caller}: spatial dim {dim_str(spatial[i])} has size {shape[a]}, smaller than "
                             f"the window ({need[i]})")
        pad += [0, short]
    return F.pad(raw, pad, value=value)


def _conv_plan(caller: str, filter, spatial: tuple, args: tuple) -> _Plan:
    in_dim, out_dim, filter_size, strides, dilation, padding, groups = args
    n = len(spatial)
    filter_size = _filter_size(caller, filter_size, spatial)
    strides = _per_dim(caller, "strides", strides, n)
    dilation = _per_dim(caller, "dilation", dilation, n)
    _check_padding(caller, padding)
    _check_channels(caller, in_dim, out_dim, groups)
    want = (out_dim, in_dim if groups == 1 else in_dim // groups) + filter_size
    _check_filter_dims(caller, filter, want)
    plan = _Plan()
    plan.want, plan.aligned = want, filter.dims == want
    k_effs = [dl * (fd.size - 1) + 1 for dl, fd in zip(dilation, filter_size)]
    plan.out_math = tuple(zip(k_effs, strides))
    plan.pre_pad, torch_padding = None, 0
    if padding == "same":
        plan.need = (1,) * n
        pads = _same_pads(k_effs)
        if all(left == right for left, right in pads):
            torch_padding = tuple(left for left, _ in pads)
        else:
            plan.pre_pad = [p for pair in reversed(pads) for p in pair]
    else:
        plan.need = tuple(k_effs)
    plan.torch_args = (strides, torch_padding, dilation, groups)
    return plan


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
    spatial, pos, ci = _x_positions(caller, x, in_dim, in_spatial_dims)
    n = len(spatial)
    args = (in_dim, out_dim, filter_size, strides, dilation, padding, groups)
    plan = _CONV_PLANS.get(id(filter))
    if plan is None or not plan.matches(filter, args, n):
        plan = _store(_CONV_PLANS, filter, _conv_plan(caller, filter, spatial, args), args, n)
    w = filter.raw if plan.aligned else filter.raw_aligned(plan.want)
    b = _bias_raw(caller, bias, out_dim)
    raw, lead, lead_shape = _torch_input(x, spatial, pos, ci)
    raw = _fit_short_input(raw, spatial, plan.need, caller)
    if plan.pre_pad is not None:
        raw = F.pad(raw, plan.pre_pad)
    out = _CONV_FNS[n](raw, w, b, *plan.torch_args)
    if n == 1:
        k_eff, s = plan.out_math[0]
        out_spatial = (_out_spatial_dim(spatial[0], k_eff, s, padding),)
    else:
        out_spatial = tuple(_out_spatial_dim(d, k, s, padding) for d, (k, s) in zip(spatial, plan.out_math))
    out = _from_layout(out, lead_shape, (out_dim,) + out_spatial)
    return Tensor(out, lead + (out_dim,) + out_spatial, feature_dim=out_dim), out_spatial


def _optional_per_dim(caller: str, what: str, value, n: int) -> tuple:
    """One int >= 0 or None per spatial dim, from None, an int or a sequence of n such values."""
    if value is None or isinstance(value, int):
        values = (value,) * n
    else:
        try:
            values = tuple(value)
        except TypeError:
            values = ()
    if len(values) != n or not all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in values):
        raise TypeError(f"{caller}: {what} must be None, an int or a sequence of {n} ints, got {value!r}")
    if any(v is not None and v < 0 for v in values):
        raise ValueError(f"{caller}: {what} must be >= 0, got {value!r}")
    return values


def _transposed_plan(caller: str, filter, spatial: tuple, args: tuple) -> _Plan:
    in_dim, out_dim, filter_size, strides, dilation, padding, groups, output_padding, remove_padding = args
    n = len(spatial)
    filter_size = _filter_size(caller, filter_size, spatial)
    strides = tuple(d.size for d in filter_size) if strides is None else _per_dim(caller, "strides", strides, n)
    dilation = _per_dim(caller, "dilation", dilation, n)
    _check_padding(caller, padding)
    output_padding = _optional_per_dim(caller, "output_padding", output_padding, n)
    remove_padding = _per_dim(caller, "remove_padding", remove_padding, n, minimum=0)
    _check_channels(caller, in_dim, out_dim, groups)
    want = (in_dim, out_dim if groups == 1 else out_dim // groups) + filter_size
    _check_filter_dims(caller, filter, want)
    plan = _Plan()
    plan.want, plan.aligned = want, filter.dims == want
    out_math, crops, torch_output_padding = [], [], []
    for fd, s, dl, p, r in zip(filter_size, strides, dilation, output_padding, remove_padding):
        k_eff = dl * (fd.size - 1) + 1
        if p is not None and p >= max(s, dl):
            raise ValueError(f"{caller}: output_padding must be smaller than the stride or the dilation, got "
                             f"output_padding={p}, stride={s}, dilation={dl}")
        # Out length T * s + extra, the frames [left, left + T * s + extra) of the full result.
        if p is None:
            extra, left = max(k_eff - s, 0), 0
            if padding == "same":
                extra, left = 0, extra // 2
        else:
            half = k_eff // 2 if padding == "same" else 0
            extra, left = k_eff - s - 2 * half + p, half
        extra, left = extra - 2 * r, left + r
        # torch gives (T - 1) * s + k_eff (+ output_padding) frames: frames the result needs beyond
        # that (bias only, no input reaches them) come as torch's output_padding (< s by the above).
        torch_output_padding.append(max(left + extra - (k_eff - s), 0))
        out_math.append((s, extra))
        crops.append(left)
    plan.out_math, plan.crops, plan.need = tuple(out_math), tuple(crops), (1,) * n
    plan.torch_args = (strides, 0, tuple(torch_output_padding), groups, dilation)
    return plan


def transposed_conv(x: Tensor, filter: Tensor, *, in_dim: Dim, out_dim: Dim, in_spatial_dims: Sequence[Dim],
                    filter_size: Sequence[Dim], strides: Optional[Union[int, Sequence[int]]] = None,
                    dilation: Union[int, Sequence[int]] = 1, padding: str = "valid",
                    remove_padding: Union[int, Sequence[int]] = 0,
                    output_padding: Optional[Union[int, Sequence[Optional[int]]]] = None, groups: int = 1,
                    bias: Optional[Tensor] = None):
    """1-D or 2-D transposed convolution (F.conv_transpose1d/2d) of x over `in_spatial_dims`;
    returns (tensor, out_spatial_dims), the tensor over (x's other dims, out_dim, *out_spatial_dims).

    `filter` has dims (in_dim, out_dim // groups, *filter_size) in any order (`out_dim` itself when
    groups == 1; torch's layout); `filter_size` are static Dims; `bias` (out_dim,). `strides`
    defaults to the filter size (as RETURNN's transposed_conv). Per spatial dim, with
    k_eff = dilation * (k - 1) + 1 and stride s, the output length is, as RETURNN's:
    - output_padding None, padding="valid": T * s + max(k_eff - s, 0), every frame some input frame
      touches (when k_eff < s, the frames between windows are output too and hold the bias);
      padding="same": T * s, that result cropped by max(k_eff - s, 0) // 2 frames on the left.
    - output_padding p (0 <= p < max(s, dilation)): torch's (T - 1) * s + k_eff + p, with
      padding="same" cropped by k_eff // 2 frames on each side.
    - remove_padding r then crops r frames on each side (from each sequence's own end).
    Lengths follow by dim math on the host (never below 0); an empty sequence (T = 0) gives the
    frames above that no input reaches, holding the bias. Padding of x is zeroed first, and every
    crop is the same for all sequences, so each sequence gets what it gets alone."""
    caller = "dimtorch.transposed_conv()"
    spatial, pos, ci = _x_positions(caller, x, in_dim, in_spatial_dims)
    n = len(spatial)
    args = (in_dim, out_dim, filter_size, strides, dilation, padding, groups, output_padding, remove_padding)
    plan = _TRANSPOSED_PLANS.get(id(filter))
    if plan is None or not plan.matches(filter, args, n):
        plan = _store(_TRANSPOSED_PLANS, filter, _transposed_plan(caller, filter, spatial, args), args, n)
    w = filter.raw if plan.aligned else filter.raw_aligned(plan.want)
    b = _bias_raw(caller, bias, out_dim)
    for d in spatial:
        if d.size is None and d.dyn_size is None:
            raise ValueError(f"{caller}: spatial dim {dim_str(d)} takes its size from data; it needs lengths or a size")
    raw, lead, lead_shape = _torch_input(x, spatial, pos, ci)
    raw = _fit_short_input(raw, spatial, plan.need, caller)  # all sequences empty: one zero frame, cropped below
    out = _TRANSPOSED_CONV_FNS[n](raw, w, b, *plan.torch_args)
    out_spatial = []
    for i, (d, (s, extra), left) in enumerate(zip(spatial, plan.out_math, plan.crops)):
        od = d * s
        od = od + extra if extra >= 0 else od - (-extra)
        out_spatial.append(od)
        size = od.size if od.size is not None else od.get_max_size()
        have = out.shape[2 + i]
        if have != size:
            out = out.narrow(2 + i, min(left, have - size), size)
    out_spatial = tuple(out_spatial)
    out = _from_layout(out, lead_shape, ())
    return Tensor(out, lead + (out_dim,) + out_spatial, feature_dim=out_dim), out_spatial


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
        raw, lead_shape = _to_layout(x, lead, spatial)
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
        raw, lead_shape = _to_layout(x, lead, spatial)
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
    out = _from_layout(out, lead_shape, out_spatial)
    feature_dim = x.feature_dim if x.feature_dim is not None and any(x.feature_dim is d for d in lead) else None
    return Tensor(out, lead + out_spatial, sparse_dim=None, feature_dim=feature_dim), out_spatial
