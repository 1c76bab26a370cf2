"""Rows of the speech demo's front end on realistic batches: log-mel features from raw 16 kHz audio of whole
utterances (the small and meta sets: 8 utterances of 1.0 to 4.0 s, 64 000 samples padded, the padding NaN), as
the demo's model computes them on every batch. The tiny set keeps rows_signal.py's tiny signal parameters.
rows.py appends these rows to its ROWS: import rows, not this module.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import dimtorch as dt

from .row import Row, _rf
from .rows_signal import _mel_matrix, _params, _torch_window

# Seconds per utterance of each shape set (as many as the set's batch); tiny: samples at its 640 Hz "rate".
SECONDS = {"tiny": (0.06, 0.045, 0.03), "small": (4.0, 3.6, 3.1, 2.7, 2.2, 1.8, 1.4, 1.0)}
SECONDS["meta"] = SECONDS["small"]


def _speech(s):
    """(audio, samples dim) of this side (PyTorch: (audio, valid mask, lengths)), made once; padding NaN."""
    if getattr(s, "_speech", None) is None:
        sr = _params(s)[3]
        lengths = torch.tensor([int(sec * sr) for sec in SECONDS[s.shapes.name]])
        g = torch.Generator().manual_seed(0)
        raw = 0.1 * torch.randn(len(lengths), int(lengths.max()), generator=g)
        raw[torch.arange(raw.shape[1])[None, :] >= lengths[:, None]] = float("nan")
        raw = raw.to(s.device)
        if hasattr(s, "api"):
            samples = s.api.dim(s.api.tensor(lengths, (s.batch,)), "samples")
            s._speech = (s.api.tensor(raw, (s.batch, samples)), samples)
        else:
            valid = (torch.arange(raw.shape[1])[None, :] < lengths[:, None]).to(s.device)
            s._speech = (raw, valid, lengths)
    return s._speech


def _torch_log_mel(s):
    frame, step, fft, _, _ = _params(s)
    audio, valid, lengths = _speech(s)
    n_frames = int(((lengths - frame).clamp(min=-1) // step + 1).max())

    def log_mel(a=audio, m=valid, w=_torch_window(s), pad=(0, fft - frame), mel=_mel_matrix(s)):
        spec = torch.stft(F.pad(torch.where(m, a, 0.0), pad), fft, hop_length=step, win_length=fft, window=w,
                          center=False, return_complex=True)[..., :n_frames]
        return torch.matmul(spec.abs().square().transpose(1, 2), mel).clamp_min(1e-10).log10()
    return log_mel


def _named_log_mel(s, fn):
    audio, samples = _speech(s)
    sr, n = _params(s)[3], _params(s)[4]
    mel = s.api.dim(n, "mel")
    return lambda a=audio, t=samples, m=mel: fn(a, in_spatial_dim=t, out_dim=m, sampling_rate=sr)[0]


SPEECH_ROWS = (
    Row("log_mel_speech", "log10-mel features of a batch of whole utterances (small: 8 of 1-4 s at 16 kHz, 400 of "
        "512 every 160, 80 filters), padding NaN", out=("batch", "frames", "mel"),
        requires=("audio.log_mel_filterbank_from_raw",), tolerance=1e-3,
        torch=_torch_log_mel,
        dimtorch=lambda s: _named_log_mel(s, dt.audio.log_mel_filterbank_from_raw),
        returnn=lambda s: _named_log_mel(s, _rf(s).audio.log_mel_filterbank_from_raw)),
)
