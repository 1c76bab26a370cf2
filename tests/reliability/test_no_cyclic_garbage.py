"""A batch's objects go by reference counting: with Python's cyclic collector off (as some training
loops run), a training loop neither grows the process nor leaves dimtorch objects for the collector.

Per batch: new batch and time Dims, derived dims (pad, concat), masks and device lengths cached on
them, plans made for them. None may sit in a reference cycle (they would wait for a collection,
with their device memory) and no cache may keep them beyond the batch.
"""
import collections
import gc
import os

import pytest
import torch

import dimtorch as dt

SANITIZED = os.environ.get("DIMTORCH_SANITIZED") == "1"  # ASan's quarantine grows the process
STEPS = 2000


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Model(dt.nn.Module):
    def __init__(self, feature: dt.Dim, hidden: dt.Dim):
        super().__init__()
        self.linear = dt.nn.Linear(feature, hidden)
        self.norm = dt.nn.LayerNorm(hidden)
        self.hidden = hidden

    def forward(self, x: dt.Tensor, batch: dt.Dim, time: dt.Dim) -> dt.Tensor:
        h = self.norm(self.linear(x))
        h, (padded,) = dt.pad(h, axes=time, padding=(1, 2))
        h, both = dt.concat((h, padded), (h, padded))
        p = dt.softmax(h, axis=both)
        m = dt.reduce_mean(p * h, axis=both)
        return dt.reduce_sum(m, axis=(batch, self.hidden))


def _step(model: _Model, feature: dt.Dim, i: int) -> None:
    batch = dt.Dim(None, name="batch")
    lengths = torch.tensor([5 + i % 3, 3, 1 + i % 2])
    time = dt.Dim(dt.Tensor(lengths, (batch,)), name="time")
    x = dt.Tensor(torch.randn(3, int(lengths.max()), feature.size), (batch, time, feature))
    model(x, batch, time).raw.backward()
    for p in model.parameters():
        p.grad = None


@pytest.fixture
def collector_off():
    was_enabled, flags, threads = gc.isenabled(), gc.get_debug(), torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: intra-op threads only cost time on a busy machine
    gc.collect()
    gc.disable()
    yield
    gc.set_debug(flags)
    gc.garbage.clear()
    if was_enabled:
        gc.enable()
    torch.set_num_threads(threads)


def test_training_loop_without_the_collector(collector_off):
    torch.manual_seed(0)
    feature, hidden = dt.Dim(8, name="feature"), dt.Dim(16, name="hidden")
    model = _Model(feature, hidden)
    _assert_steps_leave_nothing(lambda i: _step(model, feature, i), "batches")


def _assert_steps_leave_nothing(step, what: str):
    """50 warm-up steps (allocator pools, lazily made module state), then STEPS steps must leave no dimtorch
    object in a reference cycle, no live Tensor or Dim more, and (unsanitized) under 1 MiB of growth."""
    for i in range(50):
        step(i)
    live_before, rss_before = dt._C._live_counts(), _rss_bytes()
    for i in range(STEPS):
        step(i)
    live_after, rss_after = dt._C._live_counts(), _rss_bytes()
    gc.set_debug(gc.DEBUG_SAVEALL)  # keep what the collector finds, to name it
    gc.collect()
    cyclic = collections.Counter(type(o).__name__ for o in gc.garbage
                                 if type(o).__module__.startswith("dimtorch") or type(o) in (dt.Tensor, dt.Dim))
    assert not cyclic, f"dimtorch objects in reference cycles after {STEPS} {what}: {dict(cyclic)}"
    assert live_after == live_before, (live_before, live_after)
    if not SANITIZED:
        growth = rss_after - rss_before
        assert growth < 2**20, f"{STEPS} {what} grew the process by {growth / 2**20:.2f} MiB"


def test_derived_dims_masks_and_plans_go_with_their_batch(collector_off):
    """Everything a batch's dims made (derived dims, masks, device lengths, plans, index caches)
    goes when the batch's last object does: here, when the dims are dropped."""
    import weakref
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor([4, 2]), (batch,)), name="time")
    feature = dt.Dim(3, name="feature")
    x = dt.Tensor(torch.randn(2, 4, 3), (batch, time, feature))
    y, (t1,) = dt.pad(x, axes=time, padding=(1, 0))
    z, t2 = dt.concat((x, time), (y, t1))
    dt.reduce_mean(z, axis=t2)
    dt.reverse_sequence(x, axis=time)
    dt.pack_padded(x, dims=(batch, time))
    x + dt.Tensor(torch.randn(3, 2), (feature, batch))
    dt.matmul(x, dt.Tensor(torch.randn(3, 5), (feature, dt.Dim(5, name="out"))), reduce=feature)
    refs = [weakref.ref(o) for o in (batch, time, t1, t2, t1 - 1, dt.ceildiv(time, 2), x, y, z)]
    del batch, time, feature, x, y, z, t1, t2
    assert [r() for r in refs] == [None] * len(refs)


def test_a_derived_dim_outlives_its_operand():
    """Kept on its own (its operand's cache held it), a derived dim keeps its sizes and lengths."""
    import weakref
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor([4, 2]), (batch,)), name="time")
    longer, merged = time + 3, dt.ceildiv(time + 1, 2)
    assert longer is time + 3 and longer.derivation == ("add", time, None, 3)
    time_ref = weakref.ref(time)
    del time
    assert time_ref() is None
    assert longer.derivation is None and longer.lengths.raw.tolist() == [7, 5] and longer.get_max_size() == 7
    assert merged.lengths.raw.tolist() == [3, 2]
    assert (longer + 1).lengths.raw.tolist() == [8, 6]  # dim math on it still works
    m = longer.get_mask()
    assert m.raw.tolist() == [[True] * 7, [True] * 5 + [False] * 2]


def test_concat_dims_hold_their_second_operand_weakly():
    import weakref
    batch = dt.Dim(None, name="batch")
    a = dt.Dim(dt.Tensor(torch.tensor([1, 2]), (batch,)), name="a")
    b = dt.Dim(dt.Tensor(torch.tensor([3, 0]), (batch,)), name="b")
    ab, ba = a + b, b + a  # each cached on its first operand: no cycle between a and b
    assert ab is a + b and ab.derivation == ("concat", a, b, 0)
    b_ref = weakref.ref(b)
    del b, ba
    assert b_ref() is None
    assert ab.derivation is None and ab.lengths.raw.tolist() == [4, 2]


def _rebinding_step(extern, time, feature, model: _Model, i: int) -> None:
    """A step as RETURNN code runs it: the same declared dims, bound to this batch (dimtorch.rf.tensor)."""
    lengths = torch.tensor([5 + i % 3, 3, 1 + i % 2], dtype=torch.int32)
    per_batch = dt.Dim(dt.Tensor(torch.tensor([2, 1, 2]), (extern.batch_dim,)), name="per_batch")
    extern.data.assign_padded_({"data": torch.randn(3, int(lengths.max()), feature.size)}, lengths={time: lengths})
    x = extern.data["data"]
    both = per_batch + time  # A + T: owned by the batch's dim, reached from the declared one
    dt.reduce_sum(dt.Tensor(torch.zeros(3, both.get_max_size()), (extern.batch_dim, both)), axis=both)
    time.get_mask()
    model(x, extern.batch_dim, time).raw.backward()
    for p in model.parameters():
        p.grad = None


def test_rebinding_declared_dims_every_batch_without_the_collector(collector_off):
    """The same declared dims bound to each batch's lengths (RETURNN's way) leave nothing behind: the
    derived dims stay the same objects, the caches of the old lengths go, no reference cycle."""
    from types import SimpleNamespace

    from dimtorch.rf.tensor import Dim, Tensor, TensorDict, batch_dim
    torch.manual_seed(0)
    time = Dim(Tensor("time", [batch_dim], dtype="int32"))
    feature, hidden = dt.Dim(8, name="feature"), dt.Dim(16, name="hidden")
    extern = SimpleNamespace(batch_dim=batch_dim,
                             data=TensorDict({"data": Tensor("data", [batch_dim, time, feature], dtype="float32")}))
    model = _Model(feature, hidden)
    try:
        _assert_steps_leave_nothing(lambda i: _rebinding_step(extern, time, feature, model, i), "rebound batches")
    finally:
        extern.data.reset_content()
