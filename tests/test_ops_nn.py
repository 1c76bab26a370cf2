"""The fused neural-network fast paths against torch: softmax/log_softmax (masked; src/ops_reduce.cpp), linear
(src/ops_matmul.cpp), layer_norm and rms_norm (src/ops_normalization.cpp)."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import dimtorch as dt
from helpers import (PAD_LARGE, PAD_NAN, align_raw, check_against_torch, check_batch_independence,
                     check_padding_invariance, make_padded_batch)

SOFTMAXES = {"softmax": (dt.softmax, torch.softmax), "log_softmax": (dt.log_softmax, torch.log_softmax)}


def masked_softmax(log, raw, mask, axis):
    """Hand-written: padding -inf before, probability 0 (log: -inf) after."""
    out = (torch.log_softmax if log else torch.softmax)(torch.where(mask, raw, -math.inf), axis)
    return torch.where(mask, out, -math.inf if log else 0.0)


# ---- softmax / log_softmax ----

@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE, -PAD_LARGE])
@pytest.mark.parametrize("case", ["time", "batch", "feature"])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_against_torch(name, case, pad):
    pb = make_padded_batch((5, 3, 1), pad_value=pad, extra_time=1)
    dim, axis, masked = {"time": (pb.time, 1, True), "batch": (pb.batch, 0, True),
                         "feature": (pb.feature, 2, False)}[case]
    mask = pb.mask[:, :, None] if masked else torch.ones((1, 1, 1), dtype=torch.bool)
    log = name == "log_softmax"
    check_against_torch(lambda x: SOFTMAXES[name][0](x, axis=dim),
                        lambda r: masked_softmax(log, r, mask, axis), [pb.x], expect_dims=pb.x.dims)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_padding_gets_probability_zero(name):
    pb = make_padded_batch((4, 2, 0, 1), pad_value=PAD_NAN, extra_time=1)
    y = SOFTMAXES[name][0](pb.x, axis=pb.time).raw
    pad = ~pb.mask
    if name == "softmax":
        assert (y[pad] == 0).all()
        torch.testing.assert_close(y[[0, 1, 3]].sum(1), torch.ones(3, 4))
        assert (y[3, 0] == 1).all()  # length 1: all the mass on the one frame
    else:
        assert (y[pad] == -math.inf).all()
        assert (y[3, 0] == 0).all()
    assert not y.isnan().any()


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_padding_invariance_and_finite_grads(name):
    outs, _ = check_padding_invariance(lambda x: SOFTMAXES[name][0](x, axis=x.dims[1]), (5, 3, 0, 1))
    assert not outs[0].isnan().any()


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_over_batch_with_frames_beyond_every_length(name):
    # time is masked (its lengths vary along batch); frames past the longest are all padding.
    check_padding_invariance(lambda x: SOFTMAXES[name][0](x, axis=x.dims[0]), (5, 3, 0, 1), extra_time=2)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_batch_independence(name):
    pb = make_padded_batch((6, 3, 1), pad_value=PAD_NAN, extra_time=1)
    check_batch_independence(lambda x, m: SOFTMAXES[name][0](x, axis=m(pb.time)), pb.x, pb.batch, pb.time)


def test_softmax_use_mask_false_is_plain_torch():
    pb = make_padded_batch((5, 3), pad_value=1.0)
    y = dt.softmax(pb.x, axis=pb.time, use_mask=False)
    torch.testing.assert_close(y.raw, torch.softmax(pb.x.raw, 1))


@settings(max_examples=20)
@given(perm=st.permutations([0, 1, 2]), seed=st.integers(0, 100))
def test_softmax_dim_orders_fuzzed(perm, seed):
    pb = make_padded_batch((4, 2, 0), pad_value=PAD_NAN, extra_time=1, seed=seed)
    dims = tuple(pb.x.dims[i] for i in perm)
    x = dt.Tensor(pb.x.raw.permute(*perm), dims)
    y = dt.softmax(x, axis=pb.time)
    assert y.dims == dims
    got = align_raw(y.raw, dims, pb.x.dims)
    torch.testing.assert_close(got, masked_softmax(False, pb.x.raw, pb.mask[:, :, None], 1))


def test_softmax_bad_input():
    pb = make_padded_batch((3, 2))
    empty = dt.Dim(0, name="empty")
    x = dt.Tensor(torch.zeros(2, 0), (pb.batch, empty))
    with pytest.raises(ValueError, match=r"dimtorch\.softmax\(\): dim .*'empty'.* has size 0 in x \(dims: batch:2, empty:0\)"):
        dt.softmax(x, axis=empty)
    with pytest.raises(ValueError, match=r"dimtorch\.log_softmax\(\): dim .*'empty'.* has size 0"):
        dt.log_softmax(x, axis=empty)
    with pytest.raises(ValueError, match=r"dimtorch\.softmax\(\): dim .*'other'.* is not in x"):
        dt.softmax(pb.x, axis=dt.Dim(2, name="other"))
    with pytest.raises(TypeError, match=r"dimtorch\.softmax\(\): axis must be a Dim"):
        dt.softmax(pb.x, axis=(pb.time,))
    with pytest.raises(TypeError, match=r"dimtorch\.softmax\(\): x must be a dimtorch\.Tensor"):
        dt.softmax(pb.x.raw, axis=pb.time)


# ---- linear ----

@pytest.mark.parametrize("layout", ["in_out", "out_in"])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("x_order", [(0, 1, 2), (2, 0, 1), (1, 2, 0)])
def test_linear_against_torch(layout, with_bias, x_order):
    pb = make_padded_batch((4, 2), pad_value=PAD_LARGE)
    out = dt.Dim(3, name="out")
    w_raw = torch.randn(3, 4)  # (out, in)
    w = dt.Tensor(w_raw, (out, pb.feature)) if layout == "out_in" else dt.Tensor(w_raw.t().contiguous(), (pb.feature, out))
    b = dt.Tensor(torch.randn(3), (out,))
    dims = tuple(pb.x.dims[i] for i in x_order)
    x = dt.Tensor(pb.x.raw.permute(*x_order), dims, feature_dim=pb.feature)
    inputs = [x, w] + ([b] if with_bias else [])
    expect_dims = tuple(d for d in dims if d is not pb.feature) + (out,)

    def oracle(xr, wr, *br):
        c = align_raw(xr, dims, (pb.batch, pb.time, pb.feature))
        wt = wr if layout == "out_in" else wr.t()
        res = F.linear(c, wt, *br)
        return align_raw(res, (pb.batch, pb.time, out), expect_dims)

    check_against_torch(lambda *a: dt.linear(*a), oracle, inputs, expect_dims=expect_dims, rtol=1e-5, atol=1e-5)
    assert dt.linear(*inputs).feature_dim is out


def test_linear_padding_does_not_leak_into_valid_frames():
    # linear is per frame: valid outputs, valid x grads and (for finite padding) weight grads stay.
    out = dt.Dim(3, name="out")
    w_raw = torch.randn(4, 3)
    fn = lambda x: dt.linear(x, dt.Tensor(w_raw, (x.feature_dim, out)))  # noqa: E731
    check_padding_invariance(fn, (4, 2, 0), pads=(0.0, PAD_NAN, PAD_LARGE), finite_grads=False)


def test_linear_bad_input():
    pb = make_padded_batch((3, 2))
    out = dt.Dim(3, name="out")
    with pytest.raises(ValueError, match=r"dimtorch\.linear\(\): exactly one dim of weight \(out:3, other:4\) must be in x"):
        dt.linear(pb.x, dt.Tensor(torch.randn(3, 4), (out, dt.Dim(4, name="other"))))
    with pytest.raises(ValueError, match=r"dimtorch\.linear\(\): weight must have 2 dims"):
        dt.linear(pb.x, dt.Tensor(torch.randn(4), (pb.feature,)))
    with pytest.raises(ValueError, match=r"dimtorch\.linear\(\): bias must have the dims .*'out'"):
        dt.linear(pb.x, dt.Tensor(torch.randn(4, 3), (pb.feature, out)), dt.Tensor(torch.randn(4), (pb.feature,)))
    f5 = dt.Dim(None, name="f5")
    with pytest.raises(ValueError, match=r"dimtorch\.linear\(\): dim .*'f5'.* has raw size 4 in x but 5 in weight"):
        dt.linear(dt.Tensor(torch.randn(2, 4), (pb.batch, f5)), dt.Tensor(torch.randn(5, 3), (f5, out)))


# ---- layer_norm / rms_norm ----

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
