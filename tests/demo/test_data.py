"""Tests of demo/data.py: the in-process task, bucketed batching, padding and host lengths."""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from demo.data import (BucketBatchSampler, SequenceDataset, StepLoader, TaskConfig, collate,  # noqa: E402
                       make_loader, prototypes)

CFG = TaskConfig(num_labels=6, feature_dim=10, max_labels=5, min_duration=3, max_duration=5, max_silence=2)


def test_items_shapes_and_lengths():
    ds = SequenceDataset(CFG, "train", 30)
    assert len(ds) == 30
    for i in range(30):
        x, y = ds[i]
        assert x.dtype == torch.float32 and y.dtype == torch.int64
        assert x.shape == (ds.input_lengths[i], CFG.feature_dim)
        assert y.shape == (ds.target_lengths[i],)
        assert CFG.min_labels <= len(y) <= CFG.max_labels
        assert ((y >= 0) & (y < CFG.num_labels)).all()
        assert (y[1:] != y[:-1]).all()  # no repeated neighbours
        assert len(y) * CFG.min_duration <= len(x) <= len(y) * CFG.max_duration + (len(y) + 1) * CFG.max_silence


def test_deterministic_and_splits_differ():
    a, b = SequenceDataset(CFG, "train", 10), SequenceDataset(CFG, "train", 10)
    for i in range(10):
        assert torch.equal(a[i][0], b[i][0]) and torch.equal(a[i][1], b[i][1])
    assert torch.equal(a[3][0], a[3][0])  # access order does not matter
    dev = SequenceDataset(CFG, "dev", 10)
    assert any(not torch.equal(a[i][1], dev[i][1]) for i in range(10))
    assert torch.equal(prototypes(CFG), prototypes(CFG))  # one task for both splits


def test_collate_pads_with_zeros_and_host_lengths():
    ds = SequenceDataset(CFG, "train", 8)
    items = [ds[i] for i in range(8)]
    b = collate(items)
    assert b.features.shape == (8, max(ds.input_lengths[:8]), CFG.feature_dim)
    assert b.targets.shape == (8, max(ds.target_lengths[:8]))
    for lengths in (b.feature_lengths, b.target_lengths):
        assert lengths.dtype == torch.int64 and lengths.device.type == "cpu"
    for i, (x, y) in enumerate(items):
        n, m = len(x), len(y)
        assert b.feature_lengths[i] == n and b.target_lengths[i] == m
        assert torch.equal(b.features[i, :n], x) and (b.features[i, n:] == 0).all()
        assert torch.equal(b.targets[i, :m], y) and (b.targets[i, m:] == 0).all()


def test_length_zero_items_collate():
    cfg = TaskConfig(num_labels=3, feature_dim=4, min_labels=0, max_labels=2, max_silence=0)
    ds = SequenceDataset(cfg, "train", 40)
    assert 0 in ds.target_lengths and 0 in ds.input_lengths  # empty sequences do occur
    empty = [ds[i] for i in range(40) if ds.input_lengths[i] == 0]
    b = collate(empty)
    assert b.features.shape == (len(empty), 1, 4) and (b.features == 0).all()  # time padded to 1 frame
    assert (b.feature_lengths == 0).all() and (b.target_lengths == 0).all()


def test_bucketing_bounds_and_covers_every_index_once():
    ds = SequenceDataset(CFG, "train", 200)
    sampler = BucketBatchSampler(ds.input_lengths, max_frames=120, max_seqs=8, seed=1)
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert sorted(i for b in batches for i in b) == list(range(200))
        for b in batches:
            longest = max(ds.input_lengths[i] for i in b)
            assert len(b) <= 8 and (len(b) == 1 or longest * len(b) <= 120)
    # bucketed: padding is a small part of the frames
    padded = sum(max(ds.input_lengths[i] for i in b) * len(b) for b in batches)
    assert sum(ds.input_lengths) / padded > 0.8
    # epochs differ, the same epoch repeats, start_batch skips
    assert sampler.batches(0) != sampler.batches(1)
    assert sampler.batches(1) == BucketBatchSampler(ds.input_lengths, max_frames=120, max_seqs=8, seed=1).batches(1)
    sampler.set_epoch(1, start_batch=3)
    assert list(sampler) == sampler.batches(1)[3:] and len(sampler) == len(sampler.batches(1)) - 3


def test_too_long_sequence_gets_its_own_batch():
    sampler = BucketBatchSampler([5, 500, 6], max_frames=100, max_seqs=4, shuffle=False)
    assert sampler.batches(0) == [[0, 2], [1]]


def test_loader_yields_batches():
    ds = SequenceDataset(CFG, "dev", 20)
    batches = list(make_loader(ds, max_frames=100, shuffle=False))
    assert sum(b.features.shape[0] for b in batches) == 20
    assert all(b.features.shape[1] == int(b.feature_lengths.max()) for b in batches)


def test_empty_dataset_errors():
    with pytest.raises(ValueError, match="empty dataset"):
        SequenceDataset(CFG, "train", 0)
    with pytest.raises(ValueError, match="the dataset is empty"):
        BucketBatchSampler([])
    with pytest.raises(ValueError, match="the dataset is empty"):
        make_loader(torch.utils.data.Subset(SequenceDataset(CFG, "train", 3), []))
    with pytest.raises(ValueError, match="no items"):
        collate([])


def _rank_loaders(ds, world_size, **kw):
    return [StepLoader(ds, max_frames=120, max_seqs=8, seed=3, rank=r, world_size=world_size, **kw)
            for r in range(world_size)]


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_step_loader_gives_each_sequence_to_one_rank_once_per_epoch(world_size):
    ds = SequenceDataset(CFG, "train", 61)
    loaders = _rank_loaders(ds, world_size)
    buckets = BucketBatchSampler(ds.input_lengths, max_frames=120, max_seqs=8, seed=3)
    for epoch in (0, 1):
        per_rank = [list(loader.shares(epoch)) for loader in loaders]
        steps = list(zip(*per_rank))
        assert len(steps) == -(-len(buckets.batches(epoch)) // world_size)
        # the same buckets as one process, world_size of them per step, rank r the r-th
        assert [share[0] for step in steps for share in step if share[0]] == buckets.batches(epoch)
        seen = [i for step in steps for share in step for i in share[0]]
        assert sorted(seen) == list(range(61))
        for step in steps:  # every rank agrees on the whole step
            assert all(share[1:] == step[0][1:] for share in step)
            assert sorted(step[0][1]) == sorted(i for share in step for i in share[0])
        # deterministic per epoch; the epochs differ
        assert [list(loader.shares(epoch)) for loader in _rank_loaders(ds, world_size)] == per_rank
    assert list(loaders[0].shares(0)) != list(loaders[0].shares(1))


def test_step_loader_steps_carry_the_whole_steps_counts_and_stand_ins():
    ds = SequenceDataset(CFG, "train", 61)
    loaders = _rank_loaders(ds, 3)
    steps = [list(loader.steps(0)) for loader in loaders]
    assert len({len(s) for s in steps}) == 1
    n_batches = loaders[0].num_batches(0)
    assert n_batches % 3 != 0  # the last step has fewer batches than ranks: stand-ins
    for step in zip(*steps):
        real = [s for s in step if s.has_data]
        assert sum(s.batch.features.shape[0] for s in real) == step[0].seqs
        assert sum(int(s.batch.target_lengths.sum()) for s in real) == step[0].labels
        assert sum(int(s.batch.feature_lengths.sum()) for s in real) == step[0].frames
        assert step[0].batches == len(real)
        for s in step:
            if not s.has_data:
                assert s.batch.features.shape == (1, 1, CFG.feature_dim) and s.batch.feature_lengths.tolist() == [0]
                assert s.batch.target_lengths.tolist() == [0]
    assert sum(s.batches for s in steps[0]) == n_batches


def test_step_loader_resumes_at_a_batch_with_another_world_size():
    ds = SequenceDataset(CFG, "train", 61)
    two, three = _rank_loaders(ds, 2), _rank_loaders(ds, 3)
    # two ranks take 4 steps (8 batches), then three ranks go on from batch 8 of the same epoch
    first = [share[0] for step in list(zip(*(loader.shares(1) for loader in two)))[:4] for share in step]
    taken = sum(len(b) > 0 for b in first)
    rest = [share[0] for step in zip(*(loader.shares(1, start_batch=taken) for loader in three)) for share in step]
    seen = [i for b in first + rest for i in b]
    assert taken == 8 and sorted(seen) == list(range(61))
    with pytest.raises(ValueError, match="rank 2, world_size 2"):
        StepLoader(ds, rank=2, world_size=2)
