"""Tests of python/dimtorch/_label_smoothing.py: label_smoothed_log_prob_gradient against the smoothed-target
gradient written by hand in torch, on padded batches (padding gets no gradient, no NaN), with excluded labels,
a per-sequence smoothing Tensor, and errors."""
import pytest
import torch

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, make_padded_batch


def _setup(pad):
    b = make_padded_batch((5, 3, 0, 1), feature=6, pad_value=pad, extra_time=1)
    g = torch.Generator().manual_seed(1)
    targets = torch.randint(0, 6, b.x.raw.shape[:2], generator=g)
    return b, targets


def _smoothed_target(targets, n_labels, smoothing, exclude=()):
    """The distribution whose negative is the smoothed gradient of -sum(onehot * log_prob), by hand:
    (1 - s) on the target, s / (n - 1) on the other smoothed labels; excluded labels keep the one-hot."""
    onehot = torch.nn.functional.one_hot(targets, n_labels).float()
    keep = torch.ones(n_labels, dtype=torch.bool)
    keep[list(exclude)] = False
    n = n_labels - len(exclude)
    floor = smoothing / (n - 1)
    return torch.where(keep, onehot * (1.0 - n * floor) + floor, onehot)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("exclude", [(), (0,), (0, 5)])
def test_cross_entropy_gradient_is_smoothed(pad, exclude):
    """-sum over valid frames of onehot(target) * log_softmax(z): with the smoothed log-prob gradient, dz is
    softmax(z) - smoothed target at valid frames and 0 (finite) at the padding; the forward is unchanged."""
    b, targets = _setup(pad)
    s = 0.2
    z = b.x.raw.clone().requires_grad_(True)
    log_prob = dt.log_softmax(dt.Tensor(z, b.x.dims, feature_dim=b.feature), axis=b.feature)
    smoothed = dt.label_smoothed_log_prob_gradient(log_prob, s, exclude_labels=list(exclude))
    assert smoothed.dims == log_prob.dims and smoothed.feature_dim is b.feature
    torch.testing.assert_close(smoothed.raw, log_prob.raw, equal_nan=True)
    onehot = torch.nn.functional.one_hot(targets, 6).float()
    valid = b.mask[:, :, None]
    loss = -torch.where(valid, onehot * smoothed.raw, 0.0).sum()
    loss.backward()
    zv = torch.where(valid, b.x.raw, 0.0)
    expected = torch.where(valid, zv.softmax(-1) - _smoothed_target(targets, 6, s, exclude), 0.0)
    # (log_softmax's own backward gives NaN at NaN padding frames whatever comes after it: valid frames only)
    m = b.mask
    if not exclude:  # the smoothed target sums to 1: softmax(z) - target
        torch.testing.assert_close(z.grad[m], expected[m])
    else:
        # dz = sum_i g_i (delta_ij - p_j) with g = -smoothed target over the label axis
        tgt = _smoothed_target(targets, 6, s, exclude)
        p = zv.softmax(-1)
        manual = -tgt + tgt.sum(-1, keepdim=True) * p
        torch.testing.assert_close(z.grad[m], manual[m])
    assert torch.isfinite(z.grad[m]).all()
    # the op itself sends nothing into padding frames: its gradient there is exactly 0
    raw = log_prob.raw.detach().clone().requires_grad_(True)
    out = dt.label_smoothed_log_prob_gradient(dt.Tensor(raw, log_prob.dims, feature_dim=b.feature), s,
                                              exclude_labels=list(exclude))
    (-torch.where(valid, onehot * out.raw, 0.0)).sum().backward()
    assert bool((raw.grad[~m] == 0).all()) and torch.isfinite(raw.grad).all()


def test_smoothing_per_sequence_tensor_and_zero():
    b, targets = _setup(0.0)
    lp = dt.log_softmax(b.x, axis=b.feature)
    assert dt.label_smoothed_log_prob_gradient(lp, 0.0) is lp
    per_seq = dt.Tensor(torch.tensor([0.0, 0.1, 0.2, 0.3]), (b.batch,))
    raw = lp.raw.detach().clone().requires_grad_(True)
    out = dt.label_smoothed_log_prob_gradient(dt.Tensor(raw, lp.dims), per_seq, axis=b.feature)
    cot = -torch.nn.functional.one_hot(targets, 6).float()
    (out.raw * cot).sum().backward()
    for i, s in enumerate([0.0, 0.1, 0.2, 0.3]):
        torch.testing.assert_close(raw.grad[i], -_smoothed_target(targets[i], 6, s))
    half = dt.Tensor(lp.raw.detach().half().requires_grad_(True), lp.dims)
    g = dt.label_smoothed_log_prob_gradient(half, 0.1, axis=b.feature, exclude_labels=[1])
    g.raw.float().sum().backward()
    assert half.raw.grad.dtype == torch.float16


def test_label_smoothing_errors():
    b, _ = _setup(0.0)
    lp = dt.Tensor(b.x.raw, b.x.dims)
    with pytest.raises(ValueError, match=r"dimtorch\.label_smoothed_log_prob_gradient\(\): log_prob has no feature_dim"):
        dt.label_smoothed_log_prob_gradient(lp, 0.1)
    with pytest.raises(ValueError, match=r"dimtorch\.label_smoothed_log_prob_gradient\(\): axis 'time'\[batch\] must be "
                                         r"static"):
        dt.label_smoothed_log_prob_gradient(lp, 0.1, axis=b.time)
    with pytest.raises(ValueError, match=r"dimtorch\.label_smoothed_log_prob_gradient\(\): exclude_labels must be ints "
                                         r"in \[0, 6\), got 6"):
        dt.label_smoothed_log_prob_gradient(lp, 0.1, axis=b.feature, exclude_labels=[6])
    with pytest.raises(ValueError, match=r"it needs at least 2"):
        dt.label_smoothed_log_prob_gradient(lp, 0.1, axis=b.feature, exclude_labels=[0, 1, 2, 3, 4])
    with pytest.raises(TypeError, match=r"dimtorch\.label_smoothed_log_prob_gradient\(\): smoothing must be a number"):
        dt.label_smoothed_log_prob_gradient(lp, "0.1", axis=b.feature)
    with pytest.raises(ValueError, match=r"smoothing has dim 'feature'\(6\), which is not a non-label dim"):
        dt.label_smoothed_log_prob_gradient(lp, dt.Tensor(torch.zeros(6), (b.feature,)), axis=b.feature)
