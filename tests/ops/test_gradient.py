"""Tests of python/dimtorch/ops/gradient.py: stop_gradient (fast path and definition), scaled_gradient and
scaled_gradient_ext against the gradient written by hand in torch, on padded batches (NaN / 1e30 padding), per
sequence alone, and errors."""
import pytest
import torch

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, make_padded_batch


def _leaf(pb):
    raw = pb.x.raw.clone().requires_grad_(True)
    return raw, dt.Tensor(raw, pb.x.dims, feature_dim=pb.feature)


def _cotangent(pb, seed=3):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(pb.x.raw.shape, generator=g)


@pytest.mark.parametrize("scale", [-1.0, 0.5, 0.0])
def test_scaled_gradient_scales(scale):
    pb = make_padded_batch((5, 3, 0), feature=4, pad_value=PAD_NAN)
    raw, x = _leaf(pb)
    y = dt.scaled_gradient(x, scale)
    assert y.dims == x.dims and y.feature_dim is pb.feature
    torch.testing.assert_close(y.raw, raw, equal_nan=True)
    cot = _cotangent(pb)
    if scale == 0.0:
        assert not y.raw.requires_grad  # rf: stop_gradient
        return
    (grad,) = torch.autograd.grad(y.raw, raw, cot)
    torch.testing.assert_close(grad, cot * scale)


def test_scaled_gradient_by_a_tensor_over_some_dims():
    pb = make_padded_batch((4, 2), feature=3, pad_value=PAD_LARGE)
    raw, x = _leaf(pb)
    scale = dt.Tensor(torch.tensor([1.0, -2.0, 0.5]), (pb.feature,))
    (grad,) = torch.autograd.grad(dt.scaled_gradient(x, scale).raw, raw, _cotangent(pb))
    torch.testing.assert_close(grad, _cotangent(pb) * torch.tensor([1.0, -2.0, 0.5]))


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_scaled_gradient_ext_shift_by_sum_over_valid_frames(pad):
    """g * scale + shift * sum over the valid frames of |g| (the padding's gradient, whatever it is, stays out)."""
    lengths = (5, 3, 1)
    pb = make_padded_batch(lengths, feature=4, pad_value=pad, extra_time=1)
    raw, x = _leaf(pb)
    y = dt.scaled_gradient_ext(x, scale=2.0, shift=0.1, scale_shift_by_sum_over_axis=pb.time)
    cot = _cotangent(pb)
    cot_with_garbage = torch.where(pb.mask[:, :, None], cot, 1e6)
    (grad,) = torch.autograd.grad(y.raw, raw, cot_with_garbage)
    m = pb.mask[:, :, None]
    total = torch.where(m, cot, 0.0).abs().sum(1, keepdim=True)
    expected = cot * 2.0 + 0.1 * total
    torch.testing.assert_close(grad[pb.mask], expected[pb.mask])
    # per sequence alone: the same gradient on its valid frames
    for b, n in enumerate(lengths):
        alone = make_padded_batch((n,), feature=4, pad_value=pad)
        raw1 = raw.detach()[b:b + 1, :n].clone().requires_grad_(True)
        y1 = dt.scaled_gradient_ext(dt.Tensor(raw1, alone.x.dims), scale=2.0, shift=0.1,
                                    scale_shift_by_sum_over_axis=alone.time)
        (g1,) = torch.autograd.grad(y1.raw, raw1, cot[b:b + 1, :n])
        torch.testing.assert_close(g1[0], grad[b, :n])


def test_scaled_gradient_ext_shift_alone_and_over_a_static_axis():
    pb = make_padded_batch((3, 2), feature=4, pad_value=PAD_LARGE)
    raw, x = _leaf(pb)
    cot = _cotangent(pb)
    (g,) = torch.autograd.grad(dt.scaled_gradient_ext(x, shift=-0.5).raw, raw, cot)
    torch.testing.assert_close(g, cot - 0.5)
    (g,) = torch.autograd.grad(dt.scaled_gradient_ext(x, scale=0.5, shift=1.0,
                                                      scale_shift_by_sum_over_axis=pb.feature).raw, raw, cot)
    torch.testing.assert_close(g, 0.5 * cot + cot.abs().sum(-1, keepdim=True))


def test_errors():
    pb = make_padded_batch((3, 2), feature=4)
    other = dt.Dim(2, name="other")
    with pytest.raises(TypeError, match=r"dimtorch\.scaled_gradient\(\): source must be a dimtorch\.Tensor"):
        dt.scaled_gradient(pb.x.raw, 1.0)
    with pytest.raises(TypeError, match=r"dimtorch\.scaled_gradient\(\): scale must be a number or a dimtorch"):
        dt.scaled_gradient(pb.x, "2")
    with pytest.raises(ValueError, match=r"scaled_gradient_ext\(\): shift has dims \('other'\(2\)\) that source"):
        dt.scaled_gradient_ext(pb.x, shift=dt.Tensor(torch.ones(2), (other,)))
    with pytest.raises(ValueError, match=r"scale_shift_by_sum_over_axis 'other'\(2\) is not a dim of source"):
        dt.scaled_gradient_ext(pb.x, shift=1.0, scale_shift_by_sum_over_axis=other)


@pytest.mark.parametrize("pad_value", [PAD_NAN, PAD_LARGE])
def test_stop_gradient_detaches_and_keeps_dims_and_markers(pad_value):
    """The fast path and the definition: the same values (padding untouched), dims and markers; no gradient
    reaches the source, while a branch beside it still gets its own."""
    from dimtorch.ops.gradient import stop_gradient as definition
    pb = make_padded_batch((5, 3, 0), feature=4, pad_value=pad_value)
    for fn in (dt.stop_gradient, definition):
        raw, x = _leaf(pb)
        y = fn(x)
        assert y.dims == x.dims and y.feature_dim is pb.feature and y.sparse_dim is None
        assert not y.raw.requires_grad and y.raw.data_ptr() == raw.data_ptr()  # a view, no copy
        torch.testing.assert_close(y.raw, raw.detach(), equal_nan=True)
        (grad,) = torch.autograd.grad((y.raw * raw).sum(), raw)
        torch.testing.assert_close(grad, raw.detach(), equal_nan=True)  # only the branch beside it
    labels = dt.Tensor(torch.tensor([1, 0, 2]), (pb.batch,), sparse_dim=dt.Dim(3, name="classes"))
    assert dt.stop_gradient(source=labels).sparse_dim is labels.sparse_dim


def test_stop_gradient_per_sequence_alone():
    pb = make_padded_batch((5, 3, 2), feature=4, pad_value=PAD_NAN)
    batched = dt.stop_gradient(pb.x).raw
    for b, n in enumerate(pb.lengths):
        alone = make_padded_batch((n,), feature=4, pad_value=PAD_NAN)
        alone_raw = pb.x.raw[b:b + 1, :n].clone()
        y = dt.stop_gradient(dt.Tensor(alone_raw, alone.x.dims))
        torch.testing.assert_close(y.raw[0], batched[b, :n])


def test_stop_gradient_errors_name_the_call():
    with pytest.raises(TypeError, match=r"dimtorch\.stop_gradient\(\): source must be a dimtorch\.Tensor, got Tensor"):
        dt.stop_gradient(torch.zeros(2))
    with pytest.raises(TypeError, match=r"dimtorch\.stop_gradient\(\).*unexpected keyword argument 'dim'"):
        dt.stop_gradient(dt.ones((dt.Dim(2, name="n"),)), dim=0)
