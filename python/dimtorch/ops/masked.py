"""masked_select and masked_scatter: the entries where a bool mask holds, packed into one new dim, and back."""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

from .. import _C
from .._core import sizes as _sizes, tracing as _tracing
from .._C import Dim, Tensor
from .._core.data_dependent import checkable, select_rows, to_host
from .._core.args import check_tensor, dim_str, dims_arg, dims_str, keep_markers

_MASK = 0  # kind of dimtorch._C._dim_cached_raw (src/core/mask.h)


class _Selection:
    """The entries a call selects: `dims` (packed), `other` (the mask's other dims, each row of them
    packs on its own), their raw sizes, and the bool raw `mask` over other + dims (expanded), False
    on the padding of every dynamic dim among `dims` (whatever the caller's mask holds there)."""

    def __init__(self, mask, dims, caller: str):
        check_tensor(mask, caller, what="mask")
        raw = mask.raw
        if raw.dtype != torch.bool:
            raise TypeError(f"{caller}: mask must be a bool Tensor, got {mask.dtype} (dims: {dims_str(mask.dims)})")
        dims = dims_arg(dims, caller, "dims")
        if not dims:
            raise ValueError(f"{caller}: dims is empty; give the dims of mask to pack")
        if len(set(map(id, dims))) != len(dims):
            raise ValueError(f"{caller}: dims lists a dim twice ({dims_str(dims)})")
        mask_dims = mask.dims
        sizes = dict(zip(mask_dims, raw.shape))  # Dim hash and equality are identity
        order = mask_dims
        dynamic = []
        for d in dims:
            if d not in sizes:
                raise ValueError(f"{caller}: dims entry {dim_str(d)} is not a dim of mask (mask dims: "
                                 f"{dims_str(mask_dims)})")
            lengths = d.lengths
            if lengths is not None:
                dynamic.append((d, lengths))
                # Its lengths vary over batch dims: they join the mask's dims.
                for b, n in zip(lengths.dims, lengths.raw.shape):
                    if b not in sizes:
                        order += (b,)
                        sizes[b] = n
        other = tuple(d for d in order if d not in dims) if len(order) > len(dims) else ()
        for d in other:
            if d.lengths is not None:
                raise ValueError(f"{caller}: mask dim {dim_str(d)} is dynamic and not in dims; the counts of "
                                 f"selected entries would vary over it (dims: {dims_str(dims)}; mask dims: "
                                 f"{dims_str(mask_dims)})")
        if order is not mask_dims:
            raw = mask.raw_aligned(order)
        for d, lengths in dynamic:
            pos = tuple(order.index(b) for b in lengths.dims) + (order.index(d),)
            raw = raw & _C._dim_cached_raw(_MASK, d, pos, len(order), sizes[d], raw.device)
        layout = other + dims
        if layout != order:
            raw = raw.permute([order.index(d) for d in layout])
        self.dims, self.other, self.sizes = dims, other, sizes
        self.other_sizes = [sizes[d] for d in other]
        shape = self.other_sizes + [sizes[d] for d in dims]
        self.n_flat = math.prod(shape[len(other):])
        # (other..., dims flattened): the row of each entry, and its place in the packed order.
        if list(raw.shape) != shape:
            raw = raw.expand(shape)
        self.flat = raw if len(dims) == 1 else raw.reshape(self.other_sizes + [self.n_flat])

    def counts(self) -> torch.Tensor:
        """Selected entries per row of `other` (int64, on the mask's device)."""
        return self.flat.sum(-1)


def masked_select(tensor: Tensor, *, mask: Tensor, dims: Sequence[Dim], out_dim: Optional[Dim] = None):
    """The entries of `tensor` where `mask` holds, packed along `dims` into one new dim (in row-major
    order of `dims`); returns (tensor, out_dim). The inverse is masked_scatter.

    - `dims` = all dims of mask: out_dim is static, of the number of True entries; the result is
      over (out_dim, tensor's other dims).
    - `dims` a part of mask's dims (e.g. mask over (batch, time), dims (time,)): each row of the other
      mask dims packs on its own; out_dim is dynamic, with the number of True entries per row as its
      lengths; the result is over (other mask dims, out_dim, tensor's other dims), padding 0.
    The padding of a dynamic dim among `dims` is never selected (a mask's True there counts as False),
    so every sequence packs as it would alone. `tensor` may lack some mask dims (it is broadcast over
    them).

    The size of the result depends on data: without out_dim this READS THE MASK on the host (the
    positions, or the counts per row: one wait for the device). A given out_dim (static of the count,
    or with the counts per row as lengths) is trusted and nothing is read: it is checked against the
    mask only where that is free (a mask on the CPU).

    While tracing the count is not read: out_dim is dynamic, its lengths the counts computed in the graph
    (0-dim when all of mask's dims are packed, over the other mask dims otherwise) and its padded size
    the static bound (the number of entries of `dims`); the selected entries come first, then zeros.
    A given out_dim is trusted (static of the count, or with the counts as lengths).

    The common call (all of the mask's dims, leading the tensor in the mask's order, no out_dim) is
    dimtorch._C.masked_select, which comes here for the others."""
    caller = "dimtorch.masked_select()"
    check_tensor(tensor, caller, what="tensor")
    sel = _Selection(mask, dims, caller)
    if out_dim is not None:
        if not isinstance(out_dim, Dim):
            raise TypeError(f"{caller}: out_dim must be a Dim, got {type(out_dim).__name__}")
        if out_dim in tensor.dims or out_dim in sel.sizes:
            raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} is already a dim of tensor or mask")
    rest, rest_sizes = _rest(tensor, sel, caller, "tensor")
    x = tensor.raw_aligned(sel.other + sel.dims + rest)
    if len(rest) + len(sel.sizes) != len(tensor.dims):  # tensor lacks mask dims: broadcast over them
        x = x.expand([sel.sizes[d] for d in sel.other + sel.dims] + rest_sizes)
    n_other = len(sel.other)
    if len(sel.dims) > 1:
        x = x.reshape(sel.other_sizes + [sel.n_flat] + rest_sizes)
    flat = sel.flat
    if out_dim is None and _tracing.tracing():
        out_dim = _bounded_out_dim(sel)
    if not sel.other:
        if out_dim is None:
            raw = select_rows(x, flat)
            out_dim = Dim(raw.shape[0], name="masked_select")
            return keep_markers(tensor, raw, (out_dim,) + rest), out_dim
        n = _given_size(out_dim, sel, caller)
        pos = torch.where(flat, flat.cumsum(0) - 1, n)
        raw = x.new_zeros([n + 1] + rest_sizes).index_add_(0, pos, x).narrow(0, 0, n)
        return keep_markers(tensor, raw, (out_dim,) + rest), out_dim
    if out_dim is None:
        counts = to_host(sel.counts())
        out_dim = Dim(Tensor(counts, sel.other), name="masked_select")
        n = out_dim.get_max_size()
    else:
        n = _given_size(out_dim, sel, caller)
    pos = torch.where(flat, flat.cumsum(-1) - 1, n)
    index = pos.view(sel.other_sizes + [sel.n_flat] + [1] * len(rest)).expand(x.shape)
    raw = x.new_zeros(sel.other_sizes + [n + 1] + rest_sizes).scatter_add_(n_other, index, x).narrow(n_other, 0, n)
    return keep_markers(tensor, raw, sel.other + (out_dim,) + rest), out_dim


def _bounded_out_dim(sel: _Selection) -> Dim:
    """While tracing: masked_select's out dim without a data-dependent size, its lengths the counts
    (in the graph) and its padded size the bound n_flat (no device read, no unbacked size)."""
    out_dim = Dim(Tensor(sel.counts(), sel.other), name="masked_select")
    _sizes.bind(out_dim, sel.n_flat)
    return out_dim


def _rest(t: Tensor, sel: _Selection, caller: str, what: str, skip: Optional[Dim] = None):
    """t's dims that are not mask dims (and not `skip`), and their sizes; errors when t has a mask dim
    with another raw size than the mask's."""
    sizes = sel.sizes
    rest, rest_sizes = [], []
    for d, n in zip(t.dims, t.raw.shape):
        m = sizes.get(d)
        if m is None:
            if d is not skip:
                rest.append(d)
                rest_sizes.append(n)
        elif m != n:
            raise ValueError(f"{caller}: dim {dim_str(d)} has size {n} in {what} but {m} in mask")
    return tuple(rest), rest_sizes


def _row_lengths(dim: Dim, sel: _Selection, caller: str, what: str) -> Optional[torch.Tensor]:
    """Host int64 lengths of `dim` per row of sel.other (over sel.other, in its order); None for a
    static dim. Errors when a dynamic dim's lengths vary over other dims than sel.other."""
    if dim.lengths is None:
        return None
    lengths = dim.lengths
    if set(map(id, lengths.dims)) != set(map(id, sel.other)):
        raise ValueError(f"{caller}: the lengths of {what} {dim_str(dim)} vary over ({dims_str(lengths.dims)}), but "
                         f"the rows of mask are over ({dims_str(sel.other)}) (dims: {dims_str(sel.dims)})")
    raw = lengths.raw_aligned(sel.other)
    return raw if raw.dtype == torch.int64 else raw.to(torch.int64)


def _check_counts(sel: _Selection, dim: Dim, lengths: Optional[torch.Tensor], caller: str, what: str) -> None:
    """Where the mask is on the CPU (free to read): each row's count of True entries must be what
    `dim` holds (its lengths, or its size)."""
    if not checkable(sel.flat):
        return
    counts = sel.counts()
    expected = torch.full_like(counts, dim.size) if lengths is None else lengths
    if not torch.equal(counts, expected):
        bad = counts != expected
        i = bad.reshape(-1).nonzero()[0, 0].item()
        got = counts.reshape(-1)[i].item()
        want = expected.reshape(-1)[i].item()
        where = f" in row {i} of ({dims_str(sel.other)})" if sel.other else ""
        raise ValueError(f"{caller}: mask holds {got} selected entries{where}, but {what} {dim_str(dim)} has {want}")


def _given_size(out_dim: Dim, sel: _Selection, caller: str) -> int:
    """The raw size of a given out_dim of masked_select, after checking it fits the selection."""
    if _tracing.tracing() and out_dim.dyn_size is not None:  # (the traced form: counts as lengths)
        return _sizes.padded_size(out_dim, caller)
    if not sel.other and out_dim.size is None:
        raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} must be static when dims are all of mask's dims "
                         f"(one count)")
    if out_dim.size is None and out_dim.lengths is None:
        raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} takes its size from data; give it the counts")
    lengths = _row_lengths(out_dim, sel, caller, "out_dim")
    _check_counts(sel, out_dim, lengths, caller, "out_dim")
    return out_dim.get_max_size()


def masked_scatter(source: Tensor, backup: Optional[Tensor] = None, *, mask: Tensor, dims: Sequence[Dim],
                   in_dim: Dim) -> Tensor:
    """The inverse of masked_select: the frames of `in_dim` of source put, in order, where `mask` holds
    along `dims` (row-major); elsewhere `backup` (broadcast over the result; 0 when None). Returns a
    tensor over (mask's other dims, dims, source's other dims).

    With `dims` a part of mask's dims, each row of the other mask dims takes the frames of its own row
    of source (in_dim then has those rows' counts as lengths, as masked_select makes it). The padding
    of a dynamic dim among `dims` gets backup, whatever the mask holds there. Nothing is read from the
    device: the count of True entries per row must be in_dim's size (or its length in that row),
    checked where the mask is on the CPU; elsewhere a larger count repeats in_dim's last frame.

    The common call (no backup, the mask's packed dims trailing it, source over (rows, in_dim, ...)) is
    dimtorch._C.masked_scatter, which comes here for the others."""
    caller = "dimtorch.masked_scatter()"
    check_tensor(source, caller, what="source")
    if not isinstance(in_dim, Dim):
        raise TypeError(f"{caller}: in_dim must be a Dim, got {type(in_dim).__name__}")
    if in_dim not in source.dims:  # Dim equality is identity
        raise ValueError(f"{caller}: in_dim {dim_str(in_dim)} is not a dim of source (dims: {dims_str(source.dims)})")
    sel = _Selection(mask, dims, caller)
    if in_dim in sel.sizes:
        raise ValueError(f"{caller}: in_dim {dim_str(in_dim)} is a dim of mask")
    for d in source.dims:
        if d in sel.dims:
            raise ValueError(f"{caller}: source has {dim_str(d)}, one of the dims it is scattered into "
                             f"(dims: {dims_str(sel.dims)}; source dims: {dims_str(source.dims)})")
    rest, rest_sizes = _rest(source, sel, caller, "source", skip=in_dim)
    lengths = _row_lengths(in_dim, sel, caller, "in_dim")
    _check_counts(sel, in_dim, lengths, caller, "in_dim")
    out_dims = sel.other + sel.dims + rest
    dims_sizes = [sel.sizes[d] for d in sel.dims]
    n_other = len(sel.other)
    n_in = source.raw.shape[source.dims.index(in_dim)]
    if n_in:
        # Entry k of a row takes that row's frame (number of True entries before it); entries where the
        # mask is False take a clamped frame that the where below drops.
        pos = (sel.flat.cumsum(-1) - 1).clamp_(0, n_in - 1)
        src = source.raw_aligned(sel.other + (in_dim,) + rest)
        if len(rest) + len(sel.other) + 1 != len(source.dims):  # source lacks rows: broadcast over them
            src = src.expand(sel.other_sizes + [n_in] + rest_sizes)
        if n_other:
            index = pos.view(sel.other_sizes + [sel.n_flat] + [1] * len(rest))
            values = src.gather(n_other, index.expand(sel.other_sizes + [sel.n_flat] + rest_sizes))
        else:
            values = src.index_select(0, pos)
    else:
        values = source.raw.new_zeros(sel.other_sizes + [sel.n_flat] + rest_sizes)
    if len(sel.dims) > 1:
        values = values.reshape(sel.other_sizes + dims_sizes + rest_sizes)
    cond = sel.flat.view(sel.other_sizes + dims_sizes + [1] * len(rest))
    if backup is None:
        fill = 0
    else:
        check_tensor(backup, caller, what="backup")
        for d in backup.dims:
            if d not in out_dims:
                raise ValueError(f"{caller}: backup has {dim_str(d)}, which is not a dim of the result "
                                 f"({dims_str(out_dims)})")
        for d, n in zip(backup.dims, backup.raw.shape):
            want = sel.sizes[d] if d in sel.sizes else rest_sizes[rest.index(d)]
            if n != want:
                raise ValueError(f"{caller}: dim {dim_str(d)} has size {n} in backup but {want} in the result")
        fill = backup.raw_aligned(out_dims)
    raw = torch.where(cond, values, fill)
    feature_dim = source.feature_dim if source.feature_dim in rest else None
    return Tensor(raw, out_dims, sparse_dim=source.sparse_dim, feature_dim=feature_dim)
