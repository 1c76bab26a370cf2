"""Tests of python/dimtorch/ops/dim_ranges.py: range_over_dim_strided, range_over_merged_dims, linspace_over_dim against
torch.arange per sequence, and errors."""
import pytest
import torch

import dimtorch as dt
from helpers import make_padded_batch


def test_range_over_dim_strided_per_sequence():
    pb = make_padded_batch((5, 3, 0))
    r, out = dt.range_over_dim_strided(pb.time, stride=2)
    assert r.dims == (out,) and out.lengths.raw.tolist() == [3, 2, 0]
    torch.testing.assert_close(r.raw, torch.arange(0, 5, 2))
    assert dt.range_over_dim_strided(pb.time, stride=2)[1] is out  # dim math: the same dim
    static, s_out = dt.range_over_dim_strided(dt.Dim(7, name="s"), stride=3, dtype="int32")
    assert s_out.size == 3 and static.raw.tolist() == [0, 3, 6] and static.raw.dtype == torch.int32


def test_range_over_merged_dims_indexes_merge_dims():
    pb = make_padded_batch((4, 2), feature=3)
    idx = dt.range_over_merged_dims([pb.time, pb.feature])
    merged, out = dt.merge_dims(pb.x, dims=(pb.time, pb.feature))
    assert idx.sparse_dim is out and idx.dims == (pb.time, pb.feature)
    torch.testing.assert_close(idx.raw, torch.arange(12).reshape(4, 3))
    # element (t, f) of x is element idx[t, f] of the merged dim
    flat = merged.raw_aligned((pb.batch, out))
    torch.testing.assert_close(flat[:, idx.raw.reshape(-1)].reshape(2, 4, 3), pb.x.raw, equal_nan=True)
    a, b = dt.Dim(2, name="a"), dt.Dim(3, name="b")
    assert dt.range_over_merged_dims([a, b]).sparse_dim.size == 6


def test_linspace_over_dim_per_sequence():
    pb = make_padded_batch((5, 2, 0))
    lin = dt.linspace_over_dim(pb.time, 1.0, 3.0)
    raw = lin.raw_aligned((pb.batch, pb.time))
    for b, n in enumerate(pb.lengths):
        if n:
            torch.testing.assert_close(raw[b, :n], 1.0 + 2.0 * torch.arange(n) / n)
    s = dt.Dim(4, name="s")
    torch.testing.assert_close(dt.linspace_over_dim(s).raw, torch.arange(4) / 4)


def test_errors():
    pb = make_padded_batch((3, 2))
    with pytest.raises(ValueError, match=r"range_over_dim_strided\(\): stride must be an int >= 1, got 0"):
        dt.range_over_dim_strided(pb.time, stride=0)
    with pytest.raises(TypeError, match=r"range_over_dim_strided\(\): dim must be a Dim, got int"):
        dt.range_over_dim_strided(3, stride=1)
    with pytest.raises(ValueError, match=r"range_over_merged_dims\(\): only the first of dims may be dynamic"):
        dt.range_over_merged_dims([pb.feature, pb.time])
    with pytest.raises(ValueError, match=r"range_over_merged_dims\(\): dims is empty"):
        dt.range_over_merged_dims([])
    with pytest.raises(TypeError, match=r"linspace_over_dim\(\): dim must be a Dim"):
        dt.linspace_over_dim(pb.x)
