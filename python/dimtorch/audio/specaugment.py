"""SpecAugment (Park et al. 2019, https://arxiv.org/abs/1904.08779) as RETURNN frontend's rf.audio.specaugment:
random time and feature masks per sequence, inside each sequence's own frames, drawn on x's device.

No device value is read on the host: the number of mask slots is a host bound (from the lengths kept on the
host), each sequence's count and its spans are drawn on the device and gated there (rf's static-traceable
form; rf's eager form draws the counts on the CPU and reads their max)."""
from __future__ import annotations

from typing import Collection, Optional, Tuple, Union

import torch

from .. import _C
from .._core import tracing as _tracing
from .._C import Dim, Tensor, where
from .._core.args import axis_of, check_tensor, dim_str, dims_arg, dims_str
from ..ops._support import names_errors


def _int_arg(caller: str, what: str, value, minimum: int = 0) -> int:
    if type(value) is not int or value < minimum:
        raise TypeError(f"{caller}: {what} must be an int >= {minimum}, got {value!r}")
    return value


def _per_batch(caller: str, what: str, value, batch: tuple, device):
    """An int as it is, or a Tensor's raw aligned to `batch` (size 1 for batch dims it lacks) on `device`."""
    if type(value) is int:
        return value
    if not isinstance(value, Tensor) or value.raw.is_floating_point() or value.dtype == "bool":
        raise TypeError(f"{caller}: {what} must be an int or an integer Tensor over batch dims, got {value!r}")
    if not all(d in batch for d in value.dims):  # (Dim equality is identity)
        raise ValueError(f"{caller}: {what} has dims ({dims_str(value.dims)}) beyond the batch dims ({dims_str(batch)})")
    raw = value.raw_aligned(batch)
    return raw if raw.device == device else raw.to(device, non_blocking=True)


_MASK, _LENGTHS = 0, 2  # kinds of dimtorch._C._dim_cached_raw (src/core/mask.h)


def _lengths_positions(caller: str, axis: Dim, batch: tuple) -> tuple:
    """Positions in `batch` of the dims axis's lengths vary over (Dim equality is identity)."""
    lengths_dims = axis.lengths.dims
    if not all(d in batch for d in lengths_dims):
        raise ValueError(f"{caller}: the lengths of {dim_str(axis)} vary over dims that are not batch dims here "
                         f"({dims_str(lengths_dims)}; batch dims: {dims_str(batch)})")
    return tuple(batch.index(d) for d in lengths_dims)


def _lengths(caller: str, axis: Dim, batch: tuple, device, traced: bool):
    """The frames of `axis` per sequence: its static size, or its lengths aligned to `batch` (the device copy
    cached on the dim; made in the graph while `traced`)."""
    if axis.lengths is None:
        return axis.size
    pos = _lengths_positions(caller, axis, batch)
    if traced:
        return _tracing.lengths_raw(axis, batch, device)
    return _C._dim_cached_raw(_LENGTHS, axis, pos, len(batch), 0, device)


def _frames(caller: str, axis: Dim, batch: tuple, shape: tuple, device, traced: bool) -> torch.Tensor:
    """bool over (*batch, axis) (size 1 on batch dims the lengths lack), True on each sequence's frames of the
    dynamic `axis` (cached on the dim; made in the graph while `traced`)."""
    layout = batch + (axis,)
    if traced:
        return _tracing.mask_raw(axis, layout, shape, device)
    return _C._dim_cached_raw(_MASK, axis, _lengths_positions(caller, axis, batch) + (len(batch),), len(layout),
                              shape[-1], device)


def _rand(shape, device, generator) -> torch.Tensor:
    if generator is None:  # (rand's overload with a generator takes no symbolic sizes)
        return torch.rand(shape, device=device)
    return torch.rand(shape, device=device, generator=generator)


def _draw_ints(lo, hi, shape, device, generator) -> torch.Tensor:
    """Uniform ints in [lo, hi] (inclusive; ints or raws broadcastable to `shape`); below lo where hi < lo
    (a count that then gates every slot off). (Truncation is floor here: lo + a draw in [0, hi - lo + 1) is not
    negative for counts >= 0; a negative count gates every slot off either way.)"""
    return _rand(shape, device, generator).mul_(hi - lo + 1).add_(lo).long()


def _spans(pos: torch.Tensor, amount: torch.Tensor, length, n_axis: int) -> torch.Tensor:
    """bool (*pos.shape, n_axis): True on [pos, min(pos + amount, length)) (amount 0: no frame)."""
    end = torch.minimum(pos + amount, length) if isinstance(length, torch.Tensor) else (pos + amount).clamp(max=length)
    frames = torch.arange(n_axis, device=pos.device)
    return (frames >= pos.unsqueeze(-1)) & (frames < end.unsqueeze(-1))


@names_errors("dimtorch.audio.random_mask()")
def random_mask(x: Tensor, *, mask_axis: Dim, broadcast_axis: Union[Dim, Collection[Dim]], min_num: Union[int, Tensor],
                max_num: Union[int, Tensor], max_dims: Union[int, Tensor], mask_value: Union[int, float, Tensor] = 0.0,
                max_num_bound: Optional[int] = None, generator: Optional[torch.Generator] = None) -> Tensor:
    """x with random spans of `mask_axis` set to mask_value (RETURNN frontend's). The dims of x other than
    mask_axis and broadcast_axis are batch dims: each of their entries gets its own masks, the same over
    broadcast_axis. Per entry: num masks, num uniform in [min_num, max_num] (ints, or integer Tensors over
    batch dims), at distinct random frames within the entry's own length of mask_axis, each spanning 1 to
    max_dims frames (uniform), cut at the entry's end: frames of mask_axis past an entry's length are never
    masked (frames of a dynamic broadcast_axis are, padding included, as in rf).

    The mask slots are max_num, or max_num_bound (a host int) when max_num is a Tensor; a Tensor max_num on
    the CPU gives its max itself (a host read, no device sync). A Tensor max_num on another device needs
    max_num_bound. All draws use `generator` (on x's device) when given: repeatable."""
    cond = _random_mask_cond("dimtorch.audio.random_mask()", x, mask_axis, broadcast_axis, min_num, max_num, max_dims,
                             max_num_bound, generator)
    return x if cond is None else where(cond, mask_value, x)


def _random_mask_cond(caller: str, x: Tensor, mask_axis: Dim, broadcast_axis, min_num, max_num, max_dims,
                      max_num_bound: Optional[int], generator) -> Optional[Tensor]:
    """random_mask's masked frames: a bool Tensor over x's batch dims and mask_axis (None: no mask slots)."""
    check_tensor(x, caller)
    axis_of(x, mask_axis, caller, what="mask_axis")
    broadcast = dims_arg(broadcast_axis, caller, "broadcast_axis")
    for d in broadcast:
        axis_of(x, d, caller, what="broadcast_axis entry")
        if d is mask_axis:
            raise ValueError(f"{caller}: broadcast_axis contains mask_axis {dim_str(mask_axis)}")
    batch = tuple(d for d in x.dims if d is not mask_axis and d not in broadcast)  # (Dim equality is identity)
    device, shape = x.raw.device, x.raw.shape
    bshape = tuple(shape[x.dims.index(d)] for d in batch)
    n_axis = shape[x.dims.index(mask_axis)]
    if max_num_bound is not None and not isinstance(max_num_bound, torch.SymInt):  # (a traced raw size: symbolic)
        _int_arg(caller, "max_num_bound", max_num_bound)
    if not isinstance(max_dims, Tensor):
        _int_arg(caller, "max_dims", max_dims, minimum=1)
    fixed = type(min_num) is int and type(max_num) is int and min_num == max_num
    traced = _tracing.tracing()
    if type(max_num) is int:
        k = _int_arg(caller, "max_num", max_num)
    elif max_num_bound is not None:
        k = max_num_bound
    elif isinstance(max_num, Tensor) and max_num.raw.device.type == "cpu" and not traced:
        k = int(max_num.raw.max()) if max_num.raw.numel() else 0
    else:
        raise ValueError(f"{caller}: max_num is a Tensor on {getattr(max_num.raw, 'device', '?')}: give "
                         f"max_num_bound (a host int), so that no device value is read")
    if type(min_num) is int:
        _int_arg(caller, "min_num", min_num)
    lo, hi = _per_batch(caller, "min_num", min_num, batch, device), _per_batch(caller, "max_num", max_num, batch, device)
    amount = _per_batch(caller, "max_dims", max_dims, batch, device)
    if isinstance(amount, torch.Tensor):
        amount = amount.unsqueeze(-1)
    length = _lengths(caller, mask_axis, batch, device, traced)
    k = min(k, n_axis)
    if k <= 0:
        return None
    # One draw for all of an entry's uniforms: the frames' scores, the slots' amounts, and its count.
    u = _rand(bshape + (n_axis + k + (0 if fixed else 1),), device, generator)
    scores = u[..., :n_axis]
    if isinstance(length, torch.Tensor):  # padding frames rank below every valid one
        scores = torch.where(_frames(caller, mask_axis, batch, scores.shape, device, traced), scores, -1.0)
    pos = torch.topk(scores, k, dim=-1, sorted=True).indices  # distinct frames, valid ones first
    slots = u[..., n_axis:n_axis + k].mul(amount).long().add_(1)  # amounts uniform in [1, max_dims]
    if not fixed:  # the slots beyond each entry's own count take no frame
        num = u[..., -1].mul(hi - lo + 1).add_(lo).long()  # (see _draw_ints)
        slots = slots * (torch.arange(k, device=device) < num.unsqueeze(-1))
    cond = _spans(pos, slots, length.unsqueeze(-1) if isinstance(length, torch.Tensor) else length,
                  n_axis)  # (*batch, k, mask_axis)
    return Tensor(cond.any(-2), batch + (mask_axis,))


@names_errors("dimtorch.audio.mask()")
def mask(x: Tensor, *, mask_axis: Dim, pos: Tensor, max_amount: Union[int, Tensor],
         mask_value: Union[int, float, Tensor] = 0.0, generator: Optional[torch.Generator] = None) -> Tensor:
    """x with the frames [pos, pos + amount) of mask_axis set to mask_value (RETURNN frontend's): pos an
    integer Tensor over batch dims of x, amount uniform in [1, max_amount] per entry of pos, cut at each
    sequence's own end; dims of x not in pos (besides mask_axis) are broadcast over."""
    caller = "dimtorch.audio.mask()"
    check_tensor(x, caller)
    check_tensor(pos, caller, what="pos")
    axis_of(x, mask_axis, caller, what="mask_axis")
    if pos.raw.is_floating_point() or pos.dtype == "bool":
        raise TypeError(f"{caller}: pos must be an integer Tensor, got {pos.dtype}")
    for d in pos.dims:
        if d is mask_axis:
            raise ValueError(f"{caller}: pos must not have mask_axis {dim_str(mask_axis)}")
        axis_of(x, d, caller, what="pos dim")
    if not isinstance(max_amount, Tensor):
        _int_arg(caller, "max_amount", max_amount, minimum=1)
    device = x.raw.device
    batch = pos.dims
    raw = pos.raw if pos.raw.device == device else pos.raw.to(device, non_blocking=True)
    amount = _per_batch(caller, "max_amount", max_amount, batch, device)
    length = _lengths(caller, mask_axis, batch, device, _tracing.tracing())
    pos = raw.long()
    cond = _spans(pos, _draw_ints(1, amount, pos.shape, device, generator), length,
                  x.raw.shape[x.dims.index(mask_axis)])
    return where(Tensor(cond, batch + (mask_axis,)), mask_value, x)


def _schedule(caller: str, global_train_step_dependent: bool, step, steps) -> Tuple[int, int, int]:
    """RETURNN's step factors (1 once the step reaches steps[i], else 0; all 1 without the schedule)."""
    if not global_train_step_dependent:
        return 1, 1, 1
    if step is None:
        raise ValueError(f"{caller}: dimtorch has no run context: give step= (the global train step, an int), "
                         f"or global_train_step_dependent=False")
    if type(step) is not int:
        raise TypeError(f"{caller}: step must be an int (the global train step), got {type(step).__name__}")
    if len(steps) != 3 or not all(type(s) is int for s in steps):
        raise TypeError(f"{caller}: steps must be 3 ints, got {steps!r}")
    return tuple(int(step >= s) for s in steps)


@names_errors("dimtorch.audio.specaugment()")
def specaugment(x: Tensor, *, spatial_dim: Dim, feature_dim: Optional[Dim] = None,
                global_train_step_dependent: bool = True, only_on_train: bool = True,
                max_consecutive_spatial_dims: int = 20, max_consecutive_feature_dims: Optional[int] = None,
                num_spatial_mask_factor: int = 100, num_masks_per_seq: Optional[bool] = None,
                steps: Tuple[int, int, int] = (0, 1000, 2000), step: Optional[int] = None, training: bool = True,
                generator: Optional[torch.Generator] = None) -> Tensor:
    """SpecAugment as RETURNN frontend's: time masks, then feature masks, value 0, per sequence.

    With step factors s_i = [step >= steps[i]] (all 1 when not global_train_step_dependent), per
    sequence of length T: time masks, a count uniform in [min(s1 + s2, T), min(max(T // num_spatial_mask_factor,
    2) * (s0 + s1 + 2 s2), T)], each 1 to max_consecutive_spatial_dims frames, the same for all features;
    feature masks, a count uniform in [s1 + s2, 2 s0 + s1 + 2 s2], each 1 to max_consecutive_feature_dims
    (default feature size // 5) features, the same for all frames. Masks lie within each sequence's frames;
    T is each sequence's own length (num_masks_per_seq=None or True: rf's newest behavior; False: the
    longest sequence's, rf's older batch-dependent count range).

    dimtorch has no run context: `step` (the global train step, an int) is needed when
    global_train_step_dependent, and `training` says whether this is a training step (masks only then,
    unless only_on_train=False). `generator` (on x's device) makes the draws repeatable. No device value is
    read on the host (see dt.audio.random_mask)."""
    caller = "dimtorch.audio.specaugment()"
    check_tensor(x, caller)
    axis_of(x, spatial_dim, caller, what="spatial_dim")
    if type(training) is not bool or type(only_on_train) is not bool:
        raise TypeError(f"{caller}: training and only_on_train must be bools, got {training!r}, {only_on_train!r}")
    s0, s1, s2 = _schedule(caller, global_train_step_dependent, step, steps)
    if only_on_train and not training:
        return x
    if feature_dim is None:
        feature_dim = x.feature_dim
        if feature_dim is None:
            raise ValueError(f"{caller}: x has no feature_dim; give feature_dim")
    axis_of(x, feature_dim, caller, what="feature_dim")
    if feature_dim.size is None:
        raise ValueError(f"{caller}: feature_dim must be static, got {dim_str(feature_dim)}")
    if max_consecutive_feature_dims is None:
        max_consecutive_feature_dims = feature_dim.size // 5
    _int_arg(caller, "max_consecutive_feature_dims", max_consecutive_feature_dims)
    _int_arg(caller, "max_consecutive_spatial_dims", max_consecutive_spatial_dims)
    factor = _int_arg(caller, "num_spatial_mask_factor", num_spatial_mask_factor)
    per_seq = num_masks_per_seq is None or bool(num_masks_per_seq)
    # Both kinds of masks are drawn first and applied in one pass over x (each a pass of its own: ~15% slower
    # on (8, 50, 256)); the same result, since both set 0 and neither depends on x's values.
    conds = []
    if factor > 0 and max_consecutive_spatial_dims > 0:
        c = s0 + s1 + 2 * s2
        if spatial_dim.lengths is None:
            longest = spatial_dim.size
        elif not _tracing.tracing():
            longest = spatial_dim.get_max_size()  # (kept on the host: no device read)
        elif per_seq:  # no host lengths in a graph: the raw axis bounds the slots (each sequence's count is drawn)
            longest = x.raw.shape[x.dims.index(spatial_dim)]
        else:
            raise NotImplementedError(f"{caller}: num_masks_per_seq=False takes the count range from the longest "
                                      f"sequence, a host value a graph does not have; use num_masks_per_seq=None")
        if per_seq and spatial_dim.lengths is not None:
            lengths = spatial_dim.get_size_tensor(x.raw.device)
            lo = Tensor(lengths.raw.clamp(max=s1 + s2), lengths.dims)
            hi = Tensor(torch.minimum((lengths.raw // factor).clamp(min=2) * c, lengths.raw), lengths.dims)
        else:
            lo, hi = min(s1 + s2, longest), min(max(longest // factor, 2) * c, longest)
        conds.append(_random_mask_cond(caller, x, spatial_dim, feature_dim, lo, hi, max_consecutive_spatial_dims,
                                       min(max(longest // factor, 2) * c, longest), generator))
    if max_consecutive_feature_dims > 0:
        conds.append(_random_mask_cond(caller, x, feature_dim, spatial_dim, s1 + s2, 2 * s0 + s1 + 2 * s2,
                                       max_consecutive_feature_dims, None, generator))
    conds = [m for m in conds if m is not None]
    if not conds:
        return x
    if len(conds) == 1:
        return where(conds[0], 0.0, x)
    layout = tuple(d for d in x.dims if any(d in m.dims for m in conds))  # (Dim equality is identity)
    both = conds[0].raw_aligned(layout) | conds[1].raw_aligned(layout)
    return where(Tensor(both, layout), 0.0, x)


__all__ = ["specaugment", "random_mask", "mask"]
