"""Benchmark rows of the array ops (slicing, split/stack, top_k, cumsum, one_hot, scatter, packing, pooling).

Same conventions as rows.py: each row is written three ways, a builder returns the zero-argument callable
that is timed, and what the PyTorch user would make once per batch (index tensors from the lengths, masks)
is made by the builder, outside the timed region, as dimtorch and RETURNN cache theirs on the dim. A
PyTorch builder whose output needs its own valid-frames mask puts it on the PyTorch side (`valid_frames`
names it there). rows.py appends these rows to its ROWS: import rows, not this module.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import dimtorch as dt

from .row import BTF, Row, _rf


def _reverse_index(s):
    """(batch, time, feature) gather index of the per-sequence reversal; padding frames stay."""
    lengths = s.lengths.to(s.device)[:, None]
    t = torch.arange(s.T, device=s.device)[None, :]
    return torch.where(t < lengths, lengths - 1 - t, t)[:, :, None].expand(s.B, s.T, s.F).contiguous()


def _pack_index(s):
    """Flat (batch * time) positions of the valid frames, sequence by sequence."""
    return s.mask3[:, :, 0].reshape(-1).nonzero().squeeze(1)


def _torch_max_pool(s):
    """PyTorch's masked max pool; also puts the valid output frames on the side as `pool_valid`
    (batch, 1, pooled) for the agreement check (output padding is -inf here, other values elsewhere)."""
    n_out = -(-s.T // 2)
    out_lengths = -(-s.lengths.to(s.device) // 2)
    s.pool_valid = (torch.arange(n_out, device=s.device)[None, :] < out_lengths[:, None])[:, None, :]
    return lambda x=s.x, m=s.mask3: F.max_pool1d(torch.where(m, x, float("-inf")).transpose(1, 2), 2, 2,
                                                 ceil_mode=True)


def _halves(s):
    """Two static dims splitting the feature dim (this side's Dim type)."""
    return s.api.dim(s.shapes.feature // 2, "half1"), s.api.dim(s.shapes.feature - s.shapes.feature // 2, "half2")


def _transposed_filter(s):
    """The conv filter (out, feature, kernel) as a transposed-conv filter (feature, out, kernel)."""
    return getattr(s, "raw", s).conv_w.transpose(0, 1).contiguous()  # the torch side is the raws itself


ARRAY_ROWS = (
    Row("slice_time", "slice dynamic time [1:], each sequence drops its first frame", out=("batch", "slice", "feature"),
        requires=("slice",),
        torch=lambda s: lambda x=s.x: x[:, 1:],
        dimtorch=lambda s: lambda x=s.x, t=s.time: dt.slice(x, axis=t, start=1)[0],
        returnn=lambda s: lambda x=s.x, t=s.time, sl=_rf(s).slice: sl(x, axis=t, start=1)[0]),
    Row("shift_right", "shift dynamic time right by 1, first frame 0", out=BTF, valid_frames="mask3",
        requires=("shift_right",),
        torch=lambda s: lambda x=s.x: F.pad(x[:, :-1], (0, 0, 1, 0)),
        dimtorch=lambda s: lambda x=s.x, t=s.time: dt.shift_right(x, axis=t, pad_value=0.0),
        returnn=lambda s: lambda x=s.x, t=s.time, sr=_rf(s).shift_right: sr(x, axis=t, pad_value=0.0)),
    Row("reverse_sequence", "reverse each sequence along dynamic time (index made once per batch)", out=BTF,
        valid_frames="mask3", requires=("reverse_sequence",),
        torch=lambda s: lambda x=s.x, index=_reverse_index(s): x.gather(1, index),
        dimtorch=lambda s: lambda x=s.x, t=s.time: dt.reverse_sequence(x, axis=t),
        returnn=lambda s: lambda x=s.x, t=s.time, rev=_rf(s).reverse_sequence: rev(x, axis=t)),
    Row("split_feature", "split static feature into two halves", out=BTF, requires=("split",),
        torch=lambda s: lambda x=s.x, sizes=(s.F // 2, s.F - s.F // 2): torch.split(x, sizes, dim=-1),
        dimtorch=lambda s: lambda x=s.x, f=s.feature, parts=_halves(s): dt.split(x, axis=f, out_dims=parts),
        returnn=lambda s: lambda x=s.x, f=s.feature, parts=list(_halves(s)), split=_rf(s).split:
            split(x, axis=f, out_dims=parts)),
    Row("stack", "stack x, y (batch, time, feature) along a new dim", out=("stack",) + BTF, requires=("stack",),
        torch=lambda s: lambda x=s.x, y=s.y: torch.stack((x, y)),
        dimtorch=lambda s: lambda x=s.x, y=s.y: dt.stack((x, y))[0],
        returnn=lambda s: lambda x=s.x, y=s.y, stack=_rf(s).stack: stack((x, y))[0]),
    Row("top_k", "top 2 over static feature: values and indices", out=("batch", "time", "k"), requires=("top_k",),
        torch=lambda s: lambda x=s.x: torch.topk(x, 2, dim=-1),
        dimtorch=lambda s: lambda x=s.x, f=s.feature: dt.top_k(x, axis=f, k=2)[:2],
        returnn=lambda s: lambda x=s.x, f=s.feature, top_k=_rf(s).top_k: top_k(x, axis=f, k=2)[:2]),
    Row("cumsum_masked", "cumsum over dynamic time, padding adds 0", out=BTF, valid_frames="mask3",
        requires=("cumsum",),
        torch=lambda s: lambda x=s.x, m=s.mask3: torch.where(m, x, 0.0).cumsum(dim=1),
        dimtorch=lambda s: lambda x=s.x, t=s.time: dt.cumsum(x, axis=t),
        returnn=lambda s: lambda x=s.x, t=s.time, cumsum=_rf(s).cumsum: cumsum(x, spatial_dim=t)),
    Row("one_hot", "one-hot of labels (batch, time) over vocab", out=("batch", "time", "vocab"), requires=("one_hot",),
        torch=lambda s: lambda labels=s.labels, n=s.shapes.vocab: F.one_hot(labels, n),
        dimtorch=lambda s: lambda labels=s.labels: dt.one_hot(labels),
        returnn=lambda s: lambda labels=s.labels, one_hot=_rf(s).one_hot: one_hot(labels)),
    Row("scatter_add", "scatter-add frames of dynamic time into vocab at labels, padding adds nothing",
        out=("batch", "vocab", "feature"), requires=("scatter",),
        torch=lambda s: lambda x=s.x, m=s.mask3, labels=s.labels, shape=(s.B, s.shapes.vocab, s.F):
            x.new_zeros(shape).scatter_add_(1, labels.unsqueeze(-1).expand(x.shape), torch.where(m, x, 0.0)),
        dimtorch=lambda s: lambda x=s.x, labels=s.labels, t=s.time: dt.scatter(x, indices=labels, indices_dim=t),
        returnn=lambda s: lambda x=s.x, labels=s.labels, t=s.time, scatter=_rf(s).scatter:
            scatter(x, indices=labels, indices_dim=t, use_mask=True)),
    Row("pack_padded", "valid frames of (batch, dynamic time) packed into one dim (index made once per batch)",
        out=("pack", "feature"), requires=("pack_padded",),
        torch=lambda s: lambda x=s.x, index=_pack_index(s): x.flatten(0, 1).index_select(0, index),
        dimtorch=lambda s: lambda x=s.x, dims=(s.batch, s.time): dt.pack_padded(x, dims=dims)[0],
        returnn=lambda s: lambda x=s.x, dims=[s.batch, s.time], pack=_rf(s).pack_padded:
            pack(x, dims=dims, enforce_sorted=False)[0]),
    Row("pool_max", "max pool 2, stride 2, 'same' over dynamic time, padding never wins",
        out=("batch", "feature", "pooled"), valid_frames="pool_valid", requires=("pool",),
        torch=_torch_max_pool,
        dimtorch=lambda s: lambda x=s.x, t=(s.time,): dt.pool(x, mode="max", pool_size=2, padding="same",
                                                                in_spatial_dims=t)[0],
        returnn=lambda s: lambda x=s.x, t=[s.time], pool=_rf(s).pool:
            pool(x, mode="max", pool_size=2, padding="same", in_spatial_dims=t, use_mask=True)[0]),
    Row("transposed_conv1d", "1-D transposed conv over dynamic time, feature -> out, kernel 3, stride 2, "
        "masked input", out=("batch", "out", "upsampled"), requires=("transposed_conv",),
        torch=lambda s: lambda x=s.x, m=s.mask3, w=_transposed_filter(s):
            F.conv_transpose1d(torch.where(m, x, 0.0).transpose(1, 2), w, stride=2),
        dimtorch=lambda s: lambda x=s.x, f=s.feature, o=s.out, t=(s.time,), k=(s.kernel,),
        w=s.api.tensor(_transposed_filter(s), (s.feature, s.out, s.kernel)):
            dt.transposed_conv(x, w, in_dim=f, out_dim=o, in_spatial_dims=t, filter_size=k, strides=2)[0],
        returnn=lambda s: lambda x=s.x, f=s.feature, o=s.out, t=[s.time], k=[s.kernel],
        w=s.api.tensor(_transposed_filter(s), (s.feature, s.out, s.kernel)), tconv=_rf(s).transposed_conv:
            tconv(x, in_dim=f, out_dim=o, in_spatial_dims=t, filter=w, filter_size=k, padding="valid",
                  strides=[2], use_mask=True)[0]),
)
