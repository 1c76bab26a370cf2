"""Tests of src/ops_shape.cpp beyond its ops' own test files: the merged dim that merge_dims' fast path caches."""
import pytest
import torch

import dimtorch as dt
from helpers import check_against_torch


def test_merge_dims_gives_the_same_dim_for_the_same_dims():
    b, t, h, d = dt.Dim(None, name="b"), dt.Dim(5, name="t"), dt.Dim(2, name="h"), dt.Dim(4, name="d")
    q = dt.Tensor(torch.randn(3, 5, 2, 4), (b, t, h, d))
    k = dt.Tensor(torch.randn(5, 2, 4), (t, h, d))
    qm, m = dt.merge_dims(q, dims=(h, d))
    km, m2 = dt.merge_dims(k, dims=(h, d))
    assert m2 is m and m.size == 8 and m.name == "h*d" and qm.dims == (b, t, m) and km.dims == (t, m)
    # Merged the same way, the two combine along the merged dim.
    check_against_torch(lambda x, y: dt.merge_dims(x, dims=(h, d))[0] * dt.merge_dims(y, dims=(h, d))[0],
                        lambda x, y: x.reshape(3, 5, 8) * y.reshape(5, 8), [q, k])
    _, other = dt.merge_dims(q, dims=(t, h))
    assert other is not m and other.size == 10


def test_merge_dims_when_x_holds_the_cached_dim_already():
    h, d = dt.Dim(2, name="h"), dt.Dim(4, name="d")
    _, m = dt.merge_dims(dt.Tensor(torch.randn(2, 4), (h, d)), dims=(h, d))
    x = dt.Tensor(torch.randn(8, 2, 4), (m, h, d))
    y, m2 = dt.merge_dims(x, dims=(h, d))  # m again would appear twice: a new dim
    assert m2 is not m and m2.size == 8 and y.dims == (m, m2)
    assert torch.equal(y.raw, x.raw.reshape(8, 8))


def test_merge_dims_python_path_gives_the_fast_paths_dim():
    """Adjacent dims take the C++ fast path, permuted ones the Python definition: same merged dim."""
    batch, heads, d = dt.Dim(None, name="batch"), dt.Dim(2, name="heads"), dt.Dim(3, name="d")
    _, fast = dt.merge_dims(dt.Tensor(torch.randn(4, 2, 3), (batch, heads, d)), dims=(heads, d))
    _, slow = dt.merge_dims(dt.Tensor(torch.randn(2, 4, 3), (heads, batch, d)), dims=(heads, d))
    assert fast is slow and fast.size == 6


def test_merge_dims_fast_path_refuses_merging_away_what_lengths_vary_over():
    beam, hyp = dt.Dim(2, name="beam"), dt.Dim(2, name="hyp")
    t = dt.Dim(dt.Tensor(torch.tensor([[3, 1], [2, 2]]), (beam, hyp)), name="t")
    x = dt.Tensor(torch.randn(2, 2, 3), (beam, hyp, t))  # beam, hyp adjacent: the fast path's case
    with pytest.raises(ValueError, match=r"dimtorch\.merge_dims\(\): the lengths of 't'\[beam,hyp\] vary over 'beam'\(2\)"):
        dt.merge_dims(x, dims=(beam, hyp))
