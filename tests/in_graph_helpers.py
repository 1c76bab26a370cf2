"""Test helpers of the ops' in-graph forms: eager vs force_in_graph, per sequence alone, and a no-host-read checker.

An op's in-graph form (what runs while torch.compile/export/make_fx trace) must give what its eager
form gives on valid frames, with the same dims and markers, and the same gradients; it may hold
more padding frames (sizes come from the raws, not from host max lengths). `check_in_graph` runs
one function of an env (a dict of Dims and Tensors) both ways and compares; `check_alone_in_graph`
checks batch independence of the in-graph form; `no_host_reads` fails when the code inside reads
host data (lengths, caches keyed by them) or device values.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Callable, Optional

import torch
from torch.overrides import TorchFunctionMode

import dimtorch as dt
from dimtorch.ops import concat as _concat, packing as _packing
from dimtorch._core import dim_cache as _dim_cache, tracing as _tracing

from helpers import valid_mask

# --- eager vs in-graph -------------------------------------------------------------------------------


def _leaf_env(env: dict):
    """env with every Tensor on its own leaf copy of the raw (floating ones require grad)."""
    out, leaves = {}, {}
    for k, v in env.items():
        if isinstance(v, dt.Tensor):
            raw = v.raw.detach().clone()
            if raw.is_floating_point():
                raw.requires_grad_(True)
                leaves[k] = raw
            v = dt.Tensor(raw, v.dims, sparse_dim=v.sparse_dim, feature_dim=v.feature_dim)
        out[k] = v
    return out, leaves


def _flat(out) -> list:
    if isinstance(out, (tuple, list)):
        return [e for o in out for e in _flat(o)]
    return [out]


def run(fn: Callable, env: dict, in_graph: bool):
    """fn(env) on leaf copies of env's Tensors, eagerly or under force_in_graph; (results, leaves, env)."""
    env2, leaves = _leaf_env(env)
    with (_tracing.force_in_graph() if in_graph else contextlib.nullcontext()):
        out = fn(env2)
    return _flat(out), leaves, env2


def _host_lengths(d: dt.Dim) -> torch.Tensor:
    return d.lengths.raw.to("cpu", torch.int64)


def same_dim(a, b) -> bool:
    """a is b, or both are new dims of the same kind, static size and lengths (ops that make dims)."""
    if a is b:
        return True
    if a is None or b is None or not isinstance(a, dt.Dim) or not isinstance(b, dt.Dim):
        return False
    if a.size != b.size or (a.lengths is None) != (b.lengths is None):
        return False
    if a.lengths is None:
        return True
    la, lb = a.lengths, b.lengths
    return len(la.dims) == len(lb.dims) and all(x is y for x, y in zip(la.dims, lb.dims)) and torch.equal(
        _host_lengths(a), _host_lengths(b))


def _common(e: torch.Tensor, g: torch.Tensor, dims, what: str):
    """e and g narrowed to their common shape; only dynamic dims (or dims sized from data) may differ."""
    for i, d in enumerate(dims):
        if e.shape[i] != g.shape[i]:
            assert d.size is None, f"{what}: static dim {d} has size {e.shape[i]} eagerly, {g.shape[i]} in graph"
    shape = [min(a, b) for a, b in zip(e.shape, g.shape)]
    for i, n in enumerate(shape):
        e, g = e.narrow(i, 0, n), g.narrow(i, 0, n)
    return e, g


def _cotangent(shape, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(tuple(shape), generator=gen)


def check_in_graph(fn: Callable, env: dict, *, pad_value=None, backward: bool = True, rtol=None, atol=None):
    """fn(env) eagerly and under force_in_graph: the same number of results, Dims that match
    (same_dim), Tensors with matching dims, markers and dtype, equal values on valid frames (every
    frame of the common region, and `pad_value` in the in-graph form's extra frames, when pad_value
    is given), and equal gradients of env's floating Tensors on their valid frames (finite in the
    in-graph form wherever they are eagerly). Returns (eager results, in-graph results)."""
    eager, e_leaves, _ = run(fn, env, False)
    graph, g_leaves, _ = run(fn, env, True)
    assert len(eager) == len(graph), f"{len(eager)} results eagerly, {len(graph)} in graph"
    e_loss, g_loss = 0.0, 0.0
    for i, (e, g) in enumerate(zip(eager, graph)):
        what = f"result {i}"
        if isinstance(e, dt.Dim) or e is None:
            assert same_dim(e, g), f"{what}: dim {e!r} eagerly, {g!r} in graph"
            continue
        if not isinstance(e, dt.Tensor):
            assert e == g, f"{what}: {e!r} eagerly, {g!r} in graph"
            continue
        assert isinstance(g, dt.Tensor), f"{what}: {type(g).__name__} in graph"
        assert len(e.dims) == len(g.dims) and all(same_dim(a, b) for a, b in zip(e.dims, g.dims)), (
            f"{what}: dims {e.dims} eagerly, {g.dims} in graph")
        assert same_dim(e.sparse_dim, g.sparse_dim) or (e.sparse_dim is None and g.sparse_dim is None), what
        assert same_dim(e.feature_dim, g.feature_dim) or (e.feature_dim is None and g.feature_dim is None), what
        assert e.raw.dtype == g.raw.dtype, f"{what}: dtype {e.raw.dtype} eagerly, {g.raw.dtype} in graph"
        er, gr = _common(e.raw, g.raw, e.dims, what)
        mask = valid_mask(e.dims, er.shape)
        if pad_value is not None:
            mask = torch.ones_like(mask)
            extra = torch.ones(g.raw.shape, dtype=torch.bool)
            extra[tuple(slice(0, n) for n in er.shape)] = False
            want = torch.full_like(g.raw[extra], pad_value)
            torch.testing.assert_close(g.raw.detach()[extra], want, msg=lambda m: f"{what} extra frames: {m}")
        m = mask.expand(er.shape)
        torch.testing.assert_close(gr.detach()[m], er.detach()[m], rtol=rtol, atol=atol, equal_nan=True,
                                   msg=lambda msg: f"{what} values: {msg}")
        if backward and e.raw.requires_grad and e.raw.is_floating_point():
            cot = _cotangent(g.raw.shape, seed=i)
            g_valid = valid_mask(g.dims, g.raw.shape)
            e_cot = cot[tuple(slice(0, n) for n in e.raw.shape)] if all(
                a <= b for a, b in zip(e.raw.shape, g.raw.shape)) else _cotangent(e.raw.shape, seed=i)
            e_valid = valid_mask(e.dims, e.raw.shape)
            e_loss = e_loss + (torch.where(e_valid, e.raw, 0) * e_cot).sum()
            g_loss = g_loss + (torch.where(g_valid, g.raw, 0) * cot[tuple(slice(0, n) for n in g.raw.shape)]).sum()
    if backward and torch.is_tensor(e_loss):
        e_loss.backward()
        g_loss.backward()
        for k, leaf in e_leaves.items():
            ge, gg = leaf.grad, g_leaves[k].grad
            if ge is None:
                assert gg is None or not gg.any(), f"grad of {k}: none eagerly, some in graph"
                continue
            assert gg is not None, f"grad of {k}: none in graph"
            finite = torch.isfinite(ge)
            assert torch.isfinite(gg)[finite].all(), f"grad of {k}: not finite in graph where it is eagerly"
            m = valid_mask(env[k].dims, ge.shape).expand(ge.shape)
            torch.testing.assert_close(gg[m], ge[m], rtol=rtol, atol=atol, equal_nan=True,
                                       msg=lambda msg: f"grad of {k}: {msg}")
    return eager, graph


# --- per sequence alone ------------------------------------------------------------------------------


def _env_of_sequence(env: dict, batch: dt.Dim, b: int) -> dict:
    """env for sequence b alone: a new batch dim of size 1, new dynamic dims over it with b's lengths,
    every Tensor sliced at b (raw sizes otherwise kept)."""
    new_batch = dt.Dim(None, name="batch_alone")
    mapping = {id(batch): new_batch}

    def map_dim(d):
        if id(d) in mapping:
            return mapping[id(d)]
        if d.lengths is not None and any(x is batch for x in d.lengths.dims):
            lengths = d.lengths
            assert lengths.dims == (batch,), "per-sequence envs take dims whose lengths are over the batch only"
            nd = dt.Dim(dt.Tensor(lengths.raw[b:b + 1].clone(), (new_batch,)), name=d.name)
        else:
            nd = d
        mapping[id(d)] = nd
        return nd

    out = {}
    for k, v in env.items():
        if isinstance(v, dt.Dim):
            out[k] = map_dim(v)
        elif isinstance(v, dt.Tensor):
            raw = v.raw
            if batch in v.dims:
                a = v.dims.index(batch)
                raw = raw.narrow(a, b, 1)
            dims = tuple(map_dim(d) for d in v.dims)
            out[k] = dt.Tensor(raw.detach().clone(), dims, sparse_dim=None if v.sparse_dim is None else map_dim(
                v.sparse_dim), feature_dim=None if v.feature_dim is None else map_dim(v.feature_dim))
        else:
            out[k] = v
    return out


def check_alone_in_graph(fn: Callable, env: dict, batch_key: str = "batch", rtol=None, atol=None):
    """Batch independence of the in-graph form: per sequence b, fn on b alone gives, on its valid
    frames, what fn on the batch gives for b."""
    batch = env[batch_key]
    full, _, _ = run(fn, env, True)
    n = next(v.raw.shape[v.dims.index(batch)] for v in env.values() if isinstance(v, dt.Tensor) and batch in v.dims)
    for b in range(n):
        alone, _, _ = run(fn, _env_of_sequence(env, batch, b), True)
        for i, (f, a) in enumerate(zip(full, alone)):
            if not isinstance(f, dt.Tensor):
                continue
            fr = f.raw.detach()
            if batch in f.dims:
                fr = fr.narrow(f.dims.index(batch), b, 1)
            ar, fr = _common(a.raw.detach(), fr, a.dims, f"sequence {b} result {i}")
            m = valid_mask(a.dims, ar.shape).expand(ar.shape)
            torch.testing.assert_close(ar[m], fr[m], rtol=rtol, atol=atol, equal_nan=True,
                                       msg=lambda msg: f"sequence {b} alone, result {i}: {msg}")


# --- no host reads -----------------------------------------------------------------------------------

# Reads of tensor values to the host. tolist is left out: the C++ Dim constructor reads new lengths
# with it (the Dim's own in-graph definition is not this checker's concern).
_READS = {"item", "__bool__", "__int__", "__float__", "__index__", "equal", "nonzero", "argwhere", "unique"}
# C functions of host lengths and per-dim caches, and Python functions of the caches.
_C_CALLS = {"get_max_size", "_dim_cached_raw", "get_mask", "get_size_tensor", "copy_masked"}
_PY_CODES = {f.__code__ for f in (_dim_cache.lookup, _dim_cache.store, _concat._gather_index, _packing._valid_index)}


class _NoValueReads(TorchFunctionMode):
    def __init__(self, found: list):
        super().__init__()
        self.found = found

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in _READS:
            self.found.append(f"torch {name} from {_where(sys._getframe(1))}")
        return func(*args, **(kwargs or {}))


def _where(frame) -> str:
    return f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno} ({frame.f_code.co_name})"


@contextlib.contextmanager
def no_host_reads():
    """Fails (AssertionError, listing them) when the code inside reads tensor values on the host
    (item, bool, int, equal, nonzero, ...), asks a dim for its host max (get_max_size), or uses the
    per-dim caches (cached masks, lengths and index caches). Run it on raws on the meta device to
    catch reads of device data as errors too."""
    found = []

    def profile(frame, event, arg):
        if event == "c_call" and getattr(arg, "__name__", "") in _C_CALLS:
            found.append(f"{getattr(arg, '__qualname__', arg.__name__)} from {_where(frame)}")
        elif event == "call" and frame.f_code in _PY_CODES:
            found.append(f"{frame.f_code.co_name} from {_where(frame.f_back)}")

    old = sys.getprofile()
    sys.setprofile(profile)
    try:
        with _NoValueReads(found):
            yield found
    finally:
        sys.setprofile(old)
    assert not found, f"host reads: {found}"


def on_meta(env: dict) -> dict:
    """env with every Tensor's raw on the meta device (lengths stay on the host: dims are kept)."""
    return {k: dt.Tensor(v.raw.detach().to("meta"), v.dims, sparse_dim=v.sparse_dim, feature_dim=v.feature_dim)
            if isinstance(v, dt.Tensor) else v for k, v in env.items()}


def run_meta_in_graph(fn: Callable, env: dict, backward: bool = True):
    """fn(env) under force_in_graph on meta raws, forward (and backward of its floating Tensor
    results), with no host read; returns the results."""
    env = on_meta(env)
    for v in env.values():
        if isinstance(v, dt.Tensor) and v.raw.is_floating_point():
            v.raw.requires_grad_(True)
    with no_host_reads(), _tracing.force_in_graph():
        out = _flat(fn(env))
        if backward:
            loss = sum(o.raw.sum() for o in out if isinstance(o, dt.Tensor) and o.raw.requires_grad)
            if torch.is_tensor(loss):
                loss.backward()
    return out


def padded_env(lengths=(5, 3, 0, 2), feature: int = 3, extra_time: int = 1, pad=float("nan"), seed: int = 0,
               dtype=torch.float32) -> dict:
    """env of a padded batch: batch, time, feature dims and x over (batch, time, feature), padding
    `pad`; extra_time frames beyond the longest sequence."""
    gen = torch.Generator().manual_seed(seed)
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor(list(lengths), dtype=torch.int64), (batch,)), name="time")
    feat = dt.Dim(feature, name="feature")
    raw = torch.randn(len(lengths), max(lengths) + extra_time, feature, generator=gen).to(dtype)
    for b, n in enumerate(lengths):
        raw[b, n:] = pad
    return {"batch": batch, "time": time, "feature": feat, "x": dt.Tensor(raw, (batch, time, feat), feature_dim=feat)}


def with_order(env: dict, key: str, order) -> dict:
    """env with Tensor env[key] transposed to its dims in `order` (indices into its dims)."""
    x = env[key]
    env = dict(env)
    env[key] = x.copy_transpose(tuple(x.dims[i] for i in order))
    return env
