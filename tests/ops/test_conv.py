"""Tests of python/dimtorch/ops/conv.py: conv (1-D, 2-D) and pool, against per-sequence torch (transposed: own file)."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
import torch.nn.functional as F

import dimtorch as dt
from conv_oracles import ceildiv, check_lone_sequences, lone_sequence, make_filter, per_sequence  # noqa: F401
from helpers import check_against_torch, check_padding_invariance, make_padded_batch, valid_mask


def seq_conv1d(w, b, k_eff, s, dl, padding):
    def fn(seq):
        if padding == "same":
            total = k_eff - 1
            seq = F.pad(seq, (total // 2, total - total // 2))
        return F.conv1d(seq, w, b, stride=s, dilation=dl)
    return fn


def out_len(n, k_eff, s, padding):
    return ceildiv(n, s) if padding == "same" else max(0, (n - k_eff) // s + 1)


@pytest.mark.parametrize("padding", ["valid", "same"])
@pytest.mark.parametrize("k,s,dl", [(4, 2, 1), (3, 3, 2), (5, 1, 2)])
def test_conv1d_dynamic_time(padding, k, s, dl):
    lengths = [9, 6, 1, 0, 4]
    pb = make_padded_batch(lengths, feature=3, extra_time=1)
    out_dim, kd = dt.Dim(5, name="out"), dt.Dim(k, name="k")
    w = make_filter(out_dim, pb.feature, (kd,))
    bias = dt.Tensor(torch.randn(5), (out_dim,))
    k_eff = dl * (k - 1) + 1
    y, (ot,) = dt.conv(pb.x, w, in_dim=pb.feature, out_dim=out_dim, in_spatial_dims=[pb.time], filter_size=[kd],
                       strides=s, dilation=dl, padding=padding, bias=bias)
    expected = [out_len(n, k_eff, s, padding) for n in lengths]
    assert ot.lengths.raw.tolist() == expected
    assert y.dims == (pb.batch, out_dim, ot) and y.raw.shape[2] == max(expected)
    assert ot is (dt.ceildiv(pb.time, s) if padding == "same" else dt.ceildiv(pb.time - (k_eff - 1), s))
    check_against_torch(
        lambda t, wt, bt: dt.conv(t, wt, in_dim=pb.feature, out_dim=out_dim, in_spatial_dims=[pb.time],
                                  filter_size=[kd], strides=s, dilation=dl, padding=padding, bias=bt)[0],
        lambda r, wr, br: per_sequence(r, lengths, seq_conv1d(wr, br, k_eff, s, dl, padding), expected,
                                       max(expected), 5),
        [pb.x, w, bias], rtol=1e-5, atol=1e-5)
    # NaN/1e30 padding changes nothing valid, and no gradient (of x or of the filter) gets NaN.
    check_padding_invariance(lambda t: dt.conv(t, dt.Tensor(w.raw, (out_dim, t.dims[2], kd)), in_dim=t.dims[2],
                                               out_dim=out_dim, in_spatial_dims=[t.dims[1]], filter_size=[kd],
                                               strides=s, dilation=dl, padding=padding)[0], feature=3)
    leaf = w.raw.clone().requires_grad_(True)
    y = dt.conv(pb.x, dt.Tensor(leaf, w.dims), in_dim=pb.feature, out_dim=out_dim, in_spatial_dims=[pb.time],
                filter_size=[kd], strides=s, dilation=dl, padding=padding)[0]
    torch.where(valid_mask(y.dims, y.raw.shape), y.raw, 0).sum().backward()
    assert torch.isfinite(leaf.grad).all()


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
def test_conv1d_same_stride_1_matches_torch_same():
    pb = make_padded_batch([6, 6], feature=2)
    out_dim, kd = dt.Dim(3, name="out"), dt.Dim(4, name="k")
    w = make_filter(out_dim, pb.feature, (kd,))
    y, (ot,) = dt.conv(pb.x, w, in_dim=pb.feature, out_dim=out_dim, in_spatial_dims=[pb.time], filter_size=[kd],
                       padding="same")
    assert ot is pb.time
    torch.testing.assert_close(y.raw, F.conv1d(pb.x.raw.transpose(1, 2), w.raw, padding="same"))


@pytest.mark.parametrize("padding", ["valid", "same"])
def test_conv1d_batch_independence(padding):
    lengths = [10, 7, 3, 1]
    pb = make_padded_batch(lengths, feature=3, extra_time=2)
    out_dim, kd = dt.Dim(4, name="out"), dt.Dim(4, name="k")
    w = make_filter(out_dim, pb.feature, (kd,))
    for s in (1, 2, 3):
        check_lone_sequences(lambda x, b, t: (lambda r: (r[0], r[1][0]))(dt.conv(
            x, w, in_dim=pb.feature, out_dim=out_dim, in_spatial_dims=[t], filter_size=[kd], strides=s,
            padding=padding)), pb.x, pb.batch, pb.time, lengths)


@pytest.mark.parametrize("padding", ["valid", "same"])
def test_conv2d_dynamic_time_static_freq(padding):
    lengths = [7, 4, 2]
    batch, freq, ch = dt.Dim(None, name="batch"), dt.Dim(6, name="freq"), dt.Dim(2, name="ch")
    time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
    raw = torch.randn(3, 6, 7, 2)  # (batch, freq, time, ch): a layout unlike torch's
    for b, n in enumerate(lengths):
        raw[b, :, n:] = float("nan")
    x = dt.Tensor(raw, (batch, freq, time, ch))
    out_dim, kt, kf = dt.Dim(3, name="out"), dt.Dim(3, name="kt"), dt.Dim(2, name="kf")
    w = make_filter(out_dim, ch, (kt, kf))
    s = (2, 2)
    y, (ot, of) = dt.conv(x, w, in_dim=ch, out_dim=out_dim, in_spatial_dims=[time, freq], filter_size=[kt, kf],
                          strides=s, padding=padding)
    exp_t = [out_len(n, 3, 2, padding) for n in lengths]
    assert ot.lengths.raw.tolist() == exp_t and of.size == out_len(6, 2, 2, padding)
    assert y.dims == (batch, out_dim, ot, of)

    def oracle(r, wr):
        outs = []
        for b, (n, m) in enumerate(zip(lengths, exp_t)):
            if m == 0:
                outs.append(r.new_zeros((3, max(exp_t), of.size)))
                continue
            seq = r[b:b + 1, :, :n].permute(0, 3, 2, 1)  # (1, ch, time, freq)
            if padding == "same":
                seq = F.pad(seq, (0, 1, 1, 1))  # freq k=2: (0, 1); time k=3: (1, 1)
            o = F.conv2d(seq, wr, stride=s)[0, :, :m]
            outs.append(F.pad(o, (0, 0, 0, max(exp_t) - m)))
        return torch.stack(outs)

    check_against_torch(
        lambda t, wt: dt.conv(t, wt, in_dim=ch, out_dim=out_dim, in_spatial_dims=[time, freq], filter_size=[kt, kf],
                              strides=s, padding=padding)[0],
        oracle, [x, w], rtol=1e-5, atol=1e-5)


def test_conv1d_groups_and_several_batch_dims_static():
    batch, beam, t, c = dt.Dim(2, name="batch"), dt.Dim(3, name="beam"), dt.Dim(8, name="t"), dt.Dim(4, name="c")
    x = dt.Tensor(torch.randn(4, 2, 8, 3), (c, batch, t, beam))
    out_dim, kd = dt.Dim(6, name="out"), dt.Dim(3, name="k")
    w = make_filter(out_dim, c // 2, (kd,))
    y, (ot,) = dt.conv(x, w, in_dim=c, out_dim=out_dim, in_spatial_dims=[t], filter_size=[kd], groups=2, strides=2)
    assert ot.size == 3 and ot is dt.ceildiv(t - 2, 2) and y.dims == (batch, beam, out_dim, ot)
    assert y.feature_dim is out_dim
    check_against_torch(
        lambda a, wt: dt.conv(a, wt, in_dim=c, out_dim=out_dim, in_spatial_dims=[t], filter_size=[kd], groups=2,
                              strides=2)[0],
        lambda r, wr: F.conv1d(r.permute(1, 3, 0, 2).reshape(6, 4, 8), wr, stride=2, groups=2).reshape(2, 3, 6, 3),
        [x, w])


def test_conv1d_all_sequences_shorter_than_the_window():
    pb = make_padded_batch([2, 1], feature=2)
    out_dim, kd = dt.Dim(3, name="out"), dt.Dim(4, name="k")
    w = make_filter(out_dim, pb.feature, (kd,))
    y, (ot,) = dt.conv(pb.x, w, in_dim=pb.feature, out_dim=out_dim, in_spatial_dims=[pb.time], filter_size=[kd])
    assert ot.lengths.raw.tolist() == [0, 0] and y.raw.shape == (2, 3, 0)


def test_conv_errors():
    pb = make_padded_batch([3, 2], feature=2)
    out_dim, kd, other = dt.Dim(3, name="out"), dt.Dim(2, name="k"), dt.Dim(80, name="feature")
    w = make_filter(out_dim, pb.feature, (kd,))
    kw = dict(out_dim=out_dim, in_spatial_dims=[pb.time], filter_size=[kd])
    with pytest.raises(ValueError, match=r"dimtorch\.conv\(\): in_dim 'feature'\(80\) is not a dim of x \(dims: "
                                         r"'batch'\(\?\), 'time'\[batch\], 'feature'\(2\)\)"):
        dt.conv(pb.x, w, in_dim=other, **kw)
    with pytest.raises(ValueError, match=r"dimtorch\.conv\(\): filter must have dims \('out'\(3\), 'feature'\(2\), "
                                         r"'k'\(2\)\), has"):
        dt.conv(pb.x, make_filter(out_dim, pb.feature, (dt.Dim(2, name="k2"),)), in_dim=pb.feature, **kw)
    with pytest.raises(ValueError, match=r"dimtorch\.conv\(\): padding must be 'valid', 'same' or ints >= 0, got 'full'"):
        dt.conv(pb.x, w, in_dim=pb.feature, padding="full", **kw)
    with pytest.raises(ValueError, match=r"dimtorch\.conv\(\): filter_size must be 1 static Dims"):
        dt.conv(pb.x, w, in_dim=pb.feature, out_dim=out_dim, in_spatial_dims=[pb.time], filter_size=[2])
    with pytest.raises(ValueError, match=r"dimtorch\.conv\(\): strides must be >= 1"):
        dt.conv(pb.x, w, in_dim=pb.feature, strides=0, **kw)
    s = dt.Dim(1, name="s")
    with pytest.raises(ValueError, match=r"dimtorch\.conv\(\): spatial dim 's'\(1\) has size 1, smaller than"):
        dt.conv(dt.Tensor(torch.randn(1, 2), (s, pb.feature)), w, in_dim=pb.feature, out_dim=out_dim,
                in_spatial_dims=[s], filter_size=[kd])


def pool_oracle(raw, lengths, mode, k, s, padding, out_lengths):
    """Loop oracle over raw (batch, time, feat): each output frame reduces its window's valid frames."""
    left = (k - 1) // 2 if padding == "same" else 0
    n_out = max(out_lengths)
    rows = []
    for b, (n, m) in enumerate(zip(lengths, out_lengths)):
        frames = []
        for t in range(n_out):
            if t >= m:
                frames.append(raw.new_zeros(raw.shape[2]))
                continue
            lo, hi = max(t * s - left, 0), min(t * s - left + k, n)
            win = raw[b, lo:hi]
            frames.append(win.amax(0) if mode == "max" else win.mean(0))
        rows.append(torch.stack(frames, 1))
    return torch.stack(rows)  # (batch, feat, time)


@pytest.mark.parametrize("mode", ["max", "avg"])
@pytest.mark.parametrize("padding", ["valid", "same"])
@pytest.mark.parametrize("k,s", [(2, 2), (3, 1), (4, 3)])
def test_pool1d(mode, padding, k, s):
    lengths = [9, 5, 1, 0]
    pb = make_padded_batch(lengths, feature=2, extra_time=1)
    y, (ot,) = dt.pool(pb.x, mode=mode, pool_size=k, strides=s, padding=padding, in_spatial_dims=[pb.time])
    expected = [out_len(n, k, s, padding) for n in lengths]
    assert ot.lengths.raw.tolist() == expected and y.dims == (pb.batch, pb.feature, ot)
    check_against_torch(
        lambda t: dt.pool(t, mode=mode, pool_size=k, strides=s, padding=padding, in_spatial_dims=[pb.time])[0],
        lambda r: pool_oracle(r, lengths, mode, k, s, padding, expected), [pb.x])
    check_lone_sequences(lambda x, b, t: (lambda r: (r[0], r[1][0]))(dt.pool(
        x, mode=mode, pool_size=k, strides=s, padding=padding, in_spatial_dims=[t])), pb.x, pb.batch, pb.time, lengths)
    check_padding_invariance(lambda t: dt.pool(t, mode=mode, pool_size=k, strides=s, padding=padding,
                                               in_spatial_dims=[t.dims[1]])[0])


@pytest.mark.parametrize("mode", ["max", "avg"])
def test_pool1d_three_lead_dims(mode):
    """(beam, batch, time, feature): the leading lead dims are merged for torch and split back."""
    lengths = [6, 3, 0]
    pb = make_padded_batch(lengths, feature=2, extra_time=1)
    beam = dt.Dim(2, name="beam")
    raw = torch.stack([pb.x.raw, pb.x.raw * 2.0])
    x = dt.Tensor(raw, (beam,) + pb.x.dims)
    y, (ot,) = dt.pool(x, mode=mode, pool_size=2, strides=2, padding="same", in_spatial_dims=[pb.time])
    y1, (ot1,) = dt.pool(pb.x, mode=mode, pool_size=2, strides=2, padding="same", in_spatial_dims=[pb.time])
    assert ot is ot1 and y.dims == (beam, pb.batch, pb.feature, ot)
    valid = ot.get_mask(dims_order=(pb.batch, ot)).raw[:, None, :]
    for i, factor in enumerate((1.0, 2.0)):
        torch.testing.assert_close(torch.where(valid, y.raw[i], 0.0), torch.where(valid, y1.raw * factor, 0.0))


@pytest.mark.parametrize("mode", ["max", "avg"])
def test_pool2d_static_default_strides(mode):
    a, h, w = dt.Dim(2, name="a"), dt.Dim(6, name="h"), dt.Dim(4, name="w")
    x = dt.Tensor(torch.randn(6, 2, 4), (h, a, w))
    y, (oh, ow) = dt.pool(x, mode=mode, pool_size=(2, 2), in_spatial_dims=(h, w))
    assert oh.size == 3 and ow.size == 2 and y.dims == (a, oh, ow)
    fn = F.max_pool2d if mode == "max" else F.avg_pool2d
    check_against_torch(lambda t: dt.pool(t, mode=mode, pool_size=(2, 2), in_spatial_dims=(h, w))[0],
                        lambda r: fn(r.permute(1, 0, 2), 2), [x])


def test_pool_avg_same_static_excludes_padding():
    t = dt.Dim(4, name="t")
    x = dt.Tensor(torch.tensor([1.0, 2.0, 3.0, 4.0]), (t,))
    y, (ot,) = dt.pool(x, mode="avg", pool_size=3, strides=1, padding="same", in_spatial_dims=[t])
    assert ot is t
    torch.testing.assert_close(y.raw, torch.tensor([1.5, 2.0, 3.0, 3.5]))


def test_pool_errors():
    pb = make_padded_batch([3, 2], feature=2)
    with pytest.raises(ValueError, match=r"dimtorch\.pool\(\): mode must be 'max' or 'avg', got 'min'"):
        dt.pool(pb.x, mode="min", pool_size=2, in_spatial_dims=[pb.time])
    with pytest.raises(ValueError, match=r"dimtorch\.pool\(\): in_spatial_dims entry 'x'\(3\) is not a dim of x"):
        dt.pool(pb.x, mode="max", pool_size=2, in_spatial_dims=[dt.Dim(3, name="x")])
    with pytest.raises(TypeError, match=r"dimtorch\.pool\(\): pool_size must be an int or a sequence of 1 ints"):
        dt.pool(pb.x, mode="max", pool_size=(2, 2), in_spatial_dims=[pb.time])


@settings(max_examples=25)
@given(lengths=st.lists(st.integers(0, 9), min_size=1, max_size=4), k=st.integers(1, 4), s=st.integers(1, 3),
       dl=st.integers(1, 2), padding=st.sampled_from(["valid", "same"]))
def test_conv1d_lengths_and_batch_independence_fuzzed(lengths, k, s, dl, padding):
    if max(lengths) == 0:
        lengths = lengths + [1]
    pb = make_padded_batch(lengths, feature=2, extra_time=1)
    out_dim, kd = dt.Dim(2, name="out"), dt.Dim(k, name="k")
    w = make_filter(out_dim, pb.feature, (kd,))
    k_eff = dl * (k - 1) + 1

    def call(x, b, t):
        y, (ot,) = dt.conv(x, w, in_dim=pb.feature, out_dim=out_dim, in_spatial_dims=[t], filter_size=[kd], strides=s,
                           dilation=dl, padding=padding)
        return y, ot

    y, ot = call(pb.x, pb.batch, pb.time)
    assert ot.lengths.raw.tolist() == [out_len(n, k_eff, s, padding) for n in lengths]
    assert y.raw.shape[2] == max(out_len(n, k_eff, s, padding) for n in lengths)
    check_lone_sequences(call, pb.x, pb.batch, pb.time, lengths)


@settings(max_examples=25)
@given(lengths=st.lists(st.integers(0, 9), min_size=1, max_size=4), k=st.integers(1, 4), s=st.integers(1, 3),
       mode=st.sampled_from(["max", "avg"]), padding=st.sampled_from(["valid", "same"]))
def test_pool1d_lengths_and_batch_independence_fuzzed(lengths, k, s, mode, padding):
    if max(lengths) == 0:
        lengths = lengths + [1]
    pb = make_padded_batch(lengths, feature=2, extra_time=1)

    def call(x, b, t):
        y, (ot,) = dt.pool(x, mode=mode, pool_size=k, strides=s, padding=padding, in_spatial_dims=[t])
        return y, ot

    y, ot = call(pb.x, pb.batch, pb.time)
    expected = [out_len(n, k, s, padding) for n in lengths]
    assert ot.lengths.raw.tolist() == expected
    m = torch.arange(max(expected)) < torch.tensor(expected)[:, None]
    assert torch.isfinite(y.raw.transpose(1, 2)[m]).all()
    check_lone_sequences(call, pb.x, pb.batch, pb.time, lengths)


@pytest.mark.parametrize("mode", ["max", "avg"])
def test_pool2d_dynamic_time_same(mode):
    lengths = [5, 2]
    pb = make_padded_batch(lengths, feature=4, extra_time=1)
    y, (ot, of) = dt.pool(pb.x, mode=mode, pool_size=(2, 3), strides=(2, 1), padding="same",
                          in_spatial_dims=(pb.time, pb.feature))
    assert ot.lengths.raw.tolist() == [3, 1] and of is pb.feature and y.dims == (pb.batch, ot, of)

    def oracle(r):
        rows = []
        for b, n in enumerate(lengths):
            frames = []
            for t in range(3):
                cols = []
                for f in range(4):
                    win = r[b, max(2 * t, 0):min(2 * t + 2, n), max(f - 1, 0):min(f + 2, 4)]
                    valid = t < ot.lengths.raw[b]
                    cols.append((win.amax() if mode == "max" else win.mean()) if valid else r.new_zeros(()))
                frames.append(torch.stack(cols))
            rows.append(torch.stack(frames))
        return torch.stack(rows)

    check_against_torch(lambda t: dt.pool(t, mode=mode, pool_size=(2, 3), strides=(2, 1), padding="same",
                                          in_spatial_dims=(pb.time, pb.feature))[0], oracle, [pb.x])


def test_conv2d_static_dilation_tuple_matches_torch():
    h, wd, c, out_dim, kh, kw = (dt.Dim(7, name="h"), dt.Dim(6, name="w"), dt.Dim(2, name="c"), dt.Dim(3, name="out"),
                                 dt.Dim(3, name="kh"), dt.Dim(2, name="kw"))
    x = dt.Tensor(torch.randn(7, 6, 2), (h, wd, c))  # no batch dim at all
    f = make_filter(out_dim, c, (kh, kw))
    y, (oh, ow) = dt.conv(x, f, in_dim=c, out_dim=out_dim, in_spatial_dims=[h, wd], filter_size=[kh, kw],
                          dilation=(2, 1), strides=(1, 2))
    assert (oh.size, ow.size) == (3, 3) and y.dims == (out_dim, oh, ow)
    check_against_torch(
        lambda a, ft: dt.conv(a, ft, in_dim=c, out_dim=out_dim, in_spatial_dims=[h, wd], filter_size=[kh, kw],
                              dilation=(2, 1), strides=(1, 2))[0],
        lambda r, fr: F.conv2d(r.permute(2, 0, 1)[None], fr, dilation=(2, 1), stride=(1, 2))[0], [x, f])


def test_conv_plan_and_layout_reuse_match_fresh_calls():
    """One filter through x of changing dims orders, raw sizes and batches (the per-filter plan and
    the last x layout are reused where they fit) gives what a fresh filter gives each time."""
    out_dim, kd, feat = dt.Dim(3, name="out"), dt.Dim(3, name="k"), dt.Dim(2, name="feature")
    w = make_filter(out_dim, feat, (kd,))
    calls = []
    for seed, (lengths, extra) in enumerate([([5, 2], 0), ([5, 2], 2), ([4, 4, 1], 0)]):
        pb = make_padded_batch(lengths, feature=2, extra_time=extra, seed=seed)
        x = dt.Tensor(pb.x.raw, (pb.batch, pb.time, feat))
        calls += [(x, pb.time), (dt.Tensor(pb.x.raw * 2, x.dims), pb.time),  # the same layout again
                  (dt.Tensor(pb.x.raw.permute(2, 0, 1), (feat, pb.batch, pb.time)), pb.time)]
    calls.append(calls[0])
    spatial_args = [lambda t: [t], lambda t: (t,), lambda t: t, lambda t: iter([t])]  # any iterable of dims, or a Dim
    for padding in ("same", "valid"):
        for i, (x, time) in enumerate(calls):
            y, (ot,) = dt.conv(x, w, in_dim=feat, out_dim=out_dim, in_spatial_dims=spatial_args[i % 4](time),
                               filter_size=[kd], padding=padding)
            fresh = dt.Tensor(w.raw.clone(), w.dims)
            y2, (ot2,) = dt.conv(x, fresh, in_dim=feat, out_dim=out_dim, in_spatial_dims=[time], filter_size=[kd],
                                 padding=padding)
            assert ot is ot2 and y.dims == y2.dims
            torch.testing.assert_close(y.raw, y2.raw, equal_nan=True)
    batch = calls[0][0].dims[0]
    with pytest.raises(ValueError, match=r"dimtorch\.conv\(\): in_dim 'feature'\(2\) is not a dim of x"):
        dt.conv(dt.Tensor(torch.randn(2, 3), (batch, out_dim)), w, in_dim=feat, out_dim=out_dim,
                in_spatial_dims=[batch], filter_size=[kd], padding="valid")


def test_conv_plan_goes_with_its_filter():
    from dimtorch.ops import conv as _conv
    pb = make_padded_batch([3, 2], feature=2)
    out_dim, kd = dt.Dim(3, name="out"), dt.Dim(2, name="k")
    w = make_filter(out_dim, pb.feature, (kd,))
    key = id(w)
    # (the definition's plan: dt.conv's common call takes the C++ fast path, which needs none)
    _conv.conv(pb.x, w, in_dim=pb.feature, out_dim=out_dim, in_spatial_dims=[pb.time], filter_size=[kd])
    assert _conv._CONV_PLANS[key].ref() is w
    del w
    assert key not in _conv._CONV_PLANS


# --- pool's plans: torch's own padding / ceil_mode for 'same', the per-signature cache ---------------

def pool_plan(x, **kw):
    """The cached plan of the definition's call pool(x, **kw) (the call makes it), for checks of the path it
    takes (dt.pool's fast path, src/ops/pool.cpp, keeps no plan: tests/ops/test_pool.py)."""
    from dimtorch.ops import pool as _pool
    _pool.pool(x, **kw)
    key = _pool._plan_key(x, kw["mode"], kw["pool_size"], kw["in_spatial_dims"], kw.get("strides"),
                          kw.get("padding", "valid"), kw.get("out_spatial_dims"))
    return _pool._PLANS[key]


def explicit_pool1d(raw, mode, k, s, pads):
    """Positional oracle: explicit padding, max over -inf padding / mean over the unpadded frames."""
    if mode == "max":
        return F.max_pool1d(F.pad(raw, pads, value=float("-inf")), k, s)
    return F.avg_pool1d(F.pad(raw, pads), k, s) / F.avg_pool1d(F.pad(torch.ones_like(raw), pads), k, s)


def test_pool_torch_padding_gives_the_explicit_windows():
    from dimtorch.ops.pool import torch_padding
    g = torch.Generator().manual_seed(0)
    taken = set()
    for n in range(1, 13):
        for k in range(1, 7):
            for s in range(1, 5):
                for pads in {((k - 1) // 2, k - 1 - (k - 1) // 2), (0, 0)}:
                    if n + sum(pads) < k:
                        continue
                    implicit = torch_padding([n], [k], [s], [pads])
                    if implicit is None:
                        continue
                    (p,), ceil_mode = implicit
                    taken.add((k, s, pads != (0, 0), ceil_mode))
                    raw = torch.randn(2, 3, n, generator=g)
                    for mode in ("max", "avg"):
                        got = (F.max_pool1d(raw, k, s, p, ceil_mode=ceil_mode) if mode == "max" else
                               F.avg_pool1d(raw, k, s, p, ceil_mode=ceil_mode, count_include_pad=False))
                        torch.testing.assert_close(got, explicit_pool1d(raw, mode, k, s, pads),
                                                   msg=lambda m: f"n={n} k={k} s={s} pads={pads} {mode}: {m}")
    # 'same': kernel 2 stride 2 by ceil_mode, odd kernels by torch's padding; even kernels of stride 1 not.
    assert (2, 2, True, True) in taken and (3, 1, True, False) in taken and (5, 3, True, False) in taken
    assert not any(k % 2 == 0 and s == 1 and same for k, s, same, _ in taken)
    assert torch_padding([4], [2], [1], [(0, 1)]) is None


POOL_PATHS = [  # (k, s): torch's padding / ceil_mode for 'same' ((2, 2), (3, 1), (3, 2), (4, 2)) or F.pad
    (2, 2), (3, 1), (3, 2), (4, 2), (2, 1), (4, 1), (1, 1)]


@pytest.mark.parametrize("mode", ["max", "avg"])
@pytest.mark.parametrize("k,s", POOL_PATHS)
def test_pool1d_same_paths_against_torch(mode, k, s):
    """Every 'same' path (torch's padding, its ceil_mode, explicit F.pad) forward and backward on a batch
    padded with NaN, 1e30 and -1e30; the second call (a cache hit) gives the same."""
    lengths = [8, 5, 1, 0, 6]
    pb = make_padded_batch(lengths, feature=3, extra_time=2)
    kw = dict(mode=mode, pool_size=k, strides=s, padding="same", in_spatial_dims=[pb.time])
    plan = pool_plan(pb.x, **kw)
    explicit = k % 2 == 0 and s == 1  # no torch arguments give those windows
    # (a window of one frame never reaches padding: nothing masked, nothing counted)
    assert (plan.pad is not None) == explicit and plan.count == (mode == "avg" and k > 1)
    expected = [out_len(n, k, s, "same") for n in lengths]
    y1, (ot,) = dt.pool(pb.x, **kw)
    check_against_torch(lambda t: dt.pool(t, **kw)[0], lambda r: pool_oracle(r, lengths, mode, k, s, "same", expected),
                        [pb.x])
    y2, (ot2,) = dt.pool(pb.x, **kw)
    assert ot2 is ot and y2.dims == y1.dims and pool_plan(pb.x, **kw) is plan
    torch.testing.assert_close(y2.raw, y1.raw, equal_nan=True)
    check_padding_invariance(lambda t: dt.pool(t, mode=mode, pool_size=k, strides=s, padding="same",
                                               in_spatial_dims=[t.dims[1]])[0], lengths=lengths, extra_time=2)


@pytest.mark.parametrize("mode", ["max", "avg"])
@pytest.mark.parametrize("k,s", POOL_PATHS)
@pytest.mark.parametrize("n", [1, 6, 7])
def test_pool1d_same_static_against_torch(mode, k, s, n):
    """Static dims: avg by torch's count_include_pad=False where its padding serves (no count pooled)."""
    b, t, f = dt.Dim(2, name="b"), dt.Dim(n, name="t"), dt.Dim(3, name="f")
    x = dt.Tensor(torch.randn(2, n, 3), (b, t, f))
    kw = dict(mode=mode, pool_size=k, strides=s, padding="same", in_spatial_dims=(t,))
    plan = pool_plan(x, **kw)
    assert plan.count == (mode == "avg" and plan.pad is not None) and not plan.masked
    total = k - 1
    check_against_torch(lambda a: dt.pool(a, **kw)[0],
                        lambda r: explicit_pool1d(r.transpose(1, 2), mode, k, s, (total // 2, total - total // 2)),
                        [x])


@pytest.mark.parametrize("mode", ["max", "avg"])
@pytest.mark.parametrize("ks,ss", [((2, 3), (2, 1)), ((2, 2), (1, 2)), ((3, 3), (2, 2))])
def test_pool2d_same_static_against_torch(mode, ks, ss):
    """2-D: one ceil_mode for both dims, else explicit F.pad ((2, 2) stride (1, 2))."""
    a, h, w = dt.Dim(2, name="a"), dt.Dim(5, name="h"), dt.Dim(6, name="w")
    x = dt.Tensor(torch.randn(5, 2, 6), (h, a, w))
    kw = dict(mode=mode, pool_size=ks, strides=ss, padding="same", in_spatial_dims=(h, w))
    assert (pool_plan(x, **kw).pad is not None) == (ks == (2, 2))
    pads = [p for k in reversed(ks) for p in ((k - 1) // 2, k - 1 - (k - 1) // 2)]

    def oracle(r):
        r = r.permute(1, 0, 2)
        if mode == "max":
            return F.max_pool2d(F.pad(r, pads, value=float("-inf")), ks, ss)
        return F.avg_pool2d(F.pad(r, pads), ks, ss) / F.avg_pool2d(F.pad(torch.ones_like(r), pads), ks, ss)

    check_against_torch(lambda t: dt.pool(t, **kw)[0], oracle, [x])


def test_pool_cache_hit_follows_feature_dim_and_values():
    pb = make_padded_batch([4, 2], feature=2)
    kw = dict(mode="max", pool_size=2, padding="same", in_spatial_dims=[pb.time])
    y, (ot,) = dt.pool(pb.x, **kw)
    assert y.feature_dim is pb.feature
    x2 = dt.Tensor(pb.x.raw * 2, pb.x.dims)  # same dims and shape: the same plan, no feature dim
    y2, (ot2,) = dt.pool(x2, **kw)
    assert ot2 is ot and y2.feature_dim is None
    valid = valid_mask(y.dims, y.raw.shape)
    torch.testing.assert_close(torch.where(valid, y2.raw, 0), torch.where(valid, y.raw * 2, 0))
    xt = dt.Tensor(pb.x.raw, pb.x.dims, feature_dim=pb.time)  # pooled away: no feature dim
    assert dt.pool(xt, **kw)[0].feature_dim is None


def test_pool_plan_goes_with_its_dims_and_ids_reused_do_not_hit():
    import gc
    from dimtorch.ops import pool as _pool

    def call(lengths):
        pb = make_padded_batch(lengths, feature=2)
        y, (ot,) = dt.pool(pb.x, mode="max", pool_size=2, padding="same", in_spatial_dims=(pb.time,))
        expected = [out_len(n, 2, 2, "same") for n in lengths]
        assert ot.lengths.raw.tolist() == expected
        valid = valid_mask(y.dims, y.raw.shape)
        oracle = pool_oracle(pb.x.raw, lengths, "max", 2, 2, "same", expected)
        torch.testing.assert_close(torch.where(valid, y.raw, 0), torch.where(valid, oracle, 0))
        return _pool._plan_key(pb.x, "max", 2, (pb.time,), None, "same", None)

    # New dims of one raw shape, other lengths: CPython soon gives them the dead dims' ids (the same
    # key); each call must still get its own lengths. Each of the six lengths once, then on until an id was reused.
    seen, reused = set(), 0
    for i in range(40):
        key = call([6, 1 + i % 6])
        gc.collect()
        assert key not in _pool._PLANS
        reused += key in seen
        seen.add(key)
        if reused and i >= 5:
            break
    assert reused  # the case was met


def test_pool_size_from_data_dim_keeps_no_plan():
    from dimtorch.ops import pool as _pool
    t, f = dt.Dim(None, name="t"), dt.Dim(2, name="f")
    x = dt.Tensor(torch.randn(5, 2), (t, f))
    n = len(_pool._PLANS)
    y1, (o1,) = dt.pool(x, mode="max", pool_size=2, in_spatial_dims=[t])
    y2, (o2,) = dt.pool(x, mode="max", pool_size=2, in_spatial_dims=[t])
    assert o1 is not o2 and len(_pool._PLANS) == n and y2.raw.shape == (2, 2)


def test_pool_errors_after_a_cached_call():
    """A cache hit needs the arguments of a call that passed the checks: near misses still raise."""
    pb = make_padded_batch([3, 2], feature=2)
    kw = dict(mode="max", in_spatial_dims=[pb.time], padding="same")
    dt.pool(pb.x, pool_size=2, strides=1, **kw)
    dt.pool(pb.x, pool_size=[2], strides=(1,), **kw)
    for bad in (True, 2.0, (2, 2)):
        with pytest.raises(TypeError, match=r"dimtorch\.pool\(\): pool_size must be an int or a sequence of 1 ints"):
            dt.pool(pb.x, pool_size=bad, strides=1, **kw)
    with pytest.raises(TypeError, match=r"dimtorch\.pool\(\): strides must be an int or a sequence of 1 ints"):
        dt.pool(pb.x, pool_size=2, strides=True, **kw)
    with pytest.raises(TypeError, match=r"dimtorch\.pool\(\): x must be floating"):
        dt.pool(dt.Tensor(pb.x.raw.long(), pb.x.dims), pool_size=2, strides=1, **kw)
    with pytest.raises(ValueError, match=r"dimtorch\.pool\(\): strides must be >= 1, got 0"):
        dt.pool(pb.x, pool_size=2, strides=0, **kw)
    dt.pool(pb.x, mode="max", pool_size=2, in_spatial_dims=[pb.feature])
    with pytest.raises(ValueError, match=r"dimtorch\.pool\(\): spatial dim 'feature'\(2\) has size 2, smaller than "
                                         r"the window \(3\)"):
        dt.pool(pb.x, mode="max", pool_size=3, in_spatial_dims=[pb.feature])
    with pytest.raises(ValueError, match=r"dimtorch\.pool\(\): mode must be 'max' or 'avg', got 'min'"):
        dt.pool(pb.x, mode="min", pool_size=2, strides=1, in_spatial_dims=[pb.time], padding="same")
    with pytest.raises(ValueError, match=r"dimtorch\.pool\(\): padding must be 'valid', 'same' or ints >= 0"):
        dt.pool(pb.x, mode="max", pool_size=2, strides=1, in_spatial_dims=[pb.time], padding="full")
    with pytest.raises(TypeError, match=r"dimtorch\.pool\(\): x must be a dimtorch\.Tensor, got Tensor"):
        dt.pool(pb.x.raw, pool_size=2, strides=1, **kw)


@pytest.mark.parametrize("padding", ["valid", "same"])
def test_conv_out_dim_is_in_dim(padding):
    """A conv that keeps its channel dim (out_dim is in_dim): the filter names its input channels by a
    copy of the dim; the result is the positional conv, per sequence."""
    lengths = [6, 3, 0]
    pb = make_padded_batch(lengths, feature=4, pad_value=float("nan"))
    kd, f_in = dt.Dim(3, name="k"), dt.Dim(4, name="feature_in")
    w = make_filter(pb.feature, f_in, (kd,))
    bias = dt.Tensor(torch.randn(4), (pb.feature,))
    expected = [out_len(n, 3, 1, padding) for n in lengths]

    def run(t, wt, bt):
        y, (ot,) = dt.conv(t, wt, in_dim=pb.feature, out_dim=pb.feature, in_spatial_dims=[pb.time], filter_size=[kd],
                           padding=padding, bias=bt)
        assert y.dims == (pb.batch, pb.feature, ot)
        return y

    check_against_torch(run, lambda r, wr, br: per_sequence(r, lengths, seq_conv1d(wr, br, 3, 1, 1, padding),
                                                            expected, max(expected), 4),
                        [pb.x, w, bias], rtol=1e-5, atol=1e-5)
    # the filter in another dims order works too
    y = run(pb.x, w.copy_transpose((kd, f_in, pb.feature)), bias)
    torch.testing.assert_close(y.raw, run(pb.x, w, bias).raw, equal_nan=True)
    with pytest.raises(ValueError, match=r"dimtorch\.conv\(\): out_dim is in_dim 'feature'\(4\), so the filter names its "
                                         r"input channels by another static dim of size 4"):
        dt.conv(pb.x, make_filter(pb.feature, dt.Dim(5, name="five"), (kd,)), in_dim=pb.feature, out_dim=pb.feature,
                in_spatial_dims=[pb.time], filter_size=[kd])


def test_transposed_conv_out_dim_is_in_dim():
    lengths = [4, 2]
    pb = make_padded_batch(lengths, feature=3, pad_value=float("nan"))
    kd, f_out = dt.Dim(2, name="k"), dt.Dim(3, name="feature_out")
    g = torch.Generator().manual_seed(3)
    w = dt.Tensor(torch.randn(3, 3, 2, generator=g), (pb.feature, f_out, kd))
    y, (ot,) = dt.transposed_conv(pb.x, w, in_dim=pb.feature, out_dim=pb.feature, in_spatial_dims=[pb.time],
                                  filter_size=[kd], strides=2)
    assert y.dims == (pb.batch, pb.feature, ot) and ot.lengths.raw.tolist() == [8, 4]
    for b, n in enumerate(lengths):
        ref = F.conv_transpose1d(pb.x.raw[b:b + 1, :n].transpose(1, 2), w.raw, stride=2)[0]
        torch.testing.assert_close(y.raw[b, :, :2 * n], ref)
    with pytest.raises(ValueError, match=r"dimtorch\.transposed_conv\(\): out_dim is in_dim 'feature'\(3\), so the "
                                         r"filter names its output channels"):
        dt.transposed_conv(pb.x, dt.Tensor(w.raw, (pb.feature, dt.Dim(3, name="x"), dt.Dim(2, name="k2"))),
                           in_dim=pb.feature, out_dim=pb.feature, in_spatial_dims=[pb.time], filter_size=[kd])


def test_conv_and_pool_take_returnn_frontends_arguments():
    """conv: filter by keyword, dilation_rate= (dimtorch's dilation=), strides/groups None mean 1, use_mask any;
    pool: nd= checked against the spatial dims, dilation_rate 1 (others refused), use_mask any."""
    from helpers import make_padded_batch
    pb = make_padded_batch((5, 3), feature=2)
    out, k = dt.Dim(3, name="out"), dt.Dim(3, name="k")
    w = dt.Tensor(torch.randn(3, 2, 3), (out, pb.feature, k))
    a, (ta,) = dt.conv(pb.x, filter=w, in_dim=pb.feature, out_dim=out, in_spatial_dims=[pb.time], filter_size=[k],
                       padding="same", strides=None, dilation_rate=2, groups=None, use_mask=False)
    b, (tb,) = dt.conv(pb.x, w, in_dim=pb.feature, out_dim=out, in_spatial_dims=[pb.time], filter_size=[k],
                       padding="same", dilation=2)
    assert ta is tb and torch.equal(a.raw, b.raw)
    with pytest.raises(TypeError, match=r"dimtorch\.conv\(\): give dilation or dilation_rate"):
        dt.conv(pb.x, w, in_dim=pb.feature, out_dim=out, in_spatial_dims=[pb.time], filter_size=[k], dilation=1,
                dilation_rate=1)
    p1, d1 = dt.pool(pb.x, nd=1, mode="max", pool_size=2, in_spatial_dims=[pb.time], dilation_rate=1, use_mask=True)
    p2, d2 = dt.pool(pb.x, mode="max", pool_size=2, in_spatial_dims=[pb.time])
    assert d1 == d2 and torch.equal(torch.nan_to_num(p1.raw), torch.nan_to_num(p2.raw))
    with pytest.raises(ValueError, match=r"dimtorch\.pool\(\): nd=2 but 1 in_spatial_dims"):
        dt.pool(pb.x, nd=2, mode="max", pool_size=2, in_spatial_dims=[pb.time])
    with pytest.raises(NotImplementedError, match=r"dimtorch\.pool\(\): dilation_rate=2"):
        dt.pool(pb.x, mode="max", pool_size=2, in_spatial_dims=[pb.time], dilation_rate=2)
