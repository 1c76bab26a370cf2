"""Tests of python/dimtorch/ops/slice_update.py (slice_update, expand_make_non_empty) and assert_.py (assert_) against
torch by hand, forward and backward, and errors."""
import warnings

import pytest
import torch

import dimtorch as dt


def _dims():
    return dt.Dim(2, name="b"), dt.Dim(5, name="t"), dt.Dim(3, name="f")


@pytest.mark.parametrize("start", [2, -1, "tensor"])
def test_slice_update_against_torch(start):
    b, t, f = _dims()
    target = torch.randn(2, 5, 3, requires_grad=True)
    value = torch.randn(3, 2, requires_grad=True)  # (f, b): aligned by dims
    pos = dt.Tensor(torch.tensor(3), ()) if start == "tensor" else start
    out = dt.slice_update(dt.Tensor(target, (b, t, f)), dt.Tensor(value, (f, b)), axis=t, start=pos)
    i = 3 if start == "tensor" else start % 5
    expected = target.clone()
    expected[:, i] = value.T
    torch.testing.assert_close(out.raw, expected)
    assert out.dims == (b, t, f)
    cot = torch.randn(2, 5, 3)
    g_target, g_value = torch.autograd.grad(out.raw, (target, value), cot)
    masked = cot.clone()
    masked[:, i] = 0
    torch.testing.assert_close(g_target, masked)
    torch.testing.assert_close(g_value, cot[:, i].T)


def test_slice_update_broadcasts_value():
    b, t, f = _dims()
    out = dt.slice_update(dt.zeros((b, t, f)), dt.Tensor(torch.tensor([1.0, 2.0, 3.0]), (f,)), axis=t, start=0)
    torch.testing.assert_close(out.raw[:, 0], torch.tensor([[1.0, 2.0, 3.0]] * 2))


def test_expand_make_non_empty():
    b, t, f = _dims()
    x = dt.zeros((b, t))
    assert dt.expand_make_non_empty(x, axis=t) == (x, t)
    e = dt.Dim(dt.Tensor(torch.tensor([0, 0]), (b,)), name="e")
    y, out = dt.expand_make_non_empty(dt.Tensor(torch.zeros(2, 0, 3), (b, e, f)), axis=e)
    assert y.dims == (b, out, f) and y.raw.shape == (2, 1, 3) and out.lengths.raw.tolist() == [1, 1]
    empty = dt.Dim(0, name="empty")
    z, one = dt.expand_make_non_empty(dt.Tensor(torch.zeros(0), (empty,)), axis=empty)
    assert one.size == 1 and z.raw.tolist() == [0.0]


def test_assert_():
    b, t, _ = _dims()
    lengths = dt.Dim(dt.Tensor(torch.tensor([2, 1]), (b,)), name="len")
    dt.assert_(True, "fine")
    dt.assert_(dt.Tensor(torch.tensor([[True, True], [True, False]]), (b, lengths)), "padding counts as True")
    with pytest.raises(AssertionError, match="^bad bool$"):
        dt.assert_(False, "bad bool")
    with pytest.raises(RuntimeError, match=r"bad value"):  # CPU: torch._assert_async fails at once
        dt.assert_(dt.Tensor(torch.tensor([[True, False], [True, False]]), (b, lengths)), "bad value")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dt.assert_(dt.Tensor(torch.tensor(False), ()), "only a warning", stop=False)
    assert any("only a warning" in str(w.message) for w in caught)


def test_errors():
    b, t, f = _dims()
    x = dt.zeros((b, t, f))
    with pytest.raises(ValueError, match=r"slice_update\(\): value must not have axis 't'\(5\)"):
        dt.slice_update(x, x, axis=t, start=0)
    with pytest.raises(IndexError, match=r"slice_update\(\): start 5 is out of range for 't'\(5\)"):
        dt.slice_update(x, dt.zeros((b, f)), axis=t, start=5)
    with pytest.raises(TypeError, match=r"slice_update\(\): start must be an int or a 0-dim integer Tensor"):
        dt.slice_update(x, dt.zeros((b, f)), axis=t, start=dt.Tensor(torch.tensor([1, 2]), (b,)))
    with pytest.raises(TypeError, match=r"assert_\(\): condition must be a bool Tensor, got float32"):
        dt.assert_(x, "m")
    with pytest.raises(TypeError, match=r"assert_\(\): message must be a str"):
        dt.assert_(True, 3)
