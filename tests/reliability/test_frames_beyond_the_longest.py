"""A raw time axis longer than the longest sequence is legal (many pipelines pad batches to a fixed or
bucketed length): every frame beyond a sequence's length is padding, the extra ones too. Each op
gives, on the valid frames of its outputs, what it gives on the same data cropped to the longest
sequence, whatever the extra frames hold; and the extra frames get no gradient.
"""
import re

import pytest
import torch

import dimtorch as dt

from helpers import PAD_LARGE, PAD_NAN


def _valid(out):
    """Outputs with padding zeroed and dynamic axes cropped to their dim's longest sequence."""
    if isinstance(out, (tuple, list)):
        return [v for o in out if isinstance(o, dt.Tensor) for v in _valid(o)]
    raw = out.copy_masked(0.0).raw if out.raw.is_floating_point() else out.raw
    for i, d in enumerate(out.dims):
        if d.is_dynamic():
            raw = raw.narrow(i, 0, d.get_max_size())
    return [raw]


def _ops(batch, time, feature):
    out = dt.Dim(3, name="out")
    w = dt.Tensor(torch.randn(3, feature.size, generator=torch.Generator().manual_seed(1)), (out, feature))
    filt = dt.Tensor(torch.randn(3, feature.size, 3, generator=torch.Generator().manual_seed(2)),
                     (out, feature, dt.Dim(3, name="k")))
    vocab = dt.Dim(feature.size, name="vocab")
    return {
        "reduce_sum": lambda x: dt.reduce_sum(x, axis=time),
        "reduce_mean": lambda x: dt.reduce_mean(x, axis=time),
        "reduce_max": lambda x: dt.reduce_max(x, axis=time),
        "reduce_logsumexp": lambda x: dt.reduce_logsumexp(x, axis=time),
        "reduce_argmax": lambda x: dt.reduce_argmax(x, axis=time),
        "softmax": lambda x: dt.softmax(x, axis=time),
        "log_softmax": lambda x: dt.log_softmax(x, axis=time),
        "moments": lambda x: dt.moments(x, axis=(batch, time)),
        "batch_norm": lambda x: dt.batch_norm(x, axis=feature, training=True),
        "matmul_over_time": lambda x: dt.matmul(x, x, reduce=time, use_mask=True),
        "linear": lambda x: dt.linear(x, w),
        "cumsum": lambda x: dt.cumsum(x, axis=time),
        "reverse_sequence": lambda x: dt.reverse_sequence(x, axis=time),
        "pad": lambda x: dt.pad(x, axes=time, padding=(2, 1), value=0.5),
        "pad_reflect": lambda x: dt.pad(x, axes=time, padding=(1, 1), mode="reflect"),
        "concat": lambda x: dt.concat((x, time), (x, time)),
        "slice": lambda x: dt.slice(x, axis=time, start=1),
        "shift_right": lambda x: dt.shift_right(x, axis=time, amount=1),
        "shift_left": lambda x: dt.shift_left(x, axis=time, amount=1),
        "merge_dims": lambda x: dt.merge_dims(x, dims=(time, feature)),
        "split_dims": lambda x: dt.split_dims(x, axis=time, dims=(dt.ceildiv(time, 2), dt.Dim(2, name="two")),
                                              pad_to_multiples=True),
        "pack_padded": lambda x: dt.pack_padded(x, dims=(batch, time)),
        "conv_same": lambda x: dt.conv(x, filt, in_dim=feature, out_dim=out, in_spatial_dims=[time],
                                       filter_size=[filt.dims[2]], padding="same"),
        "conv_strided": lambda x: dt.conv(x, filt, in_dim=feature, out_dim=out, in_spatial_dims=[time],
                                          filter_size=[filt.dims[2]], strides=2, padding="valid"),
        "pool": lambda x: dt.pool(x, mode="max", pool_size=2, in_spatial_dims=[time]),
        "top_k_over_time": lambda x: dt.top_k(x, axis=time, k=1)[:2],
        "sort": lambda x: dt.sort(x, axis=time),
        "cross_entropy": lambda x: dt.cross_entropy(
            estimated=dt.Tensor(x.raw, x.dims[:2] + (vocab,)),
            target=dt.Tensor(torch.zeros(x.raw.shape[:2], dtype=torch.int64), x.dims[:2], sparse_dim=vocab),
            axis=vocab),
        "loss_mean_over_frames": lambda x: dt.loss_mean_over_frames(dt.reduce_sum(x, axis=feature)),
    }


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("lengths", [(5, 3, 1), (4, 0, 4)])
def test_frames_beyond_the_longest_sequence_are_padding(lengths, pad):
    batch, feature = dt.Dim(None, name="batch"), dt.Dim(4, name="feature")
    time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
    n = max(lengths)
    raw = torch.randn(len(lengths), n + 3, 4, generator=torch.Generator().manual_seed(0))
    for b, m in enumerate(lengths):
        raw[b, m:] = pad  # the 3 frames beyond the longest sequence too
    for name, op in _ops(batch, time, feature).items():
        longer = raw.clone().requires_grad_(True)
        cropped = raw[:, :n].clone().requires_grad_(True)
        try:
            want = _valid(op(dt.Tensor(cropped, (batch, time, feature))))
        except ValueError as e:  # e.g. reflect padding longer than a sequence: the same error then
            with pytest.raises(ValueError, match=re.escape(str(e))):
                op(dt.Tensor(longer, (batch, time, feature)))
            continue
        got = _valid(op(dt.Tensor(longer, (batch, time, feature))))
        assert len(got) == len(want), name
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, equal_nan=False, msg=lambda m, name=name: f"{name}: {m}")
        floating = [(g, w) for g, w in zip(got, want) if g.is_floating_point() and g.requires_grad]
        if not floating:
            continue
        sum(g.sum() + w.sum() for g, w in floating).backward()
        valid = torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]
        torch.testing.assert_close(longer.grad[:, :n][valid], cropped.grad[valid],
                                   msg=lambda m, name=name: f"{name}, gradient: {m}")
        if name == "cross_entropy" and pad != pad:
            # F.cross_entropy's ignore_index gives padding positions loss 0 but gradient 0 * NaN
            # when their logits are NaN, as in hand-written PyTorch; finite padding gets 0.
            continue
        assert torch.equal(longer.grad[:, n:], torch.zeros_like(longer.grad[:, n:])), name


def _layers(feature, time):
    torch.manual_seed(3)
    kw = dict(key_dim_total=feature, value_dim_total=feature, num_heads=2)
    return {
        "SelfAttention": dt.nn.SelfAttention(feature, feature, **kw),
        "RelPosSelfAttention": dt.nn.RelPosSelfAttention(feature, feature, **kw),
        "CausalSelfAttention": dt.nn.CausalSelfAttention(feature, feature, **kw),
        "ConformerEncoderLayer": dt.nn.ConformerEncoderLayer(feature, num_heads=2, conv_kernel_size=3),
        "EBranchformerLayer": dt.nn.EBranchformerLayer(feature, num_heads=2),
        "TransformerEncoderLayer": dt.nn.TransformerEncoderLayer(feature, num_heads=2),
        "ConformerEncoderV2": dt.nn.ConformerEncoderV2(feature, num_layers=1, num_heads=2, conv_kernel_size=3),
    }


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_layers_take_frames_beyond_the_longest_sequence(pad):
    """The attention modules and encoder layers on a raw time axis longer than the longest sequence: the same
    valid outputs and input gradients as on the cropped raw (was a torch size mismatch in the attention's
    cached mask, and a raw-size mismatch in the residual after a conv)."""
    lengths = (5, 3, 1)
    batch, feature = dt.Dim(None, name="batch"), dt.Dim(4, name="feature")
    time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
    n = max(lengths)
    raw = torch.randn(3, n + 2, 4, generator=torch.Generator().manual_seed(0))
    for b, m in enumerate(lengths):
        raw[b, m:] = pad
    valid = torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]
    for name, layer in _layers(feature, time).items():
        layer.eval()
        outs, grads = [], []
        for x_raw in (raw.clone(), raw[:, :n].clone()):
            x_raw.requires_grad_(True)
            x = dt.Tensor(x_raw, (batch, time, feature), feature_dim=feature)
            kw = {"spatial_dim": time} if "Layer" in name or "Encoder" in name else {"axis": time}
            y = layer(x, **kw)
            y = y[0] if isinstance(y, tuple) else y
            (out,) = _valid(y)
            out.sum().backward()
            outs.append(out.detach())
            grads.append(x_raw.grad)
        torch.testing.assert_close(outs[0], outs[1], msg=lambda m, name=name: f"{name}: {m}")
        torch.testing.assert_close(grads[0][:, :n][valid], grads[1][valid], msg=lambda m, name=name: f"{name}: {m}")
