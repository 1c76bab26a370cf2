"""Tests of python/dimtorch/_pad.py: constant padding of static dims and of dynamic dims (per-sequence ends)."""
import pytest
import torch
from hypothesis import given, strategies as st
import torch.nn.functional as F

import dimtorch as dt
from helpers import check_against_torch, grads_of, make_padded_batch


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
    assert d.dyn_size.raw.tolist() == [n + left + right for n in lengths]
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
        assert d1.dyn_size.raw.tolist() == [n + 3]
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
    with pytest.raises(NotImplementedError, match=r"dimtorch\.pad\(\): mode 'reflect' is not implemented yet"):
        dt.pad(pb.x, axes=pb.feature, padding=(1, 1), mode="reflect")
    with pytest.raises(TypeError, match=r"dimtorch\.pad\(\): padding of 'feature'\(2\) must be a pair of ints"):
        dt.pad(pb.x, axes=pb.feature, padding=[(1.5, 1)])


@given(st.lists(st.integers(0, 5), min_size=1, max_size=4), st.integers(0, 3), st.integers(0, 3), st.integers(0, 2))
def test_pad_dynamic_fuzz(lengths, left, right, extra):
    if not max(lengths):
        lengths = lengths + [1]
    pb = make_padded_batch(lengths, feature=2, extra_time=extra)
    out, (d,) = dt.pad(pb.x, axes=pb.time, padding=(left, right), value=3.0)
    assert d.dyn_size.raw.tolist() == [n + left + right for n in lengths]
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
    assert b2.size is None and b2.dyn_size is None and out.dims == (b2, f)
    assert torch.equal(out.raw, F.pad(x.raw, (0, 0, 1, 0)))


def test_pad_dynamic_time_major():
    lengths = [3, 0, 2]
    pb = make_padded_batch(lengths, feature=2, extra_time=1)
    xt = pb.x.copy_transpose((pb.time, pb.feature, pb.batch))
    out, (d,) = dt.pad(xt, axes=pb.time, padding=(1, 1), value=-1.0)
    assert out.dims == (d, pb.feature, pb.batch) and d.dyn_size.raw.tolist() == [5, 2, 4]
    check_against_torch(lambda t: dt.pad(t, axes=pb.time, padding=(1, 1), value=-1.0)[0],
                        lambda r: seq_pad(r.permute(2, 0, 1), lengths, 1, 1, 5, -1.0).permute(1, 2, 0), [xt],
                        mask_padding=False)
