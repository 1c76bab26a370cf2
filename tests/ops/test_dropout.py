"""Tests of python/dimtorch/ops/dropout.py: per-element dropout (F.dropout) and masks shared over dims."""
import pytest
import torch
import torch.nn.functional as F

import dimtorch as dt
from helpers import make_padded_batch


def big_batch():
    batch, time, feat = dt.Dim(None, name="batch"), dt.Dim(40, name="time"), dt.Dim(30, name="feature")
    raw = torch.rand(6, 40, 30) + 1.0  # never 0: a 0 in the output means dropped
    return batch, time, feat, dt.Tensor(raw, (batch, time, feat), feature_dim=feat)


def test_identity_cases():
    pb = make_padded_batch((3, 2))
    assert dt.dropout(pb.x, 0.0) is pb.x
    assert dt.dropout(pb.x, 0.5, training=False) is pb.x
    assert dt.dropout(pb.x, 0.0, axis=pb.feature) is pb.x


def test_per_element_is_f_dropout():
    _, _, _, x = big_batch()
    torch.manual_seed(3)
    y = dt.dropout(x, 0.3)
    torch.manual_seed(3)
    expect = F.dropout(x.raw, 0.3, True)
    assert torch.equal(y.raw, expect)
    assert y.dims == x.dims and y.feature_dim is x.feature_dim


@pytest.mark.parametrize("which", ["feature", "batch_feature", "time"])
def test_mask_shared_over_other_dims(which):
    batch, time, feat, x = big_batch()
    axis = {"feature": feat, "batch_feature": (batch, feat), "time": [time]}[which]
    p = 0.4
    y = dt.dropout(x, p, axis=axis)
    kept = y.raw != 0
    axes = {"feature": (0, 1), "batch_feature": (1,), "time": (0, 2)}[which]
    for a in axes:  # the same decision along every dim not in axis
        assert torch.equal(kept, kept.narrow(a, 0, 1).expand_as(kept))
    torch.testing.assert_close(y.raw[kept], x.raw[kept] / (1 - p))
    frac = 1 - kept.float().mean().item()
    assert 0.1 < frac < 0.7  # loose: few independent draws for one dim


def test_drop_rate_and_grad():
    batch, time, feat, x = big_batch()
    leaf = x.raw.clone().requires_grad_(True)
    y = dt.dropout(dt.Tensor(leaf, x.dims), 0.25, axis=(batch, time))
    y.raw.sum().backward()
    kept = y.raw.detach() != 0
    assert abs((1 - kept.float().mean().item()) - 0.25) < 0.08
    torch.testing.assert_close(leaf.grad, kept.float() / 0.75)


@pytest.mark.parametrize("axis", [None, "feature"])
def test_p_one_gives_zeros_without_nan(axis):
    _, _, feat, x = big_batch()
    leaf = x.raw.clone().requires_grad_(True)
    y = dt.dropout(dt.Tensor(leaf, x.dims), 1.0, axis=feat if axis else None)
    assert torch.equal(y.raw, torch.zeros_like(y.raw))
    y.raw.sum().backward()
    assert torch.equal(leaf.grad, torch.zeros_like(leaf))


def test_bad_input():
    pb = make_padded_batch((3, 2))
    with pytest.raises(ValueError, match=r"dimtorch\.dropout\(\): p must be in \[0, 1\], got 1\.5"):
        dt.dropout(pb.x, 1.5)
    with pytest.raises(ValueError, match=r"dimtorch\.dropout\(\): p must be in \[0, 1\], got -0\.1"):
        dt.dropout(pb.x, -0.1)
    with pytest.raises(TypeError, match=r"dimtorch\.dropout\(\): p must be a Python float"):
        dt.dropout(pb.x, torch.tensor(0.5))
    with pytest.raises(ValueError, match=r"dimtorch\.dropout\(\): dim .*'other'.* is not in x \(dims: batch:2, time:3, feature:4\)"):
        dt.dropout(pb.x, 0.5, axis=dt.Dim(3, name="other"))
    with pytest.raises(TypeError, match=r"dimtorch\.dropout\(\): x must be a dimtorch\.Tensor"):
        dt.dropout(pb.x.raw, 0.5)
