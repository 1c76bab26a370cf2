"""Tests of python/dimtorch/ops/scatter.py: scatter-add against torch's scatter_add, with batch dims and padding."""
import pytest
import torch

import dimtorch as dt
from helpers import check_against_torch, check_batch_independence, make_padded_batch


def test_scatter_static_with_batch_dim():
    batch, k, f, out = dt.Dim(2, name="batch"), dt.Dim(4, name="k"), dt.Dim(3, name="f"), dt.Dim(5, name="out")
    x = dt.Tensor(torch.randn(4, 2, 3), (k, batch, f))
    idx = dt.Tensor(torch.tensor([[0, 4, 0, 2], [1, 1, 3, 3]]), (batch, k), sparse_dim=out)
    y = dt.scatter(x, indices=idx, indices_dim=k)
    assert y.dims == (out, batch, f)

    def oracle(r, ir):
        src = r.permute(1, 0, 2)  # (batch, k, f)
        res = src.new_zeros(2, 5, 3).scatter_add(1, ir.unsqueeze(-1).expand(2, 4, 3), src)
        return res.permute(1, 0, 2)

    check_against_torch(lambda t, i: dt.scatter(t, indices=i, indices_dim=k), oracle, [x, idx])


def test_scatter_dynamic_padding_adds_nothing():
    lengths = [4, 2, 0]
    pb = make_padded_batch(lengths, feature=2, extra_time=1)
    out = dt.Dim(3, name="out")
    g = torch.Generator().manual_seed(0)
    raw_idx = torch.randint(0, 3, (3, 5), generator=g)
    raw_idx[0, 4:] = 99  # garbage in the padding
    raw_idx[1, 2:] = -7
    idx = dt.Tensor(raw_idx, (pb.batch, pb.time), sparse_dim=out)
    y = dt.scatter(pb.x, indices=idx, indices_dim=pb.time, out_dim=out)
    assert y.dims == (pb.batch, out, pb.feature)

    def oracle(r, ir):
        rows = []
        for b, n in enumerate(lengths):
            rows.append(r.new_zeros(3, 2).index_add(0, ir[b, :n], r[b, :n]))
        return torch.stack(rows)

    check_against_torch(lambda t, i: dt.scatter(t, indices=i, indices_dim=pb.time, out_dim=out), oracle, [pb.x, idx])


def test_scatter_errors():
    k, out = dt.Dim(2, name="k"), dt.Dim(3, name="out")
    x = dt.Tensor(torch.randn(2), (k,))
    with pytest.raises(ValueError, match=r"dimtorch\.scatter\(\): indices have no sparse_dim and no out_dim is given"):
        dt.scatter(x, indices=dt.Tensor(torch.zeros(2, dtype=torch.int64), (k,)), indices_dim=k)
    idx = dt.Tensor(torch.zeros(2, dtype=torch.int64), (k,), sparse_dim=out)
    with pytest.raises(ValueError, match=r"dimtorch\.scatter\(\): the sparse_dim of indices is 'out'\(3\), but out_dim "
                                         r"is 'o2'\(3\)"):
        dt.scatter(x, indices=idx, indices_dim=k, out_dim=dt.Dim(3, name="o2"))
    with pytest.raises(ValueError, match=r"dimtorch\.scatter\(\): indices_dim 'j'\(2\) is not a dim of x"):
        dt.scatter(x, indices=idx, indices_dim=dt.Dim(2, name="j"))
    with pytest.raises(TypeError, match=r"dimtorch\.scatter\(\): indices must be of an integer dtype, got float32"):
        dt.scatter(x, indices=dt.Tensor(torch.zeros(2), (k,), sparse_dim=out), indices_dim=k)


@pytest.mark.parametrize("perm", [(0, 1, 2), (1, 2, 0), (2, 0, 1)])
@pytest.mark.parametrize("idx_dtype", [torch.int64, torch.int32])
def test_scatter_dynamic_any_layout_indices_broadcast(perm, idx_dtype):
    """One dynamic indices dim in any layout of x; indices over (time, batch) only (broadcast over
    feature), garbage in their padding; frames beyond the max length add nothing."""
    lengths = [4, 1, 0]
    pb = make_padded_batch(lengths, feature=2, extra_time=2, pad_value=1e30)
    out = dt.Dim(3, name="out")
    raw_idx = torch.randint(0, 3, (6, 3), generator=torch.Generator().manual_seed(1)).to(idx_dtype)
    for b, n in enumerate(lengths):
        raw_idx[n:, b] = 1000 + b
    idx = dt.Tensor(raw_idx, (pb.time, pb.batch), sparse_dim=out)
    x = dt.Tensor(pb.x.raw.permute(perm), tuple(pb.x.dims[i] for i in perm))
    y = dt.scatter(x, indices=idx, indices_dim=pb.time)
    assert y.dims == tuple(out if d is pb.time else d for d in x.dims)
    inv = [perm.index(i) for i in range(3)]

    def oracle(r, ir):
        r = r.permute(inv)  # (batch, time, feature)
        rows = [r.new_zeros(3, 2).index_add(0, ir[:n, b].long(), r[b, :n]) for b, n in enumerate(lengths)]
        return torch.stack(rows).permute(perm)

    check_against_torch(lambda t, i: dt.scatter(t, indices=i, indices_dim=pb.time), oracle, [x, idx])


def test_scatter_static_indices_dim_with_dynamic_batch_dim():
    """A static indices dim beside a dynamic dim of x: no masking, every frame scatters."""
    pb = make_padded_batch([2, 1], feature=4, pad_value=0.5)
    out = dt.Dim(2, name="out")
    raw_idx = torch.tensor([[1, 0, 1, 1], [0, 0, 1, 0]])
    idx = dt.Tensor(raw_idx, (pb.batch, pb.feature), sparse_dim=out)
    y = dt.scatter(pb.x, indices=idx, indices_dim=pb.feature)
    assert y.dims == (pb.batch, pb.time, out)
    expected = pb.x.raw.new_zeros(2, 2, 2).scatter_add(2, raw_idx[:, None, :].expand(2, 2, 4), pb.x.raw)
    torch.testing.assert_close(y.raw, expected)


def test_scatter_lengths_over_a_dim_x_lacks():
    b2 = dt.Dim(None, name="b2")
    t = dt.Dim(dt.Tensor(torch.tensor([2, 1]), (b2,)), name="t")
    f, out = dt.Dim(3, name="f"), dt.Dim(4, name="out")
    x = dt.Tensor(torch.randn(2, 3), (t, f))
    idx = dt.Tensor(torch.zeros(2, dtype=torch.int64), (t,), sparse_dim=out)
    with pytest.raises(ValueError, match=r"dimtorch\.scatter\(\): the lengths of 't'\[b2\] vary over 'b2'"):
        dt.scatter(x, indices=idx, indices_dim=t)


# ---- modes and fill_value --------------------------------------------------------------------------------

MODES = ["sum", "max", "min", "mean", "logsumexp", "logmeanexp", "argmax"]


def _reduce(vals: torch.Tensor, positions: torch.Tensor, mode: str, fill):
    """vals (k, F) of one out position, positions (k,) along the indices dim: the mode's reduction over k."""
    if vals.shape[0] == 0:
        default = {"sum": 0.0, "mean": 0.0, "max": float("-inf"), "min": float("inf"), "logsumexp": float("-inf"),
                   "logmeanexp": float("-inf"), "argmax": -1}[mode]
        value = default if fill is None else fill
        dtype = torch.int64 if mode == "argmax" else vals.dtype
        return torch.full(vals.shape[1:], value, dtype=dtype) + (0 * vals.sum(0)).to(dtype)
    if mode == "sum":
        return vals.sum(0)
    if mode == "mean":
        return vals.mean(0)
    if mode == "max":
        return vals.amax(0)
    if mode == "min":
        return vals.amin(0)
    if mode == "logsumexp":
        return torch.logsumexp(vals, 0)
    if mode == "logmeanexp":
        return torch.logsumexp(vals, 0) - torch.log(torch.tensor(float(vals.shape[0])))
    return positions[vals.argmax(0)]  # argmax: the first position of the max


def _scatter_oracle(lengths, n_out, mode, fill):
    def fn(x, idx):  # x (batch, time, feature), idx (batch, time)
        rows = []
        for b, n in enumerate(lengths):
            xs, ids = x[b, :n], idx[b, :n]
            rows.append(torch.stack([_reduce(xs[ids == o], torch.nonzero(ids == o).squeeze(1), mode, fill)
                                     for o in range(n_out)]))
        return torch.stack(rows)
    return fn


@pytest.mark.parametrize("pad", [float("nan"), 1e30])
@pytest.mark.parametrize("fill", [None, 2.5])
@pytest.mark.parametrize("mode", MODES)
def test_scatter_modes_against_torch(mode, fill, pad):
    """Every mode over a dynamic indices dim, with garbage indices and NaN/1e30 values in the padding; empty
    out positions hold the fill value; forward and backward per sequence."""
    lengths = [5, 3, 0, 1]
    pb = make_padded_batch(lengths, feature=3, extra_time=1, pad_value=pad)
    out = dt.Dim(4, name="out")
    raw_idx = torch.randint(0, 3, (4, 6), generator=torch.Generator().manual_seed(2))  # position 3 stays empty
    raw_idx[0, 0] = raw_idx[0, 1]  # a repeated position with equal values: argmax takes the first
    pb.x.raw[0, 1] = pb.x.raw[0, 0]
    for b, n in enumerate(lengths):
        raw_idx[b, n:] = 10 ** 6
    idx = dt.Tensor(raw_idx, (pb.batch, pb.time), sparse_dim=out)
    fill_arg = None if fill is None else (int(fill) if mode == "argmax" else fill)
    check_against_torch(lambda t, i: dt.scatter(t, indices=i, indices_dim=pb.time, mode=mode, fill_value=fill_arg),
                        _scatter_oracle(lengths, 4, mode, fill_arg), [pb.x, idx], rtol=1e-5, atol=1e-5,
                        backward=mode != "argmax")
    y = dt.scatter(pb.x, indices=idx, indices_dim=pb.time, mode=mode, fill_value=fill_arg)
    assert y.dims == (pb.batch, out, pb.feature)
    if mode == "argmax":
        assert y.dtype == "int64" and y.sparse_dim is pb.time
    else:
        assert y.feature_dim is pb.feature


@pytest.mark.parametrize("mode", MODES)
def test_scatter_modes_batch_independence(mode):
    pb = make_padded_batch([5, 3, 0, 1], feature=3, extra_time=1, pad_value=float("nan"))
    vocab = dt.Dim(3, name="vocab")

    def fn(x, dim_map):
        first = dt.gather(x, indices=0, axis=pb.feature)
        idx = dt.cast(dt.abs(first) * 4.0, "int64") % 3  # garbage in the padding, in range
        idx = dt.Tensor(idx.raw, idx.dims, sparse_dim=vocab)
        return dt.scatter(x, indices=idx, indices_dim=dim_map(pb.time), mode=mode)

    check_batch_independence(fn, pb.x, pb.batch, pb.time)


@pytest.mark.parametrize("mode", ["sum", "max", "mean", "logmeanexp"])
def test_scatter_modes_several_dims(mode):
    """Two indices dims (one dynamic), several out dims (merged positions), indices broadcast over feature."""
    lengths = [3, 1]
    pb = make_padded_batch(lengths, feature=2, extra_time=1, pad_value=float("nan"))
    heads = dt.Dim(2, name="heads")
    x = dt.Tensor(torch.stack([pb.x.raw, 2 * pb.x.raw], dim=2), (pb.batch, pb.time, heads, pb.feature))
    o1, o2 = dt.Dim(2, name="o1"), dt.Dim(3, name="o2")
    raw_idx = torch.randint(0, 6, (2, 4, 2), generator=torch.Generator().manual_seed(5))
    idx = dt.Tensor(raw_idx, (pb.batch, pb.time, heads))
    y = dt.scatter(x, indices=idx, indices_dim=(pb.time, heads), out_dim=(o1, o2), mode=mode)
    assert y.dims == (pb.batch, o1, o2, pb.feature)
    for b, n in enumerate(lengths):
        vals = x.raw[b, :n].reshape(n * 2, 2)
        ids = raw_idx[b, :n].reshape(n * 2)
        for o in range(6):
            expected = _reduce(vals[ids == o], torch.nonzero(ids == o).squeeze(1), mode, None)
            torch.testing.assert_close(y.raw[b, o // 3, o % 3], expected, equal_nan=True)


def test_scatter_fill_value_int_mean_and_use_mask():
    k, out = dt.Dim(4, name="k"), dt.Dim(3, name="out")
    x = dt.Tensor(torch.tensor([1, 2, 4, 7]), (k,))
    idx = dt.Tensor(torch.tensor([0, 0, 2, 2]), (k,), sparse_dim=out)
    assert dt.scatter(x, indices=idx, indices_dim=k, mode="mean").raw.tolist() == [1.5, 0.0, 5.5]
    assert dt.scatter(x, indices=idx, indices_dim=k, mode="max").raw.tolist() == [2, torch.iinfo(torch.int64).min, 7]
    assert dt.scatter(x, indices=idx, indices_dim=k, fill_value=-5).raw.tolist() == [3, -5, 11]
    assert dt.scatter(x, indices=idx, indices_dim=k, mode="argmax", fill_value=9).raw.tolist() == [1, 9, 3]
    # use_mask=False: padding entries scatter too (their indices must be in range then)
    b2 = dt.Dim(None, name="b")
    t = dt.Dim(dt.Tensor(torch.tensor([1, 2]), (b2,)), name="t")
    xt = dt.Tensor(torch.ones(2, 2), (b2, t))
    it = dt.Tensor(torch.zeros(2, 2, dtype=torch.int64), (b2, t), sparse_dim=out)
    assert dt.scatter(xt, indices=it, indices_dim=t).raw[:, 0].tolist() == [1.0, 2.0]
    assert dt.scatter(xt, indices=it, indices_dim=t, use_mask=False).raw[:, 0].tolist() == [2.0, 2.0]


def test_scatter_mode_errors():
    k, out = dt.Dim(2, name="k"), dt.Dim(3, name="out")
    x = dt.Tensor(torch.randn(2), (k,))
    idx = dt.Tensor(torch.zeros(2, dtype=torch.int64), (k,), sparse_dim=out)
    with pytest.raises(ValueError, match=r"dimtorch\.scatter\(\): mode must be one of 'sum', 'max', .* got 'prod'"):
        dt.scatter(x, indices=idx, indices_dim=k, mode="prod")
    with pytest.raises(TypeError, match=r"dimtorch\.scatter\(\): fill_value must be a Python number or None, got 'x'"):
        dt.scatter(x, indices=idx, indices_dim=k, fill_value="x")
    with pytest.raises(TypeError, match=r"dimtorch\.scatter\(\): use_mask must be a bool or None"):
        dt.scatter(x, indices=idx, indices_dim=k, use_mask=1)
    h = dt.Dim(2, name="h")
    x2 = dt.Tensor(torch.randn(2, 2), (k, h))
    with pytest.raises(ValueError, match=r"dimtorch\.scatter\(\): mode 'argmax' takes one indices_dim"):
        dt.scatter(x2, indices=dt.Tensor(torch.zeros(2, 2, dtype=torch.int64), (k, h), sparse_dim=out),
                   indices_dim=(k, h), mode="argmax")
    with pytest.raises(ValueError, match=r"dimtorch\.scatter\(\): several out dims must be static"):
        dt.scatter(x, indices=dt.Tensor(idx.raw, (k,)), indices_dim=k, out_dim=(out, dt.Dim(None, name="u")))


@pytest.mark.parametrize("mode", ["sum", "max", "min", "mean", "logsumexp", "logmeanexp"])
def test_scatter_modes_padding_never_reaches_values_or_gradients(mode):
    from helpers import check_padding_invariance
    out = dt.Dim(3, name="out")
    raw_idx = torch.randint(0, 3, (4, 6), generator=torch.Generator().manual_seed(7))

    def fn(x):
        batch, time = x.dims[0], x.dims[1]
        return dt.scatter(x, indices=dt.Tensor(raw_idx, (batch, time), sparse_dim=out), indices_dim=time, mode=mode)

    check_padding_invariance(fn, (5, 3, 0, 1), extra_time=1, rtol=1e-5, atol=1e-5)


def test_scatter_count_against_torch():
    pb = make_padded_batch((6, 3, 0, 1), extra_time=1)
    vocab = dt.Dim(5, name="vocab")
    g = torch.Generator().manual_seed(0)
    raw = torch.randint(0, 5, (4, 7), generator=g)
    raw[pb.mask.logical_not()] = 99  # garbage in the padding
    indices = dt.Tensor(raw.t().contiguous(), (pb.time, pb.batch), sparse_dim=vocab)

    def torch_count(r, fill):
        ones = pb.mask.t().to(torch.int32)
        counts = torch.zeros(4, 6, dtype=torch.int32).scatter_add_(1, torch.where(pb.mask.t(), r, 5).t(), ones.t())
        counts = counts[:, :5]
        return counts if fill is None else torch.where(counts > 0, counts, fill)
    for fill in (None, -1):
        out = dt.scatter_count(indices=indices, indices_dim=pb.time, fill_value=fill)
        assert out.dims == (vocab, pb.batch) and out.dtype == "int32"  # out_dim where indices_dim was
        assert torch.equal(out.raw.t(), torch_count(indices.raw, fill))
    full = dt.scatter_count(indices=indices, indices_dim=pb.time)
    for b, n in enumerate(pb.lengths):  # each sequence alone
        b1 = dt.Dim(None, name="b1")
        t1 = dt.Dim(dt.Tensor(torch.tensor([n]), (b1,)), name="t1")
        one = dt.scatter_count(indices=dt.Tensor(raw[b:b + 1, :n], (b1, t1), sparse_dim=vocab), indices_dim=t1)
        assert one.dims == (b1, vocab) and torch.equal(one.raw[0], full.raw[:, b]), b
    with pytest.raises(TypeError, match=r"dimtorch\.scatter_count\(\): fill_value must be an int or None"):
        dt.scatter_count(indices=indices, indices_dim=pb.time, fill_value=0.5)
    with pytest.raises(ValueError, match=r"dimtorch\.scatter_count\(\)"):
        dt.scatter_count(indices=indices, indices_dim=vocab)
