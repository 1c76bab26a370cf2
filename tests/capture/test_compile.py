"""torch.compile(fullgraph=True) of dimtorch code: every dt.nn layer, forward and backward, against eager on padded
batches (NaN/1e30 padding), graph and recompile counts; and every op of the op table (compile_cases.py) in
symbolic make_fx (by default), torch.export and torch.compile (marked slow).

Each case is a function of raws (the batch's features and host lengths), as a compiled training step
is: it makes its dims from the lengths inside the graph, so lengths are graph inputs and a new batch
with other lengths reuses the graph. Outputs are compared with the padding set to 0 (copy_masked),
since what padding holds is not specified."""
from __future__ import annotations

import copy

import pytest
import torch

from torch.fx.experimental.proxy_tensor import make_fx

import compile_cases
import dimtorch as dt
from compile_helpers import (OP_BATCHES, Compiled, assert_same, canonical, differs, grads, op_inputs, padded,
                             weighted_grad)
from dimtorch._op_table import OPS as OPS_TABLE

F = 4
BATCHES = [(5, 3, 0), (4, 5, 2), (5, 1, 5)]  # the same padded size (5): one graph for all


def _run(raw, lengths, module, fn):
    torch.manual_seed(0)  # dropout draws the same numbers eager and compiled (aot_eager: torch's own ops)
    raw = raw.clone().requires_grad_(True)
    outs = fn(module, raw, lengths)
    params = [p for p in module.parameters() if p.requires_grad] if module is not None else []
    g = grads(outs, [raw, *params])
    buffers = [b.detach().clone() for b in module.buffers()] if module is not None else []
    return [o.detach() for o in outs], g, buffers


def _check(case: str, make, batches=BATCHES, pad=float("nan"), max_graphs=1, rtol=1e-5, atol=1e-5):
    """make(dims) -> (module or None, fn(module, raw, lengths) -> raws). The compiled side runs a deep
    copy of the module, so that state (batch norm's running statistics) evolves on each side alike."""
    module, fn = make(Dims())
    twin = copy.deepcopy(module)
    compiled = Compiled(lambda raw, lengths: fn(twin, raw, lengths))
    for i, lengths in enumerate(batches):
        raw, lens = padded(lengths, F, pad=pad, seed=i)
        want = _run(raw, lens, module, fn)
        got = _run(raw, lens, twin, lambda m, r, ln: compiled(r, ln))
        for part, what in zip(range(3), ("outputs", "gradients", "buffers")):
            assert_same(got[part], want[part], rtol=rtol, atol=atol, what=f"{case} {what}, batch {i}")
    assert compiled.graphs <= max_graphs, f"{case}: {compiled.graphs} graphs"
    torch._dynamo.reset()  # the compiled code holds the dims of its guards


def _masked(y: dt.Tensor, *dims) -> torch.Tensor:
    return y.copy_masked(0.0).raw_aligned(dims)


class Dims:
    """The static dims of one test (made per test: dims cache what is derived from them)."""

    def __init__(self):
        self.feat = dt.Dim(F, name="feature")
        self.out = dt.Dim(6, name="out")
        self.key, self.value = dt.Dim(8, name="key"), dt.Dim(6, name="value")
        self.half_a, self.half_b = dt.Dim(2, name="a"), dt.Dim(2, name="b")


def _layer(d: Dims, module, call):
    """(module, fn(module, raw, lengths) -> raws): the layer applied to the batch made from the raws."""
    def fn(m, raw, lengths):
        batch = dt.Dim(None, name="batch")
        time = dt.Dim(dt.Tensor(lengths, dims=(batch,)), name="time")
        x = dt.Tensor(raw, dims=(batch, time, d.feat), feature_dim=d.feat)
        return call(m, x, batch, time)
    return module, fn


def _out(y, batch, time, dim):
    return [_masked(y, batch, time, dim)]


def _att_kw(d: Dims):
    return dict(key_dim_total=d.key, value_dim_total=d.value, num_heads=2, att_dropout=0.0)


def _cross(d: Dims):
    def call(m, x, b, t):
        """x attends to itself read over another dim (the encoder's own time, lengths reversed)."""
        enc_time = dt.Dim(dt.Tensor(t.lengths.raw.flip(0), dims=(b,)), name="enc_time")
        enc = dt.Tensor(x.raw.flip(0), dims=(b, enc_time, d.feat))
        return _out(m(x, enc, axis=t, enc_axis=enc_time), b, t, d.out)
    return call


LAYERS = {
    "Linear": lambda d: _layer(d, dt.nn.Linear(d.feat, d.out), lambda m, x, b, t: _out(m(x), b, t, d.out)),
    "LayerNorm": lambda d: _layer(d, dt.nn.LayerNorm(d.feat), lambda m, x, b, t: _out(m(x), b, t, d.feat)),
    "RMSNorm": lambda d: _layer(d, dt.nn.RMSNorm(d.feat), lambda m, x, b, t: _out(m(x), b, t, d.feat)),
    "BatchNorm": lambda d: _layer(d, dt.nn.BatchNorm(d.feat), lambda m, x, b, t: _out(m(x), b, t, d.feat)),
    "Dropout": lambda d: _layer(d, dt.nn.Dropout(0.3), lambda m, x, b, t: _out(m(x), b, t, d.feat)),
    "Dropout(axis)": lambda d: _layer(d, dt.nn.Dropout(0.3, axis=d.feat), lambda m, x, b, t: _out(m(x), b, t, d.feat)),
    "FeedForward": lambda d: _layer(d, dt.nn.FeedForward(d.feat, dt.Dim(8, name="ff"), dropout=0.0),
                                  lambda m, x, b, t: _out(m(x), b, t, d.feat)),
    "Conv1d same": lambda d: _layer(d, dt.nn.Conv1d(d.feat, d.out, 3, padding="same"),
                                  lambda m, x, b, t: _out(m(x, in_spatial_dim=t)[0], b, t, d.out)),
    "Conv1d strided": lambda d: _layer(d, 
        dt.nn.Conv1d(d.feat, d.out, 3, strides=2, padding="valid"),
        lambda m, x, b, t: [_masked(y, b, od, d.out) for y, od in [m(x, in_spatial_dim=t)]]),
    "TransposedConv1d": lambda d: _layer(d, 
        dt.nn.TransposedConv1d(d.feat, d.out, 3, strides=2),
        lambda m, x, b, t: [_masked(y, b, od, d.out) for y, od in [m(x, in_spatial_dim=t)]]),
    "LSTM": lambda d: _layer(d, dt.nn.LSTM(d.feat, d.out),
                           lambda m, x, b, t: _out(m(x, spatial_dim=t)[0], b, t, d.out)),
    "LSTM bidirectional 2 layers": lambda d: _layer(d, 
        dt.nn.LSTM(d.feat, d.out, num_layers=2, bidirectional=True),
        lambda m, x, b, t: [_masked(y, b, t, y.dims[-1]) for y in [m(x, spatial_dim=t)[0]]]),
    "ZoneoutLSTM": lambda d: _layer(d, dt.nn.ZoneoutLSTM(d.feat, d.out, zoneout_factor_cell=0.2).eval(),
                                  lambda m, x, b, t: _out(m(x, spatial_dim=t)[0], b, t, d.out)),
    "ZoneoutLSTM training": lambda d: _layer(d, 
        dt.nn.ZoneoutLSTM(d.feat, d.out, zoneout_factor_cell=0.2, zoneout_factor_output=0.1),
        lambda m, x, b, t: [[*_out(y, b, t, d.out), s.c.raw] for y, s in [m(x, spatial_dim=t)]][0]),
    "SelfAttention": lambda d: _layer(d, dt.nn.SelfAttention(d.feat, d.out, **_att_kw(d)),
                                    lambda m, x, b, t: _out(m(x, axis=t), b, t, d.out)),
    "CausalSelfAttention": lambda d: _layer(d, dt.nn.CausalSelfAttention(d.feat, d.out, **_att_kw(d)),
                                          lambda m, x, b, t: _out(m(x, axis=t)[0], b, t, d.out)),
    "RelPosSelfAttention": lambda d: _layer(d, dt.nn.RelPosSelfAttention(d.feat, d.out, **_att_kw(d)),
                                          lambda m, x, b, t: _out(m(x, axis=t), b, t, d.out)),
    "RotaryPosSelfAttention": lambda d: _layer(d, dt.nn.RotaryPosSelfAttention(d.feat, d.out, **_att_kw(d)),
                                             lambda m, x, b, t: _out(m(x, axis=t), b, t, d.out)),
    "CrossAttention": lambda d: _layer(d, dt.nn.CrossAttention(d.feat, d.feat, d.out, **_att_kw(d)), _cross(d)),
    "ConformerConvSubsample": lambda d: _layer(d, 
        dt.nn.ConformerConvSubsample(d.feat, [dt.Dim(3, name="c1"), dt.Dim(3, name="c2")], strides=[(2, 1), (2, 1)]),
        lambda m, x, b, t: [_masked(y, b, od, y.dims[-1]) for y, od in [m(x, in_spatial_dim=t)]]),
    "ConformerEncoderLayer": lambda d: _layer(d, 
        dt.nn.ConformerEncoderLayer(d.feat, num_heads=2, conv_kernel_size=3, dropout=0.0, att_dropout=0.0),
        lambda m, x, b, t: _out(m(x, spatial_dim=t), b, t, d.feat)),
    "ConformerEncoder": lambda d: _layer(d, 
        # one layer: a second repeats the first's graph (the layer itself: "ConformerEncoderLayer")
        dt.nn.ConformerEncoder(d.feat, dt.Dim(8, name="model"), num_layers=1, num_heads=2, conv_kernel_size=3,
                               dropout=0.0, att_dropout=0.0),
        lambda m, x, b, t: [_masked(y, b, od, y.dims[-1]) for y, od in [m(x, in_spatial_dim=t)]]),
}


# The layers whose graphs take longest to capture (5-15 s of CPU each): the slow group.
SLOW_LAYERS = ("LSTM bidirectional 2 layers", "ConformerEncoderLayer", "ConformerEncoder")


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_LAYERS else c for c in LAYERS])
def test_layer_compiles_to_one_graph(case):
    torch.manual_seed(0)
    # The Conformer's 2-D conv front end runs as dimtorch::convolution in the graph (contiguous output where
    # eager's kernel keeps channels-last): its filter gradients sum in another order, ~2e-5 apart.
    tol = 5e-5 if case == "ConformerEncoder" else 1e-5
    _check(case, LAYERS[case], pad=1e30 if case in ("BatchNorm",) else float("nan"), rtol=tol, atol=tol)


@pytest.mark.slow
def test_layer_compiles_with_huge_padding():
    # Layers that mix frames (a per-frame layer such as Linear cannot move padding into valid frames: its
    # NaN-padded case in test_layer_compiles_to_one_graph says all there is).
    for case in ("SelfAttention", "ConformerEncoderLayer"):
        torch.manual_seed(0)
        _check(case, LAYERS[case], pad=1e30)


@pytest.mark.slow
def test_embedding_and_decoder():
    vocab, model, feat = dt.Dim(7, name="vocab"), dt.Dim(8, name="model"), dt.Dim(F, name="feature")
    torch.manual_seed(0)
    emb = dt.nn.Embedding(vocab, model)
    dec = dt.nn.TransformerDecoder(feat, vocab, model, num_layers=1, ff_dim=dt.Dim(8, name="ff"), num_heads=2,
                                   dropout=0.0, att_dropout=0.0)
    both = torch.nn.ModuleList([emb, dec])

    def fn(m, raw, lengths):
        emb, dec = m
        batch = dt.Dim(None, name="batch")
        time = dt.Dim(dt.Tensor(lengths, dims=(batch,)), name="time")
        enc_time = dt.Dim(dt.Tensor(lengths.flip(0), dims=(batch,)), name="enc_time")
        enc = dt.Tensor(raw.flip(0), dims=(batch, enc_time, feat))
        labels = dt.Tensor((raw[..., 0].nan_to_num(0.0).abs() * 3).long() % 7, dims=(batch, time), sparse_dim=vocab)
        logits, _ = dec(labels, spatial_dim=time, encoder=enc, enc_spatial_dim=enc_time)
        return [_masked(emb(labels), batch, time, model), _masked(logits, batch, time, vocab)]
    _check("Embedding+TransformerDecoder", lambda _: (both, fn))


@pytest.mark.slow
def test_frame_loops_compile_once_for_every_length():
    """Layers that loop over frames (ZoneoutLSTM) run them as one torch scan while traced: the padded
    length stays symbolic, so batches of new padded lengths reuse the dynamic graph (a Python loop
    would be unrolled: a graph per length). Outputs, final state and gradients equal eager's."""
    batches = [(5, 3, 0), (4, 7, 2), (9, 1, 6), (2, 3, 3), (11, 11, 4)]
    _check("ZoneoutLSTM lengths", LAYERS["ZoneoutLSTM training"], batches=batches, max_graphs=2)


# ---- every op of the op table, in torch.compile, torch.export and make_fx ---------------------------------
#
# Each case of compile_cases.py (one per row of the op table, and variants) is a function of raws made
# into the batch's dims inside the traced function. Cases are traced a group of families at a time (one
# traced function returning every output of the group: a trace costs seconds), forward and backward, on a
# batch with NaN padding, then run on a batch of other sizes (B, T, S) with 1e30 padding; outputs (padding
# set to 0) and the gradient w.r.t. the features equal eager's. torch.compile: fullgraph, dynamic, no
# recompile on the second batch. A group that fails is traced again case by case to name the cases.

_GROUPS = {  # group -> the families (modules of dimtorch.ops) whose cases it traces together
    "elementwise": ("elementwise",),
    "reduce, matmul, norms": ("reduce", "matmul", "normalization", "reduce_out", "normalize", "gating", "safe_log"),
    "shape and arrays": ("pad", "concat", "gather", "shape", "slicing", "stack", "sort", "reshape", "dim",
                         "slice_update", "complex", "window"),
    "packing, scatter, masked": ("packing", "scatter", "masked", "masked_nested", "repeat", "nested"),
    "creation, masks, ranges": ("creation", "mask", "dim_ranges", "shape_counts", "positional", "sampling",
                                "dropout"),
    "conv, pool, signal": ("conv", "pool", "conv_args", "signal", "attention"),
    "losses, CTC, decoding": ("loss", "label_smoothing", "gradient", "ctc_align", "decoding", "assert_"),
    "loops": ("loop",),
}
_SCENARIO_GROUPS = {  # variants and scenarios beyond the table -> group
    "scatter into a dynamic dim": "packing, scatter, masked", "pack_padded per row (dims=(time,))":
    "packing, scatter, masked", "unpack_padded per row": "packing, scatter, masked", "masked_select per row":
    "packing, scatter, masked", "repeat with max_len_factor": "packing, scatter, masked",
    "ctc_durations_from_path without targets_spatial_dim": "losses, CTC, decoding",
    "conv strided (valid)": "conv, pool, signal", "get_mask": "creation, masks, ranges",
    "zeros over (batch, time, heads)": "creation, masks, ranges",
    "random_uniform over (batch, time)": "creation, masks, ranges", "ranges over time and time - 1":
    "creation, masks, ranges",
}
# torch's own limits, per tracer: these cases are traced forward only there (outputs detached).
_FORWARD_ONLY = {
    "make_fx": {"scan": "torch 2.13: the backward of a torch scan under symbolic make_fx mixes fake modes"},
}


def _family(op_name: str) -> str:
    return OPS_TABLE[op_name].definition.__module__.rsplit(".", 1)[1]


def _cases_of(group: str) -> dict:
    cases = {n: c for n, c in compile_cases.CASES.items() if _family(n) in _GROUPS[group]}
    cases.update({n: compile_cases.SCENARIOS[n] for n, g in _SCENARIO_GROUPS.items() if g == group})
    return cases


def test_every_op_of_the_op_table_has_a_traced_case():
    """A new op cannot land without a case here (and its family in a group)."""
    assert set(OPS_TABLE) <= set(compile_cases.CASES), sorted(set(OPS_TABLE) - set(compile_cases.CASES))
    grouped = {f for families in _GROUPS.values() for f in families}
    assert {_family(n) for n in OPS_TABLE} <= grouped, sorted({_family(n) for n in OPS_TABLE} - grouped)
    assert set(_SCENARIO_GROUPS) == set(compile_cases.SCENARIOS)


def _traced_fn(cases: dict, static, forward_only=()):
    def fn(raw, lengths, labels, label_lengths):
        e = compile_cases.E(raw, lengths, labels, label_lengths, static)
        no_grad = compile_cases.E(raw.detach(), lengths, labels, label_lengths, static) if forward_only else None
        return tuple(r for name, case in cases.items()
                     for r in (canonical(case(no_grad)) if name in forward_only else canonical(case(e))))
    return fn


def _eager(fn, batch):
    torch.manual_seed(0)  # random ops draw the same numbers in eager and in the graphs (torch's generator)
    raw = batch[0].clone().requires_grad_(True)
    outs = fn(raw, *batch[1:])
    return [o.detach() for o in outs], weighted_grad(outs, raw)


def _compare_runs(call, fn, batches) -> list:
    """call(raw, *rest) -> (outputs, gradient or None) per batch, against eager; the differences found."""
    notes = []
    for k, batch in enumerate(batches):
        want, want_grad = _eager(fn, batch)
        torch.manual_seed(0)
        got, got_grad = call(batch)
        notes.append(differs(got, want, f"batch {k} outputs"))
        if want_grad is not None:
            notes.append(differs([got_grad], [want_grad], f"batch {k} gradient"))
    return [n for n in notes if n]


def _with_grad(call):
    def run(batch):
        raw = batch[0].clone().requires_grad_(True)
        outs = call(raw, *batch[1:])
        return [o.detach() for o in outs], weighted_grad(outs, raw)
    return run


def _via_compile(fn, batches) -> list:
    # Backend eager: what torch.compile adds over make_fx and export is Dynamo's capture (one graph, no
    # recompile); AOTAutograd's trace of the same torch ops is what make_fx symbolic checks for every case
    # (forward and backward). The layers and the demo's step keep aot_eager and inductor.
    compiled = Compiled(fn, backend="eager", dynamic=True)
    notes = _compare_runs(_with_grad(compiled), fn, batches[:1])
    with torch._dynamo.config.patch(error_on_recompile=True):  # the second batch reuses the graph
        notes += _compare_runs(_with_grad(compiled), fn, batches[1:])
    return notes


def _via_export(fn, batches) -> list:
    class Step(torch.nn.Module):
        def forward(self, raw, lengths, labels, label_lengths):
            return fn(raw, lengths, labels, label_lengths)
    b, t, s = torch.export.Dim("B", min=2, max=64), torch.export.Dim("T", min=5, max=512), \
        torch.export.Dim("S", min=3, max=256)  # (T from 5: a strided conv's T - 2 would be specialized at 1)
    shapes = {"raw": {0: b, 1: t}, "lengths": {0: b}, "labels": {0: b, 1: s}, "label_lengths": {0: b}}
    torch.manual_seed(0)
    program = torch.export.export(Step(), batches[0][:4], dynamic_shapes=shapes, strict=False)
    return _compare_runs(_with_grad(program.module()), fn, batches)


def _via_make_fx(fn, batches) -> list:
    def forward_backward(raw, lengths, labels, label_lengths):
        raw = raw.detach().requires_grad_(True)
        outs = fn(raw, lengths, labels, label_lengths)
        g = weighted_grad(outs, raw)
        return tuple(o.detach() for o in outs) + ((g,) if g is not None else ())

    torch.manual_seed(0)
    graph = make_fx(forward_backward, tracing_mode="symbolic")(*batches[0][:4])
    has_grad = _eager(fn, batches[0])[1] is not None

    def run(batch):
        got = list(graph(*batch[:4]))
        return got[:-1] if has_grad else got, got[-1] if has_grad else None
    return _compare_runs(run, fn, batches)


_TRACERS = {"compile": _via_compile, "export": _via_export, "make_fx": _via_make_fx}


def _check_cases(cases: dict, tracer: str) -> list:
    static = compile_cases.static_dims()
    forward_only = _FORWARD_ONLY.get(tracer, {})
    fn = _traced_fn(cases, static, forward_only)
    batches = [op_inputs(*b[:2], b[2], b[3], compile_cases.F) for b in OP_BATCHES]
    try:
        return _TRACERS[tracer](fn, batches)
    except Exception as e:  # noqa: BLE001 (the test names it)
        return [f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"]
    finally:
        torch._dynamo.reset()  # the compiled code holds the dims of its guards


# make_fx (about 25 s for every op) runs by default; torch.export and torch.compile (about 25 and 50 s)
# are marked slow.
@pytest.mark.parametrize("tracer", [pytest.param(t, marks=() if t == "make_fx" else pytest.mark.slow)
                                    for t in _TRACERS])
@pytest.mark.parametrize("group", list(_GROUPS))
def test_every_op_traces_like_eager(group, tracer):
    """Forward and backward of every case of the group, traced once, equal eager on two batches of other
    sizes (NaN, then 1e30 padding); compile: one graph (no recompile)."""
    cases = _cases_of(group)
    if not _check_cases(cases, tracer):
        return
    failing = {}
    for name, case in cases.items():  # name the cases that fail
        notes = _check_cases({name: case}, tracer)
        if notes:
            failing[name] = notes[0]
    pytest.fail(f"{tracer}, {group}: " + ("; ".join(f"{n}: {m}" for n, m in failing.items()) or
                                          "the group fails, no case alone does"))


def test_ctc_loss_compiles():
    vocab = dt.Dim(F, name="vocab")

    def fn(_, raw, lengths):
        batch = dt.Dim(None, name="batch")
        time = dt.Dim(dt.Tensor(lengths, dims=(batch,)), name="time")
        logits = dt.Tensor(raw, dims=(batch, time, vocab))
        target_time = dt.Dim(dt.Tensor(lengths // 2, dims=(batch,)), name="target_time")
        targets = dt.Tensor(torch.ones(raw.shape[0], raw.shape[1] // 2, dtype=torch.long), dims=(batch, target_time))
        return [dt.ctc_loss(logits=logits, targets=targets, input_spatial_dim=time, targets_spatial_dim=target_time,
                            blank_index=F - 1).raw]
    _check("ctc_loss", lambda _: (None, fn), pad=1e30)


# ---- recompiles over many batches ---------------------------------------------------------------

@pytest.mark.slow
def test_fifty_batches_of_random_lengths():
    """One graph for the first padded size; one more (dynamic sizes) when the padded size changes;
    then every batch (new lengths, batch and padded sizes) reuses it."""
    torch.manual_seed(0)
    feat = dt.Dim(F, name="feature")
    layer = dt.nn.ConformerEncoderLayer(feat, num_heads=2, conv_kernel_size=3, dropout=0.0, att_dropout=0.0)

    def fn(raw, lengths):
        batch = dt.Dim(None, name="batch")
        time = dt.Dim(dt.Tensor(lengths, dims=(batch,)), name="time")
        x = dt.Tensor(raw, dims=(batch, time, feat))
        return dt.reduce_mean(layer(x, spatial_dim=time), axis=time).raw
    # backend eager: Dynamo's guards decide the graphs (AOTAutograd of this layer: test_layer_compiles_to_one_graph)
    compiled = Compiled(fn, backend="eager")
    g = torch.Generator().manual_seed(0)
    for i in range(50):
        n = int(torch.randint(2, 6, (1,), generator=g))
        t = int(torch.randint(3, 12, (1,), generator=g))
        lengths = torch.randint(1, t + 1, (n,), generator=g)
        lengths[0] = t
        raw, _ = padded(lengths.tolist(), F, pad=float("nan"), seed=i)
        assert_same(compiled(raw, lengths), fn(raw, lengths), what=f"batch {i}")
    assert compiled.graphs <= 2, compiled.graphs
    torch._dynamo.reset()
