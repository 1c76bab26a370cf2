"""Tests of python/dimtorch/ops/label_smoothing.py: label_smoothed_log_prob_gradient against the smoothed-target
gradient written by hand in torch, on padded batches (padding gets no gradient, no NaN), with excluded labels,
a per-sequence smoothing Tensor, and errors; label_smoothing and smooth_one_hot against torch (forward and
backward, per sequence)."""
import pytest
import torch

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, check_against_torch, check_batch_independence, make_padded_batch


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


# ---- label_smoothing, smooth_one_hot ---------------------------------------------------------------------------

@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_label_smoothing_of_probabilities_against_torch(pad):
    b = make_padded_batch((5, 3, 0, 1), feature=6, pad_value=pad, extra_time=1)
    prob = dt.softmax(b.x, axis=b.feature)
    check_against_torch(lambda p: dt.label_smoothing(p, 0.1),
                        lambda r: r * (1.0 - 6 * 0.1 / 5) + 0.1 / 5, [prob])
    # the distribution stays one; 1 becomes 1 - smoothing, 0 becomes smoothing / (n - 1)
    sharp = dt.Tensor(torch.eye(6)[:3], (dt.Dim(3, name="n"), b.feature), feature_dim=b.feature)
    out = dt.label_smoothing(sharp, 0.2).raw
    torch.testing.assert_close(out.sum(-1), torch.ones(3))
    torch.testing.assert_close(out.diagonal(), torch.full((3,), 0.8))
    # other dims order, explicit axis; a per-sequence smoothing Tensor
    smoothing = dt.Tensor(torch.tensor([0.1, 0.0, 0.3, 0.2]), (b.batch,))
    t_prob = prob.copy_transpose((b.feature, b.time, b.batch))
    s_raw = smoothing.raw
    check_against_torch(lambda p, s: dt.label_smoothing(p, s, axis=b.feature),
                        lambda r, s: r * (1.0 - 6 * s / 5) + s / 5, [t_prob, smoothing],
                        out_dims=(b.feature, b.time, b.batch))
    assert s_raw is smoothing.raw
    check_batch_independence(lambda x, m: dt.label_smoothing(dt.softmax(x, axis=b.feature), 0.1), b.x, b.batch,
                             b.time)


def test_smooth_one_hot_and_label_smoothing_of_labels():
    b = make_padded_batch((4, 2, 0), feature=5, pad_value=PAD_NAN, extra_time=1)
    g = torch.Generator().manual_seed(0)
    labels = dt.Tensor(torch.randint(0, 5, (3, 5), generator=g), (b.batch, b.time), sparse_dim=b.feature)
    expected = torch.nn.functional.one_hot(labels.raw, 5).float() * (0.7 - 0.3 / 4) + 0.3 / 4
    out = dt.smooth_one_hot(labels, label_prob=0.7)
    assert out.dims == (b.batch, b.time, b.feature) and out.feature_dim is b.feature and out.dtype == "float32"
    torch.testing.assert_close(out.raw, expected)
    torch.testing.assert_close(dt.label_smoothing(labels, 0.3).raw, expected)
    # label_prob per sequence; garbage labels (out of range, in padding) give the other value
    label_prob = dt.Tensor(torch.tensor([0.9, 0.5, 1.0]), (b.batch,))
    garbage = dt.Tensor(torch.where(labels.raw < 3, labels.raw, 99), labels.dims, sparse_dim=b.feature)
    out = dt.smooth_one_hot(garbage, label_prob=label_prob)
    p = label_prob.raw[:, None, None]
    want = torch.where(torch.nn.functional.one_hot(labels.raw, 5).bool() & (labels.raw < 3)[..., None], p, (1 - p) / 4)
    torch.testing.assert_close(out.raw, want)
    # smoothing in the cross-entropy targets: the same as dt.cross_entropy(label_smoothing=)?
    logits = dt.Tensor(torch.randn(3, 5, 5, generator=g), (b.batch, b.time, b.feature), feature_dim=b.feature)
    ce = -dt.reduce_sum(dt.label_smoothing(labels, 0.1) * dt.log_softmax(logits, axis=b.feature), axis=b.feature)
    want = torch.nn.functional.cross_entropy(logits.raw.transpose(1, 2), labels.raw, reduction="none",
                                             label_smoothing=0.1 * 5 / 4)
    torch.testing.assert_close(ce.raw, want)


def test_label_smoothing_and_smooth_one_hot_errors():
    b = make_padded_batch((3, 2), feature=4)
    labels = dt.Tensor(torch.zeros(2, 3, dtype=torch.int64), (b.batch, b.time), sparse_dim=b.feature)
    with pytest.raises(ValueError, match=r"dimtorch\.label_smoothing\(\): prob has no feature_dim or sparse_dim"):
        dt.label_smoothing(dt.Tensor(b.x.raw, b.x.dims), 0.1)
    with pytest.raises(ValueError, match=r"dimtorch\.label_smoothing\(\): axis 'time'\[batch\] must be static"):
        dt.label_smoothing(b.x, 0.1, axis=b.time)
    with pytest.raises(ValueError, match=r"dimtorch\.label_smoothing\(\): axis 'other'\(4\) is not the sparse_dim"):
        dt.label_smoothing(labels, 0.1, axis=dt.Dim(4, name="other"))
    with pytest.raises(TypeError, match=r"dimtorch\.label_smoothing\(\): smoothing must be a number or a Tensor"):
        dt.label_smoothing(b.x, "0.1")
    with pytest.raises(ValueError, match=r"dimtorch\.label_smoothing\(\): smoothing has dim 'feature'\(4\)"):
        dt.label_smoothing(b.x, dt.Tensor(torch.zeros(4), (b.feature,)))
    with pytest.raises(ValueError, match=r"dimtorch\.smooth_one_hot\(\): source must be int labels with a sparse_dim"):
        dt.smooth_one_hot(b.x, label_prob=0.9)
    with pytest.raises(ValueError, match=r"dimtorch\.smooth_one_hot\(\): label_prob has dim 'feature'\(4\)"):
        dt.smooth_one_hot(labels, label_prob=dt.Tensor(torch.zeros(4), (b.feature,)))
    with pytest.raises(TypeError, match=r"dimtorch\.smooth_one_hot\(\): .*takes 1 positional argument"):
        dt.smooth_one_hot(labels, 0.9)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_label_smoothing_fast_path_is_the_definition(pad):
    """dt.label_smoothing's C++ fast path (a number smoothing: float probabilities by one mul and one add_, int64
    labels by smooth_one_hot's full + scatter_) gives the definition's dims, markers, values and gradients: every
    layout, axis given or by default, labels out of range (negative, n, garbage in the padding), int smoothing;
    the calls it takes never run the definition; a Tensor smoothing, int32 labels, a dynamic or 1-entry axis and
    the errors go to it."""
    from dimtorch.ops import label_smoothing as _ls
    from fast_path_checks import both, definition_calls
    pb = make_padded_batch((4, 2, 0), feature=5, pad_value=pad)
    x = dt.Tensor(pb.x.raw, pb.x.dims, feature_dim=pb.feature)
    vocab = dt.Dim(7, name="vocab")
    raw_labels = torch.randint(-2, 9, pb.x.raw.shape[:2], generator=torch.Generator().manual_seed(8))
    labels = dt.Tensor(raw_labels, pb.x.dims[:2], sparse_dim=vocab)
    for order in ((0, 1, 2), (2, 0, 1), (1, 2, 0)):
        xt = x.copy_transpose(tuple(x.dims[i] for i in order))
        for kwargs in ({}, {"axis": pb.feature}):
            y = both(dt.label_smoothing, _ls.label_smoothing, xt, 0.1, **kwargs)
            assert y.feature_dim is pb.feature
            assert definition_calls(lambda: dt.label_smoothing(xt, 0.1, **kwargs), _ls.label_smoothing) == 0
    for lab in (labels, labels.copy_transpose(labels.dims[::-1])):
        for smoothing in (0.1, 0, 1, 0.5):
            y = both(dt.label_smoothing, _ls.label_smoothing, lab, smoothing)
            assert y.dims == lab.dims + (vocab,) and y.feature_dim is vocab and y.raw.dtype == torch.float32
            assert definition_calls(lambda: dt.label_smoothing(lab, smoothing), _ls.label_smoothing) == 0
        both(dt.label_smoothing, _ls.label_smoothing, lab, 0.1, axis=vocab)
    for handed_over in ((labels, dt.Tensor(torch.full((3,), 0.1), (pb.batch,))),
                        (dt.Tensor(raw_labels.int(), labels.dims, sparse_dim=vocab), 0.1),
                        (x, dt.Tensor(torch.full((3,), 0.2), (pb.batch,)))):
        both(dt.label_smoothing, _ls.label_smoothing, *handed_over)
        assert definition_calls(lambda: dt.label_smoothing(*handed_over), _ls.label_smoothing) == 1
    with pytest.raises(ValueError, match=r"^dimtorch\.label_smoothing\(\): axis .* must be static with at least 2"):
        dt.label_smoothing(x, 0.1, axis=pb.time)
    one = dt.Dim(1, name="one")
    with pytest.raises(ValueError, match=r"^dimtorch\.label_smoothing\(\): axis .* must be static with at least 2"):
        dt.label_smoothing(dt.Tensor(torch.ones(3, 1), (pb.batch, one)), 0.1, axis=one)
    with pytest.raises(ValueError, match=r"^dimtorch\.label_smoothing\(\): axis .* is not the sparse_dim"):
        dt.label_smoothing(labels, 0.1, axis=pb.feature)
    with pytest.raises(TypeError, match=r"^dimtorch\.label_smoothing\(\): smoothing must be a number"):
        dt.label_smoothing(x, True)
    grads = []
    for fn in (dt.label_smoothing, _ls.label_smoothing):
        raw = pb.x.raw.clone().requires_grad_(True)
        torch.nan_to_num(fn(dt.Tensor(raw, x.dims, feature_dim=pb.feature), 0.2).raw).sum().backward()
        grads.append(raw.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0, equal_nan=True)


def test_int_labels_whose_sparse_dim_is_also_their_dim_are_refused():
    """Labels over (b, v) with sparse_dim v: the one-hot result would hold v twice: refused (the fast path hands
    the call to the definition), not a Tensor with a repeated dim."""
    b, v = dt.Dim(4, name="b"), dt.Dim(5, name="v")
    labels = dt.Tensor(torch.randint(0, 5, (4, 5)), (b, v), sparse_dim=v)
    with pytest.raises(ValueError, match="appears twice"):
        dt.label_smoothing(labels, 0.1)
