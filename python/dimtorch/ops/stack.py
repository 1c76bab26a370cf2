"""Splitting one dim into parts (split), stacking tensors along a new dim (stack) and its inverse (unstack)."""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from .._core import in_graph as _in_graph, tracing as _tracing
from .._C import Dim, Tensor
from .._core.args import axis_of, check_tensor, dim_str, dims_arg, dims_str, keep_markers
from ._support import names_errors


def _part_lengths(d: Dim, bdims: tuple, caller: str) -> torch.Tensor:
    """Host int64 lengths of an out dim of split, over `bdims` (size 1 where they do not vary)."""
    if d.lengths is None:
        return torch.full([1] * len(bdims), d.size, dtype=torch.int64)
    _part_lengths_over(d, bdims, caller)
    return d.lengths.raw_aligned(bdims).to(torch.int64)


def _part_lengths_over(d: Dim, bdims: tuple, caller: str) -> None:
    """Errors when the lengths of the out dim d vary over a dim the axis' lengths do not."""
    for b in d.lengths.dims:
        if not any(b is e for e in bdims):
            raise ValueError(f"{caller}: the lengths of out dim {dim_str(d)} vary over {dim_str(b)}, the axis' "
                             f"lengths do not (they vary over: {dims_str(bdims)})")


def _concat_parts(axis: Dim) -> list:
    """The dims that dim math concatenated into `axis` (A + B + C gives [A, B, C]), else [axis]."""
    op, a, b, _ = axis.derivation or (None, None, None, None)
    if op != "concat":
        return [axis]
    return _concat_parts(a) + [b]


def _split_dynamic_in_graph(x: Tensor, a: int, out_dims: tuple) -> list:
    """While tracing, _split_dynamic with the part lengths as tensors in the graph: a dynamic part
    spans x's raw axis from its start (its raw size is not its longest sequence)."""
    raw = x.raw
    size = raw.shape[a]
    device = raw.device
    out = []
    offset = 0  # an int while every earlier part is static, else lengths over x's layout
    for d in out_dims:
        part_dims = x.dims[:a] + (d,) + x.dims[a + 1:]
        if isinstance(offset, int):
            width = d.size if d.size is not None else size - offset
            part = raw.narrow(a, offset, width)
        else:
            width = d.size if d.size is not None else size
            shape = list(raw.shape)
            shape[a] = width
            index = (offset + _in_graph.positions(shape, a, device)).clamp(max=size - 1)
            part = torch.gather(raw, a, index.expand(shape))
        out.append(keep_markers(x, part, part_dims))
        if isinstance(offset, int) and d.size is not None:
            offset = offset + d.size
        else:
            offset = offset + (d.size if d.size is not None else _tracing.lengths_raw(d, x.dims, device).to(torch.int64))
    return tuple(out)


def _split_dynamic(x: Tensor, a: int, axis: Dim, out_dims: tuple, caller: str) -> list:
    """Parts of the dynamic `axis`, sequence by sequence (see split)."""
    lengths = axis.lengths
    bdims = tuple(lengths.dims)
    for b in bdims:
        if not any(b is e for e in x.dims):
            raise ValueError(f"{caller}: the lengths of {dim_str(axis)} vary over {dim_str(b)}, which is not a dim "
                             f"of x (dims: {dims_str(x.dims)})")
    if _tracing.tracing():
        for d in out_dims:  # the checks of _part_lengths; the sums are not compared (that reads them)
            if d.lengths is not None:
                _part_lengths_over(d, bdims, caller)
        return _split_dynamic_in_graph(x, a, out_dims)
    parts = [_part_lengths(d, bdims, caller) for d in out_dims]
    parts_of_axis = _concat_parts(axis)
    if not (len(parts_of_axis) == len(out_dims) and all(p is d for p, d in zip(parts_of_axis, out_dims))):
        total = sum(parts)
        if not torch.equal(total.expand(lengths.raw.shape), lengths.raw.to(torch.int64)):  # host: no sync
            raise ValueError(f"{caller}: the lengths of out_dims ({dims_str(out_dims)}) add up to "
                             f"{total.expand(lengths.raw.shape).tolist()}, not to the lengths "
                             f"{lengths.raw.tolist()} of axis {dim_str(axis)}")
    raw = x.raw
    size = raw.shape[a]
    out = []
    offset = 0  # an int while every earlier part is static, else host lengths over bdims
    for d, n in zip(out_dims, parts):
        width = d.size if d.size is not None else d.get_max_size()
        part_dims = x.dims[:a] + (d,) + x.dims[a + 1:]
        if isinstance(offset, int):
            part = raw.narrow(a, offset, width)
        else:
            # Sequence b's part starts at its own offset: one gather with an index from host lengths.
            frames = torch.arange(width, dtype=torch.int64)
            index = (offset.unsqueeze(-1) + frames).clamp(max=size - 1)
            index = Tensor(index, bdims + (d,)).raw_aligned(part_dims)
            if index.device != raw.device:
                index = index.to(raw.device, non_blocking=True)  # from host memory: no wait
            shape = list(raw.shape)
            shape[a] = width
            part = torch.gather(raw, a, index.expand(shape))
        out.append(keep_markers(x, part, part_dims))
        offset = offset + d.size if isinstance(offset, int) and d.size is not None else offset + n
    return tuple(out)


def split(x: Tensor, /, *, axis: Dim, out_dims: Sequence[Dim]) -> tuple:
    """Splits `axis` of x into consecutive parts, one per Dim in `out_dims`; returns one tensor per
    part, with `axis` replaced by its out dim.

    - static axis (or sized from data): static out dims whose sizes add up to the size of axis;
      each part is a view.
    - dynamic axis: out dims static or dynamic whose lengths add up, per sequence, to the lengths of
      axis (checked on the host, no sync; skipped when axis is their sum by dim math, A + B). Each
      sequence's parts follow each other from its start, so split undoes concat: sequence b's part i
      starts at the sum of its earlier parts' lengths. Parts after a dynamic part are one gather
      each (index from host lengths); the others are views.
    While tracing: indices are built in the graph from the lengths, a dynamic part has x's raw size
    of axis (less the static parts before it), and the part lengths' sums are not compared with
    axis' lengths (that reads them)."""
    caller = "dimtorch.split()"
    check_tensor(x, caller)
    a = axis_of(x, axis, caller, what="axis")
    out_dims = dims_arg(out_dims, caller, "out_dims")
    dynamic = axis.lengths is not None
    dims = x.dims
    for d in out_dims:
        if not isinstance(d, Dim) or (d.size is None and not (dynamic and d.lengths is not None)):
            what = "static or dynamic Dims" if dynamic else "static Dims"
            raise ValueError(f"{caller}: out_dims must be {what}, got {out_dims!r}")
        if d is not axis and d in dims:  # Dim equality is identity
            raise ValueError(f"{caller}: out dim {dim_str(d)} is already a dim of x (dims: {dims_str(dims)})")
    if not out_dims:
        raise ValueError(f"{caller}: out_dims is empty; give the dims of the parts")
    if dynamic:
        return _split_dynamic(x, a, axis, out_dims, caller)
    sizes = tuple([d.size for d in out_dims])
    if sum(sizes) != x.raw.shape[a]:
        raise ValueError(f"{caller}: the sizes of out_dims ({dims_str(out_dims)}) add up to {sum(sizes)}, not to the "
                         f"size {x.raw.shape[a]} of axis {dim_str(axis)}")
    # Tensor.split_with_sizes with a tuple: torch.split adds two Python layers (~4 us on tiny tensors).
    parts = x.raw.split_with_sizes(sizes, a)
    before, after = dims[:a], dims[a + 1:]
    sparse_dim, feature_dim = x.sparse_dim, (None if x.feature_dim is axis else x.feature_dim)
    return tuple(Tensor(p, before + (d,) + after, sparse_dim=sparse_dim, feature_dim=feature_dim)
                 for p, d in zip(parts, out_dims))


def _fits_dynamic(out_dim: Dim, n: int, dims: tuple) -> bool:
    """Whether a dynamic out_dim takes n stacked frames: its longest sequence (host) has n frames and
    its lengths vary over dims of the tensors."""
    lengths = out_dim.lengths
    if lengths is None or _tracing.tracing():
        return lengths is not None and all(any(b is d for d in dims) for b in lengths.dims)
    return out_dim.get_max_size() == n and all(any(b is d for d in dims) for b in lengths.dims)


def stack(tensors: Sequence[Tensor], /, *, out_dim: Optional[Dim] = None):
    """Stacks tensors with the same dims (in any order) along a new first dim; returns (tensor,
    out_dim). The result has the first tensor's dims order after out_dim; the others are aligned
    to it. A new out_dim is static with the number of tensors. A given out_dim may be dynamic (e.g.
    from dim math, as T1 + T2: frame by frame results stacked back onto the time dim): its longest
    sequence must have one frame per tensor and its lengths vary over the tensors' dims; frames
    past a sequence's length are padding (what the tensors hold there)."""
    caller = "dimtorch.stack()"
    if not isinstance(tensors, (tuple, list)):
        try:
            tensors = tuple(tensors)
        except TypeError:
            raise TypeError(f"{caller}: tensors must be a sequence of Tensors, got {tensors!r}") from None
    if not tensors:
        raise ValueError(f"{caller}: no tensors to stack")
    first = tensors[0]
    if not isinstance(first, Tensor):
        check_tensor(first, caller, what="tensors[0]")
    raw = first.raw
    dims, dtype, sparse_dim = first.dims, raw.dtype, first.sparse_dim
    raws = [raw]
    for i in range(1, len(tensors)):
        t = tensors[i]
        if not isinstance(t, Tensor):
            check_tensor(t, caller, what=f"tensors[{i}]")
        raw = t.raw
        if t.dims != dims:  # Dim equality is identity; equal tuples are the common case
            if len(t.dims) != len(dims) or not all(d in t.dims for d in dims):
                raise ValueError(f"{caller}: tensors[{i}] has dims ({dims_str(t.dims)}), tensors[0] has "
                                 f"({dims_str(dims)}); all must have the same dims")
            raw = t.raw_aligned(dims)
        if raw.dtype is not dtype:
            raise TypeError(f"{caller}: tensors[{i}] has dtype {t.dtype}, tensors[0] has {first.dtype}")
        if t.sparse_dim is not sparse_dim:
            sparse_dim = None
        raws.append(raw)
    if out_dim is None:
        out_dim = Dim(len(tensors), name="stack")
    elif not isinstance(out_dim, Dim):
        raise TypeError(f"{caller}: out_dim must be a Dim, got {type(out_dim).__name__}")
    elif out_dim in dims or (out_dim.size != len(tensors) and not _fits_dynamic(out_dim, len(tensors), dims)):
        raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} does not fit {len(tensors)} tensors over "
                         f"({dims_str(dims)})")
    return Tensor(torch.stack(raws), (out_dim,) + dims, sparse_dim=sparse_dim, feature_dim=first.feature_dim), out_dim


@names_errors("dimtorch.unstack()")
def unstack(x: Tensor, /, *, axis: Dim) -> tuple:
    """One tensor per index of `axis`, without that dim; views. For a dynamic axis, one per
    position up to the longest sequence (its host max length): in the tensor of position t, the
    entries of sequences not longer than t are padding (whatever x held there, not masked).
    While tracing, one per position of x's raw axis (the number of results is its size: a traced
    graph specializes to it)."""
    caller = "dimtorch.unstack()"
    check_tensor(x, caller)
    a = axis_of(x, axis, caller, what="axis")
    raw = x.raw
    if axis.lengths is not None and not _tracing.tracing() and axis.get_max_size() < raw.shape[a]:
        raw = raw.narrow(a, 0, axis.get_max_size())
    dims = x.dims[:a] + x.dims[a + 1:]
    return tuple(keep_markers(x, r, dims) for r in torch.unbind(raw, a))
