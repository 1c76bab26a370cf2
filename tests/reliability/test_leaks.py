"""Leak tests of the C++ core: input refcounts, live Tensor/Dim counts, error paths, memory over 100k ops."""
import gc
import os
import operator
import sys
import weakref

import pytest
import torch

import dimtorch as dt
from helpers import live_counts, make_padded_batch

# Set by scripts/test_sanitized.sh.
SANITIZED = os.environ.get("DIMTORCH_SANITIZED") == "1"


def _operands():
    bd = make_padded_batch((5, 3, 1), 4, pad_value=0.0)
    c = dt.Tensor(torch.randn(3, 4), (bd.batch, bd.feature))
    d = dt.Tensor(torch.randn(4, 5, 3), (bd.feature, bd.time, bd.batch))
    b = dt.Tensor(torch.randn(4), (bd.feature,))
    t_only = dt.Tensor(torch.randn(5), (bd.time,))
    return bd, b, c, d, t_only


def _ops(bd, b, c, d, t_only):
    """Calls that exercise every path of the elementwise core (same dims, plans, views, scalars)."""
    x = bd.x
    cond = x > 0.0
    return [
        lambda: x + x, lambda: x + b, lambda: b + x, lambda: x * c, lambda: c - x, lambda: x / d,
        lambda: d ** x, lambda: x * 2.0, lambda: 2 - x, lambda: -x, lambda: abs(x), lambda: x < c,
        lambda: x == 1, lambda: ~cond, lambda: cond & cond, lambda: dt.combine(x, d, "maximum"),
        lambda: dt.combine(c, t_only, "add", allow_broadcast_all_sources=True),
        lambda: dt.compare(x, d, "<="), lambda: dt.where(cond, x, 0.0), lambda: dt.where(cond, c, d),
        lambda: dt.cast(x, "float64"), lambda: dt.minimum(x, 0.5), lambda: dt.maximum(c, x),
        lambda: dt.clip(x, c, 1.0), lambda: dt.clip(x, -1.0, d), lambda: dt.clip(x, 0.0, 1.0),
        lambda: dt.exp(x), lambda: dt.relu(x), lambda: dt.logical_and(cond, True),
        lambda: dt.logical_not(cond), lambda: x.raw_aligned((bd.feature, bd.time, bd.batch)),
        lambda: x.raw_aligned((bd.feature, dt.Dim(1), bd.time, bd.batch)),
        lambda: x.copy_transpose((bd.time, bd.feature, bd.batch)), lambda: x.copy(),
        lambda: x.remaining_dims(bd.time), lambda: x.get_axis(bd.time), lambda: x.shape,
        lambda: x.dims, lambda: x.dtype, lambda: repr(x), lambda: repr(bd.time),
        lambda: bd.time.get_max_size(), lambda: bd.time.lengths, lambda: hash(x),
        lambda: dt.Tensor(x.raw, x.dims, feature_dim=bd.feature, name="n"),
    ]


def _bad_calls(bd, b, c, d, t_only):
    """Calls that raise, one per error path."""
    x = bd.x
    c2 = dt.Tensor(torch.randn(2, 4), (bd.batch, bd.feature))
    return [
        (ValueError, lambda: x + c2), (ValueError, lambda: c2 + d), (ValueError, lambda: c + t_only),
        (TypeError, lambda: x + x.raw), (TypeError, lambda: x + "s"), (TypeError, lambda: None * x),
        (ValueError, lambda: dt.combine(x, x, "nope")), (ValueError, lambda: dt.where(x > 0, c2, 0.0)),
        (ValueError, lambda: dt.clip(c2, t_only)), (ValueError, lambda: dt.clip(x)),
        (TypeError, lambda: dt.exp(1.0)), (ValueError, lambda: dt.cast(x, "nope")),
        (ValueError, lambda: x.raw_aligned((bd.batch,))), (ValueError, lambda: x.copy_transpose((bd.batch,))),
        (ValueError, lambda: x.get_axis(dt.Dim(2))), (TypeError, lambda: bool(x)), (TypeError, lambda: len(x)),
        (ValueError, lambda: dt.Tensor(torch.zeros(3, 4, 4), (bd.batch, bd.time, bd.feature))),
        (ValueError, lambda: dt.Tensor(torch.zeros(3, 3), (bd.batch, bd.batch))),
        (ValueError, lambda: dt.Tensor(torch.zeros(2, 5), (bd.batch, bd.time))),
        (TypeError, lambda: dt.Tensor(torch.zeros(3), ("b",))),
        (ValueError, lambda: dt.Dim(dt.Tensor(torch.tensor([-1]), (dt.Dim(None),)))),
        (TypeError, lambda: dt.Dim(dt.Tensor(torch.tensor([1.0]), (dt.Dim(None),)))),
        (TypeError, lambda: dt.Dim(1.5)),
    ]


def _refcounts(objs):
    return [sys.getrefcount(o) for o in objs]


def _watched(bd, b, c, d, t_only):
    tensors = [bd.x, b, c, d, t_only]
    return tensors + [t.raw for t in tensors] + [t.dims for t in tensors] + [bd.batch, bd.time, bd.feature,
                                                                          bd.time.lengths]


def test_input_refcounts_unchanged_by_ops():
    args = _operands()
    ops = _ops(*args)
    watched = _watched(*args)
    for op in ops:  # warm up: plans cached, lazily made objects made
        op()
    before = _refcounts(watched)
    for _ in range(200):
        for op in ops:
            op()
    assert _refcounts(watched) == before


def test_input_refcounts_unchanged_by_errors():
    args = _operands()
    bad = _bad_calls(*args)
    watched = _watched(*args)
    for exc, call in bad:
        with pytest.raises(exc):
            call()
    before = _refcounts(watched)
    for _ in range(100):
        for exc, call in bad:
            try:
                call()
            except exc:
                pass
            else:
                raise AssertionError("expected an error")
    assert _refcounts(watched) == before


def test_live_counts_stable_after_ops_and_errors():
    args = _operands()
    for op in _ops(*args):  # warm up: objects that dims make lazily and keep are made now
        op()
    before = live_counts()
    ops, bad = _ops(*args), _bad_calls(*args)
    for _ in range(50):
        for op in ops:
            op()
        for exc, call in bad:
            try:
                call()
            except exc:
                pass
    del ops, bad
    after = live_counts()
    assert after == before


def test_results_release_their_dims():
    bd, b, c, d, t_only = _operands()
    refs_before = _refcounts([bd.x.dims, bd.batch, bd.time, bd.feature])
    results = [bd.x + c for _ in range(100)] + [dt.combine(c, t_only, "mul", allow_broadcast_all_sources=True)]
    assert _refcounts([bd.x.dims])[0] >= refs_before[0] + 100  # results share the holder's dims tuple
    del results
    # The plan caches do not own the dims they were made for: nothing to clear first.
    assert _refcounts([bd.x.dims, bd.batch, bd.time, bd.feature]) == refs_before


def test_plan_cache_holds_dims_until_cleared():
    a_dim, b_dim = dt.Dim(2, name="a"), dt.Dim(3, name="b")
    x = dt.Tensor(torch.randn(2, 3), (a_dim, b_dim))
    y = dt.Tensor(torch.randn(3, 2), (b_dim, a_dim))
    r = x + y
    ref = weakref.ref(a_dim)
    del x, y, r, a_dim, b_dim
    gc.collect()
    dt._C._clear_caches()
    gc.collect()
    assert ref() is None


def test_plan_cache_eviction_releases_dims():
    # More distinct dims pairs than cache slots: evicted plans must drop their dims.
    before = live_counts()
    refs = []
    for i in range(1500):
        a_dim, b_dim = dt.Dim(2), dt.Dim(1)
        x = dt.Tensor(torch.zeros(2, 1), (a_dim, b_dim))
        y = dt.Tensor(torch.zeros(1), (b_dim,))
        x + y
        refs.append(weakref.ref(a_dim))
    del x, y, a_dim, b_dim
    gc.collect()
    assert sum(r() is not None for r in refs) <= 512  # at most one per cache slot survives
    assert live_counts() == before


def test_dynamic_and_derived_dims_are_collected():
    before = live_counts()
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor([3, 2]), (batch,)), name="time")
    derived = [time + 1, time * 2, time - 1, dt.ceildiv(time, 2)]
    x = dt.Tensor(torch.zeros(2, 3), (batch, time))
    _ = x.raw_aligned((time, batch))
    refs = [weakref.ref(o) for o in (batch, time, x, *derived)]
    del batch, time, derived, x, _
    gc.collect()
    assert all(r() is None for r in refs)
    assert live_counts() == before


def test_memory_flat_over_100k_ops():
    """100k elementwise ops keep Python allocations and the process size flat."""
    bd, b, c, d, t_only = _operands()
    x = bd.x
    cond = x > 0
    ops = [lambda: x + b, lambda: x * c, lambda: x + d, lambda: x * 2.0, lambda: x < c, lambda: dt.relu(x),
           lambda: dt.where(cond, x, 0.0), lambda: x + x, lambda: -x, lambda: dt.maximum(x, 0.0)]

    def run(n):
        for _ in range(n // len(ops)):
            for op in ops:
                op()

    def rss_kb():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4

    run(10_000)  # warm up torch's allocator and our caches
    gc.collect()
    blocks, rss = sys.getallocatedblocks(), rss_kb()
    counts = dt._C._live_counts()
    run(100_000)
    gc.collect()
    assert dt._C._live_counts() == counts
    assert sys.getallocatedblocks() - blocks < 1000  # a leaked object per op would be 100k blocks
    if not SANITIZED:  # ASan keeps freed memory in quarantine, so its process grows regardless
        assert rss_kb() - rss < 8 * 1024  # a leaked raw per op would be tens of MB
