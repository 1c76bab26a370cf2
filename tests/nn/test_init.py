"""Tests of dt.nn.init: fan-in/fan-out conventions and the statistics of each initializer."""
import math

import pytest
import torch

import dimtorch as dt
from dimtorch.nn import init


def test_compute_fans_conventions():
    o, i, k = dt.Dim(6, name="out"), dt.Dim(4, name="in"), dt.Dim(3, name="kernel")
    assert init.compute_fans((o, i)) == (4, 6)  # torch layout: (out, in)
    assert init.compute_fans((o, i, k)) == (12, 18)  # receptive field multiplies both
    assert init.compute_fans((o,)) == (6, 6)
    assert init.compute_fans((i, o), in_dims=(i,)) == (4, 6)  # any order with in_dims
    assert init.compute_fans((k, i, o), in_dims=(i,), out_dims=(o,)) == (12, 18)
    with pytest.raises(ValueError, match="in_dims has"):
        init.compute_fans((o,), in_dims=(i,))


@pytest.mark.parametrize("make, expect_std", [
    (lambda: init.GlorotUniform(), math.sqrt(2 / (200 + 300))),
    (lambda: init.GlorotNormal(), math.sqrt(2 / (200 + 300))),
    (lambda: init.HeNormal(), math.sqrt(2 / 200)),
    (lambda: init.HeUniform(), math.sqrt(2 / 200)),
    (lambda: init.VarianceScaling(1.0, "fan_in", "truncated_normal"), math.sqrt(1 / 200)),
    (lambda: init.Normal(0.02), 0.02),
])
def test_initializer_statistics(make, expect_std):
    o, i = dt.Dim(300, name="out"), dt.Dim(200, name="in")
    torch.manual_seed(0)
    p = dt.nn.Parameter((o, i), init=make(), in_dims=(i,))
    assert p.raw.shape == (300, 200)
    assert abs(p.raw.std().item() / expect_std - 1) < 0.03
    assert abs(p.raw.mean().item()) < 0.01 * expect_std * 10


def test_glorot_uniform_limit_and_constants():
    o, i = dt.Dim(30, name="out"), dt.Dim(20, name="in")
    raw = init.Glorot()((o, i))
    assert raw.abs().max() <= math.sqrt(6 / 50)
    assert torch.equal(init.Zeros()((o,)), torch.zeros(30))
    assert torch.equal(init.Ones()((o,), torch.float64), torch.ones(30, dtype=torch.float64))
    u = init.Uniform(-1, 2)((o, i))
    assert u.min() >= -1 and u.max() <= 2
    with pytest.raises(ValueError, match="mode must be"):
        init.VarianceScaling(1.0, "fan_x")
