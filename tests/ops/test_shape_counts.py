"""Tests of python/dimtorch/ops/shape_counts.py: num_elements_of_shape and masked_fraction_of_shape against counts of
a hand-made mask, static and dynamic dims, nested lengths, and errors."""
import pytest
import torch

import dimtorch as dt
from helpers import make_padded_batch


def test_counts_of_a_padded_batch():
    pb = make_padded_batch((5, 3, 0), feature=4)
    mask = pb.mask
    assert dt.num_elements_of_shape(pb.feature) == 4
    n = dt.num_elements_of_shape([pb.batch, pb.time, pb.feature])
    assert n.dims == () and n.raw.dtype == torch.int64 and int(n.raw) == int(mask.sum()) * 4
    per_seq = dt.num_elements_of_shape([pb.time])
    assert per_seq.dims == (pb.batch,) and per_seq.raw.tolist() == [5, 3, 0]
    assert dt.num_elements_of_shape([pb.batch, pb.time], use_mask=False) == mask.numel()
    frac = dt.masked_fraction_of_shape([pb.batch, pb.time])
    torch.testing.assert_close(frac.raw, mask.float().mean())
    inverse = dt.masked_fraction_of_shape([pb.batch, pb.time], inverse=True)
    torch.testing.assert_close(inverse.raw, 1 / mask.float().mean())
    assert dt.masked_fraction_of_shape([pb.feature]) == 1


def test_lengths_over_two_dims():
    """A dim whose lengths vary over (batch, hyps): summed over those among dims, per position of the rest."""
    batch, hyps = dt.Dim(2, name="batch"), dt.Dim(3, name="hyps")
    lengths = torch.tensor([[3, 1, 0], [2, 2, 5]])
    time = dt.Dim(dt.Tensor(lengths, (batch, hyps)), name="time")
    assert int(dt.num_elements_of_shape([batch, hyps, time]).raw) == int(lengths.sum())
    per_batch = dt.num_elements_of_shape([hyps, time])
    assert per_batch.dims == (batch,) and per_batch.raw.tolist() == [4, 9]
    f = dt.Dim(4, name="f")
    assert int(dt.num_elements_of_shape([batch, hyps, time, f]).raw) == int(lengths.sum()) * 4
    torch.testing.assert_close(dt.masked_fraction_of_shape([batch, hyps, time]).raw,
                               torch.tensor(float(lengths.sum()) / (2 * 3 * 5)))


def test_errors():
    pb = make_padded_batch((2,))
    with pytest.raises(TypeError, match=r"num_elements_of_shape\(\): dims must be a Dim or a sequence of Dims"):
        dt.num_elements_of_shape(3)
    with pytest.raises(ValueError, match=r"num_elements_of_shape\(\): dim 'batch'.* takes its size from data"):
        dt.num_elements_of_shape([pb.batch, pb.feature])
