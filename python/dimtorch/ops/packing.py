"""Packing the valid frames of padded dims into one dim (pack_padded) and back (unpack_padded)."""
from __future__ import annotations

import math
import weakref
from typing import Optional, Sequence

import torch

from .._core import dim_cache as _dim_cache, in_graph as _in_graph, sizes as _dim_sizes, tracing as _tracing
from .._C import Dim, Tensor
from .._core.args import axis_of, check_tensor, dim_str, dims_arg, dims_str, keep_markers, repeats_a_dim
from . import rf_dim as _rf_dim
from ._support import names_errors


def _check_dims(x: Tensor, dims, caller: str) -> tuple:
    dims = dims_arg(dims, caller, "dims")
    if not dims:
        raise ValueError(f"{caller}: dims is empty")
    if repeats_a_dim(dims):
        raise ValueError(f"{caller}: dims lists a dim twice ({dims_str(dims)})")
    return dims


def _row_dims(dims: tuple, x_dims: tuple, caller: str) -> tuple:
    """The dims the lengths of dynamic dims among `dims` vary over that are not packed themselves (e.g.
    batch when packing (hyps, time) with lengths over (batch, hyps)): each of their rows packs on its
    own. In x's order, then the lengths' order; dims with lengths of their own cannot be rows."""
    rows = []
    for d in dims:
        if d.lengths is not None:
            for b in d.lengths.dims:
                if b not in dims and b not in rows:  # Dim equality is identity
                    rows.append(b)
    rows.sort(key=lambda b: x_dims.index(b) if b in x_dims else len(x_dims))
    return tuple(rows)


def _sizes(dims: tuple, x: Optional[Tensor], caller: str) -> list:
    """Raw size of each dim: dynamic dims their max length, static their size, dims sized from data
    the size they have in x or in the lengths of a dynamic dim among dims (host values)."""
    return [d.get_max_size() if d.lengths is not None else _size_without_lengths(d, dims, x, caller) for d in dims]


def _size_without_lengths(d: Dim, dims: tuple, x: Optional[Tensor], caller: str) -> int:
    """Raw size of a dim without lengths: static, or from data (x, or the lengths of a dim among dims)."""
    if d.size is not None:
        return d.size
    if x is not None and any(d is e for e in x.dims):
        return x.raw.shape[x.dims.index(d)]
    found = [e.lengths.raw.shape[e.lengths.dims.index(d)] for e in dims
             if e.lengths is not None and any(d is b for b in e.lengths.dims)]
    if not found:
        raise ValueError(f"{caller}: the size of {dim_str(d)} is unknown (it takes its size from data)")
    return found[0]


def _host_valid(dims: tuple, sizes: list) -> torch.Tensor:
    """bool raw over `dims` (of these sizes) on the host: True where a frame is valid in every dynamic dim."""
    valid = torch.ones(sizes, dtype=torch.bool)
    for i, d in enumerate(dims):
        if d.lengths is None:
            continue
        lengths = d.lengths
        lens = Tensor(lengths.raw.to(torch.int64), lengths.dims).raw_aligned(dims)
        shape = [1] * len(dims)
        shape[i] = sizes[i]
        valid = valid & (torch.arange(sizes[i]).view(shape) < lens)
    return valid


def _valid_index(dims: tuple, sizes: list, device) -> torch.Tensor:
    """int64 positions on `device`, in the row-major order of `dims`, of the frames valid in every
    dynamic dim among dims; computed from host lengths once per dims and sizes, then cached weakly on
    the first dynamic dim (its device copy does not wait for the device)."""
    owner = next((d for d in dims if d.lengths is not None), None)
    # Weak refs: the other dims stay out of the owner's lifetime, and a dead one's id is not reused here.
    key = (tuple(map(weakref.ref, dims)), tuple(sizes), device)
    if owner is not None:
        index = _dim_cache.lookup(owner, key)
        if index is not None:
            return index
    index = _host_valid(dims, sizes).reshape(-1).nonzero().squeeze(1)
    if index.device != device:
        index = index.to(device, non_blocking=True)
    return index if owner is None else _dim_cache.store(owner, key, index)


def _valid_index_in(dims: tuple, lead: tuple, lead_sizes: list, device) -> torch.Tensor:
    """_valid_index's frames (in the row-major order of `dims`) as places in `lead` (the same dims in another
    order, of lead_sizes: x's leading axes), so that one index_select of x's flattened leading axes (a view)
    packs them where aligning x to dims first would copy it (a scan's stacked output is (time, batch, ...));
    cached as _valid_index."""
    owner = next(d for d in dims if d.lengths is not None)
    key = ("in", tuple(map(weakref.ref, dims)), tuple(map(weakref.ref, lead)), tuple(lead_sizes), device)
    index = _dim_cache.lookup(owner, key)
    if index is not None:
        return index
    perm = [next(i for i, e in enumerate(lead) if e is d) for d in dims]
    # x's places seen in the order of dims, the valid ones taken in that row-major order (one boolean index)
    places = torch.arange(math.prod(lead_sizes)).view(lead_sizes).permute(perm)[
        _host_valid(dims, [lead_sizes[i] for i in perm])]
    if places.device != device:
        places = places.to(device, non_blocking=True)
    return _dim_cache.store(owner, key, places)


def pack_padded(x: Tensor, /, *, dims: Sequence[Dim], enforce_sorted: bool = False,
                out_dim: Optional[Dim] = None):
    """The valid frames of `dims` (e.g. (batch, time)) packed into one dim, in row-major order of
    `dims` (for (batch, time): all frames of sequence 0, then of sequence 1, ...); returns
    (tensor, pack_dim), the tensor over (pack_dim, x's other dims in their order).

    When the lengths of a dynamic dim among `dims` also vary over a dim that is not packed (e.g.
    packing (hyps, time) with time's lengths over (batch, hyps)), each row of those dims packs on
    its own: the result is over (those dims, pack_dim, x's other dims), pack_dim dynamic with the
    number of valid frames per row as lengths (host), its padding holding garbage (frames of x's
    padding). unpack_padded is the inverse.

    The packed size is data-dependent: it is the number of valid frames, taken from the HOST
    lengths of the dynamic dims (never read from the device), and so is the index of the frames
    kept (made once per dims and layout, copied to x's device without waiting). A new pack_dim is
    static with that size. A given out_dim declared `Dim(None)` (no size, no lengths: RETURNN
    frontend's way to name it) takes the result: its size from data, or, packing per row, the
    counts per row bound as its lengths (as `Dim.dyn_size_ext = ...` binds them).

    The common call (dims leading x, one of them dynamic) is dimtorch._C.pack_padded, which keeps
    its index on the dim and comes here for the others.

    `enforce_sorted`: RETURNN frontend's option to reorder the sequences longest first; only False
    (RETURNN has no other either).

    While tracing, the packed size cannot be data: pack_dim is a dynamic dim whose lengths are a
    0-dim tensor holding the number of valid frames (over no batch dims), with the static upper
    bound prod(raw sizes of dims) as its raw size; the valid frames come first, in the order
    above, then the padding frames (whatever x held there). A given out_dim must be such a dim
    (its lengths are not compared with the count: that reads them). Packed per row, pack_dim's
    lengths are the counts per row (in the graph) and its padded size the same bound, prod(raw sizes
    of dims); each row's valid frames first, then its padding frames."""
    caller = "dimtorch.pack_padded()"
    check_tensor(x, caller)
    if enforce_sorted is not False:
        raise NotImplementedError(f"{caller}: enforce_sorted=True (reordering the sequences longest first) is "
                                  f"not implemented (as in RETURNN frontend)")
    raw = x.raw
    dims = _check_dims(x, dims, caller)
    x_dims = x.dims
    for d in dims:
        axis_of(x, d, caller, what="dims entry")
    rows = _row_dims(dims, x_dims, caller)
    if rows:
        if _tracing.tracing():
            return _pack_rows_in_graph(x, dims, rows, out_dim, caller)
        return _pack_rows(x, dims, rows, out_dim, caller)
    if _tracing.tracing():
        return _pack_in_graph(x, dims, out_dim, caller)
    sizes = _sizes(dims, x, caller)
    n = len(dims)
    lead = x_dims[:n]
    size_of = {id(d): size for d, size in zip(dims, sizes)}
    if all(size_of.get(id(e)) == raw.shape[a] for a, e in enumerate(lead)):
        # dims lead x (in their order, or in another: the frames' places in x's), no frames beyond the max
        # lengths: one flatten (a view).
        index = _valid_index(dims, sizes, raw.device) if lead == dims else \
            _valid_index_in(dims, lead, list(raw.shape[:n]), raw.device)
        out_dim = _pack_dim(out_dim, index.shape[0], dims, caller)
        raw = raw.flatten(0, n - 1) if n > 1 else raw
        return keep_markers(x, raw.index_select(0, index), (out_dim,) + x_dims[n:]), out_dim
    index = _valid_index(dims, sizes, raw.device)
    out_dim = _pack_dim(out_dim, index.shape[0], dims, caller)
    rest = tuple(d for d in x_dims if d not in dims)
    for d, size in zip(dims, sizes):
        a = x_dims.index(d)
        if raw.shape[a] > size:
            raw = raw.narrow(a, 0, size)
    raw = Tensor(raw, x_dims).raw_aligned(dims + rest)
    raw = raw.reshape((math.prod(sizes),) + tuple(raw.shape[len(dims):]))
    return keep_markers(x, raw.index_select(0, index), (out_dim,) + rest), out_dim


def _packing_order(dims: tuple, sizes, device):
    """While tracing: (index, valid), `index` the int64 frames of the row-major flattening of `dims`
    (raw `sizes`) with the valid ones first, each group in its order, and `valid` their flat bool
    mask (None when dims have no padding), on `device`; built in the graph from the lengths."""
    n = 1
    for s in sizes:
        n = n * s
    frames = torch.arange(n, device=device)
    mask = _in_graph.valid_mask(dims, sizes, device)
    if mask is None:
        return frames, None
    valid = mask.expand(tuple(sizes)).reshape(n)
    before = valid.to(torch.int64).cumsum(0)  # valid frames up to each frame, itself included
    total = before[-1:].sum()  # 0-dim, also for n == 0
    dest = torch.where(valid, before - 1, total + frames - before)
    return torch.empty_like(frames).scatter_(0, dest, frames), valid


def _valid_count(dims: tuple, sizes) -> torch.Tensor:
    """While tracing, the 0-dim int64 number of valid frames of `dims` (raw `sizes`), computed
    where the lengths live (the pack dim's lengths stay with the other lengths)."""
    device = next((d.lengths.raw.device for d in dims if d.lengths is not None), torch.device("cpu"))
    mask = _in_graph.valid_mask(dims, sizes, device)
    if mask is None:
        n = 1
        for s in sizes:
            n = n * s
        return torch.full((), n, dtype=torch.int64, device=device)
    return mask.expand(tuple(sizes)).sum()


def _pack_in_graph(x: Tensor, dims: tuple, out_dim: Optional[Dim], caller: str):
    """pack_padded while tracing (see its docstring)."""
    rest = tuple(d for d in x.dims if not any(d is e for e in dims))
    raw = x.raw_aligned(dims + rest)
    sizes = tuple(raw.shape[:len(dims)])
    index, _ = _packing_order(dims, sizes, raw.device)
    if out_dim is None:
        out_dim = Dim(Tensor(_valid_count(dims, sizes), ()), name="pack")
    elif not isinstance(out_dim, Dim):
        raise TypeError(f"{caller}: out_dim must be a Dim, got {type(out_dim).__name__}")
    elif out_dim.lengths is None or out_dim.lengths.dims:
        raise ValueError(f"{caller}: while tracing, the pack dim has the number of valid frames as 0-dim lengths "
                         f"(its size is data); out_dim {dim_str(out_dim)} must be such a dim, or give none")
    flat = raw.reshape((index.shape[0],) + tuple(raw.shape[len(dims):]))
    return keep_markers(x, flat.index_select(0, index), (out_dim,) + rest), out_dim


def _unpack_in_graph(x: Tensor, a: int, dims: tuple, in_dim: Dim, caller: str) -> Tensor:
    """unpack_padded while tracing (see its docstring)."""
    if in_dim.lengths is None or in_dim.lengths.dims:
        raise ValueError(f"{caller}: while tracing, in_dim must be a pack dim of pack_padded traced too (lengths: "
                         f"the 0-dim count of valid frames), got {dim_str(in_dim)}")
    n = x.raw.shape[a]
    known = 1
    unknown = [i for i, d in enumerate(dims) if d.lengths is not None]
    if len(unknown) != 1:
        raise ValueError(f"{caller}: while tracing, dims must hold exactly one dynamic dim (its padded size is "
                         f"in_dim's size over the others'), got ({dims_str(dims)})")
    sizes = []
    for i, d in enumerate(dims):
        if i == unknown[0]:
            sizes.append(None)
            continue
        size = _size_without_lengths(d, dims, None, caller)
        sizes.append(size)
        known = known * size
    sizes[unknown[0]] = n // known
    raw = x.raw.movedim(a, 0) if a else x.raw
    index, valid = _packing_order(dims, sizes, raw.device)
    out = raw.new_zeros(raw.shape).index_copy(0, index, raw)
    if valid is not None:
        out = torch.where(valid.reshape((n,) + (1,) * (raw.dim() - 1)), out, 0)
    rest = tuple(d for d in x.dims if d is not in_dim)
    return keep_markers(x, out.reshape(tuple(sizes) + tuple(raw.shape[1:])), dims + rest)


def _pack_dim(out_dim: Optional[Dim], total: int, dims: tuple, caller: str) -> Dim:
    """A new static pack dim of `total` frames, or the given one after checking its size."""
    if out_dim is None:
        return Dim(total, name="pack")
    if not isinstance(out_dim, Dim):
        raise TypeError(f"{caller}: out_dim must be a Dim, got {type(out_dim).__name__}")
    if out_dim.size != total and not _unknown(out_dim):  # a Dim(None): its size comes from data
        raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} does not fit the {total} valid frames of "
                         f"({dims_str(dims)})")
    return out_dim


@names_errors("dimtorch.unpack_padded()")
def unpack_padded(x: Tensor, /, *, dims: Sequence[Dim], in_dim: Dim) -> Tensor:
    """Inverse of pack_padded: the frames of `in_dim` put back at the valid positions of `dims`;
    returns a tensor over (*dims, x's other dims), padding 0. The positions come from the HOST
    lengths (the copy of the index to x's device does not wait). Packed per row (lengths of dims
    that vary over a dim not in dims), in_dim has the rows' counts as lengths and the result is
    over (those row dims, *dims, x's other dims).

    While tracing, in_dim must be the pack dim of a traced pack_padded (0-dim lengths, raw size the
    product of the padded sizes of dims) and dims must hold one dynamic dim: its padded size is
    in_dim's raw size over the product of the others'. Positions are built in the graph. Packed per
    row, in_dim has the counts per row as lengths, and dims take their padded sizes in the trace."""
    caller = "dimtorch.unpack_padded()"
    check_tensor(x, caller)
    a = axis_of(x, in_dim, caller, what="in_dim")
    dims = _check_dims(x, dims, caller)
    for d in dims:
        if any(d is e for e in x.dims):
            raise ValueError(f"{caller}: {dim_str(d)} is already a dim of x (dims: {dims_str(x.dims)})")
    rows = _row_dims(dims, x.dims, caller)
    if rows:
        if _tracing.tracing():
            return _unpack_rows_in_graph(x, dims, rows, in_dim, caller)
        return _unpack_rows(x, dims, rows, in_dim, caller)
    if _tracing.tracing():
        return _unpack_in_graph(x, a, dims, in_dim, caller)
    sizes = _sizes(dims, None, caller)
    raw = x.raw.movedim(a, 0) if a else x.raw
    index = _valid_index(dims, sizes, raw.device)
    if index.shape[0] != x.raw.shape[a]:
        raise ValueError(f"{caller}: in_dim {dim_str(in_dim)} has {x.raw.shape[a]} frames, but ({dims_str(dims)}) "
                         f"have {index.shape[0]} valid frames")
    rest = tuple(d for d in x.dims if d is not in_dim)
    out = raw.new_zeros((math.prod(sizes),) + tuple(raw.shape[1:])).index_copy(0, index, raw)
    return keep_markers(x, out.reshape(tuple(sizes) + tuple(raw.shape[1:])), dims + rest)


def _row_index(dims: tuple, rows: tuple, sizes: list, row_sizes: list, device):
    """For packing `dims` per row of `rows`: (flat positions in (rows, dims) of each packed frame, in
    (rows, packed) order, padding frames pointing at the row's other frames; the same with padding
    frames pointing one past the end; the counts per row over rows, int64 on the host). From host
    lengths, cached weakly on the first dynamic dim; device copies do not wait for the device."""
    owner = next(d for d in dims if d.lengths is not None)
    key = ("rows", len(rows), tuple(map(weakref.ref, rows + dims)), tuple(row_sizes + sizes), device)
    hit = _dim_cache.lookup(owner, key)
    if hit is not None:
        return hit
    valid = _host_valid(rows + dims, row_sizes + sizes)
    n_rows, n_flat = math.prod(row_sizes), math.prod(sizes)
    valid = valid.reshape(n_rows, n_flat)
    counts = valid.sum(-1)
    n_max = int(counts.max()) if counts.numel() else 0
    # A stable sort of "not valid" puts each row's valid positions first, in order.
    order = torch.sort((~valid).to(torch.uint8), dim=-1, stable=True).indices[:, :n_max]
    base = torch.arange(n_rows).view(n_rows, 1) * n_flat
    gather_index = (order + base).reshape(-1)
    in_row = torch.arange(n_max).view(1, n_max) < counts.view(n_rows, 1)
    scatter_index = torch.where(in_row, order + base, n_rows * n_flat).reshape(-1)
    entry = (gather_index.to(device, non_blocking=True), scatter_index.to(device, non_blocking=True),
             counts.reshape(row_sizes))
    return _dim_cache.store(owner, key, entry)


def _row_layout(x: Tensor, dims: tuple, rows: tuple, sized_by: Optional[Tensor], caller: str):
    """Packing `dims` per row of `rows` (pack and unpack): (sizes of dims, by _sizes(dims, sized_by), sizes of
    the rows, _row_index's entry); rows must not have lengths of their own."""
    for b in rows:
        if b.lengths is not None:
            raise ValueError(f"{caller}: the lengths of dims vary over {dim_str(b)}, which has lengths of its own")
    sizes = _sizes(dims, sized_by, caller)
    row_sizes = [_row_size(b, dims, x) for b in rows]
    return sizes, row_sizes, _row_index(dims, rows, sizes, row_sizes, x.raw.device)


def _pack_rows(x: Tensor, dims: tuple, rows: tuple, out_dim: Optional[Dim], caller: str):
    """pack_padded of `dims` per row of `rows` (see pack_padded)."""
    sizes, row_sizes, (gather_index, _, counts) = _row_layout(x, dims, rows, x, caller)
    if out_dim is not None and not isinstance(out_dim, Dim):
        raise TypeError(f"{caller}: out_dim must be a Dim, got {type(out_dim).__name__}")
    pack = Dim(Tensor(counts, rows), name="pack") if out_dim is None else out_dim
    if out_dim is not None and _unknown(out_dim):
        # a declared Dim(None) (RETURNN frontend's way to name the packed dim): it takes the counts per row
        # as its lengths, bound as Dim.dyn_size_ext binds them (eager only; the counts are on the host)
        _rf_dim.bind_lengths(out_dim, Tensor(counts, rows))
    elif out_dim is not None:
        _check_row_dim(out_dim, counts, rows, caller)
    rest = tuple(d for d in x.dims if d not in dims and d not in rows)  # Dim equality is identity
    rest_sizes = [x.raw.shape[x.dims.index(d)] for d in rest]
    raw = x.raw
    for d, n in zip(dims, sizes):
        a = x.dims.index(d)
        if raw.shape[a] > n:
            raw = raw.narrow(a, 0, n)
    raw = Tensor(raw, x.dims).raw_aligned(rows + dims + rest)
    raw = raw.expand(row_sizes + sizes + rest_sizes).reshape([math.prod(row_sizes) * math.prod(sizes)] + rest_sizes)
    n_max = pack.get_max_size()
    out = raw.index_select(0, gather_index).reshape(row_sizes + [n_max] + rest_sizes)
    return keep_markers(x, out, rows + (pack,) + rest), pack


def _row_order(layout: tuple, row_sizes: list, sizes: list, device):
    """While tracing, packing `layout` = rows + dims per row: (valid (n_rows, n_flat) bool, the slot of each
    frame in its row's packed order (valid frames first, in order, then the others), counts per row)."""
    n_rows, n_flat = math.prod(row_sizes), math.prod(sizes)
    shape = list(row_sizes) + list(sizes)
    mask = _in_graph.valid_mask(layout, shape, device)
    valid = (mask.expand(shape) if mask is not None else torch.ones(shape, dtype=torch.bool, device=device)
             ).reshape(n_rows, n_flat)
    before = valid.to(torch.int64).cumsum(-1)  # valid frames up to each frame, itself included
    counts = valid.sum(-1)
    frames = torch.arange(n_flat, device=device)
    slot = torch.where(valid, before - 1, counts.unsqueeze(-1) + frames - before)
    return valid, slot, counts


def _pack_rows_in_graph(x: Tensor, dims: tuple, rows: tuple, out_dim: Optional[Dim], caller: str):
    """pack_padded per row while tracing (see its docstring)."""
    for b in rows:
        if b.lengths is not None:
            raise ValueError(f"{caller}: the lengths of dims vary over {dim_str(b)}, which has lengths of its own")
    rest = tuple(d for d in x.dims if d not in dims and d not in rows)  # Dim equality is identity
    rest_sizes = [x.raw.shape[x.dims.index(d)] for d in rest]
    sizes = [x.raw.shape[x.dims.index(d)] for d in dims]
    row_sizes = [_row_size(b, dims, x) for b in rows]
    raw = Tensor(x.raw, x.dims).raw_aligned(rows + dims + rest)
    n_rows, n_flat = math.prod(row_sizes), math.prod(sizes)
    raw = raw.expand(row_sizes + sizes + rest_sizes).reshape([n_rows, n_flat] + rest_sizes)
    _, slot, counts = _row_order(rows + dims, row_sizes, sizes, raw.device)
    index = torch.empty_like(slot).scatter_(-1, slot, torch.arange(n_flat, device=raw.device).expand(slot.shape))
    out = raw.gather(1, index.view([n_rows, n_flat] + [1] * len(rest)).expand(raw.shape))
    if out_dim is None:
        out_dim = Dim(Tensor(counts.reshape(row_sizes), rows), name="pack")
    elif not isinstance(out_dim, Dim):
        raise TypeError(f"{caller}: out_dim must be a Dim, got {type(out_dim).__name__}")
    _dim_sizes.bind(out_dim, n_flat)
    return keep_markers(x, out.reshape(row_sizes + [n_flat] + rest_sizes), rows + (out_dim,) + rest), out_dim


def _unpack_rows_in_graph(x: Tensor, dims: tuple, rows: tuple, in_dim: Dim, caller: str) -> Tensor:
    """unpack_padded per row while tracing (see its docstring)."""
    if in_dim.lengths is None or set(map(id, in_dim.lengths.dims)) != set(map(id, rows)):
        raise ValueError(f"{caller}: in_dim {dim_str(in_dim)} must have the valid-frame counts per row of "
                         f"({dims_str(rows)}) as lengths")
    sizes = [_dim_sizes.padded_size(d, caller, rows + dims) for d in dims]
    row_sizes = [_row_size(b, dims, x) for b in rows]
    rest = tuple(d for d in x.dims if d is not in_dim and d not in rows)  # Dim equality is identity
    rest_sizes = [x.raw.shape[x.dims.index(d)] for d in rest]
    n = x.raw.shape[x.dims.index(in_dim)]
    n_rows, n_flat = math.prod(row_sizes), math.prod(sizes)
    raw = Tensor(x.raw, x.dims).raw_aligned(rows + (in_dim,) + rest)
    raw = raw.expand(row_sizes + [n] + rest_sizes).reshape([n_rows, n] + rest_sizes)
    valid, slot, _ = _row_order(rows + dims, row_sizes, sizes, raw.device)
    index = slot.clamp(max=torch.sym_max(n - 1, 0)).view([n_rows, n_flat] + [1] * len(rest))
    out = raw.gather(1, index.expand([n_rows, n_flat] + rest_sizes))
    out = torch.where(valid.view([n_rows, n_flat] + [1] * len(rest)), out, 0)
    return keep_markers(x, out.reshape(row_sizes + sizes + rest_sizes), rows + dims + rest)


def _row_size(b: Dim, dims: tuple, x: Tensor) -> int:
    """Raw size of a row dim: from x, its static size, or the lengths that vary over it."""
    if b in x.dims:  # Dim equality is identity
        return x.raw.shape[x.dims.index(b)]
    if b.size is not None:
        return b.size
    for d in dims:
        if d.lengths is not None and b in d.lengths.dims:
            return d.lengths.raw.shape[d.lengths.dims.index(b)]
    raise AssertionError("a row dim comes from the lengths of a packed dim")


def _unknown(dim: Dim) -> bool:
    """A dim with neither a size nor lengths (declared Dim(None), nothing bound)."""
    return dim.size is None and dim.lengths is None and getattr(dim, "_bound_size", None) is None


def _check_row_dim(dim: Dim, counts: torch.Tensor, rows: tuple, caller: str) -> None:
    """A given pack dim must have the packed counts as lengths, over the row dims."""
    lengths = dim.lengths
    fits = lengths is not None and set(map(id, lengths.dims)) == set(map(id, rows)) and torch.equal(
        lengths.raw_aligned(rows).to(torch.int64), counts)
    if not fits:
        raise ValueError(f"{caller}: {dim_str(dim)} does not have the valid-frame counts {counts.tolist()} per row of "
                         f"({dims_str(rows)}) as lengths")


def _unpack_rows(x: Tensor, dims: tuple, rows: tuple, in_dim: Dim, caller: str) -> Tensor:
    """unpack_padded of frames packed per row of `rows` (see _pack_rows)."""
    sizes, row_sizes, (_, scatter_index, counts) = _row_layout(x, dims, rows, None, caller)
    _check_row_dim(in_dim, counts, rows, caller)
    n_max = in_dim.get_max_size()
    a = x.dims.index(in_dim)
    if x.raw.shape[a] < n_max:
        raise ValueError(f"{caller}: in_dim {dim_str(in_dim)} has {x.raw.shape[a]} frames, fewer than its max length "
                         f"{n_max}")
    raw = x.raw.narrow(a, 0, n_max) if x.raw.shape[a] > n_max else x.raw
    rest = tuple(d for d in x.dims if d is not in_dim and d not in rows)  # Dim equality is identity
    rest_sizes = [x.raw.shape[x.dims.index(d)] for d in rest]
    raw = Tensor(raw, x.dims).raw_aligned(rows + (in_dim,) + rest)
    raw = raw.expand(row_sizes + [n_max] + rest_sizes).reshape([math.prod(row_sizes) * n_max] + rest_sizes)
    total = math.prod(row_sizes) * math.prod(sizes)
    out = raw.new_zeros([total + 1] + rest_sizes).index_add(0, scatter_index, raw).narrow(0, 0, total)
    return keep_markers(x, out.reshape(row_sizes + sizes + rest_sizes), rows + dims + rest)
