"""pad: constant, reflect, replicate and circular padding; a dynamic dim is padded about each sequence's own end."""
from __future__ import annotations

from typing import Optional, Sequence, Union

import torch
import torch.nn.functional as F

from .. import _C
from .._core import in_graph as _in_graph, tracing as _tracing
from .._C import Dim, Tensor
from .._core.args import axis_of, check_tensor, dim_str, dims_arg, dims_str, repeats_a_dim

_CALLER = "dimtorch.pad()"
_MASK = 0  # kind of dimtorch._C._dim_cached_raw (src/core/mask.h)
_MODES = ("constant", "reflect", "replicate", "circular")


def _pairs(axes: tuple, padding) -> list:
    """One (left, right) pair of ints >= 0 per axis, from (l, r) for one axis or a sequence of pairs."""
    if len(axes) == 1 and isinstance(padding, (tuple, list)) and len(padding) == 2 and all(
            isinstance(p, int) for p in padding):
        padding = [padding]
    try:
        pairs = [tuple(p) for p in padding]
    except TypeError:
        raise TypeError(f"{_CALLER}: padding must be a (left, right) pair per axis, got {padding!r}") from None
    if len(pairs) != len(axes):
        raise ValueError(f"{_CALLER}: {len(pairs)} padding pairs for {len(axes)} axes ({dims_str(axes)})")
    for d, p in zip(axes, pairs):
        if len(p) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in p):
            raise TypeError(f"{_CALLER}: padding of {dim_str(d)} must be a pair of ints, got {p!r}")
        if p[0] < 0 or p[1] < 0:
            raise ValueError(f"{_CALLER}: padding of {dim_str(d)} is {p}; negative padding (cropping) is "
                             f"not supported, use slicing")
    return pairs


def _out_dim(d: Dim, left: int, right: int) -> Dim:
    if d.size is None and d.lengths is None:
        return d if left == right == 0 else Dim(None, name=f"{d.name}+pad")
    return d + (left + right)  # dim math: the same object as left + d + right


def _check_sizes(d: Dim, left: int, right: int, shortest: int, mode: str) -> None:
    """torch's limits of each mode, applied to the shortest sequence (or the size) of d."""
    what = f"{dim_str(d)} has a sequence of length {shortest}" if d.lengths is not None else \
        f"{dim_str(d)} has size {shortest}"
    if mode == "reflect" and max(left, right) >= shortest:
        raise ValueError(f"{_CALLER}: mode 'reflect' needs padding smaller than the length of every sequence, "
                         f"but {what} for padding {(left, right)}")
    if mode == "replicate" and shortest < 1:
        raise ValueError(f"{_CALLER}: mode 'replicate' needs at least one frame to repeat, but {what} for "
                         f"padding {(left, right)}")
    if mode == "circular" and max(left, right) > shortest:
        raise ValueError(f"{_CALLER}: mode 'circular' needs padding no larger than the length of every "
                         f"sequence (it wraps around once), but {what} for padding {(left, right)}")


def _source_frames(p: torch.Tensor, n: torch.Tensor, mode: str) -> torch.Tensor:
    """For positions p relative to a sequence's start (p < 0 or p >= n on the padding), the frame
    of the n-frame sequence that `mode` copies there. Padding never exceeds torch's limits here."""
    if mode == "reflect":
        p = p.abs()
        return torch.where(p < n, p, 2 * (n - 1) - p)
    if mode == "replicate":
        return torch.minimum(p.clamp(min=0), n - 1)
    return torch.remainder(p, n)  # circular


def _pad_static_modes(raw: torch.Tensor, items: list, mode: str) -> torch.Tensor:
    """Non-constant padding of static axes, items = [(axis, left, right)]: one F.pad when the axes
    are the last k <= 3 (the layouts torch's kernels take), else one index_select per axis."""
    nd, k = raw.dim(), len(items)
    by_axis = {a: (left, right) for a, left, right in items}
    if k <= 3 and sorted(by_axis) == list(range(nd - k, nd)) and raw.dtype != torch.bool:
        flat = [v for a in reversed(range(nd - k, nd)) for v in by_axis[a]]
        lead = raw.shape[:nd - k]
        out = F.pad(raw.reshape((-1,) + raw.shape[nd - k:]), flat, mode=mode)
        return out.reshape(lead + out.shape[1:])
    for a, left, right in items:
        n = raw.shape[a]
        index = _source_frames(torch.arange(-left, n + right), torch.tensor(n), mode)
        raw = raw.index_select(a, index.to(raw.device, non_blocking=True))
    return raw


def _pad_dynamic_modes(raw: torch.Tensor, dims: list, a: int, d: Dim, od: Dim, left: int, right: int,
                       mode: str, value) -> torch.Tensor:
    """Non-constant padding of the dynamic dim d (axis a of raw, dims order `dims` with od at a):
    one gather with an index from the host lengths (copied to the device without waiting), then
    `value` beyond each sequence's new end by od's cached mask."""
    lengths = d.lengths
    n_out = od.get_max_size()
    lens = lengths.raw.to(torch.int64).unsqueeze(-1)
    p = torch.arange(n_out, dtype=torch.int64) - left
    index = torch.where(p < lens + right, _source_frames(p, lens, mode), 0)
    index = Tensor(index, tuple(lengths.dims) + (od,)).raw_aligned(tuple(dims))
    if index.device != raw.device:
        index = index.to(raw.device, non_blocking=True)
    shape = list(raw.shape)
    shape[a] = n_out
    raw = torch.gather(raw, a, index.expand(shape))
    pos = tuple(dims.index(b) for b in lengths.dims) + (a,)
    mask = _C._dim_cached_raw(_MASK, od, pos, len(dims), n_out, raw.device)
    return torch.where(mask, raw, value)


def _pad_dynamic_constant(raw: torch.Tensor, dims: list, a: int, d: Dim, od: Dim, left: int, right: int,
                          value) -> torch.Tensor:
    """Constant padding of the dynamic dim d: F.pad puts `value` in the left frames; the frames after
    each sequence's own end (x's padding moved right, and the right padding) are where the mask of
    left + d is False. That mask is cached on the dim per layout and device: one F.pad and one
    where per call."""
    lengths = d.lengths
    n_out = od.get_max_size()
    size = raw.shape[a]
    k = raw.dim() - 1 - a
    raw = F.pad(raw, [0] * (2 * k) + [left, max(0, n_out - left - size)], mode="constant", value=value)
    if raw.shape[a] != n_out:  # x's raw axis was longer than its longest sequence
        raw = raw.narrow(a, 0, n_out)
    shifted = d + left
    pos = tuple(dims.index(b) for b in lengths.dims) + (a,)
    mask = _C._dim_cached_raw(_MASK, shifted, pos, len(dims), n_out, raw.device)
    return torch.where(mask, raw, value)


def _value_region(raw: torch.Tensor, dims: list, padded: list, mode: str) -> torch.Tensor:
    """bool raw (broadcastable to raw, in `dims` order) that is True where pad() puts its value:
    outside each padded axis's kept frames in constant mode (left frames, and frames from each
    sequence's own end on), beyond each dynamic sequence's new end in the other modes."""
    keep = None
    n = raw.dim()
    for d, left, right, od in padded:
        a = dims.index(od)
        n_out = raw.shape[a]
        if mode != "constant" and d.lengths is None:
            continue
        if d.lengths is not None:
            pos = tuple(dims.index(b) for b in d.lengths.dims) + (a,)
            end = od if mode != "constant" else d + left
            if _tracing.tracing():
                kept = _tracing.mask_raw(end, tuple(dims), raw.shape, raw.device)
            else:
                kept = _C._dim_cached_raw(_MASK, end, pos, n, n_out, raw.device)
        else:
            shape = [1] * n
            shape[a] = n_out
            frames = torch.arange(n_out, device=raw.device).view(shape)
            kept = frames < left + d.size if d.size is not None else frames < n_out - right
        if mode == "constant" and left:
            shape = [1] * n
            shape[a] = n_out
            kept = kept & (torch.arange(n_out, device=raw.device).view(shape) >= left)
        keep = kept if keep is None else keep & kept
    return ~keep


def _tensor_value(value: Tensor, x: Tensor, axes: tuple) -> None:
    """Checks a Tensor value of pad(): over dims of x that are not padded."""
    for d in value.dims:
        if d not in x.dims:  # Dim equality is identity
            raise ValueError(f"{_CALLER}: value has dim {dim_str(d)}, which is not a dim of x (x dims: "
                             f"{dims_str(x.dims)})")
        if d in axes:
            raise ValueError(f"{_CALLER}: value has dim {dim_str(d)}, which is padded (axes: {dims_str(axes)})")
        nv, nx = value.raw.shape[value.dims.index(d)], x.raw.shape[x.dims.index(d)]
        if nv != nx:
            raise ValueError(f"{_CALLER}: dim {dim_str(d)} has size {nv} in value but {nx} in x")


def _pad_dynamic_in_graph(raw: torch.Tensor, dims: list, a: int, d: Dim, left: int, right: int, mode: str,
                          value) -> torch.Tensor:
    """While tracing, the padding of the dynamic dim d (axis a of raw, dims order `dims` with the out
    dim at a), from its lengths as a tensor: the raw axis grows by left + right (x's raw size, not
    the longest sequence, is the base), and frames beyond each sequence's new end hold `value`."""
    device = raw.device
    n = _tracing.lengths_raw(d, dims, device).to(torch.int64)  # size 1 at axis a
    if mode == "constant":
        k = raw.dim() - 1 - a
        raw = F.pad(raw, [0] * (2 * k) + [left, right], mode="constant", value=value)
        return torch.where(_in_graph.positions(raw.shape, a, device) < n + left, raw, value)
    size = raw.shape[a]
    shape = list(raw.shape)
    shape[a] = size + left + right
    p = _in_graph.positions(shape, a, device) - left
    inside = p < n + right
    # Lengths are not checked against the mode's limits here (that reads them): a sequence too short
    # for its padding gets in-range garbage frames instead of eager's error.
    index = torch.where(inside, _source_frames(p, n.clamp(min=1), mode), 0).clamp(0, size - 1)
    return torch.where(inside, torch.gather(raw, a, index.expand(shape)), value)


def pad(x: Tensor, /, *, axes: Union[Dim, Sequence[Dim]], padding, out_dims: Optional[Sequence[Dim]] = None,
        mode: str = "constant", value=None, handle_dynamic_dims: Optional[bool] = None):
    """Pads `axes` of x by `padding` ((left, right) for one axis, else one pair per axis); returns
    (tensor, out_dims), out_dims a list with one dim per axis: left + dim + right by dim math (the
    same dim when both are 0), or the dims given as `out_dims` (each must have the size, or the
    lengths, of the one dim math makes). RETURNN frontend's signature and return convention.

    `mode` as in torch.nn.functional.pad: "constant" (`value`), "reflect" (mirrored about the edge
    frame, padding < length), "replicate" (the edge frame repeated, length >= 1) or "circular"
    (wrapped around, padding <= length). For a dynamic dim every sequence is padded as it would be
    alone: left padding shifts it, right padding (and reflection, replication, wrapping) is about its
    own end, and the limits hold for each sequence's length (checked on the host lengths). Frames
    beyond a sequence's new end hold `value` in every mode (a dim padded by (0, 0) is left as it
    is, padding frames included). Masks and indices come from the host lengths; their device
    copies do not wait for the device (no sync).

    `value`: a Python number or bool (None: 0), or a Tensor over dims of x that are not padded (e.g.
    one value per sequence, or per feature), broadcast over the padded frames and cast to x's dtype
    (it gets the gradient of the frames it fills).

    `handle_dynamic_dims`: None or True (each sequence padded about its own end, as above, which is
    RETURNN frontend's newest behavior); False pads a dynamic dim at the end of the raw axis, whose
    result depends on the batch: not supported (NotImplementedError). No effect on static dims.

    While tracing: masks and indices are built in the graph from the lengths; a padded dynamic
    axis has x's raw size + left + right frames (not the longest sequence's), and the modes'
    limits are not checked on the lengths (a sequence too short gets garbage frames, no error)."""
    check_tensor(x, _CALLER)
    if value is None:
        value = 0
    if mode not in _MODES:
        raise ValueError(f"{_CALLER}: mode {mode!r} is not one of {', '.join(map(repr, _MODES))}")
    axes = dims_arg(axes, _CALLER, "axes")
    pairs = _pairs(axes, padding)
    for d in axes:
        axis_of(x, d, _CALLER, what="axis")
    if repeats_a_dim(axes):
        raise ValueError(f"{_CALLER}: axes lists a dim twice ({dims_str(axes)})")
    if handle_dynamic_dims is not None and not isinstance(handle_dynamic_dims, bool):
        raise TypeError(f"{_CALLER}: handle_dynamic_dims must be None or a bool, got "
                        f"{type(handle_dynamic_dims).__name__}")
    if handle_dynamic_dims is False and any(d.lengths is not None and (l or r) for d, (l, r) in zip(axes, pairs)):
        raise NotImplementedError(
            f"{_CALLER}: handle_dynamic_dims=False (padding a dynamic dim at the end of the raw axis, after "
            f"the padding of shorter sequences) makes a sequence's result depend on the batch; dimtorch pads "
            f"each sequence about its own end (handle_dynamic_dims=None or True)")
    given = None if out_dims is None else dims_arg(out_dims, _CALLER, "out_dims")
    if given is not None and len(given) != len(axes):
        raise ValueError(f"{_CALLER}: {len(given)} out_dims for {len(axes)} axes ({dims_str(axes)})")
    tensor_value = None
    if isinstance(value, Tensor):
        _tensor_value(value, x, axes)
        tensor_value, value = value, False if x.raw.dtype == torch.bool else 0  # placeholder of x's dtype
    elif not isinstance(value, (int, float)):
        raise TypeError(f"{_CALLER}: value must be a Python number or bool, or a dimtorch.Tensor, got "
                        f"{type(value).__name__}")

    raw = x.raw
    dims = list(x.dims)
    out_dims = [_out_dim(d, left, right) for d, (left, right) in zip(axes, pairs)]
    padded = [(d, left, right, od) for d, (left, right), od in zip(axes, pairs, out_dims) if left or right]
    for d, left, right, _ in padded:
        if d.lengths is None:
            if mode != "constant":
                _check_sizes(d, left, right, raw.shape[dims.index(d)], mode)
            continue
        for b in d.lengths.dims:
            if not any(b is e for e in dims):
                raise ValueError(f"{_CALLER}: the lengths of {dim_str(d)} vary over {dim_str(b)}, which is "
                                 f"not a dim of x (dims: {dims_str(x.dims)})")
            if any(b is e for e, *_ in padded):
                raise ValueError(f"{_CALLER}: the lengths of {dim_str(d)} vary over {dim_str(b)}, which is "
                                 f"padded too (axes: {dims_str(axes)})")
        if mode != "constant" and not _tracing.tracing():
            _check_sizes(d, left, right, int(d.lengths.raw.min()) if d.lengths.raw.numel() else 0, mode)

    # Static dims (and dims sized from data) first, in one call; F.pad lists pairs from the last axis.
    static = [(dims.index(d), left, right) for d, left, right, _ in padded if d.lengths is None]
    if static and mode == "constant":
        flat = [0] * (2 * raw.dim())
        for a, left, right in static:
            k = raw.dim() - 1 - a
            flat[2 * k], flat[2 * k + 1] = left, right
        last = max(i for i, v in enumerate(flat) if v) + 1
        raw = F.pad(raw, flat[:last + (last % 2)], mode="constant", value=value)
    elif static:
        raw = _pad_static_modes(raw, static, mode)
    for d, left, right, od in padded:
        if d.lengths is None:
            dims[dims.index(d)] = od
    in_graph = any(d.lengths is not None for d, *_ in padded) and _tracing.tracing()
    for d, left, right, od in padded:
        if d.lengths is None:
            continue
        a = dims.index(d)
        dims[a] = od
        if in_graph:
            raw = _pad_dynamic_in_graph(raw, dims, a, d, left, right, mode, value)
        elif mode == "constant":
            raw = _pad_dynamic_constant(raw, dims, a, d, od, left, right, value)
        else:
            raw = _pad_dynamic_modes(raw, dims, a, d, od, left, right, mode, value)
    if tensor_value is not None and padded:
        fill = tensor_value.raw_aligned(tuple(dims))
        raw = torch.where(_value_region(raw, dims, padded, mode), fill.to(raw.dtype), raw)
    if given is not None:
        dims, out_dims = _given_out_dims(dims, out_dims, given, raw)
    feature_dim = x.feature_dim if x.feature_dim is not None and x.feature_dim in dims else None
    out = Tensor(raw, tuple(dims), sparse_dim=x.sparse_dim, feature_dim=feature_dim)
    return out, list(out_dims)


def _given_out_dims(dims: list, made: list, given: tuple, raw: torch.Tensor):
    """(dims, out_dims) with each made out dim replaced by the given one, which must have its size or
    (on the host) its lengths."""
    dims = list(dims)
    for m, g in zip(made, given):
        if g is m:
            continue
        if m.lengths is None:
            size = raw.shape[dims.index(m)] if m in dims else m.size
            if g.lengths is not None or (g.size is not None and g.size != size):
                raise ValueError(f"{_CALLER}: out_dims gives {dim_str(g)} for a padded axis of size {size} "
                                 f"({dim_str(m)})")
        elif g.lengths is None or g.lengths.dims != m.lengths.dims or \
                not torch.equal(g.lengths.raw, m.lengths.raw):
            raise ValueError(f"{_CALLER}: out_dims gives {dim_str(g)}, whose lengths are not those of the "
                             f"padded axis {dim_str(m)}")
        if m in dims:
            dims[dims.index(m)] = g
    return dims, list(given)
