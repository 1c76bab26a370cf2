"""Tests of dt.nn.Dropout (training vs eval, axis) and dt.nn.FeedForward (composition, activations)."""
import pytest
import torch

import dimtorch as dt
from helpers import make_padded_batch


def test_dropout_training_and_eval():
    pb = make_padded_batch((6, 6), feature=50, pad_value=0.0)
    x = dt.Tensor(torch.ones(2, 6, 50), pb.x.dims)
    d = dt.nn.Dropout(0.5)
    y = d(x)
    vals = set(y.raw.unique().tolist())
    assert vals <= {0.0, 2.0} and len(vals) == 2
    d.eval()
    assert d(x) is x
    da = dt.nn.Dropout(0.5, axis=pb.feature)
    y = da(x).raw
    assert torch.equal(y[0, 0], y[1, 3])  # one mask over feature, shared by batch and time


def test_feed_forward_is_its_composition():
    pb = make_padded_batch((4, 2), feature=3, pad_value=0.0)
    ff_dim = dt.Dim(8, name="ff")
    ff = dt.nn.FeedForward(pb.feature, ff_dim, activation="swish", dropout=0.0)
    y = ff(pb.x)
    assert y.dims == pb.x.dims
    h = torch.nn.functional.silu(torch.nn.functional.linear(pb.x.raw, ff.linear_ff.weight.raw, ff.linear_ff.bias.raw))
    expect = torch.nn.functional.linear(h, ff.linear_out.weight.raw, ff.linear_out.bias.raw)
    torch.testing.assert_close(y.raw, expect)
    assert sorted(ff.state_dict()) == ["linear_ff.bias", "linear_ff.weight", "linear_out.bias", "linear_out.weight"]
    ff2 = dt.nn.FeedForward(pb.feature, ff_dim, activation=dt.relu, dropout=0.5)
    ff2.eval()
    h = torch.relu(torch.nn.functional.linear(pb.x.raw, ff2.linear_ff.weight.raw, ff2.linear_ff.bias.raw))
    torch.testing.assert_close(ff2(pb.x).raw, torch.nn.functional.linear(h, ff2.linear_out.weight.raw,
                                                                       ff2.linear_out.bias.raw))
    with pytest.raises(ValueError, match=r"FeedForward\(\): unknown activation 'mish'"):
        dt.nn.FeedForward(pb.feature, ff_dim, activation="mish")
