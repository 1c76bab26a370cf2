"""The demo task, made in-process: recognise a label sequence from noisy feature frames (CTC-style).

Each label of a sequence is rendered as a few frames (random duration) of a label-specific prototype
vector plus noise, with short stretches of "silence" (its own prototype, weaker) before, between and
after the labels. A model must find the labels and their order; it never sees the alignment. Lengths
vary from sequence to sequence, so batches are padded and come with their lengths.

- `TaskConfig`: sizes of the task (vocabulary, feature dim, lengths, noise).
- `SequenceDataset`: a seeded `torch.utils.data.Dataset` of (features (T, F) float32, labels (L,)
  int64). Train and dev are the same task (same prototypes) with different sequences.
- `BucketBatchSampler`: length-bucketed batches of indices, bounded by padded frames and sequences.
- `collate`: pads a list of items into a `Batch` of raw tensors (zero padding) plus host lengths.
- `make_loader`: a `DataLoader` with both.
- `StepLoader`: the training steps of N data-parallel ranks (N = 1: one process), as one rank sees
  them: the same bucketed batches on every rank, N per step, one per rank.

Length 0: with `min_labels=0` a sequence may have no labels (its target is empty: CTC then asks
for blanks only); with also `max_silence=0` such a sequence has no frames at all (input length 0).
Both are valid items; `collate` pads the time axes to at least 1 frame so that every batch has a
non-empty raw axis, and the lengths say 0. The models give a finite loss (0 for an empty input with
an empty target) and finite gradients for them.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Iterator, List, NamedTuple, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

_SPLIT_IDS = {"train": 1, "dev": 2, "test": 3}


@dataclass(frozen=True)
class TaskConfig:
    """Sizes of the task. `seed` fixes the task (the prototypes); splits differ in their sequences."""
    num_labels: int = 24
    feature_dim: int = 16
    min_labels: int = 2
    max_labels: int = 12
    min_duration: int = 5  # frames per label, inclusive
    max_duration: int = 10
    max_silence: int = 3  # frames of silence before each label and after the last, 0..max_silence
    noise: float = 2.0  # std of the per-frame noise (prototypes have std 1): single frames are ambiguous
    seed: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    def check(self, caller: str) -> None:
        if self.num_labels < 1 or self.feature_dim < 1:
            raise ValueError(f"{caller}: num_labels and feature_dim must be >= 1, got {self.num_labels}, {self.feature_dim}")
        if not 0 <= self.min_labels <= self.max_labels:
            raise ValueError(f"{caller}: need 0 <= min_labels <= max_labels, got {self.min_labels}, {self.max_labels}")
        if not 1 <= self.min_duration <= self.max_duration:
            raise ValueError(f"{caller}: need 1 <= min_duration <= max_duration, got {self.min_duration}, {self.max_duration}")
        if self.max_silence < 0:
            raise ValueError(f"{caller}: max_silence must be >= 0, got {self.max_silence}")
        if self.num_labels == 1 and self.max_labels > 1:
            raise ValueError(f"{caller}: num_labels=1 cannot make sequences without repeated neighbours")


def prototypes(cfg: TaskConfig) -> torch.Tensor:
    """(num_labels + 1, feature_dim) float32: one prototype per label, the last one for silence."""
    g = torch.Generator().manual_seed(cfg.seed)
    protos = torch.randn(cfg.num_labels + 1, cfg.feature_dim, generator=g)
    protos[-1] *= 0.3  # silence: a weak, but still recognisable, pattern
    return protos


class SequenceDataset(Dataset):
    """`num_seqs` sequences of one split of the task; item i is (features (T, F) float32, labels (L,)
    int64), the same for the same (cfg, split, i) in every process. Neighbouring labels differ (so
    CTC needs no blank between repeats). Alignments (durations) are drawn at construction, so
    `input_lengths`/`target_lengths` are known without making any features; features are made on
    access from a per-item seed."""

    def __init__(self, cfg: TaskConfig = TaskConfig(), split: str = "train", num_seqs: int = 1000):
        caller = "demo.data.SequenceDataset()"
        cfg.check(caller)
        if split not in _SPLIT_IDS:
            raise ValueError(f"{caller}: split must be one of {sorted(_SPLIT_IDS)}, got {split!r}")
        if num_seqs < 1:
            raise ValueError(f"{caller}: num_seqs={num_seqs}: an empty dataset has nothing to train or evaluate on; "
                             f"give num_seqs >= 1")
        self.cfg, self.split, self.num_seqs = cfg, split, num_seqs
        self._base_seed = cfg.seed * 1_000_003 + _SPLIT_IDS[split] * 7_919
        rng = np.random.default_rng(self._base_seed)
        self.labels: List[np.ndarray] = []
        self.durations: List[np.ndarray] = []  # per label
        self.silences: List[np.ndarray] = []  # before each label, and one after the last (len L+1)
        counts = rng.integers(cfg.min_labels, cfg.max_labels + 1, size=num_seqs)
        for n in counts:
            n = int(n)
            if n:
                # Labels without immediate repeats: each next label is drawn from the others.
                first = rng.integers(0, cfg.num_labels)
                steps = rng.integers(1, max(cfg.num_labels, 2), size=n - 1)
                labels = np.concatenate([[first], (first + np.cumsum(steps)) % cfg.num_labels]).astype(np.int64)
            else:
                labels = np.zeros(0, dtype=np.int64)
            self.labels.append(labels)
            self.durations.append(rng.integers(cfg.min_duration, cfg.max_duration + 1, size=n))
            self.silences.append(rng.integers(0, cfg.max_silence + 1, size=n + 1))
        self.input_lengths = [int(d.sum() + s.sum()) for d, s in zip(self.durations, self.silences)]
        self.target_lengths = [len(lab) for lab in self.labels]
        self._protos = prototypes(cfg)

    def __len__(self) -> int:
        return self.num_seqs

    def __getitem__(self, index: int):
        if not -self.num_seqs <= index < self.num_seqs:
            raise IndexError(f"demo.data.SequenceDataset: index {index} out of range for {self.num_seqs} sequences")
        index %= self.num_seqs
        cfg = self.cfg
        labels, durs, sils = self.labels[index], self.durations[index], self.silences[index]
        silence = cfg.num_labels
        frame_class = []
        for lab, dur, sil in zip(labels.tolist(), durs.tolist(), sils[:-1].tolist()):
            frame_class += [silence] * sil + [lab] * dur
        frame_class += [silence] * int(sils[-1])
        g = torch.Generator().manual_seed(self._base_seed * 65_537 + index)
        cls = torch.tensor(frame_class, dtype=torch.int64)
        # Variation: a random gain per sequence (like a loudness), plus white noise per frame.
        gain = 1.0 + 0.2 * torch.randn((), generator=g)
        feats = self._protos[cls] * gain + cfg.noise * torch.randn(len(frame_class), cfg.feature_dim, generator=g)
        return feats.to(torch.float32), torch.from_numpy(labels.copy())


class Batch(NamedTuple):
    """Padded raw tensors and their lengths; lengths are int64 CPU tensors (host)."""
    features: torch.Tensor  # (B, T, F) float32, zero beyond each sequence's length
    feature_lengths: torch.Tensor  # (B,) int64, CPU
    targets: torch.Tensor  # (B, L) int64, zero beyond each sequence's length
    target_lengths: torch.Tensor  # (B,) int64, CPU

    def to(self, device) -> "Batch":
        """Features and targets on `device` (non-blocking); the lengths stay on the host."""
        device = torch.device(device)
        if device.type == "cpu":
            return self
        return Batch(self.features.to(device, non_blocking=True), self.feature_lengths,
                     self.targets.to(device, non_blocking=True), self.target_lengths)


def collate(items: Sequence) -> Batch:
    """Pads (features, labels) items into a Batch; time axes are padded to at least 1 frame."""
    if len(items) == 0:
        raise ValueError("demo.data.collate(): got no items; a batch needs at least one sequence")
    feats, labels = zip(*items)
    feat_len = torch.tensor([f.shape[0] for f in feats], dtype=torch.int64)
    tgt_len = torch.tensor([lab.shape[0] for lab in labels], dtype=torch.int64)
    dim = feats[0].shape[1]
    x = torch.zeros(len(feats), max(1, int(feat_len.max())), dim, dtype=torch.float32)
    y = torch.zeros(len(labels), max(1, int(tgt_len.max())), dtype=torch.int64)
    for i, (f, lab) in enumerate(zip(feats, labels)):
        x[i, : f.shape[0]] = f
        y[i, : lab.shape[0]] = lab
    return Batch(x, feat_len, y, tgt_len)


class BucketBatchSampler(Sampler):
    """Batches of indices of sequences of similar length, so that little of a batch is padding.

    Each epoch: the indices are shuffled (seeded by `seed` and the epoch), cut into windows of
    `bucket_window` batches' worth of sequences, each window sorted by length; batches are then
    filled greedily while (sequences x longest length) <= `max_frames` and sequences <= `max_seqs`
    (one sequence longer than `max_frames` makes a batch of its own), and the batch order is
    shuffled. With shuffle=False the order is by length over the whole dataset, the same every epoch.
    `set_epoch(epoch, start_batch)` picks the epoch and skips its first batches (to resume)."""

    def __init__(self, lengths: Sequence[int], max_frames: int = 4000, max_seqs: int = 64, shuffle: bool = True,
                 seed: int = 0, bucket_window: int = 20):
        caller = "demo.data.BucketBatchSampler()"
        lengths = [int(n) for n in lengths]
        if not lengths:
            raise ValueError(f"{caller}: the dataset is empty (0 sequences); nothing to batch")
        if max_frames < 1 or max_seqs < 1:
            raise ValueError(f"{caller}: max_frames and max_seqs must be >= 1, got {max_frames}, {max_seqs}")
        self.lengths, self.max_frames, self.max_seqs = lengths, max_frames, max_seqs
        self.shuffle, self.seed, self.bucket_window = shuffle, seed, bucket_window
        self.epoch, self.start_batch = 0, 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        self.epoch, self.start_batch = epoch, start_batch

    def batches(self, epoch: int) -> List[List[int]]:
        """All batches of `epoch`, in order."""
        n = len(self.lengths)
        order = list(range(n))
        rnd = random.Random(self.seed * 1_000_003 + epoch)
        if self.shuffle:
            rnd.shuffle(order)
            avg = max(1, sum(self.lengths) // n)
            window = max(1, self.bucket_window * min(self.max_seqs, max(1, self.max_frames // avg)))
        else:
            window = n
        out = []
        for w in range(0, n, window):
            chunk = sorted(order[w:w + window], key=lambda i: self.lengths[i])
            batch, longest = [], 0
            for i in chunk:
                longest_if = max(longest, self.lengths[i], 1)
                if batch and (len(batch) >= self.max_seqs or longest_if * (len(batch) + 1) > self.max_frames):
                    out.append(batch)
                    batch, longest_if = [], max(self.lengths[i], 1)
                batch.append(i)
                longest = longest_if
            if batch:
                out.append(batch)
        if self.shuffle:
            rnd.shuffle(out)
        return out

    def __iter__(self) -> Iterator[List[int]]:
        yield from self.batches(self.epoch)[self.start_batch:]

    def __len__(self) -> int:
        return max(0, len(self.batches(self.epoch)) - self.start_batch)


def make_loader(dataset: SequenceDataset, max_frames: int = 4000, max_seqs: int = 64, shuffle: bool = True,
                seed: int = 0, num_workers: int = 0) -> DataLoader:
    """A DataLoader of `Batch`es of `dataset` with a BucketBatchSampler (reach it as loader.batch_sampler)."""
    if len(dataset) == 0:
        raise ValueError("demo.data.make_loader(): the dataset is empty (0 sequences); nothing to batch")
    sampler = BucketBatchSampler(dataset.input_lengths, max_frames=max_frames, max_seqs=max_seqs, shuffle=shuffle,
                                 seed=seed)
    # Its own generator: making an iterator then draws nothing from torch's global random state (which
    # dropout uses), so a resumed run continues with the same random numbers as an uninterrupted one.
    return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate, num_workers=num_workers,
                      generator=torch.Generator().manual_seed(seed))


class Step(NamedTuple):
    """One rank's part of one training step of all ranks (see StepLoader)."""
    batch: Batch  # this rank's sequences; one empty sequence when it has none (has_data False)
    has_data: bool
    labels: int  # target labels of the whole step, all ranks together
    seqs: int  # sequences of the whole step
    frames: int  # input frames of the whole step
    batches: int  # bucket batches the step took (world_size, fewer at the end of the epoch)


class StepLoader:
    """The training steps of `world_size` data-parallel ranks over `dataset`, as rank `rank` sees them.

    Every rank makes the same length-bucketed batches of an epoch (a BucketBatchSampler with the
    same seed: deterministic per epoch); a step takes the next `world_size` batches and rank r gets
    the r-th, so every sequence is in exactly one rank's batch once per epoch. At the end of an
    epoch a step may have fewer batches than ranks: the ranks without one get a batch of one empty
    sequence (`has_data` False) to join the step's collectives; it adds nothing to the loss (its
    weight is 0), the gradients or the batch-norm statistics (no valid frame). `Step` also carries the
    whole step's label, sequence and frame counts (from the dataset's lengths, on the host: every
    rank knows them without communication), which normalize the loss over all ranks.

    The position within an epoch counts bucket batches, not steps (`steps(epoch, start_batch)`), so a
    run resumed with another number of ranks continues at the same place of the same epoch."""

    def __init__(self, dataset: SequenceDataset, max_frames: int = 4000, max_seqs: int = 64, shuffle: bool = True,
                 seed: int = 0, rank: int = 0, world_size: int = 1):
        if not 0 <= rank < world_size:
            raise ValueError(f"demo.data.StepLoader(): need 0 <= rank < world_size, got rank {rank}, "
                             f"world_size {world_size}")
        self.dataset, self.rank, self.world_size = dataset, rank, world_size
        self.sampler = BucketBatchSampler(dataset.input_lengths, max_frames=max_frames, max_seqs=max_seqs,
                                          shuffle=shuffle, seed=seed)
        # A dataset may bring its own batching (the speech corpus: audio (B, S)) and empty item.
        self._collate = getattr(dataset, "collate", collate)
        empty = dataset.empty_item() if hasattr(dataset, "empty_item") else \
            (torch.zeros(0, dataset.cfg.feature_dim), torch.zeros(0, dtype=torch.int64))
        self._empty = self._collate([empty])

    def shares(self, epoch: int, start_batch: int = 0) -> Iterator[tuple]:
        """(indices of this rank's sequences, indices of the whole step's, batches taken) per step of
        `epoch` from bucket batch `start_batch` on; this rank's indices are [] when it has no batch."""
        batches = self.sampler.batches(epoch)
        w, r = self.world_size, self.rank
        for first in range(start_batch, len(batches), w):
            group = batches[first:first + w]
            yield (group[r] if r < len(group) else []), [i for b in group for i in b], len(group)

    def steps(self, epoch: int, start_batch: int = 0) -> Iterator[Step]:
        """This rank's Steps of `epoch` from bucket batch `start_batch` on."""
        ds = self.dataset
        for mine, everyone, taken in self.shares(epoch, start_batch):
            batch = self._collate([ds[i] for i in mine]) if mine else self._empty
            yield Step(batch, bool(mine), sum(ds.target_lengths[i] for i in everyone), len(everyone),
                       sum(ds.input_lengths[i] for i in everyone), taken)

    def num_batches(self, epoch: int) -> int:
        """Bucket batches in `epoch` (all ranks together)."""
        return len(self.sampler.batches(epoch))


def mean_lengths(dataset: SequenceDataset) -> tuple:
    """(mean input frames, mean labels) per sequence."""
    n = len(dataset)
    return sum(dataset.input_lengths) / n, sum(dataset.target_lengths) / n


__all__ = ["TaskConfig", "SequenceDataset", "Batch", "collate", "BucketBatchSampler", "make_loader", "prototypes",
           "mean_lengths", "Step", "StepLoader"]
