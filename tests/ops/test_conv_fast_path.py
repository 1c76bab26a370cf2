"""dt.conv's C++ fast path (src/ops/conv.cpp) against its Python definition (python/dimtorch/ops/conv.py, tested
against per-sequence torch in test_conv.py): the same dims, markers, values and gradients over layouts, lengths
(padding NaN or large), padding kinds, strides, dilations, groups and 1-D/2-D; the calls it hands to the
definition give the definition's result or error; and that the common calls do not reach the definition."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, strategies as st

import dimtorch as dt
from dimtorch.ops import conv as _conv

from fast_path_checks import assert_same, both, definition_calls, permuted_batch as _batch
from helpers import PAD_LARGE, PAD_NAN


def _definition_calls(fn):
    return definition_calls(fn, _conv.conv)


@given(lengths=st.lists(st.integers(0, 9), min_size=1, max_size=4).filter(lambda v: max(v) >= 1),
       extra=st.integers(0, 2), pad=st.sampled_from([PAD_NAN, PAD_LARGE]),
       order=st.permutations([0, 1, 2]), k=st.integers(1, 4), stride=st.integers(1, 3), dilation=st.integers(1, 2),
       padding=st.sampled_from(["valid", "same", 0, 1, 2]), groups=st.sampled_from([1, 2]),
       with_bias=st.booleans(), static_time=st.sampled_from([None, None, 6]))
def test_conv_1d_fast_path_is_the_definition(lengths, extra, pad, order, k, stride, dilation, padding, groups, with_bias,
                                              static_time):
    x, batch, time, chan = _batch(lengths, 4, extra=extra, pad=pad, order=order, static_time=static_time)
    out, kd = dt.Dim(6, name="out"), dt.Dim(k, name="k")
    w = dt.Tensor(torch.randn(6, 4 // groups, k), (out, chan if groups == 1 else chan // groups, kd))
    bias = dt.Tensor(torch.randn(6), (out,)) if with_bias else None
    kw = dict(in_dim=chan, out_dim=out, in_spatial_dims=(time,), filter_size=(kd,), strides=stride, dilation=dilation,
              padding=padding, groups=groups, bias=bias)
    try:
        slow = _conv.conv(x, w, **kw)
    except ValueError as e:  # (a static time shorter than the window)
        with pytest.raises(ValueError, match="dimtorch.conv"):
            dt.conv(x, w, **kw)
        assert "dimtorch.conv" in str(e)
        return
    fast = dt.conv(x, w, **kw)
    assert_same(fast, slow)


@pytest.mark.parametrize("padding", ["valid", "same", (1, 0)])
@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1)])
def test_conv_2d_and_gradients(padding, order):
    x, batch, time, chan = _batch([7, 4, 1], 2, extra=1, pad=PAD_LARGE, order=order)
    freq = dt.Dim(5, name="freq")
    x = dt.Tensor(x.raw.unsqueeze(-1).expand(*x.raw.shape, 5).contiguous() * torch.arange(1.0, 6.0), x.dims + (freq,))
    out, k1, k2 = dt.Dim(3, name="out"), dt.Dim(3, name="k1"), dt.Dim(2, name="k2")
    grads = []
    for fn in (dt.conv, _conv.conv):
        raw = x.raw.clone().requires_grad_(True)
        w = torch.randn(3, 2, 3, 2, generator=torch.Generator().manual_seed(1)).requires_grad_(True)
        y, (ot, of) = fn(dt.Tensor(raw, x.dims), dt.Tensor(w, (out, chan, k1, k2)), in_dim=chan, out_dim=out,
                         in_spatial_dims=[time, freq], filter_size=[k1, k2], padding=padding, strides=(2, 1))
        valid = ot.get_mask(device=torch.device("cpu")).raw_aligned(y.dims)
        (torch.where(valid, y.raw, 0.0) * torch.arange(y.raw.numel()).view(y.raw.shape).sin()).sum().backward()
        grads.append((y, raw.grad, w.grad))
    assert_same(grads[0][0], grads[1][0])
    torch.testing.assert_close(grads[0][1], grads[1][1], rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(grads[0][2], grads[1][2], rtol=0, atol=0)


def test_conv_without_batch_dims_and_with_two():
    for lead in (0, 2):
        dims = tuple(dt.Dim(2 + i, name=f"lead{i}") for i in range(lead))
        time, chan, out, kd = dt.Dim(6, name="time"), dt.Dim(3, name="chan"), dt.Dim(4, name="out"), dt.Dim(3, name="k")
        x = dt.Tensor(torch.randn(*[d.size for d in dims], 3, 6), dims + (chan, time))
        w = dt.Tensor(torch.randn(4, 3, 3), (out, chan, kd))
        both(dt.conv, _conv.conv, x, w, in_dim=chan, out_dim=out, in_spatial_dims=time, filter_size=kd, padding="same")


@given(lengths=st.lists(st.integers(0, 5), min_size=1, max_size=4).filter(lambda v: max(v) >= 1),
       extra=st.integers(0, 2), pad=st.sampled_from([PAD_NAN, PAD_LARGE]), order=st.permutations([0, 1, 2]),
       k=st.sampled_from([3, 4, 8, 31, 32]), with_bias=st.booleans())
def test_depthwise_conv_over_short_inputs_is_the_definition(lengths, extra, pad, order, k, with_bias):
    """A 1-D depthwise 'same' conv whose input is shorter than the filter's right half plus one (a Conformer's
    conv module over a short encoder): the fast path keeps the taps that meet a frame, with the definition's ops,
    so its values and gradients (x's, the filter's, the bias's) are the definition's bit for bit."""
    x, batch, time, chan = _batch(lengths, 4, extra=extra, pad=pad, order=order)
    kd = dt.Dim(k, name="k")
    results = []
    for fn in (dt.conv, _conv.conv):
        raw = x.raw.clone().requires_grad_(True)
        w = torch.randn(4, 1, k, generator=torch.Generator().manual_seed(1)).requires_grad_(True)
        b = torch.randn(4, generator=torch.Generator().manual_seed(2)).requires_grad_(True) if with_bias else None
        y, (ot,) = fn(dt.Tensor(raw, x.dims), dt.Tensor(w, (chan, chan // 4, kd)), in_dim=chan, out_dim=chan,
                      in_spatial_dims=[time], filter_size=[kd], padding="same", groups=4,
                      bias=dt.Tensor(b, (chan,)) if with_bias else None)
        valid = ot.get_mask(device=torch.device("cpu")).raw_aligned(y.dims)
        (torch.where(valid, y.raw, 0.0) * torch.arange(y.raw.numel()).view(y.raw.shape).sin()).sum().backward()
        results.append((y, raw.grad, w.grad, b.grad if with_bias else None))
    (y_fast, *g_fast), (y_slow, *g_slow) = results
    assert_same(y_fast, y_slow)
    for f, s in zip(g_fast, g_slow):
        if f is not None or s is not None:
            torch.testing.assert_close(f, s, rtol=0, atol=0, equal_nan=True)


def test_conv_common_calls_do_not_reach_the_definition():
    x, batch, time, chan = _batch([5, 3], 4, extra=1, pad=PAD_NAN, order=(0, 1, 2))
    out, kd = dt.Dim(4, name="out"), dt.Dim(3, name="k")
    w = dt.Tensor(torch.randn(4, 4, 3), (out, chan, kd))
    depthwise = dt.Tensor(torch.randn(4, 1, 3), (chan, chan // 4, kd))
    for kw in (dict(padding="same"), dict(padding="valid", strides=2), dict(padding=1, dilation=2),
               dict(padding="same", bias=dt.Tensor(torch.zeros(4), (out,)))):
        assert _definition_calls(lambda: dt.conv(x, w, in_dim=chan, out_dim=out, in_spatial_dims=[time],
                                                 filter_size=[kd], **kw)) == 0, kw
    # The Conformer's depthwise conv: out_dim is in_dim, the filter's input channels are in_dim // groups.
    assert _definition_calls(lambda: dt.conv(x, depthwise, in_dim=chan, out_dim=chan, in_spatial_dims=(time,),
                                             filter_size=(kd,), padding="same", groups=4)) == 0
    # ... over an input shorter than its 32 taps (a short encoder): the taps that meet a frame
    k32 = dt.Dim(32, name="k32")
    depthwise_32 = dt.Tensor(torch.randn(4, 1, 32), (chan, chan // 4, k32))
    assert _definition_calls(lambda: dt.conv(x, depthwise_32, in_dim=chan, out_dim=chan, in_spatial_dims=(time,),
                                             filter_size=(k32,), padding="same", groups=4)) == 0


def test_conv_cases_for_the_definition():
    x, batch, time, chan = _batch([5, 3, 0], 4, extra=1, pad=PAD_NAN, order=(0, 1, 2))
    out, kd, k2 = dt.Dim(4, name="out"), dt.Dim(3, name="k"), dt.Dim(2, name="k2")
    w = dt.Tensor(torch.randn(4, 4, 3), (out, chan, kd))
    cases = [
        dict(filter=dt.Tensor(w.raw.transpose(0, 1), (chan, out, kd)), padding="same"),  # filter in another order
        dict(filter=dt.Tensor(torch.randn(4, 4, 2), (out, chan, k2)), filter_size=[k2], padding="same"),  # uneven
        dict(filter=w, padding="same", out_spatial_dims=[time]),  # given out dims
        dict(filter=w, padding="valid", strides=[1]),  # a list of strides: taken
    ]
    for case in cases:
        kw = dict(in_dim=chan, out_dim=out, in_spatial_dims=[time], filter_size=[kd])
        kw.update(case)
        f = kw.pop("filter")
        both(dt.conv, _conv.conv, x, f, **kw)
    # Sequences all shorter than a window (the definition pads), a size-from-data spatial dim.
    short, _, t2, c2 = _batch([1, 2], 4, extra=0, pad=PAD_NAN, order=(0, 1, 2))
    w2 = dt.Tensor(torch.randn(4, 4, 3), (out, c2, kd))
    both(dt.conv, _conv.conv, short, w2, in_dim=c2, out_dim=out, in_spatial_dims=[t2], filter_size=[kd])
    free = dt.Dim(None, name="free")
    xf = dt.Tensor(torch.randn(2, 6, 4), (batch, free, chan))
    y_fast, (o_fast,) = dt.conv(xf, w, in_dim=chan, out_dim=out, in_spatial_dims=[free], filter_size=[kd])
    y_slow, (o_slow,) = _conv.conv(xf, w, in_dim=chan, out_dim=out, in_spatial_dims=[free], filter_size=[kd])
    torch.testing.assert_close(y_fast.raw, y_slow.raw, rtol=0, atol=0)
    # Errors are the definition's.
    with pytest.raises(ValueError, match=r"dimtorch\.conv\(\): in_dim 'out'\(4\) is not a dim of x"):
        dt.conv(x, w, in_dim=out, out_dim=chan, in_spatial_dims=[time], filter_size=[kd])
    with pytest.raises(TypeError, match=r"dimtorch\.conv\(\)"):
        dt.conv(x, w, in_dim=chan, out_dim=out, in_spatial_dims=[time], filter_size=[kd], dim=1)
    with pytest.raises(ValueError, match=r"dimtorch\.conv\(\): bias must have dims"):
        dt.conv(x, w, in_dim=chan, out_dim=out, in_spatial_dims=[time], filter_size=[kd],
                bias=dt.Tensor(torch.zeros(4), (chan,)))


def test_conv_new_dims_of_one_structure_each_get_their_lengths():
    """A training loop's batches bring new batch and time Dims of one raw shape: every call gets its own
    out dims and lengths, on the fast path and on the definition's layout reuse (transposed_conv's too)."""
    out, kd = dt.Dim(4, name="out"), dt.Dim(3, name="k")
    for step in range(4):
        lengths = [6, 1 + step, 3]
        x, batch, time, chan = _batch(lengths, 4, extra=1, pad=PAD_NAN, order=(0, 1, 2), seed=step)
        w = dt.Tensor(torch.randn(4, 4, 3, generator=torch.Generator().manual_seed(9)), (out, chan, kd))
        for fn in (dt.conv, _conv.conv):
            y, (ot,) = fn(x, w, in_dim=chan, out_dim=out, in_spatial_dims=[time], filter_size=[kd], padding="valid")
            assert ot is time - 2 and ot.lengths.raw.tolist() == [max(0, n - 2) for n in lengths]
            assert y.dims == (batch, out, ot)
        wt = dt.Tensor(torch.randn(4, 4, 3, generator=torch.Generator().manual_seed(9)), (chan, out, kd))
        y, (ot,) = dt.transposed_conv(x, wt, in_dim=chan, out_dim=out, in_spatial_dims=[time], filter_size=[kd],
                                      strides=2)
        assert y.dims == (batch, out, ot) and ot.lengths.raw.tolist() == [2 * n + 1 for n in lengths]


def test_transposed_conv_is_its_definition_called_from_c():
    """transposed_conv has no fast path: its _C function calls the definition (so that its errors are
    named from C) and gives the same results and errors."""
    x, batch, time, chan = _batch([5, 3], 4, extra=1, pad=PAD_NAN, order=(0, 1, 2))
    out, kd = dt.Dim(2, name="out"), dt.Dim(3, name="k")
    wt = dt.Tensor(torch.randn(4, 2, 3), (chan, out, kd))
    both(dt.transposed_conv, _conv.transposed_conv, x, wt, in_dim=chan, out_dim=out, in_spatial_dims=[time],
         filter_size=[kd], strides=2)
    with pytest.raises(ValueError) as e_fast:
        dt.transposed_conv(x, wt, in_dim=chan, out_dim=out, in_spatial_dims=[out], filter_size=[kd])
    with pytest.raises(ValueError) as e_slow:
        _conv.transposed_conv(x, wt, in_dim=chan, out_dim=out, in_spatial_dims=[out], filter_size=[kd])
    assert str(e_fast.value) == str(e_slow.value)


def test_conv_rf_arguments_take_the_fast_path():
    """RETURNN frontend's forms (None for strides/groups/dilation, dilation_rate, use_mask) are common calls
    too; x is positional-only on both paths."""
    x, batch, time, chan = _batch([5, 3], 4, extra=1, pad=PAD_NAN, order=(0, 1, 2))
    out, kd = dt.Dim(4, name="out"), dt.Dim(3, name="k")
    w = dt.Tensor(torch.randn(4, 4, 3), (out, chan, kd))
    for kw in (dict(strides=None, groups=None, dilation=None, bias=None), dict(dilation_rate=2, use_mask=True),
               dict(filter=w, use_mask=False)):
        f = () if "filter" in kw else (w,)
        call = dict(in_dim=chan, out_dim=out, in_spatial_dims=[time], filter_size=[kd], padding="same", **kw)
        assert _definition_calls(lambda: dt.conv(x, *f, **call)) == 0, kw
        both(dt.conv, _conv.conv, x, *f, **call)
    for bad in (dict(x=x, filter=w), dict(filter=w, dilation=1, dilation_rate=2)):
        args = () if "x" in bad else (x,)
        kw = dict(in_dim=chan, out_dim=out, in_spatial_dims=[time], filter_size=[kd], **bad)
        with pytest.raises(TypeError) as fast:
            dt.conv(*args, **kw)
        with pytest.raises(TypeError) as slow:
            _conv.conv(*args, **kw)
        assert str(fast.value).endswith(str(slow.value))


@pytest.mark.parametrize("ndim", [1, 2])
def test_padding_zeroed_skips_the_zeroing_in_both_paths(ndim):
    """padding_zeroed=True (the caller's promise): with zero padding the result of the default call, values and
    gradients (x's on valid frames), from the fast path and the definition alike; padding that holds anything else reaches the
    result (nothing zeroes it); a non-bool is a TypeError naming the call."""
    x, batch, time, chan = _batch([5, 3, 1], 2, extra=1, pad=0.0, order=(0, 1, 2))
    out, k = dt.Dim(3, name="out"), dt.Dim(3, name="k")
    dims, spatial, filter_size, w_raw = x.dims, (time,), (k,), torch.randn(3, 2, 3)
    raw = x.raw
    if ndim == 2:
        freq, k2 = dt.Dim(4, name="freq"), dt.Dim(3, name="k2")
        raw = raw.unsqueeze(-1) * torch.arange(1.0, 5.0)
        dims, spatial, filter_size, w_raw = dims + (freq,), (time, freq), (k, k2), torch.randn(3, 2, 3, 3)
    results = []
    for fn in (dt.conv, _conv.conv):
        for zeroed in (False, True):
            xr, w = raw.clone().requires_grad_(), w_raw.clone().requires_grad_()
            y, _ = fn(dt.Tensor(xr, dims), dt.Tensor(w, (out, chan) + filter_size), in_dim=chan, out_dim=out,
                      in_spatial_dims=spatial, filter_size=filter_size, padding="same", padding_zeroed=zeroed)
            y.raw.sum().backward()
            results.append((y, xr.grad, w.grad))
    valid = torch.arange(raw.shape[1]) < torch.tensor([5, 3, 1])[:, None]  # (x's padding: no gradient when zeroed)
    for y, xg, wg in results[1:]:
        assert_same(y, results[0][0])
        torch.testing.assert_close(xg[valid], results[0][1][valid], rtol=0, atol=0)
        torch.testing.assert_close(wg, results[0][2], rtol=0, atol=0)
    noisy = raw.clone()
    noisy[1, 3:] = 7.0  # sequence 1 (3 frames): padding that is not zero
    kw = dict(in_dim=chan, out_dim=out, in_spatial_dims=spatial, filter_size=filter_size, padding="same")
    w = dt.Tensor(w_raw, (out, chan) + filter_size)
    for fn in (dt.conv, _conv.conv):
        zeroed, _ = fn(dt.Tensor(noisy, dims), w, padding_zeroed=False, **kw)
        trusted, _ = fn(dt.Tensor(noisy, dims), w, padding_zeroed=True, **kw)
        assert zeroed.dims == trusted.dims == results[0][0].dims  # (batch, out, time[, freq])
        torch.testing.assert_close(zeroed.raw[1, :, :3], results[0][0].raw[1, :, :3])  # its valid frames
        assert not torch.equal(trusted.raw[1, :, 2], zeroed.raw[1, :, 2])  # its last frame reads the 7s
    assert _definition_calls(lambda: dt.conv(dt.Tensor(noisy, dims), w, padding_zeroed=True, **kw)) == 0
    with pytest.raises(TypeError, match=r"dimtorch\.conv\(\): padding_zeroed must be a bool"):
        dt.conv(x, w, padding_zeroed=1, **kw)
