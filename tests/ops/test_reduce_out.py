"""Tests of python/dimtorch/ops/reduce_out.py: reduce_out (maxout and friends) against torch's view + reduce, forward
and backward, on padded batches (NaN / 1e30 padding), per sequence alone, and errors."""
import pytest
import torch

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, make_padded_batch

TORCH = {"max": lambda r: r.amax(-1), "min": lambda r: r.amin(-1), "sum": lambda r: r.sum(-1),
         "mean": lambda r: r.mean(-1)}


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("mode", list(TORCH))
def test_reduce_out_against_torch(mode, pad):
    lengths = (5, 3, 0)
    pb = make_padded_batch(lengths, feature=6, pad_value=pad)
    raw = pb.x.raw.clone().requires_grad_(True)
    y = dt.reduce_out(dt.Tensor(raw, pb.x.dims, feature_dim=pb.feature), mode=mode, num_pieces=3)
    assert y.dims[:2] == (pb.batch, pb.time) and y.feature_dim is y.dims[2] and y.dims[2].size == 2
    expected = TORCH[mode](raw.reshape(3, 5, 2, 3))  # consecutive features form a group, as rf's split_dims
    m = pb.mask
    torch.testing.assert_close(y.raw[m], expected[m])
    cot = torch.randn(y.raw.shape)
    (g,) = torch.autograd.grad(y.raw, raw, torch.where(m[:, :, None], cot, 0.0))
    (g_ref,) = torch.autograd.grad(expected, raw, torch.where(m[:, :, None], cot, 0.0))
    torch.testing.assert_close(g[m], g_ref[m])
    for b, n in enumerate(lengths):  # each sequence alone
        alone = dt.Tensor(raw.detach()[b:b + 1, :n], make_padded_batch((n,), feature=6).x.dims, feature_dim=None)
        alone = dt.Tensor(alone.raw, alone.dims, feature_dim=alone.dims[2])
        torch.testing.assert_close(dt.reduce_out(alone, mode=mode, num_pieces=3).raw[0], y.raw[b, :n].detach())


def test_out_dim_given_and_default_is_stable():
    pb = make_padded_batch((2,), feature=4)
    a = dt.reduce_out(pb.x, mode="max", num_pieces=2)
    assert dt.reduce_out(pb.x, mode="sum", num_pieces=2).feature_dim is a.feature_dim
    out = dt.Dim(2, name="readout")
    assert dt.reduce_out(pb.x, mode="max", num_pieces=2, out_dim=out).feature_dim is out


def test_errors():
    pb = make_padded_batch((2,), feature=4)
    no_feature = dt.Tensor(pb.x.raw, pb.x.dims)
    with pytest.raises(ValueError, match=r"dimtorch\.reduce_out\(\): source has no feature_dim"):
        dt.reduce_out(no_feature, mode="max", num_pieces=2)
    with pytest.raises(ValueError, match=r"dimtorch\.reduce_out\(\): mode must be one of"):
        dt.reduce_out(pb.x, mode="logsumexp", num_pieces=2)
    with pytest.raises(ValueError, match=r"must be static and a multiple of num_pieces=3"):
        dt.reduce_out(pb.x, mode="max", num_pieces=3)
    with pytest.raises(ValueError, match=r"out_dim must be a Dim of size 2"):
        dt.reduce_out(pb.x, mode="max", num_pieces=2, out_dim=dt.Dim(3, name="o"))
