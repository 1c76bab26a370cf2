"""RETURNN frontend code (dimtorch.rf) under torch.compile(fullgraph=True): what the AED model of RETURNN's
demo-rf-pt-benchmark.py needs in its training step — a product of dims (heads * feature) made in the step, dropout
by the run context's train flag,
and rf.scan over the targets' dynamic dim with outputs (one torch scan, its outputs stacked in the graph); and the
demo's whole training step over 50 batches of random sizes (few graphs, equal to eager)."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy
import pytest
import torch

import dimtorch as dt
import dimtorch.rf as drf
from compile_helpers import Compiled, assert_same, dims_of, padded

F = 3


def test_a_product_of_dims_made_in_the_step():
    """heads * feature (two static dims, RETURNN's merge) inside the compiled step: the same merged dim as
    eager's, usable as a tensor's dim."""
    heads, feature = dt.Dim(2, name="heads"), dt.Dim(F, name="feature")

    def fn(raw, lengths):
        batch, time = dims_of(lengths, feature)
        x = dt.Tensor(raw, (batch, time, feature))
        merged = heads * feature
        y = dt.combine(dt.reduce_sum(x, axis=time), dt.ones((heads,)), "mul",
                       allow_broadcast_all_sources=True)  # (batch, feature, heads)
        y, _ = drf.merge_dims(y, dims=(heads, feature), out_dim=merged)
        return y.raw_aligned((batch, merged))
    compiled = Compiled(fn, dynamic=True)
    raw, lens = padded((3, 1, 2), F, pad=0.0)
    got, want = compiled(raw, lens), fn(raw, lens)
    assert got.shape == (3, 2 * F)
    assert_same(got, want)
    assert compiled.graphs == 1


def _rf_decoder(feature, weight):
    """rf.scan over the targets' dim with ys templates (RETURNN's attention decoder loop, reduced)."""
    def fn(raw, lengths, targets, target_lengths):
        batch, enc_time = dims_of(lengths, feature)
        target_time = dt.Dim(dt.Tensor(target_lengths, (batch,)), name="target_time")
        enc = dt.Tensor(raw, (batch, enc_time, feature))
        emb = dt.Tensor(targets, (batch, target_time, feature))
        w = dt.Tensor(weight, (feature,))

        def body(x, state):
            weights = drf.softmax(drf.matmul(enc, state["s"], reduce=feature), axis=enc_time)
            context = drf.matmul(weights, enc, reduce=enc_time)
            s = drf.tanh((x + context + state["s"] * 0.5) * w)
            return {"s": s, "ctx": context}, {"s": s}

        ys = {"s": drf.Tensor("s", dims=[batch, feature], dtype="float32", feature_dim_axis=-1),
              "ctx": drf.Tensor("ctx", dims=[batch, feature], dtype="float32")}
        out, last, dim = drf.scan(spatial_dim=target_time, xs=emb, ys=ys, body=body,
                                  initial={"s": dt.zeros_like(dt.reduce_mean(enc, axis=enc_time))})
        assert dim is target_time and out["s"].feature_dim is feature
        order = (target_time, batch, feature)
        return (out["s"].copy_masked(0.0).raw_aligned(order), out["ctx"].copy_masked(0.0).raw_aligned(order),
                last["s"].raw_aligned((batch, feature)))
    return fn


@pytest.mark.slow  # two compiles of a scan: ~26 s on 2 cores
def test_rf_dropout_follows_the_train_flag_in_a_compiled_step():
    """rf.dropout (a C function: the flag the run context publishes) traces as its definition, which reads the
    context's flag for it (also one set by train_flag_ctx(func=rf.dropout)); with stop_gradient in one graph."""
    b, f = dt.Dim(4, name="b"), dt.Dim(6, name="f")

    def step(raw):
        y = drf.dropout(dt.Tensor(raw, (b, f)), 0.5, axis=f)
        return (drf.stop_gradient(y) + y).raw

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    ones = torch.ones(4, 6)
    try:
        drf.init_train_step_run_ctx(train_flag=True)
        assert set(compiled(ones).unique().tolist()) <= {0.0, 4.0}
        drf.init_train_step_run_ctx(train_flag=False)
        assert compiled(ones).unique().tolist() == [2.0]
        with drf.get_run_ctx().train_flag_ctx(True, func=drf.dropout):
            assert set(compiled(ones).unique().tolist()) <= {0.0, 4.0}
    finally:
        drf.reset_run_ctx()
        torch._dynamo.reset()


def test_rf_scan_with_outputs_is_one_graph_for_every_length():
    """rf.scan collects its outputs per step in eager mode; traced, they are the torch scan's stacked outputs
    (a Python list filled in the scan's body is a side effect Dynamo refuses). Outputs, final state and
    gradients equal eager's on batches of other lengths (NaN/1e30 padding), in at most two graphs (as dt.scan's)."""
    feature = dt.Dim(F, name="feature")
    weight = torch.randn(F, requires_grad=True)
    fn = _rf_decoder(feature, weight)
    # backend eager: rf.scan's part is Dynamo's capture (its body's outputs); AOTAutograd of the torch scan it
    # becomes is dt.scan's test (test_trace_sizes.py)
    compiled = Compiled(fn, backend="eager", dynamic=True)
    for i, (enc_lengths, target_lengths) in enumerate((((5, 3, 4), (3, 1, 2)), ((7, 2, 6, 5), (5, 2, 4, 3)))):
        raw, lens = padded(enc_lengths, F, pad=float("nan"), seed=i)
        targets, tlens = padded(target_lengths, F, pad=1e30, seed=10 + i)
        raw.requires_grad_(True)
        got, want = compiled(raw, lens, targets, tlens), fn(raw, lens, targets, tlens)
        grads_got = torch.autograd.grad(sum(g.sum() for g in got), [raw, weight])
        grads_want = torch.autograd.grad(sum(w.sum() for w in want), [raw, weight])
        assert_same(list(got) + [g.nan_to_num(0.0) for g in grads_got],
                    list(want) + [g.nan_to_num(0.0) for g in grads_want], rtol=1e-4, atol=1e-4, what=f"batch {i}")
    assert compiled.graphs <= 2, compiled.graphs  # the first batch's, then one dynamic graph (as dt.scan's)
    torch._dynamo.reset()


DEMO = os.environ.get("RETURNN_DEMO_RF_PT")


def _bench_module():
    """bench/rf_demo_bench.py (the demo loaded through dimtorch.rf, its step compiled: CompiledRfSide)."""
    path = Path(__file__).resolve().parents[2] / "bench" / "rf_demo_bench.py"
    spec = importlib.util.spec_from_file_location("rf_demo_bench", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("rf_demo_bench", mod)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow  # four compiles of the whole step (aot_eager): ~4-6.5 min on 2 cores at load 2-4
@pytest.mark.allow_leaks  # the demo's module-level declared dims and extern data stay bound to the last batch
@pytest.mark.skipif(not DEMO or not os.path.exists(DEMO),
                    reason="set RETURNN_DEMO_RF_PT to RETURNN's demos/demo-rf-pt-benchmark.py")
def test_returnn_demo_training_step_compiles_to_few_graphs_over_50_batches():
    """RETURNN's demo-rf-pt-benchmark.py AED training step (Conformer, SpecAugment, the ZoneoutLSTM decoder's
    rf.scan over the targets, label-smoothed packed CE) through dimtorch.rf under torch.compile(fullgraph,
    dynamic), trained for 50 steps on batches of random sizes (2-24 sequences, crossing torch's CPU conv backend
    change at 16; one sequence would be torch's own 0/1 specialisation) and lengths (encoder lengths 1 and 2
    after the 6x subsampling, target lengths 1-3): a bounded
    number of graphs (at most 4); the loss and the gradients equal eager's (same weights,
    same random draws) on two of the batches."""
    bench = _bench_module()
    side = bench.CompiledRfSide(DEMO, config="micro", dec_dims="16,32,32", seed=1, backend="aot_eager")
    rng = numpy.random.RandomState(5)
    params = [p for p in side.pt_model.parameters()]
    graphs_at = []
    for step in range(50):
        batch = bench.make_batch(rng, int(rng.randint(2, 25)))
        if step in (20, 45):  # compiled vs eager at the same weights and random state
            torch.manual_seed(step)
            got = side.loss(batch, step)
            got_grads = torch.autograd.grad(got, params, allow_unused=True)
            torch.manual_seed(step)
            want = side.loss(batch, step, compiled=False)
            want_grads = torch.autograd.grad(want, params, allow_unused=True)
            assert_same(got.detach(), want.detach(), rtol=1e-5, atol=1e-4, what=f"loss at step {step}")
            for p, g, w in zip(params, got_grads, want_grads):  # (None: no path from the loss; as zeros)
                g = torch.zeros_like(p) if g is None else g
                w = torch.zeros_like(p) if w is None else w
                assert_same(g, w, rtol=1e-4, atol=1e-5, what=f"gradient at step {step}")
        side.train_step(batch, step)
        graphs_at.append(side.compiles)
    # 4 graphs (seeded batches; measured): the first batch's; the one after the first step filled the declared input
    # time dim's dim-math cache (ceildiv of it, made in the first trace, cached on the declared dim); and two that
    # torch still adds where a size is 1 although sizes are size-oblivious: the encoder's 1 frame (torch's matmul
    # decomposition for the attention scores guards on the 6x-subsampled length != 1) and the targets' 1 frame (the
    # packed CE: its fold, or its backward's). Neither the step number, duck sizing, the conv backend at 16
    # sequences, the linear layers' folds nor shift_right add one any more.
    assert graphs_at[-1] <= 4, graphs_at
    del side
    sys.modules.pop("rf_demo_bench", None)
    torch._dynamo.reset()
