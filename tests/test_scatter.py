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
