"""Selection and ordering along dims: top_k (over one dim or several merged), sort, and masked cumsum."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch

from .. import _C
from .._core import in_graph as _in_graph, tracing as _tracing
from .._C import Dim, Tensor
from .._core.args import axis_of, check_tensor, dim_str, dims_arg, dims_str, distinct_axes, keep_markers
from .slicing import _lengths_in
from ._support import names_errors

_MASK = 0  # kind of _C._dim_cached_raw: the bool mask of valid frames


def _int_dtype(raw: torch.Tensor, caller: str) -> torch.dtype:
    """raw's dtype, which must be a real number dtype that is not floating point (an int)."""
    if raw.dtype == torch.bool or raw.is_complex():
        raise TypeError(f"{caller}: x must be a real number dtype, got {raw.dtype}")
    return raw.dtype


def _lowest(raw: torch.Tensor, caller: str):
    """The value that never wins a max: -inf for floats, the minimum for ints."""
    return float("-inf") if raw.is_floating_point() else torch.iinfo(_int_dtype(raw, caller)).min


def _highest(raw: torch.Tensor, caller: str):
    """The value that never wins a min: inf for floats, the maximum for ints."""
    return float("inf") if raw.is_floating_point() else torch.iinfo(_int_dtype(raw, caller)).max


def _masked(x: Tensor, axes: Sequence[Dim], value, caller: str) -> torch.Tensor:
    """x's raw with the padding of the dynamic dims among `axes` set to `value` (frames beyond a
    dim's max length dropped), by the mask cached on each dim for x's layout. While tracing, frames
    beyond the max length are kept (masked too) and the mask is built in the graph."""
    raw, dims = x.raw, x.dims
    in_graph = any(d.lengths is not None for d in axes) and _tracing.tracing()
    for d in axes:
        lengths = d.lengths
        if lengths is None:
            continue
        pos = []
        for b in lengths.dims:
            if b not in dims:  # Dim equality is identity
                raise ValueError(f"{caller}: the lengths of {dim_str(d)} vary over {dim_str(b)}, which is not a "
                                 f"dim of x (dims: {dims_str(dims)})")
            pos.append(dims.index(b))
        if in_graph:
            raw = torch.where(_tracing.mask_raw(d, dims, raw.shape, raw.device), raw, value)
            continue
        a = dims.index(d)
        n = raw.shape[a]
        if n > d.get_max_size():
            n = d.get_max_size()
            raw = raw.narrow(a, 0, n)
        pos.append(a)
        raw = torch.where(_C._dim_cached_raw(_MASK, d, pos, len(dims), n, raw.device), raw, value)
    return raw


def top_k(x: Tensor, /, *, axis: Union[Dim, Sequence[Dim]], k: Union[int, Dim, None] = None,
          k_dim: Optional[Dim] = None, sorted: bool = True):
    """The k largest entries of x over `axis` (one dim, or several: their entries are ranked
    together, as beam x vocab in beam search); returns (values, indices, k_dim), sorted, largest
    first (whatever `sorted` says). values and indices have x's other dims and k_dim in place of
    the (first) axis. `k`: an int, or a static Dim to use as k_dim; `k_dim`: the static Dim to use
    as the out dim (k, if given too, must be its size). RETURNN frontend's signature.

    indices: for one axis, an int64 Tensor with sparse_dim=axis; for several, a list with one
    such Tensor per axis (the position along that dim).

    Padding of dynamic axes is never selected while a slice has at least k valid entries. For one
    dynamic axis and an int k, k_dim is dynamic with lengths min(T, k) (host), so a sequence
    shorter than k gets only its own frames as valid entries; otherwise k_dim is static (a Dim k is
    used as it is) and entries beyond the valid count are padding (value -inf).

    One dim without lengths and an int k is dimtorch._C.top_k, which comes here for the others.
    While tracing, padding is masked by masks built in the graph, and frames beyond the longest
    sequence are kept (so for one dynamic axis, k_dim's raw size is min(k, x's raw size))."""
    caller = "dimtorch.top_k()"
    check_tensor(x, caller)
    axes = dims_arg(axis, caller, "axis")
    positions = distinct_axes(x, axes, caller, "axis")
    if k_dim is not None:
        if not isinstance(k_dim, Dim):
            raise TypeError(f"{caller}: k_dim must be a Dim, got {type(k_dim).__name__}")
        if k is not None and not (k is k_dim or (isinstance(k, int) and not isinstance(k, bool) and k == k_dim.size)):
            raise ValueError(f"{caller}: k={k!r} does not match k_dim {dim_str(k_dim)}")
        k = k_dim
    if k is None:
        raise TypeError(f"{caller}: give k (an int) or k_dim (a static Dim)")
    if isinstance(k, Dim):
        if k.size is None:
            raise ValueError(f"{caller}: k_dim {dim_str(k)} must be static")
        k_dim, k_int = k, k.size
    elif isinstance(k, int) and not isinstance(k, bool) and k >= 1:
        k_dim, k_int = None, k
    else:
        raise ValueError(f"{caller}: k must be an int >= 1 or a static Dim, got {k!r}")
    raw = _masked(x, axes, _lowest(x.raw, caller), caller)
    sizes = [raw.shape[p] for p in positions]
    total = math.prod(sizes)
    dynamic_k = len(axes) == 1 and axes[0].lengths is not None and k_dim is None
    k_raw = (torch.sym_min(k_int, total) if _tracing.tracing() else min(k_int, total)) if dynamic_k else k_int
    if k_raw > total:
        raise ValueError(f"{caller}: k={k_int} is larger than the {total} entries of axis ({dims_str(axes)})")
    if k_dim is None:
        if dynamic_k:
            lengths = axes[0].lengths
            k_dim = Dim(Tensor(lengths.raw.to(torch.int64).clamp(max=k_int), lengths.dims), name=f"top{k_int}")
        else:
            k_dim = Dim(k_int, name=f"top{k_int}")
    first = min(positions)
    rest = [i for i in range(raw.dim()) if i not in positions]
    if len(axes) == 1:
        a = positions[0]
        values, idx = torch.topk(raw, k_raw, dim=a)
        dims = x.dims[:a] + (k_dim,) + x.dims[a + 1:]
        return (keep_markers(x, values, dims), Tensor(idx, dims, sparse_dim=axes[0]), k_dim)
    before = [i for i in rest if i < first]
    after = [i for i in rest if i > first]
    merged = raw.permute(before + positions + after)
    shape = [raw.shape[i] for i in before] + [total] + [raw.shape[i] for i in after]
    merged = merged.reshape(shape)
    values, flat = torch.topk(merged, k_raw, dim=len(before))
    dims = tuple(x.dims[i] for i in before) + (k_dim,) + tuple(x.dims[i] for i in after)
    indices = []
    stride = total
    for d, n in zip(axes, sizes):
        stride //= n
        indices.append(Tensor((flat // stride) % n, dims, sparse_dim=d))
    return keep_markers(x, values, dims), indices, k_dim


@names_errors("dimtorch.sort()")
def sort(x: Tensor, /, *, axis: Dim, descending: bool = False) -> tuple[Tensor, Tensor]:
    """Sorts x along `axis` (a stable sort); returns (values, indices), both over x's dims,
    indices int64 with sparse_dim=axis. For a dynamic axis each sequence's valid frames are sorted
    among themselves and its padding stays behind them (padding values are then +-inf or the
    dtype's extreme). While tracing, the mask is built in the graph and frames beyond the longest
    sequence are kept (as padding)."""
    caller = "dimtorch.sort()"
    check_tensor(x, caller)
    a = axis_of(x, axis, caller, what="axis")
    raw = _masked(x, (axis,), _lowest(x.raw, caller) if descending else _highest(x.raw, caller), caller)
    values, idx = torch.sort(raw, dim=a, descending=descending, stable=True)
    return keep_markers(x, values, x.dims), Tensor(idx, x.dims, sparse_dim=axis)


def cumsum(x: Tensor, /, *, spatial_dim: Optional[Dim] = None, axis: Optional[Dim] = None) -> Tensor:
    """Cumulative sum along `spatial_dim` (RETURNN frontend's name) or `axis` (the same; give one);
    same dims. Padding of a dynamic axis contributes 0 (and gets no gradient), so frames past a
    sequence's end repeat its total. While tracing, the mask is built in the graph and frames
    beyond the longest sequence are kept (repeating the total too)."""
    caller = "dimtorch.cumsum()"
    if spatial_dim is not None:
        if axis is not None and axis is not spatial_dim:
            raise TypeError(f"{caller}: give spatial_dim or axis, not both")
        axis = spatial_dim
    elif axis is None:
        raise TypeError(f"{caller}: missing the dim to sum along: spatial_dim (or axis)")
    if type(x) is not Tensor or axis not in x.dims:  # Dim equality is identity
        check_tensor(x, caller)
        axis_of(x, axis, caller, what="axis")
    dims = x.dims
    a = dims.index(axis)
    raw = x.raw
    lengths = axis.lengths
    if lengths is not None:
        if _tracing.tracing():
            raw = _masked(x, (axis,), 0, caller)
        elif raw.shape[a] == axis.get_max_size() and _lengths_in(lengths, dims):
            raw = x.copy_masked(0, (axis,)).raw  # one where with the mask cached on the dim, in C++
        else:
            raw = _masked(x, (axis,), 0, caller)  # frames beyond the max length dropped, or the error
    return Tensor(raw.cumsum(a), dims, sparse_dim=x.sparse_dim, feature_dim=x.feature_dim)


@names_errors("dimtorch.search_sorted()")
def search_sorted(sorted_seq: Tensor, values: Tensor, *, axis: Dim, side: str = "left", out_dtype: str = "int32"
                  ) -> Tensor:
    """For each entry of `values`, the position along `axis` where it would be inserted into `sorted_seq`
    (sorted ascending along axis) to keep it sorted (torch.searchsorted): with side "left" the first
    position i with sorted_seq[i] >= value, with "right" the first with sorted_seq[i] > value.

    sorted_seq's other dims are batch dims and must be dims of values (each batch entry searches its
    own sequence); the result is over those dims, then values' other dims, of `out_dtype` ("int32" or
    "int64") with sparse_dim=axis. For a dynamic axis each sequence is searched within its own length
    (positions <= its length; its padding is never read)."""
    caller = "dimtorch.search_sorted()"
    check_tensor(sorted_seq, caller, what="sorted_seq")
    check_tensor(values, caller, what="values")
    a = axis_of(sorted_seq, axis, caller, what="axis", of="sorted_seq")
    if side not in ("left", "right"):
        raise ValueError(f"{caller}: side must be 'left' or 'right', got {side!r}")
    if out_dtype not in ("int32", "int64"):
        raise ValueError(f"{caller}: out_dtype must be 'int32' or 'int64', got {out_dtype!r}")
    shared = tuple(d for d in sorted_seq.dims if d is not axis)
    for d in shared:
        if d not in values.dims:  # Dim equality is identity
            raise ValueError(f"{caller}: dim {dim_str(d)} of sorted_seq is not a dim of values (values dims: "
                             f"{dims_str(values.dims)}); sorted_seq's dims other than axis are batch dims")
        n_seq, n_val = sorted_seq.raw.shape[sorted_seq.dims.index(d)], values.raw.shape[values.dims.index(d)]
        if n_seq != n_val:
            raise ValueError(f"{caller}: dim {dim_str(d)} has size {n_seq} in sorted_seq but {n_val} in values")
    seq = sorted_seq.raw
    if axis.lengths is not None and sorted_seq.raw.dtype != torch.bool:
        seq = _masked(sorted_seq, (axis,), _highest(seq, caller), caller)  # padding sorts last
    perm = [sorted_seq.dims.index(d) for d in shared] + [a]
    if perm != list(range(len(perm))):
        seq = seq.permute(perm)
    rest = tuple(d for d in values.dims if d not in shared)
    val = values.raw_aligned(shared + rest)
    shared_sizes = list(val.shape[:len(shared)])
    rest_sizes = list(val.shape[len(shared):])
    if shared and len(rest) != 1:
        val = val.reshape(shared_sizes + [math.prod(rest_sizes)])
    if val.dtype != seq.dtype:
        common = torch.promote_types(val.dtype, seq.dtype)
        val, seq = val.to(common), seq.to(common)
    out = torch.searchsorted(seq.contiguous(), val.contiguous(), side=side, out_int32=out_dtype == "int32")
    if shared and len(rest) != 1:
        out = out.reshape(shared_sizes + rest_sizes)
    out_dims = shared + rest
    if axis.lengths is not None:
        # Values beyond a sequence's last valid entry (and NaN) land past its padding: at most its length.
        lengths = _C._dim_cached_raw(2, axis, tuple(out_dims.index(b) for b in axis.lengths.dims), len(out_dims), 0,
                                     out.device)
        out = torch.minimum(out, lengths.to(out.dtype))
    return Tensor(out, out_dims, sparse_dim=axis)


def _valid_frames(x: Tensor, axis: Dim, caller: str):
    """Bool raw broadcastable to x's raw, True on axis's valid frames (frames beyond the longest sequence
    included, as False); None for an axis without lengths. Cached on the dim (in the graph while tracing)."""
    if axis.lengths is None:
        return None
    dims = x.dims
    for b in axis.lengths.dims:
        if b not in dims:  # Dim equality is identity
            raise ValueError(f"{caller}: the lengths of {dim_str(axis)} vary over {dim_str(b)}, which is not a dim "
                             f"of the input (dims: {dims_str(dims)})")
    if _tracing.tracing():
        return _tracing.mask_raw(axis, dims, x.raw.shape, x.raw.device)
    a = dims.index(axis)
    pos = tuple(dims.index(b) for b in axis.lengths.dims) + (a,)
    return _C._dim_cached_raw(_MASK, axis, pos, len(dims), x.raw.shape[a], x.raw.device)


@names_errors("dimtorch.top_k_mask()")
def top_k_mask(values: Tensor, *, axis: Dim, k: int) -> Tensor:
    """Bool mask over values' dims (rf.top_k_mask): True at the k largest entries along `axis` (one dim),
    e.g. for top-k sampling. Padding of a dynamic axis is never selected (a sequence shorter than k
    keeps all its frames)."""
    caller = "dimtorch.top_k_mask()"
    check_tensor(values, caller, what="values")
    if not isinstance(axis, Dim):
        raise TypeError(f"{caller}: axis must be a Dim, got {type(axis).__name__}")
    a = axis_of(values, axis, caller, what="axis", of="values")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"{caller}: k must be an int >= 1, got {k!r}")
    valid = _valid_frames(values, axis, caller)
    raw = values.raw if valid is None else torch.where(valid, values.raw, _lowest(values.raw, caller))
    idx = torch.topk(raw, min(k, raw.shape[a]), dim=a).indices
    mask = torch.zeros(raw.shape, dtype=torch.bool, device=raw.device).scatter_(a, idx, True)
    return Tensor(mask if valid is None else mask & valid, values.dims)


@names_errors("dimtorch.top_p_mask()")
def top_p_mask(probs: Tensor, *, axis: Dim, p: Union[float, Tensor], one_more: bool = True,
               min_tokens_to_keep: int = 1) -> Tensor:
    """Bool mask over probs' dims (rf.top_p_mask, nucleus sampling): along `axis`, the most probable
    entries whose cumulative probability stays <= p, with one_more also the first entry past p, and at
    least min_tokens_to_keep. p: a number in [0, 1] or a Tensor over dims of probs other than axis.
    Padding of a dynamic axis is never selected."""
    caller = "dimtorch.top_p_mask()"
    check_tensor(probs, caller, what="probs")
    if not isinstance(axis, Dim):
        raise TypeError(f"{caller}: axis must be a Dim, got {type(axis).__name__}")
    a = axis_of(probs, axis, caller, what="axis", of="probs")
    if isinstance(p, Tensor):
        for d in p.dims:
            if d not in probs.dims or d is axis:  # Dim equality is identity
                raise ValueError(f"{caller}: p has dim {dim_str(d)}, which is not a dim of probs other than axis "
                                 f"(probs dims: {dims_str(probs.dims)})")
        limit = p.raw_aligned(probs.dims)
    elif isinstance(p, (int, float)) and not isinstance(p, bool) and 0.0 <= p <= 1.0:
        limit = p
    else:
        raise ValueError(f"{caller}: p must be a number in [0, 1] or a Tensor, got {p!r}")
    if isinstance(min_tokens_to_keep, bool) or not isinstance(min_tokens_to_keep, int) or min_tokens_to_keep < 0:
        raise ValueError(f"{caller}: min_tokens_to_keep must be an int >= 0, got {min_tokens_to_keep!r}")
    if isinstance(one_more, (Tensor, torch.Tensor)):
        raise TypeError(f"{caller}: one_more must be a bool")
    valid = _valid_frames(probs, axis, caller)
    raw = probs.raw if valid is None else torch.where(valid, probs.raw, 0.0)  # padding sorts last, adds nothing
    ordered, order = torch.sort(raw, dim=a, descending=True, stable=True)
    keep = ordered.cumsum(a) <= limit
    if one_more:  # the first entry past p too: keep shifted one on, the first always kept
        keep = torch.cat((torch.ones_like(keep.narrow(a, 0, 1)), keep.narrow(a, 0, keep.shape[a] - 1)), a)
    if min_tokens_to_keep > (1 if one_more else 0):
        shape = [1] * raw.dim()
        shape[a] = raw.shape[a]
        keep = keep | (torch.arange(raw.shape[a], device=raw.device).view(shape) < min_tokens_to_keep)
    mask = torch.zeros_like(keep).scatter_(a, order, keep)
    return Tensor(mask if valid is None else mask & valid, probs.dims)
