"""Tests of python/dimtorch/ops/gather.py: gather by an index tensor (with batch dims) or an int, one_hot, sparse_to_dense."""
import pytest
import torch
import torch.nn.functional as F

import dimtorch as dt
from helpers import PAD_NAN, check_against_torch, make_padded_batch


def test_gather_int_removes_axis():
    pb = make_padded_batch((3, 2), feature=4)
    out = dt.gather(pb.x, indices=1, axis=pb.time)
    assert out.dims == (pb.batch, pb.feature)
    check_against_torch(lambda t: dt.gather(t, indices=1, axis=pb.time), lambda r: r[:, 1], [pb.x])
    out = dt.gather(pb.x, indices=3, axis=pb.feature)
    assert out.dims == (pb.batch, pb.time) and out.feature_dim is None
    with pytest.raises(IndexError, match=r"dimtorch\.gather\(\): index 4 is out of range for axis 'feature'\(4\) of size 4"):
        dt.gather(pb.x, indices=4, axis=pb.feature)


def test_gather_embedding_lookup():
    vocab, model = dt.Dim(5, name="vocab"), dt.Dim(3, name="model")
    emb = dt.Tensor(torch.randn(5, 3), (vocab, model))
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor([3, 1]), (batch,)), name="time")
    idx = dt.Tensor(torch.tensor([[4, 0, 2], [1, 0, 0]]), (batch, time), sparse_dim=vocab)
    out = dt.gather(emb, indices=idx, axis=vocab)
    assert out.dims == (batch, time, model)
    check_against_torch(lambda e, i: dt.gather(e, indices=i, axis=vocab), lambda e, i: e[i], [emb, idx])


def test_gather_with_batch_dims_shared_with_x():
    pb = make_padded_batch((4, 2, 1), feature=3)
    k = dt.Dim(2, name="k")
    # Per batch entry, two frames of its own (within its length).
    idx = dt.Tensor(torch.tensor([[3, 0], [1, 1], [0, 0]]), (pb.batch, k), sparse_dim=pb.time)
    out = dt.gather(pb.x, indices=idx, axis=pb.time)
    assert out.dims == (pb.batch, k, pb.feature) and out.feature_dim is pb.feature
    check_against_torch(lambda t, i: dt.gather(t, indices=i, axis=pb.time),
                        lambda r, i: torch.stack([r[b, i[b]] for b in range(3)]), [pb.x, idx])
    # x's axis in the middle of other dims, indices in another order than x.
    idx_t = dt.Tensor(idx.raw.t().contiguous(), (k, pb.batch), sparse_dim=pb.time)
    xt = pb.x.copy_transpose((pb.feature, pb.time, pb.batch))
    out = dt.gather(xt, indices=idx_t, axis=pb.time)
    assert out.dims == (pb.feature, k, pb.batch)
    check_against_torch(lambda t, i: dt.gather(t, indices=i, axis=pb.time),
                        lambda r, i: torch.stack([r[:, i[:, b], b] for b in range(3)], dim=-1), [xt, idx_t])


def test_gather_scalar_index_tensor_and_int32():
    a, f = dt.Dim(4, name="a"), dt.Dim(3, name="f")
    x = dt.Tensor(torch.randn(4, 3), (a, f))
    idx = dt.Tensor(torch.tensor(2, dtype=torch.int32), (), sparse_dim=a)
    out = dt.gather(x, indices=idx, axis=a)
    assert out.dims == (f,)
    check_against_torch(lambda t, i: dt.gather(t, indices=i, axis=a), lambda r, i: r[int(i)], [x, idx])


def test_gather_errors():
    pb = make_padded_batch((3, 1), feature=2)
    vocab = dt.Dim(5, name="vocab")
    idx = dt.Tensor(torch.tensor([0, 1]), (pb.batch,), sparse_dim=vocab)
    with pytest.raises(ValueError, match=r"dimtorch\.gather\(\): the sparse_dim of indices is 'vocab'\(5\), but axis is 'time'\[batch\] \(indices dims: 'batch'\(\?\)\)"):
        dt.gather(pb.x, indices=idx, axis=pb.time)
    no_sparse = dt.Tensor(torch.tensor([0, 1]), (pb.batch,))
    with pytest.raises(TypeError, match=r"dimtorch\.gather\(\): give axis, or indices with a sparse_dim"):
        dt.gather(pb.x, indices=no_sparse)
    with pytest.raises(ValueError, match=r"dimtorch\.gather\(\): axis 'vocab'\(5\) is not a dim of x"):
        dt.gather(pb.x, indices=idx, axis=vocab)
    with pytest.raises(TypeError, match=r"dimtorch\.gather\(\): indices must be of an integer dtype, got float32"):
        dt.gather(pb.x, indices=dt.Tensor(torch.zeros(2), (pb.batch,), sparse_dim=pb.time), axis=pb.time)
    other = dt.Tensor(torch.tensor([0, 1, 0]), (pb.batch,), sparse_dim=pb.time)
    with pytest.raises(ValueError, match=r"dimtorch\.gather\(\): dim 'batch'\(\?\) has size 2 in x but 3 in indices"):
        dt.gather(pb.x, indices=other, axis=pb.time)


def test_one_hot():
    batch, vocab = dt.Dim(None, name="batch"), dt.Dim(4, name="vocab")
    idx = dt.Tensor(torch.tensor([3, 0, 1]), (batch,), sparse_dim=vocab)
    out = dt.one_hot(idx)
    assert out.dims == (batch, vocab) and out.dtype == "int64" and out.feature_dim is vocab
    assert torch.equal(out.raw, F.one_hot(torch.tensor([3, 0, 1]), 4))
    with pytest.raises(ValueError, match=r"dimtorch\.one_hot\(\): indices have no sparse_dim \(dims: 'batch'\(\?\)\)"):
        dt.one_hot(dt.Tensor(torch.tensor([0]), (dt.Dim(None, name="batch"),)))


def test_gather_targets_from_logits():
    pb = make_padded_batch((4, 2, 0), feature=5, extra_time=1)
    targets = dt.Tensor(torch.randint(0, 5, (3, 5), generator=torch.Generator().manual_seed(0)),
                        (pb.batch, pb.time), sparse_dim=pb.feature)
    out = dt.gather(pb.x, indices=targets, axis=pb.feature)
    assert out.dims == (pb.batch, pb.time)
    check_against_torch(lambda t, i: dt.gather(t, indices=i, axis=pb.feature),
                        lambda r, i: r.gather(2, i.unsqueeze(-1)).squeeze(-1), [pb.x, targets])


def test_gather_without_batch_dims_takes_the_embedding_path():
    """No dims shared by x and indices: one F.embedding lookup; x's rest dims on both sides of axis."""
    v, a, c = dt.Dim(10, name="v"), dt.Dim(3, name="a"), dt.Dim(2, name="c")
    b, t = dt.Dim(None, name="b"), dt.Dim(4, name="t")
    raw = torch.randn(3, 10, 2, requires_grad=True)
    idx = torch.randint(0, 10, (5, 4))
    y = dt.gather(dt.Tensor(raw, (a, v, c)), indices=dt.Tensor(idx, (b, t), sparse_dim=v), axis=v)
    assert y.dims == (a, b, t, c)
    expected = raw[:, idx, :]
    assert torch.allclose(y.raw, expected)
    (g,) = torch.autograd.grad(y.raw.sum(), raw)
    (g_ref,) = torch.autograd.grad(expected.sum(), raw)
    assert torch.allclose(g, g_ref)


def test_gather_embedding_fast_path_matches_the_python_definition():
    """x over (vocab, feature), int64 indices sharing no dim with x: one F.embedding in C++."""
    from dimtorch.ops import gather as _gather
    v, f = dt.Dim(10, name="v"), dt.Dim(4, name="f")
    b, t = dt.Dim(None, name="b"), dt.Dim(3, name="t")
    emb = dt.Tensor(torch.randn(10, 4, requires_grad=True), (v, f), feature_dim=f)
    idx = dt.Tensor(torch.randint(0, 10, (2, 3)), (b, t), sparse_dim=v)
    fast = dt.gather(emb, indices=idx, axis=v)
    slow = _gather.gather(emb, indices=idx, axis=v)
    assert fast.dims == slow.dims == (b, t, f) and fast.feature_dim is f
    assert torch.equal(fast.raw, slow.raw) and torch.equal(fast.raw, F.embedding(idx.raw, emb.raw))
    with pytest.raises(ValueError, match=r"dimtorch\.gather\(\): the sparse_dim of indices"):
        dt.gather(emb, indices=dt.Tensor(idx.raw, (b, t), sparse_dim=f), axis=v)


def test_sparse_to_dense_against_one_hot():
    pb = make_padded_batch((4, 2, 0), feature=1)
    vocab = dt.Dim(5, name="vocab")
    raw = torch.tensor([[0, 4, 2, 1], [3, 3, -1, 99], [7, -5, 0, 0]])  # padding holds out-of-range labels
    labels = dt.Tensor(raw, (pb.batch, pb.time), sparse_dim=vocab)
    out = dt.sparse_to_dense(labels, label_value=2.5, other_value=-1.0)
    assert out.dims == (pb.batch, pb.time, vocab) and out.dtype == "float32" and out.feature_dim is vocab
    check_against_torch(lambda t: dt.sparse_to_dense(t, label_value=2.5, other_value=-1.0),
                        lambda r: torch.where(F.one_hot(r.clamp(0, 4), 5).bool() & (r >= 0)[..., None]
                                              & (r < 5)[..., None], 2.5, -1.0), [labels])
    # Out-of-range labels (here in the padding) give other_value everywhere, with no error.
    assert (out.raw[1, 3] == -1.0).all() and (out.raw[2, 1] == -1.0).all()
    ints = dt.sparse_to_dense(labels, label_value=1, other_value=0)
    assert ints.dtype == "int64"
    assert torch.equal(ints.raw[0], F.one_hot(raw[0], 5))
    flags = dt.sparse_to_dense(labels, label_value=True, other_value=False, axis=vocab)
    assert flags.dtype == "bool" and torch.equal(flags.raw, ints.raw.bool())
    half = dt.Tensor(torch.tensor(0.5), ())
    assert torch.equal(dt.sparse_to_dense(labels, label_value=half, other_value=0.0).raw, ints.raw * 0.5)


def test_sparse_to_dense_axis_and_errors():
    b, v = dt.Dim(None, name="b"), dt.Dim(3, name="v")
    plain = dt.Tensor(torch.tensor([2, 0]), (b,))
    out = dt.sparse_to_dense(plain, label_value=1.0, other_value=0.0, axis=v)
    assert out.dims == (b, v) and out.raw.tolist() == [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match=r"dimtorch\.sparse_to_dense\(\): labels have no sparse_dim; give axis "
                                         r"\(labels dims: 'b'\(\?\)\)"):
        dt.sparse_to_dense(plain, label_value=1.0, other_value=0.0)
    with pytest.raises(TypeError, match=r"dimtorch\.sparse_to_dense\(\): labels must be of an integer dtype, got float32"):
        dt.sparse_to_dense(dt.Tensor(torch.zeros(2), (b,)), label_value=1.0, other_value=0.0, axis=v)
    sparse = dt.Tensor(torch.tensor([1, 0]), (b,), sparse_dim=v)
    with pytest.raises(ValueError, match=r"dimtorch\.sparse_to_dense\(\): axis 'w'\(3\) is not the sparse_dim "
                                         r"'v'\(3\) of labels"):
        dt.sparse_to_dense(sparse, label_value=1.0, other_value=0.0, axis=dt.Dim(3, name="w"))
    with pytest.raises(ValueError, match=r"dimtorch\.sparse_to_dense\(\): axis 'n'\(\?\) must be static"):
        dt.sparse_to_dense(plain, label_value=1.0, other_value=0.0, axis=dt.Dim(None, name="n"))
    with pytest.raises(ValueError, match=r"dimtorch\.sparse_to_dense\(\): label_value must be a scalar, got a Tensor "
                                         r"over \('v'\(3\)\)"):
        dt.sparse_to_dense(sparse, label_value=dt.Tensor(torch.ones(3), (v,)), other_value=0.0)
    with pytest.raises(TypeError, match=r"dimtorch\.sparse_to_dense\(\): other_value must be a Python scalar or a "
                                        r"0-dim dimtorch\.Tensor, got str"):
        dt.sparse_to_dense(sparse, label_value=1.0, other_value="0")


# ---- clip_to_valid ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("pad", [float("nan"), 1e30])
def test_gather_clip_to_valid_dynamic_axis(pad):
    """Indices past a sequence's end read its last valid frame (never the padding), negative ones frame 0;
    indices without the batch dim get it from the lengths. Forward and backward per sequence."""
    b = make_padded_batch((5, 3, 1), feature=2, pad_value=pad, extra_time=1)
    k = dt.Dim(4, name="k")
    raw_idx = torch.tensor([[0, 4, 9, -2], [2, 3, 5, 1], [0, 1, 7, -1]])
    idx = dt.Tensor(raw_idx, (b.batch, k), sparse_dim=b.time)
    lengths = torch.tensor(b.lengths)

    def oracle(x, i):
        clipped = torch.minimum(i.clamp(min=0), (lengths - 1).clamp(min=0)[:, None])
        return x.gather(1, clipped[:, :, None].expand(3, 4, 2))

    check_against_torch(lambda x, i: dt.gather(x, indices=i, axis=b.time, clip_to_valid=True), oracle, [b.x, idx],
                        expect_dims=(b.batch, k, b.feature))
    # indices over k only: the result gains the batch dim of the lengths
    only_k = dt.Tensor(torch.tensor([0, 2, 6, 4]), (k,), sparse_dim=b.time)
    out = dt.gather(b.x, indices=only_k, axis=b.time, clip_to_valid=True)
    assert set(out.dims) == {b.batch, k, b.feature}
    torch.testing.assert_close(out.raw_aligned((b.batch, k, b.feature)), oracle(b.x.raw, only_k.raw.expand(3, 4)))
    # an int index, per sequence
    last = dt.gather(b.x, indices=4, axis=b.time, clip_to_valid=True)
    assert last.dims == (b.batch, b.feature)
    torch.testing.assert_close(last.raw, torch.stack([b.x.raw[i, min(4, n - 1)] for i, n in enumerate(b.lengths)]))


def test_gather_clip_to_valid_static_axis_and_fast_path():
    from dimtorch.ops import gather as _gather
    f, v = dt.Dim(3, name="f"), dt.Dim(5, name="vocab")
    emb = dt.Tensor(torch.randn(5, 3), (v, f))
    labels = dt.Tensor(torch.tensor([[0, 7], [-3, 4]]), (dt.Dim(2, name="b"), dt.Dim(2, name="t")), sparse_dim=v)
    out = dt.gather(emb, indices=labels, axis=v, clip_to_valid=True)
    torch.testing.assert_close(out.raw, F.embedding(labels.raw.clamp(0, 4), emb.raw))
    assert dt.gather(emb, indices=9, axis=v, clip_to_valid=True).raw.tolist() == emb.raw[4].tolist()
    # clip_to_valid=False is the fast path's call; True goes to the Python definition
    in_range = dt.Tensor(labels.raw.clamp(0, 4), labels.dims, sparse_dim=v)
    fast = dt.gather(emb, indices=in_range, axis=v, clip_to_valid=False)
    torch.testing.assert_close(fast.raw, _gather.gather(emb, indices=in_range, axis=v).raw)
    with pytest.raises(TypeError, match=r"dimtorch.gather\(\): clip_to_valid must be a bool, got 1"):
        dt.gather(emb, indices=in_range, axis=v, clip_to_valid=1)


@pytest.mark.parametrize("pad", [PAD_NAN, 1e30])
def test_gather_axis_defaults_to_the_sparse_dim_and_indices_may_have_none(pad):
    """RETURNN frontend's forms: gather(x, indices=i) takes axis from i's sparse_dim; indices without a
    sparse_dim (positions computed in a loop body) gather along the given axis. Both against positional
    torch (forward and backward, NaN/1e30 padding) and batch independence; fast path and definition agree."""
    from dimtorch.ops import gather as _gather
    pb = make_padded_batch((4, 2, 1), feature=3, pad_value=pad)
    k = dt.Dim(2, name="k")
    raw = torch.tensor([[0, 3], [1, 0], [0, 0]])
    with_sparse = dt.Tensor(raw, (pb.batch, k), sparse_dim=pb.time)
    without = dt.Tensor(raw, (pb.batch, k))
    oracle = lambda x: torch.gather(x, 1, raw[:, :, None].expand(3, 2, 3))  # noqa: E731
    for fn in (lambda x: dt.gather(x, indices=with_sparse), lambda x: dt.gather(x, indices=without, axis=pb.time),
               lambda x: _gather.gather(x, indices=without, axis=pb.time)):
        check_against_torch(fn, oracle, [pb.x], expect_dims=(pb.batch, k, pb.feature))
    v, f = dt.Dim(10, name="v"), dt.Dim(4, name="f")
    emb = dt.Tensor(torch.randn(10, 4), (v, f))
    idx = dt.Tensor(torch.randint(0, 10, (3, 2)), (pb.batch, k))
    assert torch.equal(dt.gather(emb, indices=idx, axis=v).raw, torch.nn.functional.embedding(idx.raw, emb.raw))
    assert torch.equal(dt.gather(emb, indices=dt.Tensor(idx.raw, idx.dims, sparse_dim=v)).raw,
                       _gather.gather(emb, indices=idx, axis=v).raw)
