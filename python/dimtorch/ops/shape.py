"""Ops that rearrange axes without moving data between sequences: merge_dims, split_dims, expand_dim, squeeze, replace_dim."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch
import torch.nn.functional as F

from .. import _C
from .._core import in_graph as _in_graph, tracing as _tracing
from .._C import Dim, Tensor, ceildiv
from .._core.args import (  # noqa: F401  (re-exported)
    axis_of, check_tensor, dim_str, dims_arg, dims_str, distinct_axes, has_namesake, keep_markers, namesakes_note,
)
from .._core.errors import naming_errors
from ._support import names_errors

_MASK = 0  # kind of dimtorch._C._dim_cached_raw (src/core/mask.h)


def _lengths_over(dim: Dim) -> tuple:
    """The dims a dynamic dim's lengths vary over (batch dims); () for other dims."""
    return tuple(dim.lengths.dims) if dim.lengths is not None else ()


def _check_lengths_kept(x: Tensor, merged: Sequence[Dim], caller: str) -> None:
    """Errors when a dim of x that stays has lengths over a dim that is merged away (its lengths
    would then refer to a dim the result does not have)."""
    for d in x.dims:
        if any(d is m for m in merged):
            continue
        for b in _lengths_over(d):
            if any(b is m for m in merged):
                raise ValueError(f"{caller}: the lengths of {dim_str(d)} vary over {dim_str(b)}, which would "
                                 f"be merged away (dims: {dims_str(merged)}); merge {dim_str(d)} too, or "
                                 f"pack_padded first")


def _same_lengths(a: Dim, b: Dim) -> bool:
    """Whether two dynamic dims have equal host lengths (over the same batch dims)."""
    la, lb = a.lengths, b.lengths
    if la is None or lb is None or len(la.dims) != len(lb.dims):
        return False
    if not all(any(d is e for e in lb.dims) for d in la.dims):
        return False
    return torch.equal(la.raw.to(torch.int64), lb.raw_aligned(la.dims).to(torch.int64))


def _same_lengths_in_graph(a: Dim, b: Dim) -> bool:
    """While tracing, _same_lengths up to the values (comparing them reads them): both dynamic over
    the same dims."""
    la, lb = a.lengths, b.lengths
    return (la is not None and lb is not None and len(la.dims) == len(lb.dims)
            and all(any(d is e for e in lb.dims) for d in la.dims))


def merge_dims(x: Tensor, /, *, dims: Sequence[Dim], out_dim: Optional[Dim] = None):
    """Merges `dims` (all in x, in this order: the first is the slowest-varying) into one dim at the
    place of the first of them in x; returns (tensor, out_dim). Merged dims need not be adjacent:
    they are permuted into place first. A new out_dim is static when all merged dims are static,
    else (sizes from data) a `Dim(None)`.

    Dynamic dims (RETURNN frontend semantics, with lengths that stay true):
    - a dynamic dim T first in `dims`, the others static or sized from data with product k: each
      sequence's valid frames stay a prefix, so out_dim is `T * k` by dim math (lengths T * k on the
      host, cached: the same merge twice gives the same dim).
    - dims that include a dynamic dim and a dim its lengths vary over (e.g. (batch, time)): every
      frame, padding included, becomes a frame of a `Dim(None)` of size B * T (padding frames keep
      whatever they held; use pack_padded to keep only the valid frames).
    - a dynamic dim that is not first (valid frames would interleave with padding), or two dynamic
      dims: an error.
    A dim of x that is not merged must not have lengths over a merged dim (an error).
    While tracing, a given dynamic out_dim's lengths are not compared with the merged ones (that
    reads them)."""
    caller = "dimtorch.merge_dims()"
    check_tensor(x, caller)
    dims = dims_arg(dims, caller, "dims")
    axes = distinct_axes(x, dims, caller, "dims", "dims entry", "; give the dims to merge")
    _check_lengths_kept(x, dims, caller)
    sizes = [x.raw.shape[a] for a in axes]
    total = math.prod(sizes)
    dynamic = [d for d in dims if d.lengths is not None]
    with_padding = any(any(b is m for m in dims) for d in dynamic for b in _lengths_over(d))
    canonical = None  # the dynamic out dim by dim math
    if dynamic and not with_padding:
        if len(dynamic) > 1 or dims[0] is not dynamic[0]:
            raise ValueError(
                f"{caller}: the dynamic dim {dim_str(dynamic[-1] if dims[0] is dynamic[0] else dynamic[0])} "
                f"must be the only dynamic dim and come first in dims (the slowest-varying), else valid "
                f"frames interleave with padding (dims: {dims_str(dims)}); reorder dims, or pack_padded first")
        inner = math.prod(sizes[1:])
        if inner == 0:
            raise ValueError(f"{caller}: dims {dims_str(dims)} have sizes {sizes}; a dynamic dim cannot be "
                             f"merged with an empty dim")
        canonical = dims[0] * inner
    if out_dim is None:
        if canonical is not None:
            out_dim = canonical
        else:
            name = "*".join(str(d.name) for d in dims)
            if all(d.size is not None for d in dims):
                out_dim = _C._merged_dim(tuple(dims))  # the dim the C++ fast path gives, too
                if any(d is out_dim for d in x.dims):  # x holds it already: a new one
                    out_dim = Dim(total, name=name)
            else:
                out_dim = Dim(None, name=name)
    elif not isinstance(out_dim, Dim):
        raise TypeError(f"{caller}: out_dim must be a Dim, got {type(out_dim).__name__}")
    elif any(d is out_dim for d in x.dims):
        raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} is already a dim of x (dims: {dims_str(x.dims)})")
    elif canonical is not None:
        if out_dim is not canonical and not (_same_lengths_in_graph(out_dim, canonical) if _tracing.tracing() else
                                             _same_lengths(out_dim, canonical)):
            raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} does not have the lengths of the merged dim "
                             f"{dim_str(canonical)} (dims: {dims_str(dims)}, sizes {sizes})")
    elif out_dim.lengths is not None or (out_dim.size is not None and out_dim.size != total):
        raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} does not fit the merged size {total} "
                         f"(dims: {dims_str(dims)}, sizes {sizes})")
    return _regroup(x, axes, [total], (out_dim,)), out_dim


def _regroup(x: Tensor, axes: list, sizes: list, new_dims: tuple) -> Tensor:
    """x with the raw axes `axes` (in this order, the first the slowest-varying) read as new_dims of the
    given sizes, in the place of the first of them; x's other dims stay (merge_dims, reshape)."""
    first = min(axes)
    rest = [i for i in range(x.raw.dim()) if i not in axes]
    before = [i for i in rest if i < first]
    after = [i for i in rest if i > first]
    perm = before + axes + after
    raw = x.raw if perm == sorted(perm) else x.raw.permute(perm)
    shape = [x.raw.shape[i] for i in before] + list(sizes) + [x.raw.shape[i] for i in after]
    dims = tuple(x.dims[i] for i in before) + tuple(new_dims) + tuple(x.dims[i] for i in after)
    return keep_markers(x, raw.reshape(shape), dims)


def _split_dynamic(x: Tensor, a: int, axis: Dim, dims: tuple, pad_to_multiples, pad_value, caller: str):
    """Raw of x with the dynamic `axis` split into (T2, static dims...); T2 = axis // k or
    ceildiv(axis, k) (k the product of the static sizes), see split_dims."""
    if dims[0].size is not None or any(d.size is None for d in dims[1:]):
        raise ValueError(f"{caller}: splitting the dynamic dim {dim_str(axis)} needs dims whose first entry is "
                         f"the dynamic part and the rest static, e.g. ({axis.name} // k, Dim(k)) (dims: "
                         f"{dims_str(dims)})")
    k = math.prod([d.size for d in dims[1:]])
    if k < 1:
        raise ValueError(f"{caller}: the static dims {dims_str(dims[1:])} have no frames")
    floor_dim, ceil_dim = axis // k, ceildiv(axis, k)
    lengths = axis.lengths
    if dims[0] is ceil_dim and (k == 1 or pad_to_multiples is not False):
        pad = True
    elif dims[0] is floor_dim and not pad_to_multiples:
        pad = False
    else:
        want = f"dt.ceildiv({axis.name}, {k})" if pad_to_multiples else f"{axis.name} // {k}"
        other = "" if pad_to_multiples is not None else f" (or dt.ceildiv({axis.name}, {k}) to pad)"
        raise ValueError(f"{caller}: the dynamic part of dims must be {want}{other} by dim math, got "
                         f"{dim_str(dims[0])} (dims: {dims_str(dims)})")
    for b in lengths.dims:
        if not any(b is e for e in x.dims):
            raise ValueError(f"{caller}: the lengths of {dim_str(axis)} vary over {dim_str(b)}, which is not a "
                             f"dim of x (dims: {dims_str(x.dims)})")
    raw = x.raw
    size = raw.shape[a]
    if _tracing.tracing():
        return _split_dynamic_in_graph(x, a, axis, dims, k, pad, pad_value)
    n = dims[0].get_max_size()
    if not pad:
        host = lengths.raw.to(torch.int64)
        if bool((host % k != 0).any()):  # host lengths: no device sync
            raise ValueError(f"{caller}: the lengths of {dim_str(axis)} ({host.tolist()}) are not all multiples "
                             f"of {k}; give pad_to_multiples=True and dt.ceildiv({axis.name}, {k}) to pad them")
        raw = raw.narrow(a, 0, n * k)
    else:
        if size < n * k:
            tail = [0, 0] * (raw.dim() - 1 - a) + [0, n * k - size]
            raw = F.pad(raw, tail, value=pad_value)
        elif size > n * k:
            raw = raw.narrow(a, 0, n * k)
        # Frames past each sequence's end become frames of its last chunk: set them to pad_value with
        # the dim's cached mask at this size.
        pos = tuple(x.dims.index(b) for b in lengths.dims) + (a,)
        mask = _C._dim_cached_raw(_MASK, axis, pos, raw.dim(), n * k, raw.device)
        raw = torch.where(mask, raw, pad_value)
    return raw.reshape(list(raw.shape[:a]) + [n] + [d.size for d in dims[1:]] + list(raw.shape[a + 1:]))


def _split_dynamic_in_graph(x: Tensor, a: int, axis: Dim, dims: tuple, k: int, pad: bool, pad_value):
    """While tracing, _split_dynamic with sizes from x's raw: ceildiv(size, k) (or size // k) chunks,
    and the frames past each sequence's end set to pad_value by a mask built from the lengths."""
    raw = x.raw
    size = raw.shape[a]
    if pad:
        n = -(-size // k)
        raw = F.pad(raw, [0, 0] * (raw.dim() - 1 - a) + [0, n * k - size], value=pad_value)
        raw = _in_graph.masked(raw, x.dims, pad_value, among=(axis,))
    else:
        n = size // k
        raw = raw.narrow(a, 0, n * k)
    return raw.reshape(list(raw.shape[:a]) + [n] + [d.size for d in dims[1:]] + list(raw.shape[a + 1:]))


@names_errors("dimtorch.split_dims()")
def split_dims(x: Tensor, /, *, axis: Dim, dims: Sequence[Dim], pad_to_multiples: Optional[bool] = None,
               pad_value: Optional[Union[int, float]] = None) -> Tensor:
    """Splits `axis` into `dims` (the first is the slowest-varying), in its place.

    - static axis (or sized from data): dims static, their sizes multiply to the size of axis; with
      pad_to_multiples=True the product may exceed it by less than the product of dims[1:], and the
      extra frames at the end hold pad_value (None: 0).
    - dynamic axis T: dims = (T2, static dims with product k), T2 by dim math: `T // k` when every
      length is a multiple of k (checked on the host lengths, else an error), or `dt.ceildiv(T, k)`
      (pad_to_multiples, the default with that dim) where each sequence is padded with pad_value to
      a multiple of k. Frames of a sequence's padding hold pad_value with ceildiv, garbage with //.
      pad_to_multiples=True/False insists on one of the two.
    While tracing: the dynamic part has ceildiv(size, k) (or size // k) frames for x's raw size, and
    with `T // k` the lengths are not checked to be multiples of k (that reads them)."""
    caller = "dimtorch.split_dims()"
    if pad_value is None:  # RETURNN frontend's default
        pad_value = 0
    check_tensor(x, caller)
    a = axis_of(x, axis, caller)
    dims = dims_arg(dims, caller, "dims")
    if not dims:
        raise ValueError(f"{caller}: dims is empty; give the dims to split {dim_str(axis)} into")
    for d in dims:
        if any(d is e for e in x.dims if e is not axis):
            raise ValueError(f"{caller}: {dim_str(d)} is already a dim of x (dims: {dims_str(x.dims)})")
    if axis.lengths is not None:
        raw = _split_dynamic(x, a, axis, dims, pad_to_multiples, pad_value, caller)
        return keep_markers(x, raw, x.dims[:a] + dims + x.dims[a + 1:])
    for d in dims:
        if d.size is None:
            raise ValueError(f"{caller}: dims must be static, {dim_str(d)} is not (dims: {dims_str(dims)})")
    size = x.raw.shape[a]
    total = math.prod([d.size for d in dims])
    raw = x.raw
    fits = total == size
    if pad_to_multiples and not fits:
        chunk = math.prod([d.size for d in dims[1:]])
        fits = size < total < size + chunk
        if fits:
            raw = F.pad(raw, [0, 0] * (raw.dim() - 1 - a) + [0, total - size], value=pad_value)
    if not fits:
        raise ValueError(f"{caller}: the sizes of dims ({dims_str(dims)}) multiply to {total}, "
                         f"but axis {dim_str(axis)} has size {size}")
    shape = list(raw.shape[:a]) + [d.size for d in dims] + list(raw.shape[a + 1:])
    out_dims = x.dims[:a] + dims + x.dims[a + 1:]
    return keep_markers(x, raw.reshape(shape), out_dims)


def expand_dim(x: Tensor, /, dim: Dim) -> Tensor:
    """x broadcast over the new `dim`, put first; a view (torch expand), no copy. dim is static, or a
    dim whose size comes from data with a size bound to it (RETURNN's batch_dim bound per batch:
    `batch_dim.dyn_size_ext = ...`, host int)."""
    caller = "dimtorch.expand_dim()"
    check_tensor(x, caller)
    if not isinstance(dim, Dim):
        raise TypeError(f"{caller}: dim must be a Dim, got {type(dim).__name__}")
    size = dim.size
    if size is None and dim.lengths is None:
        size = getattr(dim, "_bound_size", None)
        size = None if size is None else int(size.raw) if isinstance(size, Tensor) else int(size)
    if size is None:
        raise ValueError(f"{caller}: dim {dim_str(dim)} must be static (a size known without data) or have a "
                         f"size bound to it")
    if any(d is dim for d in x.dims):
        raise ValueError(f"{caller}: dim {dim_str(dim)} is already a dim of x (dims: {dims_str(x.dims)})")
    with naming_errors(caller):  # a size past torch's limits
        raw = x.raw.unsqueeze(0).expand(size, *x.raw.shape)
    return keep_markers(x, raw, (dim,) + x.dims)


@names_errors("dimtorch.expand_dims()")
def expand_dims(source: Tensor, dims: Sequence[Dim]) -> Tensor:
    """source broadcast over the new static `dims` (rf.expand_dims), put first in the given order; a view
    (torch expand), no copy."""
    caller = "dimtorch.expand_dims()"
    check_tensor(source, caller, what="source")
    new = dims_arg(dims, caller, "dims")
    for i, d in enumerate(new):
        if d.size is None:
            raise ValueError(f"{caller}: dim {dim_str(d)} must be static (a size known without data)")
        if any(e is d for e in source.dims) or any(e is d for e in new[:i]):
            raise ValueError(f"{caller}: dim {dim_str(d)} is already a dim of source or given twice (source dims: "
                             f"{dims_str(source.dims)})")
    if not new:
        return source
    raw = source.raw
    with naming_errors(caller):  # a size past torch's limits
        raw = raw.view((1,) * len(new) + tuple(raw.shape)).expand(*(d.size for d in new), *raw.shape)
    return keep_markers(source, raw, new + tuple(source.dims))


def squeeze(x: Tensor, /, axis: Dim) -> Tensor:
    """x without `axis`, whose raw size must be 1."""
    caller = "dimtorch.squeeze()"
    check_tensor(x, caller)
    a = axis_of(x, axis, caller)
    if x.raw.shape[a] != 1:
        raise ValueError(f"{caller}: axis {dim_str(axis)} has size {x.raw.shape[a]}, not 1 "
                         f"(dims: {dims_str(x.dims)}, shape {tuple(x.raw.shape)})")
    return keep_markers(x, x.raw.squeeze(a), x.dims[:a] + x.dims[a + 1:])


@names_errors("dimtorch.replace_dim()")
def replace_dim(x: Tensor, /, *, in_dim: Dim, out_dim: Optional[Dim] = None) -> tuple[Tensor, Dim]:
    """x with `in_dim` renamed to `out_dim` (same raw data); returns (tensor, out_dim). Without
    out_dim, a new dim of the same size (the same lengths for a dynamic dim) is made. A static
    out_dim must have the raw size of in_dim; a dynamic one a max length that fits in it (not
    checked while tracing: that reads the lengths)."""
    caller = "dimtorch.replace_dim()"
    check_tensor(x, caller)
    a = axis_of(x, in_dim, caller, what="in_dim")
    size = x.raw.shape[a]
    if out_dim is None:
        if in_dim.lengths is not None:
            out_dim = Dim(in_dim.lengths, name=in_dim.name)
        else:
            out_dim = Dim(in_dim.size, name=in_dim.name)
    elif not isinstance(out_dim, Dim):
        raise TypeError(f"{caller}: out_dim must be a Dim, got {type(out_dim).__name__}")
    else:
        if any(d is out_dim for d in x.dims if d is not in_dim):
            raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} is already a dim of x (dims: {dims_str(x.dims)})")
        fits = (out_dim.size == size if out_dim.size is not None
                else out_dim.lengths is None or _tracing.tracing() or out_dim.get_max_size() <= size)
        if not fits:
            raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} does not fit the size {size} of "
                             f"in_dim {dim_str(in_dim)}")
    dims = x.dims[:a] + (out_dim,) + x.dims[a + 1:]
    sparse_dim = out_dim if x.sparse_dim is in_dim else x.sparse_dim
    feature_dim = out_dim if x.feature_dim is in_dim else x.feature_dim
    return Tensor(x.raw, dims, sparse_dim=sparse_dim, feature_dim=feature_dim), out_dim
