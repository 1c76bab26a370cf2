"""torch.compile(fullgraph=True) of dimtorch code: every dt.nn layer and a sample of ops from each family,
forward and backward, against eager on padded batches (NaN/1e30 padding); graph and recompile counts.

Each case is a function of raws (the batch's features and host lengths), as a compiled training step
is: it makes its dims from the lengths inside the graph, so lengths are graph inputs and a new batch
with other lengths reuses the graph. Outputs are compared with the padding set to 0 (copy_masked),
since what padding holds is not specified."""
from __future__ import annotations

import copy

import pytest
import torch

import dimtorch as dt
from compile_helpers import Compiled, assert_same, grads, padded

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
    _check(case, LAYERS[case], pad=1e30 if case in ("BatchNorm",) else float("nan"))


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


# ---- ops, a sample of each family -------------------------------------------------------------

def _op(call, batches=BATCHES):
    def make(d: Dims):
        return _layer(d, None, lambda _, x, b, t: call(d, x, b, t))
    make.batches = batches
    return make


OPS = {
    "elementwise": _op(lambda d, x, b, t: [_masked(dt.where(x > 0.0, x * 2.0 + 1.0, -x), b, t, d.feat)]),
    "reduce masked": _op(lambda d, x, b, t: [dt.reduce_mean(x, axis=t).raw, dt.reduce_max(x, axis=t).raw,
                                          dt.reduce_logsumexp(x, axis=t).raw, dt.reduce_sum(x, axis=(t, d.feat)).raw]),
    "argmax": _op(lambda d, x, b, t: [dt.reduce_argmax(x, axis=t).raw.float()]),
    "softmax masked": _op(lambda d, x, b, t: [_masked(dt.softmax(x, axis=t), b, t, d.feat),
                                           _masked(dt.log_softmax(x, axis=t), b, t, d.feat)]),
    "matmul": _op(lambda d, x, b, t: [dt.matmul(x.copy_masked(0.0), x.copy_masked(0.0), reduce=t).raw]),
    "moments": _op(lambda d, x, b, t: list(r.raw for r in dt.moments(x, axis=(b, t)))),
    "concat": _op(lambda d, x, b, t: [_masked(y, b, od, d.feat) for y, od in [dt.concat((x, t), (x * 2.0, t))]]),
    "pad": _op(lambda d, x, b, t: [_masked(y, b, od, d.feat) for y, (od,) in [dt.pad(x, axes=t, padding=(2, 1), value=0.5)]]),
    "pad reflect": _op(lambda d, x, b, t: [_masked(y, b, od, d.feat) for y, (od,) in
                                        [dt.pad(x.copy_masked(0.0), axes=t, padding=(0, 1), mode="replicate")]],
                       batches=[(5, 3, 1), (4, 5, 2)]),
    "slice": _op(lambda d, x, b, t: [_masked(y, b, od, d.feat) for y, od in [dt.slice(x, axis=t, start=1)]]),
    "shift_right": _op(lambda d, x, b, t: [_masked(dt.shift_right(x, axis=t, amount=1), b, t, d.feat)]),
    "reverse_sequence": _op(lambda d, x, b, t: [_masked(dt.reverse_sequence(x, axis=t), b, t, d.feat)]),
    "gather": _op(lambda d, x, b, t: [_masked(dt.gather(x, indices=dt.reduce_argmax(x, axis=d.feat), axis=d.feat), b, t)]),
    "conv+pool": _op(lambda d, x, b, t: [_masked(y, b, od, d.feat) for y, (od,) in
                                      [dt.pool(x, mode="max", pool_size=2, strides=2, padding="same",
                                               in_spatial_dims=[t])]]),
    "top_k": _op(lambda d, x, b, t: [v.raw_aligned((b, k, d.feat)) for v, _, k in [dt.top_k(x.copy_masked(0.0), axis=t, k=1)]]),
    "cumsum": _op(lambda d, x, b, t: [_masked(dt.cumsum(x, axis=t), b, t, d.feat)]),
    "split/merge": _op(lambda d, x, b, t: [_masked(y, b, t, m) for y, m in [dt.merge_dims(
        dt.split_dims(x, axis=d.feat, dims=(d.half_a, d.half_b)), dims=(d.half_a, d.half_b))]]),
    "cross_entropy": _op(lambda d, x, b, t: [_masked(dt.cross_entropy(
        estimated=x, target=dt.Tensor(torch.zeros_like(x.raw[..., 0], dtype=torch.long), x.dims[:2],
                                      sparse_dim=d.feat), axis=d.feat), b, t)]),
}


@pytest.mark.parametrize("case", OPS)
def test_op_compiles_to_one_graph(case):
    _check(case, OPS[case], batches=OPS[case].batches, rtol=1e-4, atol=1e-4)


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
    compiled = Compiled(fn)
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
