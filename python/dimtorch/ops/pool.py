"""Max and average pooling over named spatial dims (dt.pool); padding never counts, lengths by dim math."""
from __future__ import annotations

import math
import weakref
from typing import Optional, Sequence, Union

import torch
import torch.nn.functional as F

from .._core import in_graph as _in_graph, tracing as _tracing
from .._C import Dim, Tensor
from .conv_args import (conv_padding, given_out_spatial_dims, is_dynamic, out_spatial_dim, per_dim, permuted,
                         plan_perm, same_pads, short_pads, spatial_dims)
from .._core import dim_cache as _dim_cache
from .._core.dim_cache import drop_oldest
from .._core.args import check_tensor

# torch.max_pool*d: what F.max_pool*d call once return_indices is handled (one Python frame less).
_MAX_POOL_FNS = {1: torch.max_pool1d, 2: torch.max_pool2d, 3: torch.max_pool3d}
_AVG_POOL_FNS = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


class _Plan:
    """The steps of one pool() call signature (see _plan_key) from x's raw to the output: checks
    done, dim math done, torch arguments chosen.

    A model calls pool with x of the same dims and raw shape call after call: the checks and the
    dim math then run once, and a call makes the torch calls and a key lookup. The dims are held
    weakly, each with a callback that drops the plan when it dies, before its id can be reused by
    a new dim."""

    __slots__ = ("refs", "out_refs", "n_lead", "lead_pos", "spatial_ids", "fill", "masked", "narrow", "perm",
                 "merge", "pad", "fn", "torch_args", "window", "count", "unmerge", "narrow_out")


_PLANS: dict = {}
_MAX_PLANS = 64  # plans go with their dims; this bounds the dict should many live dims call pool


def _int_tuple(v):
    """A tuple/list of ints as a key part (exactly ints: True == 1.0 == 1 would otherwise share 1's
    key and skip its error), else False."""
    if (type(v) is tuple or type(v) is list) and all(type(e) is int for e in v):
        return tuple(v)
    return False


def _plan_key(x, mode, pool_size, in_spatial_dims, strides, padding, out_spatial_dims):
    """The plan cache's key of a call, or None for arguments the cache leaves to the checks. Dims
    by id: a plan in the cache holds its dims' weak refs, so an id there is its live dim's. The
    raw shape's length tells x's dims from the spatial ones (and "out" from given out dims)."""
    ks = pool_size if type(pool_size) is int else _int_tuple(pool_size)
    ss = strides if strides is None or type(strides) is int else _int_tuple(strides)
    pd = padding if type(padding) is str or type(padding) is int else _int_tuple(padding)
    if type(x) is not Tensor or type(mode) is not str or pd is False or ks is False or ss is False:
        return None
    t = type(in_spatial_dims)
    if t is tuple or t is list:
        spatial = map(id, in_spatial_dims)
    elif t is Dim:
        spatial = (id(in_spatial_dims),)
    else:
        return None
    raw = x.raw
    if out_spatial_dims is None:
        return (mode, ks, ss, pd, raw.shape, raw.dtype, *map(id, x.dims), *spatial)
    t = type(out_spatial_dims)
    if t is tuple or t is list:
        out = map(id, out_spatial_dims)
    elif t is Dim:
        out = (id(out_spatial_dims),)
    else:
        return None
    return (mode, ks, ss, pd, raw.shape, raw.dtype, *map(id, x.dims), *spatial, "out", *out)


def _store(key, plan: _Plan, dims: Sequence[Dim]) -> None:
    def forget(ref, key=key):
        entry = _PLANS.get(key)
        if entry is not None and any(r is ref for r in entry.refs):
            _PLANS.pop(key, None)  # another thread may have replaced or dropped it meanwhile

    plan.refs = tuple(weakref.ref(d, forget) for d in dims)
    if len(_PLANS) >= _MAX_PLANS:
        drop_oldest(_PLANS)
    _PLANS[key] = plan


def _forget(dim: Dim) -> None:
    """Drops the plans made with `dim` (they narrow to its max length: new lengths bound to it)."""
    for key, plan in list(_PLANS.items()):
        if any(r() is dim for r in plan.refs):
            _PLANS.pop(key, None)


_dim_cache.on_forget(_forget)


def torch_out_size(size: int, k: int, s: int, pad: int, ceil_mode: bool) -> int:
    """torch's pooling output length of `size` frames with `pad` on both sides (its formula)."""
    n = (size + 2 * pad - k + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (n - 1) * s >= size + pad:
        n -= 1  # torch: the last window starts inside the input or its left padding
    return n


def torch_padding(sizes: Sequence[int], ks: Sequence[int], strides: Sequence[int], pads: Sequence[tuple]):
    """(padding, ceil_mode) that make torch's pooling give the windows of the explicit (left, right)
    `pads`, or None. Its windows then start where the explicit ones do (left padding `left`), and
    they are as many; frames they reach beyond the input are skipped (max) or not counted (avg,
    count_include_pad=False), as explicit -inf / uncounted padding would be."""
    explicit = [(n + left + right - k) // s + 1 for n, k, s, (left, right) in zip(sizes, ks, strides, pads)]
    if any(2 * left > k for k, (left, _) in zip(ks, pads)):
        return None  # torch's limit on its padding
    for ceil_mode in (False, True):
        if all(torch_out_size(n, k, s, left, ceil_mode) == e
               for n, k, s, (left, _), e in zip(sizes, ks, strides, pads, explicit)):
            return tuple(left for left, _ in pads), ceil_mode
    return None


def _make_plan(caller: str, x: Tensor, mode: str, spatial: tuple, ks: tuple, strides: tuple, padding,
               in_graph: bool = False):
    """The plan of a checked call, and its out spatial dims. In graph (while tracing): no narrowing
    to max lengths (x's raw sizes, symbolic then, are the padded sizes) and explicit padding (torch's
    own padding is chosen by comparing sizes, which would make guards of the raw sizes)."""
    dims, shape = x.dims, x.raw.shape
    n = len(spatial)
    plan = _Plan()
    spatial_pos = tuple(dims.index(d) for d in spatial)
    plan.spatial_ids = frozenset(map(id, spatial))
    plan.lead_pos = tuple(i for i in range(len(dims)) if i not in spatial_pos)
    plan.fill = float("-inf") if mode == "max" else 0.0
    # With padding="valid", the window of every valid output frame lies inside its sequence, and
    # pooling has no weights whose gradient could meet padding values: no mask is needed then.
    # Int padding: windows reach p frames past each sequence's end, its masked padding. A 'same' window
    # of one frame (RETURNN's Conformer frontend pools (1, 2) over (time, feature)) reaches none.
    plan.masked = padding != "valid" and any(is_dynamic(d) and not (padding == "same" and k == 1)
                                             for d, k in zip(spatial, ks))
    order = plan.lead_pos + spatial_pos
    n_lead = len(plan.lead_pos)
    plan.n_lead = n_lead
    plan.perm = plan_perm(order)
    # torch's pooling takes (N, C, *S) or (C, *S): no lead dim becomes an axis of 1; two stay as they
    # are (merging them would copy x when they are not adjacent, e.g. (batch, feature) of (batch,
    # time, feature)); more merge all but the last into N.
    lead_shape = tuple(shape[i] for i in plan.lead_pos)
    sizes = [shape[i] for i in spatial_pos]
    plan.narrow = []
    for i, d in enumerate(spatial):
        if is_dynamic(d) and not in_graph and sizes[i] > d.get_max_size():
            sizes[i] = d.get_max_size()
            plan.narrow.append((spatial_pos[i], sizes[i]))  # an axis of x: narrowed before the permute
    plan.merge = plan.unmerge = None
    if n_lead == 0:
        plan.merge = (1,) + tuple(sizes)
    elif n_lead > 2:
        plan.merge = (math.prod(lead_shape[:-1]), lead_shape[-1]) + tuple(sizes)
    # A dynamic axis shorter than needed holds sequences that give 0 frames: right-padded (its
    # result is narrowed to 0); a static one is an error.
    if padding == "same":
        need, pads = [1] * n, same_pads(ks)
    elif padding == "valid":
        need, pads = ks, [(0, 0)] * n
    else:
        need, pads = [max(1, k - 2 * p) for k, p in zip(ks, padding)], [(p, p) for p in padding]
    fit = short_pads(caller, sizes, spatial, need)
    fit = [0] * n if fit is None else fit[1::2][::-1]
    sizes = [size + extra for size, extra in zip(sizes, fit)]
    # torch's avg_pool3d refuses an input shorter than the window before its own padding: explicit then.
    short_3d = mode == "avg" and n == 3 and any(size < k for size, k in zip(sizes, ks))
    implicit = None if in_graph or short_3d else torch_padding(sizes, ks, strides, pads)
    if implicit is not None:
        torch_pads, ceil_mode = implicit
        flat_pad = [p for extra in reversed(fit) for p in (0, extra)]
    else:
        torch_pads, ceil_mode = 0, False
        flat_pad = [p for (left, right), extra in zip(reversed(pads), reversed(fit)) for p in (left, right + extra)]
    plan.pad = flat_pad if any(flat_pad) else None
    plan.window = math.prod(ks)
    k_arg, s_arg, p_arg = (ks[0], strides[0], torch_pads if torch_pads == 0 else torch_pads[0]) if n == 1 else (
        ks, strides, torch_pads)  # torch parses plain ints faster than 1-tuples
    if mode == "max":
        plan.fn, plan.torch_args = _MAX_POOL_FNS[n], (k_arg, s_arg, p_arg, 1, ceil_mode)
        if in_graph and n == 1:  # (torch's max_pool1d takes int sizes: it would fix the traced length)
            plan.fn = _max_pool1d_by_2d
    else:
        plan.fn, plan.torch_args = _AVG_POOL_FNS[n], (k_arg, s_arg, p_arg, ceil_mode, False)
    # avg: torch's own padding is not counted (count_include_pad=False); masked frames and explicit
    # padding are, so then the mean of valid frames = pooled x (padding zeroed) / pooled valid frames.
    plan.count = mode == "avg" and (plan.masked or plan.pad is not None)
    paddings = (padding,) * n if type(padding) is str else padding
    out_spatial = tuple(out_spatial_dim(d, k, s, p) for d, k, s, p in zip(spatial, ks, strides, paddings))
    out_sizes = [(size + left + right - k) // s + 1 for size, k, s, (left, right) in zip(sizes, ks, strides, pads)]
    if plan.merge is not None:
        plan.unmerge = lead_shape + tuple(out_sizes)
    plan.narrow_out = () if in_graph else tuple((n_lead + i, d.get_max_size()) for i, d in enumerate(out_spatial)
                                                if is_dynamic(d) and d.get_max_size() != out_sizes[i])
    return plan, out_spatial


def _max_pool1d_by_2d(raw: torch.Tensor, k: int, s: int, p: int, dilation: int, ceil_mode: bool) -> torch.Tensor:
    """F.max_pool1d by F.max_pool2d over a size-1 axis: the same values, and the 2-d kernel keeps a symbolic
    length symbolic while tracing."""
    return F.max_pool2d(raw.unsqueeze(-2), (1, k), (1, s), (0, p), (1, dilation), ceil_mode).squeeze(-2)


def _pooled(plan: _Plan, raw: torch.Tensor) -> torch.Tensor:
    """torch's pooling of raw (over x's dims) as the plan lays it out."""
    for a, size in plan.narrow:
        raw = raw.narrow(a, 0, size)
    raw = permuted(raw, plan.perm)
    if plan.merge is not None:
        raw = raw.reshape(plan.merge)
    if plan.pad is not None:
        raw = F.pad(raw, plan.pad, value=plan.fill)
    return plan.fn(raw, *plan.torch_args)


def _run(plan: _Plan, x: Tensor, out_dims: tuple, in_graph: bool = False):
    """The call: x's raw through the plan's steps; the output over out_dims."""
    # The padding of all dynamic dims is masked, not only the spatial ones' (one cached mask in C++):
    # other dims' padding frames are output padding, whatever they hold.
    if in_graph:
        raw = _in_graph.masked(x.raw, x.dims, plan.fill) if plan.masked else x.raw
    else:
        raw = x.copy_masked(plan.fill).raw if plan.masked else x.raw
    out = _pooled(plan, raw)
    if plan.count:
        valid = x.raw.new_ones(()).expand(x.raw.shape)
        if plan.masked and in_graph:
            valid = _in_graph.masked(valid, x.dims, 0.0)
        elif plan.masked:
            valid = Tensor(valid, x.dims).copy_masked(0.0).raw
        # A window with no valid frame (an output padding frame) gives 0 / (1 / window), not 0 / 0.
        out = out / _pooled(plan, valid).clamp(min=1.0 / plan.window)
    if plan.unmerge is not None:
        out = out.reshape(plan.unmerge)
    for a, size in plan.narrow_out:
        out = out.narrow(a, 0, size)
    feature_dim = x.feature_dim
    if feature_dim is not None and id(feature_dim) in plan.spatial_ids:
        feature_dim = None
    return Tensor(out, out_dims, feature_dim=feature_dim), out_dims[plan.n_lead:]


def _check_rf_args(nd, dilation_rate, in_spatial_dims) -> None:
    caller = "dimtorch.pool()"
    if any(r != 1 for r in (dilation_rate if isinstance(dilation_rate, (tuple, list)) else (dilation_rate,))):
        raise NotImplementedError(f"{caller}: dilation_rate={dilation_rate!r} is not supported (only 1)")
    n = 1 if isinstance(in_spatial_dims, Dim) else len(in_spatial_dims)
    if nd is not None and nd != n:
        raise ValueError(f"{caller}: nd={nd} but {n} in_spatial_dims")


def pool(x: Tensor, /, *, nd: Optional[int] = None, mode: str, pool_size: Union[int, Sequence[int]],
         padding: Union[str, int, Sequence[int]] = "valid", dilation_rate: Union[int, Sequence[int]] = 1,
         strides: Optional[Union[int, Sequence[int]]] = None, in_spatial_dims: Union[Sequence[Dim], Dim],
         out_spatial_dims: Optional[Union[Sequence[Dim], Dim]] = None,
         use_mask: Optional[bool] = None) -> tuple[Tensor, tuple[Dim, ...]]:
    """Max or average pooling (F.max_pool*/F.avg_pool*) over 1, 2 or 3 spatial dims; returns (tensor,
    out_spatial_dims), the tensor over (x's other dims, *out_spatial_dims). `strides` defaults to
    `pool_size`. Output dims as dimtorch.conv() (same 'same' padding, int padding p: p frames on
    both sides of each sequence, lengths by dim math); `out_spatial_dims` as dimtorch.conv()'s
    (checked against the computed dims).

    Padding never counts: for mode="max", padding frames of dynamic spatial dims and the 'same'
    padding are -inf; for mode="avg", they are excluded from the count (the mean of each window's
    valid frames). Every valid output frame has at least one valid input frame in its window (int
    padding p >= pool_size can make windows of padding only: -inf for max, 0 for avg). With
    padding="valid" no window of a valid output frame reaches into padding, so x is not masked
    (output padding frames may then hold NaN from x's padding; they are padding).

    RETURNN frontend's signature: `nd`, if given, must be the number of spatial dims; dilation_rate
    other than 1 is not supported; `use_mask` changes nothing (padding never counts, see above).

    While tracing: the plan is made per call and cached nowhere, masks are built in the graph,
    padding is explicit (F.pad) and frames beyond the longest sequence are kept (padding)."""
    if nd is not None or dilation_rate != 1:
        _check_rf_args(nd, dilation_rate, in_spatial_dims)
    if _tracing.tracing():
        return _pool_in_graph(x, mode, pool_size, in_spatial_dims, strides, padding, out_spatial_dims)
    key = _plan_key(x, mode, pool_size, in_spatial_dims, strides, padding, out_spatial_dims)
    plan = None if key is None else _PLANS.get(key)
    if plan is not None:
        out_dims = tuple([r() for r in plan.out_refs])
        if None not in out_dims:  # None: a dim died and its callback is yet to drop the plan
            return _run(plan, x, out_dims)
    plan, out_spatial, spatial = _checked_plan(x, mode, pool_size, in_spatial_dims, strides, padding,
                                               out_spatial_dims, False)
    out_dims = tuple(x.dims[i] for i in plan.lead_pos) + out_spatial
    # A spatial dim that takes its size from data gets a new out dim each call: no plan to keep.
    if key is not None and all(d.size is not None or is_dynamic(d) for d in spatial):
        plan.out_refs = tuple(weakref.ref(d) for d in out_dims)
        _store(key, plan, x.dims + out_spatial)
    return _run(plan, x, out_dims)


def _checked_plan(x, mode, pool_size, in_spatial_dims, strides, padding, out_spatial_dims, in_graph: bool):
    """The argument checks, then the plan of the call and its out spatial dims."""
    caller = "dimtorch.pool()"
    check_tensor(x, caller)
    if mode not in ("max", "avg"):
        raise ValueError(f"{caller}: mode must be 'max' or 'avg', got {mode!r}")
    spatial = spatial_dims(caller, x, in_spatial_dims)
    n = len(spatial)
    ks = per_dim(caller, "pool_size", pool_size, n)
    strides = ks if strides is None else per_dim(caller, "strides", strides, n)
    padding = conv_padding(caller, padding, n)
    if not x.raw.is_floating_point():
        raise TypeError(f"{caller}: x must be floating, got {x.dtype}")
    plan, out_spatial = _make_plan(caller, x, mode, spatial, ks, strides, padding, in_graph)
    if out_spatial_dims is not None:
        lead = tuple(x.dims[i] for i in plan.lead_pos)
        out_spatial = given_out_spatial_dims(caller, out_spatial_dims, out_spatial, lead, not in_graph)
    return plan, out_spatial, spatial


def _pool_in_graph(x, mode, pool_size, in_spatial_dims, strides, padding, out_spatial_dims):
    """pool while tracing (see its docstring)."""
    plan, out_spatial, _ = _checked_plan(x, mode, pool_size, in_spatial_dims, strides, padding, out_spatial_dims,
                                         True)
    return _run(plan, x, tuple(x.dims[i] for i in plan.lead_pos) + out_spatial, True)
