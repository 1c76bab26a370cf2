"""slice with a size (int, Tensor of lengths or Dim), an out_dim, or per-sequence starts (a Tensor): a window of
each sequence. dimtorch.slice comes here for these arguments (see _slicing.slice for int start/end)."""
from __future__ import annotations

from typing import Optional

import torch

from ._C import Dim, Tensor, combine, compare, maximum, reduce_any
from ._creation import range_over_dim
from ._data_dependent import to_host
from ._gather import gather
from ._args import check_tensor, dim_str, dims_str, keep_markers

_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _int_arg(value) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def _size_dim(size, caller: str) -> Dim:
    """The out dim a `size` argument stands for: the Dim itself, a static Dim for an int, a dynamic
    Dim with the Tensor as lengths (moved to the host if it is not there: that waits for the device)."""
    if isinstance(size, Dim):
        if size.size is None and size.dyn_size is None:
            raise ValueError(f"{caller}: size {dim_str(size)} takes its size from data; it needs a size")
        return size
    if _int_arg(size):
        if size < 0:
            raise ValueError(f"{caller}: size must be >= 0, got {size}")
        return Dim(size, name="slice")
    if isinstance(size, Tensor):
        if size.raw.dtype not in _INT_DTYPES:
            raise TypeError(f"{caller}: size must be an integer Tensor, got {size.dtype}")
        if not size.dims:
            return Dim(int(to_host(size.raw)), name="slice")
        return Dim(Tensor(to_host(size.raw), size.dims), name="slice")
    raise TypeError(f"{caller}: size must be an int, a Tensor or a Dim, got {type(size).__name__}")


def _sizes(dim: Dim) -> Tensor:
    """A dim's host lengths, or its size as a 0-dim host Tensor."""
    if dim.dyn_size is not None:
        return dim.dyn_size
    return Tensor(torch.tensor(dim.get_max_size(), dtype=torch.int64), ())


def _same_sizes(a: Dim, b: Dim) -> bool:
    """Whether two dims have the same size, or the same host lengths over the same dims."""
    if a is b:
        return True
    if (a.dyn_size is None) != (b.dyn_size is None):
        return False
    if a.dyn_size is None:
        return a.size == b.size
    la, lb = a.dyn_size, b.dyn_size
    return set(map(id, la.dims)) == set(map(id, lb.dims)) and torch.equal(
        la.raw.to(torch.int64), lb.raw_aligned(la.dims).to(torch.int64))


def _as_out_dim(computed: Dim, out_dim: Optional[Dim], caller: str) -> Dim:
    """The given out_dim after checking it has the computed sizes, else the computed dim."""
    if out_dim is None:
        return computed
    if not isinstance(out_dim, Dim):
        raise TypeError(f"{caller}: out_dim must be a Dim, got {type(out_dim).__name__}")
    if not _same_sizes(computed, out_dim):
        got = _sizes(out_dim).raw.tolist()
        want = _sizes(computed).raw.tolist()
        raise ValueError(f"{caller}: out_dim {dim_str(out_dim)} has sizes {got}, but the slice has {want}")
    return out_dim


def slice_window(x: Tensor, a: int, axis: Dim, start, end, step, size, out_dim, caller: str):
    """See dimtorch.slice: returns (tensor, out_dim)."""
    from ._slicing import slice as int_slice  # noqa: PLC0415  (the int start/end definition)
    if step is None:
        step = 1
    if not _int_arg(step) or step < 1:
        raise ValueError(f"{caller}: step must be an int >= 1, got {step!r}")
    if size is not None and end is not None:
        raise ValueError(f"{caller}: give end or size, not both (end={end!r}, size={size!r})")
    if size is not None and step != 1:
        raise ValueError(f"{caller}: size takes step 1, got step={step}")
    if isinstance(start, Tensor):
        return _per_sequence_start(x, axis, start, end, step, size, out_dim, caller)
    if start is None:
        start = 0
    if not _int_arg(start):
        raise TypeError(f"{caller}: start must be an int or an integer Tensor, got {type(start).__name__}")
    if size is None:
        out, computed = int_slice(x, axis=axis, start=start, end=end, step=step)
        dim = _as_out_dim(computed, out_dim, caller)
        return (out, dim) if dim is computed else (keep_markers(x, out.raw, out.dims[:a] + (dim,) + out.dims[a + 1:]), dim)
    dim = _as_out_dim(_size_dim(size, caller), out_dim, caller)
    n_raw = x.raw.shape[a]
    s = start + n_raw if start < 0 and axis.dyn_size is None else start
    n = dim.get_max_size()
    if s < 0 or s + n > n_raw:
        raise ValueError(f"{caller}: frames {start}:{start}+{n} are out of range of {dim_str(axis)} (size {n_raw})")
    if axis.dyn_size is not None or dim.dyn_size is not None:
        # Each sequence's window must lie within it (host lengths): its frames never read padding.
        over = compare(combine(_sizes(dim), s, "add"), _sizes(axis), "greater", allow_broadcast_all_sources=True)
        if bool(reduce_any(over, axis=over.dims).raw) if over.dims else bool(over.raw):
            raise ValueError(f"{caller}: a sequence's window {start}:{start}+{dim_str(dim)} goes past its end in "
                             f"{dim_str(axis)} (lengths {_sizes(axis).raw.tolist()}, window sizes "
                             f"{_sizes(dim).raw.tolist()})")
    raw = x.raw.narrow(a, s, n)
    return keep_markers(x, raw, x.dims[:a] + (dim,) + x.dims[a + 1:]), dim


def _per_sequence_start(x: Tensor, axis: Dim, start: Tensor, end, step: int, size, out_dim, caller: str):
    """start a Tensor (over batch dims, or 0-dim): each sequence's window from its own start, by a
    gather with indices clipped into each sequence (frames past its end read its last frame)."""
    if start.raw.dtype not in _INT_DTYPES:
        raise TypeError(f"{caller}: start must be an int or an integer Tensor, got a {start.dtype} Tensor")
    if axis in start.dims:  # Dim equality is identity
        raise ValueError(f"{caller}: start has the sliced axis {dim_str(axis)} among its dims ({dims_str(start.dims)})")
    if size is not None:
        dim = _as_out_dim(_size_dim(size, caller), out_dim, caller)
    else:
        # Lengths max(0, ceildiv(stop - start, step)) on the host: start is READ ON THE HOST (one wait for
        # the device where it lives there); give size or out_dim to avoid that.
        host_start = Tensor(to_host(start.raw).to(torch.int64), start.dims)
        length = _sizes(axis)
        if end is None:
            stop = length
        elif isinstance(end, Tensor):
            stop = combine(Tensor(to_host(end.raw).to(torch.int64), end.dims), length, "minimum",
                           allow_broadcast_all_sources=True)
        elif _int_arg(end):
            stop = combine(length, end, "add") if end < 0 else combine(length, end, "minimum")
        else:
            raise TypeError(f"{caller}: end must be an int, a Tensor or None, got {type(end).__name__}")
        n = maximum(combine(stop, host_start, "sub", allow_broadcast_all_sources=True), 0)
        n = -((-n) // step)
        computed = Dim(int(n.raw), name="slice") if not n.dims else Dim(n, name="slice")
        dim = _as_out_dim(computed, out_dim, caller)
    device = x.raw.device
    first = start if start.raw.device == device else Tensor(start.raw.to(device, non_blocking=True), start.dims)
    offsets = range_over_dim(dim, device=device)
    if step != 1:
        offsets = offsets * step
    index = combine(first, offsets, "add", allow_broadcast_all_sources=True)
    index = Tensor(index.raw, index.dims, sparse_dim=axis)
    return gather(x, indices=index, axis=axis, clip_to_valid=True), dim
