"""Rows of decoding and beam-search helpers: ctc_greedy_decode, ctc_best_path, ctc_durations_from_path,
edit_distance, gating, cum_concat_step, gather_nested, where_nested, last_frame_position_of_dim.

The PyTorch side writes each the way a PyTorch user would (the same algorithm on raws, masks and device
lengths made once). rows.py appends these rows to its ROWS: import rows, not this module.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import dimtorch as dt

from .row import BTF, Row, _rf


def _torch_ctc_greedy(s):
    blank = s.F - 1

    def decode(x=s.x, m=s.mask3[..., 0], blank=blank):
        labels = x.argmax(-1)
        prev = F.pad(labels[:, :-1], (1, 0), value=blank)
        keep = (labels != prev) & (labels != blank) & m
        n = int(keep.sum(-1).max())
        position = torch.where(keep, keep.cumsum(-1) - 1, n)
        return labels.new_zeros(labels.shape[0], n + 1).scatter_(1, position, labels)[:, :n].int()
    return decode


def _named_ctc_greedy(s, fn):
    return lambda x=s.x, t=s.time, f=s.feature, blank=s.shapes.feature - 1: fn(
        x, in_spatial_dim=t, blank_index=blank, wb_target_dim=f)[0]


def _ctc_targets_raw(s):
    """(labels of each sequence's first third, (batch, max of lengths // 3)) in [0, blank), blank = feature - 1:
    every sequence has a CTC path through its targets."""
    raw = getattr(s, "raw", s)
    lengths = raw.lengths // 3
    return (raw.labels[:, :int(lengths.max())] % (s.shapes.feature - 1)), lengths


def _torch_ctc_best_path(s):
    """Viterbi over the extended labels (blank, l1, blank, ..., lS, blank), batch-major, one step per frame,
    backtrace by the stored choices: what a PyTorch user writes (no host reads)."""
    blank = s.F - 1
    targets, lengths = _ctc_targets_raw(s)
    target_lengths = lengths.to(s.device)

    def best_path(x=s.x, m=s.mask3[..., 0], tg=targets, tl=target_lengths, blank=blank):
        lp = torch.log_softmax(torch.where(m[..., None], x, 0.0), -1)
        B, T, _ = lp.shape
        tg = torch.where(torch.arange(tg.shape[1], device=tg.device) < tl[:, None], tg, blank)
        z = F.pad(torch.stack((torch.full_like(tg, blank), tg), -1).view(B, -1), (0, 1), value=blank)
        L = z.shape[1]
        emit = lp.gather(2, z[:, None, :].expand(B, T, L))
        s_idx = torch.arange(L, device=lp.device)
        skip = (s_idx % 2 == 1) & (s_idx >= 3) & F.pad(z[:, 2:] != z[:, :-2], (2, 0), value=False)
        skip_add = torch.where(skip, 0.0, -float("inf"))
        alpha = emit[:, 0] + torch.where(s_idx < 2, 0.0, -float("inf"))
        back = [None]
        for t in range(1, T):
            cand = torch.stack((alpha, F.pad(alpha[:, :-1], (1, 0), value=-float("inf")),
                                F.pad(alpha[:, :-2], (2, 0), value=-float("inf")) + skip_add))
            best, arg = cand.max(0)
            alpha = torch.where(m[:, t, None], best + emit[:, t], alpha)
            back.append(arg)
        end = (2 * tl)[:, None]
        label_end = (end - 1).clamp_min(0)
        score_label = torch.where(end > 0, alpha.gather(1, label_end), -float("inf"))
        cur = torch.where(score_label > alpha.gather(1, end), label_end, end)
        states = [None] * T
        for t in range(T - 1, -1, -1):
            states[t] = cur
            if t > 0:
                cur = torch.where(m[:, t, None], cur - back[t].gather(1, cur), cur)
        return torch.where(m, z.gather(1, torch.cat(states, 1)), blank).int()
    return best_path


def _named_ctc_best_path(s, fn):
    targets, lengths = _ctc_targets_raw(s)
    tt = s.api.dim(s.api.tensor(lengths, (s.batch,)), "ctc_targets")
    logits = s.x
    if hasattr(logits, "raw_tensor"):  # RETURNN takes the class dim from the feature dim
        logits = logits.copy()
        logits.feature_dim = s.feature
    return lambda x=logits, tg=s.api.tensor(targets, (s.batch, tt), sparse_dim=s.feature), t=s.time, tt=tt, \
        blank=s.shapes.feature - 1: fn(logits=x, targets=tg, input_spatial_dim=t, targets_spatial_dim=tt,
                                       blank_index=blank)


def _path_raw(s):
    """A CTC path over (batch, time): the frame argmax over the feature's last 3 entries, 2 the blank
    (garbage in the padding)."""
    return getattr(s, "raw", s).x[..., -3:].argmax(-1)


def _path_targets(s):
    """The label counts of _path_raw's paths (as the durations' targets lengths), on the host."""
    raw = getattr(s, "raw", s)
    p = _path_raw(s).cpu()
    new = (p != 2) & (p != F.pad(p[:, :-1], (1, 0), value=2)) & raw.mask.cpu()
    return new.sum(1)


def _torch_ctc_durations(s):
    """As rf's (and dimtorch's) default check_dims: the path's label counts are asserted on the device (no
    wait) to be the targets' lengths, which are on the device once per batch, as are the ones."""
    targets_lengths = _path_targets(s)
    n_out = 2 * int(targets_lengths.max()) + 1
    p = _path_raw(s)
    ones = torch.ones(p.shape, dtype=torch.int32, device=p.device)

    def durations(p=p, m=s.mask3[..., 0], n_out=n_out, lengths=targets_lengths.to(p.device), ones=ones):
        is_label = p != 2
        new = is_label & (p != F.pad(p[:, :-1], (1, 0), value=2)) & m
        seen = new.cumsum(1)
        torch._assert_async(torch.all(seen[:, -1] == lengths), "label counts differ from the targets' lengths")
        state = torch.where(m, 2 * seen - is_label.long(), n_out)
        out = torch.zeros(p.shape[0], n_out + 1, dtype=torch.int32, device=p.device)
        return out.scatter_add_(1, state, ones)[:, :n_out]
    return durations


def _named_ctc_durations(s, fn):
    tt = s.api.dim(s.api.tensor(_path_targets(s), (s.batch,)), "path_targets")
    return lambda p=s.api.tensor(_path_raw(s), (s.batch, s.time)), t=s.time, tt=tt: fn(
        path=p, path_spatial_dim=t, blank_index=2, targets_spatial_dim=tt)[0]


def _other_labels(s):
    """labels rolled by one frame, over key_time (the same lengths as time)."""
    raw = getattr(s, "raw", s).labels.roll(1, dims=1)
    return s.api.tensor(raw, (s.batch, s.key_time), sparse_dim=s.vocab) if hasattr(s, "api") else raw


def _torch_edit_distance(s):
    lengths = s.lengths.to(s.device)

    def distance(a=s.labels, b=_other_labels(s), la=lengths, lb=lengths):
        n_a, n_b = a.shape[1], b.shape[1]
        j = torch.arange(n_b + 1, device=a.device)
        row = j.expand(a.shape[0], n_b + 1)
        final = row
        for i in range(1, n_a + 1):
            cost = (a[:, i - 1:i] != b).long()
            candidate = torch.minimum(row[:, :-1] + cost, row[:, 1:] + 1)
            candidate = torch.cat((torch.full((a.shape[0], 1), i, device=a.device), candidate), -1)
            row = torch.cummin(candidate - j, dim=-1).values + j
            final = torch.where((la == i)[:, None], row, final)
        return final.gather(1, lb[:, None])[:, 0].int()
    return distance


def _frame(s):
    raw = getattr(s, "raw", s).y[:, 0]
    return s.api.tensor(raw, (s.batch, s.feature)) if hasattr(s, "api") else raw


def _torch_cum_concat(s):
    lengths = s.lengths.to(s.device)
    rows = torch.arange(s.B, device=s.device)
    s.cum_valid = (torch.arange(s.T + 1, device=s.device)[None, :] <= lengths[:, None])[:, :, None]

    def step(x=s.x, frame=_frame(s), m=s.mask3, rows=rows, lengths=lengths):
        out = F.pad(torch.where(m, x, 0.0), (0, 0, 0, 1))
        out[rows, lengths] = frame
        return out
    return step


def _backrefs(s):
    """(batch, beam2) indices into heads: a beam step's back-pointers."""
    g = torch.Generator().manual_seed(1)
    raw = torch.randint(s.shapes.heads, (s.shapes.batch, s.shapes.heads), generator=g).to(s.device)
    if not hasattr(s, "api"):
        return raw
    if getattr(s, "beam2", None) is None:
        s.beam2 = s.api.dim(s.shapes.heads, "beam2")
    return s.api.tensor(raw, (s.batch, s.beam2), sparse_dim=s.heads)


def _torch_gather_nested(s):
    def gather(x4=s.x4, q=s.q, idx=_backrefs(s)):
        B, T, H, D = x4.shape
        return (torch.gather(x4, 2, idx[:, None, :, None].expand(B, T, H, D)),
                torch.gather(q, 1, idx[:, :, None, None].expand(B, H, T, D)))
    return gather


def _named_gather_nested(s, fn):
    return lambda x4=s.x4, q=s.q, idx=_backrefs(s): tuple(fn({"a": x4, "b": q}, indices=idx).values())


def _torch_where_nested(s):
    """The condition is new each call (a decoder step's): its view over feature is made once per call, as the
    where row's."""
    def run(c=s.cond, x=s.x, y=s.y):
        c = c.unsqueeze(-1)
        return torch.where(c, x, y), torch.where(c, y, x)
    return run


DECODING_ROWS = (
    Row("ctc_greedy_decode", "greedy CTC decode of (batch, time, feature) scores, blank last: argmax, repeats "
        "collapsed, blanks dropped (the decoded lengths read from the device)", out=("batch", "decoded"),
        requires=("ctc_greedy_decode",), meta=False,
        torch=_torch_ctc_greedy,
        dimtorch=lambda s: _named_ctc_greedy(s, dt.ctc_greedy_decode),
        returnn=lambda s: _named_ctc_greedy(s, _rf(s).ctc_greedy_decode)),
    Row("ctc_best_path", "CTC forced alignment (Viterbi) of (batch, time, feature) scores, blank last, through "
        "targets of each sequence's length // 3: one step per frame and a backtrace", out=("batch", "time"),
        requires=("ctc_best_path",), meta=False,
        torch=_torch_ctc_best_path,
        dimtorch=lambda s: _named_ctc_best_path(s, dt.ctc_best_path),
        returnn=lambda s: _named_ctc_best_path(s, _rf(s).ctc_best_path)),
    Row("ctc_durations_from_path", "frames per CTC state of a path over (batch, time), the targets' dim given",
        out=("batch", "states"), requires=("ctc_durations_from_path",), meta=False,
        torch=_torch_ctc_durations,
        dimtorch=lambda s: _named_ctc_durations(s, dt.ctc_durations_from_path),
        returnn=lambda s: _named_ctc_durations(s, _rf(s).ctc_durations_from_path)),
    Row("edit_distance", "Levenshtein distance of labels (batch, time) and the labels rolled by a frame",
        out=("batch",), requires=("edit_distance",), meta=False,
        torch=_torch_edit_distance,
        dimtorch=lambda s: lambda a=s.labels, b=_other_labels(s), ta=s.time, tb=s.key_time: dt.edit_distance(a, ta, b, tb),
        returnn=lambda s: lambda a=s.labels, b=_other_labels(s), ta=s.time, tb=s.key_time, ed=_rf(s).edit_distance:
            ed(a, ta, b, tb)),
    Row("gating", "GLU over feature: first half * sigmoid(second half)", out=("batch", "time", "half"),
        requires=("gating",),
        torch=lambda s: lambda x=s.x: F.glu(x, dim=-1),
        dimtorch=lambda s: lambda x=s.x, f=s.feature: dt.gating(x, axis=f)[0],
        returnn=lambda s: lambda x=s.x, f=s.feature, gating=_rf(s).gating: gating(x, axis=f)[0]),
    Row("cum_concat_step", "append a frame (batch, feature) after each sequence's last frame of x",
        out=("batch", "time+1", "feature"), valid_frames="cum_valid", requires=("cum_concat_step",),
        torch=_torch_cum_concat,
        dimtorch=lambda s: lambda x=s.x, frame=_frame(s), t=s.time: dt.cum_concat_step(frame, prev_accum=x, axis=t)[0],
        returnn=lambda s: lambda x=s.x, frame=_frame(s), t=s.time, step=_rf(s).cum_concat_step:
            step(frame, prev_accum=x, axis=t)[0]),
    Row("gather_nested", "beam step: a state {x (b, time, heads, d), q (b, heads, time, d)} reordered by back-pointers "
        "(batch, beam2) into heads", out=("batch", "*", "*", "*"), check="none",
        requires=("gather_nested",),
        torch=_torch_gather_nested,
        dimtorch=lambda s: _named_gather_nested(s, dt.gather_nested),
        returnn=lambda s: _named_gather_nested(s, _rf(s).nested.gather_nested)),
    Row("where_nested", "where(cond (batch, time), x, y) over a state (x, y) and its mirror (y, x)", out=BTF,
        requires=("where_nested",),
        torch=_torch_where_nested,
        dimtorch=lambda s: lambda c=s.cond, x=s.x, y=s.y: dt.where_nested((x, y), (y, x), condition=c),
        returnn=lambda s: lambda c=s.cond, x=s.x, y=s.y, wn=_rf(s).nested.where_nested: wn((x, y), (y, x), condition=c)),
    Row("last_frame_position_of_dim", "each sequence's last frame position (lengths - 1) on the device",
        out=("batch",), requires=("last_frame_position_of_dim",), meta=False,
        torch=lambda s: lambda n=s.lengths.to(s.device): n - 1,
        dimtorch=lambda s: lambda t=s.time, dev=s.device: dt.last_frame_position_of_dim(t, device=dev),
        returnn=lambda s: lambda t=s.time, dev=s.device, f=_rf(s).last_frame_position_of_dim: f(t, device=dev)),
)
