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


def test_gating_fast_path_is_the_definition():
    """dt.gating's C++ fast path (src/ops/gating.cpp: the GLU) gives the definition's dims, markers, values and
    gradients in any layout, with a given out_dim and with the defaults passed explicitly; other calls go to
    the definition (its result or error)."""
    import inspect
    import sys

    from dimtorch.ops import gating as _gating
    from fast_path_checks import both
    pb = make_padded_batch((4, 2, 0), feature=6, pad_value=PAD_NAN)
    defaults = inspect.unwrap(_gating.gating).__kwdefaults__
    for order in ((0, 1, 2), (2, 0, 1), (1, 2, 0)):
        x = pb.x.copy_transpose(tuple(pb.x.dims[i] for i in order))
        y, out = both(dt.gating, _gating.gating, x, axis=pb.feature)
        assert out is pb.feature // 2 and y.feature_dim is out
        both(dt.gating, _gating.gating, x, axis=pb.feature, gate_func=defaults["gate_func"],
             act_func=defaults["act_func"], out_dim=dt.Dim(3, name="half"))
        both(dt.gating, _gating.gating, x, axis=pb.feature, gate_func=dt.gelu)
        both(dt.gating, _gating.gating, x)
    static = dt.Dim(4, name="static")
    x = dt.Tensor(torch.randn(3, 4), (pb.batch, static), feature_dim=None)
    y, out = both(dt.gating, _gating.gating, x, axis=static)
    assert y.feature_dim is None
    grads = []
    for fn in (dt.gating, _gating.gating):
        raw = pb.x.raw.detach().clone().requires_grad_()
        y, _ = fn(dt.Tensor(raw, pb.x.dims, feature_dim=pb.feature))
        torch.nan_to_num(y.raw).sum().backward()
        grads.append(raw.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0, equal_nan=True)
    calls = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is inspect.unwrap(_gating.gating).__code__:
            calls.append(1)
    sys.setprofile(profile)
    try:
        dt.gating(pb.x)
        dt.gating(pb.x, axis=pb.feature, out_dim=dt.Dim(3, name="o"))
    finally:
        sys.setprofile(None)
    assert not calls
    with pytest.raises(TypeError, match=r"^dimtorch\.gating\(\): .*unexpected keyword argument 'dim'.*use axis="):
        dt.gating(pb.x, dim=pb.feature)
