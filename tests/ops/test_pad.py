"""Tests of python/dimtorch/ops/pad.py: constant, reflect, replicate and circular padding of static dims and of dynamic dims (per-sequence ends)."""
import pytest
import torch
from hypothesis import given, strategies as st
import torch.nn.functional as F

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, check_against_torch, grads_of, make_padded_batch

MODES = ("reflect", "replicate", "circular")


def seq_pad(raw, lengths, left, right, n_out, value):
    """Positional oracle over (batch, time, feat): per sequence, `left` frames of value, its valid
    frames, `right` frames of value, then value up to n_out."""
    out = []
    for b, n in enumerate(lengths):
        f = raw.shape[2]
        frames = torch.cat([raw.new_full((left, f), value), raw[b, :n], raw.new_full((right, f), value)])
        out.append(torch.cat([frames, raw.new_full((n_out - frames.shape[0], f), value)]))
    return torch.stack(out)


def test_pad_static_dim():
    pb = make_padded_batch((3, 2), feature=4)
    out, (d,) = dt.pad(pb.x, axes=pb.feature, padding=(1, 2), value=0.5)
    assert d is (pb.feature + 1) + 2 and d.size == 7 and out.dims == (pb.batch, pb.time, d)
    check_against_torch(lambda t: dt.pad(t, axes=pb.feature, padding=(1, 2), value=0.5)[0],
                        lambda r: F.pad(r, (1, 2), value=0.5), [pb.x])


def test_pad_two_static_axes_and_zero_padding_keeps_dim():
    a, b, c = dt.Dim(2, name="a"), dt.Dim(3, name="b"), dt.Dim(4, name="c")
    x = dt.Tensor(torch.randn(2, 3, 4), (a, b, c))
    out, (da, dc) = dt.pad(x, axes=(a, c), padding=((0, 1), (2, 0)))
    assert da.size == 3 and dc.size == 6 and out.dims == (da, b, dc)
    check_against_torch(lambda t: dt.pad(t, axes=(a, c), padding=((0, 1), (2, 0)))[0],
                        lambda r: F.pad(r, (2, 0, 0, 0, 0, 1)), [x])
    out, (db,) = dt.pad(x, axes=b, padding=(0, 0))
    assert db is b and torch.equal(out.raw, x.raw)


@pytest.mark.parametrize("left,right", [(1, 2), (0, 3), (2, 0)])
def test_pad_dynamic_dim(left, right):
    lengths = [4, 2, 0, 1]
    pb = make_padded_batch(lengths, feature=3, extra_time=1)
    out, (d,) = dt.pad(pb.x, axes=pb.time, padding=(left, right), value=-2.0)
    assert d.lengths.raw.tolist() == [n + left + right for n in lengths]
    n_out = 4 + left + right
    assert out.dims == (pb.batch, d, pb.feature) and out.raw.shape == (4, n_out, 3)
    check_against_torch(lambda t: dt.pad(t, axes=pb.time, padding=(left, right), value=-2.0)[0],
                        lambda r: seq_pad(r, lengths, left, right, n_out, -2.0), [pb.x], mask_padding=False)
    _, _, grad = grads_of(lambda t: dt.pad(t, axes=pb.time, padding=(left, right))[0], pb.x)
    assert (grad[:, 4:] == 0).all() and (grad[1, 2:] == 0).all() and (grad[2] == 0).all()


def test_pad_dynamic_and_static_int_dtype():
    lengths = [3, 1]
    pb = make_padded_batch(lengths, feature=2)
    x = dt.Tensor(torch.arange(12).view(2, 3, 2), pb.x.dims)
    out, (dt_, df) = dt.pad(x, axes=(pb.time, pb.feature), padding=((1, 1), (0, 1)), value=-1)
    assert out.raw.dtype == torch.int64 and out.dims == (pb.batch, dt_, df)
    expected = F.pad(seq_pad(x.raw, lengths, 1, 1, 5, -1), (0, 1), value=-1)
    assert torch.equal(out.raw, expected)


def test_pad_batch_independence():
    pb = make_padded_batch((4, 2, 0, 1), feature=3, extra_time=2)
    out, (d,) = dt.pad(pb.x, axes=pb.time, padding=(2, 1))
    for b, n in enumerate(pb.lengths):
        b1 = dt.Dim(None, name="b1")
        t1 = dt.Dim(dt.Tensor(torch.tensor([n]), (b1,)), name="t1")
        x1 = dt.Tensor(pb.x.raw[b:b + 1, :n], (b1, t1, pb.feature))
        o1, (d1,) = dt.pad(x1, axes=t1, padding=(2, 1))
        assert d1.lengths.raw.tolist() == [n + 3]
        torch.testing.assert_close(o1.raw, out.raw[b:b + 1, :n + 3])


def test_pad_errors():
    pb = make_padded_batch((3, 1), feature=2)
    with pytest.raises(ValueError, match=r"dimtorch\.pad\(\): padding of 'time'\[batch\] is \(-1, 0\); negative padding"):
        dt.pad(pb.x, axes=pb.time, padding=(-1, 0))
    with pytest.raises(ValueError, match=r"dimtorch\.pad\(\): 1 padding pairs for 2 axes \('time'\[batch\], 'feature'\(2\)\)"):
        dt.pad(pb.x, axes=(pb.time, pb.feature), padding=[(1, 0)])
    g = dt.Dim(3, name="g")
    with pytest.raises(ValueError, match=r"dimtorch\.pad\(\): axis 'g'\(3\) is not a dim of x \(dims: 'batch'\(\?\), 'time'\[batch\], 'feature'\(2\)\)"):
        dt.pad(pb.x, axes=g, padding=(1, 1))
    with pytest.raises(ValueError, match=r"dimtorch\.pad\(\): mode 'edge' is not one of 'constant', 'reflect', 'replicate', 'circular'"):
        dt.pad(pb.x, axes=pb.feature, padding=(1, 1), mode="edge")
    with pytest.raises(TypeError, match=r"dimtorch\.pad\(\): padding of 'feature'\(2\) must be a pair of ints"):
        dt.pad(pb.x, axes=pb.feature, padding=[(1.5, 1)])
    # amounts whose sum or padded size passes int64 (the fast path's sum overflowed: signed overflow)
    for axis in (pb.feature, pb.time):
        for padding in ((2**62, 2**62), (2**63 - 1, 1), (2**63 - 1, 0)):
            with pytest.raises((OverflowError, RuntimeError), match=r"out of range for a dim size|overflow"):
                dt.pad(pb.x, axes=axis, padding=padding)


@given(st.lists(st.integers(0, 5), min_size=1, max_size=4), st.integers(0, 3), st.integers(0, 3), st.integers(0, 2))
def test_pad_dynamic_fuzz(lengths, left, right, extra):
    if not max(lengths):
        lengths = lengths + [1]
    pb = make_padded_batch(lengths, feature=2, extra_time=extra)
    out, (d,) = dt.pad(pb.x, axes=pb.time, padding=(left, right), value=3.0)
    assert d.lengths.raw.tolist() == [n + left + right for n in lengths]
    if left == right == 0:  # (0, 0) leaves x as it is, padding frames included
        assert d is pb.time and out.raw is pb.x.raw
        return
    n_out = max(lengths) + left + right
    check_against_torch(lambda t: dt.pad(t, axes=pb.time, padding=(left, right), value=3.0)[0],
                        lambda r: seq_pad(r, lengths, left, right, n_out, 3.0), [pb.x], mask_padding=False)


def test_pad_dim_sized_from_data():
    batch, f = dt.Dim(None, name="batch"), dt.Dim(2, name="f")
    x = dt.Tensor(torch.randn(3, 2), (batch, f))
    out, (b2,) = dt.pad(x, axes=batch, padding=(1, 0))
    assert b2.size is None and b2.lengths is None and out.dims == (b2, f)
    assert torch.equal(out.raw, F.pad(x.raw, (0, 0, 1, 0)))


def test_pad_dynamic_time_major():
    lengths = [3, 0, 2]
    pb = make_padded_batch(lengths, feature=2, extra_time=1)
    xt = pb.x.copy_transpose((pb.time, pb.feature, pb.batch))
    out, (d,) = dt.pad(xt, axes=pb.time, padding=(1, 1), value=-1.0)
    assert out.dims == (d, pb.feature, pb.batch) and d.lengths.raw.tolist() == [5, 2, 4]
    check_against_torch(lambda t: dt.pad(t, axes=pb.time, padding=(1, 1), value=-1.0)[0],
                        lambda r: seq_pad(r.permute(2, 0, 1), lengths, 1, 1, 5, -1.0).permute(1, 2, 0), [xt],
                        mask_padding=False)


# --- reflect / replicate / circular ---------------------------------------------------------------

def seq_pad_mode(raw, lengths, left, right, n_out, value, mode):
    """Positional oracle over (batch, time, feat): each sequence alone through F.pad(mode), then
    `value` up to n_out."""
    out = []
    for b, n in enumerate(lengths):
        one = F.pad(raw[b:b + 1, :n].transpose(1, 2), (left, right), mode=mode).transpose(1, 2)[0]
        out.append(torch.cat([one, raw.new_full((n_out - one.shape[0], raw.shape[2]), value)]))
    return torch.stack(out)


@pytest.mark.parametrize("mode", MODES)
def test_pad_modes_static_last_axis(mode):
    pb = make_padded_batch((3, 2), feature=4)
    out, (d,) = dt.pad(pb.x, axes=pb.feature, padding=(2, 1), mode=mode)
    assert d is pb.feature + 3 and out.dims == (pb.batch, pb.time, d) and out.feature_dim is None
    check_against_torch(lambda t: dt.pad(t, axes=pb.feature, padding=(2, 1), mode=mode)[0],
                        lambda r: F.pad(r, (2, 1), mode=mode), [pb.x])


@pytest.mark.parametrize("mode", MODES)
def test_pad_modes_static_two_axes_and_inner_axis(mode):
    a, b, c = dt.Dim(2, name="a"), dt.Dim(3, name="b"), dt.Dim(4, name="c")
    x = dt.Tensor(torch.randn(2, 3, 4), (a, b, c))
    out, (db, dc) = dt.pad(x, axes=(b, c), padding=((1, 2), (3, 0)), mode=mode)  # last two axes: one F.pad
    assert out.dims == (a, db, dc) and out.raw.shape == (2, 6, 7)
    check_against_torch(lambda t: dt.pad(t, axes=(b, c), padding=((1, 2), (3, 0)), mode=mode)[0],
                        lambda r: F.pad(r, (3, 0, 1, 2), mode=mode), [x])
    # An inner axis (not where torch's kernels want it): the positional oracle moves it last.
    check_against_torch(lambda t: dt.pad(t, axes=b, padding=(2, 1), mode=mode)[0],
                        lambda r: F.pad(r.transpose(1, 2), (2, 1), mode=mode).transpose(1, 2), [x])


@pytest.mark.parametrize("mode", MODES)
def test_pad_modes_static_int_and_bool(mode):
    f = dt.Dim(3, name="f")
    g = dt.Dim(2, name="g")
    x = dt.Tensor(torch.arange(6).view(2, 3), (g, f))
    out, _ = dt.pad(x, axes=f, padding=(1, 2), mode=mode)
    assert torch.equal(out.raw, F.pad(x.raw, (1, 2), mode=mode))
    mask = dt.Tensor(torch.tensor([[True, False, False], [False, True, True]]), (g, f))
    out, _ = dt.pad(mask, axes=f, padding=(2, 1), mode=mode)  # no bool kernel in torch: index_select
    expected = F.pad(mask.raw.to(torch.int64), (2, 1), mode=mode).bool()
    assert out.raw.dtype == torch.bool and torch.equal(out.raw, expected)


@pytest.mark.parametrize("pad_value", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("left,right", [(1, 2), (0, 2), (2, 0)])
def test_pad_modes_dynamic(mode, left, right, pad_value):
    lengths = [3, 5, 3, 4]  # reflect needs padding < every length
    pb = make_padded_batch(lengths, feature=3, extra_time=1, pad_value=pad_value)
    out, (d,) = dt.pad(pb.x, axes=pb.time, padding=(left, right), value=-2.0, mode=mode)
    assert d is pb.time + (left + right) and d.lengths.raw.tolist() == [n + left + right for n in lengths]
    n_out = 5 + left + right
    assert out.dims == (pb.batch, d, pb.feature) and out.raw.shape == (4, n_out, 3)
    check_against_torch(lambda t: dt.pad(t, axes=pb.time, padding=(left, right), value=-2.0, mode=mode)[0],
                        lambda r: seq_pad_mode(r, lengths, left, right, n_out, -2.0, mode), [pb.x],
                        mask_padding=False)


@pytest.mark.parametrize("mode", MODES)
def test_pad_modes_batch_independence(mode):
    pb = make_padded_batch((5, 3, 4), feature=2, extra_time=2, pad_value=PAD_NAN)
    out, (d,) = dt.pad(pb.x, axes=pb.time, padding=(2, 1), mode=mode)
    for b, n in enumerate(pb.lengths):
        b1 = dt.Dim(None, name="b1")
        t1 = dt.Dim(dt.Tensor(torch.tensor([n]), (b1,)), name="t1")
        x1 = dt.Tensor(pb.x.raw[b:b + 1, :n], (b1, t1, pb.feature))
        o1, (d1,) = dt.pad(x1, axes=t1, padding=(2, 1), mode=mode)
        assert d1.lengths.raw.tolist() == [n + 3] and o1.raw.shape == (1, n + 3, 2)
        torch.testing.assert_close(o1.raw, out.raw[b:b + 1, :n + 3])


@pytest.mark.parametrize("mode", MODES)
def test_pad_modes_dynamic_time_major_with_static_axis(mode):
    lengths = [3, 2, 4]
    pb = make_padded_batch(lengths, feature=2, extra_time=1)
    xt = pb.x.copy_transpose((pb.time, pb.feature, pb.batch))
    out, (d, f) = dt.pad(xt, axes=(pb.time, pb.feature), padding=((1, 1), (1, 0)), mode=mode)
    assert out.dims == (d, f, pb.batch) and d.lengths.raw.tolist() == [5, 4, 6] and f.size == 3

    def oracle(r):
        r = F.pad(r.permute(2, 0, 1), (1, 0), mode=mode)  # (batch, time, feature + 1)
        return seq_pad_mode(r, lengths, 1, 1, 6, 0.0, mode).permute(1, 2, 0)
    check_against_torch(lambda t: dt.pad(t, axes=(pb.time, pb.feature), padding=((1, 1), (1, 0)), mode=mode)[0],
                        oracle, [xt], mask_padding=False)


def test_pad_modes_errors():
    pb = make_padded_batch((4, 2, 3), feature=3)
    with pytest.raises(ValueError, match=r"dimtorch\.pad\(\): mode 'reflect' needs padding smaller than the length of "
                                         r"every sequence, but 'time'\[batch\] has a sequence of length 2 for padding \(0, 2\)"):
        dt.pad(pb.x, axes=pb.time, padding=(0, 2), mode="reflect")
    with pytest.raises(ValueError, match=r"dimtorch\.pad\(\): mode 'circular' needs padding no larger than the length "
                                         r"of every sequence \(it wraps around once\), but 'time'\[batch\] has a "
                                         r"sequence of length 2 for padding \(3, 0\)"):
        dt.pad(pb.x, axes=pb.time, padding=(3, 0), mode="circular")
    with pytest.raises(ValueError, match=r"dimtorch\.pad\(\): mode 'reflect' needs padding smaller .* but 'feature'\(3\) "
                                         r"has size 3 for padding \(3, 0\)"):
        dt.pad(pb.x, axes=pb.feature, padding=(3, 0), mode="reflect")
    empty = make_padded_batch((2, 0), feature=3)
    with pytest.raises(ValueError, match=r"dimtorch\.pad\(\): mode 'replicate' needs at least one frame to repeat, but "
                                         r"'time'\[batch\] has a sequence of length 0 for padding \(1, 0\)"):
        dt.pad(empty.x, axes=empty.time, padding=(1, 0), mode="replicate")
    with pytest.raises(ValueError, match=r"dimtorch\.pad\(\): the lengths of 'time'\[batch\] vary over 'batch'\(\?\), "
                                         r"which is padded too"):
        dt.pad(pb.x, axes=(pb.time, pb.batch), padding=((1, 1), (1, 0)))


@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.integers(0, 3), st.integers(0, 3),
       st.integers(0, 2), st.sampled_from(MODES))
def test_pad_modes_dynamic_fuzz(lengths, left, right, extra, mode):
    shortest = min(lengths)
    limit = shortest - 1 if mode == "reflect" else shortest
    left, right = min(left, limit), min(right, limit)
    pb = make_padded_batch(lengths, feature=2, extra_time=extra, pad_value=PAD_LARGE)
    out, (d,) = dt.pad(pb.x, axes=pb.time, padding=(left, right), mode=mode, value=5.0)
    assert d.lengths.raw.tolist() == [n + left + right for n in lengths]
    if left == right == 0:
        assert d is pb.time and out.raw is pb.x.raw
        return
    n_out = max(lengths) + left + right
    check_against_torch(lambda t: dt.pad(t, axes=pb.time, padding=(left, right), mode=mode, value=5.0)[0],
                        lambda r: seq_pad_mode(r, lengths, left, right, n_out, 5.0, mode), [pb.x],
                        mask_padding=False)


# --- the C++ fast path (src/ops/pad.cpp): constant padding of one dim -----------------------------

@pytest.mark.parametrize("case", ["static", "dynamic", "dynamic_long_raw", "time_major", "left_only", "int_value"])
def test_pad_fast_path_matches_the_python_definition(case):
    from dimtorch.ops import pad as _pad
    pb = make_padded_batch((4, 2, 0, 3), feature=3, extra_time=2 if case == "dynamic_long_raw" else 0,
                           pad_value=PAD_LARGE)
    x, axis, padding, value = pb.x, pb.time, (1, 2), -3.0
    if case == "static":
        axis = pb.feature
    elif case == "time_major":
        x = pb.x.copy_transpose((pb.feature, pb.time, pb.batch))
    elif case == "left_only":
        padding = (2, 0)
    elif case == "int_value":
        x, value = dt.Tensor(torch.arange(4 * 4 * 3).view(4, 4, 3), pb.x.dims), 7
    fast, (d,) = dt.pad(x, axes=axis, padding=padding, value=value)
    slow, (d2,) = _pad.pad(x, axes=axis, padding=padding, value=value)
    assert d is d2 and fast.dims == slow.dims and fast.raw.dtype == slow.raw.dtype
    assert fast.feature_dim is slow.feature_dim and fast.raw.shape == fast.shape
    assert torch.equal(fast.raw, slow.raw)
    check_against_torch(lambda t: dt.pad(t, axes=axis, padding=padding, value=value)[0],
                        lambda r: _pad.pad(dt.Tensor(r, x.dims), axes=axis, padding=padding, value=value)[0].raw,
                        [x], mask_padding=False)


def test_pad_fast_path_falls_back_for_other_arguments():
    pb = make_padded_batch((3, 1), feature=2)
    out, (d,) = dt.pad(pb.x, axes=[pb.time], padding=[(1, 0)], value=0.5)  # lists: the Python definition
    assert d is pb.time + 1 and out.dims == (pb.batch, d, pb.feature)
    out, (d,) = dt.pad(pb.x, axes=(pb.time,), padding=((0, 1),))
    assert d is pb.time + 1
    with pytest.raises(TypeError, match=r"dimtorch\.pad\(\): padding of 'time'\[batch\] must be a pair of ints, got \(1, True\)"):
        dt.pad(pb.x, axes=pb.time, padding=(1, True))
    with pytest.raises(TypeError, match=r"dimtorch\.pad\(\): x must be a dimtorch\.Tensor, got Tensor"):
        dt.pad(pb.x.raw, axes=pb.time, padding=(1, 1))
    other = dt.Dim(None, name="other")
    t2 = dt.Dim(dt.Tensor(torch.tensor([2]), (other,)), name="t2")
    x2 = dt.Tensor(torch.zeros(3, 2), (pb.batch, t2))
    with pytest.raises(ValueError, match=r"dimtorch\.pad\(\): the lengths of 't2'\[other\] vary over 'other'\(\?\), "
                                         r"which is not a dim of x \(dims: 'batch'\(\?\), 't2'\[other\]\)"):
        dt.pad(x2, axes=t2, padding=(1, 1))


def test_pad_reads_nothing_from_the_device():
    """On the meta device (any read of device values raises), under bench/check_syncs.py's
    CopyCounter: no blocking host-to-device copy in any mode; the index is copied once."""
    import importlib.util
    import pathlib
    spec = importlib.util.spec_from_file_location(
        "check_syncs", pathlib.Path(__file__).resolve().parents[2] / "bench" / "check_syncs.py")
    check_syncs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_syncs)
    b = dt.Dim(None, name="batch")
    t = dt.Dim(dt.Tensor(torch.tensor([5, 3, 4]), (b,)), name="time")
    f = dt.Dim(4, name="f")
    x = dt.Tensor(torch.randn(3, 5, 4, device="meta"), (b, t, f))
    for mode in ("constant",) + MODES:
        for axis, inner in ((t, False), (f, False), (f, True)):
            xs = x.copy_transpose((b, f, t)) if inner else x
            with check_syncs.CopyCounter() as c:
                out, _ = dt.pad(xs, axes=axis, padding=(1, 2), mode=mode)
            assert out.raw.device.type == "meta"
            assert c.blocking == 0 and c.copies <= 2, (mode, axis, inner, c.blocking, c.copies)


@pytest.mark.parametrize("mode", MODES)
def test_pad_modes_dim_sized_from_data(mode):
    batch, f = dt.Dim(None, name="batch"), dt.Dim(2, name="f")
    x = dt.Tensor(torch.randn(3, 2), (batch, f))
    out, (b2,) = dt.pad(x, axes=batch, padding=(2, 1), mode=mode)
    assert b2.size is None and b2.lengths is None and out.dims == (b2, f) and out.raw.shape == (6, 2)
    check_against_torch(lambda t: dt.pad(t, axes=batch, padding=(2, 1), mode=mode)[0],
                        lambda r: F.pad(r.t(), (2, 1), mode=mode).t(), [x])


# --- value as a Tensor (rf.pad(value=Tensor)) and bool values -------------------------------------------

@pytest.mark.parametrize("pad_value", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("left,right", [(1, 2), (0, 1), (2, 0)])
def test_pad_tensor_value_per_sequence(left, right, pad_value):
    """A value per sequence (over batch) for the padded frames of dynamic time, forward and backward (the
    value gets the gradient of the frames it fills)."""
    pb = make_padded_batch((4, 2, 0, 3), feature=3, pad_value=pad_value, extra_time=1)
    value = dt.Tensor(torch.tensor([1.0, -2.0, 3.0, 0.5]), (pb.batch,))
    n_out = max(pb.lengths) + left + right

    def oracle(r, v):
        rows = []
        for b, n in enumerate(pb.lengths):
            f = r.shape[2]
            vb = v[b].expand(1, f)
            rows.append(torch.cat([vb.expand(left, f), r[b, :n], vb.expand(n_out - n - left, f)]))
        return torch.stack(rows)

    out, (d,) = dt.pad(pb.x, axes=pb.time, padding=(left, right), value=value)
    assert d is pb.time + (left + right) and out.dims == (pb.batch, d, pb.feature)
    check_against_torch(lambda t, v: dt.pad(t, axes=pb.time, padding=(left, right), value=v)[0], oracle,
                        [pb.x, value], mask_padding=False)


def test_pad_tensor_value_static_axis_and_modes():
    pb = make_padded_batch((4, 2), feature=3, pad_value=0.0)
    per_time = dt.Tensor(torch.arange(4.0), (pb.time,))
    # A static axis padded with a value over time: each time frame its own value.
    check_against_torch(lambda t, v: dt.pad(t, axes=pb.feature, padding=(1, 1), value=v)[0],
                        lambda r, v: torch.cat([v[None, :, None].expand(2, 4, 1), r, v[None, :, None].expand(2, 4, 1)],
                                               dim=2),
                        [pb.x, per_time], mask_padding=False)
    # A 0-dim value is the scalar case.
    out, _ = dt.pad(pb.x, axes=pb.time, padding=(1, 1), value=dt.Tensor(torch.tensor(-1.5), ()))
    ref, _ = dt.pad(pb.x, axes=pb.time, padding=(1, 1), value=-1.5)
    torch.testing.assert_close(out.raw, ref.raw)
    # Other modes: the value fills only the frames beyond each sequence's new end.
    per_feature = dt.Tensor(torch.tensor([7.0, 8.0, 9.0]), (pb.feature,))
    out, _ = dt.pad(pb.x, axes=pb.time, padding=(1, 1), mode="replicate", value=per_feature)
    ref, _ = dt.pad(pb.x, axes=pb.time, padding=(1, 1), mode="replicate", value=0.0)
    torch.testing.assert_close(out.raw[0], ref.raw[0])
    torch.testing.assert_close(out.raw[1, :4], ref.raw[1, :4])
    torch.testing.assert_close(out.raw[1, 4:], per_feature.raw.expand(2, 3))


def test_pad_bool_values():
    pb = make_padded_batch((4, 2), feature=1)
    x = dt.Tensor(pb.x.raw[:, :, 0] > -100, (pb.batch, pb.time))
    out, _ = dt.pad(x, axes=pb.time, padding=(1, 1), value=False)
    assert out.dtype == "bool" and out.raw.tolist() == [[False, True, True, True, True, False],
                                                        [False, True, True, False, False, False]]
    flags = dt.Tensor(torch.tensor([False, True]), (pb.batch,))
    zeros = dt.Tensor(torch.zeros(2, 4, dtype=torch.bool), (pb.batch, pb.time))
    out, _ = dt.pad(zeros, axes=pb.time, padding=(1, 0), value=flags)
    assert out.dtype == "bool" and out.raw.tolist() == [[False, False, False, False, False],
                                                        [True, False, False, True, True]]
    out, _ = dt.pad(pb.x, axes=pb.time, padding=(0, 1), value=True)  # a bool into a float tensor: 1.0
    assert out.raw[1, 2:].eq(1.0).all()


def test_pad_tensor_value_errors():
    pb = make_padded_batch((4, 2), feature=3)
    with pytest.raises(ValueError, match=r"dimtorch\.pad\(\): value has dim 'time'\[batch\], which is padded"):
        dt.pad(pb.x, axes=pb.time, padding=(1, 1), value=dt.Tensor(torch.zeros(2, 4), (pb.batch, pb.time)))
    other = dt.Dim(2, name="other")
    with pytest.raises(ValueError, match=r"dimtorch\.pad\(\): value has dim 'other'\(2\), which is not a dim of x"):
        dt.pad(pb.x, axes=pb.time, padding=(1, 1), value=dt.Tensor(torch.zeros(2), (other,)))
    with pytest.raises(TypeError, match=r"dimtorch\.pad\(\): value must be a Python number or bool, or a "
                                        r"dimtorch\.Tensor, got str"):
        dt.pad(pb.x, axes=pb.time, padding=(1, 1), value="0")
    from dimtorch.ops import pad as _pad
    for value in (True, dt.Tensor(torch.tensor([1.0, 2.0]), (pb.batch,)), dt.Tensor(torch.tensor(3.0), ())):
        fast, (d,) = dt.pad(pb.x, axes=pb.time, padding=(1, 2), value=value)  # the fast path hands these over
        slow, (d2,) = _pad.pad(pb.x, axes=pb.time, padding=(1, 2), value=value)
        assert d is d2 and torch.equal(fast.raw.nan_to_num(), slow.raw.nan_to_num())


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_pad_returnn_frontends_signature(pad):
    """RETURNN frontend's form: a list of out dims; value None is 0; out_dims= names the padded axes (each
    must have the size or lengths dim math gives: (1, 0) and (0, 1) give one dim); handle_dynamic_dims
    None/True pad about each sequence's end, False on a dynamic dim is refused. The fast path (one static or
    dynamic dim) and the definition agree; against positional torch with NaN/1e30 padding."""
    from dimtorch.ops import pad as _pad
    pb = make_padded_batch((4, 2, 1), pad_value=pad)
    for fn in (dt.pad, _pad.pad):
        y, dims = fn(pb.x, axes=[pb.time], padding=[(1, 0)])
        assert isinstance(dims, list) and dims == [pb.time + 1]
        y2, dims2 = fn(pb.x, axes=[pb.time], padding=[(0, 1)], value=None, out_dims=dims, handle_dynamic_dims=True)
        assert dims2 == dims and y2.dims == y.dims
        ys, static = fn(pb.x, axes=[pb.feature], padding=[(0, 2)], value=1.5)
        assert isinstance(static, list) and static[0].size == pb.feature.size + 2

    def oracle(x):
        out = torch.zeros(3, 5, 4, dtype=x.dtype)
        for b, n in enumerate([4, 2, 1]):
            out[b, :n] = x[b, :n]
        return out
    check_against_torch(lambda x: dt.pad(x, axes=[pb.time], padding=[(0, 1)], value=None)[0], oracle, [pb.x])
    other = dt.Dim(dt.Tensor(torch.tensor([5, 3, 2]), (pb.batch,)), name="other")
    assert dt.pad(pb.x, axes=[pb.time], padding=[(1, 0)], out_dims=[other])[1] == [other]
    wrong = dt.Dim(dt.Tensor(torch.tensor([5, 3, 3]), (pb.batch,)), name="wrong")
    with pytest.raises(ValueError, match=r"dimtorch\.pad\(\): out_dims gives 'wrong'.* whose lengths are not"):
        dt.pad(pb.x, axes=[pb.time], padding=[(1, 0)], out_dims=[wrong])
    with pytest.raises(NotImplementedError, match=r"dimtorch\.pad\(\): handle_dynamic_dims=False"):
        dt.pad(pb.x, axes=[pb.time], padding=[(0, 1)], handle_dynamic_dims=False)
    assert dt.pad(pb.x, axes=[pb.feature], padding=[(0, 1)], handle_dynamic_dims=False)[0].raw.shape[-1] == 5
