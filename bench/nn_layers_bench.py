"""Benchmark of dt.nn layers vs hand-written PyTorch: SelfAttention, one ConformerEncoderLayer (fwd, fwd+bwd).

Prints `op  torch_us  dimtorch_us  ratio` (median of interleaved per-round ratios, one process, one thread).
The torch side of the Conformer layer is demo/reference_model.py's ConformerEncoderLayer with the same
weights (its key mask is made per call, as its training step does); the torch side of SelfAttention is the
same SDPA computation written by hand. Run: `python bench/nn_layers_bench.py [--rounds N]`.
"""
from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import dimtorch as dt

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from demo.reference_model import ConformerEncoderLayer as RefLayer, ModelConfig, sequence_mask  # noqa: E402


def conformer_layer(b, t, d, h, ff, k):
    cfg = ModelConfig(model_dim=d, num_heads=h, ff_dim=ff, conv_kernel_size=k, dropout=0.0, att_dropout=0.0)
    torch.manual_seed(0)
    ref = RefLayer(cfg)
    model = dt.Dim(d, name="model")
    ours = dt.nn.ConformerEncoderLayer(model, ff_dim=dt.Dim(ff, name="ff"), num_heads=h, conv_kernel_size=k,
                                       dropout=0.0, att_dropout=0.0)
    ours.load_state_dict(dt.nn.torch_state_dict_to_dimtorch(ours, ref.state_dict()))
    lengths = torch.tensor([max(1, t - 3 * i) for i in range(b)])
    batch = dt.Dim(None, name="batch")
    time_dim = dt.Dim(dt.Tensor(lengths, (batch,)), name="time")
    x_ref = torch.randn(b, t, d, requires_grad=True)
    x_dt = dt.Tensor(x_ref.detach().clone().requires_grad_(True), (batch, time_dim, model))

    def f_torch(backward):
        y = ref(x_ref, sequence_mask(lengths, t, x_ref.device))
        if backward:
            y.sum().backward()
        return y

    def f_dt(backward):
        y = ours(x_dt, spatial_dim=time_dim).raw
        if backward:
            y.sum().backward()
        return y

    mask = sequence_mask(lengths, t, "cpu")
    torch.testing.assert_close(f_dt(False)[mask], f_torch(False)[mask], rtol=1e-5, atol=1e-5)
    return f_torch, f_dt


def self_attention(b, t, d, h):
    batch = dt.Dim(None, name="batch")
    lengths = torch.tensor([max(1, t - 3 * i) for i in range(b)])
    time_dim = dt.Dim(dt.Tensor(lengths, (batch,)), name="time")
    feat = dt.Dim(d, name="feature")
    att = dt.nn.SelfAttention(feat, feat, key_dim_total=dt.Dim(d, name="key"), value_dim_total=dt.Dim(d, name="value"),
                              num_heads=h, att_dropout=0.0)
    x = torch.randn(b, t, d, requires_grad=True)
    x_dt = dt.Tensor(x, (batch, time_dim, feat))
    wq, bq, wo, bo = att.qkv.weight.raw, att.qkv.bias.raw, att.proj.weight.raw, att.proj.bias.raw
    dh = d // h

    def f_torch(backward):
        mask = sequence_mask(lengths, t, x.device)
        qkv = torch.where(mask[:, :, None], F.linear(x, wq, bq), 0.0).view(b, t, h, 3 * dh).transpose(1, 2)
        q, k, v = qkv.split(dh, dim=-1)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
        y = F.linear(o.transpose(1, 2).reshape(b, t, d), wo, bo)
        if backward:
            y.sum().backward()
        return y

    def f_dt(backward):
        y = att(x_dt, axis=time_dim).raw
        if backward:
            y.sum().backward()
        return y

    torch.testing.assert_close(f_dt(False), f_torch(False))
    return f_torch, f_dt


def measure(f_torch, f_dt, backward, rounds, n=20):
    def timed(f):
        t0 = time.perf_counter()
        for _ in range(n):
            f(backward)
        return (time.perf_counter() - t0) / n * 1e6

    for _ in range(3):
        f_torch(backward), f_dt(backward)
    ts, ds = [], []
    for r in range(rounds):  # interleaved, alternating which goes first
        if r % 2:
            ts.append(timed(f_torch))
            ds.append(timed(f_dt))
        else:
            ds.append(timed(f_dt))
            ts.append(timed(f_torch))
    return statistics.median(ts), statistics.median(ds), statistics.median(d / t for t, d in zip(ts, ds))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    cases = [
        ("SelfAttention B3 T20 D16 H4", self_attention(3, 20, 16, 4)),
        ("ConformerEncoderLayer B3 T20 D16 H4 FF32 K5", conformer_layer(3, 20, 16, 4, 32, 5)),
        ("ConformerEncoderLayer B8 T50 D96 H4 FF384 K15", conformer_layer(8, 50, 96, 4, 384, 15)),
    ]
    print(f"{'op':58s} {'torch_us':>10s} {'dimtorch_us':>12s} {'ratio':>7s}")
    for name, (f_torch, f_dt) in cases:
        for backward in (False, True):
            t, d, ratio = measure(f_torch, f_dt, backward, args.rounds)
            print(f"{name + (' fwd+bwd' if backward else ' fwd'):58s} {t:10.1f} {d:12.1f} {ratio:7.3f}")


if __name__ == "__main__":
    main()
