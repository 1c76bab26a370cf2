"""Tests of dt.window (rf.window): sliding windows over a dim against each sequence alone, padded and unfolded by hand;
its C++ fast path (src/ops/window.cpp) against the definition."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import dimtorch as dt
from helpers import (PAD_LARGE, check_against_torch, check_batch_independence_by_position, check_padding_invariance,
                     make_padded_batch)
from in_graph_helpers import check_alone_in_graph, check_in_graph, padded_env, run_meta_in_graph

LENGTHS = [7, 4, 1, 0, 5]


def windows_alone(seq, size, left, right, stride, pad_value, n_out):
    """seq (n, feature) alone -> (n_out, feature, size): frame t holds seq[t * stride - left + w], pad_value outside."""
    padded = torch.cat([seq.new_full((left, seq.shape[1]), pad_value), seq,
                        seq.new_full((right + size, seq.shape[1]), pad_value)])
    return torch.stack([padded[t * stride:t * stride + size].T for t in range(n_out)]) if n_out else \
        seq.new_zeros((0, seq.shape[1], size))


def oracle(raw, lengths, size, left, right, stride, pad_value, out_lengths):
    n_max = max(out_lengths)
    outs = [windows_alone(raw[b, :n], size, left, right, stride, pad_value, m) for b, (n, m) in
            enumerate(zip(lengths, out_lengths))]
    return torch.stack([F.pad(o, (0, 0, 0, 0, 0, n_max - o.shape[0])) for o in outs])


def ceildiv(a, b):
    return -(-a // b)


CASES = [  # size, window_left, window_right, stride, padding, pad_value
    (3, None, None, 1, "same", None),
    (4, None, None, 1, "same", 0.5),
    (4, None, 1, 2, "same", -1.0),
    (3, 2, None, 1, "same", None),  # causal: the frame and the two before
    (3, 0, 2, 3, "same", 0.0),
    (2, None, None, 3, "valid", None),
    (5, None, None, 1, "valid", None),
]


@pytest.mark.parametrize("size,left,right,stride,padding,pad_value", CASES)
def test_window_against_each_sequence_alone(size, left, right, stride, padding, pad_value):
    pb = make_padded_batch(LENGTHS, feature=3, extra_time=2)
    wd = dt.Dim(size, name="window")
    kw = dict(window_dim=wd, window_left=left, window_right=right, stride=stride, padding=padding,
              pad_value=pad_value)
    y, ot = dt.window(pb.x, spatial_dim=pb.time, **kw)
    assert y.dims == (pb.batch, ot, pb.feature, wd)
    if padding == "same":
        l_ = left if left is not None else size - 1 - (right if right is not None else size // 2)
        r_ = size - 1 - l_
        out_lengths = [ceildiv(n, stride) for n in LENGTHS]
        assert (ot is pb.time) == (stride == 1)
    else:
        l_ = r_ = 0
        out_lengths = [ceildiv(max(0, n - size + 1), stride) for n in LENGTHS]
    assert ot.lengths.raw.tolist() == out_lengths and y.raw.shape[1] == max(out_lengths)
    check_against_torch(lambda t: dt.window(t, spatial_dim=pb.time, **kw)[0],
                        lambda r: oracle(r, LENGTHS, size, l_, r_, stride, 0.0 if pad_value is None else pad_value,
                                         out_lengths), [pb.x])
    check_batch_independence_by_position(lambda t, m: dt.window(t, spatial_dim=m(pb.time), **kw)[0], pb.x,
                                         pb.batch, pb.time)
    check_padding_invariance(lambda t: dt.window(t, spatial_dim=t.dims[1], **kw)[0], feature=3)


def test_window_dims_orders_left_as_dim_and_static_dims():
    pb = make_padded_batch([5, 2], feature=2, pad_value=PAD_LARGE)
    wd = dt.Dim(3, name="w")
    x = dt.Tensor(pb.x.raw.permute(2, 1, 0), (pb.feature, pb.time, pb.batch))  # time in the middle
    y, ot = dt.window(x, spatial_dim=pb.time, window_dim=wd, window_left=dt.Dim(1, name="l"))
    assert ot is pb.time and y.dims == (pb.feature, pb.time, pb.batch, wd)
    want = dt.window(pb.x, spatial_dim=pb.time, window_dim=wd)[0]  # the same (centered) window
    torch.testing.assert_close(y.raw_aligned((pb.batch, pb.time, pb.feature, wd))[0], want.raw[0])
    t, f = dt.Dim(6, name="t"), dt.Dim(2, name="f")
    s = dt.Tensor(torch.randn(6, 2), (t, f))
    y, ot = dt.window(s, spatial_dim=t, window_dim=dt.Dim(2, name="w2"), padding="valid", stride=2)
    assert ot.size == 3 and y.raw.data_ptr() == s.raw.data_ptr()  # a view: no copy
    torch.testing.assert_close(y.raw, s.raw.unfold(0, 2, 2))


def test_window_out_spatial_dim_and_use_mask():
    pb = make_padded_batch([5, 3], feature=2, pad_value=7.0)
    wd = dt.Dim(3, name="w")
    y0, ot = dt.window(pb.x, spatial_dim=pb.time, window_dim=wd, stride=2)
    mine = dt.Dim(dt.Tensor(torch.tensor([3, 2]), (pb.batch,)), name="mine")
    y, got = dt.window(pb.x, spatial_dim=pb.time, window_dim=wd, stride=2, out_spatial_dim=mine)
    assert got is mine and y.dims == (pb.batch, mine, pb.feature, wd)
    torch.testing.assert_close(y.raw, y0.raw)
    with pytest.raises(ValueError, match=r"dimtorch\.window\(\): out_spatial_dims\[0\] 'time'\[batch\] \(lengths "
                                         r"\[5, 3\]\) does not match the output dim"):
        dt.window(pb.x, spatial_dim=pb.time, window_dim=wd, stride=2, out_spatial_dim=pb.time)
    # use_mask=False: the second sequence's last window reads its padding (7.0), as rf's use_mask=False
    raw = dt.window(pb.x, spatial_dim=pb.time, window_dim=wd, use_mask=False)[0].raw
    assert raw[1, 2, 0, 2] == 7.0 and y0.raw[1, 1, 0, 2] == 0.0


def test_window_in_graph():
    env = padded_env((6, 3, 0, 2), feature=2, extra_time=2)
    env["w"] = dt.Dim(3, name="w")
    for kw in (dict(), dict(stride=2, pad_value=1.0), dict(padding="valid", stride=2), dict(window_left=0)):
        fn = (lambda kw: lambda e: dt.window(e["x"], spatial_dim=e["time"], window_dim=e["w"], **kw)[0])(kw)
        check_in_graph(fn, env)
        check_alone_in_graph(fn, env)
        run_meta_in_graph(fn, env)


def test_window_errors():
    pb = make_padded_batch([3, 2], feature=2)
    wd = dt.Dim(3, name="w")
    with pytest.raises(ValueError, match=r"dimtorch\.window\(\): spatial_dim 'x'\(3\) is not a dim of source"):
        dt.window(pb.x, spatial_dim=dt.Dim(3, name="x"), window_dim=wd)
    with pytest.raises(ValueError, match=r"dimtorch\.window\(\): window_dim must be static and >= 1, got "
                                         r"'time'\[batch\]"):
        dt.window(pb.x, spatial_dim=pb.feature, window_dim=pb.time)
    with pytest.raises(ValueError, match=r"dimtorch\.window\(\): window_dim 'feature'\(2\) is already a dim of source"):
        dt.window(pb.x, spatial_dim=pb.time, window_dim=pb.feature)
    with pytest.raises(TypeError, match=r"dimtorch\.window\(\): stride must be an int >= 1 \(a Tensor stride: not "
                                        r"supported\)"):
        dt.window(pb.x, spatial_dim=pb.time, window_dim=wd, stride=dt.Tensor(torch.tensor(2), ()))
    with pytest.raises(ValueError, match=r"dimtorch\.window\(\): window_left \(2\) \+ window_right \(2\) must be the "
                                         r"window size - 1 \(2\)"):
        dt.window(pb.x, spatial_dim=pb.time, window_dim=wd, window_left=2, window_right=2)
    with pytest.raises(ValueError, match=r"dimtorch\.window\(\): padding must be 'same' or 'valid', got 'full'"):
        dt.window(pb.x, spatial_dim=pb.time, window_dim=wd, padding="full")
    with pytest.raises(TypeError, match=r"dimtorch\.window\(\): pad_value must be a Python number"):
        dt.window(pb.x, spatial_dim=pb.time, window_dim=wd, pad_value="0")
    with pytest.raises(TypeError, match=r"dimtorch\.window\(\): window_left must be an int >= 0 or a static Dim"):
        dt.window(pb.x, spatial_dim=pb.time, window_dim=wd, window_left=-1)
    with pytest.raises(TypeError, match=r"dimtorch\.window\(\): .*names an axis by its Dim"):
        dt.window(pb.x, spatial_dim=pb.time, window_dim=wd, dim=1)


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 7), min_size=1, max_size=3).filter(lambda v: max(v) >= 1),
       extra=st.integers(0, 2), pad=st.sampled_from([float("nan"), 1e30]), order=st.permutations([0, 1, 2]),
       size=st.integers(1, 5), stride=st.sampled_from([None, 1, 2, 4]), padding=st.sampled_from([None, "same", "valid"]),
       left=st.sampled_from([None, 0, 1, 2]), pad_value=st.sampled_from([None, 0, -1.5, 3]),
       use_mask=st.sampled_from([None, True, False]), static_time=st.sampled_from([None, None, 6]))
def test_window_fast_path_is_the_definition(lengths, extra, pad, order, size, stride, padding, left, pad_value, use_mask,
                                            static_time):
    """dt.window's C++ fast path (src/ops/window.cpp) gives the definition's dims, markers, values (NaN where NaN)
    and gradients, or its error; the common call never reaches the definition."""
    import inspect
    import sys

    from dimtorch.ops import window as _window
    from fast_path_checks import assert_same
    g = torch.Generator().manual_seed(0)
    batch, chan = dt.Dim(None, name="batch"), dt.Dim(3, name="chan")
    if static_time is None:
        time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
        n_time = max(lengths) + extra
    else:
        time, n_time = dt.Dim(static_time, name="time"), static_time
    raw = torch.randn(len(lengths), n_time, 3, generator=g)
    if static_time is None:
        for b, n in enumerate(lengths):
            raw[b, n:] = pad
    dims = (batch, time, chan)
    x = dt.Tensor(raw.permute(*order), tuple(dims[i] for i in order), feature_dim=chan)
    w = dt.Dim(size, name="w")
    kw = {k: v for k, v in dict(stride=stride, padding=padding, window_left=left, pad_value=pad_value,
                                use_mask=use_mask).items() if v is not None}
    try:
        slow = _window.window(x, spatial_dim=time, window_dim=w, **kw)
    except (TypeError, ValueError) as e:
        with pytest.raises(type(e)) as info:
            dt.window(x, spatial_dim=time, window_dim=w, **kw)
        assert str(info.value) == str(e)
        return
    grads = []
    for fn in (dt.window, _window.window):
        leaf = raw.clone().requires_grad_()
        xl = dt.Tensor(leaf.permute(*order), x.dims, feature_dim=chan)
        y, out = fn(xl, spatial_dim=time, window_dim=w, **kw)
        (torch.nan_to_num(y.raw, posinf=0.0, neginf=0.0) * 0.5).sum().backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0, equal_nan=True)
    assert_same(dt.window(x, spatial_dim=time, window_dim=w, **kw), slow)
    calls = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is inspect.unwrap(_window.window).__code__:
            calls.append(1)
    sys.setprofile(profile)
    try:
        dt.window(x, spatial_dim=time, window_dim=w, **kw)
    finally:
        sys.setprofile(None)
    assert len(calls) == (1 if use_mask is False else 0)
