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
