"""Rows of loops and conditionals: scan over dynamic time (a tanh RNN), while_loop, cond.

The PyTorch side writes the same loop in Python with the same masking (padding of x zeroed once, the
state kept past each sequence's end). rows.py appends these rows to its ROWS: import rows, not this module.
"""
from __future__ import annotations

import torch

import dimtorch as dt

from .row import Row, _rf


def _torch_rnn(s):
    def rnn(x=s.x, w=s.w_fo, m=s.mask3, T=s.T):
        x = torch.where(m, x, 0.0)
        h = x.new_zeros(x.shape[0], w.shape[1])
        ys = []
        for t in range(T):
            new = torch.tanh(torch.matmul(x[:, t], w) + h)
            ys.append(new)
            h = torch.where(m[:, t], new, h)
        return torch.stack(ys)
    return rnn


def _h0(s):
    return s.api.tensor(torch.zeros(s.shapes.batch, s.shapes.out, device=s.device), (s.batch, s.out))


def _dt_rnn(s):
    def rnn(x=s.x, w=s.w_fo, f=s.feature, t=s.time, h0=_h0(s)):
        def body(x_t, h):
            h = dt.tanh(dt.matmul(x_t, w, reduce=f) + h)
            return h, h
        return dt.scan(spatial_dim=t, initial=h0, xs=x, ys=h0, body=body)[0]
    return rnn


def _rf_rnn(s):
    rf = _rf(s)
    from returnn.tensor import Tensor as RfTensor
    template = RfTensor("y", dims=[s.batch, s.out], dtype="float32")

    def rnn(x=s.x, w=s.w_fo, f=s.feature, t=s.time, h0=_h0(s)):
        def body(x_t, h):
            h = rf.tanh(rf.matmul(x_t, w, reduce=f) + h)
            return h, h
        return rf.scan(spatial_dim=t, initial=h0, xs=x, ys=template, body=body)[0]
    return rnn


def _torch_while(s):
    def loop(x=s.x):
        i, v = 0, x
        while i < 5:
            i, v = i + 1, v * 1.5
        return v
    return loop


LOOP_ROWS = (
    Row("scan_rnn", "scan a tanh RNN (h = tanh(x_t W + h)) over dynamic time, ys stacked, state kept after each end",
        out=("time", "batch", "out"), valid_frames="mask_tb1", requires=("scan",), tolerance=1e-4, meta=False,
        torch=lambda s: (setattr(s, "mask_tb1", s.mask3.transpose(0, 1)), _torch_rnn(s))[1],
        dimtorch=_dt_rnn, returnn=_rf_rnn),
    Row("while_loop", "while i < 5: x = x * 1.5 (a Python counter in the loop vars)", out=("batch", "time", "feature"),
        requires=("while_loop",),
        torch=_torch_while,
        dimtorch=lambda s: lambda x=s.x: dt.while_loop(lambda v: v[0] < 5, lambda v: (v[0] + 1, v[1] * 1.5), (0, x))[1],
        returnn=lambda s: lambda x=s.x, rf=_rf(s), zero=torch.tensor(0): rf.while_loop(
            lambda v: v[0] < 5, lambda v: (v[0] + 1, v[1] * 1.5), (rf.convert_to_tensor(zero, dims=[]), x))[1]),
    Row("cond", "cond(pred, x * 2, x - 1) with a Python bool pred", out=("batch", "time", "feature"), requires=("cond",),
        torch=lambda s: lambda x=s.x, pred=True: x * 2.0 if pred else x - 1.0,
        dimtorch=lambda s: lambda x=s.x: dt.cond(True, lambda: x * 2.0, lambda: x - 1.0),
        returnn=lambda s: lambda x=s.x, rf=_rf(s): rf.cond(True, lambda: x * 2.0, lambda: x - 1.0)),
)
