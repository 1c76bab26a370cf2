"""Tests of python/dimtorch/ops/sampling.py (random_choice_without/with_replacement) and random_truncated_normal:
distributions by counting over many draws, distinct draws without replacement, padding never drawn, errors."""
import pytest
import torch

import dimtorch as dt
from helpers import make_padded_batch


def test_without_replacement_distinct_and_distributed():
    torch.manual_seed(0)
    batch, vocab, k = dt.Dim(2000, name="batch"), dt.Dim(4, name="vocab"), dt.Dim(2, name="k")
    probs = torch.tensor([0.6, 0.3, 0.08, 0.02])
    log_probs = dt.Tensor(probs.log().expand(2000, 4).contiguous(), (batch, vocab))
    idx = dt.random_choice_without_replacement(log_probs=log_probs, axis=vocab, num_samples_dim=k)
    assert idx.dims == (batch, k) and idx.sparse_dim is vocab
    assert (idx.raw[:, 0] != idx.raw[:, 1]).all()
    first = torch.bincount(idx.raw[:, 0], minlength=4).float() / 2000
    torch.testing.assert_close(first, probs, atol=0.04, rtol=0)
    # noise_scale 0: top_k itself
    top = dt.random_choice_without_replacement(log_probs=log_probs, axis=vocab, num_samples_dim=k, noise_scale=0.0)
    assert (top.raw == torch.tensor([0, 1])).all()


def test_without_replacement_never_draws_padding():
    torch.manual_seed(1)
    pb = make_padded_batch((5, 3, 2), feature=1, pad_value=0.0)
    log_probs = dt.Tensor(torch.zeros(3, 5), (pb.batch, pb.time))
    idx = dt.random_choice_without_replacement(log_probs=log_probs, axis=pb.time, num_samples_dim=dt.Dim(2, name="k"))
    for b, n in enumerate(pb.lengths):
        assert (idx.raw[b] < n).all()


def test_with_replacement_counts_and_dims():
    torch.manual_seed(2)
    batch, vocab, draws = dt.Dim(2, name="batch"), dt.Dim(3, name="vocab"), dt.Dim(4000, name="draws")
    probs = dt.Tensor(torch.tensor([[0.7, 0.2, 0.1], [0.0, 0.5, 0.5]]), (batch, vocab))
    idx = dt.random_choice_with_replacement([draws, batch], probs=probs, axis=vocab)
    assert idx.dims == (draws, batch) and idx.sparse_dim is vocab
    freq0 = torch.bincount(idx.raw[:, 0], minlength=3).float() / 4000
    torch.testing.assert_close(freq0, torch.tensor([0.7, 0.2, 0.1]), atol=0.03, rtol=0)
    assert (idx.raw[:, 1] != 0).all()


def test_with_replacement_never_draws_padding():
    torch.manual_seed(3)
    pb = make_padded_batch((4, 1), feature=1)
    probs = dt.Tensor(torch.ones(2, 4), (pb.batch, pb.time))
    idx = dt.random_choice_with_replacement([pb.batch, dt.Dim(50, name="n")], probs=probs, axis=pb.time)
    assert (idx.raw[1] == 0).all() and (idx.raw[0] < 4).all()


def test_truncated_normal_bounds_and_repeatable():
    d = dt.Dim(20000, name="d")
    x = dt.random_truncated_normal([d], mean=1.0, stddev=2.0, seed=5)
    assert x.raw.min() >= -3.0 and x.raw.max() <= 5.0 and abs(float(x.raw.mean()) - 1.0) < 0.05
    torch.testing.assert_close(dt.random_truncated_normal([d], mean=1.0, stddev=2.0, seed=5).raw, x.raw)
    y = dt.random_truncated_normal([d], minval=0.0, maxval=0.5, seed=1)
    assert y.raw.min() >= 0.0 and y.raw.max() <= 0.5


def test_errors():
    vocab = dt.Dim(3, name="vocab")
    p = dt.Tensor(torch.ones(3), (vocab,))
    with pytest.raises(TypeError, match=r"random_choice_without_replacement\(\): num_samples_dim must be a static Dim"):
        dt.random_choice_without_replacement(log_probs=p, axis=vocab, num_samples_dim=2)
    with pytest.raises(ValueError, match=r"random_choice_with_replacement\(\): axis 'vocab'\(3\) must not be among"):
        dt.random_choice_with_replacement([vocab], probs=p, axis=vocab)
    other = dt.Dim(2, name="other")
    with pytest.raises(ValueError, match=r"probs has dims \('other'\(2\)\) that are neither axis nor in dims"):
        dt.random_choice_with_replacement([dt.Dim(4, name="n")], probs=dt.Tensor(torch.ones(2, 3), (other, vocab)),
                                          axis=vocab)
    with pytest.raises(ValueError, match=r"random_truncated_normal\(\): minval must be below maxval"):
        dt.random_truncated_normal([vocab], minval=1.0, maxval=0.0)
