"""Checks of a C++ fast path against its Python definition (dimtorch._op_table): the same result
dims, markers, dtype, values and gradients, eagerly and in the in-graph form; the same error for bad input.

The oracle of each op's semantics is positional torch (tests/test_ops_*.py); these checks pin the
definition, which torch.compile traces in place of the fast path, to what the fast path gives.
"""
from __future__ import annotations

import contextlib

import pytest
import torch

import dimtorch as dt
from dimtorch import _op_table
from dimtorch._core.tracing import force_in_graph

from helpers import make_padded_batch

_TOLERANCE = {torch.float32: (1e-6, 1e-6), torch.float64: (1e-12, 1e-12), torch.float16: (1e-3, 1e-3),
              torch.bfloat16: (1e-2, 1e-2)}


def _copy(v, grad: bool, buffers: set, name=None):
    """A new Tensor on a leaf copy of v's raw (floating raws require grad unless `name` is a buffer)."""
    if isinstance(v, dt.Tensor):
        raw = v.raw.detach().clone()
        if grad and name not in buffers and (raw.is_floating_point() or raw.is_complex()):
            raw.requires_grad_(True)
        return dt.Tensor(raw, v.dims, sparse_dim=v.sparse_dim, feature_dim=v.feature_dim)
    if isinstance(v, (list, tuple)) and any(isinstance(e, dt.Tensor) for e in v):
        return type(v)(_copy(e, grad, buffers) for e in v)
    return v


def _tensors(out):
    if isinstance(out, dt.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return []


def assert_same(fast, slow, what: str = "result"):
    """The same structure; Tensors with the same dims, markers, dtype and values (NaN where NaN)."""
    if isinstance(fast, (tuple, list)):
        assert type(fast) is type(slow) and len(fast) == len(slow), (what, fast, slow)
        for i, (f, s) in enumerate(zip(fast, slow)):
            assert_same(f, s, f"{what}[{i}]")
        return
    if not isinstance(fast, dt.Tensor):
        assert fast is slow or fast == slow, (what, fast, slow)
        return
    assert isinstance(slow, dt.Tensor), (what, slow)
    assert len(fast.dims) == len(slow.dims) and all(a is b for a, b in zip(fast.dims, slow.dims)), (
        f"{what}: dims {fast.dims} != definition's {slow.dims}")
    assert fast.sparse_dim is slow.sparse_dim, f"{what}: sparse_dim {fast.sparse_dim} != {slow.sparse_dim}"
    assert fast.feature_dim is slow.feature_dim, f"{what}: feature_dim {fast.feature_dim} != {slow.feature_dim}"
    assert fast.raw.dtype == slow.raw.dtype, f"{what}: dtype {fast.raw.dtype} != definition's {slow.raw.dtype}"
    assert fast.raw.shape == slow.raw.shape, f"{what}: shape {fast.raw.shape} != definition's {slow.raw.shape}"
    rtol, atol = _TOLERANCE.get(fast.raw.dtype, (0, 0))
    torch.testing.assert_close(fast.raw.detach(), slow.raw.detach(), rtol=rtol, atol=atol, equal_nan=True,
                               msg=lambda m: f"{what} values: {m}")


def definition_of(fast):
    """The op-table definition of a fast path (a function of dimtorch._C)."""
    return _op_table.OPS[fast.__name__].definition


def check(fast, *args, backward: bool = True, buffers=(), in_graph=(False, True), seed: int = 0, **kwargs):
    """fast(*args, **kwargs) against the op's definition, eagerly and under force_in_graph: the same
    results; with `backward`, the same gradients of every floating Tensor input for one random
    cotangent on every floating result (padding included: both sides must agree there too).
    Kwargs named in `buffers` are modified in place by the op (batch norm's running stats): each
    side gets its own copy, compared after the call. Returns the fast path's result."""
    definition = definition_of(fast)
    buffers = set(buffers)
    result = None
    for forced in in_graph:
        sides = []
        for fn, mode in ((fast, contextlib.nullcontext()), (definition, force_in_graph() if forced else
                                                               contextlib.nullcontext())):
            a = [_copy(v, backward, buffers) for v in args]
            k = {n: _copy(v, backward, buffers, n) for n, v in kwargs.items()}
            torch.manual_seed(seed)
            with mode:
                out = fn(*a, **k)
            sides.append((a, k, out))
        (fa, fk, fout), (sa, sk, sout) = sides
        assert_same(fout, sout, f"{fast.__name__} (in graph: {forced})")
        for n in buffers:
            if kwargs.get(n) is not None:
                assert_same(fk[n], sk[n], f"{fast.__name__} buffer {n} (in graph: {forced})")
        if backward:
            _check_grads(fast.__name__, forced, fa, fk, fout, sa, sk, sout, seed)
        result = fout
    return result


def _check_grads(name, forced, fa, fk, fout, sa, sk, sout, seed):
    g = torch.Generator().manual_seed(seed)
    losses = [0, 0]
    for f, s in zip(_tensors(fout), _tensors(sout)):
        if not (f.raw.is_floating_point() and f.raw.requires_grad):
            assert not s.raw.requires_grad or not f.raw.is_floating_point(), f"{name}: only the definition has grad"
            continue
        assert s.raw.requires_grad, f"{name}: the definition's result has no gradient"
        cot = torch.randn(f.raw.shape, generator=g, dtype=f.raw.dtype)
        losses[0] = losses[0] + (f.raw * cot).sum()
        losses[1] = losses[1] + (s.raw * cot).sum()
    if not isinstance(losses[0], torch.Tensor):
        return
    losses[0].backward()
    losses[1].backward()
    fin = _tensors(list(fa) + list(fk.values()))
    sin = _tensors(list(sa) + list(sk.values()))
    for i, (f, s) in enumerate(zip(fin, sin)):
        if not f.raw.requires_grad:
            continue
        assert (f.raw.grad is None) == (s.raw.grad is None), f"{name}: input {i} has a gradient on one side only"
        if f.raw.grad is not None:
            rtol, atol = _TOLERANCE.get(f.raw.dtype, (0, 0))
            torch.testing.assert_close(f.raw.grad, s.raw.grad, rtol=rtol, atol=atol, equal_nan=True,
                                       msg=lambda m: f"{name} (in graph: {forced}) input {i} gradient: {m}")


def check_error(fast, *args, **kwargs):
    """Bad input: the fast path and the definition raise the same exception type, both naming the call."""
    definition = definition_of(fast)
    caller = f"dimtorch.{fast.__name__}()"
    errors = []
    for fn in (fast, definition):
        with pytest.raises(Exception) as info:
            fn(*args, **kwargs)
        errors.append(info.value)
    f, s = errors
    assert type(f) is type(s), f"{fast.__name__}: fast path raised {f!r}, definition {s!r}"
    for e in errors:
        assert str(e).startswith(caller), f"{fast.__name__}: message does not name the call: {e!r}"
    return errors


def padded(lengths=(4, 2, 0), *, feature=3, extra=1, pad=float("nan"), dtype=torch.float32, perm=None,
           heads: int = 2, seed: int = 0):
    """x over (batch, time, feature, heads) (dims in `perm` order; time has `lengths`, its padding
    holds `pad`) and the dims (batch, time, feature, heads). feature_dim is set."""
    b = make_padded_batch(tuple(lengths), feature, pad_value=pad, extra_time=extra, seed=seed,
                          dtype=torch.float64)
    h = dt.Dim(heads, name="heads")
    raw = torch.stack([b.x.raw * (k + 1) for k in range(heads)], dim=-1)
    if dtype == torch.bool:
        raw = raw > 0
    elif not dtype.is_floating_point:
        raw = torch.where(raw.isnan(), torch.tensor(2.0**40, dtype=raw.dtype), raw)
        raw = (raw * 10).clamp(-2.0**50, 2.0**50).to(dtype)
    else:
        raw = raw.to(dtype)
    dims = (b.batch, b.time, b.feature, h)
    x = dt.Tensor(raw, dims, feature_dim=b.feature)
    if perm is not None:
        x = x.copy_transpose(tuple(dims[i] for i in perm))
    return x, dims


def check_either(fast, *args, **kwargs):
    """check() where the fast path succeeds, else check_error() (for fuzzed arguments that torch
    may refuse, e.g. a bool tensor minus a bool)."""
    plain = {k: v for k, v in kwargs.items() if k not in ("backward", "buffers", "in_graph", "seed")}
    try:
        fast(*[_copy(v, False, set()) for v in args], **{k: _copy(v, False, set()) for k, v in plain.items()})
    except Exception:  # noqa: BLE001 (any error: the definition must raise the same)
        check_error(fast, *args, **plain)
        return None
    return check(fast, *args, **kwargs)
