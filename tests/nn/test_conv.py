"""Tests of dt.nn conv layers vs torch.nn.Conv1d/2d and ConvTranspose1d/2d (copied weights, valid frames)."""
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
    assert t2.lengths.raw.tolist() == [5, 3] and f2.size == 3
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


@pytest.mark.parametrize("groups,padding", [(1, "valid"), (2, "same")])
def test_transposed_conv1d_vs_torch(groups, padding):
    lengths = [6, 3, 1]
    pb = make_padded_batch(lengths, feature=4, pad_value=float("nan"), extra_time=1, seed=3)
    out = dt.Dim(6, name="out")
    tconv = dt.nn.TransposedConv1d(pb.feature, out, 4, strides=2, padding=padding, groups=groups)
    assert tconv.weight.raw.shape == (4, 6 // groups, 4)
    ref = torch.nn.ConvTranspose1d(4, 6, 4, stride=2, groups=groups)
    with torch.no_grad():
        ref.weight.copy_(tconv.weight.raw)
        ref.bias.copy_(tconv.bias.raw)
    y, out_time = tconv(pb.x, in_spatial_dim=pb.time)
    crop = 1 if padding == "same" else 0  # 'same': T * 2 frames, (k - s) // 2 cropped on the left
    expected = [n * 2 + (2 if padding == "valid" else 0) for n in lengths]
    assert out_time.lengths.raw.tolist() == expected and y.dims == (pb.batch, out, out_time)
    g = torch.Generator().manual_seed(0)
    for b, (n, m) in enumerate(zip(lengths, expected)):  # each sequence alone through torch's module
        y_ref = ref(pb.x.raw[b:b + 1, :n].transpose(1, 2))[0, :, crop:crop + m]
        torch.testing.assert_close(y.raw[b, :, :m], y_ref)
        cot = torch.randn(y_ref.shape, generator=g)
        (y.raw[b, :, :m] * cot).sum().backward(retain_graph=True)
        (y_ref * cot).sum().backward()
    torch.testing.assert_close(tconv.weight.raw.grad, ref.weight.grad)
    torch.testing.assert_close(tconv.bias.raw.grad, ref.bias.grad)


def test_transposed_conv2d_vs_torch_state_dict_and_errors():
    batch, cin, h, w = dt.Dim(2, name="batch"), dt.Dim(3, name="cin"), dt.Dim(4, name="h"), dt.Dim(5, name="w")
    cout = dt.Dim(2, name="cout")
    tconv = dt.nn.TransposedConv2d(cin, cout, (3, 2), strides=(2, 1), output_padding=(1, 0), remove_padding=(1, 0))
    ref = torch.nn.ConvTranspose2d(3, 2, (3, 2), stride=(2, 1), padding=(1, 0), output_padding=(1, 0))
    tconv.load_state_dict(ref.state_dict())
    x = dt.Tensor(torch.randn(2, 3, 4, 5), (batch, cin, h, w))
    y, (oh, ow) = tconv(x, in_spatial_dims=(h, w))
    assert (oh.size, ow.size) == (8, 6) and y.dims == (batch, cout, oh, ow)
    torch.testing.assert_close(y.raw, ref(x.raw))
    with pytest.raises(ValueError, match=r"TransposedConv2d\(\): x lacks the in_dim 'cin'\(3\)"):
        tconv(dt.Tensor(torch.randn(4, 5), (h, w)), in_spatial_dims=(h, w))
    with pytest.raises(ValueError, match=r"TransposedConv1d\(\): groups=2 does not divide in_dim 'cin'\(3\)"):
        dt.nn.TransposedConv1d(cin, cout, 3, groups=2)
    with pytest.raises(ValueError, match=r"TransposedConv2d\(\): filter_size must be 2 ints >= 1, got \(3,\)"):
        dt.nn.TransposedConv2d(cin, cout, (3,))


def test_conv_modules_with_out_dim_is_in_dim():
    """Conv1d(d, d) and TransposedConv1d(d, d): the weight's second channel dim is a copy of d, the
    weight shape and state-dict keys are torch's, the call keeps d."""
    pb = make_padded_batch([5, 2], feature=4, pad_value=float("nan"))
    conv = dt.nn.Conv1d(pb.feature, pb.feature, 3, padding="same")
    assert conv.filter_in_dim is not pb.feature and conv.filter_in_dim.size == 4
    assert conv.weight.dims == (pb.feature, conv.filter_in_dim, conv.filter_dims[0])
    y, t = conv(pb.x, in_spatial_dim=pb.time)
    assert y.dims == (pb.batch, pb.feature, t) and t is pb.time
    ref = torch.nn.Conv1d(4, 4, 3, padding=1)
    ref.load_state_dict({"weight": conv.weight.raw.detach(), "bias": conv.bias.raw.detach()})
    for b, n in enumerate([5, 2]):
        torch.testing.assert_close(y.raw[b, :, :n], ref(pb.x.raw[b:b + 1, :n].transpose(1, 2))[0])
    tconv = dt.nn.TransposedConv1d(pb.feature, pb.feature, 2)
    assert tconv.filter_out_dim is not pb.feature and tuple(tconv.weight.raw.shape) == (4, 4, 2)
    y, t = tconv(pb.x, in_spatial_dim=pb.time)
    assert y.dims == (pb.batch, pb.feature, t) and t.lengths.raw.tolist() == [10, 4]
