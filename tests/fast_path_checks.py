"""Comparison of a C++ fast path with its Python definition (tests/ops/test_array_fast_paths.py and the
families' own test files): the same structure, dims, markers and raw values (NaN where NaN)."""
from __future__ import annotations

import inspect
import sys

import torch

import dimtorch as dt


def same_dim(fast, slow) -> bool:
    """The same Dim, or two new dims of one name and size or lengths (each call makes its own)."""
    if fast is slow:
        return True
    if fast is None or slow is None or (fast.size, fast.name) != (slow.size, slow.name):
        return False
    if fast.lengths is None or slow.lengths is None:
        return fast.lengths is slow.lengths
    return fast.lengths.dims == slow.lengths.dims and torch.equal(fast.lengths.raw, slow.lengths.raw)


def assert_same(fast, slow):
    """Same structure; Tensors with the same dims, markers and raw values (NaN where NaN)."""
    if isinstance(fast, (tuple, list)):
        assert type(fast) is type(slow) and len(fast) == len(slow)
        for f, s in zip(fast, slow):
            assert_same(f, s)
    elif isinstance(fast, dt.Tensor):
        assert len(fast.dims) == len(slow.dims) and all(map(same_dim, fast.dims, slow.dims)), (fast, slow)
        assert same_dim(fast.sparse_dim, slow.sparse_dim) and same_dim(fast.feature_dim, slow.feature_dim)
        assert fast.raw.dtype == slow.raw.dtype
        torch.testing.assert_close(fast.raw, slow.raw, rtol=0, atol=0, equal_nan=True)
    elif isinstance(fast, dt.Dim):
        assert same_dim(fast, slow)
    else:
        assert fast == slow


def both(fast_fn, slow_fn, *args, **kwargs):
    out_fast, out_slow = fast_fn(*args, **kwargs), slow_fn(*args, **kwargs)
    assert_same(out_fast, out_slow)
    return out_fast


def permuted_batch(lengths, channels, *, extra, pad, order, static_time=None, seed=0):
    """x over a permutation `order` of (batch, time, channel), padding frames set to `pad` (`extra` frames past
    the longest sequence); with static_time, time is a static dim of that size. Returns x, batch, time, chan."""
    g = torch.Generator().manual_seed(seed)
    batch = dt.Dim(None, name="batch")
    if static_time is None:
        time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
        n_time = max(lengths) + extra
    else:
        time = dt.Dim(static_time, name="time")
        n_time = static_time
    chan = dt.Dim(channels, name="chan")
    raw = torch.randn(len(lengths), n_time, channels, generator=g)
    if static_time is None:
        for b, n in enumerate(lengths):
            raw[b, n:] = pad
    dims = (batch, time, chan)
    x = dt.Tensor(raw.permute(*order), tuple(dims[i] for i in order), feature_dim=chan)
    return x, batch, time, chan


def definition_calls(fn, definition) -> int:
    """How often the call `fn()` ran the Python function `definition` (an op's definition, decorators unwrapped):
    0 when its fast path took the call."""
    code = inspect.unwrap(definition).__code__
    calls = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is code:
            calls.append(1)
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return len(calls)
