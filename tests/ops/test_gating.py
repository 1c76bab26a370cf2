"""Tests of python/dimtorch/ops/gating.py (dt.gating) against torch's GLU, forward and backward with NaN padding,
other gate/act functions, errors."""
import pytest
import torch
import torch.nn.functional as F

import dimtorch as dt
from helpers import PAD_NAN, check_against_torch, make_padded_batch


def test_gating_is_glu():
    pb = make_padded_batch((4, 2, 0), feature=6, pad_value=PAD_NAN)
    y_dims = []

    def run(x):
        y, out = dt.gating(x)
        y_dims.append(out)
        return y

    check_against_torch(run, lambda r: F.glu(r, dim=-1), [pb.x], rtol=1e-5, atol=1e-6)
    assert y_dims[0] is pb.feature // 2
    check_against_torch(lambda x: dt.gating(x.copy_transpose((pb.feature, pb.batch, pb.time)), axis=pb.feature,
                                            gate_func=dt.gelu, act_func=dt.tanh)[0],
                        lambda r: torch.tanh(r[..., :3]) * F.gelu(r[..., 3:]), [pb.x],
                        out_dims=(pb.batch, pb.time, pb.feature // 2), rtol=1e-5, atol=1e-6)


def test_gating_errors():
    pb = make_padded_batch((2,), feature=5)
    with pytest.raises(ValueError, match=r"dimtorch\.gating\(\): axis 'feature'\(5\) must be static and even"):
        dt.gating(pb.x)
    with pytest.raises(ValueError, match=r"dimtorch\.gating\(\): x has no feature_dim; give axis"):
        dt.gating(dt.Tensor(pb.x.raw, pb.x.dims))
    pb = make_padded_batch((2,), feature=4)
    with pytest.raises(ValueError, match=r"dimtorch\.gating\(\): out_dim must be a Dim of size 2"):
        dt.gating(pb.x, out_dim=dt.Dim(3, name="o"))
