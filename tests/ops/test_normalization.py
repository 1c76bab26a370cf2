"""Tests of the normalization family (python/dimtorch/ops/normalization.py, src/ops/normalization.cpp): moments,
batch_norm, layer_norm and rms_norm against torch, masked and fused."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import dimtorch as dt
from helpers import (PAD_LARGE, PAD_NAN, align_raw, check_against_torch, check_batch_independence,
                     check_padding_invariance, make_padded_batch)


def torch_moments(raw, mask, axes):
    """Hand-written masked biased mean and variance."""
    mask = mask.expand(raw.shape)
    count = mask.sum(axes, keepdim=True).clamp(min=1)
    xm = torch.where(mask, raw, 0)
    mean = xm.sum(axes, keepdim=True) / count
    var = torch.where(mask, (xm - mean) ** 2, 0).sum(axes, keepdim=True) / count
    return mean.squeeze(axes), var.squeeze(axes)


# ---- moments ----

@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("case", ["time", "batch_time", "feature", "time_feature", "batch"])
def test_moments_against_torch(case, pad):
    pb = make_padded_batch((5, 3, 1), pad_value=pad, extra_time=1)
    b, t, f = pb.batch, pb.time, pb.feature
    dims, axes, masked = {"time": ((t,), (1,), True), "batch_time": ((b, t), (0, 1), True),
                          "feature": ((f,), (2,), False), "time_feature": ((t, f), (1, 2), True),
                          "batch": ((b,), (0,), True)}[case]
    mask = pb.mask[:, :, None] if masked else torch.ones((1, 1, 1), dtype=torch.bool)
    check_against_torch(lambda x: dt.moments(x, axis=dims), lambda r: torch_moments(r, mask, axes), [pb.x])


def test_moments_unmasked_equals_var_mean():
    pb = make_padded_batch((5, 3), pad_value=0.0)
    mean, var = dt.moments(pb.x, axis=pb.time, use_mask=False)
    v, m = torch.var_mean(pb.x.raw, 1, correction=0)
    torch.testing.assert_close(mean.raw, m)
    torch.testing.assert_close(var.raw, v)
    assert mean.dims == (pb.batch, pb.feature) and mean.feature_dim is pb.feature


def test_moments_padding_invariance_and_length_zero():
    outs, _ = check_padding_invariance(lambda x: dt.moments(x, axis=x.dims[1]), (5, 3, 0, 1))
    mean, var = outs
    assert (mean[2] == 0).all() and (var[2] == 0).all()  # length 0: neutral, no NaN
    assert (var[3] == 0).all()  # length 1: one frame has no variance
    assert not mean.isnan().any() and not var.isnan().any()


def test_moments_batch_independence():
    pb = make_padded_batch((6, 3, 1, 0), pad_value=PAD_NAN, extra_time=1)
    check_batch_independence(lambda x, m: dt.moments(x, axis=m(pb.time)), pb.x, pb.batch, pb.time)


def test_moments_bad_input():
    pb = make_padded_batch((3, 2))
    with pytest.raises(ValueError, match=r"dimtorch\.moments\(\): dim .*'other'.* is not in x \(dims: batch:2, time:3, feature:4\)"):
        dt.moments(pb.x, axis=dt.Dim(2, name="other"))
    with pytest.raises(ValueError, match=r"dimtorch\.moments\(\): axis must name at least one dim"):
        dt.moments(pb.x, axis=())
    x = dt.Tensor(pb.x.raw[0], (pb.time, pb.feature))
    with pytest.raises(ValueError, match=r"dimtorch\.moments\(\): the lengths of dim .*time.* are over .*batch"):
        dt.moments(x, axis=pb.time)


# ---- batch_norm ----

def params(feat, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [dt.Tensor(torch.randn(feat.size, generator=g), (feat,)) for _ in range(2)]


def packed_batch_norm(mask, rm=None, rv=None, training=True, momentum=0.1, eps=1e-5):
    """Oracle: F.batch_norm on the valid frames only (packed), scattered back to the padded layout."""
    def fn(raw, w, b):
        out = torch.zeros_like(raw)
        out = out.masked_scatter(mask[:, :, None].expand_as(raw),
                                 F.batch_norm(raw[mask], rm, rv, w, b, training, momentum, eps))
        return out
    return fn


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("lengths", [(5, 3, 1), (5, 3, 0, 1), (4, 4)])
def test_batch_norm_masked_against_packed_torch(pad, lengths):
    pb = make_padded_batch(lengths, pad_value=pad, extra_time=1)
    w, b = params(pb.feature)
    rm = dt.Tensor(torch.randn(4), (pb.feature,))
    rv = dt.Tensor(torch.rand(4) + 0.5, (pb.feature,))
    rm_t, rv_t = rm.raw.clone(), rv.raw.clone()
    check_against_torch(lambda x, w, b: dt.batch_norm(x, running_mean=rm, running_var=rv, weight=w, bias=b),
                        packed_batch_norm(pb.mask, rm_t, rv_t), [pb.x, w, b], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(rm.raw, rm_t)
    torch.testing.assert_close(rv.raw, rv_t)  # unbiased running variance, as F.batch_norm


def _aten_ops(fn) -> set:
    """Names of the aten ops that fn() runs (CPU profiler)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return {e.name for e in prof.events()}


def test_batch_norm_masked_does_not_call_fused():
    pb = make_padded_batch((5, 2), pad_value=PAD_NAN)
    y = dt.batch_norm(pb.x)
    assert not y.raw[pb.mask].isnan().any()
    assert "aten::batch_norm" not in _aten_ops(lambda: dt.batch_norm(pb.x))
    assert "aten::batch_norm" in _aten_ops(lambda: dt.batch_norm(pb.x, use_mask=False))


@settings(max_examples=20)
@given(perm=st.permutations([0, 1, 2]), seed=st.integers(0, 100), training=st.booleans(),
       affine=st.booleans())
def test_batch_norm_static_is_fused_torch(perm, seed, training, affine):
    """No dynamic dims: F.batch_norm with the feature axis at position 1, any dims order."""
    batch, time, feat = dt.Dim(None, name="batch"), dt.Dim(5, name="time"), dt.Dim(3, name="feature")
    g = torch.Generator().manual_seed(seed)
    canon = torch.randn(2, 5, 3, generator=g)  # (batch, time, feat)
    dims = [(batch, time, feat)[i] for i in perm]
    x = dt.Tensor(canon.permute(*perm), tuple(dims), feature_dim=feat)
    w, b = params(feat, seed) if affine else (None, None)
    rm, rv = dt.Tensor(torch.zeros(3), (feat,)), dt.Tensor(torch.ones(3), (feat,))
    rm_t, rv_t = torch.zeros(3), torch.ones(3)

    def oracle(raw, *wb):
        c = align_raw(raw, dims, (batch, feat, time))
        out = F.batch_norm(c, rm_t, rv_t, *(wb or (None, None)), training=training, momentum=0.2)
        return align_raw(out, (batch, feat, time), dims)

    inputs = [x] + ([w, b] if affine else [])
    check_against_torch(lambda x, *wb: dt.batch_norm(x, running_mean=rm, running_var=rv,
                                                     weight=wb[0] if wb else None, bias=wb[1] if wb else None,
                                                     training=training, momentum=0.2),
                        oracle, inputs, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(rm.raw, rm_t)
    torch.testing.assert_close(rv.raw, rv_t)


def test_batch_norm_eval_uses_running_stats():
    pb = make_padded_batch((5, 3, 0), pad_value=PAD_NAN)
    rm = dt.Tensor(torch.randn(4), (pb.feature,))
    rv = dt.Tensor(torch.rand(4) + 0.5, (pb.feature,))
    w, b = params(pb.feature)
    before = rm.raw.clone(), rv.raw.clone()
    check_against_torch(
        lambda x, w, b: dt.batch_norm(x, running_mean=rm, running_var=rv, weight=w, bias=b, training=False),
        lambda r, w, b: F.batch_norm(r.transpose(1, 2), before[0], before[1], w, b, False).transpose(1, 2),
        [pb.x, w, b])
    assert torch.equal(rm.raw, before[0]) and torch.equal(rv.raw, before[1])


def test_batch_norm_default_axis_and_dims():
    pb = make_padded_batch((3, 2))
    y = dt.batch_norm(pb.x)
    assert y.dims == pb.x.dims and y.feature_dim is pb.feature
    y2 = dt.batch_norm(pb.x, axis=pb.feature)
    torch.testing.assert_close(y.raw[pb.mask], y2.raw[pb.mask])


def test_batch_norm_padding_invariance_and_finite_grads():
    check_padding_invariance(lambda x: dt.batch_norm(x), (5, 3, 0, 1), rtol=1e-4, atol=1e-5)


def test_batch_norm_over_two_dynamic_dims():
    """Statistics over batch and two dynamic dims: only frames valid in both count."""
    batch, feat = dt.Dim(None, name="batch"), dt.Dim(2, name="feature")
    t = dt.Dim(dt.Tensor(torch.tensor([3, 1]), (batch,)), name="t")
    u = dt.Dim(dt.Tensor(torch.tensor([2, 2]), (batch,)), name="u")
    raw = torch.randn(2, 3, 2, 2)
    mask = (torch.arange(3)[None, :, None] < torch.tensor([3, 1])[:, None, None]) & \
           (torch.arange(2)[None, None, :] < torch.tensor([2, 2])[:, None, None])
    raw[~mask] = float("nan")
    x = dt.Tensor(raw, (batch, t, u, feat))
    y = dt.batch_norm(x, axis=feat)
    expect = F.batch_norm(raw[mask], None, None, training=True)
    torch.testing.assert_close(y.raw[mask], expect, rtol=1e-4, atol=1e-5)
    # With running stats, weight and bias (the frame count is a device tensor here, not a host total).
    w, b = params(feat, seed=1)
    rm, rv = dt.Tensor(torch.randn(2), (feat,)), dt.Tensor(torch.rand(2) + 0.5, (feat,))
    rm_t, rv_t = rm.raw.clone(), rv.raw.clone()
    y = dt.batch_norm(x, axis=feat, running_mean=rm, running_var=rv, weight=w, bias=b, momentum=0.3)
    expect = F.batch_norm(raw[mask], rm_t, rv_t, w.raw, b.raw, True, 0.3)
    torch.testing.assert_close(y.raw[mask], expect, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(rm.raw, rm_t)
    torch.testing.assert_close(rv.raw, rv_t)


@pytest.mark.parametrize("order", [(2, 0, 1), (1, 2, 0), (0, 2, 1)])
def test_batch_norm_masked_feature_axis_anywhere(order):
    """Masked statistics whatever the position of the feature axis (the output keeps x's dims)."""
    pb = make_padded_batch((5, 3, 1), pad_value=PAD_NAN)
    w, b = params(pb.feature)
    x = pb.x.copy_transpose([pb.x.dims[i] for i in order])
    y = dt.batch_norm(x, weight=w, bias=b)
    assert y.dims == x.dims and y.feature_dim is pb.feature
    expect = packed_batch_norm(pb.mask)(pb.x.raw, w.raw, b.raw)
    torch.testing.assert_close(y.copy_transpose(pb.x.dims).raw[pb.mask], expect[pb.mask])


def test_batch_norm_bad_input():
    pb = make_padded_batch((3, 2))
    x = dt.Tensor(pb.x.raw, pb.x.dims)  # no feature_dim
    with pytest.raises(ValueError, match=r"dimtorch\.batch_norm\(\): x has no feature_dim; pass axis= \(dims: batch:2, time:3, feature:4\)"):
        dt.batch_norm(x)
    with pytest.raises(TypeError, match=r"dimtorch\.batch_norm\(\): axis must be one Dim \(the feature dim\), got tuple"):
        dt.batch_norm(pb.x, axis=(pb.feature,))
    with pytest.raises(ValueError, match=r"dimtorch\.batch_norm\(\): axis .*time.* has lengths"):
        dt.batch_norm(pb.x, axis=pb.time)
    with pytest.raises(ValueError, match=r"dimtorch\.batch_norm\(\): training=False needs running_mean"):
        dt.batch_norm(pb.x, training=False)
    rm = dt.Tensor(torch.zeros(4), (pb.feature,))
    with pytest.raises(ValueError, match=r"dimtorch\.batch_norm\(\): give both running_mean and running_var"):
        dt.batch_norm(pb.x, running_mean=rm)
    bad = dt.Tensor(torch.zeros(2), (dt.Dim(2, name="g"),))
    with pytest.raises(ValueError, match=r"dimtorch\.batch_norm\(\): weight must have dims \(.*feature"):
        dt.batch_norm(pb.x, weight=bad)
    with pytest.raises(TypeError, match=r"dimtorch\.batch_norm\(\): bias must be a dimtorch\.Tensor over \('feature'\(4\),\), got Tensor"):
        dt.batch_norm(pb.x, bias=torch.zeros(4))
    with pytest.raises(TypeError, match=r"dimtorch\.batch_norm\(\): x must be a dimtorch\.Tensor, got Tensor"):
        dt.batch_norm(pb.x.raw)
    with pytest.raises(TypeError, match=r"dimtorch\.batch_norm\(\): momentum must be a float, got NoneType"):
        dt.batch_norm(pb.x, momentum=None)
    with pytest.raises(ValueError, match=r"dimtorch\.batch_norm\(\): dim .*'g'.* is not in x"):
        dt.batch_norm(pb.x, axis=bad.dims[0])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("case", ["time", "batch_time"])
def test_moments_and_batch_norm_keep_the_dtype(dtype, case):
    pb = make_padded_batch((5, 3, 0, 1), pad_value=PAD_NAN, dtype=dtype)
    axis = pb.time if case == "time" else (pb.batch, pb.time)
    mean, var = dt.moments(pb.x, axis=axis)
    assert mean.raw.dtype == dtype and var.raw.dtype == dtype
    ref_mean, ref_var = dt.moments(dt.Tensor(pb.x.raw.float(), pb.x.dims), axis=axis)
    tol = {torch.float16: 1e-2, torch.bfloat16: 5e-2, torch.float64: 1e-6}[dtype]
    torch.testing.assert_close(mean.raw.float(), ref_mean.raw, rtol=tol, atol=tol)
    torch.testing.assert_close(var.raw.float(), ref_var.raw, rtol=tol, atol=tol)
    assert dt.batch_norm(pb.x).raw.dtype == dtype


# ---- layer_norm / rms_norm (src/ops/normalization.cpp) ----

def torch_rms_norm(raw, shape, weight, eps):
    axes = tuple(range(raw.dim() - len(shape), raw.dim()))
    out = raw * torch.rsqrt(raw.pow(2).mean(axes, keepdim=True) + eps)
    return out * weight if weight is not None else out


@settings(max_examples=20)
@given(perm=st.permutations([0, 1, 2, 3]), two_axes=st.booleans(), affine=st.booleans(),
       rms=st.booleans(), seed=st.integers(0, 100))
def test_norm_dim_orders_fuzzed(perm, two_axes, affine, rms, seed):
    """Any dims order, one or two normalized dims, affine params over them in any order."""
    pb = make_padded_batch((4, 2), pad_value=PAD_NAN, seed=seed)
    g = dt.Dim(2, name="g")
    canon_dims = (pb.batch, pb.time, g, pb.feature)
    canon = torch.randn(2, 4, 2, 4, generator=torch.Generator().manual_seed(seed))
    canon[1, 2:] = float("nan")
    dims = tuple(canon_dims[i] for i in perm)
    x = dt.Tensor(canon.permute(*perm), dims)
    axis = (pb.feature, g) if two_axes else (pb.feature,)
    norm_shape = tuple(d.size for d in axis)
    p_dims = tuple(reversed(axis))  # params in another order than axis
    weight = dt.Tensor(torch.randn(*[d.size for d in p_dims]), p_dims) if affine else None
    bias = dt.Tensor(torch.randn(*[d.size for d in p_dims]), p_dims) if affine and not rms else None
    rest = tuple(d for d in dims if d not in axis)
    expect_dims = rest + axis

    def oracle(xr, *params):
        c = align_raw(xr, dims, expect_dims)
        ps = [align_raw(p, p_dims, axis) for p in params]
        if rms:
            return torch_rms_norm(c, norm_shape, ps[0] if ps else None, 1e-6)
        return F.layer_norm(c, norm_shape, *ps, eps=1e-5)

    inputs = [x] + [p for p in (weight, bias) if p is not None]
    if rms:
        fn = lambda x, *p: dt.rms_norm(x, axis=axis, weight=p[0] if p else None)  # noqa: E731
    else:
        fn = lambda x, *p: dt.layer_norm(x, axis=axis, weight=p[0] if p else None,  # noqa: E731
                                         bias=p[1] if p else None)
    check_against_torch(fn, oracle, inputs, expect_dims=expect_dims, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
def test_norm_per_frame_with_padding(name):
    # Per-frame op: with NaN padding the valid outputs and valid x gradients are unchanged.
    fn = lambda x: getattr(dt, name)(x, axis=x.feature_dim)  # noqa: E731
    check_padding_invariance(fn, (5, 3, 0, 1), finite_grads=False, rtol=1e-5, atol=1e-5)
    pb = make_padded_batch((5, 3, 1), pad_value=PAD_NAN)
    check_batch_independence(lambda x, m: fn(x), pb.x, pb.batch, pb.time)


def test_norm_eps_and_defaults():
    pb = make_padded_batch((3, 3), pad_value=0.0)
    y = dt.layer_norm(pb.x, axis=pb.feature, eps=0.5)
    torch.testing.assert_close(y.raw, F.layer_norm(pb.x.raw, (4,), eps=0.5))
    y = dt.rms_norm(pb.x, pb.feature, weight=None, eps=0.25)
    torch.testing.assert_close(y.raw, torch_rms_norm(pb.x.raw, (4,), None, 0.25))
    y = dt.rms_norm(pb.x, axis=pb.feature)
    torch.testing.assert_close(y.raw, torch_rms_norm(pb.x.raw, (4,), None, 1e-6))
    assert y.feature_dim is pb.feature


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
def test_norm_bad_input(name):
    pb = make_padded_batch((3, 2))
    fn = getattr(dt, name)
    with pytest.raises(ValueError, match=rf"dimtorch\.{name}\(\): normalizing over dim .*'time'.*which has padding"):
        fn(pb.x, axis=pb.time)
    with pytest.raises(ValueError, match=rf"dimtorch\.{name}\(\): weight must have exactly the normalized dims, got \(time"):
        fn(pb.x, axis=pb.feature, weight=dt.Tensor(torch.ones(3), (pb.time,)))
    with pytest.raises(ValueError, match=rf"dimtorch\.{name}\(\): dim .*'other'.* is not in x"):
        fn(pb.x, axis=dt.Dim(4, name="other"))
    if name == "layer_norm":
        with pytest.raises(ValueError, match=r"dimtorch\.layer_norm\(\): bias must have exactly the normalized dims"):
            fn(pb.x, axis=pb.feature, bias=dt.Tensor(torch.ones(5), (dt.Dim(5, name="h"),)))
