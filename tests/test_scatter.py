"""Tests of python/dimtorch/_scatter.py: scatter-add against torch's scatter_add, with batch dims and padding."""
import pytest
import torch

import dimtorch as dt
from helpers import check_against_torch, make_padded_batch


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
