"""In-graph forms of conv, transposed_conv and pool against their eager forms (padded data, dims orders, alone, no host reads)."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import dimtorch as dt
from dimtorch._core import tracing as _tracing
from dimtorch.ops.conv import conv, transposed_conv
from dimtorch.ops.pool import _PLANS, pool
from in_graph_helpers import check_alone_in_graph, check_in_graph, padded_env, run_meta_in_graph, with_order

ORDERS = [(0, 1, 2), (1, 0, 2), (2, 1, 0), (1, 2, 0)]
TOL = dict(atol=1e-5, rtol=1e-5)


def check_all(fn, env):
    check_in_graph(fn, env, **TOL)
    check_alone_in_graph(fn, env, **TOL)
    run_meta_in_graph(fn, env)


def _conv_env(order, lengths=(7, 3, 0, 2), extra_time=2):
    env = with_order(padded_env(lengths, extra_time=extra_time, feature=3), "x", order)
    gen = torch.Generator().manual_seed(3)
    env["out"] = out = dt.Dim(4, name="out")
    env["k"] = k = dt.Dim(3, name="k")
    env["w"] = dt.Tensor(torch.randn(4, 3, 3, generator=gen), (out, env["feature"], k))
    env["wt"] = dt.Tensor(torch.randn(3, 4, 3, generator=gen), (env["feature"], out, k))
    env["bias"] = dt.Tensor(torch.randn(4, generator=gen), (out,))
    return env


@settings(max_examples=15)
@given(order=st.sampled_from(ORDERS), padding=st.sampled_from(["valid", "same", 1, (2,)]), stride=st.integers(1, 3),
       dilation=st.integers(1, 2), extra=st.integers(0, 2))
def test_conv_1d(order, padding, stride, dilation, extra):
    env = _conv_env(order, extra_time=extra)
    check_all(lambda e: conv(e["x"], e["w"], in_dim=e["feature"], out_dim=e["out"], in_spatial_dims=(e["time"],),
                             filter_size=(e["k"],), strides=stride, dilation=dilation, padding=padding,
                             bias=e["bias"]), env)


def test_conv_all_sequences_shorter_than_the_window():
    env = _conv_env((0, 1, 2), lengths=(1, 0, 2), extra_time=0)
    check_all(lambda e: conv(e["x"], e["w"], in_dim=e["feature"], out_dim=e["out"], in_spatial_dims=e["time"],
                             filter_size=(e["k"],)), env)


def test_conv_2d_over_time_and_a_static_dim():
    env = padded_env((6, 3, 0, 2), extra_time=1, feature=5)
    gen = torch.Generator().manual_seed(4)
    env["ch"], env["out"] = ch, out = dt.Dim(1, name="ch"), dt.Dim(2, name="out")
    env["k1"], env["k2"] = k1, k2 = dt.Dim(3, name="k1"), dt.Dim(3, name="k2")
    env["x"] = dt.Tensor(env["x"].raw.unsqueeze(-1), env["x"].dims + (ch,))
    env["w"] = dt.Tensor(torch.randn(2, 1, 3, 3, generator=gen), (out, ch, k1, k2))
    for padding in ("same", "valid"):
        check_all(lambda e: conv(e["x"], e["w"], in_dim=e["ch"], out_dim=e["out"],
                                 in_spatial_dims=(e["time"], e["feature"]), filter_size=(e["k1"], e["k2"]),
                                 strides=(2, 2), padding=padding), env)


@pytest.mark.parametrize("order", ORDERS[:2])
@pytest.mark.parametrize("padding", ["valid", "same"])
@pytest.mark.parametrize("strides,output_padding,remove_padding", [(None, None, 0), (2, None, 1), (3, 1, 0),
                                                                   (2, 1, 1)])
def test_transposed_conv(order, padding, strides, output_padding, remove_padding):
    env = _conv_env(order)
    check_all(lambda e: transposed_conv(e["x"], e["wt"], in_dim=e["feature"], out_dim=e["out"],
                                        in_spatial_dims=(e["time"],), filter_size=(e["k"],), strides=strides,
                                        padding=padding, output_padding=output_padding,
                                        remove_padding=remove_padding, bias=e["bias"]), env)


@settings(max_examples=20)
@given(order=st.sampled_from(ORDERS), mode=st.sampled_from(["max", "avg"]),
       padding=st.sampled_from(["valid", "same", 1, (2,)]),
       ks_stride=st.sampled_from([(2, None), (3, 1), (3, 2), (4, 3)]), extra=st.integers(0, 3))
def test_pool_1d(order, mode, padding, ks_stride, extra):
    env = with_order(padded_env((7, 3, 0, 2), extra_time=extra, pad=1e30), "x", order)
    ks, stride = ks_stride
    check_all(lambda e: pool(e["x"], mode=mode, pool_size=ks, strides=stride, padding=padding,
                             in_spatial_dims=e["time"]), env)


@pytest.mark.parametrize("mode", ["max", "avg"])
@pytest.mark.parametrize("padding", ["valid", "same"])
def test_pool_2d(mode, padding):
    env = padded_env((7, 3, 0, 2), extra_time=2, feature=4, pad=float("nan"))
    check_all(lambda e: pool(e["x"], mode=mode, pool_size=(2, 2), padding=padding,
                             in_spatial_dims=(e["time"], e["feature"])), env)


def test_in_graph_calls_keep_no_plans():
    env = _conv_env((0, 1, 2))
    n = len(_PLANS)
    with _tracing.force_in_graph():
        pool(env["x"], mode="max", pool_size=2, in_spatial_dims=env["time"])
        conv(env["x"], env["w"], in_dim=env["feature"], out_dim=env["out"], in_spatial_dims=(env["time"],),
             filter_size=(env["k"],))
    assert len(_PLANS) == n
    from dimtorch.ops.conv import _CONV_PLANS
    assert id(env["w"]) not in _CONV_PLANS


def _env_3d():
    """x over (batch, time, feature, h, ch): three spatial dims (time dynamic), one channel."""
    env = padded_env((6, 3, 0, 2), extra_time=1, feature=4)
    gen = torch.Generator().manual_seed(5)
    env["h"], env["ch"], env["out"] = h, ch, out = dt.Dim(2, name="h"), dt.Dim(1, name="ch"), dt.Dim(2, name="out")
    env["ks"] = ks = (dt.Dim(3, name="k1"), dt.Dim(2, name="k2"), dt.Dim(1, name="k3"))
    env["x"] = dt.Tensor(env["x"].raw[..., None, None].expand(-1, -1, -1, 2, 1), env["x"].dims + (h, ch))
    env["w"] = dt.Tensor(torch.randn(2, 1, 3, 2, 1, generator=gen), (out, ch) + ks)
    return env


@pytest.mark.parametrize("padding", ["valid", "same", (1, 0, 1)])
def test_conv_and_pool_3d(padding):
    env = _env_3d()
    check_all(lambda e: conv(e["x"], e["w"], in_dim=e["ch"], out_dim=e["out"],
                             in_spatial_dims=(e["time"], e["feature"], e["h"]), filter_size=e["ks"], strides=(2, 1, 1),
                             padding=padding), env)
    for mode in ("max", "avg"):
        check_all(lambda e: pool(e["x"], mode=mode, pool_size=(2, 2, 1), strides=(2, 1, 1), padding=padding,
                                 in_spatial_dims=(e["time"], e["feature"], e["h"])), env)
