"""Tests of python/dimtorch/ops/loop.py: scan over a dim with per-sequence ends against torch loops per
sequence (forward and backward, NaN/1e30 padding, each sequence alone), scan with cond, while_loop,
cond; errors name the call; the C++ fast paths of cond and while_loop against their definitions."""
import pytest
import torch

import dimtorch as dt
from fast_path_checks import assert_same, definition_calls
from helpers import PAD_LARGE, PAD_NAN, check_against_torch, check_batch_independence, make_padded_batch


def _rnn_scan(x, w, state_dim):
    """A tanh RNN over x's time dim by dt.scan: h_t = tanh(x_t W + h_{t-1}); ys = h_t."""
    batch, time, feat = x.dims
    h0 = dt.Tensor(torch.zeros(x.raw.shape[0], state_dim.size, dtype=x.raw.dtype), (batch, state_dim))

    def body(x_t, h):
        h = dt.tanh(dt.matmul(x_t, w, reduce=feat) + h)
        return h, h

    return dt.scan(spatial_dim=time, initial=h0, xs=x, ys=h0, body=body)


def _rnn_torch(x, w, lengths):
    """The same RNN per sequence, each to its own length: (ys (B, T, S), final h (B, S))."""
    ys = torch.zeros(x.shape[0], x.shape[1], w.shape[1], dtype=x.dtype)
    finals = []
    for b, n in enumerate(lengths):
        h = torch.zeros(w.shape[1], dtype=x.dtype)
        steps = []
        for t in range(n):
            h = torch.tanh(x[b, t] @ w + h)
            steps.append(h)
        if steps:
            ys = ys.index_put((torch.tensor([b]),), torch.nn.functional.pad(torch.stack(steps), (0, 0, 0, x.shape[1] - n))[None])
        finals.append(h)
    return ys, torch.stack(finals)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_scan_over_dynamic_dim_against_torch_loops(pad):
    lengths = [5, 2, 0, 3]
    pb = make_padded_batch(lengths, feature=3, pad_value=pad)
    state_dim = dt.Dim(4, name="state")
    w = dt.Tensor(torch.randn(3, 4, generator=torch.Generator().manual_seed(1)) * 0.5, (pb.feature, state_dim))

    def dt_fn(x, w):
        ys, h, out_dim = _rnn_scan(x, w, state_dim)
        assert out_dim is pb.time and ys.dims == (pb.time, pb.batch, state_dim) and h.dims == (pb.batch, state_dim)
        return ys, h

    check_against_torch(dt_fn, lambda x, w: _rnn_torch(x, w, lengths), [pb.x, w],
                        out_dims=[(pb.batch, pb.time, state_dim), (pb.batch, state_dim)], atol=1e-5, rtol=1e-4)


def test_scan_batch_independence():
    pb = make_padded_batch([4, 1, 3], feature=3, pad_value=PAD_NAN)
    state_dim = dt.Dim(2, name="state")
    w = dt.Tensor(torch.randn(3, 2) * 0.5, (pb.feature, state_dim))

    def fn(x, dim_map):
        ys, h, _ = _rnn_scan(x, w, state_dim)
        return ys, h

    check_batch_independence(fn, pb.x, pb.batch, pb.time, atol=1e-6, rtol=1e-5)


def test_scan_state_layout_does_not_depend_on_the_lengths():
    """Steps where every sequence runs skip the state's where only when the body's new state keeps its old
    dims and markers: a body that drops the feature marker (two static dims: no default marker) gets
    where's result (the old leaf's marker) on those steps too, so the final state's markers are the same
    whether or not the lengths differ."""
    feature, heads = dt.Dim(3, name="feature"), dt.Dim(2, name="heads")
    results = []
    for lengths in ([3, 3], [3, 2]):
        batch = dt.Dim(2, name="batch")
        time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
        x = dt.Tensor(torch.randn(2, 3, 2, 3), (batch, time, heads, feature))
        h0 = dt.Tensor(torch.zeros(2, 2, 3), (batch, heads, feature), feature_dim=feature)

        def body(x_t, h):
            s = x_t + h
            h = dt.Tensor(s.raw, s.dims)  # no marker
            return h, h

        _, h, _ = dt.scan(spatial_dim=time, initial=h0, xs=x, ys=h0, body=body)
        results.append(h.feature_dim)
    assert results == [feature, feature], results


def test_scan_static_dim_nested_state_no_xs_and_tensor_arrays():
    steps = dt.Dim(3, name="steps")
    batch = dt.Dim(2, name="batch")
    start = dt.Tensor(torch.tensor([1.0, 2.0]), (batch,))

    def body(_, s):
        count, (value, tag) = s["count"], s["pair"]
        value = value * 2.0
        return {"v": value, "none": None}, {"count": count + 1, "pair": (value, tag)}

    ys, s, out = dt.scan(spatial_dim=steps, initial={"count": 0, "pair": (start, "tag")},
                         ys={"v": start, "none": None}, body=body)
    assert out is steps and s["count"] == 3 and s["pair"][1] == "tag" and ys["none"] is None
    assert ys["v"].dims == (steps, batch)
    torch.testing.assert_close(ys["v"].raw, torch.tensor([[2.0, 4.0], [4.0, 8.0], [8.0, 16.0]]))
    lists, _, _ = dt.scan(spatial_dim=steps, initial={"count": 0, "pair": (start, "tag")},
                          ys={"v": start, "none": None}, body=body, return_tensor_arrays=True)
    assert len(lists["v"]) == 3 and lists["v"][2].dims == (batch,)


def test_scan_with_cond_lengths_and_state():
    """Count up to a per-sequence limit: an entry runs while count < limit. RETURNN frontend's rules,
    checked against rf itself in test_rf_parity: an entry's state is the one from before the step
    whose result made its cond false (that step's output still counts)."""
    batch = dt.Dim(None, name="batch")
    limit = dt.Tensor(torch.tensor([3, 1, 0]), (batch,))
    zero = dt.Tensor(torch.zeros(3, dtype=torch.int64), (batch,))

    def body(_, s):
        return s + 1, s + 1

    def cond(_, s):
        return s < limit

    ys, final, new_dim = dt.scan(cond=cond, cond_dims=[batch], initial=zero, ys=zero, body=body)
    assert new_dim.lengths.raw.tolist() == [3, 1, 0] and ys.dims == (new_dim, batch)
    assert ys.raw[:, 0].tolist() == [1, 2, 3] and ys.raw[0, 1] == 1
    assert final.raw.tolist() == [2, 0, 0]
    # cond after the body: every entry runs at least once
    ys, final, new_dim = dt.scan(cond=cond, cond_dims=[batch], cond_before_body=False, initial=zero, ys=zero,
                                 body=body)
    assert new_dim.lengths.raw.tolist() == [3, 1, 1]
    assert final.raw.tolist() == [2, 0, 0]  # the state from before the step whose cond was false
    ys, _, new_dim = dt.scan(cond=cond, cond_dims=[batch], initial=zero, ys=zero, body=body, max_seq_len=2)
    assert new_dim.lengths.raw.tolist() == [2, 1, 0] and ys.raw.shape[0] == 2
    ys, final, new_dim = dt.scan(cond=lambda _, s: s < -1, cond_dims=[batch], initial=zero, ys=zero, body=body)
    assert new_dim.lengths.raw.tolist() == [0, 0, 0] and ys.raw.shape == (0, 3)


def test_while_loop_and_cond():
    x = dt.Tensor(torch.tensor(1.0), ())
    out = dt.while_loop(lambda s: s[0] < 5, lambda s: (s[0] + 1, s[1] * 2.0), (0, x))
    assert out[0] == 5 and out[1].raw.item() == 32.0
    out = dt.while_loop(lambda v: v < 10.0, lambda v: v * 3.0, x)
    assert out.raw.item() == 27.0
    assert dt.cond(True, lambda: 1, lambda: 2) == 1
    assert dt.cond(dt.Tensor(torch.tensor(False), ()), lambda: 1, lambda: 2) == 2


def test_loop_errors():
    pb = make_padded_batch([3, 2], feature=2)
    h0 = dt.zeros((pb.feature,))
    with pytest.raises(TypeError, match=r"dimtorch\.cond\(\): pred must give a bool or a scalar bool Tensor, got a "
                                        r"Tensor over \('feature'\(2\)\)"):
        dt.cond(h0 > 0, lambda: 1, lambda: 2)
    with pytest.raises(TypeError, match=r"dimtorch\.while_loop\(\): cond must give a bool"):
        dt.while_loop(lambda s: 1, lambda s: s, 0)
    with pytest.raises(ValueError, match=r"dimtorch\.while_loop\(\): body returned another structure"):
        dt.while_loop(lambda s: len(s) < 3, lambda s: s + (1,), (1,))
    with pytest.raises(ValueError, match=r"dimtorch\.scan\(\): an xs Tensor lacks spatial_dim"):
        dt.scan(spatial_dim=pb.time, xs=h0, initial=h0, ys=h0, body=lambda x, s: (s, s))
    with pytest.raises(ValueError, match=r"dimtorch\.scan\(\): body's outputs have another structure"):
        dt.scan(spatial_dim=pb.time, initial=h0, ys=(h0,), body=lambda x, s: (s, s))
    with pytest.raises(ValueError, match=r"dimtorch\.scan\(\): output 0 is \('batch'.*its template has dims"):
        dt.scan(spatial_dim=pb.time, xs=pb.x, initial=h0, ys=h0, body=lambda x, s: (x, s))
    with pytest.raises(TypeError, match=r"dimtorch\.scan\(\): body must return \(y, new state\)"):
        dt.scan(spatial_dim=pb.time, initial=h0, ys=None, body=lambda x, s: s)
    with pytest.raises(ValueError, match=r"dimtorch\.scan\(\): with spatial_dim 'time'.* cond, cond_dims"):
        dt.scan(spatial_dim=pb.time, initial=h0, ys=None, body=lambda x, s: (None, s), cond=lambda x, s: s)
    with pytest.raises(ValueError, match=r"dimtorch\.scan\(\): spatial_dim 'batch'.* takes its size from data"):
        dt.scan(spatial_dim=pb.batch, initial=h0, ys=None, body=lambda x, s: (None, s))
    with pytest.raises(ValueError, match=r"dimtorch\.scan\(\): without spatial_dim, give cond and cond_dims"):
        dt.scan(initial=h0, ys=None, body=lambda x, s: (None, s))
    with pytest.raises(ValueError, match=r"dimtorch\.scan\(\): cond must give a bool Tensor over cond_dims"):
        dt.scan(cond=lambda x, s: s, cond_dims=[pb.feature], initial=h0, ys=None, body=lambda x, s: (None, s))
    with pytest.raises(TypeError, match=r"dimtorch\.scan\(\): a state leaf of type object cannot be kept"):
        dt.scan(spatial_dim=pb.time, initial=(h0, object()), ys=None,
                body=lambda x, s: (None, (s[0], object())))


def _loop_definitions():
    from dimtorch.ops import loop
    return loop


@pytest.mark.parametrize("state", ["int_tensor", "tensor", "list", "dict", "nested", "namedtuple", "float_none"])
def test_while_loop_fast_path_against_its_definition(state):
    """The C++ loop (src/ops/loop.cpp) gives what the definition gives on every kind of state, and checks the
    flat ones itself: the definition's structure check runs only for the others."""
    from collections import namedtuple

    loop = _loop_definitions()
    pb = make_padded_batch([3, 2], feature=2, pad_value=PAD_NAN)
    x = pb.x
    Pair = namedtuple("Pair", "i x")
    cases = {
        "int_tensor": ((0, x), lambda s: s[0] < 3, lambda s: (s[0] + 1, s[1] * 1.5)),
        "tensor": (x, lambda v: bool(v.raw.nan_to_num(0.0).abs().max() < 100.0), lambda v: v * 2.0),
        "list": ([0, 1.0, x], lambda s: s[0] < 4, lambda s: [s[0] + 1, s[1] * 0.5, s[2] + 1.0]),
        "dict": ({"i": 0, "x": x}, lambda s: s["i"] < 2, lambda s: {"i": s["i"] + 1, "x": s["x"] - 1.0}),
        "nested": ((0, (x, x)), lambda s: s[0] < 2, lambda s: (s[0] + 1, (s[1][1], s[1][0] * 3.0))),
        "namedtuple": (Pair(0, x), lambda s: s.i < 2, lambda s: Pair(s.i + 1, s.x * 0.5)),
        "float_none": ((0.0, None), lambda s: s[0] < 1.0, lambda s: (s[0] + 0.25, None)),
    }
    initial, cond, body = cases[state]
    fast = dt.while_loop(cond, body, initial)
    slow = loop.while_loop(cond, body, initial)
    if isinstance(fast, dict):
        assert fast.keys() == slow.keys()
        fast, slow = tuple(fast.values()), tuple(slow.values())
    assert_same(fast, slow)
    checks = definition_calls(lambda: dt.while_loop(cond, body, initial), loop._check_same_structure)
    assert checks == (0 if state in ("int_tensor", "tensor", "list") else
                      {"dict": 2, "nested": 2, "namedtuple": 2, "float_none": 4}[state])
    assert definition_calls(lambda: dt.while_loop(cond, body, initial), loop.while_loop) == 0


def test_while_loop_fast_path_tensor_conditions_and_errors():
    """A Tensor cond result in the middle of a fast loop is read by the definition's _truth; errors raised in the
    caller's functions come out untouched (not named after the call); bad arguments get the definition's errors."""
    loop = _loop_definitions()
    x = dt.Tensor(torch.tensor(1.0), ())
    calls = []

    def cond(s):
        calls.append(1)
        return s[0] < 10 if len(calls) % 2 else s[1] < 10.0  # a bool, then a scalar bool Tensor, ...
    for fn in (dt.while_loop, loop.while_loop):
        calls.clear()
        out = fn(cond, lambda s: (s[0] + 1, s[1] * 2.0), (0, x))
        assert out[0] == 5 and out[1].raw.item() == 32.0 and len(calls) == 6

    def body(s):
        raise ValueError("raised in the body")
    for fn in (dt.while_loop, loop.while_loop):
        with pytest.raises(ValueError) as e:
            fn(lambda s: True, body, 0)
        assert str(e.value) == "raised in the body"
        with pytest.raises(TypeError) as e:
            fn(lambda s: s + "", body, 0)  # (a TypeError DIMTORCH_OP would have named after the call)
        assert str(e.value) == "unsupported operand type(s) for +: 'int' and 'str'"
        with pytest.raises(TypeError, match=r"^dimtorch\.while_loop\(\): cond must give a bool or a scalar bool "
                                            r"Tensor, got a Tensor over \(\(none\)\) of float32$"):
            fn(lambda s: x, body, 0)
        with pytest.raises(ValueError, match=r"^dimtorch\.while_loop\(\): body returned another structure than "
                                             r"initial's"):
            fn(lambda s: s[0] < 2, lambda s: (s[0] + 1, 1.0), (0, 1))
        with pytest.raises(TypeError, match=r"^dimtorch\.while_loop\(\): cond and body must be callables$"):
            fn(1, body, 0)
        with pytest.raises(TypeError, match=r"^dimtorch\.while_loop\(\): .*unexpected keyword argument 'dim'"):
            fn(lambda s: False, body, 0, dim=1)
    assert dt.while_loop(cond=lambda s: s < 3, body=lambda s: s + 1, initial=0) == 3
    assert definition_calls(lambda: dt.while_loop(lambda s: s < 3, lambda s: s + 1, 0), loop.while_loop) == 0


def test_cond_fast_path_against_its_definition():
    """A Python bool pred calls its function in C++ (no definition call); a Tensor pred and bad arguments go to
    the definition; an error raised in a branch comes out untouched."""
    loop = _loop_definitions()
    x = dt.Tensor(torch.tensor([1.0, float("nan")]), (dt.Dim(2, name="f"),))
    for fn in (dt.cond, loop.cond):
        assert fn(True, lambda: x * 2.0, lambda: x - 1.0).raw.tolist()[0] == 2.0
        assert fn(False, lambda: x * 2.0, lambda: x - 1.0).raw.tolist()[0] == 0.0
        assert fn(pred=False, true_fn=lambda: 1, false_fn=lambda: 2) == 2
        assert fn(dt.Tensor(torch.tensor(True), ()), lambda: 1, lambda: 2) == 1
        with pytest.raises(KeyError) as e:
            fn(True, lambda: {}["k"], lambda: 2)
        assert e.value.args == ("k",)
        with pytest.raises(RuntimeError) as e:
            fn(False, lambda: 1, lambda: (_ for _ in ()).throw(RuntimeError("in the branch")))
        assert str(e.value) == "in the branch"
        with pytest.raises(TypeError, match=r"^dimtorch\.cond\(\): true_fn and false_fn must be callables$"):
            fn(True, 1, lambda: 2)
        with pytest.raises(TypeError, match=r"^dimtorch\.cond\(\): pred must give a bool or a scalar bool Tensor, "
                                            r"got int$"):
            fn(1, lambda: 1, lambda: 2)
        with pytest.raises(TypeError, match=r"^dimtorch\.cond\(\): .*unexpected keyword argument 'dim'"):
            fn(True, lambda: 1, lambda: 2, dim=0)
    assert definition_calls(lambda: dt.cond(True, lambda: 1, lambda: 2), loop.cond) == 0
    assert definition_calls(lambda: dt.cond(dt.Tensor(torch.tensor(True), ()), lambda: 1, lambda: 2), loop.cond) == 1


def test_while_loop_and_cond_fast_paths_backward():
    """Gradients flow through the fast loop and branch as through the definitions."""
    loop = _loop_definitions()
    grads = []
    for wl, cd in ((dt.while_loop, dt.cond), (loop.while_loop, loop.cond)):
        raw = torch.tensor([0.5, -2.0], requires_grad=True)
        x = dt.Tensor(raw, (dt.Dim(2, name="f"),))
        out = wl(lambda s: s[0] < 3, lambda s: (s[0] + 1, cd(True, lambda: s[1] * s[1], lambda: s[1])), (0, x))[1]
        out.raw.sum().backward()
        grads.append(raw.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)


def test_while_loop_fast_path_stops_on_ctrl_c():
    """A loop of C callables only (no interpreter frame that would check for signals) still stops on Ctrl-C."""
    import _thread
    import threading
    timer = threading.Timer(0.2, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            dt.while_loop(bool, abs, 1)
    finally:
        timer.cancel()
