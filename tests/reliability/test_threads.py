"""Threads: several threads running one shared model (and models of their own) on batches with
shared and new Dims give what a sequential run gives, and leave the caches (plans, masks, dim math,
index caches, conv/pool plans) consistent.

An inference server calls one model from many threads. torch releases the GIL inside its ops, so
dimtorch's C++ caches see interleaved calls between any two torch calls; Python code (fallbacks,
builders) lets other threads in too. The switch interval is made tiny here to interleave as much
as possible. DIMTORCH_THREAD_STRESS_S sets the duration (default 3 s).
"""
import os
import random
import sys
import threading
import time

import pytest
import torch

import dimtorch as dt

N_THREADS = 8
DURATION_S = float(os.environ.get("DIMTORCH_THREAD_STRESS_S", "3"))
FEATURE, MODEL, VOCAB = 6, 16, 5


class Model(dt.nn.Module):
    """A small Conformer encoder and a head, plus a tail of sequence ops with derived dims, masks and
    cached indices (pad, concat, slice, reverse_sequence, pack_padded, pool, merge_dims, gather)."""

    def __init__(self, feature: dt.Dim):
        super().__init__()
        self.feature = feature
        self.model_dim = dt.Dim(MODEL, name="model")
        self.vocab = dt.Dim(VOCAB, name="vocab")
        self.encoder = dt.nn.ConformerEncoder(
            feature, self.model_dim, num_layers=1, ff_dim=dt.Dim(24, name="ff"), num_heads=2,
            conv_kernel_size=3, subsample_channels=(2, 2), dropout=0.0, att_dropout=0.0)
        self.output = dt.nn.Linear(self.model_dim, self.vocab)
        self.norm = dt.nn.LayerNorm(self.vocab)

    def forward(self, x: dt.Tensor, batch: dt.Dim, time: dt.Dim) -> dict:
        h, t = self.encoder(x, in_spatial_dim=time)
        logits = self.norm(self.output(h))
        out = {"logits": logits.raw_aligned((batch, t, self.vocab)), "lengths": t.lengths.raw_aligned((batch,))}
        p = dt.softmax(logits, axis=t)
        out["masked_mean"] = dt.reduce_mean(p * logits, axis=t).raw_aligned((batch, self.vocab))
        y, (t2,) = dt.pad(x, axes=time, padding=(1, 2), value=0.0)
        c, t3 = dt.concat((y, t2), (x, time))
        out["concat"] = dt.reduce_sum(c, axis=t3).raw_aligned((batch, self.feature))
        s, t4 = dt.slice(x, axis=time, start=1)
        r = dt.reverse_sequence(s, axis=t4)
        out["reverse"] = r.copy_masked(0.0).raw_aligned((batch, t4, self.feature))
        packed, _ = dt.pack_padded(x, dims=(batch, time))
        out["packed"] = packed.raw
        pooled, (t5,) = dt.pool(x, mode="max", pool_size=2, strides=2, in_spatial_dims=[time])
        out["pooled"] = dt.reduce_max(pooled, axis=t5).raw_aligned((batch, self.feature))
        merged, _ = dt.merge_dims(x, dims=(time, self.feature))
        out["merged"] = merged.copy_masked(0.0).raw
        first = dt.gather(x, indices=dt.Tensor(torch.zeros(x.raw.shape[0], dtype=torch.int64), (batch,),
                                               sparse_dim=time), axis=time)
        out["gather"] = first.raw_aligned((batch, self.feature))
        out["cumsum"] = dt.cumsum(x, axis=time).copy_masked(0.0).raw_aligned((batch, time, self.feature))
        return out


def _batches(n: int):
    """Raw batches: (features, lengths), with padding holding NaN (it must never reach results)."""
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        lengths = torch.randint(1, 14, (1 + i % 4,), generator=g)
        x = torch.randn(len(lengths), int(lengths.max()) + i % 2, FEATURE, generator=g)
        for b, n_b in enumerate(lengths.tolist()):
            x[b, n_b:] = float("nan")
        out.append((x, lengths))
    return out


def _dims_of(raw_batch, feature):
    x, lengths = raw_batch
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(lengths, (batch,)), name="time")
    return dt.Tensor(x, (batch, time, feature)), batch, time


def _run(model, args) -> dict:
    with torch.no_grad():
        return model(*args)


def _same(got: dict, want: dict) -> bool:
    return got.keys() == want.keys() and all(
        g.shape == w.shape and torch.allclose(g, w, rtol=1e-5, atol=1e-6, equal_nan=True)
        for g, w in ((got[k], want[k]) for k in want))


@pytest.fixture
def tiny_switch_interval():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


def _run_in_threads(worker, errors: list):
    """worker(k) in N_THREADS threads at once, k = 0 .. N_THREADS - 1; fails with the errors they reported."""
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, "\n".join(errors[:10])


def test_threads_give_sequential_results(tiny_switch_interval):
    torch.manual_seed(0)
    threads_before = torch.get_num_threads()
    torch.set_num_threads(1)  # bitwise-stable kernels; the threads here are the Python ones
    try:
        feature = dt.Dim(FEATURE, name="feature")
        shared_model = Model(feature).eval()
        own_models = [Model(feature).eval() for _ in range(N_THREADS // 2)]
        for m in own_models:
            m.load_state_dict(shared_model.state_dict())
        raw_batches = _batches(12)
        # Batches whose Dims every thread uses (their masks, derived dims and plans are shared).
        shared_batches = [_dims_of(b, feature) for b in raw_batches[:6]]
        expected = [_run(shared_model, _dims_of(b, feature)) for b in raw_batches]
        errors, counts = [], [0] * N_THREADS
        deadline = time.monotonic() + DURATION_S

        def worker(k: int):
            rng = random.Random(k)
            model = shared_model if k % 2 == 0 else own_models[k // 2]
            try:
                while time.monotonic() < deadline:
                    i = rng.randrange(len(raw_batches))
                    # new Dims each call, or a shared batch's Dims
                    args = shared_batches[i] if i < len(shared_batches) and rng.random() < 0.5 else \
                        _dims_of(raw_batches[i], feature)
                    got = _run(model, args)
                    if not _same(got, expected[i]):
                        errors.append(f"thread {k}: batch {i} differs from the sequential run")
                        return
                    counts[k] += 1
            except BaseException as e:  # noqa: B902 -- reported below, with the thread
                errors.append(f"thread {k}: {type(e).__name__}: {e}")

        _run_in_threads(worker, errors)
        assert all(c > 0 for c in counts), counts
        # The caches the threads filled still give the sequential results.
        for i, b in enumerate(raw_batches):
            args = shared_batches[i] if i < len(shared_batches) else _dims_of(b, feature)
            assert _same(_run(shared_model, args), expected[i]), i
    finally:
        torch.set_num_threads(threads_before)


def test_threads_deriving_the_same_dims_get_one_object(tiny_switch_interval):
    """Dim math, masks and merged dims made concurrently on shared Dims: every thread gets the same
    cached object (no half-made entry, no duplicate)."""
    batch = dt.Dim(None, name="batch")
    feature, heads = dt.Dim(3, name="feature"), dt.Dim(2, name="heads")
    lengths = torch.arange(1, 9)
    results = [[] for _ in range(N_THREADS)]
    errors = []
    rounds = 200
    bases = [dt.Dim(dt.Tensor(lengths + i, (batch,)), name=f"time{i}") for i in range(rounds)]
    barrier = threading.Barrier(N_THREADS)

    def worker(k: int):
        try:
            barrier.wait()
            for t in bases:
                derived = (t + 1, dt.ceildiv(t, 2), t * 2 - 1, t + t)
                mask = (t + 1).get_mask((batch, t + 1))
                _, merged = dt.merge_dims(dt.Tensor(torch.zeros(8, 3, 2), (batch, feature, heads)),
                                          dims=(feature, heads))
                results[k].append((derived + (merged,), mask.raw))
        except BaseException as e:  # noqa: B902
            errors.append(f"thread {k}: {type(e).__name__}: {e}")

    _run_in_threads(worker, errors)
    for j, t in enumerate(bases):
        first, mask0 = results[0][j]
        assert first[0] is t + 1 and first[1] is dt.ceildiv(t, 2) and first[3] is t + t and first[4].size == 6
        assert first[0].lengths.raw.tolist() == (lengths + j + 1).tolist()
        for k in range(1, N_THREADS):
            derived, mask = results[k][j]
            assert all(a is b for a, b in zip(derived, first)), (j, k)
            assert torch.equal(mask, mask0)
