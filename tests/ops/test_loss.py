"""Tests of dt.cross_entropy, dt.ctc_loss and dt.loss_mean_over_frames against F.cross_entropy/F.ctc_loss, with NaN-filled padding in the logits."""
import pytest
import torch
import torch.nn.functional as F

import dimtorch as dt


def _batch(lengths, n_classes=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    batch, classes = dt.Dim(None, name="batch"), dt.Dim(n_classes, name="classes")
    time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
    T = max(lengths)
    logits = torch.randn(len(lengths), T, n_classes, generator=g)
    target = torch.randint(0, n_classes, (len(lengths), T), generator=g)
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    logits[~mask] = float("nan")
    target[~mask] = 10 ** 6  # out of range: must never be read
    return batch, time, classes, logits, target, mask


@pytest.mark.parametrize("estimated_type", ["logits", "log-probs", "probs"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_cross_entropy_vs_torch(estimated_type, label_smoothing):
    batch, time, classes, logits, target, mask = _batch([4, 2, 3])
    leaf = logits.clone().requires_grad_(True)
    est = {"logits": leaf, "log-probs": torch.log_softmax(leaf, -1), "probs": torch.softmax(leaf, -1)}[estimated_type]
    # class axis in the middle: (batch, classes, time)
    x = dt.Tensor(est.transpose(1, 2), (batch, classes, time))
    tgt = dt.Tensor(target.T.contiguous(), (time, batch), sparse_dim=classes)
    loss = dt.cross_entropy(estimated=x, target=tgt, axis=classes, estimated_type=estimated_type,
                            label_smoothing=label_smoothing)
    assert loss.dims == (batch, time)
    assert torch.equal(loss.raw[~mask], torch.zeros(int((~mask).sum())))
    ref_leaf = logits.clone().requires_grad_(True)
    ref = F.cross_entropy(ref_leaf[mask], target[mask], reduction="none", label_smoothing=label_smoothing)
    torch.testing.assert_close(loss.raw[mask], ref, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(ref)
    full_g = torch.zeros_like(loss.raw)
    full_g[mask] = g
    (loss.raw * full_g).sum().backward()
    (ref * g).sum().backward()
    torch.testing.assert_close(leaf.grad[mask], ref_leaf.grad[mask], rtol=1e-5, atol=1e-5)


def test_cross_entropy_soft_targets_and_class_axis_last():
    batch, time, classes, logits, target, mask = _batch([3, 1])
    probs = torch.softmax(torch.randn(2, 3, 5), -1)
    loss = dt.cross_entropy(estimated=dt.Tensor(logits, (batch, time, classes)),
                            target=dt.Tensor(probs, (batch, time, classes)), axis=classes)
    ref = F.cross_entropy(logits[mask], probs[mask], reduction="none")
    torch.testing.assert_close(loss.raw[mask], ref)
    assert torch.equal(loss.raw[~mask], torch.zeros(int((~mask).sum())))


def test_cross_entropy_lengths_over_a_dim_the_tensors_lack():
    """One sequence sliced out of a batch: time's lengths are over batch, which x and target lack, so no
    padding is masked in this layout (the per-dim fallback of the masked copy)."""
    batch, time, classes, logits, target, mask = _batch([3, 1])
    x = dt.Tensor(logits[0], (time, classes))
    loss = dt.cross_entropy(estimated=x, target=dt.Tensor(target[0], (time,), sparse_dim=classes), axis=classes)
    assert loss.dims == (time,)
    torch.testing.assert_close(loss.raw, F.cross_entropy(logits[0], target[0], reduction="none"))


def test_cross_entropy_errors():
    batch, time, classes, logits, target, mask = _batch([3, 1])
    x = dt.Tensor(logits, (batch, time, classes))
    with pytest.raises(ValueError,
                       match=r"dimtorch.cross_entropy\(\): the sparse_dim of target is none, "
                             r"but axis is 'classes'\(5\)"):
        dt.cross_entropy(estimated=x, target=dt.Tensor(target, (batch, time)), axis=classes)
    with pytest.raises(ValueError,
                       match=r"dimtorch.cross_entropy\(\): target must have the dims of estimated without axis"):
        dt.cross_entropy(estimated=x, target=dt.Tensor(target[:, 0], (batch,), sparse_dim=classes), axis=classes)
    with pytest.raises(ValueError, match="estimated_type must be"):
        dt.cross_entropy(estimated=x, target=dt.Tensor(target, (batch, time), sparse_dim=classes), axis=classes,
                         estimated_type="scores")


def test_ctc_loss_vs_torch():
    in_lengths, tgt_lengths = [6, 4, 5], [3, 1, 0]
    batch, time, classes, logits, _, mask = _batch(in_lengths, n_classes=5, seed=1)
    labels = dt.Dim(4, name="labels")  # targets' vocabulary: classes without the blank (index 4)
    tgt_time = dt.Dim(dt.Tensor(torch.tensor(tgt_lengths), (batch,)), name="tgt_time")
    targets = torch.tensor([[1, 2, 2], [3, 99, 99], [99, 99, 99]])
    leaf = logits.clone().requires_grad_(True)
    loss = dt.ctc_loss(logits=dt.Tensor(leaf, (batch, time, classes)),
                       targets=dt.Tensor(targets, (batch, tgt_time), sparse_dim=labels),
                       input_spatial_dim=time, targets_spatial_dim=tgt_time, blank_index=4)
    assert loss.dims == (batch,)
    ref_leaf = torch.nan_to_num(logits, nan=0.0).requires_grad_(True)
    ref = F.ctc_loss(torch.log_softmax(ref_leaf, -1).transpose(0, 1), targets.clamp(max=3), torch.tensor(in_lengths),
                     torch.tensor(tgt_lengths), blank=4, reduction="none", zero_infinity=True)
    torch.testing.assert_close(loss.raw, ref)
    loss.raw.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(leaf.grad[mask], ref_leaf.grad[mask])
    assert torch.equal(leaf.grad[~mask], torch.zeros_like(leaf.grad[~mask]))  # clean padding gradients
    mean = dt.loss_mean_over_frames(loss, frames_dim=tgt_time)
    torch.testing.assert_close(mean.raw, ref.sum() / 4)


def test_ctc_loss_errors():
    batch, time, classes, logits, _, mask = _batch([3, 2])
    tgt_time = dt.Dim(2, name="tgt_time")
    targets = dt.Tensor(torch.zeros(2, 2, dtype=torch.int64), (batch, tgt_time))
    x = dt.Tensor(logits, (batch, time, classes))
    with pytest.raises(ValueError,
                       match=r"dimtorch.ctc_loss\(\): blank_index 5 is out of range for the class dim 'classes'\(5\)"):
        dt.ctc_loss(logits=x, targets=targets, input_spatial_dim=time, targets_spatial_dim=tgt_time, blank_index=5)
    with pytest.raises(ValueError,
                       match=r"dimtorch.ctc_loss\(\): input_spatial_dim 'tgt_time'\(2\) is not a dim of logits"):
        dt.ctc_loss(logits=x, targets=targets, input_spatial_dim=tgt_time, targets_spatial_dim=tgt_time, blank_index=0)


def test_loss_mean_over_frames():
    batch, time, classes, logits, target, mask = _batch([4, 2, 0])
    loss = dt.cross_entropy(estimated=dt.Tensor(logits, (batch, time, classes)),
                            target=dt.Tensor(target, (batch, time), sparse_dim=classes), axis=classes)
    mean = dt.loss_mean_over_frames(loss)
    assert mean.dims == ()
    ref = F.cross_entropy(logits[mask], target[mask])
    torch.testing.assert_close(mean.raw, ref)
    static = dt.Tensor(torch.ones(2, 5), (batch, classes))
    assert dt.loss_mean_over_frames(static).raw.item() == 1.0


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.uint8])
def test_cross_entropy_takes_index_targets_of_any_int_dtype(dtype):
    """int32 targets (RETURNN's data is int32; torch's kernel takes int64): the same loss and gradients as
    int64 targets, against F.cross_entropy on the valid frames; padding holds NaN logits and, for int32,
    out-of-range labels (never read); each sequence alone gives what it gives in the batch."""
    batch, time, classes, logits, target, mask = _batch([4, 2, 3])
    if dtype != torch.int32:
        target = target.clamp(max=4)  # (the padding's out-of-range label does not fit a small dtype)
    leaf = logits.clone().requires_grad_(True)
    tgt = dt.Tensor(target.to(dtype), (batch, time), sparse_dim=classes)
    loss = dt.cross_entropy(estimated=dt.Tensor(leaf, (batch, time, classes)), target=tgt, axis=classes,
                            estimated_type="logits")
    assert loss.dims == (batch, time) and not loss.raw.isnan().any()
    ref_leaf = logits.clone().requires_grad_(True)
    ref = F.cross_entropy(ref_leaf[mask], target[mask].long(), reduction="none")
    torch.testing.assert_close(loss.raw[mask], ref)
    loss.raw.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(leaf.grad[mask], ref_leaf.grad[mask])
    for b, n in enumerate([4, 2, 3]):
        b1 = dt.Dim(None, name="b1")
        t1 = dt.Dim(dt.Tensor(torch.tensor([n]), (b1,)), name="t1")
        one = dt.cross_entropy(estimated=dt.Tensor(logits[b:b + 1, :n], (b1, t1, classes)),
                               target=dt.Tensor(target[b:b + 1, :n].to(dtype), (b1, t1), sparse_dim=classes),
                               axis=classes, estimated_type="logits")
        torch.testing.assert_close(one.raw[0], loss.raw[b, :n])


@pytest.mark.parametrize("pad", [float("nan"), 1e30])
def test_ctc_loss_logits_broadcast_over_an_extra_dim(pad):
    """Logits over (batch, branch, time, classes), targets over (batch, targets time): the targets broadcast
    over the branch dim (RETURNN frontend's test_ctc_loss_broadcast); the class dim is logits' feature_dim.
    Against F.ctc_loss per branch (forward and backward), padding NaN or 1e30; rf's options taken."""
    in_lengths, tgt_lengths = [6, 4, 5], [3, 1, 0]
    batch, time, classes, _, _, mask = _batch(in_lengths, n_classes=5, seed=1)
    branch = dt.Dim(2, name="branch")
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(3, 2, 6, 5, generator=g)
    logits[~mask[:, None, :].expand(3, 2, 6)] = pad
    labels = dt.Dim(4, name="labels")
    tgt_time = dt.Dim(dt.Tensor(torch.tensor(tgt_lengths), (batch,)), name="tgt_time")
    targets = torch.tensor([[1, 2, 2], [3, 99, 99], [99, 99, 99]], dtype=torch.int32)
    leaf = logits.clone().requires_grad_(True)
    loss = dt.ctc_loss(logits=dt.Tensor(leaf, (batch, branch, time, classes), feature_dim=classes),
                       targets=dt.Tensor(targets, (batch, tgt_time), sparse_dim=labels), input_spatial_dim=time,
                       targets_spatial_dim=tgt_time, blank_index=4, use_native_op=True, max_approx=False,
                       label_loop=True)
    assert loss.dims == (batch, branch)
    ref_leaf = torch.where(mask[:, None, :, None], logits, 0.0).requires_grad_(True)
    for k in range(2):
        ref = F.ctc_loss(torch.log_softmax(ref_leaf[:, k], -1).transpose(0, 1), targets.long().clamp(max=3),
                         torch.tensor(in_lengths), torch.tensor(tgt_lengths), blank=4, reduction="none",
                         zero_infinity=True)
        torch.testing.assert_close(loss.raw[:, k], ref)
        ref.sum().backward()
    loss.raw.sum().backward()
    m = mask[:, None, :].expand(3, 2, 6)
    torch.testing.assert_close(leaf.grad[m], ref_leaf.grad[m])
    assert torch.equal(leaf.grad[~m], torch.zeros_like(leaf.grad[~m]))
    with pytest.raises(NotImplementedError, match=r"dimtorch\.ctc_loss\(\): max_approx=True"):
        dt.ctc_loss(logits=dt.Tensor(logits, (batch, branch, time, classes), feature_dim=classes),
                    targets=dt.Tensor(targets, (batch, tgt_time), sparse_dim=labels), input_spatial_dim=time,
                    targets_spatial_dim=tgt_time, blank_index=4, max_approx=True)
