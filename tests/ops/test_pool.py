"""dt.pool's C++ fast path (src/ops/pool.cpp) against positional torch and its Python definition
(python/dimtorch/ops/pool.py): forward and backward against masked torch pooling on batches padded with NaN or
1e30, each sequence alone as in the batch, the same dims, values and gradients as the definition over layouts,
lengths, modes, padding kinds and strides; the calls it hands to the definition (avg with a count, explicit
padding, given out dims, errors) give the definition's result or error; the common calls do not reach the
definition; dim= gets the in_spatial_dims= hint."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import dimtorch as dt
from dimtorch.ops import pool as _pool

from conv_oracles import ceildiv, check_lone_sequences
from fast_path_checks import assert_same, definition_calls, permuted_batch as _batch
from helpers import PAD_LARGE, PAD_NAN, check_against_torch, make_padded_batch


def _definition_calls(fn):
    return definition_calls(fn, _pool.pool)


def _masked_torch_pool(mode, k, s, padding, n_out):
    """Positional torch over raw (batch, time, feat) and its mask (batch, time): padding frames never
    count; (batch, feat, n_out)."""
    def fn(raw, mask):
        left, right = ((k - 1) // 2, k - 1 - (k - 1) // 2) if padding == "same" else (
            (padding, padding) if isinstance(padding, int) else (0, 0))
        m = mask[:, :, None]
        if mode == "max":
            y = F.max_pool1d(F.pad(torch.where(m, raw, float("-inf")).transpose(1, 2), (left, right),
                                   value=float("-inf")), k, s)
        else:
            num = F.avg_pool1d(F.pad(torch.where(m, raw, 0.0).transpose(1, 2), (left, right)), k, s)
            den = F.avg_pool1d(F.pad(m.to(raw.dtype).expand_as(raw).transpose(1, 2), (left, right)), k, s)
            y = num / den.clamp(min=1.0 / k)
        return y[:, :, :n_out]
    return fn


def _out_len(n, k, s, padding):
    if padding == "same":
        return ceildiv(n, s)
    p = padding if isinstance(padding, int) else 0
    return max(0, (n + 2 * p - k) // s + 1)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("mode, padding, k, s", [("max", "same", 2, 2), ("max", "same", 3, 1), ("max", "valid", 3, 2),
                                                 ("max", 1, 3, 2), ("max", 0, 2, 1), ("avg", "valid", 2, 2),
                                                 ("avg", "same", 3, 2)])
def test_pool_against_positional_torch(pad, mode, padding, k, s):
    """Forward and backward against masked torch pooling; each sequence alone gives what it gives in the batch."""
    lengths = [7, 4, 1, 5]
    pb = make_padded_batch(lengths, feature=3, extra_time=2, pad_value=pad)
    kw = dict(mode=mode, pool_size=k, strides=s, padding=padding)
    expected = [_out_len(n, k, s, padding) for n in lengths]
    y, (ot,) = dt.pool(pb.x, in_spatial_dims=[pb.time], **kw)
    assert ot.lengths.raw.tolist() == expected and y.dims == (pb.batch, pb.feature, ot)
    assert y.feature_dim is pb.feature
    mask = pb.mask
    check_against_torch(lambda t: dt.pool(t, in_spatial_dims=[pb.time], **kw)[0],
                        lambda r: _masked_torch_pool(mode, k, s, padding, max(expected))(r, mask), [pb.x])
    check_lone_sequences(lambda x, b, t: (lambda r: (r[0], r[1][0]))(dt.pool(x, in_spatial_dims=[t], **kw)),
                         pb.x, pb.batch, pb.time, lengths)


@pytest.mark.parametrize("lead", [0, 1, 3])
def test_pool_lead_dims_against_positional_torch(lead):
    """No lead dim ((1, T) for torch), one ((C, T)), three (two merged into N and split back)."""
    t = dt.Dim(7, name="t")
    leads = [dt.Dim(n, name=f"l{i}") for i, n in enumerate((2, 3, 2)[:lead])]
    x = dt.Tensor(torch.randn(*[d.size for d in leads], 7), (*leads, t))
    y, (ot,) = dt.pool(x, mode="max", pool_size=3, strides=2, padding="same", in_spatial_dims=t)
    assert y.dims == (*leads, ot) and ot.size == 4
    check_against_torch(lambda v: dt.pool(v, mode="max", pool_size=3, strides=2, padding="same", in_spatial_dims=t)[0],
                        lambda r: F.max_pool1d(F.pad(r.reshape(-1, 1, 7), (1, 1), value=float("-inf")), 3, 2)
                        .reshape(*r.shape[:-1], 4), [x])
    assert _definition_calls(lambda: dt.pool(x, mode="max", pool_size=3, strides=2, padding="same",
                                             in_spatial_dims=t)) == 0


@pytest.mark.parametrize("mode", ["max", "avg"])
def test_pool2d_static_against_positional_torch(mode):
    a, h, w = dt.Dim(2, name="a"), dt.Dim(6, name="h"), dt.Dim(5, name="w")
    x = dt.Tensor(torch.randn(6, 2, 5), (h, a, w))
    fn = F.max_pool2d if mode == "max" else F.avg_pool2d
    y, (oh, ow) = dt.pool(x, mode=mode, pool_size=(2, 2), in_spatial_dims=(h, w))
    assert y.dims == (a, oh, ow) and (oh.size, ow.size) == (3, 2)
    check_against_torch(lambda v: dt.pool(v, mode=mode, pool_size=(2, 2), in_spatial_dims=(h, w))[0],
                        lambda r: fn(r.permute(1, 0, 2), 2), [x])


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 9), min_size=1, max_size=4).filter(lambda v: max(v) >= 1),
       extra=st.integers(0, 2), pad=st.sampled_from([PAD_NAN, PAD_LARGE]), order=st.permutations([0, 1, 2]),
       mode=st.sampled_from(["max", "avg"]), k=st.integers(1, 4), stride=st.sampled_from([None, 1, 2, 3]),
       padding=st.sampled_from(["valid", "same", 0, 1, 2]), static_time=st.sampled_from([None, None, 6]),
       spatial_form=st.sampled_from(["list", "tuple", "dim"]))
def test_pool_1d_fast_path_is_the_definition(lengths, extra, pad, order, mode, k, stride, padding, static_time,
                                             spatial_form):
    """The same result (dims, markers, values with NaN where NaN) and gradients as the definition, or its error."""
    x, batch, time, chan = _batch(lengths, 3, extra=extra, pad=pad, order=order, static_time=static_time)
    spatial = {"list": [time], "tuple": (time,), "dim": time}[spatial_form]
    kw = dict(mode=mode, pool_size=k, strides=stride, padding=padding, in_spatial_dims=spatial)
    try:
        slow = _pool.pool(x, **kw)
    except ValueError as e:  # (a static time shorter than the window, torch's limit on its padding)
        with pytest.raises(ValueError) as info:
            dt.pool(x, **kw)
        assert str(info.value) == str(e)
        return
    xf = dt.Tensor(x.raw.detach().clone().requires_grad_(), x.dims, feature_dim=chan)
    xs = dt.Tensor(x.raw.detach().clone().requires_grad_(), x.dims, feature_dim=chan)
    fast = dt.pool(xf, **kw)
    assert_same(fast, slow)
    slow = _pool.pool(xs, **kw)
    y_fast, y_slow = fast[0], slow[0]
    cot = torch.randn(y_fast.raw.shape, generator=torch.Generator().manual_seed(1))
    valid = torch.isfinite(y_slow.raw.detach())
    (torch.where(valid, y_fast.raw, 0.0) * cot).sum().backward()
    (torch.where(valid, y_slow.raw, 0.0) * cot).sum().backward()
    torch.testing.assert_close(xf.raw.grad, xs.raw.grad, rtol=0, atol=0)


@pytest.mark.parametrize("kw", [
    dict(mode="max", pool_size=2, padding="same"),
    dict(mode="max", pool_size=3, strides=2, padding=1),
    dict(mode="max", pool_size=2, strides=1, padding="valid"),
    dict(mode="avg", pool_size=2, padding="valid"),
    dict(mode="max", pool_size=2, padding="same", nd=1, dilation_rate=1, use_mask=True),
])
def test_common_calls_do_not_reach_the_definition(kw):
    x, batch, time, chan = _batch([5, 3], 4, extra=1, pad=PAD_NAN, order=(0, 1, 2))
    assert _definition_calls(lambda: dt.pool(x, in_spatial_dims=[time], **kw)) == 0


@pytest.mark.parametrize("kw", [
    dict(mode="avg", pool_size=2, padding="same"),  # a count of valid frames
    dict(mode="max", pool_size=2, padding=2),  # explicit padding (torch's is at most half the window)
    dict(mode="max", pool_size=2, padding="same", dilation_rate=2),  # NotImplementedError
    dict(mode="max", pool_size=2, nd=2),
    dict(mode="min", pool_size=2),
    dict(mode="max", pool_size=(2, 2)),
    dict(mode="max", pool_size=0),
    dict(mode="max", pool_size=2, strides=0),
    dict(mode="max", pool_size=2, padding="full"),
    dict(mode="max", pool_size=20),  # dynamic time shorter than the window: padded, all 0 frames
])
def test_other_calls_give_the_definitions_result_or_error(kw):
    x, batch, time, chan = _batch([5, 3], 4, extra=1, pad=PAD_NAN, order=(0, 1, 2))
    try:
        slow = _pool.pool(x, in_spatial_dims=[time], **kw)
    except (TypeError, ValueError, NotImplementedError) as e:
        with pytest.raises(type(e)) as info:
            dt.pool(x, in_spatial_dims=[time], **kw)
        assert str(info.value) == str(e) and str(e).startswith("dimtorch.pool(): ")
        return
    assert _definition_calls(lambda: dt.pool(x, in_spatial_dims=[time], **kw)) == 1
    assert_same(dt.pool(x, in_spatial_dims=[time], **kw), slow)


def test_given_out_dims_and_int_inputs_go_to_the_definition():
    x, batch, time, chan = _batch([5, 3], 4, extra=0, pad=PAD_NAN, order=(0, 1, 2))
    _, (ot,) = dt.pool(x, mode="max", pool_size=2, padding="same", in_spatial_dims=[time])
    y, (ot2,) = dt.pool(x, mode="max", pool_size=2, padding="same", in_spatial_dims=[time], out_spatial_dims=[ot])
    assert ot2 is ot and y.dims == (batch, chan, ot)
    xi = dt.Tensor(torch.zeros(2, 5, 4, dtype=torch.int64), x.dims)
    with pytest.raises(TypeError, match=r"^dimtorch\.pool\(\): x must be floating"):
        dt.pool(xi, mode="max", pool_size=2, in_spatial_dims=[time])


def test_dim_keyword_gets_the_in_spatial_dims_hint():
    x, batch, time, chan = _batch([5, 3], 4, extra=0, pad=PAD_NAN, order=(0, 1, 2))
    with pytest.raises(TypeError) as info:
        dt.pool(x, mode="max", pool_size=2, dim=time)
    assert str(info.value) == ("dimtorch.pool(): pool() got an unexpected keyword argument 'dim' (dimtorch names an "
                               "axis by its Dim, not a number: use in_spatial_dims=)")
