"""In-graph forward paths of dt.nn layers (attention, Conformer, decoder, LSTM) against their eager forms.

Under force_in_graph the layers build their masks and positional encodings in the graph from the
lengths (no per-module mask cache, no narrowing to host max lengths), and the LSTM runs without
packing; results, gradients and final states must equal the eager ones on valid frames.
"""
import contextlib
import copy

import pytest
import torch

import dimtorch as dt
from dimtorch._core import tracing as _tracing
from in_graph_helpers import check_alone_in_graph, check_in_graph, padded_env, run_meta_in_graph, with_order

TOL = dict(atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("order", [(0, 1, 2), (1, 0, 2)])
@pytest.mark.parametrize("training", [False, True])
def test_conformer_encoder(order, training):
    torch.manual_seed(0)
    env = with_order(padded_env((9, 5, 0, 3), extra_time=2, feature=8), "x", order)
    enc = dt.nn.ConformerEncoder(env["feature"], dt.Dim(8, name="model"), num_layers=2, num_heads=2,
                                 conv_kernel_size=3, dropout=0.0, att_dropout=0.0)
    enc.train(training)
    fn = lambda e: enc(e["x"], in_spatial_dim=e["time"])  # noqa: E731
    check_in_graph(fn, env, **TOL)
    if not training:  # batch norm statistics in training are over the batch
        check_alone_in_graph(fn, env, **TOL)


@pytest.mark.parametrize("pos_emb", ["sinusoidal", "learned"])
def test_rel_pos_self_attention(pos_emb):
    torch.manual_seed(1)
    env = padded_env((9, 5, 0, 3), extra_time=0, feature=8)  # eagerly, attention takes raws of the max length
    f = env["feature"]
    att = dt.nn.RelPosSelfAttention(f, f, key_dim_total=f, value_dim_total=f, num_heads=2, att_dropout=0.0,
                                    pos_emb=pos_emb, clipping=3)
    fn = lambda e: att(e["x"], axis=e["time"])  # noqa: E731
    check_in_graph(fn, env, **TOL)
    check_alone_in_graph(fn, env, **TOL)
    meta = copy.deepcopy(att).to("meta")
    run_meta_in_graph(lambda e: meta(e["x"], axis=e["time"]), env)


def test_self_and_cross_attention_and_decoder():
    torch.manual_seed(2)
    env = padded_env((9, 5, 0, 3), extra_time=0, feature=8)  # eagerly, attention takes raws of the max length
    f, b = env["feature"], env["batch"]
    att = dt.nn.SelfAttention(f, f, key_dim_total=f, value_dim_total=f, num_heads=2, att_dropout=0.0)
    check_in_graph(lambda e: att(e["x"], axis=e["time"]), env, **TOL)
    vocab = dt.Dim(6, name="vocab")
    dec = dt.nn.TransformerDecoder(f, vocab, dt.Dim(8, name="model"), num_layers=2, num_heads=2, dropout=0.0,
                                   att_dropout=0.0)
    env["labels_time"] = lt = dt.Dim(dt.Tensor(torch.tensor([4, 1, 2, 0]), (b,)), name="labels_time")
    env["labels"] = dt.Tensor(torch.randint(0, 6, (4, 4)), (b, lt), sparse_dim=vocab)
    fn = lambda e: dec(e["labels"], spatial_dim=e["labels_time"], encoder=e["x"],  # noqa: E731
                       enc_spatial_dim=e["time"])[0]
    check_in_graph(fn, env, **TOL)
    check_alone_in_graph(fn, env, **TOL)


@pytest.mark.parametrize("num_layers,bidirectional", [(1, False), (2, True), (3, False), (1, True)])
@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0)])
def test_lstm_without_packing(num_layers, bidirectional, order):
    torch.manual_seed(3)
    env = with_order(padded_env((5, 3, 0, 2), extra_time=2, feature=3), "x", order)
    out = dt.Dim(4, name="hidden")
    lstm = dt.nn.LSTM(env["feature"], out, num_layers=num_layers, bidirectional=bidirectional)

    def fn(e):
        y, state = lstm(e["x"], spatial_dim=e["time"], state=e.get("state"))
        return y, state.h, state.c

    check_in_graph(fn, env, **TOL)
    check_alone_in_graph(fn, env, **TOL)
    # A given initial state: a length-0 sequence keeps it.
    dims = lstm.state_dims + (env["batch"], out)
    shape = [d.size for d in lstm.state_dims] + [4, 4]
    env["state"] = dt.nn.LstmState(dt.Tensor(torch.randn(shape), dims), dt.Tensor(torch.randn(shape), dims))
    check_in_graph(fn, env, **TOL)
    meta = copy.deepcopy(lstm).to("meta")
    run_meta_in_graph(lambda e: (lambda y, s: (y, s.h, s.c))(*meta(e["x"], spatial_dim=e["time"])),
                      {k: v for k, v in env.items() if k != "state"})


def test_lstm_parameter_gradients_in_graph():
    torch.manual_seed(4)
    env = padded_env((5, 3, 0, 2), extra_time=2, feature=3)
    lstm = dt.nn.LSTM(env["feature"], dt.Dim(4, name="hidden"), num_layers=2, bidirectional=True)
    grads = []
    for in_graph in (False, True):
        lstm.zero_grad()
        with _tracing.force_in_graph() if in_graph else contextlib.nullcontext():
            y, state = lstm(env["x"], spatial_dim=env["time"])
        valid = torch.arange(7) < torch.tensor([5, 3, 0, 2])[:, None]
        (torch.where(valid[..., None], y.raw, 0).sum() + state.h.raw.sum() + state.c.raw.pow(2).sum()).backward()
        grads.append([p.grad.clone() for p in lstm.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a, **TOL)
