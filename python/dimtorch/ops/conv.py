"""Convolution and transposed convolution over named spatial dims (dt.conv, dt.transposed_conv); lengths by dim math."""
from __future__ import annotations

import math
import weakref
from typing import Optional, Sequence, Union

import torch
import torch.nn.functional as F

from .._core import dim_cache as _dim_cache, in_graph as _in_graph, tracing as _tracing
from .._C import Dim, Tensor
from .conv_op import convolution
from .conv_args import (check_padding, conv_padding, given_out_spatial_dims, out_spatial_dim, per_dim, permuted,
                         plan_perm, same_pads, short_pads, spatial_dims, transposed_extra, transposed_out_dim)
from .._core.args import axis_of, check_tensor, dim_str, dims_str, repeats_a_dim

_CONV_FNS = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _conv2d_one_channel(raw, w, b, strides, padding, dilation, groups):
    """F.conv2d of a filter with one input channel (a spectrogram frontend's first conv): on the CPU as
    torch's im2col + matmul convolution (thnn_conv2d), whose forward and backward take 3-6x less time
    than oneDNN's there (8x1x8x80 by 32 3x3: 2.4 ms -> 0.4 ms; 16x1x200x80: 153 -> 45 ms). The C++ fast
    path (src/ops/conv.cpp) makes the same choice."""
    if raw.device.type == "cpu" and not torch.compiler.is_compiling():
        pad = (padding, padding) if type(padding) is int else padding
        return torch._C._nn.thnn_conv2d(raw, w, w.shape[2:], b, strides, pad)
    return F.conv2d(raw, w, b, strides, padding, dilation, groups)


def _conv2d_channels_last(raw, w, b, strides, padding, dilation, groups):
    """F.conv2d of a filter with more input channels, on the CPU in float32 with x channels-last, oneDNN's own
    layout: an NCHW input is reordered inside each call and its backward runs slower. The output keeps the
    layout, so a chain of convolutions converts once, and merging (time, feature, channels) after the last
    is a view (RETURNN's ConformerConvSubsample, 8x32x8x40 -> 64 -> 64 and back: its training step ~2.5%
    faster). The C++ fast path (src/ops/conv.cpp) makes the same choice."""
    if runs_channels_last(raw):
        raw = raw.contiguous(memory_format=torch.channels_last)
    return F.conv2d(raw, w, b, strides, padding, dilation, groups)


def runs_channels_last(raw: torch.Tensor) -> bool:
    """Whether 2-D convolutions over `raw` (float32 on the CPU, eagerly) take it channels-last, the rule of
    _conv2d_channels_last (and of src/ops/conv.cpp); a pool before such a conv writes that layout too
    (ops/pool_pairs.py)."""
    return raw.device.type == "cpu" and raw.dtype == torch.float32 and not torch.compiler.is_compiling()


_TRANSPOSED_CONV_FNS = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


# --- argument checks ------------------------------------------------------------------------------

def _check_x_args(caller: str, x, in_dim, in_spatial_dims) -> tuple:
    """The checks of x and its dims; returns the spatial dims."""
    check_tensor(x, caller)
    if not isinstance(in_dim, Dim):
        raise TypeError(f"{caller}: in_dim must be a Dim, got {type(in_dim).__name__}")
    axis_of(x, in_dim, caller, what="in_dim")
    spatial = spatial_dims(caller, x, in_spatial_dims)
    if any(d is in_dim for d in spatial):
        raise ValueError(f"{caller}: in_dim {dim_str(in_dim)} is also in in_spatial_dims ({dims_str(spatial)})")
    return spatial


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


def _channel_copy(caller: str, filter, channel: Dim, filter_size: tuple, size: int, what: str) -> Dim:
    """The filter's second channel dim when in_dim is out_dim (a tensor cannot name a dim twice):
    its one dim besides `channel` and the filter_size dims, static, of the channel's size."""
    check_tensor(filter, caller, what="filter")
    rest = [d for d in filter.dims if d is not channel and not any(d is k for k in filter_size)]
    if len(rest) != 1 or rest[0].size != size or not any(d is channel for d in filter.dims):
        raise ValueError(f"{caller}: out_dim is in_dim {dim_str(channel)}, so the filter names its {what} channels by "
                         f"another static dim of size {size}: dims ({dim_str(channel)}, that dim, "
                         f"{dims_str(filter_size)}); it has ({dims_str(filter.dims)})")
    return rest[0]


def _check_filter_dims(caller: str, filter, want: tuple) -> None:
    check_tensor(filter, caller, what="filter")
    if len(filter.dims) != len(want) or repeats_a_dim(filter.dims) or any(d not in want for d in filter.dims):
        raise ValueError(f"{caller}: filter must have dims ({dims_str(want)}), has ({dims_str(filter.dims)})")


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


def _spatial_arg(in_spatial_dims):
    """in_spatial_dims as given, or as a tuple when it is another iterable (read once: checks and
    layouts read it again)."""
    if in_spatial_dims is None or isinstance(in_spatial_dims, (Dim, list)):
        return in_spatial_dims
    try:
        return tuple(in_spatial_dims)
    except TypeError:
        return in_spatial_dims


# --- plans: what a call derives from the filter and the static arguments ---------------------------

class _Plan:
    """What conv/transposed_conv derive from the filter and the static arguments alone (checks,
    filter layout, torch arguments, output dim math), kept per filter Tensor, and the layout of the
    last x it met.

    /* A module's weight reads as the same Tensor object call after call (dt.nn.Module caches its
       view), and a training loop calls each layer with x of the same dims layout and raw shape
       (often the same dims): the checks and arithmetic then run once, and a call makes the torch
       calls and a few comparisons (tiny conv1d: ~35 us of Python per call before, 1.42x of the
       hand-written; now ~1.05x). The filter is held weakly: its plan goes with it. */
    """

    __slots__ = ("ref", "args", "n", "want", "aligned", "fn", "torch_args", "pre_pad", "need", "out_math",
                 "padding", "crops", "transposed", "layout")

    def matches(self, filter, args: tuple) -> bool:
        return self.ref() is filter and self.args == args


_CONV_PLANS: dict = {}
_TRANSPOSED_PLANS: dict = {}


def _forget(dim: Dim) -> None:
    """Drops the layouts made for tensors over `dim` (they narrow to its max length and mask by its
    lengths: new lengths bound to it)."""
    for plans in (_CONV_PLANS, _TRANSPOSED_PLANS):
        for plan in list(plans.values()):
            lay = plan.layout
            if lay is not None and (dim in lay.dims or dim in lay.out_dims):
                plan.layout = None


_dim_cache.on_forget(_forget)


def _cached_plan(plans: dict, caller: str, x, filter, args: tuple, in_spatial_dims, build) -> _Plan:
    """The plan of `filter` for `args`, made by `build(caller, filter, spatial, args)` when there
    is none (x's checks first, so that a bad x is reported before a bad filter)."""
    plan = plans.get(id(filter))
    if plan is not None and plan.matches(filter, args):
        return plan
    spatial = _check_x_args(caller, x, args[0], in_spatial_dims)
    plan = build(caller, filter, spatial, args)
    plan.layout = None
    key = id(filter)

    def forget(ref, plans=plans, key=key):
        entry = plans.get(key)
        if entry is not None and entry.ref is ref:
            plans.pop(key, None)  # another thread may have replaced or dropped it meanwhile

    plan.ref, plan.n = weakref.ref(filter, forget), len(spatial)
    plan.args = tuple(list(a) if type(a) is list else a for a in args)  # a caller's later change of a list
    plans[key] = plan
    return plan


def _conv_plan(caller: str, filter, spatial: tuple, args: tuple) -> _Plan:
    in_dim, out_dim, filter_size, strides, dilation, padding, groups = args
    n = len(spatial)
    filter_size = _filter_size(caller, filter_size, spatial)
    strides = per_dim(caller, "strides", strides, n)
    dilation = per_dim(caller, "dilation", dilation, n)
    padding = conv_padding(caller, padding, n)
    _check_channels(caller, in_dim, out_dim, groups)
    filter_in = in_dim if groups == 1 else in_dim // groups
    if filter_in is out_dim:
        filter_in = _channel_copy(caller, filter, out_dim, filter_size, in_dim.size, "input")
    want = (out_dim, filter_in) + filter_size
    _check_filter_dims(caller, filter, want)
    plan = _Plan()
    plan.want, plan.aligned, plan.fn, plan.transposed = want, filter.dims == want, _CONV_FNS[n], False
    if n == 2 and groups == 1 and all(v == 1 for v in dilation):
        plan.fn = _conv2d_one_channel if filter_in.size == 1 else _conv2d_channels_last
    k_effs = [dl * (fd.size - 1) + 1 for dl, fd in zip(dilation, filter_size)]
    plan.out_math, plan.crops = tuple(zip(k_effs, strides)), (0,) * n
    plan.pre_pad, torch_padding = None, 0
    plan.padding = (padding,) * n if type(padding) is str else padding
    if type(padding) is tuple:  # torch's own zero padding on both sides
        plan.need = tuple(max(1, k - 2 * p) for k, p in zip(k_effs, padding))
        torch_padding = padding
    elif padding == "same":
        plan.need = (1,) * n
        pads = same_pads(k_effs)
        if all(left == right for left, right in pads):
            torch_padding = tuple(left for left, _ in pads)
        else:
            plan.pre_pad = [p for pair in reversed(pads) for p in pair]
    else:
        plan.need = tuple(k_effs)
    plan.torch_args = (strides, torch_padding, dilation, groups)
    return plan


def _transposed_plan(caller: str, filter, spatial: tuple, args: tuple) -> _Plan:
    in_dim, out_dim, filter_size, strides, dilation, padding, groups, output_padding, remove_padding = args
    n = len(spatial)
    filter_size = _filter_size(caller, filter_size, spatial)
    strides = tuple(d.size for d in filter_size) if strides is None else per_dim(caller, "strides", strides, n)
    dilation = per_dim(caller, "dilation", dilation, n)
    check_padding(caller, padding)
    plan_padding = (padding,) * n
    output_padding = _optional_per_dim(caller, "output_padding", output_padding, n)
    remove_padding = per_dim(caller, "remove_padding", remove_padding, n, minimum=0)
    _check_channels(caller, in_dim, out_dim, groups)
    filter_out = out_dim if groups == 1 else out_dim // groups
    if filter_out is in_dim:
        filter_out = _channel_copy(caller, filter, in_dim, filter_size, out_dim.size, "output")
    want = (in_dim, filter_out) + filter_size
    _check_filter_dims(caller, filter, want)
    plan = _Plan()
    plan.want, plan.aligned, plan.fn, plan.transposed = want, filter.dims == want, _TRANSPOSED_CONV_FNS[n], True
    out_math, crops, torch_output_padding = [], [], []
    for fd, s, dl, p, r in zip(filter_size, strides, dilation, output_padding, remove_padding):
        k_eff = dl * (fd.size - 1) + 1
        if p is not None and p >= max(s, dl):
            raise ValueError(f"{caller}: output_padding must be smaller than the stride or the dilation, got "
                             f"output_padding={p}, stride={s}, dilation={dl}")
        extra, left = transposed_extra(k_eff, s, padding, p, r)
        # torch gives (T - 1) * s + k_eff (+ output_padding) frames: frames the result needs beyond
        # that (bias only, no input reaches them) come as torch's output_padding (< s by the above).
        torch_output_padding.append(max(left + extra - (k_eff - s), 0))
        out_math.append((s, extra))
        crops.append(left)
    plan.out_math, plan.crops, plan.need, plan.pre_pad = tuple(out_math), tuple(crops), (1,) * n, None
    plan.padding = plan_padding
    plan.torch_args = (strides, 0, tuple(torch_output_padding), groups, dilation)
    return plan


# --- layouts: what a call derives from x's dims and raw shape ---------------------------------------

class _Layout:
    """The steps from x's raw to torch's (N, C, *S) and from torch's result to the output, for one
    x dims tuple, spatial dims argument and raw shape; kept on the plan for the next call."""

    __slots__ = ("dims", "spatial_arg", "out_arg", "shape", "masked", "perm", "merge", "narrow_in", "fit_pad",
                 "narrow_out", "unmerge", "out_dims", "out_spatial", "taps")

    def matches(self, x: Tensor, in_spatial_dims, out_spatial_dims) -> bool:
        return (self.dims == x.dims and self.spatial_arg == in_spatial_dims and self.shape == x.raw.shape
                and (self.out_arg is out_spatial_dims or self.out_arg == out_spatial_dims))


def _new_layout(caller: str, plan: _Plan, x, in_dim: Dim, out_dim: Dim, in_spatial_dims, out_spatial_dims,
                in_graph: bool = False) -> _Layout:
    spatial = _check_x_args(caller, x, in_dim, in_spatial_dims)
    if len(spatial) != plan.n:
        _filter_size(caller, plan.args[2], spatial)  # raises: the filter has plan.n spatial dims
    if plan.transposed:
        for d in spatial:
            if d.size is None and d.lengths is None:
                raise ValueError(f"{caller}: spatial dim {dim_str(d)} takes its size from data; it needs lengths "
                                 f"or a size")
    dims, shape = x.dims, x.raw.shape
    nd = len(dims)
    pos = [dims.index(d) for d in spatial]
    ci = dims.index(in_dim)
    rest = [i for i in range(nd) if i != ci and i not in pos]
    order = rest + [ci] + pos
    lay = _Layout()
    lay.dims, lay.shape = dims, shape
    lay.spatial_arg = list(in_spatial_dims) if type(in_spatial_dims) is list else in_spatial_dims
    lay.out_arg = list(out_spatial_dims) if type(out_spatial_dims) is list else out_spatial_dims
    # Zeroed padding of x never reaches valid output frames or the filter's gradient.
    lay.masked = any(d.lengths is not None for d in spatial)
    lay.perm = plan_perm(order)
    lead = tuple(dims[i] for i in rest)
    lead_shape = tuple(shape[i] for i in rest)
    sizes = [shape[i] for i in pos]
    # torch wants one batch axis: x's other dims (lead) merge into it, and split again after.
    lay.merge = lay.unmerge = None
    if len(lead) != 1:
        lay.merge = (math.prod(lead_shape), shape[ci]) + tuple(sizes)
        lay.unmerge = lead_shape
    lay.narrow_in = []
    for i, d in enumerate(spatial):
        if d.lengths is not None and not in_graph and sizes[i] > d.get_max_size():
            sizes[i] = d.get_max_size()
            lay.narrow_in.append((2 + i, sizes[i]))
    lay.fit_pad = short_pads(caller, sizes, spatial, plan.need)
    lay.taps = None if plan.transposed or in_graph or lay.fit_pad is not None else _same_taps(plan, sizes)
    if plan.transposed:
        lay.out_spatial = tuple(transposed_out_dim(d, s, extra) for d, (s, extra) in zip(spatial, plan.out_math))
    else:
        lay.out_spatial = tuple(out_spatial_dim(d, k, s, p) for d, (k, s), p in zip(spatial, plan.out_math,
                                                                                      plan.padding))
    if out_spatial_dims is not None:
        lay.out_spatial = given_out_spatial_dims(caller, out_spatial_dims, lay.out_spatial, lead + (out_dim,),
                                                 not in_graph)
    lay.out_dims = lead + (out_dim,) + lay.out_spatial
    lay.narrow_out = None  # from the first result's shape (see _run)
    return lay


def _same_taps(plan: _Plan, sizes) -> Optional[tuple]:
    """For 'same' padding at stride and dilation 1 over axes shorter than the filter: (the filter's
    index of the taps that can meet a frame of x, F.pad's list for them), or None when every tap can.

    /* A tap meets only padding zeros when no output frame puts it on a frame of x (a 2-frame encoder
       under a Conformer's 32-tap depthwise filter: 3 of its 32 taps): it adds exact zeros to the
       output and gets an exact zero gradient, so dropping it changes no value, and the conv and its
       backward shrink with the filter (RETURNN's demo: the depthwise conv's forward and backward
       ~5x faster). Output frame t of the cropped filter [k0, k1] reads x's frame t + k - left, as
       the full filter's tap k does, with left' = left - k0 and right' = k1 - k0 - left' (<= right). */
    """
    strides, torch_padding, dilation, _groups = plan.torch_args
    if any(p != "same" for p in plan.padding) or any(v != 1 for v in strides) or any(v != 1 for v in dilation):
        return None
    index, pad = [slice(None), slice(None)], []
    cropped = False
    for (k, _s), size in zip(plan.out_math, sizes):
        left = (k - 1) // 2
        k0, k1 = max(0, left - size + 1), min(k - 1, left + size - 1)
        cropped = cropped or k1 - k0 + 1 < k
        index.append(slice(k0, k1 + 1))
        pad.append((left - k0, k1 - left))  # (left', right') per axis
    if not cropped:
        return None
    return tuple(index), [p for pair in reversed(pad) for p in pair]


def _narrow_out(out_shape, lay: _Layout, plan: _Plan, in_graph: bool = False) -> list:
    """(axis, start, size) of torch's result axes longer than the output dims: a window's frames
    beyond the longest sequence (all sequences shorter than one window), a transposed conv's crops.
    In graph, a dynamic out dim keeps every frame after its crop (its max length is data)."""
    steps = []
    for i, (d, crop) in enumerate(zip(lay.out_spatial, plan.crops)):
        have = out_shape[2 + i]
        if in_graph and d.lengths is not None:
            n = len(lay.out_spatial)
            if lay.fit_pad is not None and lay.fit_pad[2 * (n - 1 - i) + 1] > 0:
                # The axis was shorter than one window (a raw size the trace specializes): no sequence has a
                # frame of output, so the fitted window's frame goes, as eagerly (narrowed to the max length).
                steps.append((2 + i, 0, 0))
            elif crop:
                steps.append((2 + i, crop, have - crop))
            continue
        size = d.size if d.size is not None else d.get_max_size() if d.lengths is not None else have
        if have != size:
            steps.append((2 + i, min(crop, have - size), size))
    return steps


def _run_in_graph(caller: str, build, x, filter, args: tuple, in_spatial_dims, out_spatial_dims, bias,
                  padding_zeroed: bool = False):
    """The call while tracing: the plan and layout made for this call and kept nowhere (the caches
    are keyed by object ids and hold host sizes and lengths), x's padding masked in the graph, no
    narrowing to max lengths."""
    spatial = _check_x_args(caller, x, args[0], in_spatial_dims)
    plan = build(caller, filter, spatial, args)
    plan.n, plan.args = len(spatial), args
    in_dim, out_dim = args[0], args[1]
    lay = _new_layout(caller, plan, x, in_dim, out_dim, in_spatial_dims, out_spatial_dims, in_graph=True)
    return _apply(caller, plan, lay, x, filter, out_dim, bias, True, padding_zeroed)


def _run(caller: str, plan: _Plan, x, filter: Tensor, in_dim: Dim, out_dim: Dim, in_spatial_dims, out_spatial_dims,
         bias, padding_zeroed: bool = False):
    """The call: x through plan's torch function with x's layout (made or reused)."""
    lay = plan.layout
    if lay is None or not isinstance(x, Tensor) or not lay.matches(x, in_spatial_dims, out_spatial_dims):
        lay = plan.layout = _new_layout(caller, plan, x, in_dim, out_dim, in_spatial_dims, out_spatial_dims)
    return _apply(caller, plan, lay, x, filter, out_dim, bias, False, padding_zeroed)


def _apply(caller: str, plan: _Plan, lay: _Layout, x, filter: Tensor, out_dim: Dim, bias, in_graph: bool,
           padding_zeroed: bool = False):
    """x through plan's torch function with layout `lay` (x's padding zeroed first unless padding_zeroed)."""
    if bias is None:
        b = None
    elif isinstance(bias, Tensor) and len(bias.dims) == 1 and bias.dims[0] is out_dim:
        b = bias.raw
    else:
        check_tensor(bias, caller, what="bias")
        raise ValueError(f"{caller}: bias must have dims ({dim_str(out_dim)}), has ({dims_str(bias.dims)})")
    if not lay.masked or padding_zeroed:
        raw = x.raw
    elif in_graph:
        raw = _in_graph.masked(x.raw, x.dims, 0.0)
    else:
        raw = x.copy_masked(0).raw
    raw = permuted(raw, lay.perm)
    if lay.merge is not None:
        raw = raw.reshape(lay.merge)
    for a, size in lay.narrow_in:
        raw = raw.narrow(a, 0, size)
    if lay.fit_pad is not None:  # all sequences shorter than one window: their result is narrowed to 0
        raw = F.pad(raw, lay.fit_pad)
    w = filter.raw if plan.aligned else filter.raw_aligned(plan.want)
    if lay.taps is not None:  # a short input: the taps that meet it, padded for them alone
        index, pads = lay.taps
        w, groups = w[index], plan.torch_args[3]
        if plan.n == 1 and w.shape[1] == 1 and groups == w.shape[0] == raw.shape[1]:
            # depthwise: torch's depthwise conv1d costs ~0.3-2 ms a call for any size on the CPU; as
            # windows times taps it is a few small kernels (forward and backward); src/ops/conv.cpp runs the
            # same ops for this case
            out = (F.pad(raw, pads).unfold(-1, w.shape[-1], 1) * w[:, 0, None, :]).sum(-1)
            if b is not None:
                out = out + b[:, None]
        else:
            out = plan.fn(F.pad(raw, pads), w, b, 1, 0, 1, groups)
    else:
        if plan.pre_pad is not None:
            raw = F.pad(raw, plan.pre_pad)
        out = _conv_op_in_graph(plan, raw, w, b) if in_graph and raw.device.type == "cpu" else \
            plan.fn(raw, w, b, *plan.torch_args)
    if in_graph:
        narrow_out = _narrow_out(out.shape, lay, plan, True)
    else:
        if lay.narrow_out is None:
            lay.narrow_out = _narrow_out(out.shape, lay, plan)
        narrow_out = lay.narrow_out
    for a, start, size in narrow_out:
        out = out.narrow(a, start, size)
    if lay.unmerge is not None:
        out = out.reshape(lay.unmerge + tuple(out.shape[1:]))
    return Tensor(out, lay.out_dims, feature_dim=out_dim), lay.out_spatial


def _conv_op_in_graph(plan: _Plan, raw: torch.Tensor, w: torch.Tensor, b) -> torch.Tensor:
    """plan.fn of a convolution while tracing on the CPU, as dimtorch::convolution (ops/conv_op.py): torch's
    fake convolution would guard on the CPU backend that the batch size selects (a second graph at 16
    sequences; seen with 1-D convolutions and with the 2-D ones of RETURNN's ConformerConvSubsample)."""
    n = plan.n
    if plan.transposed:
        strides, padding, output_padding, groups, dilation = plan.torch_args
    else:
        (strides, padding, dilation, groups), output_padding = plan.torch_args, (0,) * n
    padding = [padding] * n if type(padding) is int else list(padding)
    return convolution(raw, w, b, list(strides), padding, list(dilation), plan.transposed, list(output_padding), groups)


# --- the ops ------------------------------------------------------------------------------------------

def _rf_args(caller: str, strides, dilation, dilation_rate, groups) -> tuple:
    """(strides, dilation, groups) from RETURNN frontend's defaults (None: 1) and its dilation_rate."""
    if dilation_rate is not None:
        if dilation is not None:
            raise TypeError(f"{caller}: give dilation or dilation_rate (RETURNN frontend's name), not both")
        dilation = dilation_rate
    return (1 if strides is None else strides, 1 if dilation is None else dilation, 1 if groups is None else groups)


def conv(x: Tensor, /, filter: Tensor, *, in_dim: Dim, out_dim: Dim, in_spatial_dims: Sequence[Dim],
         out_spatial_dims: Optional[Sequence[Dim]] = None, filter_size: Sequence[Dim],
         padding: Union[str, int, Sequence[int]] = "valid", strides: Optional[Union[int, Sequence[int]]] = None,
         dilation_rate: Optional[Union[int, Sequence[int]]] = None, groups: Optional[int] = None,
         bias: Optional[Tensor] = None, use_mask: Optional[bool] = None,
         dilation: Optional[Union[int, Sequence[int]]] = None, padding_zeroed: bool = False
         ) -> tuple[Tensor, tuple[Dim, ...]]:
    """1-D, 2-D or 3-D convolution (F.conv1d/2d/3d) of x over `in_spatial_dims`, contracting `in_dim`;
    returns (tensor, out_spatial_dims), the tensor over (x's other dims, out_dim, *out_spatial_dims).

    `filter` has dims (out_dim, in_dim // groups, *filter_size) in any order (`in_dim` itself when
    groups == 1; when out_dim is in_dim, another static dim of in_dim's size names the filter's input
    channels, e.g. Conv1d's filter_in_dim); `filter_size` are static Dims; `bias` has dims (out_dim,). All dims of x other
    than in_dim and the spatial dims are batch dims (merged into one axis for torch).

    Padding of dynamic spatial dims is zeroed first. Output spatial dims come from dim math, so
    their lengths are exact per sequence and computed on the host (k_eff = dilation * (k - 1) + 1):
    - padding="valid": ceildiv(T - (k_eff - 1), s), i.e. (T - k_eff) // s + 1, 0 when T < k_eff.
    - padding="same": ceildiv(T, s). The padding is always k_eff - 1 frames in total, left =
      (k_eff - 1) // 2 and right the rest, whatever T and the stride (RETURNN's consistent 'same'
      padding; for stride 1 this is torch's padding='same'). Output frame t then sees input frames
      t*s - left + j*dilation for every sequence alike, so each sequence gets what it gets alone
      (batch independence); unlike TF's 'same' with stride > 1, the padding does not depend on T.
    - padding an int p (or one per spatial dim): p zero frames on both sides of each sequence (torch's
      padding=p; the right ones after the sequence's own end, its zeroed padding), then as "valid":
      (T + 2p - k_eff) // s + 1.
    Output padding frames hold garbage (bias and partial sums), as padding may.

    `out_spatial_dims` (RETURNN's): dims to name the output's spatial axes instead of the computed
    ones; each must be the computed dim or have its size (static) or its lengths (dynamic, compared
    on the host), else a ValueError names both.

    RETURNN frontend's signature: `filter` may be given by keyword, strides/groups None mean 1,
    `dilation_rate` is `dilation` (give one), and `use_mask` changes nothing: x's padding is always
    zeroed (rf's use_mask=False differs only where its result depends on the batch).

    `padding_zeroed=True` is the caller's promise that x's padding frames hold zeros already (e.g. zeroed
    by a multiplication where they are known finite, a third of a `where`'s cost): they are not zeroed
    again. Padding that holds anything else then reaches the valid frames of the result.

    While tracing: plans and layouts are made per call and cached nowhere, x's padding is masked
    in the graph, and the output keeps torch's frames beyond the longest sequence (padding)."""
    caller = "dimtorch.conv()"
    if type(padding_zeroed) is not bool:
        raise TypeError(f"{caller}: padding_zeroed must be a bool, got {padding_zeroed!r}")
    strides, dilation, groups = _rf_args(caller, strides, dilation, dilation_rate, groups)
    if type(in_spatial_dims) is not tuple:
        in_spatial_dims = _spatial_arg(in_spatial_dims)
    args = (in_dim, out_dim, filter_size, strides, dilation, padding, groups)
    if _tracing.tracing():
        return _run_in_graph(caller, _conv_plan, x, filter, args, in_spatial_dims, out_spatial_dims, bias,
                             padding_zeroed)
    plan = _cached_plan(_CONV_PLANS, caller, x, filter, args, in_spatial_dims, _conv_plan)
    return _run(caller, plan, x, filter, in_dim, out_dim, in_spatial_dims, out_spatial_dims, bias, padding_zeroed)


def transposed_conv(x: Tensor, /, filter: Tensor, *, in_dim: Dim, out_dim: Dim, in_spatial_dims: Sequence[Dim],
                    out_spatial_dims: Optional[Sequence[Dim]] = None, filter_size: Sequence[Dim],
                    padding: str = "valid", remove_padding: Union[int, Sequence[int]] = 0,
                    output_padding: Optional[Union[int, Sequence[Optional[int]]]] = None,
                    strides: Optional[Union[int, Sequence[int]]] = None, bias: Optional[Tensor] = None,
                    use_mask: Optional[bool] = None, dilation: Union[int, Sequence[int]] = 1,
                    groups: int = 1) -> tuple[Tensor, tuple[Dim, ...]]:
    """1-D, 2-D or 3-D transposed convolution (F.conv_transpose1d/2d/3d) of x over `in_spatial_dims`;
    returns (tensor, out_spatial_dims), the tensor over (x's other dims, out_dim, *out_spatial_dims).

    `filter` has dims (in_dim, out_dim // groups, *filter_size) in any order (`out_dim` itself when
    groups == 1; another static dim of its size when out_dim is in_dim; torch's layout); `filter_size` are static Dims; `bias` (out_dim,). `strides`
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
    crop is the same for all sequences, so each sequence gets what it gets alone.
    `out_spatial_dims`: as dt.conv's (checked against the computed dims). `use_mask`: as dt.conv's
    (x's padding is always zeroed).
    While tracing, as dt.conv: nothing cached, masks in the graph, frames beyond the longest
    sequence kept (after the left crop)."""
    caller = "dimtorch.transposed_conv()"
    if type(in_spatial_dims) is not tuple:
        in_spatial_dims = _spatial_arg(in_spatial_dims)
    args = (in_dim, out_dim, filter_size, strides, dilation, padding, groups, output_padding, remove_padding)
    if _tracing.tracing():
        return _run_in_graph(caller, _transposed_plan, x, filter, args, in_spatial_dims, out_spatial_dims, bias)
    plan = _cached_plan(_TRANSPOSED_PLANS, caller, x, filter, args, in_spatial_dims, _transposed_plan)
    return _run(caller, plan, x, filter, in_dim, out_dim, in_spatial_dims, out_spatial_dims, bias)
