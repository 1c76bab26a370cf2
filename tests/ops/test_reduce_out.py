"""Tests of python/dimtorch/ops/reduce_out.py: reduce_out (maxout and friends) against torch's view + reduce, forward
and backward, on padded batches (NaN / 1e30 padding), per sequence alone, and errors."""
import pytest
import torch

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, make_padded_batch

TORCH = {"max": lambda r: r.amax(-1), "min": lambda r: r.amin(-1), "sum": lambda r: r.sum(-1),
         "mean": lambda r: r.mean(-1)}


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("mode", list(TORCH))
def test_reduce_out_against_torch(mode, pad):
    lengths = (5, 3, 0)
    pb = make_padded_batch(lengths, feature=6, pad_value=pad)
    raw = pb.x.raw.clone().requires_grad_(True)
    y = dt.reduce_out(dt.Tensor(raw, pb.x.dims, feature_dim=pb.feature), mode=mode, num_pieces=3)
    assert y.dims[:2] == (pb.batch, pb.time) and y.feature_dim is y.dims[2] and y.dims[2].size == 2
    expected = TORCH[mode](raw.reshape(3, 5, 2, 3))  # consecutive features form a group, as rf's split_dims
    m = pb.mask
    torch.testing.assert_close(y.raw[m], expected[m])
    cot = torch.randn(y.raw.shape)
    (g,) = torch.autograd.grad(y.raw, raw, torch.where(m[:, :, None], cot, 0.0))
    (g_ref,) = torch.autograd.grad(expected, raw, torch.where(m[:, :, None], cot, 0.0))
    torch.testing.assert_close(g[m], g_ref[m])
    for b, n in enumerate(lengths):  # each sequence alone
        alone = dt.Tensor(raw.detach()[b:b + 1, :n], make_padded_batch((n,), feature=6).x.dims, feature_dim=None)
        alone = dt.Tensor(alone.raw, alone.dims, feature_dim=alone.dims[2])
        torch.testing.assert_close(dt.reduce_out(alone, mode=mode, num_pieces=3).raw[0], y.raw[b, :n].detach())


def test_out_dim_given_and_default_is_stable():
    pb = make_padded_batch((2,), feature=4)
    a = dt.reduce_out(pb.x, mode="max", num_pieces=2)
    assert dt.reduce_out(pb.x, mode="sum", num_pieces=2).feature_dim is a.feature_dim
    out = dt.Dim(2, name="readout")
    assert dt.reduce_out(pb.x, mode="max", num_pieces=2, out_dim=out).feature_dim is out


def test_errors():
    pb = make_padded_batch((2,), feature=4)
    no_feature = dt.Tensor(pb.x.raw, pb.x.dims)
    with pytest.raises(ValueError, match=r"dimtorch\.reduce_out\(\): source has no feature_dim"):
        dt.reduce_out(no_feature, mode="max", num_pieces=2)
    with pytest.raises(ValueError, match=r"dimtorch\.reduce_out\(\): mode must be one of"):
        dt.reduce_out(pb.x, mode="logsumexp", num_pieces=2)
    with pytest.raises(ValueError, match=r"must be static and a multiple of num_pieces=3"):
        dt.reduce_out(pb.x, mode="max", num_pieces=3)
    with pytest.raises(ValueError, match=r"out_dim must be a Dim of size 2"):
        dt.reduce_out(pb.x, mode="max", num_pieces=2, out_dim=dt.Dim(3, name="o"))


@pytest.mark.parametrize("mode", list(TORCH))
def test_reduce_out_fast_path_is_the_definition(mode):
    """dt.reduce_out's C++ fast path (one reshape and one reduction) gives the definition's dims, markers, values and
    gradients in every layout, with a given out_dim and a sparse_dim kept; the calls it takes never run the
    definition; an int mean and every error go to the definition."""
    from dimtorch.ops import reduce_out as _reduce_out
    from fast_path_checks import both, definition_calls
    pb = make_padded_batch((4, 2, 0), feature=6, pad_value=PAD_NAN)
    x = dt.Tensor(pb.x.raw, pb.x.dims, feature_dim=pb.feature)
    for order in ((0, 1, 2), (2, 0, 1), (1, 2, 0)):
        xt = x.copy_transpose(tuple(x.dims[i] for i in order))
        for pieces in (1, 2, 3, 6):
            y = both(dt.reduce_out, _reduce_out.reduce_out, xt, mode=mode, num_pieces=pieces)
            assert y.feature_dim is pb.feature // pieces
            assert definition_calls(lambda: dt.reduce_out(xt, mode=mode, num_pieces=pieces), _reduce_out.reduce_out) == 0
        both(dt.reduce_out, _reduce_out.reduce_out, xt, mode=mode, num_pieces=2, out_dim=dt.Dim(3, name="readout"))
    vocab = dt.Dim(6, name="vocab")
    sparse = dt.Tensor(torch.randint(6, pb.x.raw.shape), pb.x.dims, sparse_dim=vocab, feature_dim=pb.feature)
    if mode != "mean":
        both(dt.reduce_out, _reduce_out.reduce_out, sparse, mode=mode, num_pieces=2)
    else:
        assert definition_calls(lambda: pytest.raises(RuntimeError, dt.reduce_out, sparse, mode=mode, num_pieces=2),
                                _reduce_out.reduce_out) == 1
    both(dt.reduce_out, _reduce_out.reduce_out, x, mode="".join(mode), num_pieces=3)  # a str that is not interned
    grads = []
    for fn in (dt.reduce_out, _reduce_out.reduce_out):
        raw = pb.x.raw.clone().requires_grad_(True)
        y = fn(dt.Tensor(raw, pb.x.dims, feature_dim=pb.feature), mode=mode, num_pieces=3)
        torch.nan_to_num(y.raw).sum().backward()
        grads.append(raw.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0, equal_nan=True)
    with pytest.raises(ValueError, match=r"^dimtorch\.reduce_out\(\): num_pieces must be an int >= 1"):
        dt.reduce_out(x, mode=mode, num_pieces=True)
    with pytest.raises(ValueError, match=r"^dimtorch\.reduce_out\(\): out_dim must be a Dim of size 3"):
        dt.reduce_out(x, mode=mode, num_pieces=2, out_dim=pb.time)
    with pytest.raises(TypeError, match=r"^dimtorch\.reduce_out\(\): .*unexpected keyword argument 'axis'"):
        dt.reduce_out(x, mode=mode, num_pieces=2, axis=pb.feature)


def test_out_dim_already_a_dim_of_the_source_is_refused():
    """out_dim that is another dim of the source would be there twice: refused (the fast path hands the call
    to the definition), not a Tensor with a repeated dim."""
    b, f = dt.Dim(4, name="b"), dt.Dim(8, name="f")
    x = dt.Tensor(torch.randn(4, 8), (b, f), feature_dim=f)
    with pytest.raises(ValueError, match="appears twice"):
        dt.reduce_out(x, mode="max", num_pieces=2, out_dim=b)
