"""DDP test: 2 processes (gloo, CPU) train 3 steps of a small dt.nn model (batch norm synced by
dt.nn.SyncBatchNorm); parameters and running statistics are identical across ranks and equal to one
process training on the combined batch."""
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import dimtorch as dt
from repo_scripts import init_gloo_group, leave_spawned_worker

LENGTHS = [5, 2, 4, 3]  # the combined batch; rank r gets sequences 2r, 2r+1
WORLD = 2
STEPS = 3


def _make_model(feat, hidden, out):
    torch.manual_seed(0)
    return dt.nn.Sequential(
        dt.nn.Linear(feat, hidden),
        dt.nn.BatchNorm(hidden),
        dt.nn.LayerNorm(hidden),
        dt.nn.FeedForward(hidden, dt.Dim(8, name="ff"), dropout=0.0),
        dt.nn.Linear(hidden, out),
    )


def _data(step, indices):
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(len(LENGTHS), max(LENGTHS), 3, generator=g)
    return x[indices], [LENGTHS[i] for i in indices]


def _train(model, dims, indices, total_frames, scale, sync=None):
    feat, hidden, out = dims
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        raw, lengths = _data(step, indices)
        batch = dt.Dim(None, name="batch")
        time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
        y = model(dt.Tensor(raw, (batch, time, feat)))
        loss = dt.reduce_sum(y * y, axis=(batch, time, out)) * (scale / total_frames)
        opt.zero_grad()
        loss.raw.backward()
        opt.step()
    m = model.module if sync else model
    return [p.detach().clone() for p in list(m.parameters()) + list(m.buffers())]


def _worker(rank, result_dir):
    torch.set_num_threads(1)
    init_gloo_group(rank, WORLD, result_dir)
    try:
        dims = (dt.Dim(3, name="feature"), dt.Dim(4, name="hidden"), dt.Dim(2, name="out"))
        model = torch.nn.parallel.DistributedDataParallel(
            dt.nn.SyncBatchNorm.convert_sync_batchnorm(_make_model(*dims)))
        # DDP averages gradients over ranks: each rank's loss is scaled by WORLD so that the sum over
        # all valid frames of the combined batch is divided by their total number, as in one process.
        params = _train(model, dims, [2 * rank, 2 * rank + 1], sum(LENGTHS), WORLD, sync=True)
        torch.save(params, os.path.join(result_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()
    leave_spawned_worker()  # (only after the work succeeded: a failure's traceback reaches the test)


@pytest.mark.slow  # a process group of 2
def test_ddp_two_processes_match_one_process_on_the_combined_batch(tmp_path):
    mp.spawn(_worker, args=(str(tmp_path),), nprocs=WORLD, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    for a, b in zip(*ranks):
        assert torch.equal(a, b), "parameters differ across ranks"
    dims = (dt.Dim(3, name="feature"), dt.Dim(4, name="hidden"), dt.Dim(2, name="out"))
    single = _train(_make_model(*dims), dims, list(range(len(LENGTHS))), sum(LENGTHS), 1)
    initial = list(_make_model(*dims).parameters()) + list(_make_model(*dims).buffers())
    for a, b, p0 in zip(ranks[0], single, initial):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        assert not torch.equal(a, p0.detach())  # training changed it


def test_sync_batch_norm_alone_is_batch_norm_and_convert_keeps_parameters():
    hidden = dt.Dim(4, name="hidden")
    model = _make_model(dt.Dim(3, name="feature"), hidden, dt.Dim(2, name="out"))
    bn = model[1]
    params = [bn.scale.raw, bn.bias.raw]
    keys = list(model.state_dict())
    assert dt.nn.SyncBatchNorm.convert_sync_batchnorm(model) is model
    assert type(bn) is dt.nn.SyncBatchNorm and bn.process_group is None and "synced" in repr(bn)
    assert [bn.scale.raw, bn.bias.raw] == params and list(model.state_dict()) == keys
    # Without a process group (one process) it is BatchNorm: the same output and running statistics.
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor([3, 1]), (batch,)), name="time")
    x = dt.Tensor(torch.randn(2, 3, 4), (batch, time, hidden))
    plain = dt.nn.BatchNorm(hidden)
    torch.testing.assert_close(bn(x).raw_aligned((batch, time, hidden)), plain(x).raw_aligned((batch, time, hidden)))
    torch.testing.assert_close(bn.running_var.raw, plain.running_var.raw)
