"""Tests of dt.nn.Embedding against torch.nn.Embedding (copied weights, forward and backward)."""
import pytest
import torch

import dimtorch as dt


def test_embedding_vs_torch():
    batch, vocab, model = dt.Dim(None, name="batch"), dt.Dim(7, name="vocab"), dt.Dim(4, name="model")
    time = dt.Dim(dt.Tensor(torch.tensor([3, 1]), (batch,)), name="time")
    idx = torch.tensor([[1, 6, 2], [0, 0, 0]])
    x = dt.Tensor(idx, (batch, time), sparse_dim=vocab)
    emb = dt.nn.Embedding(vocab, model)
    ref = torch.nn.Embedding(7, 4)
    with torch.no_grad():
        ref.weight.copy_(emb.weight.raw)
    y = emb(x)
    assert y.dims == (batch, time, model) and y.feature_dim is model
    y_ref = ref(idx)
    torch.testing.assert_close(y.raw, y_ref)
    g = torch.randn_like(y_ref)
    (y.raw * g).sum().backward()
    (y_ref * g).sum().backward()
    torch.testing.assert_close(emb.weight.raw.grad, ref.weight.grad)


def test_embedding_needs_sparse_dim():
    batch, vocab, model = dt.Dim(None, name="batch"), dt.Dim(7, name="vocab"), dt.Dim(4, name="model")
    emb = dt.nn.Embedding(vocab, model)
    with pytest.raises(ValueError, match=r"Embedding\(\): the sparse_dim of x is none, but in_dim is 'vocab'\(7\)"):
        emb(dt.Tensor(torch.tensor([1, 2]), (batch,)))
    with pytest.raises(TypeError, match=r"Embedding\(\): x must be a dimtorch.Tensor"):
        emb(torch.tensor([1, 2]))
