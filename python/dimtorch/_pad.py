"""pad: constant padding of static dims (F.pad) and of dynamic dims, where right padding follows each sequence's own end."""
from __future__ import annotations

from typing import Sequence, Union

import torch
import torch.nn.functional as F

from . import _C
from ._C import Dim, Tensor
from ._shape_ops import axis_of, check_tensor, dim_str, dims_str

_CALLER = "dimtorch.pad()"
_MASK = 0  # kind of dimtorch._C._dim_cached_raw (src/mask.h)


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
    if d.size is None and d.dyn_size is None:
        return d if left == right == 0 else Dim(None, name=f"{d.name}+pad")
    out = d
    if left:
        out = left + out
    if right:
        out = out + right
    return out


def pad(x: Tensor, *, axes: Union[Dim, Sequence[Dim]], padding, value=0, mode: str = "constant"):
    """Pads `axes` of x with `value` by `padding` ((left, right) for one axis, else one pair per
    axis); returns (tensor, out_dims), out dims = left + dim + right by dim math (the same dim when
    both are 0). For a dynamic dim, left padding shifts every sequence and right padding follows
    each sequence's own end; frames beyond a sequence's new end also hold `value` (a dim padded by
    (0, 0) is left as it is, padding frames included). The mask is the dim's cached one (from host
    lengths, copied to the device once without waiting for it: no sync). Only mode="constant" is
    implemented so far."""
    check_tensor(x, _CALLER)
    if mode != "constant":
        raise NotImplementedError(f"{_CALLER}: mode {mode!r} is not implemented yet (only 'constant')")
    if isinstance(axes, Dim):
        axes = (axes,)
    axes = tuple(axes)
    pairs = _pairs(axes, padding)
    for d in axes:
        axis_of(x, d, _CALLER, what="axis")
    if len({id(d) for d in axes}) != len(axes):
        raise ValueError(f"{_CALLER}: axes lists a dim twice ({dims_str(axes)})")

    raw = x.raw
    dims = list(x.dims)
    out_dims = []
    # Static dims (and dims sized from data) in one F.pad call; F.pad lists pairs from the last axis.
    flat = [0] * (2 * raw.dim())
    any_static = False
    for d, (left, right) in zip(axes, pairs):
        out_dims.append(_out_dim(d, left, right))
        if d.dyn_size is None and (left or right):
            a = dims.index(d)
            k = raw.dim() - 1 - a
            flat[2 * k], flat[2 * k + 1] = left, right
            any_static = True
    if any_static:
        last = max(i for i, v in enumerate(flat) if v) + 1
        raw = F.pad(raw, flat[:last + (last % 2)], mode="constant", value=value)

    for d, (left, right), od in zip(axes, pairs, out_dims):
        if d.dyn_size is None or not (left or right):
            continue
        a = dims.index(d)
        lengths = d.dyn_size
        for b in lengths.dims:
            if not any(b is e for e in dims):
                raise ValueError(f"{_CALLER}: the lengths of {dim_str(d)} vary over {dim_str(b)}, which is "
                                 f"not a dim of x (dims: {dims_str(x.dims)})")
        n_out = od.get_max_size()
        size = raw.shape[a]
        # F.pad puts `value` in the left frames; the frames after each sequence's own end (x's
        # padding moved right, and the right padding) are where left + dim's mask is False. That
        # mask is cached on the dim per layout and device: one F.pad and one where per call.
        k = raw.dim() - 1 - a
        flat = [0] * (2 * k) + [left, max(0, n_out - left - size)]
        raw = F.pad(raw, flat, mode="constant", value=value)
        if raw.shape[a] != n_out:  # x's raw axis was longer than its longest sequence
            raw = raw.narrow(a, 0, n_out)
        dims[a] = od
        shifted = left + d if left else d
        pos = tuple(dims.index(b) for b in lengths.dims) + (a,)
        mask = _C._dim_cached_raw(_MASK, shifted, pos, len(dims), n_out, raw.device)
        raw = torch.where(mask, raw, value)
    for d, od in zip(axes, out_dims):
        dims[dims.index(d) if d in dims else dims.index(od)] = od
    feature_dim = x.feature_dim if x.feature_dim is not None and x.feature_dim in dims else None
    out = Tensor(raw, tuple(dims), sparse_dim=x.sparse_dim, feature_dim=feature_dim)
    return out, tuple(out_dims)
