"""Helpers for the graph-capture tests: compile a function of raws with fullgraph=True, run it next to
eager on padded batches (NaN/1e30 padding), compare outputs and gradients, and count graphs."""
from __future__ import annotations

import contextlib
from typing import Callable, Sequence

import torch
import torch._dynamo
import torch._dynamo.testing

import dimtorch as dt


class Compiled:
    """torch.compile(fn, fullgraph=True) with a counting backend (aot_eager: Dynamo + AOTAutograd, the
    full capture path without inductor's code generation, which takes seconds per graph here)."""

    def __init__(self, fn: Callable, backend: str = "aot_eager", dynamic=None):
        torch._dynamo.reset()
        self.counter = torch._dynamo.testing.CompileCounterWithBackend(backend)
        self.fn = torch.compile(fn, fullgraph=True, backend=self.counter, dynamic=dynamic)

    def __call__(self, *args):
        return self.fn(*args)

    @property
    def graphs(self) -> int:
        """Frames compiled (each is one graph: fullgraph=True allows no break)."""
        return self.counter.frame_count


def padded(lengths: Sequence[int], feature: int, *, pad: float, seed: int = 0, extra: int = 0):
    """(raw (B, T, F) with `pad` in the padding, lengths int64 (B,)); T = max(lengths) + extra."""
    g = torch.Generator().manual_seed(seed)
    t = max(lengths) + extra
    raw = torch.randn(len(lengths), t, feature, generator=g)
    for b, n in enumerate(lengths):
        raw[b, n:] = pad
    return raw, torch.tensor(list(lengths), dtype=torch.int64)


def dims_of(lengths_raw: torch.Tensor, feature: dt.Dim):
    """(batch, time) made from the lengths, as a compiled step makes them."""
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(lengths_raw, dims=(batch,)), name="time")
    return batch, time


def valid_frames(lengths: torch.Tensor, t: int) -> torch.Tensor:
    return torch.arange(t)[None, :] < lengths[:, None]


def assert_same(got, want, *, rtol=1e-5, atol=1e-5, what=""):
    """Tensors (raws) or nested tuples/lists of them equal within tolerance, NaN where NaN."""
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want), what
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, rtol=rtol, atol=atol, what=f"{what}[{i}]")
        return
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"{what}: {m}")


def grads(outputs, inputs: Sequence[torch.Tensor], seed: int = 1):
    """Gradients of sum(output * fixed random cotangent) w.r.t. inputs (zeros where none flows)."""
    outputs = [o for o in (outputs if isinstance(outputs, (tuple, list)) else [outputs])
               if isinstance(o, torch.Tensor) and o.requires_grad]
    if not outputs:
        return [torch.zeros_like(x) for x in inputs]
    g = torch.Generator().manual_seed(seed)
    total = sum((o.nan_to_num(0.0) * torch.randn(o.shape, generator=g)).sum() for o in outputs)
    got = torch.autograd.grad(total, list(inputs), allow_unused=True)
    return [torch.zeros_like(x) if gx is None else gx for x, gx in zip(inputs, got)]


@contextlib.contextmanager
def eager_random_in_inductor():
    """Inductor draws random numbers its own way; this makes it use torch's (same values as eager)."""
    import torch._inductor.config as cfg
    old = cfg.fallback_random
    cfg.fallback_random = True
    try:
        yield
    finally:
        cfg.fallback_random = old


# --- every op of the op table in the three tracers (tests/capture/test_compile.py) ----------------------

OP_BATCHES = [  # (lengths, label lengths, padding value, seed): the second batch has other B, T and S
    ((7, 4, 6), (5, 2, 3), float("nan"), 0),
    ((9, 3, 8, 5, 9), (6, 2, 6, 1, 4), 1e30, 1),
]


def op_inputs(lengths, label_lengths, pad, seed, feature: int):
    """(features (B, T, F) with `pad` in the padding, lengths, labels (B, S) with garbage padding, label lengths)."""
    g = torch.Generator().manual_seed(seed)
    b, t, s = len(lengths), max(lengths), max(label_lengths)
    raw = torch.randn(b, t, feature, generator=g)
    labels = torch.randint(1, feature, (b, s), generator=g)
    for i, (n, m) in enumerate(zip(lengths, label_lengths)):
        raw[i, n:] = pad
        labels[i, m:] = feature - 1
    return raw, torch.tensor(lengths), labels, torch.tensor(label_lengths)


def canonical(outs, detach: bool = False) -> list:
    """Outputs as raws with their padding set to 0 (what padding holds is not specified); Dims and None
    skipped; complex as its real part, bool as float."""
    flat = []

    def walk(o):
        if isinstance(o, (list, tuple)):
            for v in o:
                walk(v)
        elif isinstance(o, dict):
            for v in o.values():
                walk(v)
        elif isinstance(o, dt.Tensor):
            r = o.raw
            if r.dtype.is_complex:
                r = torch.view_as_real(r)[..., 0]
            if r.dtype == torch.bool:
                r = r.to(torch.float32)
            masked = [d for d in o.dims if d.dyn_size is not None and all(b in o.dims for b in d.dyn_size.dims)]
            if masked:
                r = dt.Tensor(r, o.dims).copy_masked(0.0 if r.dtype.is_floating_point else 0, dims=masked).raw
            flat.append(r.detach() if detach else r)
        elif isinstance(o, torch.Tensor):
            flat.append(o.detach() if detach else o)
        elif isinstance(o, (int, float)) and not isinstance(o, bool):
            flat.append(torch.tensor(float(o)))
        elif o is not None and not isinstance(o, dt.Dim):
            raise TypeError(f"output of type {type(o).__name__}")
    walk(outs)
    return flat


def _position_weights(o: torch.Tensor) -> torch.Tensor:
    """A weight per position (so that gradients at every position are compared, padding included)."""
    w = torch.ones((), dtype=o.dtype)
    for i in range(o.dim()):
        view = [1] * o.dim()
        view[i] = o.shape[i]
        w = w + torch.arange(o.shape[i], dtype=o.dtype).reshape(view) * (0.1 * (i + 1))
    return w


def weighted_grad(outs, raw: torch.Tensor):
    """Gradient w.r.t. raw of the position-weighted sum of the float outputs (None when none needs one)."""
    total = None
    for o in outs:
        if isinstance(o, torch.Tensor) and o.requires_grad and o.dtype.is_floating_point:
            v = (o.nan_to_num(0.0, 0.0, 0.0) * _position_weights(o)).sum()
            total = v if total is None else total + v
    if total is None:
        return None
    (g,) = torch.autograd.grad(total, [raw], allow_unused=True)
    return torch.zeros_like(raw) if g is None else g


def differs(got, want, what: str, rtol: float = 1e-4, atol: float = 1e-4):
    """None when each output equals on the common extent of every axis (padded sizes may differ: a traced
    data-dependent size is its bound), else a message."""
    if len(got) != len(want):
        return f"{what}: {len(got)} outputs vs {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if g.dim() != w.dim():
            return f"{what}[{i}]: shape {tuple(g.shape)} vs {tuple(w.shape)}"
        common = tuple(slice(0, min(a, b)) for a, b in zip(g.shape, w.shape))
        gs, ws = g.detach()[common], w.detach()[common]
        if gs.dtype != ws.dtype:
            gs, ws = gs.double(), ws.double()
        try:
            torch.testing.assert_close(gs, ws, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as e:
            return f"{what}[{i}] differs: {str(e).splitlines()[0]} (shapes {tuple(g.shape)} vs {tuple(w.shape)})"
    return None
