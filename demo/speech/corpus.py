"""The speech task's Dataset: cached espeak-ng utterances (demo/speech/synthesis.py) with noise added on access.

`SpeechDataset(cfg, split)` synthesizes the split into the cache on first use (under a minute on 2 cores for
the default corpus) and reads it memory-mapped after. Item i is (audio (S,) float32 at 16 kHz, character labels
(L,) int64), the same for the same (cfg, split, i) in every process: the clean utterance at a random gain, with
0..max_edge_silence_s of padding before and after, plus noise (a random segment of one of five colours, white to brown) at a random
SNR, all drawn from the item's own generator. `input_lengths` (samples) and `target_lengths` are known without
making any audio (for the length-bucketed batches).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from demo.data import Batch
from demo.speech.phrases import text_to_labels
from demo.speech.synthesis import SpeechConfig, _rng, ensure_cached


class SpeechDataset(Dataset):
    """One split of the speech corpus (see the module docstring). `texts`, `voices` (espeak-ng voice names),
    `specs` (as dicts), `input_lengths` (samples), `target_lengths` (characters)."""

    def __init__(self, cfg: SpeechConfig = SpeechConfig(), split: str = "train", root: Optional[Path] = None,
                 log=None):
        caller = "demo.speech.SpeechDataset()"
        if split not in ("train", "dev", "test"):
            raise ValueError(f"{caller}: split must be train, dev or test, got {split!r}")
        if cfg.num_utterances(split) < 1:
            raise ValueError(f"{caller}: the {split} split of this config has no utterances; nothing to train or "
                             f"evaluate on")
        self.cfg, self.split = cfg, split
        folder = ensure_cached(cfg, split, root, log=log)
        meta = json.loads((folder / f"{split}.json").read_text())
        self.specs: List[dict] = meta["specs"]
        self._audio = np.load(folder / f"{split}.npy", mmap_mode="r")
        self._offsets = np.load(folder / f"{split}.offsets.npy")
        self.texts = [s["text"] for s in self.specs]
        self.voices = [s["voice"] for s in self.specs]
        self.num_seqs = len(self.specs)
        edge = int(cfg.max_edge_silence_s * cfg.sample_rate)
        self._edges = []
        for i in range(self.num_seqs):
            rng = _rng(cfg, split, i, stream=1)
            self._edges.append((int(rng.integers(0, edge + 1)), int(rng.integers(0, edge + 1))))
        speech = np.diff(self._offsets)
        self.input_lengths = [int(n) + a + b for n, (a, b) in zip(speech, self._edges)]
        self.labels = [np.asarray(text_to_labels(t), np.int64) for t in self.texts]
        self.target_lengths = [len(lab) for lab in self.labels]
        # Noise segments come from a bank per split (white to brown, 2^18 samples each): cutting a segment is
        # cheap, where shaping fresh noise per item by FFT cost ~10 ms.
        bank_rng = _rng(cfg, split, 0, stream=3)  # (stream 3: the bank, not an item)
        self._noise_bank = [coloured_noise(bank_rng, 1 << 18, slope) for slope in (0.0, 0.5, 1.0, 1.5, 2.0)]

    def __len__(self) -> int:
        return self.num_seqs

    @staticmethod
    def collate(items: Sequence) -> Batch:
        return collate_audio(items)

    @staticmethod
    def empty_item():
        return torch.zeros(0), torch.zeros(0, dtype=torch.int64)

    def clean(self, index: int) -> np.ndarray:
        """The cached utterance as float32 in [-1, 1] (no gain, padding or noise)."""
        a, b = self._offsets[index], self._offsets[index + 1]
        return np.asarray(self._audio[a:b], np.float32) / 32768.0

    def __getitem__(self, index: int):
        if not -self.num_seqs <= index < self.num_seqs:
            raise IndexError(f"demo.speech.SpeechDataset: index {index} out of range for {self.num_seqs} utterances")
        index %= self.num_seqs
        cfg = self.cfg
        rng = _rng(cfg, self.split, index, stream=2)
        speech = self.clean(index) * np.float32(10.0 ** (rng.uniform(-18.0, 0.0) / 20.0))
        before, after = self._edges[index]
        audio = np.concatenate([np.zeros(before, np.float32), speech, np.zeros(after, np.float32)])
        bank = self._noise_bank[int(rng.integers(0, len(self._noise_bank)))]
        start = int(rng.integers(0, bank.size - len(audio) + 1)) if len(audio) < bank.size else 0
        noise = np.resize(bank[start:start + len(audio)], len(audio))
        power = float(np.mean(speech.astype(np.float64) ** 2)) if speech.size else 1e-6
        snr_db = rng.uniform(cfg.min_snr_db, cfg.max_snr_db)
        audio += noise * np.float32(np.sqrt(power / 10.0 ** (snr_db / 10.0)))
        return torch.from_numpy(audio), torch.from_numpy(self.labels[index].copy())


def coloured_noise(rng: np.random.Generator, n: int, slope: float) -> np.ndarray:
    """n samples of Gaussian noise with power falling as f^-slope (0: white, 1: pink, 2: brown), unit power."""
    if n == 0:
        return np.zeros(0, np.float32)
    spectrum = np.fft.rfft(rng.standard_normal(n))
    f = np.arange(spectrum.size, dtype=np.float64)
    f[0] = 1.0
    noise = np.fft.irfft(spectrum * f ** (-slope / 2.0), n)
    return (noise / max(float(np.sqrt(np.mean(noise ** 2))), 1e-12)).astype(np.float32)


def collate_audio(items: Sequence) -> Batch:
    """Pads (audio (S,), labels (L,)) items into a Batch: features (B, S) float32 audio, zero padding; the time
    axes are padded to at least 1 sample/label. The lengths are int64 on the host."""
    if len(items) == 0:
        raise ValueError("demo.speech.collate_audio(): got no items; a batch needs at least one utterance")
    audio, labels = zip(*items)
    lengths = torch.tensor([a.shape[0] for a in audio], dtype=torch.int64)
    tgt_len = torch.tensor([lab.shape[0] for lab in labels], dtype=torch.int64)
    x = torch.zeros(len(audio), max(1, int(lengths.max())), dtype=torch.float32)
    y = torch.zeros(len(labels), max(1, int(tgt_len.max())), dtype=torch.int64)
    for i, (a, lab) in enumerate(zip(audio, labels)):
        x[i, : a.shape[0]] = a
        y[i, : lab.shape[0]] = lab
    return Batch(x, lengths, y, tgt_len)


__all__ = ["SpeechDataset", "SpeechConfig", "collate_audio", "coloured_noise"]
