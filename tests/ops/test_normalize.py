"""Tests of python/dimtorch/ops/normalize.py (dt.normalize) against mean/variance normalization written by hand in
torch: over the feature dim (per frame) and over time and feature (valid frames only), forward and backward on
padded batches with NaN/1e30 padding, batch independence, errors."""
import pytest
import torch

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, check_against_torch, check_batch_independence, make_padded_batch


def _per_frame(x, eps=1e-6):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt(var + eps)


def _over_time_and_feature(lengths, eps=1e-6):
    def fn(x):
        out = torch.zeros_like(x)
        for b, n in enumerate(lengths):
            seq = x[b, :n]
            mean = seq.mean() if n else seq.new_zeros(())
            var = ((seq - mean) ** 2).mean() if n else seq.new_zeros(())
            out[b, :n] = (seq - mean) * torch.rsqrt(var + eps)
        return out
    return fn


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_normalize_over_feature(pad):
    pb = make_padded_batch((5, 3, 1), 6, pad_value=pad)
    check_against_torch(lambda x: dt.normalize(x, axis=pb.feature), _per_frame, [pb.x],
                        out_dims=(pb.batch, pb.time, pb.feature), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_normalize_over_time_and_feature_uses_valid_frames_only(pad):
    pb = make_padded_batch((5, 3, 1, 0), 6, pad_value=pad)
    check_against_torch(lambda x: dt.normalize(x, axis=[pb.time, pb.feature], epsilon=1e-3),
                        _over_time_and_feature(pb.lengths, 1e-3), [pb.x], out_dims=(pb.batch, pb.time, pb.feature),
                        rtol=1e-5, atol=1e-5)
    leaf = pb.x.raw.clone().requires_grad_(True)
    dt.normalize(dt.Tensor(leaf, pb.x.dims), axis=[pb.time, pb.feature]).raw.sum().backward()
    assert torch.isfinite(leaf.grad).all()


def test_normalize_batch_independence():
    pb = make_padded_batch((5, 3, 1), 6, pad_value=PAD_NAN)
    check_batch_independence(lambda x, dm: dt.normalize(x, axis=[dm(pb.time), pb.feature]), pb.x, pb.batch, pb.time,
                             rtol=1e-5, atol=1e-6)


def test_normalize_errors():
    pb = make_padded_batch((3, 2), 6)
    with pytest.raises(ValueError, match=r"^dimtorch.normalize\(\): axis .* is not a dim of"):
        dt.normalize(pb.x, axis=dt.Dim(3, name="other"))
    with pytest.raises(ValueError, match=r"^dimtorch.normalize\(\): axis is empty"):
        dt.normalize(pb.x, axis=[])
    with pytest.raises(TypeError, match=r"^dimtorch.normalize\(\): .*use axis="):
        dt.normalize(pb.x, dim=pb.feature)
    with pytest.raises(TypeError, match=r"^dimtorch.normalize\(\): epsilon must be a number"):
        dt.normalize(pb.x, axis=pb.feature, epsilon="small")
    with pytest.raises(TypeError, match=r"^dimtorch.normalize\(\)"):
        dt.normalize(pb.x.raw, axis=pb.feature)
