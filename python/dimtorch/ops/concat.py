"""concat: joining tensors along one dim each, static dims by torch.cat, dynamic dims sequence by sequence; cum_concat_step;
rf.concat_features's definition."""
from __future__ import annotations

import weakref
from typing import Optional

import torch
import torch.nn.functional as F

from .. import _C
from .._core import dim_cache as _dim_cache, in_graph as _in_graph, tracing as _tracing
from .._C import Dim, Tensor
from .._core.args import axis_of, check_tensor, dim_str, dims_str, lengths_positions
from ._support import names_errors

_CALLER = "dimtorch.concat()"
_LENGTHS = 2  # kind of dimtorch._C._dim_cached_raw (src/core/mask.h)
# Gather indices of dynamic concats: canonical out dim (dim_0 + dim_1 + ...) -> {layout: device raw}.
# Weak keys: an entry goes with its dim, and the raws hold no dim.
_INDEX_CACHE: "weakref.WeakKeyDictionary[Dim, dict]" = weakref.WeakKeyDictionary()
_dim_cache.on_forget(lambda dim: _INDEX_CACHE.pop(dim, None))  # new lengths bound to the dim


def _length_raw(dim: Dim, bdims: tuple) -> torch.Tensor:
    """Host int64 lengths of `dim` laid out over `bdims` (size 1 for dims they do not vary over)."""
    if dim.lengths is None:
        return torch.full([1] * len(bdims), dim.size, dtype=torch.int64)
    return dim.lengths.raw_aligned(bdims).to(torch.int64)


def _gather_index(canonical: Dim, cat_dims: list, sizes: tuple, bdims: tuple, out_dims: tuple, axis: int,
                  device: torch.device) -> torch.Tensor:
    """Index into the sources' raws joined along `axis` (then one zero frame) of every output frame,
    laid out for out_dims (size 1 but for bdims and the out dim). Built from host lengths once per
    canonical out dim and layout (raw sizes along axis, places of bdims, device), then cached: its
    device copy is made once, without waiting for the device."""
    layout = (sizes, tuple(i for i, d in enumerate(out_dims) if any(d is b for b in bdims)), len(out_dims), axis,
              device)
    per_dim = _INDEX_CACHE.get(canonical)
    if per_dim is None:
        per_dim = _INDEX_CACHE[canonical] = {}
    index = per_dim.get(layout)
    if index is not None:
        return index
    n_out = canonical.get_max_size()
    frames = torch.arange(n_out, dtype=torch.int64).view([1] * len(bdims) + [n_out])
    index = torch.full([1] * len(bdims) + [n_out], sum(sizes), dtype=torch.int64)  # -> the zero frame
    start, offset = 0, 0
    for size, d in zip(sizes, cat_dims):
        length = _length_raw(d, bdims).unsqueeze(-1)
        inside = (frames >= start) & (frames < start + length)
        index = torch.where(inside, frames - start + offset, index)
        start = start + length
        offset += size
    index = Tensor(index, bdims + (canonical,)).raw_aligned(
        tuple(canonical if i == axis else d for i, d in enumerate(out_dims)))
    if index.device != device:
        index = index.to(device, non_blocking=True)
    per_dim[layout] = index
    return index


def _gather_index_in_graph(cat_dims: list, sizes: tuple, out_dims: tuple, axis: int, device) -> torch.Tensor:
    """While tracing, _gather_index built in the graph from the lengths as tensors, over out_dims's
    layout (size 1 but for the lengths' dims and the out axis, which has sum(sizes) frames)."""
    total = sum(sizes)
    shape = [1] * len(out_dims)
    shape[axis] = total
    frames = _in_graph.positions(shape, axis, device)
    index = torch.full_like(frames, total)  # -> the zero frame
    start, offset = 0, 0
    for size, d in zip(sizes, cat_dims):
        length = d.size if d.lengths is None else _tracing.lengths_raw(d, out_dims, device).to(torch.int64)
        inside = (frames >= start) & (frames < start + length)
        index = torch.where(inside, frames - start + offset, index)
        start = start + length
        offset += size
    return index


def _broadcast_pairs(pairs: list) -> list:
    """Each tensor expanded (a view) to the other dims of all: the first one's order, then the rest."""
    union, sizes = [], {}
    for x, d in pairs:
        for e, n in zip(x.dims, x.raw.shape):
            if e is not d and not any(e is u for u in union):
                union.append(e)
                sizes[id(e)] = n
    out = []
    for x, d in pairs:
        missing = [e for e in union if not any(e is f for f in x.dims)]
        if missing:
            dims = tuple(missing) + x.dims
            raw = x.raw_aligned(dims).expand(*[sizes[id(e)] for e in missing], *x.raw.shape)
            x = Tensor(raw, dims, sparse_dim=x.sparse_dim, feature_dim=x.feature_dim)
        out.append((x, d))
    return out


def concat(*sources, allow_broadcast: bool = False, out_dim: Optional[Dim] = None,
           handle_dynamic_dims: Optional[bool] = None):
    """Concatenates `(tensor, dim)` pairs along their dims; returns (tensor, out_dim), out_dim =
    dim_0 + dim_1 + ... by dim math (or the given out_dim), at the place of dim_0 in the first
    tensor's dims order. All tensors must have the same other dims (as sets, same sizes), unless
    `allow_broadcast`: then each is broadcast over the other dims of the others (the first one's
    order, then the new dims in order of appearance). RETURNN frontend's signature.

    `handle_dynamic_dims`: None or True (sequence by sequence, below); False (the raws one after the
    other, padding between a shorter sequence's frames: batch-dependent) is not supported.

    Static dims: torch.cat. Dynamic dims: each sequence's valid frames follow each other (the frames
    of tensor 1 start at tensor 0's length of that sequence); out lengths are the sum of the
    lengths, computed on the host; frames beyond a sequence's new end are 0. The gather index is
    computed from host lengths and copied to the device without waiting for it (no sync).

    While tracing: the index is built in the graph from the lengths; the out axis has the sum of
    the sources' raw sizes (not the longest sum), and a given out_dim's lengths are not compared
    with the sum (that reads them)."""
    if len(sources) < 1:
        raise ValueError(f"{_CALLER}: give at least one (tensor, dim) pair")
    pairs = []
    for i, src in enumerate(sources):
        if not (isinstance(src, tuple) and len(src) == 2):
            raise TypeError(f"{_CALLER}: source {i} must be a (tensor, dim) pair, got {type(src).__name__}")
        x, d = src
        check_tensor(x, _CALLER, what=f"source {i}'s tensor")
        axis_of(x, d, _CALLER, what=f"source {i}'s dim", of=f"source {i}'s tensor")
        pairs.append((x, d))
    if handle_dynamic_dims is False and any(d.lengths is not None for _, d in pairs):
        raise NotImplementedError(
            f"{_CALLER}: handle_dynamic_dims=False (the raws one after the other, a shorter sequence's padding "
            f"between its frames) makes results depend on the batch; dimtorch concatenates sequence by sequence")
    if allow_broadcast:
        pairs = _broadcast_pairs(pairs)

    x0, d0 = pairs[0]
    others = tuple(d for d in x0.dims if d is not d0)
    for i, (x, d) in enumerate(pairs[1:], 1):
        rest = tuple(e for e in x.dims if e is not d)
        if len(rest) != len(others) or not all(any(e is o for o in others) for e in rest):
            raise ValueError(
                f"{_CALLER}: the dims other than the concat dim differ: source 0 has ({dims_str(others)}) "
                f"besides {dim_str(d0)}, source {i} has ({dims_str(rest)}) besides {dim_str(d)}")
        for e in rest:
            s0, s = x0.raw.shape[x0.dims.index(e)], x.raw.shape[x.dims.index(e)]
            if s0 != s:
                raise ValueError(f"{_CALLER}: dim {dim_str(e)} has size {s0} in source 0 but {s} in source {i}")

    axis = x0.dims.index(d0)
    cat_dims = [d for _, d in pairs]
    # Each source's raw in the first one's dims order, its own concat dim at `axis`.
    raws = []
    for x, d in pairs:
        order = x0.dims[:axis] + (d,) + x0.dims[axis + 1:]
        raws.append(x.raw if x.dims == order else x.raw_aligned(order))

    dynamic = any(d.lengths is not None for d in cat_dims)
    all_static = all(d.size is not None for d in cat_dims)
    if dynamic or all_static:
        canonical = cat_dims[0]
        for d in cat_dims[1:]:
            canonical = canonical + d
    else:
        canonical = None  # sizes from data: a new Dim(None)
    if out_dim is None:
        out_dim = canonical if canonical is not None else Dim(None, name="+".join(str(d.name) for d in cat_dims))
    elif not isinstance(out_dim, Dim):
        raise TypeError(f"{_CALLER}: out_dim must be a Dim, got {type(out_dim).__name__}")
    elif out_dim is not canonical and canonical is not None:
        if dynamic and _tracing.tracing():
            ok = out_dim.lengths is not None
        elif dynamic:
            ok = out_dim.lengths is not None and torch.equal(
                _length_raw(out_dim, out_dim.lengths.dims), _length_raw(canonical, out_dim.lengths.dims))
        else:
            ok = out_dim.size == canonical.size
        if not ok:
            raise ValueError(f"{_CALLER}: out_dim {dim_str(out_dim)} does not match the sum of "
                             f"{dims_str(cat_dims)} ({dim_str(canonical)})")
    out_dims = x0.dims[:axis] + (out_dim,) + x0.dims[axis + 1:]
    feature_dim = x0.feature_dim if x0.feature_dim is not None and x0.feature_dim is not d0 else None

    if not dynamic:
        raw = torch.cat(raws, dim=axis)
        return Tensor(raw, out_dims, sparse_dim=x0.sparse_dim, feature_dim=feature_dim), out_dim

    # Batch dims the lengths vary over, in the output's order; all must be dims of the tensors.
    bset = []
    for d in cat_dims:
        if d.lengths is not None:
            for b in d.lengths.dims:
                if not any(b is o for o in others):
                    raise ValueError(f"{_CALLER}: the lengths of {dim_str(d)} vary over {dim_str(b)}, "
                                     f"which is not a dim of the tensors ({dims_str(others)})")
                if not any(b is e for e in bset):
                    bset.append(b)
    bdims = tuple(d for d in others if any(d is b for b in bset))
    zero_shape = list(raws[0].shape)
    zero_shape[axis] = 1
    if _tracing.tracing():
        sizes = tuple(r.shape[axis] for r in raws)
        index = _gather_index_in_graph(cat_dims, sizes, out_dims, axis, x0.raw.device)
        joined = torch.cat(raws + [raws[0].new_zeros(zero_shape)], dim=axis)
        out_shape = list(joined.shape)
        out_shape[axis] = sum(sizes)
        raw = torch.gather(joined, axis, index.expand(out_shape))
        return Tensor(raw, out_dims, sparse_dim=x0.sparse_dim, feature_dim=feature_dim), out_dim
    n_out = out_dim.get_max_size()
    index = _gather_index(canonical, cat_dims, tuple(r.shape[axis] for r in raws), bdims, out_dims, axis,
                          x0.raw.device)
    zero = raws[0].new_zeros(zero_shape)
    joined = torch.cat(raws + [zero], dim=axis)
    out_shape = list(joined.shape)
    out_shape[axis] = n_out
    raw = torch.gather(joined, axis, index.expand(out_shape))
    return Tensor(raw, out_dims, sparse_dim=x0.sparse_dim, feature_dim=feature_dim), out_dim


def rf_concat_features(*sources, allow_broadcast: bool = False) -> Tensor:
    """dimtorch.rf.concat_features: concat along each source's feature_dim; the result's feature_dim is
    the concatenated dim. (The C++ function _C._rf_concat_features takes the common call.)"""
    pairs = []
    for s in sources:
        feature = getattr(s, "feature_dim", None)
        if feature is None:
            raise ValueError(f"dimtorch.rf.concat_features(): every source needs a feature_dim, got {s!r}")
        pairs.append((s, feature))
    out, dim = _C.concat(*pairs, allow_broadcast=True) if allow_broadcast else _C.concat(*pairs)
    return Tensor(out.raw, out.dims, feature_dim=dim)


@names_errors("dimtorch.cum_concat_step()")
def cum_concat_step(source: Tensor, *, prev_accum: Tensor, axis: Dim, out_spatial_dim: Optional[Dim] = None):
    """One step of accumulating frames (RETURNN frontend's): prev_accum (over `axis`, e.g. a
    decoder's history) with `source` (one frame, without axis; its dims among prev_accum's)
    appended after each sequence's last frame; returns (tensor, out_spatial_dim), out_spatial_dim
    = axis + 1 by dim math unless given (per-sequence lengths + 1). One pad and one scatter (a cat
    for a static axis), the positions from the dim's cached device lengths."""
    caller = "dimtorch.cum_concat_step()"
    check_tensor(source, caller, what="source")
    check_tensor(prev_accum, caller, what="prev_accum")
    a = axis_of(prev_accum, axis, caller, of="prev_accum")
    if axis in source.dims:
        raise ValueError(f"{caller}: source (one frame) must not have axis {dim_str(axis)} (dims: {dims_str(source.dims)})")
    extra = [d for d in source.dims if d not in prev_accum.dims]
    if extra:
        raise ValueError(f"{caller}: source has dims ({dims_str(extra)}) that prev_accum lacks (prev_accum dims: "
                         f"{dims_str(prev_accum.dims)})")
    new_dim = axis + 1
    if out_spatial_dim is None:
        out_spatial_dim = new_dim
    elif out_spatial_dim is not new_dim and not _tracing.tracing() and not (
            isinstance(out_spatial_dim, Dim) and (out_spatial_dim.size == new_dim.size if new_dim.lengths is None else
                                                  out_spatial_dim.lengths is not None and torch.equal(
                                                      _length_raw(out_spatial_dim, new_dim.lengths.dims),
                                                      _length_raw(new_dim, new_dim.lengths.dims)))):
        raise ValueError(f"{caller}: out_spatial_dim {out_spatial_dim!r} does not have the lengths of "
                         f"{dim_str(axis)} + 1")
    raw = prev_accum.raw
    if not _tracing.tracing():  # (eagerly a raw padded past the longest sequence is cut to it)
        n = axis.get_max_size()  # (eager)
        if raw.shape[a] > n:
            raw = raw.narrow(a, 0, n)
    dims = prev_accum.dims
    frame = source.raw if source.dims == dims[:a] + dims[a + 1:] else source.raw_aligned(dims[:a] + dims[a + 1:])
    frame = frame.unsqueeze(a)
    out_dims = dims[:a] + (out_spatial_dim,) + dims[a + 1:]
    if axis.lengths is None:
        out = torch.cat((raw, frame.expand(raw.shape[:a] + (1,) + raw.shape[a + 1:])), a)
    else:
        pos = lengths_positions(axis, dims, caller, "prev_accum lacks")
        lengths = _C._dim_cached_raw(_LENGTHS, axis, tuple(pos), len(dims), 0, raw.device)  # size 1 at axis
        out = F.pad(raw, (0, 0) * (raw.dim() - 1 - a) + (0, 1))
        shape = raw.shape[:a] + (1,) + raw.shape[a + 1:]
        out.scatter_(a, lengths.expand(shape), frame.expand(shape).to(out.dtype))  # out is new: in place is safe
    return Tensor(out, out_dims, sparse_dim=prev_accum.sparse_dim, feature_dim=prev_accum.feature_dim), out_spatial_dim
