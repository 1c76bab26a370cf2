"""Tests of dt.nn.Conv1d/Conv2d vs torch.nn.Conv1d/Conv2d (copied weights, forward and backward on valid frames)."""
import pytest
import torch

import dimtorch as dt
from helpers import make_padded_batch


@pytest.mark.parametrize("groups", [1, 2])
def test_conv1d_vs_torch(groups):
    pb = make_padded_batch([7, 4, 2], feature=4, pad_value=1e30, seed=1)
    out = dt.Dim(6, name="out")
    conv = dt.nn.Conv1d(pb.feature, out, 3, padding="same", groups=groups)
    assert conv.weight.raw.shape == (6, 4 // groups, 3)
    ref = torch.nn.Conv1d(4, 6, 3, padding=1, groups=groups)
    with torch.no_grad():
        ref.weight.copy_(conv.weight.raw)
        ref.bias.copy_(conv.bias.raw)
    y, out_time = conv(pb.x, in_spatial_dim=pb.time)
    assert out_time is pb.time and y.dims == (pb.batch, out, pb.time)
    valid = torch.arange(7)[None, :] < torch.tensor([7, 4, 2])[:, None]
    x_clean = torch.where(valid[..., None], pb.x.raw, 0.0)
    y_ref = ref(x_clean.transpose(1, 2))
    mask = valid[:, None, :].expand_as(y_ref)
    torch.testing.assert_close(y.raw[mask], y_ref[mask])
    g = torch.randn_like(y_ref)
    (y.raw[mask] * g[mask]).sum().backward()
    (y_ref[mask] * g[mask]).sum().backward()
    torch.testing.assert_close(conv.weight.raw.grad, ref.weight.grad)
    torch.testing.assert_close(conv.bias.raw.grad, ref.bias.grad)


def test_conv2d_strided_lengths_and_errors():
    pb = make_padded_batch([9, 5], feature=6, pad_value=0.0, seed=2)
    chan_in, chan_out = dt.Dim(1, name="cin"), dt.Dim(3, name="cout")
    conv = dt.nn.Conv2d(chan_in, chan_out, (3, 3), strides=(2, 2), padding="same")
    x = dt.Tensor(pb.x.raw[:, None], (pb.batch, chan_in, pb.time, pb.feature))
    y, (t2, f2) = conv(x, in_spatial_dims=(pb.time, pb.feature))
    assert t2.dyn_size.raw.tolist() == [5, 3] and f2.size == 3
    ref = torch.nn.Conv2d(1, 3, 3, stride=2, padding=1)
    with torch.no_grad():
        ref.weight.copy_(conv.weight.raw)
        ref.bias.copy_(conv.bias.raw)
    torch.testing.assert_close(y.raw_aligned((pb.batch, chan_out, t2, f2)), ref(x.raw))
    with pytest.raises(ValueError, match=r"Conv2d\(\): x lacks the in_dim 'cin'\(1\)"):
        conv(pb.x, in_spatial_dims=(pb.time, pb.feature))
    with pytest.raises(ValueError, match=r"Conv1d\(\): groups=4 does not divide in_dim 'feature'\(6\)"):
        dt.nn.Conv1d(pb.feature, chan_out, 3, groups=4)
    with pytest.raises(ValueError, match=r"Conv2d\(\): filter_size must be 2 ints >= 1, got \(3,\)"):
        dt.nn.Conv2d(chan_in, chan_out, (3,))
