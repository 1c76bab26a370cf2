"""dt.conv with 'same' padding over inputs shorter than the filter (only the taps that can meet a frame of x
run; a depthwise 1-D filter as windows times taps) and dt.pool's max with side-by-side windows along one
axis (a max over that axis split into windows), against each sequence alone through torch, forward and
backward, on batches padded with NaN or 1e30 (python/dimtorch/ops/conv.py _same_taps, src/ops/pool.cpp)."""
import pytest
import torch
import torch.nn.functional as F

import dimtorch as dt
from conv_oracles import make_filter, per_sequence
from helpers import PAD_LARGE, PAD_NAN, check_against_torch, make_padded_batch


def _same_conv1d(wr, br, k, groups):
    left = (k - 1) // 2
    return lambda seq: F.conv1d(F.pad(seq, (left, k - 1 - left)), wr, br, groups=groups)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("k", [32, 31, 4, 3])
@pytest.mark.parametrize("depthwise", [True, False])
@pytest.mark.parametrize("lengths", [[2, 1, 2], [1, 1], [5, 3, 0, 4]])
def test_same_conv1d_short_input_against_torch(pad, k, depthwise, lengths):
    channels = 6
    pb = make_padded_batch(lengths, feature=channels, extra_time=1, pad_value=pad)
    kd = dt.Dim(k, name="k")
    if depthwise:
        out_dim, groups = pb.feature, channels
        w = make_filter(out_dim, pb.feature // channels, (kd,))
    else:
        out_dim, groups = dt.Dim(5, name="out"), 1
        w = make_filter(out_dim, pb.feature, (kd,))
    bias = dt.Tensor(torch.randn(out_dim.size), (out_dim,))
    kw = dict(in_dim=pb.feature, out_dim=out_dim, filter_size=[kd], padding="same", groups=groups)
    y, (ot,) = dt.conv(pb.x, w, in_spatial_dims=[pb.time], bias=bias, **kw)
    assert ot.lengths.raw.tolist() == lengths and y.dims == (pb.batch, out_dim, ot)
    check_against_torch(
        lambda t, wt, bt: dt.conv(t, wt, in_spatial_dims=[pb.time], bias=bt, **kw)[0],
        lambda r, wr, br: per_sequence(r, lengths, _same_conv1d(wr, br, k, groups), lengths, max(lengths),
                                       out_dim.size),
        [pb.x, w, bias], rtol=1e-5, atol=1e-5)


def test_same_conv1d_short_then_long_input():
    """The layout (and its taps) follows the input: a long batch after a short one gets every tap."""
    channels, k = 4, 8
    kd = dt.Dim(k, name="k")
    w = make_filter(dt.Dim(channels, name="c_out"), dt.Dim(1, name="filter_in"), (kd,))
    for lengths in ([2, 1], [12, 9], [1, 2]):
        pb = make_padded_batch(lengths, feature=channels, pad_value=PAD_NAN)
        wt = dt.Tensor(w.raw, (pb.feature, pb.feature // channels, kd))
        kw = dict(in_dim=pb.feature, out_dim=pb.feature, filter_size=[kd], padding="same", groups=channels)
        y, (ot,) = dt.conv(pb.x, wt, in_spatial_dims=[pb.time], **kw)
        want = per_sequence(pb.x.raw, lengths, _same_conv1d(w.raw, None, k, channels), lengths, max(lengths), channels)
        valid = (torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None])[:, None, :]
        got = y.raw_aligned((pb.batch, pb.feature, ot))
        torch.testing.assert_close(torch.where(valid, got, 0.0), torch.where(valid, want, 0.0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("channels", [2, 64])
def test_max_pool2d_side_by_side_windows_against_torch(pad, channels):
    """(batch, channel, time, feature) pooled over (time, feature) by (1, 2), then a conv over the result:
    2 channels by torch's pool, 64 (17,280 elements, above src/ops/pool.cpp's kSplitMaxMin) as a max over
    the feature axis split into windows."""
    lengths = [7, 3, 5]
    pb = make_padded_batch(lengths, feature=10, extra_time=2, pad_value=pad)
    c = dt.Dim(channels, name="c")
    g = torch.Generator().manual_seed(3)
    x = dt.Tensor(pb.x.raw[:, None] * torch.randn(1, channels, 1, 1, generator=g), (pb.batch, c, pb.time, pb.feature))
    kw = dict(mode="max", pool_size=(1, 2), in_spatial_dims=[pb.time, pb.feature])
    y, (ot, of) = dt.pool(x, **kw)
    assert y.dims == (pb.batch, c, ot, of) and of.size == 5 and ot.lengths.raw.tolist() == lengths

    def oracle(r):
        outs = []
        for b, n in enumerate(lengths):
            o = F.max_pool2d(r[b:b + 1, :, :n], (1, 2))
            outs.append(F.pad(o, (0, 0, 0, max(lengths) - n)))
        return torch.cat(outs)
    check_against_torch(lambda t: dt.pool(t, **kw)[0], oracle, [x])
    # a conv after the pool
    out, kt, kf = dt.Dim(3, name="out"), dt.Dim(3, name="kt"), dt.Dim(3, name="kf")
    w = make_filter(out, c, (kt, kf))
    ckw = dict(in_dim=c, out_dim=out, filter_size=[kt, kf], padding="same", in_spatial_dims=[ot, of])
    check_against_torch(
        lambda t, wt: dt.conv(dt.pool(t, **kw)[0], wt, **ckw)[0],
        lambda r, wr: torch.cat([F.pad(F.conv2d(F.max_pool2d(r[b:b + 1, :, :n], (1, 2)), wr, padding=1),
                                       (0, 0, 0, max(lengths) - n)) for b, n in enumerate(lengths)]),
        [x, w], rtol=1e-5, atol=1e-5)


def test_max_pool_side_by_side_ties_and_nan_like_torch():
    """Ties give the gradient to the first maximum and NaN wins, as torch's max pool does."""
    # (2 x 64 x 64 x 6 elements: above src/ops/pool.cpp's kSplitMaxMin, so the split-axis max runs)
    b, c, t, f = dt.Dim(2, name="b"), dt.Dim(64, name="c"), dt.Dim(64, name="t"), dt.Dim(6, name="f")
    raw = torch.tensor([1.0, 1.0, 2.0, 2.0, float("nan"), 3.0]).repeat(2, 64, 64, 1)
    x = dt.Tensor(raw.clone().requires_grad_(), (b, c, t, f))
    y, _ = dt.pool(x, mode="max", pool_size=(1, 2), padding="valid", in_spatial_dims=[t, f])
    y.raw.sum().backward()
    want_in = raw.clone().requires_grad_()
    want = F.max_pool2d(want_in, (1, 2))
    want.sum().backward()
    torch.testing.assert_close(y.raw, want, equal_nan=True)
    torch.testing.assert_close(x.raw.grad, want_in.grad)


@pytest.mark.parametrize("grad", [False, True])
def test_max_pool_pairs_give_convs_their_channels_last_layout(grad):
    """A 2-D max pool of pairs over (batch, channels, t, f) in float32 on the CPU comes out channels-last, the
    layout the convs there run in (ops/pool_pairs.py _maximum: a conv after it does not reorder), with
    torch's values and gradient; without a batch (3-D raw) it stays contiguous."""
    b, c, t, f = dt.Dim(4, name="b"), dt.Dim(32, name="c"), dt.Dim(8, name="t"), dt.Dim(80, name="f")
    raw = torch.randn(4, 32, 8, 80)
    x = dt.Tensor(raw.clone().requires_grad_(grad), (b, c, t, f))
    kw = dict(mode="max", pool_size=(1, 2), padding="valid", in_spatial_dims=[t, f])
    y, _ = dt.pool(x, **kw)
    assert y.raw.is_contiguous(memory_format=torch.channels_last)
    want_in = raw.clone().requires_grad_(grad)
    want = F.max_pool2d(want_in, (1, 2))
    torch.testing.assert_close(y.raw, want, rtol=0, atol=0)
    if grad:
        g = torch.randn(want.shape)
        (y.raw * g).sum().backward()
        (want * g).sum().backward()
        torch.testing.assert_close(x.raw.grad, want_in.grad, rtol=0, atol=0)
    alone = dt.pool(dt.Tensor(raw[0], (c, t, f)), **kw)[0].raw
    assert alone.is_contiguous()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_max_pool_pairs_every_order_of_values_like_torch(dtype):
    """Pairs along the last axis (ops/pool_pairs.py): every ordering of a pair, ties, signed zeros, infinities
    and NaN in either or both places give torch's max pool's values and gradient (also from a non-contiguous
    incoming gradient); without grad the same values; a second derivative through it equals torch's."""
    nan, inf = float("nan"), float("inf")
    pairs = [(1.0, 2.0), (2.0, 1.0), (3.0, 3.0), (-1.0, -1.0), (0.0, -0.0), (-0.0, 0.0), (nan, 1.0), (1.0, nan),
             (nan, nan), (-inf, -inf), (-inf, 5.0), (inf, inf), (7.0, -inf)]
    flat = torch.tensor([v for p in pairs for v in p], dtype=dtype)
    c, t = dt.Dim(64, name="c"), dt.Dim(64, name="t")  # 64 x 64 x 26 elements: the split runs
    f = dt.Dim(flat.numel(), name="f")
    raw = flat.repeat(64, 64, 1)
    g = torch.randn(64, 64, len(pairs), generator=torch.Generator().manual_seed(0)).to(dtype)
    x = dt.Tensor(raw.clone().requires_grad_(), (c, t, f))
    kw = dict(mode="max", pool_size=(1, 2), padding="valid", in_spatial_dims=[t, f])
    y, _ = dt.pool(x, **kw)
    (y.raw * g).sum().backward()
    want_in = raw.clone().requires_grad_()
    want = F.max_pool2d(want_in[None], (1, 2))[0]
    (want * g).sum().backward()
    torch.testing.assert_close(y.raw, want, equal_nan=True)
    torch.testing.assert_close(x.raw.grad, want_in.grad)
    # the gradient arriving non-contiguous (as channels-last from a following conv; here transposed): the same
    x2 = dt.Tensor(raw.clone().requires_grad_(), (c, t, f))
    (dt.pool(x2, **kw)[0].raw.transpose(0, 1) * g.transpose(0, 1).contiguous()).sum().backward()
    torch.testing.assert_close(x2.raw.grad, want_in.grad)
    with torch.no_grad():
        torch.testing.assert_close(dt.pool(dt.Tensor(raw, (c, t, f)), **kw)[0].raw, want.detach(), equal_nan=True)
    # a second derivative (the gradient's own graph): d/dx of sum(grad_x * x)
    if dtype is torch.float64:
        finite = torch.tensor([v for p in pairs[:6] for v in p], dtype=dtype).repeat(64, 64, 1)
        ours_in = finite.clone().requires_grad_()
        theirs_in = finite.clone().requires_grad_()
        fx = dt.Dim(finite.shape[-1], name="fx")
        ours_y = dt.pool(dt.Tensor(ours_in, (c, t, fx)), mode="max", pool_size=(1, 2), padding="valid",
                         in_spatial_dims=[t, fx])[0].raw
        theirs_y = F.max_pool2d(theirs_in[None], (1, 2))[0]
        (og,) = torch.autograd.grad((ours_y ** 2).sum(), ours_in, create_graph=True)
        (tg,) = torch.autograd.grad((theirs_y ** 2).sum(), theirs_in, create_graph=True)
        torch.testing.assert_close(og, tg)
        torch.testing.assert_close(torch.autograd.grad(og.sum(), ours_in)[0], torch.autograd.grad(tg.sum(), theirs_in)[0])
