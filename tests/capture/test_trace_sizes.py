"""Sizes of dims while tracing (dimtorch._core.sizes): Dim(SymInt) in torch.compile, torch.export and make_fx, the
size bound to a dynamic dim in a trace and its lifetime, data-dependent sizes as bounds or unbacked sizes,
error messages under Dynamo, one graph for convolutions on both sides of 16 sequences, and dt.scan over a
dynamic dim as one torch scan."""
from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import dimtorch as dt
from compile_helpers import Compiled, assert_same, padded
from dimtorch._core import dim_cache as _dim_cache

F = 4


def _export(fn, args, dynamic_shapes: dict):
    """torch.export (non-strict) of fn(raw, lengths) with `dynamic_shapes` by argument name; the module."""
    class Step(torch.nn.Module):
        def forward(self, raw, lengths):
            return fn(raw, lengths)
    return torch.export.export(Step(), tuple(args), dynamic_shapes=dynamic_shapes, strict=False).module()


def _batch_dims_from_symint(raw, lengths):
    batch = dt.Dim(raw.shape[0], name="B")  # a SymInt while tracing
    time = dt.Dim(dt.Tensor(lengths, (batch,)), name="time")
    return batch, time


def _symint_fn(feature):
    def fn(raw, lengths):
        batch, time = _batch_dims_from_symint(raw, lengths)
        x = dt.Tensor(raw, (batch, time, feature))
        pairs = batch * 2  # dim math on a symbolic size
        assert isinstance(batch.size, (int, torch.SymInt)) and pairs.size is not None
        y = x + dt.zeros((batch, time, feature)) + dt.cast(dt.range_over_dim(time), "float32")
        doubled = dt.ones((pairs,))
        return dt.where(time.get_mask(), y, 0.0).raw, doubled.raw
    return fn


@pytest.mark.parametrize("tracer", ["compile", "export", "make_fx"])
def test_dim_from_a_symbolic_size(tracer):
    """Dim(raw.shape[0]) is a static dim of symbolic size in all three tracers; dim math keeps it symbolic;
    one graph serves batches of other sizes."""
    feature = dt.Dim(F, name="feature")
    fn = _symint_fn(feature)
    first, second = padded((5, 2, 4), F, pad=float("nan")), padded((7, 1, 3, 2, 6), F, pad=1e30, seed=1)
    if tracer == "compile":
        traced = Compiled(fn, dynamic=True)
    elif tracer == "export":
        b, t = torch.export.Dim("B", min=2), torch.export.Dim("T", min=2)
        traced = _export(fn, first, {"raw": {0: b, 1: t}, "lengths": {0: b}})
    else:
        traced = make_fx(fn, tracing_mode="symbolic")(*first)
    for raw, lengths in (first, second):
        assert_same(traced(raw, lengths), fn(raw, lengths), what=tracer)
        assert traced(raw, lengths)[1].shape == (2 * raw.shape[0],)
    if tracer == "compile":
        assert traced.graphs == 1
    torch._dynamo.reset()


def test_a_dim_made_outside_keeps_nothing_of_a_trace():
    """A dynamic dim made eagerly and bound in a trace (make_fx, export, compile) has no traced size after it:
    eagerly it takes its host max again, and the trace's fake mode is freed with the graph."""
    feature = dt.Dim(F, name="feature")
    outer_batch = dt.Dim(None, name="outer_batch")
    outer_time = dt.Dim(dt.Tensor(torch.tensor([5, 3]), (outer_batch,)), name="outer_time")
    modes = []

    def fn_recording_the_fake_mode(raw, lengths):
        modes.append(weakref.ref(torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)))
        return fn(raw, lengths)

    def fn(raw, lengths):
        batch, time = _batch_dims_from_symint(raw, lengths)
        x = dt.Tensor(raw, (batch, time, feature))
        z = dt.Tensor(raw[:2, :5], (outer_batch, outer_time, feature))  # binds the outer dims in this trace
        return (x + dt.zeros((batch, time, feature))).raw, (z + dt.zeros((outer_time, feature))).raw

    raw, lengths = padded((7, 4, 6), F, pad=0.0)
    graph = make_fx(fn_recording_the_fake_mode, tracing_mode="symbolic")(raw, lengths)
    assert [n.name for n in graph.graph.nodes if n.op == "placeholder"] == ["raw_1", "lengths_1"]
    assert outer_time._padded_size is None and outer_batch.size is None
    assert dt.zeros((outer_time, feature)).raw.shape == (5, F)  # the host max again
    del graph
    gc.collect()
    assert modes and modes[0]() is None, "the trace's fake mode outlives the graph"
    b, t = torch.export.Dim("B", min=3), torch.export.Dim("T", min=6)
    exported = _export(fn, (raw, lengths), {"raw": {0: b, 1: t}, "lengths": {0: b}})
    assert dt.zeros((outer_time, feature)).raw.shape == (5, F)
    del exported
    compiled = Compiled(fn, dynamic=True)
    compiled(raw, lengths)
    compiled(*padded((9, 3, 8, 5), F, pad=0.0))
    assert compiled.graphs == 1 and outer_time._padded_size is None
    assert dt.zeros((outer_time, feature)).raw.shape == (5, F)
    torch._dynamo.reset()


def test_no_traced_raw_stays_in_a_per_dim_cache():
    """last_frame_position_of_dim caches per dim eagerly; while tracing it builds in the graph, and the per-dim
    cache refuses a traced raw."""
    cached = []

    def fn(raw, lengths):
        _, time = _batch_dims_from_symint(raw, lengths)
        out = dt.last_frame_position_of_dim(time).raw
        cached.append(_dim_cache.lookup(time, ("last_frame", None)))
        return out

    graph = make_fx(fn, tracing_mode="symbolic")(*padded((4, 2, 3), F, pad=0.0))
    assert cached == [None] and graph(*padded((5, 1), F, pad=0.0)).tolist() == [4, 0]
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor([4, 2]), (batch,)), name="time")
    assert dt.last_frame_position_of_dim(time).raw.tolist() == [3, 1]
    assert _dim_cache.lookup(time, ("last_frame", None)) is not None
    with FakeTensorMode():
        fake = torch.empty(2)
    assert _dim_cache.store(time, "x", fake) is fake and _dim_cache.lookup(time, "x") is None


def test_tensorless_creation_in_a_decoder_state():
    """An attention decoder's initial state: zeros over (batch, enc_time, heads) and over (batch, heads), the
    batch sized from data, traced (the batch is bound by the lengths' Tensor); eagerly the first takes
    the batch from enc_time's lengths."""
    heads = dt.Dim(2, name="heads")

    def fn(raw, lengths):
        batch = dt.Dim(None, name="batch")
        enc_time = dt.Dim(dt.Tensor(lengths, (batch,)), name="enc_time")
        accumulated = dt.zeros((batch, enc_time, heads))
        att = dt.zeros((batch, heads))
        return accumulated.raw, att.raw

    raw, lengths = padded((6, 3, 5), F, pad=0.0)
    for traced in (make_fx(fn, tracing_mode="symbolic")(raw, lengths), Compiled(fn, dynamic=True)):
        a, b = traced(*padded((8, 2, 4, 1), F, pad=0.0))
        assert a.shape == (4, 8, 2) and b.shape == (4, 2)
    torch._dynamo.reset()
    batch = dt.Dim(None, name="batch")
    enc_time = dt.Dim(dt.Tensor(lengths, (batch,)), name="enc_time")
    assert dt.zeros((batch, enc_time, heads)).raw.shape == (3, 6, 2)


def _data_dependent(raw, lengths):
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(lengths, (batch,)), name="time")
    feature = dt.Dim(F, name="feature")
    x = dt.Tensor(raw, (batch, time, feature), feature_dim=feature)
    mask = dt.compare(dt.reduce_sum(x.copy_masked(0.0), axis=feature), 0.0, ">")
    selected, _ = dt.masked_select(x, mask=mask, dims=(batch, time))
    decoded, _ = dt.ctc_greedy_decode(x, in_spatial_dim=time, blank_index=0)
    repeats = dt.Tensor(torch.ones_like(lengths).unsqueeze(1).expand(-1, raw.shape[1]) * 2, (batch, time))
    bounded, _ = dt.repeat(x, in_spatial_dim=time, repeats=repeats, max_len_factor=1.5)
    unbounded, _ = dt.repeat(x, in_spatial_dim=time, repeats=repeats)
    return selected.raw, decoded.raw, bounded.raw, unbounded.raw


def test_data_dependent_sizes_are_bounds_or_unbacked():
    """While tracing a data-dependent size is no host read: masked_select's packed dim has the static bound
    B * T (its count in the graph), ctc_greedy_decode's the input's T, repeat with max_len_factor
    ceil(T * factor); repeat without one the max of its lengths, an unbacked size (all three tracers)."""
    raw, lengths = padded((6, 3, 5), F, pad=0.0)
    graph = make_fx(_data_dependent, tracing_mode="symbolic")(raw, lengths)
    for b, t in ((3, 6), (4, 9)):
        lens = torch.tensor([t] + [2] * (b - 1))
        selected, decoded, bounded, unbounded = graph(torch.randn(b, t, F), lens)
        assert selected.shape[0] == b * t and decoded.shape == (b, t) and bounded.shape[1] == -(-t * 3 // 2)
        assert unbounded.shape[1] == 2 * t  # the longest sequence's 2 T frames
    unbacked = [n for n in graph.graph.nodes if "item" in str(n.target) or "local_scalar_dense" in str(n.target)]
    assert len(unbacked) == 1, unbacked  # repeat without a bound, only
    compiled = Compiled(_data_dependent, dynamic=True)
    assert_same([o.shape[0] for o in compiled(raw, lengths)], [18, 3, 3, 3])
    torch._dynamo.reset()


def test_errors_under_dynamo_name_the_call_and_dims():
    """A dimtorch error raised while Dynamo traces reads as in eager (the dims' repr is not traced)."""
    feature = dt.Dim(F, name="feature")

    def fn(raw, lengths):
        batch = dt.Dim(None, name="batch")
        time = dt.Dim(dt.Tensor(lengths, (batch,)), name="time")
        x = dt.Tensor(raw, (batch, time, feature))
        return dt.reduce_sum(x, axis=dt.Dim(3, name="other")).raw

    with pytest.raises(Exception) as info:
        Compiled(fn)(*padded((3, 2), F, pad=0.0))
    text = str(info.value)
    assert "untraceable" not in text and "dimtorch.reduce_sum()" in text and "'other'(3)" in text, text
    torch._dynamo.reset()


def test_conv_on_both_sides_of_16_sequences_in_one_graph():
    """torch's fake convolution guards on the CPU backend that the batch size selects (B < 16 or not): while
    tracing, dt.conv calls dimtorch::convolution (ops/conv_op.py), so one graph serves both."""
    f, o, k = dt.Dim(8, name="f"), dt.Dim(8, name="o"), dt.Dim(3, name="k")
    f8 = f // 8
    w = torch.randn(8, 1, 3, requires_grad=True)

    def fn(raw, lengths):
        batch = dt.Dim(None, name="batch")
        time = dt.Dim(dt.Tensor(lengths, (batch,)), name="time")
        x = dt.Tensor(raw, (batch, time, f))
        y, _ = dt.conv(x, dt.Tensor(w, (o, f8, k)), in_dim=f, out_dim=o, in_spatial_dims=[time], filter_size=[k],
                       padding="same", groups=8)
        return dt.reduce_sum(y, axis=(batch, time, o)).raw

    compiled = Compiled(fn, dynamic=True)
    for n in (4, 16, 20):
        raw = torch.randn(n, 11, 8, requires_grad=True)
        lengths = torch.randint(1, 12, (n,))
        lengths[0] = 11
        got = compiled(raw, lengths)
        (gx,) = torch.autograd.grad(got, [raw])
        want = fn(raw, lengths)
        (wx,) = torch.autograd.grad(want, [raw])
        assert_same([got, gx], [want, wx], rtol=1e-4, atol=1e-4, what=f"batch {n}")
    assert compiled.graphs == 1
    torch._dynamo.reset()


def _decoder_scan(feature, weight):
    """A recurrent decoder over the targets' frames by dt.scan (as RETURNN's rf.scan over targets): state
    (batch, feature) and an attention-like read of the encoder inside the body."""
    def fn(raw, lengths, targets, target_lengths):
        batch = dt.Dim(None, name="batch")
        enc_time = dt.Dim(dt.Tensor(lengths, (batch,)), name="enc_time")
        target_time = dt.Dim(dt.Tensor(target_lengths, (batch,)), name="target_time")
        enc = dt.Tensor(raw, (batch, enc_time, feature))
        emb = dt.Tensor(targets, (batch, target_time, feature))
        initial = dt.zeros_like(dt.reduce_mean(enc, axis=enc_time))  # (eagerly a batch sized from data has no size)
        w = dt.Tensor(weight, (feature,))

        def body(x, state):
            energy = dt.matmul(enc, state, reduce=feature)  # (batch, enc_time)
            weights = dt.softmax(energy, axis=enc_time)
            context = dt.matmul(weights, enc, reduce=enc_time)
            new = dt.tanh((x + context + state * 0.5) * w)
            return new, new

        ys, last, _ = dt.scan(spatial_dim=target_time, initial=initial, xs=emb, ys=initial, body=body)
        return ys.copy_masked(0.0).raw_aligned((target_time, batch, feature)), last.raw
    return fn


def test_scan_over_a_dynamic_dim_is_one_graph_for_every_length():
    """dt.scan over a dynamic dim while traced is one torch scan over its padded size (symbolic): batches of
    other target lengths reuse the dynamic graph; outputs, final state and gradients equal eager's."""
    feature = dt.Dim(F, name="feature")
    weight = torch.randn(F, requires_grad=True)
    fn = _decoder_scan(feature, weight)
    compiled = Compiled(fn, dynamic=True)
    for i, (enc_lengths, target_lengths) in enumerate((((5, 3, 4), (3, 1, 2)), ((7, 2, 6, 5), (5, 2, 4, 3)),
                                                        ((4, 4), (2, 2)), ((9, 8, 3), (6, 1, 3)))):
        raw, lens = padded(enc_lengths, F, pad=float("nan"), seed=i)
        targets, tlens = padded(target_lengths, F, pad=1e30, seed=10 + i)
        raw.requires_grad_(True)
        got = compiled(raw, lens, targets, tlens)
        want = fn(raw, lens, targets, tlens)
        grads_got = torch.autograd.grad(sum(g.sum() for g in got), [raw, weight])
        grads_want = torch.autograd.grad(sum(w.sum() for w in want), [raw, weight])
        assert_same(list(got) + [g.nan_to_num(0.0) for g in grads_got],
                    list(want) + [g.nan_to_num(0.0) for g in grads_want], rtol=1e-4, atol=1e-4, what=f"batch {i}")
    assert compiled.graphs <= 2, compiled.graphs  # the first batch's, then one dynamic graph
    torch._dynamo.reset()
