"""Tests of dt.nn.TransformerDecoder: step by step equals the full sequence, batch independence, errors."""
import pytest
import torch

import dimtorch as dt


def _setup(enc_lengths=(6, 3, 4), label_lengths=(4, 1, 3), seed=0, pad=float("nan")):
    torch.manual_seed(seed)
    batch = dt.Dim(None, name="batch")
    enc_time = dt.Dim(dt.Tensor(torch.tensor(list(enc_lengths)), (batch,)), name="enc_time")
    label_time = dt.Dim(dt.Tensor(torch.tensor(list(label_lengths)), (batch,)), name="labels")
    enc_feat, vocab, model = dt.Dim(5, name="enc_feature"), dt.Dim(7, name="vocab"), dt.Dim(8, name="model")
    dec = dt.nn.TransformerDecoder(enc_feat, vocab, model, num_layers=2, ff_dim=dt.Dim(16, name="ff"), num_heads=2,
                                   dropout=0.0, att_dropout=0.0)
    dec.eval()
    enc_raw = torch.randn(len(enc_lengths), max(enc_lengths), 5)
    for b, n in enumerate(enc_lengths):
        enc_raw[b, n:] = pad
    labels_raw = torch.randint(0, 7, (len(label_lengths), max(label_lengths)))
    enc = dt.Tensor(enc_raw, (batch, enc_time, enc_feat))
    labels = dt.Tensor(labels_raw, (batch, label_time), sparse_dim=vocab)
    return dec, batch, enc_time, label_time, enc, labels, vocab


def test_decoder_step_by_step_equals_full_sequence():
    dec, batch, enc_time, label_time, enc, labels, vocab = _setup()
    logits, state = dec(labels, spatial_dim=label_time, encoder=enc, enc_spatial_dim=enc_time)
    assert state is None and logits.dims == (batch, label_time, vocab)
    full = logits.raw
    lengths = [4, 1, 3]
    state = None
    for t in range(4):
        step_labels = dt.Tensor(labels.raw[:, t], (batch,), sparse_dim=vocab)
        step_logits, state = dec(step_labels, spatial_dim=None, encoder=enc, enc_spatial_dim=enc_time, state=state)
        assert step_logits.dims == (batch, vocab)
        assert state.pos == t + 1
        for b, n in enumerate(lengths):
            if t < n:
                torch.testing.assert_close(step_logits.raw[b], full[b, t], rtol=1e-5, atol=1e-5)


def test_decoder_batch_independence_and_gradients_finite():
    dec, batch, enc_time, label_time, enc, labels, vocab = _setup(pad=1e30)
    dec.train()  # no dropout configured: training differs only in nothing
    logits, _ = dec(labels, spatial_dim=label_time, encoder=enc, enc_spatial_dim=enc_time)
    for b, (n_enc, n_lab) in enumerate(zip([6, 3, 4], [4, 1, 3])):
        one = dt.Dim(None, name="one")
        e1 = dt.Dim(dt.Tensor(torch.tensor([n_enc]), (one,)), name="e1")
        l1 = dt.Dim(dt.Tensor(torch.tensor([n_lab]), (one,)), name="l1")
        lg1, _ = dec(dt.Tensor(labels.raw[b:b + 1, :n_lab], (one, l1), sparse_dim=vocab),
                     spatial_dim=l1, encoder=dt.Tensor(enc.raw[b:b + 1, :n_enc], (one, e1, enc.dims[2])),
                     enc_spatial_dim=e1)
        torch.testing.assert_close(logits.raw[b, :n_lab], lg1.raw[0], rtol=1e-5, atol=1e-5)
    valid = torch.arange(4)[None, :] < torch.tensor([4, 1, 3])[:, None]
    logits.raw[valid].sum().backward()
    for name, p in dec.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


def test_decoder_errors():
    dec, batch, enc_time, label_time, enc, labels, vocab = _setup()
    with pytest.raises(ValueError, match=r"TransformerDecoder\(\): a state is only for step-by-step calls"):
        _, state = dec(dt.Tensor(labels.raw[:, 0], (batch,), sparse_dim=vocab), spatial_dim=None, encoder=enc,
                       enc_spatial_dim=enc_time)
        dec(labels, spatial_dim=label_time, encoder=enc, enc_spatial_dim=enc_time, state=state)
    with pytest.raises(ValueError, match=r"TransformerDecoder\(\): source lacks spatial_dim 'enc_time'"):
        dec(labels, spatial_dim=enc_time, encoder=enc, enc_spatial_dim=enc_time)
    with pytest.raises(ValueError, match=r"Embedding\(\): the sparse_dim of x is none"):
        dec(dt.Tensor(labels.raw, labels.dims), spatial_dim=label_time, encoder=enc, enc_spatial_dim=enc_time)
    with pytest.raises(TypeError, match=r"TransformerDecoder\(\): source must be a dimtorch.Tensor"):
        dec(labels.raw, spatial_dim=label_time, encoder=enc, enc_spatial_dim=enc_time)
