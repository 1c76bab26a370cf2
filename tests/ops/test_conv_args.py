"""Tests of python/dimtorch/ops/conv_args.py's public dim math: make_conv_out_spatial_dims and
make_transposed_conv_out_spatial_dims give the very dims conv, pool and transposed_conv return, with
the per-sequence lengths of their formulas; errors name the call."""
import pytest
import torch

import dimtorch as dt
from helpers import make_padded_batch


def ceildiv(a, b):
    return -(-a // b)


@pytest.mark.parametrize("padding", ["valid", "same"])
@pytest.mark.parametrize("k,s,dl", [(3, 1, 1), (4, 2, 1), (3, 3, 2), (1, 2, 1)])
def test_conv_out_dims_are_the_ops_dims(padding, k, s, dl):
    lengths = [9, 5, 2, 0]
    pb = make_padded_batch(lengths, feature=3)
    (od,) = dt.make_conv_out_spatial_dims([pb.time], filter_size=k, padding=padding, strides=s, dilation_rate=dl)
    kd, out = dt.Dim(k, name="k"), dt.Dim(2, name="out")
    w = dt.Tensor(torch.randn(2, 3, k), (out, pb.feature, kd))
    _, (conv_dim,) = dt.conv(pb.x, w, in_dim=pb.feature, out_dim=out, in_spatial_dims=[pb.time], filter_size=[kd],
                             strides=s, dilation=dl, padding=padding)
    assert od is conv_dim
    k_eff = dl * (k - 1) + 1
    want = [ceildiv(n, s) if padding == "same" else max(0, ceildiv(n - (k_eff - 1), s)) for n in lengths]
    assert od.lengths.raw.tolist() == want
    if dl == 1:
        _, (pool_dim,) = dt.pool(pb.x, mode="max", pool_size=k, strides=s, padding=padding, in_spatial_dims=[pb.time])
        assert od is pool_dim
    static = dt.Dim(10, name="static")
    (sd,) = dt.make_conv_out_spatial_dims([static], filter_size=dt.Dim(k, name="kk"), padding=padding, strides=s,
                                          dilation_rate=dl)
    assert sd.size == (ceildiv(10, s) if padding == "same" else max(0, ceildiv(10 - (k_eff - 1), s)))


def test_conv_out_dims_int_padding_two_dims_and_size_from_data():
    pb = make_padded_batch([7, 4], feature=3)
    freq = dt.Dim(16, name="freq")
    ot, of = dt.make_conv_out_spatial_dims([pb.time, freq], filter_size=(3, 5), padding=(1, 0), strides=(2, 1))
    assert ot.lengths.raw.tolist() == [ceildiv(7 + 2 - 2, 2), ceildiv(4 + 2 - 2, 2)] and of.size == 12
    (same,) = dt.make_conv_out_spatial_dims([pb.time], filter_size=3, padding="same")
    assert same is pb.time
    (new,) = dt.make_conv_out_spatial_dims([pb.batch], filter_size=3, padding="valid")
    assert new.size is None and new.lengths is None and new is not pb.batch


@pytest.mark.parametrize("padding", ["valid", "same"])
@pytest.mark.parametrize("k,s,op", [(3, 2, None), (2, 2, None), (4, 2, 1), (1, 3, None)])
def test_transposed_conv_out_dims_are_the_ops_dims(padding, k, s, op):
    pb = make_padded_batch([5, 2, 0], feature=3)
    (od,) = dt.make_transposed_conv_out_spatial_dims([pb.time], filter_size=k, padding=padding, strides=s,
                                                     output_padding=op)
    kd, out = dt.Dim(k, name="k"), dt.Dim(2, name="out")
    w = dt.Tensor(torch.randn(3, 2, k), (pb.feature, out, kd))
    _, (tdim,) = dt.transposed_conv(pb.x, w, in_dim=pb.feature, out_dim=out, in_spatial_dims=[pb.time],
                                    filter_size=[kd], strides=s, padding=padding, output_padding=op)
    assert od is tdim
    (default,) = dt.make_transposed_conv_out_spatial_dims([pb.time], filter_size=k, padding="valid")
    assert default.lengths.raw.tolist() == [5 * k, 2 * k, 0]  # strides default to the filter size


def test_out_dims_errors():
    pb = make_padded_batch([3], feature=2)
    with pytest.raises(ValueError, match=r"dimtorch\.make_conv_out_spatial_dims\(\): padding must be 'valid' or 'same'"):
        dt.make_conv_out_spatial_dims([pb.time], filter_size=3, padding="full")
    with pytest.raises(TypeError, match=r"make_conv_out_spatial_dims\(\): filter_size must be one value or a sequence "
                                        r"of 2"):
        dt.make_conv_out_spatial_dims([pb.time, pb.feature], filter_size=(3,), padding="same")
    with pytest.raises(ValueError, match=r"make_conv_out_spatial_dims\(\): filter_size must be ints >= 1"):
        dt.make_conv_out_spatial_dims([pb.time], filter_size=0, padding="same")
    with pytest.raises(ValueError, match=r"make_conv_out_spatial_dims\(\): strides must be >= 1"):
        dt.make_conv_out_spatial_dims([pb.time], filter_size=3, padding="same", strides=0)
    with pytest.raises(ValueError, match=r"make_conv_out_spatial_dims\(\): padding must be >= 0"):
        dt.make_conv_out_spatial_dims([pb.time], filter_size=3, padding=-1)
    with pytest.raises(TypeError, match=r"make_conv_out_spatial_dims\(\): in_spatial_dims\[0\] must be a Dim"):
        dt.make_conv_out_spatial_dims([3], filter_size=3, padding="same")
    with pytest.raises(ValueError, match=r"make_transposed_conv_out_spatial_dims\(\): padding must be 'valid' or 'same'"):
        dt.make_transposed_conv_out_spatial_dims([pb.time], filter_size=3, padding="full")
