"""Tests of 3-D conv, transposed conv and pool (dt.conv / dt.transposed_conv / dt.pool over three spatial dims,
dt.nn.Conv3d / TransposedConv3d): a padded dynamic time dim and two static ones, each sequence alone through
F.conv3d / F.conv_transpose3d / F.max_pool3d / F.avg_pool3d as the oracle."""
import pytest
import torch
import torch.nn.functional as F

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, check_against_torch, check_batch_independence_by_position

LENGTHS = [6, 3, 1, 4]


def batch_3d(pad_value=PAD_NAN, lengths=LENGTHS, channels=2, seed=0):
    """x over (batch, time, h, w, ch), time dynamic with `pad_value` beyond each length (and one extra frame)."""
    g = torch.Generator().manual_seed(seed)
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
    h, w, ch = dt.Dim(4, name="h"), dt.Dim(3, name="w"), dt.Dim(channels, name="ch")
    raw = torch.randn(len(lengths), max(lengths) + 1, 4, 3, channels, generator=g)
    for b, n in enumerate(lengths):
        raw[b, n:] = pad_value
    return dt.Tensor(raw, (batch, time, h, w, ch)), batch, time, h, w, ch


def per_sequence(raw, lengths, fn, out_lengths):
    """raw (batch, time, h, w, ch) -> (batch, c_out, max(out_lengths), h', w'): fn((1, ch, n, h, w)) of each
    sequence alone, zero padded along time (a sequence that gives no frame: zeros, shaped like the others)."""
    outs = {}
    for b, n in enumerate(lengths):
        if out_lengths[b]:
            outs[b] = fn(raw[b:b + 1, :n].permute(0, 4, 1, 2, 3))[0]
    shape = next(iter(outs.values())).shape
    n_out = max(out_lengths)
    return torch.stack([F.pad(outs[b], (0, 0, 0, 0, 0, n_out - outs[b].shape[1])) if b in outs
                        else raw.new_zeros((shape[0], n_out) + tuple(shape[2:])) for b in range(len(lengths))])


def filter_3d(out_dim, in_dim, ks, seed=1):
    g = torch.Generator().manual_seed(seed)
    return dt.Tensor(torch.randn(out_dim.size, in_dim.size, *[k.size for k in ks], generator=g) * 0.3,
                     (out_dim, in_dim) + tuple(ks))


@pytest.mark.parametrize("padding,strides", [("valid", 1), ("same", (2, 1, 2)), ((1, 0, 1), (1, 2, 1)),
                                             ("valid", (2, 1, 1))])
def test_conv3d(padding, strides):
    x, batch, time, h, w, ch = batch_3d()
    out = dt.Dim(3, name="out")
    ks = (dt.Dim(3, name="kt"), dt.Dim(2, name="kh"), dt.Dim(3, name="kw"))
    filt = filter_3d(out, ch, ks)
    bias = dt.Tensor(torch.randn(3), (out,))
    kw = dict(in_dim=ch, out_dim=out, filter_size=ks, strides=strides, padding=padding)
    y, (ot, oh, ow) = dt.conv(x, filt, in_spatial_dims=[time, h, w], bias=bias, **kw)
    assert y.dims == (batch, out, ot, oh, ow)
    s = (strides,) * 3 if isinstance(strides, int) else strides
    if padding == "same":
        pads = [(1, 1), (0, 1), (1, 1)]  # (left, right) per dim: k - 1 in all, left (k - 1) // 2
    else:
        p = (0, 0, 0) if padding == "valid" else padding
        pads = [(q, q) for q in p]
    want_len = [max(0, (n + sum(pads[0]) - 3) // s[0] + 1) for n in LENGTHS]
    assert ot.lengths.raw.tolist() == want_len
    assert (oh.size, ow.size) == ((4 + sum(pads[1]) - 2) // s[1] + 1, (3 + sum(pads[2]) - 3) // s[2] + 1)

    def seq_fn(wr, br):
        flat = [q for pair in reversed(pads) for q in pair]
        return lambda seq: F.conv3d(F.pad(seq, flat), wr, br, stride=s)
    check_against_torch(lambda t, wt, bt: dt.conv(t, wt, in_spatial_dims=[time, h, w], bias=bt, **kw)[0],
                        lambda r, wr, br: per_sequence(r, LENGTHS, seq_fn(wr, br), want_len),
                        [x, filt, bias], rtol=1e-5, atol=1e-5)
    check_batch_independence_by_position(
        lambda t, m: dt.conv(t, filt, in_spatial_dims=[m(time), h, w], bias=bias, **kw)[0], x, batch, time,
        rtol=1e-5, atol=1e-5)
    x_large = batch_3d(PAD_LARGE)[0]
    y_large = dt.conv(dt.Tensor(x_large.raw, x.dims), filt, in_spatial_dims=[time, h, w], bias=bias, **kw)[0]
    valid = (torch.arange(y.raw.shape[2])[None, :] < torch.tensor(want_len)[:, None])[:, None, :, None, None]
    torch.testing.assert_close(y_large.raw[valid.expand(y.raw.shape)], y.raw[valid.expand(y.raw.shape)])


def test_transposed_conv3d():
    x, batch, time, h, w, ch = batch_3d()
    out = dt.Dim(2, name="out")
    ks = (dt.Dim(3, name="kt"), dt.Dim(2, name="kh"), dt.Dim(2, name="kw"))
    g = torch.Generator().manual_seed(2)
    filt = dt.Tensor(torch.randn(2, 2, 3, 2, 2, generator=g), (ch, out) + ks)
    bias = dt.Tensor(torch.randn(2), (out,))
    kw = dict(in_dim=ch, out_dim=out, filter_size=ks, strides=(2, 1, 2))
    y, (ot, oh, ow) = dt.transposed_conv(x, filt, in_spatial_dims=[time, h, w], bias=bias, **kw)
    want_len = [n * 2 + 1 for n in LENGTHS]  # T * s + max(k - s, 0)
    assert ot.lengths.raw.tolist() == want_len and (oh.size, ow.size) == (5, 6) and y.dims == (batch, out, ot, oh, ow)
    check_against_torch(
        lambda t, wt, bt: dt.transposed_conv(t, wt, in_spatial_dims=[time, h, w], bias=bt, **kw)[0],
        lambda r, wr, br: per_sequence(r, LENGTHS, lambda seq: F.conv_transpose3d(seq, wr, br, stride=(2, 1, 2)),
                                       want_len),
        [x, filt, bias], rtol=1e-5, atol=1e-5)
    check_batch_independence_by_position(
        lambda t, m: dt.transposed_conv(t, filt, in_spatial_dims=[m(time), h, w], bias=bias, **kw)[0], x, batch,
        time, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["max", "avg"])
@pytest.mark.parametrize("pool_size,strides,padding", [((2, 2, 3), None, "valid"), ((3, 2, 2), (2, 1, 1), 1),
                                                       ((2, 3, 2), 1, (1, 1, 0))])
def test_pool3d(mode, pool_size, strides, padding):
    x, batch, time, h, w, ch = batch_3d(PAD_LARGE if mode == "max" else PAD_NAN)
    kw = dict(mode=mode, pool_size=pool_size, strides=strides, padding=padding)
    y, (ot, oh, ow) = dt.pool(x, in_spatial_dims=[time, h, w], **kw)
    assert y.dims == (batch, ch, ot, oh, ow)
    s = pool_size if strides is None else (strides,) * 3 if isinstance(strides, int) else strides
    p = (0, 0, 0) if padding == "valid" else (padding,) * 3 if isinstance(padding, int) else padding
    want_len = [max(0, (n + 2 * p[0] - pool_size[0]) // s[0] + 1) for n in LENGTHS]
    assert ot.lengths.raw.tolist() == want_len

    def seq_fn(seq):
        if mode == "max":
            return F.max_pool3d(seq, pool_size, s, p)
        flat = [q for q in reversed(p) for _ in range(2)]  # by hand: torch's avg_pool3d refuses T < k before padding
        total = F.avg_pool3d(F.pad(seq, flat), pool_size, s, divisor_override=1)
        return total / F.avg_pool3d(F.pad(torch.ones_like(seq), flat), pool_size, s, divisor_override=1)
    check_against_torch(lambda t: dt.pool(t, in_spatial_dims=[time, h, w], **kw)[0],
                        lambda r: per_sequence(r, LENGTHS, seq_fn, want_len), [x], rtol=1e-5, atol=1e-5)
    check_batch_independence_by_position(lambda t, m: dt.pool(t, in_spatial_dims=[m(time), h, w], **kw)[0],
                                         x, batch, time)


def test_nn_conv3d_and_transposed_conv3d_load_torch_weights():
    x, batch, time, h, w, ch = batch_3d(0.0, lengths=[5, 5])
    out = dt.Dim(4, name="out")
    conv = dt.nn.Conv3d(ch, out, (3, 3, 1), padding=(1, 1, 0), strides=(2, 1, 1))
    ref = torch.nn.Conv3d(2, 4, (3, 3, 1), padding=(1, 1, 0), stride=(2, 1, 1))
    conv.load_state_dict(ref.state_dict())
    y, (ot, oh, ow) = conv(x, in_spatial_dims=[time, h, w])
    raw = x.raw[:, :5].permute(0, 4, 1, 2, 3)
    torch.testing.assert_close(y.raw, ref(raw), rtol=1e-5, atol=1e-5)
    up = dt.nn.TransposedConv3d(out, ch, (2, 1, 1))
    ref_up = torch.nn.ConvTranspose3d(4, 2, (2, 1, 1), stride=(2, 1, 1))
    up.load_state_dict(ref_up.state_dict())
    z, (zt, zh, zw) = up(y, in_spatial_dims=[ot, oh, ow])
    assert zt.lengths.raw.tolist() == [6, 6] and (zh, zw) == (oh, ow)
    torch.testing.assert_close(z.raw, ref_up(ref(raw)), rtol=1e-5, atol=1e-5)
    mine = dt.Dim(dt.Tensor(torch.tensor([3, 3]), (batch,)), name="mine")
    assert conv(x, in_spatial_dims=[time, h, w], out_spatial_dims=[mine, oh, ow])[1] == (mine, oh, ow)
    assert "Conv3d" in repr(conv)


def test_four_spatial_dims_are_an_error():
    x, batch, time, h, w, ch = batch_3d()
    with pytest.raises(ValueError, match=r"dimtorch\.pool\(\): 4 spatial dims .* only 1-D, 2-D and 3-D"):
        dt.pool(x, mode="max", pool_size=1, in_spatial_dims=[time, h, w, ch])
    with pytest.raises(ValueError, match=r"dimtorch\.pool\(\): in_spatial_dims lists a dim twice"):
        dt.pool(x, mode="max", pool_size=1, in_spatial_dims=[time, h, time])
