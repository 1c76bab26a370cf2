"""FSDP2 test: 2 processes (gloo, CPU) shard a small dt.nn model per layer with dt.nn.fully_shard (batch
norm synced) and train 3 AdamW steps; losses and parameters equal one process training on the combined
batch. Also: sharded parameters read as DTensors outside the forward and as named views of the
unsharded parameters inside it (dt.nn.Module's view cache follows FSDP's parameter swaps)."""
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import dimtorch as dt
from repo_scripts import init_gloo_group, leave_spawned_worker

LENGTHS = [5, 2, 4, 3, 0, 6]  # the combined batch; rank r gets sequences 3r .. 3r+2 (one of length 0)
WORLD = 2
STEPS = 3


class _Probe(dt.nn.Linear):
    """A Linear that records what its weight reads as during forward."""
    seen = []

    def forward(self, x):
        w = self.weight
        _Probe.seen.append((type(w).__name__, type(w.raw).__name__, tuple(w.raw.shape)))
        return super().forward(x)


def _dims():
    return dt.Dim(3, name="feature"), dt.Dim(4, name="hidden"), dt.Dim(2, name="out")


def _make_model(feat, hidden, out):
    torch.manual_seed(0)
    return dt.nn.Sequential(
        _Probe(feat, hidden),
        dt.nn.BatchNorm(hidden),
        dt.nn.FeedForward(hidden, dt.Dim(8, name="ff"), dropout=0.0),
        dt.nn.LayerNorm(hidden),
        dt.nn.Linear(hidden, out),
    ).double()


def _data(step, indices):
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(len(LENGTHS), max(LENGTHS), 3, generator=g, dtype=torch.float64)
    return x[indices], [LENGTHS[i] for i in indices]


def _train(model, dims, indices, scale):
    """Per step (loss, ...): the loss is the sum over valid frames of the step's whole batch over
    their number, times `scale` (FSDP averages gradients over ranks)."""
    feat, hidden, out = dims
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for step in range(STEPS):
        raw, lengths = _data(step, indices)
        batch = dt.Dim(None, name="batch")
        time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
        y = model(dt.Tensor(raw, (batch, time, feat)))
        loss = dt.reduce_sum(y * y, axis=(batch, time, out)).raw / sum(LENGTHS)
        opt.zero_grad()
        (loss * scale).backward()
        opt.step()
        losses.append(loss.detach())
    return losses


def _worker(rank, result_dir):
    torch.set_num_threads(1)
    init_gloo_group(rank, WORLD, result_dir)
    try:
        dims = _dims()
        model = dt.nn.SyncBatchNorm.convert_sync_batchnorm(_make_model(*dims))
        for layer in model:
            dt.nn.fully_shard(layer)
        dt.nn.fully_shard(model)
        outside = model[0].weight
        losses = _train(model, dims, [3 * rank, 3 * rank + 1, 3 * rank + 2], WORLD)
        total = [loss.clone() for loss in losses]
        for t in total:
            dist.all_reduce(t)
        params = [p.full_tensor().detach().clone() for p in model.parameters()]
        buffers = [b.detach().clone() for b in model.buffers()]
        torch.save({"params": params, "buffers": buffers, "losses": total, "probe": _Probe.seen,
                    "outside": (type(outside).__name__, tuple(outside.shape),
                                tuple(outside.to_local().shape))},
                   os.path.join(result_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()
    leave_spawned_worker()  # (only after the work succeeded: a failure's traceback reaches the test)


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
@pytest.mark.slow  # a process group of 2
def test_fsdp_two_processes_match_one_process_on_the_combined_batch(tmp_path):
    mp.spawn(_worker, args=(str(tmp_path),), nprocs=WORLD, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    for r in ranks:
        # Outside the forward the weight is FSDP's sharded DTensor (half the rows here); inside, a
        # named view of the unsharded parameter, every step.
        assert r["outside"] == ("DTensor", (4, 3), (2, 3))
        assert r["probe"] == [("Tensor", "Parameter", (4, 3))] * STEPS
    for a, b in zip(ranks[0]["params"], ranks[1]["params"]):
        assert torch.equal(a, b), "parameters differ across ranks"
    dims = _dims()
    model = _make_model(*dims)
    single = _train(model, dims, list(range(len(LENGTHS))), 1)
    torch.testing.assert_close(torch.stack(ranks[0]["losses"]), torch.stack(single), rtol=1e-5, atol=0)
    for a, b, p0 in zip(ranks[0]["params"], model.parameters(), _make_model(*dims).parameters()):
        torch.testing.assert_close(a, b.detach(), rtol=1e-5, atol=1e-7)
        assert not torch.equal(a, p0.detach())  # training changed it
    # the synced batch norm's running statistics are the combined batch's, on every rank
    for r in ranks:
        for a, b in zip(r["buffers"], model.buffers()):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
