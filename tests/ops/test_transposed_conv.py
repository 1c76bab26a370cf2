"""Tests of dimtorch.transposed_conv (1-D, 2-D): each sequence alone through F.conv_transpose1d/2d is the oracle."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import dimtorch as dt
from helpers import check_against_torch, check_padding_invariance, make_padded_batch
from conv_oracles import check_lone_sequences

TORCH_FNS = {1: F.conv_transpose1d, 2: F.conv_transpose2d}


def out_len(n, k, s, dl=1, padding="valid", op=None, r=0):
    """RETURNN's transposed conv output length, by hand."""
    k_eff = dl * (k - 1) + 1
    if op is None:
        n_out = n * s + (max(k_eff - s, 0) if padding == "valid" else 0)
    else:
        n_out = (n - 1) * s + k_eff + op - (2 * (k_eff // 2) if padding == "same" else 0)
    return max(n_out - 2 * r, 0)


def lone_oracle(seq, w, b, ks, s, dl, padding, op, r, groups):
    """One sequence (1, C, *S) through torch, its crops given as torch's own padding/output_padding
    where torch has them, sliced by hand where it has not (output_padding=None with 'same')."""
    sizes = seq.shape[2:]
    n_out = [out_len(n, k, si, d, padding, o, ri) for n, k, si, d, o, ri in zip(sizes, ks, s, dl, op, r)]
    if min(n_out) == 0 or min(sizes) == 0:  # no input frame, or cropped away: the bias
        shape = (1, w.shape[1] * groups, *n_out)
        return b.view(1, -1, *[1] * len(ks)).expand(shape) if b is not None else seq.new_zeros(shape)
    k_eff = [d * (k - 1) + 1 for k, d in zip(ks, dl)]
    if all(o is not None for o in op):
        pads = [ri + (ke // 2 if padding == "same" else 0) for ri, ke in zip(r, k_eff)]
        return TORCH_FNS[len(ks)](seq, w, b, stride=s, padding=pads, output_padding=op, groups=groups, dilation=dl)
    assert all(o is None for o in op)
    if padding == "valid":
        return TORCH_FNS[len(ks)](seq, w, b, stride=s, padding=r, groups=groups, dilation=dl,
                                  output_padding=[max(si - ke, 0) for si, ke in zip(s, k_eff)])
    out = TORCH_FNS[len(ks)](seq, w, b, stride=s, groups=groups, dilation=dl,
                             output_padding=[max(si - ke, 0) for si, ke in zip(s, k_eff)])
    for a, (ke, si, ri, m) in enumerate(zip(k_eff, s, r, n_out)):
        out = out.narrow(2 + a, max(ke - si, 0) // 2 + ri, m)
    return out


def per_sequence(raw, lengths, fn, time_axis, n_out):
    """fn over each sequence of raw (batch first, time at `time_axis`), zero padded along time
    (axis 2 of fn's result) to n_out and stacked."""
    outs = []
    for b, n in enumerate(lengths):
        o = fn(raw[b:b + 1].narrow(time_axis, 0, n))[0]
        pad = [0, 0] * (o.dim() - 2) + [0, n_out - o.shape[1]]
        outs.append(F.pad(o, pad))
    return torch.stack(outs)


CASES_1D = [  # k, s, dl, padding, output_padding, remove_padding, groups
    (3, 1, 1, "valid", None, 0, 1),
    (3, 2, 1, "same", None, 0, 1),
    (1, 2, 1, "valid", None, 0, 1),
    (4, 3, 1, "valid", None, 0, 1),
    (4, 3, 1, "same", None, 0, 1),
    (3, 2, 2, "valid", None, 1, 2),
    (4, 2, 1, "same", 1, 0, 1),
    (3, 3, 1, "valid", 2, 1, 2),
    (2, 1, 3, "valid", 2, 0, 1),  # output_padding < dilation (stride 1): torch allows it
    (5, 2, 1, "same", 0, 2, 1),
]


@pytest.mark.parametrize("k,s,dl,padding,op,r,groups", CASES_1D)
def test_transposed_conv1d(k, s, dl, padding, op, r, groups):
    lengths = [5, 2, 0, 1]
    pb = make_padded_batch(lengths, feature=4, extra_time=1)
    out_dim, kd = dt.Dim(6, name="out"), dt.Dim(k, name="k")
    g = torch.Generator().manual_seed(3)
    filter_out = out_dim // groups if groups > 1 else out_dim
    w = dt.Tensor(torch.randn(4, 6 // groups, k, generator=g), (pb.feature, filter_out, kd))
    bias = dt.Tensor(torch.randn(6, generator=g), (out_dim,))
    expected = [out_len(n, k, s, dl, padding, op, r) for n in lengths]

    def call(t, wt, bt, time=pb.time):
        return dt.transposed_conv(t, wt, in_dim=pb.feature, out_dim=out_dim, in_spatial_dims=[time], filter_size=[kd],
                                  strides=s, dilation=dl, padding=padding, output_padding=op, remove_padding=r,
                                  groups=groups, bias=bt)

    y, (ot,) = call(pb.x, w, bias)
    assert ot.lengths.raw.tolist() == expected and y.dims == (pb.batch, out_dim, ot)
    assert y.raw.shape[2] == max(expected)
    check_against_torch(
        lambda t, wt, bt: call(t, wt, bt)[0],
        lambda r_, wr, br: per_sequence(r_, lengths, lambda seq: lone_oracle(
            seq.transpose(1, 2), wr, br, [k], [s], [dl], padding, [op], [r], groups), 1, max(expected)),
        [pb.x, w, bias], rtol=1e-5, atol=1e-5)
    check_lone_sequences(lambda x, b_, t: (lambda res: (res[0], res[1][0]))(call(x, w, bias, time=t)),
                         pb.x, pb.batch, pb.time, lengths)
    # NaN/1e30 padding changes no valid value or gradient, and no gradient gets NaN.
    check_padding_invariance(lambda t: dt.transposed_conv(
        t, dt.Tensor(w.raw, (t.dims[2],) + w.dims[1:]), in_dim=t.dims[2], out_dim=out_dim, in_spatial_dims=[t.dims[1]],
        filter_size=[kd], strides=s, dilation=dl, padding=padding, output_padding=op, remove_padding=r,
        groups=groups, bias=bias)[0], feature=4)


def test_transposed_conv1d_filter_gradient_ignores_padding():
    pb = make_padded_batch([4, 1], feature=2, extra_time=2, pad_value=float("nan"))
    out_dim, kd = dt.Dim(3, name="out"), dt.Dim(3, name="k")
    leaf = torch.randn(2, 3, 3, requires_grad=True)
    y, (ot,) = dt.transposed_conv(pb.x, dt.Tensor(leaf, (pb.feature, out_dim, kd)), in_dim=pb.feature,
                                  out_dim=out_dim, in_spatial_dims=[pb.time], filter_size=[kd], strides=2)
    valid = torch.arange(y.raw.shape[2]) < ot.lengths.raw[:, None]
    torch.where(valid[:, None, :], y.raw, 0).sum().backward()
    assert torch.isfinite(leaf.grad).all()


def test_transposed_conv1d_strides_default_to_filter_size():
    pb = make_padded_batch([3, 1], feature=2)
    out_dim, kd = dt.Dim(2, name="out"), dt.Dim(2, name="k")
    w = dt.Tensor(torch.randn(2, 2, 2), (pb.feature, out_dim, kd))
    y, (ot,) = dt.transposed_conv(pb.x, w, in_dim=pb.feature, out_dim=out_dim, in_spatial_dims=[pb.time],
                                  filter_size=[kd])
    assert ot is pb.time * 2 and ot.lengths.raw.tolist() == [6, 2]
    torch.testing.assert_close(y.raw[:1], F.conv_transpose1d(pb.x.raw[:1].transpose(1, 2), w.raw, stride=2))


@pytest.mark.parametrize("padding,op", [("valid", None), ("same", None), ("same", (1, 0))])
def test_transposed_conv2d_dynamic_time_static_freq(padding, op):
    lengths = [4, 2, 1]
    batch, freq, ch = dt.Dim(None, name="batch"), dt.Dim(5, name="freq"), dt.Dim(4, name="ch")
    time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
    raw = torch.randn(3, 5, 5, 4)  # (batch, freq, time, ch), time padded beyond the longest
    for b, n in enumerate(lengths):
        raw[b, :, n:] = float("nan")
    x = dt.Tensor(raw, (batch, freq, time, ch))
    out_dim, kt, kf = dt.Dim(6, name="out"), dt.Dim(3, name="kt"), dt.Dim(2, name="kf")
    g = torch.Generator().manual_seed(5)
    w = dt.Tensor(torch.randn(3, 2, 4, 3, generator=g), (out_dim // 2, kf, ch, kt))  # any dims order
    bias = dt.Tensor(torch.randn(6, generator=g), (out_dim,))
    s, dl, r = (2, 2), (1, 2), (0, 1)
    ops = op if op is not None else (None, None)

    def call(t, wt, bt):
        return dt.transposed_conv(t, wt, in_dim=ch, out_dim=out_dim, in_spatial_dims=[time, freq],
                                  filter_size=[kt, kf], strides=s, dilation=dl, padding=padding, output_padding=op,
                                  remove_padding=r, groups=2, bias=bt)

    y, (ot, of) = call(x, w, bias)
    expected = [out_len(n, 3, 2, 1, padding, ops[0], 0) for n in lengths]
    assert ot.lengths.raw.tolist() == expected and of.size == out_len(5, 2, 2, 2, padding, ops[1], 1)
    assert y.dims == (batch, out_dim, ot, of)

    def oracle(r_, wr, br):
        wr = wr.permute(2, 0, 3, 1)  # torch's (in, out // groups, kt, kf)
        return per_sequence(r_, lengths, lambda seq: lone_oracle(
            seq.permute(0, 3, 2, 1), wr, br, [3, 2], list(s), list(dl), padding, list(ops), list(r), 2),
            2, max(expected))

    check_against_torch(lambda t, wt, bt: call(t, wt, bt)[0], oracle, [x, w, bias], rtol=1e-5, atol=1e-5)


def test_transposed_conv1d_several_batch_dims_static_dilation():
    batch, beam, t, c, out_dim, kd = (dt.Dim(2, name="batch"), dt.Dim(3, name="beam"), dt.Dim(5, name="t"),
                                      dt.Dim(3, name="c"), dt.Dim(4, name="out"), dt.Dim(3, name="k"))
    x = dt.Tensor(torch.randn(3, 2, 5, 3), (c, batch, t, beam))
    w = dt.Tensor(torch.randn(4, 3, 3), (out_dim, c, kd))  # any dims order
    y, (ot,) = dt.transposed_conv(x, w, in_dim=c, out_dim=out_dim, in_spatial_dims=[t], filter_size=[kd], strides=2,
                                  dilation=2)
    assert ot.size == 5 * 2 + (2 * 2 + 1 - 2) and y.dims == (batch, beam, out_dim, ot)
    check_against_torch(
        lambda a, wt: dt.transposed_conv(a, wt, in_dim=c, out_dim=out_dim, in_spatial_dims=[t], filter_size=[kd],
                                         strides=2, dilation=2)[0],
        lambda r, wr: F.conv_transpose1d(r.permute(1, 3, 0, 2).reshape(6, 3, 5), wr.transpose(0, 1), stride=2,
                                         dilation=2).reshape(2, 3, 4, 13), [x, w])


def test_transposed_conv1d_all_sequences_empty_give_the_bias():
    pb = make_padded_batch([0, 0], feature=2)
    out_dim, kd = dt.Dim(2, name="out"), dt.Dim(5, name="k")
    bias = dt.Tensor(torch.tensor([1.0, -2.0]), (out_dim,))
    y, (ot,) = dt.transposed_conv(pb.x, dt.Tensor(torch.randn(2, 2, 5), (pb.feature, out_dim, kd)), in_dim=pb.feature,
                                  out_dim=out_dim, in_spatial_dims=[pb.time], filter_size=[kd], strides=2, bias=bias)
    assert ot.lengths.raw.tolist() == [3, 3]
    torch.testing.assert_close(y.raw, bias.raw.view(1, 2, 1).expand(2, 2, 3))


@settings(max_examples=25)
@given(lengths=st.lists(st.integers(0, 7), min_size=1, max_size=4), k=st.integers(1, 4), s=st.integers(1, 3),
       dl=st.integers(1, 2), padding=st.sampled_from(["valid", "same"]), op=st.sampled_from([None, 0, 1]),
       r=st.integers(0, 2))
def test_transposed_conv1d_lengths_and_batch_independence_fuzzed(lengths, k, s, dl, padding, op, r):
    if op is not None and op >= max(s, dl):
        op = None
    pb = make_padded_batch(lengths, feature=2, extra_time=1)
    out_dim, kd = dt.Dim(2, name="out"), dt.Dim(k, name="k")
    w = dt.Tensor(torch.randn(2, 2, k), (pb.feature, out_dim, kd))

    def call(x, b, t):
        y, (ot,) = dt.transposed_conv(x, w, in_dim=pb.feature, out_dim=out_dim, in_spatial_dims=[t], filter_size=[kd],
                                      strides=s, dilation=dl, padding=padding, output_padding=op, remove_padding=r)
        return y, ot

    y, ot = call(pb.x, pb.batch, pb.time)
    expected = [out_len(n, k, s, dl, padding, op, r) for n in lengths]
    assert ot.lengths.raw.tolist() == expected and y.raw.shape[2] == max(expected)
    check_lone_sequences(call, pb.x, pb.batch, pb.time, lengths)


def test_transposed_conv_errors():
    pb = make_padded_batch([3, 2], feature=4)
    out_dim, kd, other = dt.Dim(6, name="out"), dt.Dim(2, name="k"), dt.Dim(80, name="feature")
    w = dt.Tensor(torch.randn(4, 6, 2), (pb.feature, out_dim, kd))
    kw = dict(out_dim=out_dim, in_spatial_dims=[pb.time], filter_size=[kd])
    name = r"dimtorch\.transposed_conv\(\): "
    with pytest.raises(ValueError, match=name + r"in_dim 'feature'\(80\) is not a dim of x \(dims: 'batch'\(\?\), "
                                               r"'time'\[batch\], 'feature'\(4\)\)"):
        dt.transposed_conv(pb.x, w, in_dim=other, **kw)
    with pytest.raises(ValueError, match=name + r"filter must have dims \('feature'\(4\), 'out'\(6\), 'k'\(2\)\), "
                                               r"has \('out'\(6\), 'feature'\(4\), 'k2'\(2\)\)"):
        dt.transposed_conv(pb.x, dt.Tensor(torch.randn(6, 4, 2), (out_dim, pb.feature, dt.Dim(2, name="k2"))),
                           in_dim=pb.feature, **kw)
    with pytest.raises(ValueError, match=name + r"filter must have dims \('feature'\(4\), 'out//2'\(3\), 'k'\(2\)\)"):
        dt.transposed_conv(pb.x, w, in_dim=pb.feature, groups=2, **kw)
    with pytest.raises(ValueError, match=name + r"groups=4 does not divide in_dim 'feature'\(4\) and out_dim "
                                               r"'out'\(6\)"):
        dt.transposed_conv(pb.x, w, in_dim=pb.feature, groups=4, **kw)
    with pytest.raises(ValueError, match=name + r"output_padding must be smaller than the stride or the dilation, "
                                               r"got output_padding=2, stride=2, dilation=1"):
        dt.transposed_conv(pb.x, w, in_dim=pb.feature, output_padding=2, **kw)
    with pytest.raises(ValueError, match=name + r"remove_padding must be >= 0, got -1"):
        dt.transposed_conv(pb.x, w, in_dim=pb.feature, remove_padding=-1, **kw)
    with pytest.raises(ValueError, match=name + r"filter_size must be 2 static Dims \(one per spatial dim "
                                               r"'time'\[batch\], 'batch'\(\?\)\)"):
        dt.transposed_conv(pb.x, w, in_dim=pb.feature, out_dim=out_dim, in_spatial_dims=[pb.time, pb.batch],
                           filter_size=[kd])
    with pytest.raises(ValueError, match=name + r"in_dim 'feature'\(4\) is also in in_spatial_dims"):
        dt.transposed_conv(pb.x, w, in_dim=pb.feature, out_dim=out_dim, in_spatial_dims=[pb.feature],
                           filter_size=[kd])
    with pytest.raises(ValueError, match=name + r"bias must have dims \('out'\(6\)\), has \('feature'\(4\)\)"):
        dt.transposed_conv(pb.x, w, in_dim=pb.feature, bias=dt.Tensor(torch.zeros(4), (pb.feature,)), **kw)
    free = dt.Dim(None, name="free")
    with pytest.raises(ValueError, match=name + r"spatial dim 'free'\(\?\) takes its size from data"):
        dt.transposed_conv(dt.Tensor(torch.randn(3, 4), (free, pb.feature)), w, in_dim=pb.feature, out_dim=out_dim,
                           in_spatial_dims=[free], filter_size=[kd])
    with pytest.raises(TypeError, match=r"dimtorch\.transposed_conv\(\): x must be a dimtorch\.Tensor, got Tensor"):
        dt.transposed_conv(pb.x.raw, w, in_dim=pb.feature, **kw)
