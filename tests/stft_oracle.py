"""A positional STFT written out per sequence (frames by slicing, the Hann window by its formula,
torch.fft.rfft): the oracle of tests/ops/test_signal.py and tests/audio/test_mel.py."""
import math

import torch


def _hann(n):
    return torch.tensor([0.5 - 0.5 * math.cos(2 * math.pi * i / n) for i in range(n)])


def _stft_one(signal, step, frame, fft, use_frame, left, even):
    """One sequence (T,) -> (fft//2+1, frames) complex, frames where the window span fits in T."""
    span = frame if use_frame else fft
    n = max(0, (len(signal) - span) // step + 1)
    wlen = frame - frame % 2 if even else frame
    window = torch.zeros(fft, dtype=signal.dtype)
    start = 0 if left else (fft - wlen) // 2
    window[start:start + wlen] = _hann(wlen).to(signal.dtype)
    padded = torch.cat([signal, signal.new_zeros(fft)])
    cols = [torch.fft.rfft(padded[i * step:i * step + fft] * window) for i in range(n)]
    return torch.stack(cols, -1) if cols else torch.zeros(fft // 2 + 1, 0, dtype=torch.complex64)
