"""Tests of python/dimtorch/_stack.py: split, stack, unstack against torch.split/stack/unbind."""
import pytest
import torch

import dimtorch as dt
from helpers import check_against_torch, make_padded_batch


def test_split_static_and_on_padded_batch():
    pb = make_padded_batch([4, 2], feature=5)
    a, b = dt.Dim(2, name="a"), dt.Dim(3, name="b")
    ya, yb = dt.split(pb.x, axis=pb.feature, out_dims=(a, b))
    assert ya.dims == (pb.batch, pb.time, a) and yb.dims == (pb.batch, pb.time, b)
    check_against_torch(lambda t: dt.split(t, axis=pb.feature, out_dims=(a, b)),
                        lambda r: list(torch.split(r, [2, 3], dim=2)), [pb.x])


def test_split_errors():
    pb = make_padded_batch([4, 2], feature=5)
    with pytest.raises(ValueError, match=r"dimtorch\.split\(\): the sizes of out_dims \('a'\(2\), 'b'\(2\)\) add up "
                                         r"to 4, not to the size 5 of axis 'feature'\(5\)"):
        dt.split(pb.x, axis=pb.feature, out_dims=(dt.Dim(2, name="a"), dt.Dim(2, name="b")))
    with pytest.raises(ValueError, match=r"dimtorch\.split\(\): axis 'time'\[batch\] is dynamic"):
        dt.split(pb.x, axis=pb.time, out_dims=(dt.Dim(2, name="a"), dt.Dim(2, name="b")))
    with pytest.raises(ValueError, match=r"dimtorch\.split\(\): axis 'c'\(5\) is not a dim of x"):
        dt.split(pb.x, axis=dt.Dim(5, name="c"), out_dims=(dt.Dim(5, name="a"),))


def test_stack_aligns_dims_and_unstack_inverts():
    pb = make_padded_batch([4, 2], feature=3)
    other = dt.Tensor(torch.randn(3, 2, 4), (pb.feature, pb.batch, pb.time))
    y, d = dt.stack([pb.x, other])
    assert d.size == 2 and y.dims == (d, pb.batch, pb.time, pb.feature)
    check_against_torch(lambda s, t: dt.stack([s, t], out_dim=d)[0], lambda r, q: torch.stack([r, q.permute(1, 2, 0)]),
                        [pb.x, other], expect_dims=(d, pb.batch, pb.time, pb.feature))
    parts = dt.unstack(y, axis=d)
    assert [p.dims for p in parts] == [pb.x.dims] * 2
    torch.testing.assert_close(parts[1].raw, other.raw.permute(1, 2, 0), equal_nan=True)
    check_against_torch(lambda t: dt.unstack(t, axis=pb.feature), lambda r: list(torch.unbind(r, 2)), [pb.x])
    k = dt.Dim(2, name="k")
    assert dt.stack([pb.x, pb.x], out_dim=k)[1] is k


def test_stack_errors():
    a, b = dt.Dim(2, name="a"), dt.Dim(3, name="b")
    x, y = dt.Tensor(torch.randn(2), (a,)), dt.Tensor(torch.randn(3), (b,))
    with pytest.raises(ValueError, match=r"dimtorch\.stack\(\): tensors\[1\] has dims \('b'\(3\)\), tensors\[0\] has "
                                         r"\('a'\(2\)\); all must have the same dims"):
        dt.stack([x, y])
    with pytest.raises(ValueError, match=r"dimtorch\.stack\(\): out_dim 'b'\(3\) does not fit 2 tensors"):
        dt.stack([x, x], out_dim=b)
    with pytest.raises(TypeError, match=r"dimtorch\.stack\(\): tensors\[1\] has dtype int64, tensors\[0\] has float32"):
        dt.stack([x, dt.Tensor(torch.zeros(2, dtype=torch.int64), (a,))])
    with pytest.raises(ValueError, match=r"dimtorch\.stack\(\): no tensors to stack"):
        dt.stack([])
    pb = make_padded_batch([2, 1], feature=2)
    with pytest.raises(ValueError, match=r"dimtorch\.unstack\(\): axis 'time'\[batch\] is dynamic"):
        dt.unstack(pb.x, axis=pb.time)
