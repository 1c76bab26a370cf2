"""The speech model's feature front end in pure PyTorch (the hand-written twin of dimtorch's): waveform ->
log-mel features -> normalization -> SpecAugment, with positional axes and hand-written masks.

What dimtorch's model does with `dt.audio.log_mel_filterbank_from_raw` and `dt.audio.specaugment` over the
sample dim, this does with torch.stft, its own mel matrix and its own masks, drawing the same random numbers
in the same order from torch's global generator, so that both models train alike from the same seed:

- frames: a 25 ms Hann window (400 samples, zero-padded to a 512-point FFT at its left) every 10 ms (160
  samples), only windows that fit in the sequence: max(0, (S - 400) // 160 + 1) frames for S samples;
- power spectrum |X|^2, times triangular mel filters (mel(f) = 1125 ln(1 + f / 700), 0 Hz to 8 kHz, corners at
  FFT bins, not area-normalized), log10 of max(., 1e-10); then (x - feature_mean) / feature_std;
- SpecAugment in training (Park et al. 2019; RETURNN frontend's schedule): per sequence, with stage factors
  s = (s0, s1, s2) from the training step, a count of time masks uniform in [min(s1 + s2, T), min(max(T // 100,
  2) (s0 + s1 + 2 s2), T)] at distinct random frames, each 1..max_time_mask frames, cut at the sequence's end;
  a count of feature masks uniform in [s1 + s2, 2 s0 + s1 + 2 s2], each 1..max_feature_mask filters; value 0.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class FrontendConfig:
    """The speech model's front end (both implementations). num_mel is ModelConfig.in_dim."""
    sample_rate: int = 16000
    window: int = 400  # samples (25 ms)
    step: int = 160  # samples (10 ms)
    n_fft: int = 512
    num_mel: int = 80
    # A fixed normalization (x - mean) / std near the corpus's statistics (its log10-mel features: mean -2.3, std
    # 1.8 over 40 train utterances; the values set here leave them at mean 0.6, std 0.9, which the encoder's
    # first layer norm takes in its stride).
    feature_mean: float = -3.5
    feature_std: float = 2.0
    max_time_mask: int = 10  # frames (100 ms)
    max_feature_mask: int = 8  # filters
    mask_steps: Tuple[int, int, int] = (0, 1000, 2000)  # training steps at which SpecAugment's stages begin

    def to_dict(self) -> dict:
        d = asdict(self)
        d["mask_steps"] = list(self.mask_steps)
        return d

    @staticmethod
    def from_dict(d: dict) -> "FrontendConfig":
        d = dict(d)
        d["mask_steps"] = tuple(d["mask_steps"])
        return FrontendConfig(**d)

    def stage(self, step: int) -> Tuple[int, int, int]:
        """SpecAugment's stage factors at training step `step`: (1 once step >= mask_steps[i], else 0)."""
        s0, s1, s2 = self.mask_steps
        return int(step >= s0), int(step >= s1), int(step >= s2)

    def frames(self, samples: torch.Tensor) -> torch.Tensor:
        """Feature frames per sequence for `samples` (int64): windows that fit."""
        return torch.div(samples - self.window, self.step, rounding_mode="floor").clamp(min=-1) + 1


def mel_matrix(cfg: FrontendConfig, dtype=torch.float32, device=None) -> torch.Tensor:
    """(n_fft // 2 + 1, num_mel) triangular filters, corners equally spaced in mel from 0 to sample_rate / 2."""
    top = 1125.0 * math.log(1.0 + (cfg.sample_rate / 2.0) / 700.0)
    mels = torch.linspace(0.0, top, cfg.num_mel + 2, dtype=torch.float64)
    corner_bins = (cfg.n_fft / cfg.sample_rate) * 700.0 * torch.expm1(mels / 1125.0)
    bins = torch.arange(cfg.n_fft // 2 + 1, dtype=torch.float64).unsqueeze(1)
    lo, mid, hi = corner_bins[:-2], corner_bins[1:-1], corner_bins[2:]
    up, down = (bins - lo) / (mid - lo), (hi - bins) / (hi - mid)
    tri = torch.clamp(torch.minimum(up, down), min=0.0)
    tri = torch.where((bins > lo) & (bins < hi), tri, 0.0)
    return tri.to(dtype=dtype, device=device)


class LogMelFrontend(nn.Module):
    """audio (B, S) (padding: anything), samples (B,) int64 on the host -> (features (B, T, num_mel), frames
    (B,) int64 on the host); SpecAugment when training (`self.stage` set by the training loop). No parameters."""

    def __init__(self, cfg: FrontendConfig):
        super().__init__()
        self.cfg = cfg
        self.stage = cfg.stage(0)
        self._cache: dict = {}

    def _constants(self, dtype, device):
        key = (dtype, device)
        if key not in self._cache:
            c = self.cfg
            window = F.pad(torch.hann_window(c.window, dtype=dtype, device=device), (0, c.n_fft - c.window))
            self._cache[key] = (window, mel_matrix(c, dtype, device))
        return self._cache[key]

    def forward(self, audio: torch.Tensor, samples: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        c = self.cfg
        frames = c.frames(samples)
        # Sizes from the raw audio (padded to the longest sequence by the batching), never read from the lengths:
        # no host read, so the same code compiles with dynamic sizes.
        n_frames = (audio.shape[1] - c.window) // c.step + 1
        valid = torch.arange(audio.shape[1]).unsqueeze(0) < samples.unsqueeze(1)
        audio = torch.where(valid.to(audio.device, non_blocking=True), audio, 0.0)
        window, mel = self._constants(audio.dtype, audio.device)
        if n_frames > 0:
            spec = torch.stft(F.pad(audio, (0, c.n_fft - c.window)), c.n_fft, hop_length=c.step, win_length=c.n_fft,
                              window=window, center=False, return_complex=True)
            power = spec.abs().square().transpose(1, 2)  # (B, T, freq)
        else:  # no sequence holds a whole window: one padding frame, as the synthetic task's collate does
            power = audio.new_zeros(audio.shape[0], 1, c.n_fft // 2 + 1)
        x = torch.log10(torch.clamp(torch.matmul(power, mel), min=1e-10))
        x = (x - c.feature_mean) * (1.0 / c.feature_std)
        if self.training:
            x = specaugment(x, frames, c, self.stage)
        return x, frames


def _masks(pos: torch.Tensor, amount: torch.Tensor, end_limit, n: int) -> torch.Tensor:
    """(B, n) True on the union of [pos, min(pos + amount, end_limit)) over the slots (amount 0: none)."""
    end = torch.minimum(pos + amount, end_limit) if isinstance(end_limit, torch.Tensor) else \
        (pos + amount).clamp(max=end_limit)
    idx = torch.arange(n, device=pos.device)
    return ((idx >= pos.unsqueeze(-1)) & (idx < end.unsqueeze(-1))).any(1)


def _draw(b: int, n: int, slots: int, max_amount: int, lo, hi, valid, device):
    """One uniform draw per sequence: n frame scores, then one amount per slot, then the count (unless lo ==
    hi, both ints): (the slots' positions, distinct frames, valid ones first; their amounts, 0 beyond the
    count)."""
    fixed = not isinstance(lo, torch.Tensor) and not isinstance(hi, torch.Tensor) and lo == hi
    u = torch.rand(b, n + slots + (0 if fixed else 1), device=device)
    scores = u[:, :n] if valid is None else torch.where(valid, u[:, :n], -1.0)
    pos = torch.topk(scores, slots, dim=-1, sorted=True).indices
    amount = u[:, n:n + slots].mul(max_amount).long().add_(1)  # uniform in [1, max_amount]
    if not fixed:
        count = u[:, -1].mul(hi - lo + 1).add_(lo).long()  # uniform in [lo, hi]
        amount = amount * (torch.arange(slots, device=device) < count.unsqueeze(-1))
    return pos, amount


def specaugment(x: torch.Tensor, frames: torch.Tensor, cfg: FrontendConfig, stage: Tuple[int, int, int]) -> torch.Tensor:
    """x (B, T, F) with time and feature masks set to 0 (see the module docstring); frames (B,) on the host."""
    s0, s1, s2 = stage
    b, t, f = x.shape
    device = x.device
    masked = torch.zeros(b, t, f, dtype=torch.bool, device=device)
    longest = t  # (the raw frames: the longest sequence's when the batch is padded to it, as dt's eager form)
    c = s0 + s1 + 2 * s2
    slots = min(min(max(longest // 100, 2) * c, longest), t)
    if slots > 0 and cfg.max_time_mask > 0:
        lengths = frames.to(device, non_blocking=True)
        lo = lengths.clamp(max=s1 + s2)
        hi = torch.minimum((lengths // 100).clamp(min=2) * c, lengths)
        valid = torch.arange(t, device=device).unsqueeze(0) < lengths.unsqueeze(1)
        pos, amount = _draw(b, t, slots, cfg.max_time_mask, lo, hi, valid, device)
        masked = masked | _masks(pos, amount, lengths.unsqueeze(-1), t).unsqueeze(-1)
    lo, hi = s1 + s2, 2 * s0 + s1 + 2 * s2
    slots = min(hi, f)
    if slots > 0 and cfg.max_feature_mask > 0:
        pos, amount = _draw(b, f, slots, cfg.max_feature_mask, lo, hi, None, device)
        masked = masked | _masks(pos, amount, f, f).unsqueeze(1)
    return torch.where(masked, 0.0, x)


__all__ = ["FrontendConfig", "LogMelFrontend", "mel_matrix", "specaugment"]
