"""Tests of dt.nn.Linear against torch.nn.Linear (copied weights, forward and backward) and its errors."""
import pytest
import torch

import dimtorch as dt
from helpers import make_padded_batch


def _compare_grads(a, b):
    for p, q in zip(a, b):
        torch.testing.assert_close(p.grad, q.grad)


@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_vs_torch(with_bias):
    pb = make_padded_batch((5, 3, 1), feature=4, pad_value=0.0)
    out = dt.Dim(6, name="out")
    lin = dt.nn.Linear(pb.feature, out, with_bias=with_bias)
    ref = torch.nn.Linear(4, 6, bias=with_bias)
    with torch.no_grad():
        ref.weight.copy_(lin.weight.raw)
        if with_bias:
            ref.bias.copy_(lin.bias.raw)
    y = lin(pb.x)
    assert y.dims == (pb.batch, pb.time, out)
    y_ref = ref(pb.x.raw)
    torch.testing.assert_close(y.raw, y_ref)
    g = torch.randn_like(y_ref)
    (y.raw * g).sum().backward()
    (y_ref * g).sum().backward()
    _compare_grads(lin.parameters(), ref.parameters())


def test_linear_other_dims_order_and_same_in_out_dim():
    pb = make_padded_batch((4, 2), feature=3, pad_value=0.0)
    lin = dt.nn.Linear(pb.feature, pb.feature)
    x = pb.x.copy_transpose((pb.feature, pb.time, pb.batch))
    y = lin(x)
    assert set(y.dims) == {pb.batch, pb.time, pb.feature} and len(y.dims) == 3
    expect = torch.nn.functional.linear(pb.x.raw, lin.weight.raw, lin.bias.raw)
    torch.testing.assert_close(y.raw_aligned((pb.batch, pb.time, pb.feature)), expect)
    assert lin.weight.dims == (lin.weight_out_dim, pb.feature)


def test_linear_lacking_in_dim():
    pb = make_padded_batch((2,), feature=3)
    lin = dt.nn.Linear(dt.Dim(5, name="model"), dt.Dim(2, name="out"))
    with pytest.raises(ValueError,
                       match=r"Linear\(\): x lacks the in_dim 'model'\(5\) \(x dims: 'batch'.*'feature'\(3\)\)"):
        lin(pb.x)
    with pytest.raises(TypeError, match=r"Linear\(\): x must be a dimtorch.Tensor, got Tensor"):
        lin(torch.zeros(5))
