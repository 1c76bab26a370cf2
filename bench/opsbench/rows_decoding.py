"""Rows of decoding and beam-search helpers: ctc_greedy_decode, edit_distance, gating, cum_concat_step,
gather_nested, where_nested, last_frame_position_of_dim.

The PyTorch side writes each the way a PyTorch user would (the same algorithm on raws, masks and device
lengths made once). rows.py appends these rows to its ROWS: import rows, not this module.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import dimtorch as dt

from .rows import BTF, Row, _rf


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


DECODING_ROWS = (
    Row("ctc_greedy_decode", "greedy CTC decode of (batch, time, feature) scores, blank last: argmax, repeats "
        "collapsed, blanks dropped (the decoded lengths read from the device)", out=("batch", "decoded"),
        requires=("ctc_greedy_decode",), meta=False,
        torch=_torch_ctc_greedy,
        dimtorch=lambda s: _named_ctc_greedy(s, dt.ctc_greedy_decode),
        returnn=lambda s: _named_ctc_greedy(s, _rf(s).ctc_greedy_decode)),
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
        torch=lambda s: lambda c=s.cond[..., None], x=s.x, y=s.y: (torch.where(c, x, y), torch.where(c, y, x)),
        dimtorch=lambda s: lambda c=s.cond, x=s.x, y=s.y: dt.where_nested((x, y), (y, x), condition=c),
        returnn=lambda s: lambda c=s.cond, x=s.x, y=s.y, wn=_rf(s).nested.where_nested: wn((x, y), (y, x), condition=c)),
    Row("last_frame_position_of_dim", "each sequence's last frame position (lengths - 1) on the device",
        out=("batch",), requires=("last_frame_position_of_dim",), meta=False,
        torch=lambda s: lambda n=s.lengths.to(s.device): n - 1,
        dimtorch=lambda s: lambda t=s.time, dev=s.device: dt.last_frame_position_of_dim(t, device=dev),
        returnn=lambda s: lambda t=s.time, dev=s.device, f=_rf(s).last_frame_position_of_dim: f(t, device=dev)),
)
