"""Tests of python/dimtorch/ops/sort.py: top_k (one dim, several dims), sort, cumsum, top_k_mask, top_p_mask,
against per-sequence torch."""
import itertools

import pytest
import torch

import dimtorch as dt
from helpers import check_against_torch, check_batch_independence, make_padded_batch


def per_sequence(raw, lengths, fn, out_lengths, n_out):
    """Oracle over raw (batch, time, feat): fn(seq (n, feat)) -> (m, feat) per sequence alone, the
    first out_lengths[b] frames kept and zeros after them up to n_out."""
    rows = []
    for b, (n, m) in enumerate(zip(lengths, out_lengths)):
        o = fn(raw[b, :n])[:m]
        rows.append(torch.cat([o, o.new_zeros((n_out - m,) + tuple(o.shape[1:]))]))
    return torch.stack(rows)


def test_top_k_static_axis():
    pb = make_padded_batch([4, 2], feature=6)
    values, idx, k_dim = dt.top_k(pb.x, axis=pb.feature, k=3)
    assert k_dim.size == 3 and values.dims == (pb.batch, pb.time, k_dim) and idx.sparse_dim is pb.feature
    assert idx.dtype == "int64"
    check_against_torch(lambda t: dt.top_k(t, axis=pb.feature, k=k_dim)[:2],
                        lambda r: list(torch.topk(r, 3, dim=2)), [pb.x])


def test_top_k_dynamic_axis_never_selects_padding():
    lengths = [5, 3, 1]
    pb = make_padded_batch(lengths, feature=2, pad_value=1e30, extra_time=1)
    values, idx, k_dim = dt.top_k(pb.x, axis=pb.time, k=3)
    assert k_dim.lengths.raw.tolist() == [3, 3, 1] and values.dims == (pb.batch, k_dim, pb.feature)
    assert idx.sparse_dim is pb.time
    kl = [3, 3, 1]
    check_against_torch(lambda t: dt.top_k(t, axis=pb.time, k=3)[:2],
                        lambda r: [per_sequence(r, lengths, lambda s: torch.topk(s, min(3, s.shape[0]), dim=0)[i],
                                                kl, 3) for i in (0, 1)],
                        [pb.x])
    k1 = dt.Dim(1, name="k1")
    check_batch_independence(lambda t, m: dt.top_k(t, axis=m(pb.time), k=k1)[:2], pb.x, pb.batch, pb.time)


def test_top_k_beam_times_vocab():
    batch, beam, vocab = dt.Dim(2, name="batch"), dt.Dim(3, name="beam"), dt.Dim(5, name="vocab")
    x = dt.Tensor(torch.randn(3, 2, 5), (beam, batch, vocab))
    values, (i_beam, i_vocab), k_dim = dt.top_k(x, axis=(beam, vocab), k=4)
    assert values.dims == (k_dim, batch) and k_dim.size == 4
    assert i_beam.sparse_dim is beam and i_vocab.sparse_dim is vocab
    flat = x.raw.permute(1, 0, 2).reshape(2, 15)
    v, i = torch.topk(flat, 4, dim=1)
    torch.testing.assert_close(values.raw, v.T)
    assert torch.equal(i_beam.raw, (i // 5).T) and torch.equal(i_vocab.raw, (i % 5).T)
    # The indices pick the values.
    picked = x.raw.permute(1, 0, 2)[torch.arange(2)[:, None], i_beam.raw.T, i_vocab.raw.T]
    torch.testing.assert_close(picked, v)
    check_against_torch(lambda t: dt.top_k(t, axis=(beam, vocab), k=k_dim)[0],
                        lambda r: torch.topk(r.permute(1, 0, 2).reshape(2, 15), 4, dim=1)[0].T, [x])


def test_top_k_errors():
    pb = make_padded_batch([3, 1], feature=4)
    with pytest.raises(ValueError, match=r"dimtorch\.top_k\(\): k=5 is larger than the 4 entries of axis "
                                         r"\('feature'\(4\)\)"):
        dt.top_k(pb.x, axis=pb.feature, k=5)
    with pytest.raises(ValueError, match=r"dimtorch\.top_k\(\): axis 'v'\(4\) is not a dim of x"):
        dt.top_k(pb.x, axis=dt.Dim(4, name="v"), k=1)
    with pytest.raises(ValueError, match=r"dimtorch\.top_k\(\): k must be an int >= 1 or a static Dim, got 0"):
        dt.top_k(pb.x, axis=pb.feature, k=0)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_dynamic(descending):
    lengths = [5, 3, 0, 1]
    pb = make_padded_batch(lengths, feature=2, extra_time=1)
    values, idx = dt.sort(pb.x, axis=pb.time, descending=descending)
    assert values.dims == pb.x.dims and idx.sparse_dim is pb.time
    check_against_torch(lambda t: dt.sort(t, axis=pb.time, descending=descending),
                        lambda r: [per_sequence(r, lengths, lambda s: torch.sort(s, 0, descending=descending)[i],
                                                lengths, 5) for i in (0, 1)], [pb.x])
    check_batch_independence(lambda t, m: dt.sort(t, axis=m(pb.time), descending=descending), pb.x, pb.batch,
                             pb.time)


def test_sort_static_int():
    a, f = dt.Dim(2, name="a"), dt.Dim(4, name="f")
    x = dt.Tensor(torch.tensor([[3, 1, 2, 0], [5, 7, 6, 4]]), (a, f))
    values, idx = dt.sort(x, axis=f, descending=True)
    assert values.raw.tolist() == [[3, 2, 1, 0], [7, 6, 5, 4]] and idx.raw.tolist() == [[0, 2, 1, 3], [1, 2, 0, 3]]
    with pytest.raises(ValueError, match=r"dimtorch\.sort\(\): axis 'g'\(1\) is not a dim of x"):
        dt.sort(x, axis=dt.Dim(1, name="g"))


def test_cumsum():
    lengths = [5, 3, 0, 1]
    pb = make_padded_batch(lengths, feature=2, extra_time=1)
    y = dt.cumsum(pb.x, axis=pb.time)
    assert y.dims == pb.x.dims
    check_against_torch(lambda t: dt.cumsum(t, axis=pb.time),
                        lambda r: per_sequence(r, lengths, lambda s: torch.cumsum(s, 0), lengths, 5), [pb.x])
    # Padding contributes 0: frames past a sequence's end repeat its total, and no NaN from the NaN padding.
    assert not y.raw.isnan().any()
    torch.testing.assert_close(y.raw[1, 4], pb.x.raw[1, :3].sum(0))
    check_batch_independence(lambda t, m: dt.cumsum(t, axis=m(pb.time)), pb.x, pb.batch, pb.time)
    check_against_torch(lambda t: dt.cumsum(t, axis=pb.feature), lambda r: torch.cumsum(r, 2), [pb.x])
    with pytest.raises(ValueError, match=r"dimtorch\.cumsum\(\): axis 'g'\(1\) is not a dim of x"):
        dt.cumsum(pb.x, axis=dt.Dim(1, name="g"))


def test_top_k_over_dynamic_time_and_feature_never_selects_padding():
    lengths = [3, 1]
    pb = make_padded_batch(lengths, feature=2, pad_value=1e30, extra_time=2)
    k2 = dt.Dim(2, name="k2")
    values, (i_t, i_f), k_dim = dt.top_k(pb.x, axis=(pb.time, pb.feature), k=k2)
    assert k_dim is k2 and values.dims == (pb.batch, k2)
    for b, n in enumerate(lengths):
        v, i = torch.topk(pb.x.raw[b, :n].reshape(-1), 2)
        torch.testing.assert_close(values.raw[b], v)
        assert i_t.raw[b].tolist() == (i // 2).tolist() and i_f.raw[b].tolist() == (i % 2).tolist()
    check_against_torch(lambda t: dt.top_k(t, axis=(pb.time, pb.feature), k=k2)[0],
                        lambda r: torch.stack([torch.topk(r[b, :n].reshape(-1), 2)[0] for b, n in enumerate(lengths)]),
                        [pb.x])


def test_top_k_static_keeps_markers_and_int_dtype():
    pb = make_padded_batch([3, 1], feature=4)
    x = dt.Tensor(pb.x.raw, pb.x.dims, feature_dim=pb.time)
    values, idx, k_dim = dt.top_k(x, axis=pb.feature, k=2)
    assert values.feature_dim is pb.time and idx.sparse_dim is pb.feature and k_dim.size == 2
    values, idx, k_dim = dt.top_k(pb.x, axis=pb.feature, k=2)
    assert values.feature_dim is None and values.dims == (pb.batch, pb.time, k_dim)
    xi = dt.Tensor(torch.tensor([[3, 9, 1], [4, 0, 8]]), (pb.batch, dt.Dim(3, name="v")))
    values, idx, _ = dt.top_k(xi, axis=xi.dims[1], k=1)
    assert values.raw.tolist() == [[9], [8]] and idx.raw.tolist() == [[1], [2]]


def test_cumsum_errors_and_static():
    b2 = dt.Dim(None, name="b2")
    t = dt.Dim(dt.Tensor(torch.tensor([2, 1]), (b2,)), name="t")
    x = dt.Tensor(torch.randn(2, 3), (t, dt.Dim(3, name="f")))
    with pytest.raises(ValueError, match=r"dimtorch\.cumsum\(\): the lengths of 't'\[b2\] vary over 'b2'"):
        dt.cumsum(x, axis=t)
    with pytest.raises(TypeError, match=r"dimtorch\.cumsum\(\): x must be a dimtorch\.Tensor"):
        dt.cumsum(x.raw, axis=t)


# ---- search_sorted --------------------------------------------------------------------------------------

def _sorted_batch(lengths, pad, seed=0):
    """(batch, time) ascending per sequence, padding `pad`; and values (batch, k) around them."""
    b = make_padded_batch(lengths, feature=1, pad_value=pad, extra_time=1, seed=seed)
    raw = b.x.raw[:, :, 0]
    seq = torch.where(b.mask, raw, float("inf")).sort(dim=1).values
    seq = torch.where(b.mask, seq, pad)
    return b, dt.Tensor(seq, (b.batch, b.time))


@pytest.mark.parametrize("pad", [float("nan"), 1e30, -1e30])
@pytest.mark.parametrize("side", ["left", "right"])
def test_search_sorted_dynamic_per_sequence(pad, side):
    """Each sequence is searched within its own length: positions are those of the sequence alone, never
    beyond its length, whatever its padding holds."""
    b, seq = _sorted_batch((5, 3, 0, 1), pad)
    k = dt.Dim(6, name="k")
    g = torch.Generator().manual_seed(1)
    vals = torch.randn(4, 6, generator=g) * 2
    vals[:, 0] = float("inf")
    vals[:, 1] = seq.raw[:, 0].nan_to_num(0.0)  # ties, on both sides
    values = dt.Tensor(vals, (b.batch, k))

    def oracle(s, v):
        rows = [torch.searchsorted(s[i, :n].contiguous(), v[i].contiguous(), side=side, out_int32=True)
                for i, n in enumerate(b.lengths)]
        return torch.stack(rows)

    check_against_torch(lambda s, v: dt.search_sorted(s, v, axis=b.time, side=side), oracle, [seq, values],
                        backward=False)
    out = dt.search_sorted(seq, values, axis=b.time, side=side, out_dtype="int64")
    assert out.dims == (b.batch, k) and out.sparse_dim is b.time and out.dtype == "int64"


def test_search_sorted_static_layouts_and_dtypes():
    v_dim, b_dim, t_dim, h_dim = dt.Dim(7, name="vocab"), dt.Dim(3, name="batch"), dt.Dim(4, name="t"), dt.Dim(2, name="h")
    g = torch.Generator().manual_seed(0)
    bounds = dt.Tensor(torch.randn(7, generator=g).sort().values, (v_dim,))
    x = dt.Tensor(torch.randn(3, 4, generator=g), (b_dim, t_dim))
    # 1-D boundaries: any values (bucketize)
    check_against_torch(lambda s, v: dt.search_sorted(s, v, axis=v_dim), lambda s, v: torch.searchsorted(s, v, out_int32=True),
                        [bounds, x], backward=False, expect_dims=(b_dim, t_dim))
    # batched boundaries over (h, vocab) in another order; values over (t, h, batch): shared dims first
    per_h = dt.Tensor(torch.randn(7, 2, generator=g).sort(dim=0).values, (v_dim, h_dim))
    vals = dt.Tensor(torch.randn(4, 2, 3, generator=g), (t_dim, h_dim, b_dim))
    check_against_torch(lambda s, v: dt.search_sorted(s, v, axis=v_dim, side="right"),
                        lambda s, v: torch.searchsorted(s.t().contiguous(), v.permute(1, 0, 2).reshape(2, 12),
                                                        side="right", out_int32=True).reshape(2, 4, 3),
                        [per_h, vals], backward=False, expect_dims=(h_dim, t_dim, b_dim))
    # int boundaries with float values: promoted like torch
    ints = dt.Tensor(torch.tensor([0, 2, 4, 6, 8, 10, 12]), (v_dim,))
    out = dt.search_sorted(ints, dt.Tensor(torch.tensor([1.5, 12.0, -1.0]), (dt.Dim(3),)), axis=v_dim)
    assert out.raw.tolist() == [1, 6, 0]


def test_search_sorted_errors():
    b, seq = _sorted_batch((5, 3), 0.0)
    k = dt.Dim(2, name="k")
    values = dt.Tensor(torch.zeros(2), (k,))
    with pytest.raises(ValueError, match=r"dimtorch.search_sorted\(\): dim 'batch'\(\?\) of sorted_seq is not a dim of "
                                         r"values \(values dims: 'k'\(2\)\)"):
        dt.search_sorted(seq, values, axis=b.time)
    with pytest.raises(ValueError, match=r"dimtorch.search_sorted\(\): side must be 'left' or 'right', got 'middle'"):
        dt.search_sorted(seq, values, axis=b.time, side="middle")
    with pytest.raises(ValueError, match=r"dimtorch.search_sorted\(\): out_dtype must be 'int32' or 'int64'"):
        dt.search_sorted(seq, values, axis=b.time, out_dtype="float32")
    with pytest.raises(ValueError, match=r"dimtorch.search_sorted\(\): axis 'k'\(2\) is not a dim of sorted_seq"):
        dt.search_sorted(seq, values, axis=k)
    with pytest.raises(TypeError, match=r"dimtorch.search_sorted\(\): values must be a dimtorch.Tensor"):
        dt.search_sorted(seq, 1.0, axis=b.time)


def _torch_top_k_mask(raw, valid, k, axis):
    r = torch.where(valid, raw, float("-inf"))
    return torch.zeros_like(raw, dtype=torch.bool).scatter_(axis, r.topk(k, axis).indices, True) & valid


def test_top_k_mask_against_torch():
    pb = make_padded_batch((6, 3, 0, 1), pad_value=float("nan"), extra_time=1)
    valid = pb.mask[:, :, None]
    out = dt.top_k_mask(pb.x, axis=pb.feature, k=2)
    assert out.dims == pb.x.dims and out.dtype == "bool"
    assert torch.equal(out.raw & valid, _torch_top_k_mask(pb.x.raw.nan_to_num(), valid.expand(pb.x.raw.shape), 2, 2)
                       & valid)
    # along the dynamic time: padding never selected; a sequence shorter than k keeps all its frames
    out = dt.top_k_mask(pb.x.copy_transpose((pb.feature, pb.time, pb.batch)), axis=pb.time, k=2)
    want = _torch_top_k_mask(pb.x.raw, valid.expand(pb.x.raw.shape), 2, 1)
    assert torch.equal(out.raw.permute(2, 1, 0), want)
    assert out.raw.sum(1).tolist() == [[2, 2, 0, 1]] * 4
    check_batch_independence(lambda x, m: dt.top_k_mask(x, axis=m(pb.time), k=3), pb.x, pb.batch, pb.time)
    with pytest.raises(ValueError, match=r"dimtorch\.top_k_mask\(\): k must be an int >= 1"):
        dt.top_k_mask(pb.x, axis=pb.feature, k=0)
    with pytest.raises(ValueError, match=r"dimtorch\.top_k_mask\(\): axis 'other'\(2\) is not a dim of values|"
                                         r"dimtorch\.top_k_mask\(\).*'other'"):
        dt.top_k_mask(pb.x, axis=dt.Dim(2, name="other"), k=1)


def _torch_top_p_mask(probs, p, one_more, min_keep):
    """Per row (last axis), by hand: sort descending, keep while the cumulative mass is <= p (and one more),
    at least min_keep."""
    out = torch.zeros_like(probs, dtype=torch.bool)
    for idx in itertools.product(*(range(n) for n in probs.shape[:-1])):
        row = probs[idx]
        order = sorted(range(row.numel()), key=lambda i: -float(row[i]))
        total, kept = 0.0, []
        for rank, i in enumerate(order):
            total += float(row[i])
            if total <= p or rank < min_keep or (one_more and (rank == 0 or total - float(row[i]) <= p)):
                kept.append(i)
        out[idx][kept] = True
    return out


@pytest.mark.parametrize("one_more, min_keep", [(True, 1), (False, 0), (False, 2), (True, 3)])
def test_top_p_mask_against_torch(one_more, min_keep):
    pb = make_padded_batch((5, 3, 1), feature=6, pad_value=float("nan"), extra_time=1)
    probs = dt.softmax(pb.x * 2.0, axis=pb.feature)
    out = dt.top_p_mask(probs, axis=pb.feature, p=0.6, one_more=one_more, min_tokens_to_keep=min_keep)
    valid = pb.mask[:, :, None]
    want = _torch_top_p_mask(torch.where(valid, probs.raw, 0.0), 0.6, one_more, min_keep)
    assert torch.equal(out.raw & valid, want & valid)
    # p per sequence; along the dynamic time (padding never selected)
    p = dt.Tensor(torch.tensor([0.3, 0.9, 0.5]), (pb.batch,))
    out = dt.top_p_mask(probs, axis=pb.feature, p=p, one_more=one_more, min_tokens_to_keep=min_keep)
    for b in range(3):
        assert torch.equal(out.raw[b] & valid[b], _torch_top_p_mask(probs.raw[b], float(p.raw[b]), one_more,
                                                                     min_keep) & valid[b])
    over_time = dt.softmax(pb.x, axis=pb.time)
    out = dt.top_p_mask(over_time, axis=pb.time, p=0.5, one_more=one_more, min_tokens_to_keep=min_keep)
    assert not (out.raw & ~valid).any()
    check_batch_independence(lambda x, m: dt.top_p_mask(dt.softmax(x, axis=m(pb.time)), axis=m(pb.time), p=0.5,
                                                         one_more=one_more, min_tokens_to_keep=min_keep),
                             pb.x, pb.batch, pb.time)


def test_top_p_mask_errors():
    pb = make_padded_batch((3, 2))
    with pytest.raises(ValueError, match=r"dimtorch\.top_p_mask\(\): p must be a number in \[0, 1\] or a Tensor"):
        dt.top_p_mask(pb.x, axis=pb.feature, p=1.5)
    with pytest.raises(ValueError, match=r"dimtorch\.top_p_mask\(\): p has dim 'feature'\(4\)"):
        dt.top_p_mask(pb.x, axis=pb.feature, p=dt.Tensor(torch.zeros(4), (pb.feature,)))
    with pytest.raises(ValueError, match=r"dimtorch\.top_p_mask\(\): min_tokens_to_keep must be an int >= 0"):
        dt.top_p_mask(pb.x, axis=pb.feature, p=0.5, min_tokens_to_keep=-1)


def test_top_k_returnn_frontends_signature():
    """k_dim= (the out dim; k, if given too, its size), k=None, sorted=; several axes give a list of indices.
    The fast path (one static axis) and the definition agree; against torch.topk."""
    from dimtorch.ops import sort as _sort
    pb = make_padded_batch((3, 2), feature=5)
    k_dim = dt.Dim(2, name="k")
    raw = torch.nan_to_num(pb.x.raw, nan=0.0)
    x = dt.Tensor(raw, pb.x.dims)
    for fn in (dt.top_k, _sort.top_k):
        values, idx, kd = fn(x, axis=pb.feature, k_dim=k_dim, sorted=False)
        assert kd is k_dim and values.dims == (pb.batch, pb.time, k_dim)
        ref = torch.topk(raw, 2, dim=-1)
        assert torch.equal(values.raw, ref.values) and torch.equal(idx.raw, ref.indices) and idx.sparse_dim is pb.feature
        assert fn(x, axis=pb.feature, k=2, k_dim=k_dim)[2] is k_dim
    beam = dt.Dim(3, name="beam")
    y = dt.Tensor(torch.randn(2, 3, 5), (pb.batch, beam, pb.feature))
    values, indices, kd = dt.top_k(y, axis=[beam, pb.feature], k_dim=k_dim)
    assert isinstance(indices, list) and [i.sparse_dim for i in indices] == [beam, pb.feature]
    ref = torch.topk(y.raw.reshape(2, 15), 2, dim=-1)
    assert torch.equal(values.raw, ref.values) and torch.equal(indices[0].raw * 5 + indices[1].raw, ref.indices)
    with pytest.raises(ValueError, match=r"dimtorch\.top_k\(\): k=3 does not match k_dim"):
        dt.top_k(y, axis=pb.feature, k=3, k_dim=k_dim)
    with pytest.raises(TypeError, match=r"dimtorch\.top_k\(\): give k"):
        dt.top_k(y, axis=pb.feature)


def test_cumsum_spatial_dim_is_axis():
    """RETURNN frontend's spatial_dim= is dimtorch's axis= (give one)."""
    pb = make_padded_batch((3, 1))
    assert torch.equal(dt.cumsum(pb.x, spatial_dim=pb.time).raw, dt.cumsum(pb.x, axis=pb.time).raw)
    with pytest.raises(TypeError, match=r"dimtorch\.cumsum\(\): missing the dim"):
        dt.cumsum(pb.x)
