"""CTC alignments (RETURNN frontend's): ctc_best_path (Viterbi forced alignment) and the durations of a path's
states, ctc_durations_from_path and ctc_no_label_loop_blank_durations_from_path, per sequence."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from .. import _C
from .._core import in_graph as _in_graph, sizes as _sizes, tracing as _tracing
from .._C import Dim, Tensor
from .._core.data_dependent import to_host
from .._core.dtypes import is_integer
from .._core.args import axis_of, check_tensor, dim_str, dims_str
from ._support import flag, int32_ones, names_errors

_MASK, _LENGTHS = 0, 2  # kinds of dimtorch._C._dim_cached_raw (src/core/mask.h)
_NEG_INF = float("-inf")


# ---- lengths and masks of one layout ---------------------------------------------------------------------

_LEADING = tuple(tuple(range(k)) for k in range(25))  # positions 0..k-1: lengths over the leading dims


def _lengths_positions(dim: Dim, order: tuple, what: str, caller: str) -> tuple:
    """Positions in `order` of the dims dim's lengths vary over; an error naming `what` if one is missing."""
    lengths_dims = dim.lengths.dims
    if order[:len(lengths_dims)] == lengths_dims:  # the common layout (Dim equality is identity)
        return _LEADING[len(lengths_dims)]
    pos = []
    for b in lengths_dims:
        i = next((k for k, e in enumerate(order) if e is b), -1)
        if i < 0:
            raise ValueError(f"{caller}: the lengths of {what} {dim_str(dim)} are over {dim_str(b)}, which is not a "
                             f"batch dim here ({dims_str(order)})")
        pos.append(i)
    return tuple(pos)


def _lengths(dim: Dim, batch: tuple, shape: tuple, device, what: str, caller: str, traced: bool) -> torch.Tensor:
    """dim's lengths as an int64 raw of the batch `shape` (axes in `batch` order) on device; a static dim's size
    everywhere. The device copy is cached on the dim (made in the graph while `traced`)."""
    if dim.lengths is None:
        if dim.size is None:
            raise ValueError(f"{caller}: {what} {dim_str(dim)} takes its size from data; it needs lengths or a "
                             f"static size")
        return torch.full(shape, dim.size, dtype=torch.int64, device=device)
    pos = _lengths_positions(dim, batch, what, caller)
    if traced:
        raw = _tracing.lengths_raw(dim, batch, device)
    else:
        raw = _C._dim_cached_raw(_LENGTHS, dim, pos, len(batch), 0, device)
    if raw.shape != shape:
        raw = raw.expand(shape)
    return raw if raw.dtype is torch.int64 else raw.to(torch.int64)


def _frames(dim: Dim, order: tuple, shape: tuple, device, what: str, caller: str,
            traced: bool) -> Optional[torch.Tensor]:
    """Bool raw broadcastable to `shape` (axes in `order`, which holds dim), True on dim's valid frames; None
    for a dim without lengths. Cached on the dim (built in the graph while `traced`)."""
    if dim.lengths is None:
        return None
    pos = _lengths_positions(dim, order, what, caller)
    if traced:
        return _in_graph.valid_mask(order, shape, device, among=(dim,))
    axis = order.index(dim)  # (Dim equality is identity)
    return _C._dim_cached_raw(_MASK, dim, pos + (axis,), len(order), shape[axis], device)


def _check_blank(blank_index, size: int, caller: str) -> None:
    if type(blank_index) is not int or not 0 <= blank_index < size:
        raise ValueError(f"{caller}: blank_index must be an int in [0, {size}), got {blank_index!r}")


# ---- ctc_best_path -----------------------------------------------------------------------------------------

def _dtype_of(raw: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return raw if raw.dtype is dtype else raw.to(dtype)


def _viterbi(lp: torch.Tensor, frames: Optional[torch.Tensor], targets: torch.Tensor, target_lengths: torch.Tensor,
             blank: int, label_loop: bool) -> torch.Tensor:
    """The best CTC path (T, N) of log-probs lp (T, N, C) through targets (N, S) (padding already blank),
    frames (T, N, 1) bool or None (all valid). States: the extended labels z = blank, l1, blank, ..., lS, blank;
    a frame stays in its state (label states only with label_loop), moves one on, or skips the blank between
    two labels (different labels, or any two without label_loop). One vectorized step per frame of the
    static raw time size (frames past a sequence's end keep its scores), then a backtrace the same way:
    nothing is read on the host. Frames beyond a sequence's end, and every frame of a sequence that has no
    path (fewer frames than its labels need), get blank."""
    n_time, n, _ = lp.shape
    n_ext = 2 * targets.shape[1] + 1
    z = torch.stack((torch.full_like(targets, blank), targets), -1).view(n, -1)
    z = torch.cat((z, z.new_full((n, 1), blank)), 1)  # (N, L)
    emit = lp.gather(2, z.unsqueeze(0).expand(n_time, n, n_ext))  # (T, N, L)
    state = torch.arange(n_ext, device=lp.device)
    is_label = state % 2 == 1
    skip = is_label & (state >= 3)
    if label_loop:
        skip = skip & F.pad(z[:, 2:] != z[:, :-2], (2, 0), value=False)
    skip_add = _dtype_of(torch.where(skip, 0.0, _NEG_INF), lp.dtype)
    stay_add = None if label_loop else _dtype_of(torch.where(is_label, _NEG_INF, 0.0), lp.dtype)
    alpha = emit[0] + _dtype_of(torch.where(state < 2, 0.0, _NEG_INF), lp.dtype)

    def forward_step(alpha, emit_t, valid_t):
        """alpha after one more frame, and each state's best move into it (0 stay, 1 step, 2 skip)."""
        stay = alpha if stay_add is None else alpha + stay_add
        step = torch.constant_pad_nd(alpha[:, :-1], (1, 0), _NEG_INF)  # (F.pad's op, without its Python layer)
        jump = torch.constant_pad_nd(alpha[:, :-2], (2, 0), _NEG_INF) + skip_add
        best, arg = torch.stack((stay, step, jump)).max(0)
        new = best + emit_t
        return (new if valid_t is None else torch.where(valid_t, new, alpha)), arg

    def backward_step(cur, back_t, valid_t):
        """The state at the frame before, from the state at this one and its best move."""
        prev = cur - back_t.gather(1, cur)
        return prev if valid_t is None else torch.where(valid_t, prev, cur)

    scanned = n_time > 1 and (torch.compiler.is_compiling() or isinstance(n_time, torch.SymInt))
    if scanned:  # one torch scan each way: the time size stays symbolic (a loop is unrolled per length)
        alpha, back = _in_graph.scan_frames(forward_step, alpha, [emit[1:], None if frames is None else frames[1:]])
    else:
        back = [None]
        for t in range(1, n_time):
            alpha, arg = forward_step(alpha, emit[t], None if frames is None else frames[t])
            back.append(arg)
    # the end: the last blank (2 S_n) or the last label (2 S_n - 1); on a tie, the blank
    last_blank = (2 * target_lengths).unsqueeze(1)
    last_label = (last_blank - 1).clamp_min(0)
    score_blank = alpha.gather(1, last_blank)
    score_label = torch.where(last_blank > 0, alpha.gather(1, last_label), _NEG_INF)
    cur = torch.where(score_label > score_blank, last_label, last_blank)
    found = torch.isfinite(torch.maximum(score_label, score_blank))  # (N, 1)
    if scanned:
        _, before = _in_graph.scan_frames(lambda c, b, v: (backward_step(c, b, v),) * 2, cur,
                                          [back, None if frames is None else frames[1:]], reverse=True)
        states = torch.cat((before.squeeze(2).t(), cur), 1)  # (N, T): frames 0 .. T-2, then the last
    else:
        path_states = [None] * n_time
        for t in range(n_time - 1, -1, -1):
            path_states[t] = cur
            if t > 0:
                cur = backward_step(cur, back[t], None if frames is None else frames[t])
        states = torch.cat(path_states, 1)
    path = z.gather(1, states).t()  # (T, N)
    keep = found.t() if frames is None else found.t() & frames.squeeze(2)
    return torch.where(keep, path, blank)


@names_errors("dimtorch.ctc_best_path()")
def ctc_best_path(*, logits: Tensor, logits_normalized: bool = False, targets: Tensor, input_spatial_dim: Dim,
                  targets_spatial_dim: Dim, blank_index: int, label_loop: bool = True) -> Tensor:
    """CTC forced alignment (rf.ctc_best_path): the most likely path (Viterbi) of each sequence's frames
    through its targets, as an int32 label per frame over (input_spatial_dim, *batch dims), sparse_dim the
    class dim; frames beyond a sequence's end hold blank_index. `logits`: over the batch dims,
    input_spatial_dim and the class dim (its feature_dim, else its one dim besides those); log_softmax over
    the classes unless logits_normalized. `targets`: int labels over batch dims and targets_spatial_dim.
    The batch dims are the other dims of logits and targets (one broadcast over the other's). `label_loop`
    False: a label takes exactly one frame (RNA topology). A sequence with no path (fewer frames than its
    labels need) gets blank on every frame. Loops over the raw time size (torch scans while torch.compile,
    torch.export or symbolic make_fx trace: one graph for every length), one vectorized step per
    frame and back: no device read."""
    caller = "dimtorch.ctc_best_path()"
    check_tensor(logits, caller, what="logits")
    check_tensor(targets, caller, what="targets")
    normalized = flag(logits_normalized, caller, "logits_normalized")
    loop = flag(label_loop, caller, "label_loop")
    axis_of(logits, input_spatial_dim, caller, what="input_spatial_dim", of="logits")
    axis_of(targets, targets_spatial_dim, caller, what="targets_spatial_dim", of="targets")
    if not is_integer(targets.raw.dtype):
        raise TypeError(f"{caller}: targets must be int labels, got {targets.dtype}")
    class_dim = logits.feature_dim
    if class_dim is None:
        rest = [d for d in logits.dims if d is not input_spatial_dim and d not in targets.dims]
        if len(rest) != 1:
            raise ValueError(f"{caller}: logits have no feature_dim; give them one, the class dim (logits dims: "
                             f"{dims_str(logits.dims)})")
        class_dim = rest[0]
    if class_dim is input_spatial_dim or class_dim in targets.dims:
        raise ValueError(f"{caller}: the class dim {dim_str(class_dim)} of logits must not be input_spatial_dim "
                         f"or a dim of targets (targets dims: {dims_str(targets.dims)})")
    n_classes = logits.raw.shape[logits.dims.index(class_dim)]
    _check_blank(blank_index, n_classes, caller)
    batch = tuple(d for d in logits.dims if d is not input_spatial_dim and d is not class_dim)
    batch += tuple(d for d in targets.dims if d is not targets_spatial_dim and d not in batch)
    if targets_spatial_dim in batch or input_spatial_dim in targets.dims:
        raise ValueError(f"{caller}: input_spatial_dim and targets_spatial_dim must each be in one of logits and "
                         f"targets only (logits dims: {dims_str(logits.dims)}, targets dims: "
                         f"{dims_str(targets.dims)})")
    # The path is piecewise constant in the scores: no gradient flows through it (eagerly neither), and a
    # traced Viterbi scan over values that need one would be differentiated for nothing (torch 2.13's scan
    # backward fails on its integer outputs).
    lp = logits.raw_aligned((input_spatial_dim,) + batch + (class_dim,)).detach()
    tg = targets.raw_aligned(batch + (targets_spatial_dim,))
    traced = _tracing.tracing()
    lp_batch, tg_batch = tuple(lp.shape[1:-1]), tuple(tg.shape[:-1])
    # (the common call: one batch dim, neither broadcast over the other: no view to make)
    plain = not traced and len(lp_batch) == 1 and lp_batch == tg_batch
    batch_shape = lp_batch if plain else tuple(torch.broadcast_shapes(lp_batch, tg_batch))
    n_time, n_labels, device = lp.shape[0], tg.shape[-1], lp.device
    n = 1
    for s in batch_shape:
        n *= s
    if not plain:
        lp = lp.expand((n_time,) + batch_shape + (n_classes,)).reshape(n_time, n, n_classes)
    if tg.device != device:
        tg = tg.to(device)
    if not plain:
        tg = tg.expand(batch_shape + (n_labels,)).reshape(n, n_labels)
    tg = _dtype_of(tg, torch.int64)
    frames = _frames(input_spatial_dim, (input_spatial_dim,) + batch, (n_time,) + batch_shape, device,
                     "input_spatial_dim", caller, traced)
    if frames is not None:
        if not plain or tuple(frames.shape) != (n_time, n):
            frames = frames.expand((n_time,) + batch_shape).reshape(n_time, n)
        frames = frames.unsqueeze(-1)  # (T, N, 1): each frame's where over the states broadcasts it
        lp = torch.where(frames, lp, 0.0)  # padding (NaN, inf) never reaches a score
    if not normalized:
        lp = torch.log_softmax(lp, dim=-1)
    target_lengths = _lengths(targets_spatial_dim, batch, batch_shape, device, "targets_spatial_dim",
                              caller, traced).reshape(n)
    # padding of the targets (any garbage, also out of range) reads as blank
    tg = torch.where(torch.arange(n_labels, device=device) < target_lengths.unsqueeze(1), tg, blank_index)
    if n_time == 0:
        path = tg.new_full((0, n), blank_index)
    else:
        path = _viterbi(lp, frames, tg, target_lengths, blank_index, loop)
    return Tensor(path.to(torch.int32).view((n_time,) + batch_shape), (input_spatial_dim,) + batch,
                  sparse_dim=class_dim)


# ---- durations of a path's states --------------------------------------------------------------------------

def _path_layout(path, path_spatial_dim, blank_index, caller: str, traced: bool):
    """(raw path over (*batch, T) as int64, batch dims, valid frames broadcastable to (*batch, T), or None)."""
    check_tensor(path, caller, what="path")
    order = path.dims
    if not order or order[-1] is not path_spatial_dim:  # (the common layout has time last)
        axis_of(path, path_spatial_dim, caller, what="path_spatial_dim", of="path")
        order = tuple(d for d in order if d is not path_spatial_dim) + (path_spatial_dim,)
    raw = path.raw
    if raw.dtype is not torch.int64 and not is_integer(raw.dtype):
        raise TypeError(f"{caller}: path must be int labels, got {path.dtype}")
    if type(blank_index) is not int:
        raise TypeError(f"{caller}: blank_index must be an int, got {blank_index!r}")
    if order is not path.dims:
        raw = path.raw_aligned(order)
    if raw.dtype is not torch.int64:
        raw = raw.to(torch.int64)
    return raw, order[:-1], _frames(path_spatial_dim, order, raw.shape, raw.device, "path_spatial_dim", caller,
                                    traced)


def _check_lengths(dim: Dim, want: torch.Tensor, batch: tuple, what: str, caller: str, traced: bool) -> None:
    """Asserts on the device, without waiting for it, that dim's lengths are `want` (*batch)."""
    have = _lengths(dim, batch, want.shape, want.device, what, caller, traced)
    if not traced:  # a constant message: no dims printed on every call
        torch._assert_async(torch.all(have == want), f"{caller}: the lengths of {what} differ from the path's")


def _out_dim(counts: torch.Tensor, batch: tuple, targets_spatial_dim, out_spatial_dim, to_out, check: bool,
             stop: bool, caller: str, traced: bool, n_frames) -> Tuple[Dim, bool]:
    """(out_spatial_dim, whether states past its size may occur) for label counts (*batch) of a path.
    out_spatial_dim: given, else to_out(targets_spatial_dim) by dim math; without targets_spatial_dim, a new
    dim over the counts, read on the host (the size depends on data; while tracing the counts stay in the
    graph and the new dim's padded size is bounded by the path's `n_frames`). With check and stop, the given dims'
    lengths are asserted on the device (no wait) to match the counts (to_out of them for out_spatial_dim);
    with stop False nothing is checked (a report would need a device read), and states past the end are
    dropped."""
    for name, d in (("targets_spatial_dim", targets_spatial_dim), ("out_spatial_dim", out_spatial_dim)):
        if d is not None and not isinstance(d, Dim):
            raise TypeError(f"{caller}: {name} must be a Dim, got {type(d).__name__}")
    checked = check and stop
    if targets_spatial_dim is None:
        if traced:  # the counts stay in the graph; the padded size is bounded by the path's frames
            targets_spatial_dim = Dim(Tensor(counts, batch), name="target_spatial")
            _sizes.bind(targets_spatial_dim, n_frames)
        else:
            targets_spatial_dim = Dim(Tensor(to_host(counts), batch), name="target_spatial")
    elif checked:
        _check_lengths(targets_spatial_dim, counts, batch, "targets_spatial_dim", caller, traced)
    if out_spatial_dim is None:
        return to_out(targets_spatial_dim), not checked
    if checked:
        _check_lengths(out_spatial_dim, to_out(counts), batch, "out_spatial_dim", caller, traced)
    return out_spatial_dim, not checked


def _durations(state: torch.Tensor, frames: Optional[torch.Tensor], n_out: int, clamp: bool,
               traced: bool) -> torch.Tensor:
    """How many frames (int32, over (*batch, n_out)) sit in each state; padding frames (and with `clamp`,
    states past n_out: a path with more labels than its unchecked targets' dim) count nowhere (they go to an
    extra column, dropped)."""
    if clamp:
        state = state.clamp_max(n_out)
    if frames is not None:
        state = torch.where(frames, state, n_out)
    out = torch.zeros(state.shape[:-1] + (n_out + 1,), dtype=torch.int32, device=state.device)
    out.scatter_add_(-1, state, int32_ones(state.shape, state.device, traced))
    return out[..., :n_out]


def _out_size(out_dim: Dim, caller: str, traced: bool) -> int:
    if out_dim.size is not None:
        return out_dim.size
    if out_dim.lengths is None:
        raise ValueError(f"{caller}: out_spatial_dim {dim_str(out_dim)} takes its size from data; it needs lengths")
    return _sizes.padded_size(out_dim, caller)  # (while tracing: its padded size in the trace)


def _times_2_plus_1(d):
    return d * 2 + 1


def _durations_args(path, path_spatial_dim, blank_index, check_dims, stop_on_failed_check, caller: str):
    """The durations ops' common arguments: (tracing?, _path_layout's raw, batch dims and frames, check, stop)."""
    traced = _tracing.tracing()
    raw, batch, frames = _path_layout(path, path_spatial_dim, blank_index, caller, traced)
    check = flag(check_dims, caller, "check_dims")
    stop = flag(stop_on_failed_check, caller, "stop_on_failed_check")
    return traced, raw, batch, frames, check, stop


def _plus_1(d):
    return d + 1


@names_errors("dimtorch.ctc_durations_from_path()")
def ctc_durations_from_path(*, path: Tensor, path_spatial_dim: Dim, blank_index: int,
                            targets_spatial_dim: Optional[Dim] = None, out_spatial_dim: Optional[Dim] = None,
                            check_dims: bool = True, stop_on_failed_check: bool = True) -> Tuple[Tensor, Dim]:
    """The durations of the states of a CTC path (rf.ctc_durations_from_path): for a path with N labels, the
    frames in each of the 2 N + 1 states blank, label 1, blank, ..., label N, blank (a repeated label
    frame stays in its state). Returns (int32 durations over path's other dims and out_spatial_dim,
    out_spatial_dim); out_spatial_dim defaults to targets_spatial_dim * 2 + 1 (dim math). Without
    targets_spatial_dim, a new dim over the label counts, which are read on the host (data-dependent, as in
    rf). With check_dims and stop_on_failed_check, the lengths of a given targets_spatial_dim (and
    out_spatial_dim) are asserted on the device to match the counts (no wait for the device; with
    stop_on_failed_check False nothing is checked, a report would need a device read, and frames past the
    given dim's end count nowhere). Padding frames of path count nowhere."""
    caller = "dimtorch.ctc_durations_from_path()"
    traced, raw, batch, frames, check, stop = _durations_args(path, path_spatial_dim, blank_index, check_dims,
                                                               stop_on_failed_check, caller)
    is_label = raw != blank_index
    new_label = is_label & (raw != torch.constant_pad_nd(raw[..., :-1], (1, 0), blank_index))  # (F.pad: +1 us)
    if frames is not None:
        new_label = new_label & frames
    seen = new_label.cumsum(-1)  # labels begun so far: the blank after label k is state 2 k
    out_dim, clamp = _out_dim(seen[..., -1] if raw.shape[-1] else seen.sum(-1), batch, targets_spatial_dim,
                              out_spatial_dim, _times_2_plus_1, check, stop, caller, traced, raw.shape[-1])
    state = 2 * seen - is_label.to(torch.int64)
    return Tensor(_durations(state, frames, _out_size(out_dim, caller, traced), clamp, traced), batch + (out_dim,)), out_dim


@names_errors("dimtorch.ctc_no_label_loop_blank_durations_from_path()")
def ctc_no_label_loop_blank_durations_from_path(*, path: Tensor, path_spatial_dim: Dim, blank_index: int,
                                                targets_spatial_dim: Optional[Dim] = None,
                                                out_spatial_dim: Optional[Dim] = None, check_dims: bool = True,
                                                stop_on_failed_check: bool = True) -> Tuple[Tensor, Dim]:
    """The blank durations of a path without label loops (ctc_best_path(label_loop=False), RNA; as
    rf.ctc_no_label_loop_blank_durations_from_path): every non-blank frame is one label, and for N labels
    the frames of blank before label 1, between each two labels and after label N (N + 1 of them).
    Returns (int32 durations over path's other dims and out_spatial_dim, out_spatial_dim); out_spatial_dim
    defaults to targets_spatial_dim + 1. targets_spatial_dim and the checks as in ctc_durations_from_path."""
    caller = "dimtorch.ctc_no_label_loop_blank_durations_from_path()"
    traced, raw, batch, frames, check, stop = _durations_args(path, path_spatial_dim, blank_index, check_dims,
                                                               stop_on_failed_check, caller)
    is_label = raw != blank_index
    if frames is not None:
        is_label = is_label & frames
    seen = is_label.cumsum(-1)
    out_dim, clamp = _out_dim(seen[..., -1] if raw.shape[-1] else seen.sum(-1), batch, targets_spatial_dim,
                              out_spatial_dim, _plus_1, check, stop, caller, traced, raw.shape[-1])
    n_out = _out_size(out_dim, caller, traced)
    state = torch.where(is_label, n_out, seen)  # label frames count nowhere
    return Tensor(_durations(state, frames, n_out, clamp, traced), batch + (out_dim,)), out_dim


__all__ = ["ctc_best_path", "ctc_durations_from_path", "ctc_no_label_loop_blank_durations_from_path"]
