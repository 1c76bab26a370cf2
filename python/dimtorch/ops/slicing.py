"""Slicing along one dim (slice; with a size, an out_dim or per-sequence starts: a window of each sequence,
slice_window below), shifting frames (shift_right, shift_left), reversal per sequence."""
from __future__ import annotations

import builtins
from typing import Optional

import torch

from .._core import dim_cache as _dim_cache, in_graph as _in_graph, tracing as _tracing
from .._C import Dim, Tensor, ceildiv, combine, compare, maximum, reduce_any
from .._core.data_dependent import to_host
from .._core.args import axis_of, check_tensor, dim_str, dims_str, keep_markers
from ._support import names_errors
from .creation import range_over_dim
from .gather import gather


def _lengths_in(lengths: Tensor, dims: tuple) -> bool:
    """Whether every dim the lengths vary over is in `dims`."""
    for b in lengths.dims:
        if b not in dims:  # Dim equality is identity
            return False
    return True


def _lengths_over_x(x: Tensor, axis: Dim, caller: str) -> Tensor:
    """Host lengths of the dynamic `axis`, after checking that they vary only over dims of x."""
    lengths = axis.lengths
    for b in lengths.dims:
        if b not in x.dims:  # Dim equality is identity
            raise ValueError(f"{caller}: the lengths of {dim_str(axis)} vary over {dim_str(b)}, which is not a dim "
                             f"of x (dims: {dims_str(x.dims)})")
    return lengths


def _host_to_x(raw: torch.Tensor, dims: tuple, x: Tensor) -> torch.Tensor:
    """A host raw over `dims` (all in x) aligned to x's dims order (size 1 for the others), on x's
    device; the copy does not wait for the device (no sync)."""
    out = Tensor(raw, dims).raw_aligned(x.dims)
    if out.device != x.raw.device:
        out = out.to(x.raw.device, non_blocking=True)
    return out


def slice(x: Tensor, /, *, axis: Dim, start=None, end=None, step=None, size=None, out_dim: Optional[Dim] = None
          ):  # noqa: A001
    """x[start:end:step] along `axis`, or x[start:start + size]; returns (tensor, out_dim).

    With int start/end (the raw is a view):

    - static axis: Python slice semantics for start/end (negative counts from the end), which
      must lie within the size; out_dim is a new static Dim.
    - dynamic axis (per-sequence lengths T): start >= 0 counts from each sequence's start; end None
      means each sequence's end, end < 0 counts from each sequence's end, end >= 0 is an absolute
      frame. Lengths, on the host: max(0, ceildiv(min(T_end, ...) - start, step)). With end None
      or < 0 the out dim comes from dim math (ceildiv(T - start - (-end), step), cached: the same
      slice twice gives the same dim); with end >= 0 it is a new dynamic Dim.
    - a dim sized from data: start/end >= 0 only, out_dim a new Dim(None).

    `size` (rf's window; step 1): an int, a Tensor of lengths (over batch dims) or a Dim; out_dim is
    that Dim (a new one for an int or a Tensor). With an int start each sequence's window
    [start, start + its size) must lie within it (checked on host lengths); the raw is a view.

    `start` a Tensor (over batch dims of x, or 0-dim): each sequence's window starts at its own
    start (a gather; indices past a sequence's end are clipped to its last frame, as rf's
    clip_to_valid). Without size or out_dim the out lengths are max(0, ceildiv(stop - start, step))
    (stop: each sequence's length, or end), which READS start ON THE HOST (one wait for the device
    where it lives there); with size or out_dim nothing is read.

    `end` a Tensor (over batch dims of x, or 0-dim): each sequence's window ends at its own end
    (frames [start, min(end, length)) of each sequence, by the gather above); without size or
    out_dim, end is READ ON THE HOST (as start).

    `out_dim`: the dim of the result; it must have the sizes (or host lengths) the slice has.
    start=None means 0, step=None means 1 (RETURNN frontend's defaults).

    The common calls (step 1; a dynamic axis with end None) are dimtorch._C.slice, which comes here
    for the others. While tracing, a dynamic axis is sliced by x's raw size (not its longest
    sequence): the result may hold more padding frames."""
    caller = "dimtorch.slice()"
    check_tensor(x, caller)
    a = axis_of(x, axis, caller, what="axis")
    if start is None:
        start = 0
    if step is None:
        step = 1
    if isinstance(start, Tensor) or isinstance(end, Tensor) or size is not None or out_dim is not None:
        return slice_window(x, a, axis, start, end, step, size, out_dim, caller)
    if type(start) is not int or (end is not None and type(end) is not int) or type(step) is not int:
        raise TypeError(f"{caller}: start, end and step must be ints (end may be None), got "
                        f"start={start!r}, end={end!r}, step={step!r}")
    if step < 1:
        raise ValueError(f"{caller}: step must be >= 1, got {step}")
    raw = x.raw
    size = raw.shape[a]
    lengths = axis.lengths
    in_graph = False  # the in-graph form differs only for a dynamic axis
    if lengths is None:
        if axis.size is not None:
            s = start + size if start < 0 else start
            e = size if end is None else (end + size if end < 0 else end)
            if not (0 <= s <= size) or not (0 <= e <= size):
                raise ValueError(f"{caller}: slice {start}:{end} is out of range of {dim_str(axis)} (size {size})")
        else:
            if start < 0 or (end is not None and end < 0):
                raise ValueError(f"{caller}: {dim_str(axis)} takes its size from data; start and end must be >= 0, "
                                 f"got start={start}, end={end}")
            s, e = min(start, size), size if end is None else min(end, size)
        e = max(e, s)
        n = len(range(s, e, step))
        out_dim = Dim(n, name=_slice_name(axis, start, end, step)) if axis.size is not None else \
            Dim(None, name=_slice_name(axis, start, end, step))
    else:
        if start < 0:
            raise ValueError(f"{caller}: start={start} on the dynamic dim {dim_str(axis)}; start must be >= 0 "
                             f"(frames counted from each sequence's start)")
        lengths = _lengths_over_x(x, axis, caller)
        in_graph = _tracing.tracing()
        if end is None or end < 0:
            out_dim = axis - (start - (end or 0)) if start - (end or 0) else axis
            if step > 1:
                out_dim = ceildiv(out_dim, step)
        else:
            if in_graph:  # the same values, with no host tensor of `end`
                n = (lengths.raw.to(torch.int64).clamp(max=end) - start).clamp(min=0)
            else:
                n = (torch.minimum(lengths.raw.to(torch.int64), torch.tensor(end)) - start).clamp(min=0)
            n = -((-n) // step)
            out_dim = Dim(Tensor(n, lengths.dims), name=_slice_name(axis, start, end, step))
        if in_graph:  # sizes from the raw (symbolic while tracing): min/max without guards
            s = torch.sym_min(start, size)
            e = size if end is None else (size + end if end < 0 else torch.sym_min(size, end))
            e = torch.sym_max(e, s)
        else:
            max_len = axis.get_max_size()
            s = min(start, size)
            e = min(size, max_len if end is None else (max_len + end if end < 0 else end))
            e = max(e, s)
    raw = raw.narrow(a, s, e - s)
    if step > 1:
        raw = raw[(builtins.slice(None),) * a + (builtins.slice(None, None, step),)]
    if out_dim.lengths is not None and not in_graph and raw.shape[a] > out_dim.get_max_size():
        raw = raw.narrow(a, 0, out_dim.get_max_size())
    dims = x.dims[:a] + (out_dim,) + x.dims[a + 1:]
    return keep_markers(x, raw, dims), out_dim


def _slice_name(axis: Dim, start: int, end: Optional[int], step: int) -> str:
    return f"{axis.name}[{start}:{'' if end is None else end}{'' if step == 1 else f':{step}'}]"


def _shift_checks(x, axis, amount, pad_value, caller) -> int:
    if type(x) is not Tensor or axis not in x.dims:  # Dim equality is identity
        check_tensor(x, caller)
        axis_of(x, axis, caller, what="axis")
    if type(amount) is not int or amount < 0:  # bool is no amount
        raise ValueError(f"{caller}: amount must be an int >= 0, got {amount!r}")
    if not isinstance(pad_value, (int, float)):
        raise TypeError(f"{caller}: pad_value must be a Python number, got {pad_value!r}")
    return x.dims.index(axis)


def _pad_spec(raw: torch.Tensor, axis: int, left: int, right: int) -> tuple:
    """constant_pad_nd's padding (last axis first) of `left`/`right` frames along `axis`."""
    return (0, 0) * (raw.dim() - 1 - axis) + (left, right)


def _shifted(raw: torch.Tensor, a: int, amount: int, pad_value, earlier: bool) -> torch.Tensor:
    """raw with its frames along axis a moved `amount` later (or earlier), the frames that enter holding pad_value."""
    # pad, then narrow back to n frames: no size of its own is compared with `amount` or is n - amount (a trace
    # over a dynamic n would specialise, e.g. a narrow to 1 frame at n = 2, and recompile)
    n = raw.shape[a]
    if type(n) is int:  # eager: no more padding than frames
        amount = min(amount, n)
    if earlier:
        return torch.constant_pad_nd(raw, _pad_spec(raw, a, 0, amount), pad_value).narrow(a, amount, n)
    return torch.constant_pad_nd(raw, _pad_spec(raw, a, amount, 0), pad_value).narrow(a, 0, n)


def shift_right(x: Tensor, /, *, axis: Dim, amount: int = 1, pad_value=0) -> Tensor:
    """Frames move `amount` later along `axis` (same dim): out[t] = x[t - amount], and the first
    `amount` frames hold `pad_value`. Every sequence starts at frame 0, so this is the same for
    static and dynamic dims; each sequence's last `amount` frames fall into its padding.
    dimtorch._C.shift_right takes the common calls (an int amount >= 1, a number as pad_value)."""
    caller = "dimtorch.shift_right()"
    a = _shift_checks(x, axis, amount, pad_value, caller)
    if amount == 0:
        return x
    raw = _shifted(x.raw, a, amount, pad_value, earlier=False)
    return Tensor(raw, x.dims, sparse_dim=x.sparse_dim, feature_dim=x.feature_dim)


@names_errors("dimtorch.shift_left()")
def shift_left(x: Tensor, /, *, axis: Dim, amount: int = 1, pad_value=0) -> Tensor:
    """Frames move `amount` earlier along `axis` (same dim): out[t] = x[t + amount] while
    t + amount < T, else `pad_value`. For a dynamic dim, T is each sequence's own length, so the
    frames entering at each sequence's end hold pad_value (the mask comes from host lengths, once
    per dim and layout; its device copy does not wait, no sync). While tracing, the mask is built
    in the graph from the lengths."""
    caller = "dimtorch.shift_left()"
    a = _shift_checks(x, axis, amount, pad_value, caller)
    if amount == 0:
        return x
    n = x.raw.shape[a]
    raw = _shifted(x.raw, a, amount, pad_value, earlier=True)
    if axis.lengths is not None and _tracing.tracing():
        _lengths_over_x(x, axis, caller)  # its check
        keep = _in_graph.positions(raw.shape, a, raw.device) < (
            _tracing.lengths_raw(axis, x.dims, raw.device).to(torch.int64) - amount)
        raw = torch.where(keep, raw, pad_value)
    elif axis.lengths is not None:
        key = ("shift_left", amount, n, tuple(map(id, x.dims)), raw.device)
        keep = _dim_cache.lookup(axis, key)
        if keep is None:
            lengths = _lengths_over_x(x, axis, caller)
            frames = torch.arange(n, dtype=torch.int64)
            keep = frames < (lengths.raw.to(torch.int64) - amount).unsqueeze(-1)
            keep = _dim_cache.store(axis, key, _host_to_x(keep, tuple(lengths.dims) + (axis,), x))
        raw = torch.where(keep, raw, pad_value)
    return keep_markers(x, raw, x.dims)


def reverse_sequence(x: Tensor, /, *, axis: Dim, handle_dynamic_dims: bool = True) -> Tensor:
    """Reverses each sequence along `axis` (same dim): frame t of sequence b gets frame
    len_b - 1 - t for t < len_b; padding frames stay where they are. A static dim is flipped, and
    so is a dynamic one with handle_dynamic_dims=False (the whole raw axis: padding first).
    For a dynamic dim, one gather with an index built from the host lengths (_reverse_index);
    dimtorch._C.reverse_sequence caches that index on the dim per layout and device, and comes
    here for handle_dynamic_dims=False and bad input. While tracing, the index is built in the graph
    from the lengths."""
    if type(x) is not Tensor or axis not in x.dims:  # Dim equality is identity
        check_tensor(x, "dimtorch.reverse_sequence()")
        axis_of(x, axis, "dimtorch.reverse_sequence()", what="axis")
    if not isinstance(handle_dynamic_dims, bool):
        raise TypeError(f"dimtorch.reverse_sequence(): handle_dynamic_dims must be a bool, got {handle_dynamic_dims!r}")
    dims = x.dims
    a = dims.index(axis)
    raw = x.raw
    if axis.lengths is None or not handle_dynamic_dims:
        return Tensor(raw.flip(a), dims, sparse_dim=x.sparse_dim, feature_dim=x.feature_dim)
    index = _reverse_index_in_graph(x, axis) if _tracing.tracing() else _reverse_index(x, axis)
    return Tensor(raw.gather(a, index), dims, sparse_dim=x.sparse_dim, feature_dim=x.feature_dim)


def _reverse_index(x: Tensor, axis: Dim) -> torch.Tensor:
    """The gather index of reverse_sequence along the dynamic `axis`, expanded to x's raw shape, on
    x's device; from the host lengths (its device copy does not wait: no sync)."""
    lengths = _lengths_over_x(x, axis, "dimtorch.reverse_sequence()")
    raw = x.raw
    frames = torch.arange(raw.shape[x.dims.index(axis)], dtype=torch.int64)
    lens = lengths.raw.to(torch.int64).unsqueeze(-1)
    index = torch.where(frames < lens, lens - 1 - frames, frames)
    return _host_to_x(index, tuple(lengths.dims) + (axis,), x).expand(raw.shape)


def _reverse_index_in_graph(x: Tensor, axis: Dim) -> torch.Tensor:
    """While tracing, _reverse_index built in the graph from the lengths as a tensor."""
    _lengths_over_x(x, axis, "dimtorch.reverse_sequence()")
    raw = x.raw
    frames = _in_graph.positions(raw.shape, x.dims.index(axis), raw.device)
    lens = _tracing.lengths_raw(axis, x.dims, raw.device).to(torch.int64)
    return torch.where(frames < lens, lens - 1 - frames, frames).expand(raw.shape)


# slice with a size (int, Tensor of lengths or Dim), an out_dim, or per-sequence starts (a Tensor): a
# window of each sequence. dimtorch.slice comes here for these arguments.
_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _int_arg(value) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def _size_dim(size, caller: str) -> Dim:
    """The out dim a `size` argument stands for: the Dim itself, a static Dim for an int, a dynamic
    Dim with the Tensor as lengths (moved to the host if it is not there: that waits for the device)."""
    if isinstance(size, Dim):
        if size.size is None and size.lengths is None:
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
    if dim.lengths is not None:
        return dim.lengths
    return Tensor(torch.tensor(dim.get_max_size(), dtype=torch.int64), ())


def _same_sizes(a: Dim, b: Dim) -> bool:
    """Whether two dims have the same size, or the same host lengths over the same dims."""
    if a is b:
        return True
    if a.lengths is None and b.lengths is None:
        return a.size == b.size
    if a.lengths is None or b.lengths is None:
        # a static dim and a dynamic one (e.g. lengths over no dims, a single sequence's dim): the same
        # sizes when every length is the static size
        static, dynamic = (a, b) if a.lengths is None else (b, a)
        return static.size is not None and bool((dynamic.lengths.raw == static.size).all())
    la, lb = a.lengths, b.lengths
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
    if step is None:
        step = 1
    if not _int_arg(step) or step < 1:
        raise ValueError(f"{caller}: step must be an int >= 1, got {step!r}")
    if size is not None and end is not None:
        raise ValueError(f"{caller}: give end or size, not both (end={end!r}, size={size!r})")
    if size is not None and step != 1:
        raise ValueError(f"{caller}: size takes step 1, got step={step}")
    if start is None:
        start = 0
    if isinstance(end, Tensor) and _int_arg(start):
        # A Tensor end: the per-sequence window from one start for all.
        start = Tensor(torch.full((), start, dtype=torch.int64), ())
    if isinstance(start, Tensor):
        return _per_sequence_start(x, axis, start, end, step, size, out_dim, caller)
    if not _int_arg(start):
        raise TypeError(f"{caller}: start must be an int or an integer Tensor, got {type(start).__name__}")
    if size is None:
        out, computed = slice(x, axis=axis, start=start, end=end, step=step)
        dim = _as_out_dim(computed, out_dim, caller)
        return (out, dim) if dim is computed else (keep_markers(x, out.raw, out.dims[:a] + (dim,) + out.dims[a + 1:]), dim)
    dim = _as_out_dim(_size_dim(size, caller), out_dim, caller)
    n_raw = x.raw.shape[a]
    s = start + n_raw if start < 0 and axis.lengths is None else start
    n = dim.get_max_size()
    if s < 0 or s + n > n_raw:
        raise ValueError(f"{caller}: frames {start}:{start}+{n} are out of range of {dim_str(axis)} (size {n_raw})")
    if axis.lengths is not None or dim.lengths is not None:
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
