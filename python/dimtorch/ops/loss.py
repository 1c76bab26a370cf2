"""Losses: cross_entropy (F.cross_entropy), ctc_loss (F.ctc_loss) and loss_mean_over_frames."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from .. import _C
from . import ctc_op as _ctc_op
from .._core import in_graph as _in_graph, tracing as _tracing
from .._C import Dim, Tensor
from .mask import _MASK, sequence_mask
from .._core.args import axis_of, check_tensor, dim_str, dims_str
from ._support import names_errors

_CPU = torch.device("cpu")
_IGNORE = -100  # F.cross_entropy's ignore_index: padding positions get loss 0 and no gradient
# F.cross_entropy / F.nll_loss without their Python argument handling (reduction enum 0: "none").
_ce_loss = torch._C._nn.cross_entropy_loss
_nll_loss = torch._C._nn.nll_loss_nd


def _valid_mask_raw(dims: tuple, shape, device) -> Optional[torch.Tensor]:
    """bool raw broadcastable to `shape` (axes in `dims` order), True on valid frames, or None when
    no dim of `dims` has padding there. Each dim's mask is cached on the dim (per layout and device);
    while tracing, the masks are built in the graph."""
    if _tracing.tracing():
        return _in_graph.valid_mask(dims, shape, device)
    mask = None
    ndim = len(dims)
    for i, d in enumerate(dims):
        lengths = d.lengths
        if lengths is None:
            continue
        try:
            ld = lengths.dims
            pos = (dims.index(ld[0]),) if len(ld) == 1 else tuple(dims.index(b) for b in ld)  # identity
        except ValueError:
            continue  # its lengths vary over a dim that is not here: no padding to mask in this layout
        m = _C._dim_cached_raw(_MASK, d, pos + (i,), ndim, shape[i], device)
        mask = m if mask is None else mask & m
    return mask


def _same_dims(a, b) -> bool:
    return len(a) == len(b) and all(any(d is e for e in b) for d in a)


@names_errors("dimtorch.cross_entropy()")
def cross_entropy(*, estimated: Tensor, target: Tensor, axis: Dim, estimated_type: str = "logits",
                  label_smoothing: float = 0.0, use_mask: bool = True) -> Tensor:
    """Per-position cross entropy -sum_c p_target(c) log q(c) over the class dim `axis`.

    `estimated`: logits, log-probs or probs (`estimated_type`) over `axis` and other dims.
    `target`: class indices (an int Tensor whose sparse_dim is `axis`, dims = estimated's dims
    without `axis`, any order) or probabilities (a float Tensor over estimated's dims).
    Index targets of any integer dtype (int32 as RETURNN's data has it; torch's kernels take int64:
    one conversion). Result: estimated's dims without `axis` (in estimated's order). With use_mask, padding positions
    of dynamic dims get loss 0 and no gradient, and the values of padded index targets are never
    read (they may be out of range). One F.cross_entropy (logits) or F.nll_loss (log-probs/probs)
    call; label_smoothing as in F.cross_entropy. No host-device sync. While tracing, the masks are
    built in the graph from the lengths.
    """
    if type(estimated) is not Tensor or type(target) is not Tensor:
        check_tensor(estimated, "dimtorch.cross_entropy()", "estimated")
        check_tensor(target, "dimtorch.cross_entropy()", "target")
    est_dims = estimated.dims
    try:
        a = est_dims.index(axis)  # Dim equality is identity
    except ValueError:
        a = axis_of(estimated, axis, "dimtorch.cross_entropy()", of="estimated")  # raises, naming the dims
    out_dims = est_dims[:a] + est_dims[a + 1:]
    raw = estimated.raw
    if estimated_type != "logits":
        if estimated_type == "probs":
            raw = torch.log(raw)
        elif estimated_type != "log-probs":
            raise ValueError(f"dimtorch.cross_entropy(): estimated_type must be 'logits', 'log-probs' or 'probs', "
                             f"got {estimated_type!r}")
    if target.sparse_dim is not axis:
        return _cross_entropy_general(raw, a, est_dims, out_dims, target, axis, estimated_type, label_smoothing,
                                      use_mask)
    if target.raw.dtype != torch.int64:  # torch's kernels take int64 class indices only
        target = Tensor(target.raw.long(), target.dims, sparse_dim=target.sparse_dim)
    # Index targets: padding gets F.cross_entropy's ignore_index, by the C++ masked copy (the dims'
    # cached masks, one where), as hand-written PyTorch does with its own mask.
    unmasked = False
    if use_mask and _tracing.tracing():
        unmasked = True  # masked below, by masks built in the graph
    elif use_mask:
        try:
            target = target.copy_masked(_IGNORE)
        except ValueError:  # some dim's lengths vary over a dim the target lacks: the per-dim masks below
            unmasked = True
    t_dims = target.dims
    if t_dims == out_dims:
        tgt = target.raw
    elif _same_dims(t_dims, out_dims):
        tgt = target.raw_aligned(out_dims)
    else:
        raise ValueError(f"dimtorch.cross_entropy(): target must have the dims of estimated without axis "
                         f"({dims_str(out_dims)}), got ({dims_str(t_dims)})")
    if unmasked:
        mask = _valid_mask_raw(out_dims, tgt.shape, tgt.device)
        if mask is not None:
            tgt = torch.where(mask, tgt, _IGNORE)
    if a == len(est_dims) - 1:  # (N, C): the plain kernel, no strided class axis
        n_classes = axis.size
        raw2 = raw.reshape(-1, n_classes if n_classes is not None else raw.shape[a])
        tgt2 = tgt.reshape(-1)
    else:
        raw2 = raw.movedim(a, 1) if a != 1 else raw
        tgt2 = tgt
    if estimated_type == "logits" or label_smoothing:
        loss = _ce_loss(raw2, tgt2, None, 0, _IGNORE, label_smoothing)  # 0: reduction "none"
    else:  # already normalized: nll_loss skips the log_softmax
        loss = _nll_loss(raw2, tgt2, None, 0, _IGNORE)
    # view_as, not view(tgt.shape): torch parses a Size argument element by element (~5x the cost of the view).
    return Tensor(loss.view_as(tgt) if tgt2 is not tgt else loss, out_dims)


def _cross_entropy_general(raw, a: int, est_dims: tuple, out_dims: tuple, target: Tensor, axis: Dim,
                           estimated_type: str, label_smoothing: float, use_mask: bool) -> Tensor:
    """cross_entropy with a probability target (or the error for a target of another sparse_dim)."""
    caller = "dimtorch.cross_entropy()"
    t_dims = target.dims
    if axis not in t_dims:
        got = "none" if target.sparse_dim is None else dim_str(target.sparse_dim)
        raise ValueError(f"{caller}: the sparse_dim of target is {got}, but axis is {dim_str(axis)} "
                         f"(target dims: {dims_str(t_dims)})")
    if not _same_dims(t_dims, est_dims):
        raise ValueError(f"{caller}: a probability target must have estimated's dims ({dims_str(est_dims)}), "
                         f"got ({dims_str(t_dims)})")
    tgt = target.raw if t_dims == est_dims else target.raw_aligned(est_dims)
    shape = raw.shape
    if a == raw.dim() - 1:
        loss = _ce_loss(raw.reshape(-1, shape[a]), tgt.reshape(-1, shape[a]), None, 0, _IGNORE, label_smoothing)
        loss = loss.view(shape[:a])
    else:
        loss = _ce_loss(raw.movedim(a, 1), tgt.movedim(a, 1), None, 0, _IGNORE, label_smoothing)
    mask = _valid_mask_raw(out_dims, shape[:a] + shape[a + 1:], raw.device) if use_mask else None
    if mask is not None:
        loss = torch.where(mask, loss, 0)
    return Tensor(loss, out_dims)


def _host_lengths(d: Dim, batch_dims: tuple, batch_shape: list, n_batch: int, what: str, caller: str, device=None):
    """Host int64 lengths of `d` per flattened batch entry (the full size for a static dim); with a
    `device` (while tracing), on that device, from the lengths as a tensor in the graph."""
    if not d.is_dynamic():
        if d.size is None:
            raise ValueError(f"{caller}: {what} {dim_str(d)} takes its size from data; it needs lengths or a "
                             f"static size")
        if device is not None:
            return torch.full((n_batch,), d.size, dtype=torch.int64, device=device)
        return torch.full((n_batch,), d.size, dtype=torch.int64)
    lengths = d.lengths
    for b in lengths.dims:
        if not any(b is e for e in batch_dims):
            raise ValueError(f"{caller}: the lengths of {what} {dim_str(d)} are over {dim_str(b)}, "
                             f"which is not a batch dim of targets ({dims_str(batch_dims)})")
    if device is not None:
        return _tracing.lengths_raw(d, batch_dims, device).expand(batch_shape).reshape(n_batch).to(torch.int64)
    return lengths.raw_aligned(batch_dims).expand(batch_shape).reshape(n_batch).to("cpu", torch.int64)


def _ctc_loss_one_batch_dim(logits, targets, t_dim: Dim, tt_dim: Dim, blank_index, logits_normalized):
    """ctc_loss's common case in few steps, or None (the general path then checks and computes): one batch
    dim, targets (batch, targets time) either way round, 3-D logits, both dims' int64 lengths over that
    batch dim. The same torch calls as the general path (where with the cached mask, log_softmax, ctc)."""
    if type(logits) is not Tensor or type(targets) is not Tensor or type(blank_index) is not int:
        return None
    td, ld = targets.dims, logits.dims
    if len(td) != 2 or len(ld) != 3:
        return None
    batch = td[0] if td[1] is tt_dim else td[1] if td[0] is tt_dim else None
    lengths, target_lengths = t_dim.lengths, tt_dim.lengths
    if batch is None or lengths is None or target_lengths is None or lengths.dims != (batch,) or \
            target_lengths.dims != (batch,) or lengths.dtype != "int64" or target_lengths.dtype != "int64":
        return None
    classes = [d for d in ld if d is not t_dim and d is not batch]
    if len(classes) != 1:
        return None
    raw = logits.raw
    c = classes[0]
    if not 0 <= blank_index < raw.shape[ld.index(c)]:
        return None
    lp = raw.permute(ld.index(t_dim), ld.index(batch), ld.index(c))  # (T, B, C): a view
    in_graph = _tracing.tracing()
    if in_graph:  # the mask and the lengths (on the logits' device) in the graph
        frames = _tracing.mask_raw(t_dim, (t_dim, batch), lp.shape, lp.device)
        lengths, target_lengths = (_tracing.lengths_raw(d, (batch,), lp.device) for d in (t_dim, tt_dim))
    else:
        # The cached mask of t_dim laid out (T, B): its lengths' dim (batch) at axis 1, t_dim at 0.
        frames = _C._dim_cached_raw(0, t_dim, (1, 0), 2, lp.shape[0], lp.device)
    lp = torch.where(frames.unsqueeze(-1), lp, 0.0)  # zeroed padding: clean log_softmax gradients
    if not logits_normalized:
        lp = torch.log_softmax(lp, -1)
    if lp.shape[0] == 0:  # no frames at all (every sequence empty): torch's ctc_loss needs one, of padding
        lp = F.pad(lp, (0, 0, 0, 0, 0, 1))
    tg = targets.raw if td[0] is batch else targets.raw.t()
    if in_graph:  # torch's CTC op cannot be traced (see _ctc_op)
        loss = _ctc_op.ctc_loss(lp, tg, lengths, target_lengths, blank_index, True)
    else:
        loss = torch.ctc_loss(lp, tg, lengths.raw, target_lengths.raw, blank_index, 0, True)  # 0: reduction none
    return Tensor(loss, (batch,))


@names_errors("dimtorch.ctc_loss()")
def ctc_loss(*, logits: Tensor, logits_normalized: bool = False, targets: Tensor, input_spatial_dim: Dim,
             targets_spatial_dim: Dim, blank_index: int, max_approx: bool = False,
             use_native_op: Optional[bool] = None, label_loop: bool = True) -> Tensor:
    """Per-sequence CTC loss (negative log-likelihood of `targets`) via F.ctc_loss (RETURNN
    frontend's signature; use_native_op chooses nothing here, torch's kernel computes the same loss;
    max_approx=True and label_loop=False are not supported).

    `logits`: over the batch dims, input_spatial_dim and one class dim; `targets`: int class indices
    over the batch dims and targets_spatial_dim. The batch dims are the dims of targets other than
    targets_spatial_dim, and the dims of logits other than input_spatial_dim and the class dim
    (logits may have more: the targets broadcast over them, e.g. several branches of one model). The
    class dim is the dim of logits that is neither a batch dim of targets nor input_spatial_dim, or,
    where that leaves several, logits' feature_dim (blank_index indexes it; targets' sparse_dim may
    lack the blank). log_softmax over the classes unless logits_normalized; the padding of logits is
    zeroed first (clean gradients); lengths come from the host; reduction none, zero_infinity=True.
    Result dims: the batch dims of targets, then logits' extra dims.
    While tracing, the mask is built in the graph and the lengths go as tensors on the logits' device
    to dimtorch::ctc_loss (torch's CTC kernel as one opaque graph op: torch's own op has a
    data-dependent output and no fake kernel, see _ctc_op).
    """
    caller = "dimtorch.ctc_loss()"
    if max_approx:
        raise NotImplementedError(f"{caller}: max_approx=True (the Viterbi score) is not supported; "
                                  f"dimtorch.ctc_best_path gives the best path")
    if not label_loop:
        raise NotImplementedError(f"{caller}: label_loop=False (CTC without label loops) is not supported")
    fast = _ctc_loss_one_batch_dim(logits, targets, input_spatial_dim, targets_spatial_dim, blank_index,
                                   logits_normalized)
    if fast is not None:
        return fast
    check_tensor(logits, caller, "logits")
    check_tensor(targets, caller, "targets")
    t_ax = axis_of(logits, input_spatial_dim, caller, what="input_spatial_dim", of="logits")
    axis_of(targets, targets_spatial_dim, caller, what="targets_spatial_dim", of="targets")
    batch_dims = tuple(d for d in targets.dims if d is not targets_spatial_dim)
    for d in batch_dims:
        if not any(d is e for e in logits.dims):
            raise ValueError(f"{caller}: logits lack the batch dim {dim_str(d)} of targets "
                             f"(logits dims: {dims_str(logits.dims)}, targets dims: {dims_str(targets.dims)})")
    rest = [d for d in logits.dims if d is not input_spatial_dim and not any(d is e for e in batch_dims)]
    if len(rest) > 1 and any(logits.feature_dim is d for d in rest):
        class_dim = logits.feature_dim
        batch_dims += tuple(d for d in rest if d is not class_dim)  # targets broadcast over them
    elif len(rest) == 1:
        class_dim = rest[0]
    else:
        raise ValueError(f"{caller}: logits must have exactly one class dim besides the batch dims "
                         f"({dims_str(batch_dims)}) and input_spatial_dim {dim_str(input_spatial_dim)} (or, "
                         f"with more, a feature_dim naming it); logits dims: {dims_str(logits.dims)}")
    n_classes = logits.raw.shape[logits.dims.index(class_dim)]
    if not 0 <= blank_index < n_classes:
        raise ValueError(f"{caller}: blank_index {blank_index} is out of range for the class dim "
                         f"{dim_str(class_dim)} of size {n_classes}")
    batch_shape = [logits.raw.shape[logits.dims.index(d)] for d in batch_dims]
    n_batch = 1
    for s in batch_shape:
        n_batch *= s
    n_time = logits.raw.shape[t_ax]
    lp = logits.raw_aligned((input_spatial_dim,) + batch_dims + (class_dim,)).reshape(n_time, n_batch, n_classes)
    in_graph = _tracing.tracing()
    device = lp.device if in_graph else None
    input_lengths = _host_lengths(input_spatial_dim, batch_dims, batch_shape, n_batch, "input_spatial_dim", caller,
                                  device)
    target_lengths = _host_lengths(targets_spatial_dim, batch_dims, batch_shape, n_batch, "targets_spatial_dim",
                                   caller, device)
    if input_spatial_dim.is_dynamic():
        # The dim's mask at the raw size (cached on the dim; in the graph while tracing).
        frames = _valid_mask_raw((input_spatial_dim,) + batch_dims, (n_time, *batch_shape), lp.device)
        lp = torch.where(frames.expand(n_time, *batch_shape).reshape(n_time, n_batch, 1), lp, 0)
    if not logits_normalized:
        lp = torch.log_softmax(lp, dim=-1)
    if n_time == 0:  # no frames at all (every sequence empty): torch's ctc_loss needs one, of padding
        lp = F.pad(lp, (0, 0, 0, 0, 0, 1))
    tg = targets.raw_aligned(batch_dims + (targets_spatial_dim,))
    tg = tg.expand(*batch_shape, tg.shape[-1]).reshape(n_batch, -1)  # over logits' extra dims too
    if in_graph:  # torch's CTC op cannot be traced (see _ctc_op)
        loss = _ctc_op.ctc_loss(lp, tg, input_lengths, target_lengths, blank_index, True)
    else:
        loss = F.ctc_loss(lp, tg, input_lengths, target_lengths, blank=blank_index, reduction="none",
                          zero_infinity=True)
    return Tensor(loss.view(batch_shape), batch_dims)


@names_errors("dimtorch.loss_mean_over_frames()")
def loss_mean_over_frames(loss: Tensor, *, frames_dim: Optional[Dim] = None) -> Tensor:
    """Scalar mean of a loss over all valid frames of the batch: the masked sum of `loss` over all
    its dims divided by the number of frames, counted on the host from the lengths (no device read).
    Frames: the valid positions of loss itself (a per-frame loss, e.g. from cross_entropy), or, with
    `frames_dim` (e.g. the targets' spatial dim of a per-sequence CTC loss), the total of that dim's
    lengths over loss's dims. At least one frame is counted (an empty batch gives 0, not NaN).
    While tracing, the count is a tensor in the graph (from the lengths as tensors)."""
    caller = "dimtorch.loss_mean_over_frames()"
    check_tensor(loss, caller, "loss")
    dims = loss.dims
    if _tracing.tracing():
        return _loss_mean_in_graph(loss, frames_dim, caller)
    if frames_dim is None:
        shape = loss.raw.shape
        host_mask = _valid_mask_raw(dims, shape, _CPU)
        count = host_mask.expand(shape).sum().item() if host_mask is not None else loss.raw.numel()  # host
        raw = loss.raw if host_mask is None else torch.where(_valid_mask_raw(dims, shape, loss.raw.device), loss.raw, 0)
    else:
        if not isinstance(frames_dim, Dim):
            raise TypeError(f"{caller}: frames_dim must be a Dim or None, got {type(frames_dim).__name__}")
        if any(d is frames_dim for d in dims):
            raise ValueError(f"{caller}: frames_dim {dim_str(frames_dim)} is a dim of loss ({dims_str(dims)}); "
                             f"leave it out to count loss's own valid frames")
        shape = list(loss.raw.shape)
        n = loss.raw.numel()
        count = _host_lengths(frames_dim, dims, shape, n, "frames_dim", caller).sum().item()
        raw = loss.raw
    return Tensor(raw.sum() / max(count, 1), ())


def _loss_mean_in_graph(loss: Tensor, frames_dim: Optional[Dim], caller: str) -> Tensor:
    """loss_mean_over_frames while tracing: the frame count as a tensor in the graph."""
    dims, raw = loss.dims, loss.raw
    shape = raw.shape
    if frames_dim is None:
        mask = _in_graph.valid_mask(dims, shape, raw.device)
        if mask is None:
            return Tensor(raw.sum() / max(raw.numel(), 1), ())
        raw = torch.where(mask, raw, 0)
        count = mask.expand(shape).sum()
    else:
        if any(d is frames_dim for d in dims):
            raise ValueError(f"{caller}: frames_dim {dim_str(frames_dim)} is a dim of loss ({dims_str(dims)}); "
                             f"leave it out to count loss's own valid frames")
        count = _host_lengths(frames_dim, dims, list(shape), raw.numel(), "frames_dim", caller, raw.device).sum()
    return Tensor(raw.sum() / count.clamp(min=1), ())
