"""Tests of int padding and out_spatial_dims= of dt.conv, dt.transposed_conv, dt.pool and their layers
(RETURNN frontend's arguments), against each sequence alone through torch."""
import pytest
import torch
import torch.nn.functional as F

import dimtorch as dt
from helpers import (PAD_LARGE, PAD_NAN, check_against_torch, check_batch_independence_by_position,
                     check_padding_invariance, make_padded_batch)
from conv_oracles import make_filter, per_sequence


def lengths_dim(batch, lengths, name):
    return dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name=name)


def conv_out_len(n, k_eff, s, p):
    return max(0, (n + 2 * p - k_eff) // s + 1)


@pytest.mark.parametrize("padding,k,s,dl", [(1, 3, 1, 1), (2, 4, 2, 1), (1, 2, 1, 2), ((3,), 3, 2, 1), (0, 2, 1, 1)])
def test_conv1d_int_padding(padding, k, s, dl):
    lengths = [9, 6, 1, 0, 4]
    pb = make_padded_batch(lengths, feature=3, extra_time=1, pad_value=PAD_LARGE)
    out_dim, kd = dt.Dim(5, name="out"), dt.Dim(k, name="k")
    w = make_filter(out_dim, pb.feature, (kd,))
    bias = dt.Tensor(torch.randn(5), (out_dim,))
    p = padding if isinstance(padding, int) else padding[0]
    k_eff = dl * (k - 1) + 1
    kw = dict(in_dim=pb.feature, out_dim=out_dim, filter_size=[kd], strides=s, dilation=dl, padding=padding)
    y, (ot,) = dt.conv(pb.x, w, in_spatial_dims=[pb.time], bias=bias, **kw)
    expected = [conv_out_len(n, k_eff, s, p) for n in lengths]
    assert ot.lengths.raw.tolist() == expected and y.dims == (pb.batch, out_dim, ot)
    assert ot is dt.make_conv_out_spatial_dims([pb.time], filter_size=[k], padding=padding, strides=s,
                                               dilation_rate=dl)[0]

    def seq_fn(wr, br):  # torch's own zero padding of each sequence alone
        return lambda seq: F.conv1d(F.pad(seq, (p, p)), wr, br, stride=s, dilation=dl)
    check_against_torch(lambda t, wt, bt: dt.conv(t, wt, in_spatial_dims=[pb.time], bias=bt, **kw)[0],
                        lambda r, wr, br: per_sequence(r, lengths, seq_fn(wr, br), expected, max(expected), 5),
                        [pb.x, w, bias], rtol=1e-5, atol=1e-5)
    check_padding_invariance(lambda t: dt.conv(t, dt.Tensor(w.raw, (out_dim, t.dims[2], kd)), in_dim=t.dims[2],
                                               out_dim=out_dim, in_spatial_dims=[t.dims[1]], filter_size=[kd],
                                               strides=s, dilation=dl, padding=padding)[0], feature=3)
    check_batch_independence_by_position(
        lambda t, m: dt.conv(t, w, in_spatial_dims=[m(pb.time)], bias=bias, **kw)[0], pb.x, pb.batch, pb.time,
        rtol=1e-5, atol=1e-5)


def test_conv2d_int_padding_per_dim_matches_torch():
    lengths = [7, 3, 5]
    pb = make_padded_batch(lengths, feature=6, extra_time=2, pad_value=PAD_NAN)
    cin, cout, kt, kf = dt.Dim(1, name="cin"), dt.Dim(2, name="cout"), dt.Dim(3, name="kt"), dt.Dim(2, name="kf")
    x = dt.Tensor(pb.x.raw[:, None], (pb.batch, cin, pb.time, pb.feature))
    w = make_filter(cout, cin, (kt, kf))
    kw = dict(in_dim=cin, out_dim=cout, filter_size=[kt, kf], strides=(2, 1), padding=(1, 2))
    y, (ot, of) = dt.conv(x, w, in_spatial_dims=[pb.time, pb.feature], **kw)
    assert of.size == 6 + 4 - 2 + 1 and ot.lengths.raw.tolist() == [(n + 2 - 3) // 2 + 1 for n in lengths]

    def oracle(r, wr):
        outs = [F.conv2d(r[b:b + 1, :, :n], wr, stride=(2, 1), padding=(1, 2))[0] for b, n in enumerate(lengths)]
        return torch.stack([F.pad(o, (0, 0, 0, ot.get_max_size() - o.shape[1])) for o in outs])
    check_against_torch(lambda t, wt: dt.conv(t, wt, in_spatial_dims=[pb.time, pb.feature], **kw)[0], oracle, [x, w],
                        out_dims=(pb.batch, cout, ot, of), rtol=1e-5, atol=1e-5)


def pool_oracle(raw, lengths, mode, k, s, p, n_out):
    """(batch, time, feat) -> (batch, feat, n_out): each sequence alone through torch's pooling with its
    own padding p (max: -inf, avg: not counted)."""
    outs = []
    for b, n in enumerate(lengths):
        seq = raw[b:b + 1, :n].transpose(1, 2)
        if mode == "max":
            o = F.max_pool1d(seq, k, s, p)[0]
        else:
            o = F.avg_pool1d(seq, k, s, p, count_include_pad=False)[0]
        outs.append(F.pad(o, (0, n_out - o.shape[1])))
    return torch.stack(outs)


@pytest.mark.parametrize("mode", ["max", "avg"])
@pytest.mark.parametrize("k,s,p", [(3, 1, 1), (4, 2, 2), (2, 2, 1), (5, 3, 2), (3, 2, (1,))])
def test_pool1d_int_padding(mode, k, s, p):
    lengths = [9, 6, 2, 1, 4]
    pb = make_padded_batch(lengths, feature=3, extra_time=1)
    pi = p if isinstance(p, int) else p[0]
    kw = dict(mode=mode, pool_size=k, strides=s, padding=p)
    y, (ot,) = dt.pool(pb.x, in_spatial_dims=[pb.time], **kw)
    expected = [conv_out_len(n, k, s, pi) for n in lengths]
    assert ot.lengths.raw.tolist() == expected and y.dims == (pb.batch, pb.feature, ot)
    assert ot is dt.make_conv_out_spatial_dims([pb.time], filter_size=[k], padding=p, strides=s)[0]
    check_against_torch(lambda t: dt.pool(t, in_spatial_dims=[pb.time], **kw)[0],
                        lambda r: pool_oracle(r, lengths, mode, k, s, pi, max(expected)), [pb.x])
    check_padding_invariance(lambda t: dt.pool(t, in_spatial_dims=[t.dims[1]], **kw)[0], lengths=(5, 3, 1, 2),
                             feature=3)
    check_batch_independence_by_position(lambda t, m: dt.pool(t, in_spatial_dims=[m(pb.time)], **kw)[0], pb.x,
                                         pb.batch, pb.time)


@pytest.mark.parametrize("mode", ["max", "avg"])
def test_pool_int_padding_beyond_torchs_limit(mode):
    """p > pool_size / 2 (torch refuses it): explicit padding; windows of padding only give -inf (max) or 0 (avg)."""
    t, f = dt.Dim(5, name="t"), dt.Dim(2, name="f")
    x = dt.Tensor(torch.randn(5, 2), (t, f))
    y, (ot,) = dt.pool(x, mode=mode, pool_size=2, strides=1, padding=2, in_spatial_dims=[t])
    assert ot.size == 8 and y.dims == (f, ot)
    padded = F.pad(x.raw.T[None], (2, 2), value=float("-inf") if mode == "max" else 0.0)[0]
    win = padded.unfold(1, 2, 1)  # (f, 8, 2)
    if mode == "max":
        want = win.amax(-1)
    else:
        count = F.pad(torch.ones(1, 5), (2, 2))[0].unfold(0, 2, 1).sum(-1)
        want = win.sum(-1) / count.clamp(min=0.5)
    torch.testing.assert_close(y.raw, want)
    assert (y.raw[:, 0] == (float("-inf") if mode == "max" else 0.0)).all()


def test_conv_out_spatial_dims_given():
    lengths = [7, 4, 2]
    pb = make_padded_batch(lengths, feature=3, extra_time=1)
    out_dim, kd = dt.Dim(4, name="out"), dt.Dim(3, name="k")
    w = make_filter(out_dim, pb.feature, (kd,))
    kw = dict(in_dim=pb.feature, out_dim=out_dim, filter_size=[kd], strides=2, padding=1)
    y0, (ot,) = dt.conv(pb.x, w, in_spatial_dims=[pb.time], **kw)
    mine = lengths_dim(pb.batch, ot.lengths.raw.tolist(), "mine")
    for _ in range(2):  # the second call takes the cached layout
        y, (got,) = dt.conv(pb.x, w, in_spatial_dims=[pb.time], out_spatial_dims=[mine], **kw)
        assert got is mine and y.dims == (pb.batch, out_dim, mine)
        torch.testing.assert_close(y.raw, y0.raw)
    assert dt.conv(pb.x, w, in_spatial_dims=[pb.time], out_spatial_dims=(ot,), **kw)[1] == (ot,)
    assert dt.conv(pb.x, w, in_spatial_dims=[pb.time], **kw)[1] == (ot,)  # and without: the computed dim again
    other = lengths_dim(pb.batch, [4, 2, 2], "other")
    with pytest.raises(ValueError, match=r"dimtorch\.conv\(\): out_spatial_dims\[0\] 'other'\[batch\] \(lengths "
                                         r"\[4, 2, 2\]\) does not match the output dim .* \(lengths \[4, 2, 1\]\)"):
        dt.conv(pb.x, w, in_spatial_dims=[pb.time], out_spatial_dims=[other], **kw)
    with pytest.raises(ValueError, match=r"dimtorch\.conv\(\): out_spatial_dims\[0\] 's'\(4\) \(size 4\) does not "
                                         r"match"):
        dt.conv(pb.x, w, in_spatial_dims=[pb.time], out_spatial_dims=[dt.Dim(4, name="s")], **kw)
    with pytest.raises(ValueError, match=r"dimtorch\.conv\(\): out_spatial_dims has 2 dims .* one per spatial dim"):
        dt.conv(pb.x, w, in_spatial_dims=[pb.time], out_spatial_dims=[mine, ot], **kw)
    with pytest.raises(ValueError, match=r"dimtorch\.conv\(\): out_spatial_dims \('batch'\(\?\)\) must be distinct "
                                         r"dims that are not among the output's other dims"):
        dt.conv(pb.x, w, in_spatial_dims=[pb.time], out_spatial_dims=[pb.batch], **kw)
    with pytest.raises(TypeError, match=r"dimtorch\.conv\(\): out_spatial_dims"):
        dt.conv(pb.x, w, in_spatial_dims=[pb.time], out_spatial_dims=[3], **kw)


def test_static_out_spatial_dims_given():
    t, f, cin, cout, k, k2 = (dt.Dim(n, name=s) for n, s in ((8, "t"), (5, "f"), (2, "cin"), (3, "cout"), (3, "k"),
                                                               (3, "k2")))
    x = dt.Tensor(torch.randn(t.size, f.size, cin.size), (t, f, cin))
    w = make_filter(cout, cin, (k, k2))
    o1, o2 = dt.Dim(8, name="o1"), dt.Dim(5, name="o2")
    y, dims = dt.conv(x, w, in_dim=cin, out_dim=cout, in_spatial_dims=[t, f], out_spatial_dims=[o1, o2],
                      filter_size=[k, k2], padding=(1, 1))
    assert dims == (o1, o2) and y.dims == (cout, o1, o2)
    torch.testing.assert_close(y.raw, F.conv2d(x.raw.permute(2, 0, 1)[None], w.raw, padding=1)[0])
    y, dims = dt.pool(x, mode="max", pool_size=(2, 1), in_spatial_dims=[t, f], out_spatial_dims=[dt.Dim(4), o2],
                      padding=(0, 0))
    assert dims[1] is o2 and dims[0].size == 4
    with pytest.raises(ValueError, match=r"dimtorch\.pool\(\): out_spatial_dims\[1\] 'o1'\(8\) \(size 8\) does not "
                                         r"match the output dim .*\(size 3\)"):
        dt.pool(x, mode="max", pool_size=(2, 2), in_spatial_dims=[t, f], out_spatial_dims=[dt.Dim(4), o1],
                padding=(0, 1))
    torch.testing.assert_close(y.raw, F.max_pool2d(x.raw.permute(2, 0, 1), (2, 1)))


def test_pool_out_spatial_dims_given_cached():
    lengths = [6, 3]
    pb = make_padded_batch(lengths, feature=2, extra_time=1)
    mine = lengths_dim(pb.batch, [3, 2], "mine")
    y0, (ot,) = dt.pool(pb.x, mode="avg", pool_size=2, padding="same", in_spatial_dims=[pb.time])
    for _ in range(2):
        y, (got,) = dt.pool(pb.x, mode="avg", pool_size=2, padding="same", in_spatial_dims=[pb.time],
                            out_spatial_dims=[mine])
        assert got is mine and y.dims == (pb.batch, pb.feature, mine)
        torch.testing.assert_close(y.raw, y0.raw)
    assert dt.pool(pb.x, mode="avg", pool_size=2, padding="same", in_spatial_dims=[pb.time])[1] == (ot,)
    with pytest.raises(ValueError, match=r"dimtorch\.pool\(\): out_spatial_dims\[0\] 'time'\[batch\] \(lengths "
                                         r"\[6, 3\]\) does not match the output dim"):
        dt.pool(pb.x, mode="avg", pool_size=2, padding="same", in_spatial_dims=[pb.time], out_spatial_dims=[pb.time])


def test_transposed_conv_out_spatial_dims_given():
    lengths = [4, 2]
    pb = make_padded_batch(lengths, feature=3)
    out_dim, kd = dt.Dim(2, name="out"), dt.Dim(3, name="k")
    w = dt.Tensor(torch.randn(3, 2, 3), (pb.feature, out_dim, kd))
    kw = dict(in_dim=pb.feature, out_dim=out_dim, filter_size=[kd], strides=2)
    y0, (ot,) = dt.transposed_conv(pb.x, w, in_spatial_dims=[pb.time], **kw)
    assert ot.lengths.raw.tolist() == [9, 5]
    mine = lengths_dim(pb.batch, [9, 5], "mine")
    y, (got,) = dt.transposed_conv(pb.x, w, in_spatial_dims=[pb.time], out_spatial_dims=[mine], **kw)
    assert got is mine and y.dims == (pb.batch, out_dim, mine)
    torch.testing.assert_close(y.raw, y0.raw)
    with pytest.raises(ValueError, match=r"dimtorch\.transposed_conv\(\): out_spatial_dims\[0\] 'time'\[batch\] "
                                         r"\(lengths \[4, 2\]\) does not match the output dim"):
        dt.transposed_conv(pb.x, w, in_spatial_dims=[pb.time], out_spatial_dims=[pb.time], **kw)


def test_layers_int_padding_and_out_spatial_dims():
    lengths = [7, 4]
    pb = make_padded_batch(lengths, feature=4, pad_value=PAD_LARGE, seed=1)
    out = dt.Dim(3, name="out")
    conv = dt.nn.Conv1d(pb.feature, out, 3, padding=2, strides=2)
    ref = torch.nn.Conv1d(4, 3, 3, padding=2, stride=2)
    with torch.no_grad():
        ref.weight.copy_(conv.weight.raw)
        ref.bias.copy_(conv.bias.raw)
    y, ot = conv(pb.x, in_spatial_dim=pb.time)
    assert ot.lengths.raw.tolist() == [5, 3]
    for b, n in enumerate(lengths):
        torch.testing.assert_close(y.raw[b, :, :ot.lengths.raw[b]], ref(pb.x.raw[b:b + 1, :n].transpose(1, 2))[0])
    mine = lengths_dim(pb.batch, [5, 3], "mine")
    assert conv(pb.x, in_spatial_dim=pb.time, out_spatial_dim=mine)[1] is mine
    up = dt.nn.TransposedConv1d(out, pb.feature, 2)
    assert up(y, in_spatial_dim=ot, out_spatial_dim=lengths_dim(pb.batch, [10, 6], "up"))[1].name == "up"
    c2 = dt.nn.Conv2d(pb.feature, out, (3, 1), padding=(1, 0))
    h = dt.Dim(2, name="h")
    x2 = dt.Tensor(pb.x.raw[:, :, None].expand(2, 7, 2, 4), (pb.batch, pb.time, h, pb.feature))
    y2, (t2, h2) = c2(x2, in_spatial_dims=(pb.time, h), out_spatial_dims=(pb.time, h))
    assert (t2, h2) == (pb.time, h) and y2.dims == (pb.batch, out, pb.time, h)
