"""Rows of the speech front-end ops: stft, mel_filterbank, log_mel_filterbank_from_raw, safe_log, and the frame
count dim math (make_conv_out_spatial_dims).

The audio is x (batch, time, feature) read as (batch, samples): each sequence's T * F valid samples first,
padding after. What the PyTorch user makes once (masks, windows, the mel matrix) is made by the builder.
rows.py appends these rows to its ROWS: import rows, not this module.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import dimtorch as dt

from .row import Row, _rf

# Per shape set: (frame_length, frame_step, fft_length, sampling_rate, mel filters); the small set is 16 kHz
# speech (25 ms windows every 10 ms); the tiny one fits the tiny signal (log-mel's sampling rate gives the
# same window and step from 25 ms and 10 ms).
SIGNAL = {"tiny": (16, 6, 16, 640, 6), "small": (400, 160, 512, 16000, 80), "meta": (400, 160, 512, 16000, 80)}


def _params(s):
    return SIGNAL[s.shapes.name]


def _audio(s):
    """(audio, samples dim) of this side, made once: x's raw flattened, lengths T * F."""
    if getattr(s, "_audio", None) is None:
        raw = getattr(s, "raw", s).x.reshape(s.shapes.batch, -1)
        lengths = getattr(s, "raw", s).lengths * s.shapes.feature
        if hasattr(s, "api"):
            samples = s.api.dim(s.api.tensor(lengths, (s.batch,)), "samples")
            s._audio = (s.api.tensor(raw, (s.batch, samples)), samples)
        else:
            valid = torch.arange(raw.shape[1], device=s.device)[None, :] < lengths.to(s.device)[:, None]
            s._audio = (raw, valid)
    return s._audio


def _torch_window(s):
    frame, _, fft, _, _ = _params(s)
    return F.pad(torch.hann_window(frame, device=s.device), (0, fft - frame))


def _torch_stft(s):
    frame, step, fft, _, _ = _params(s)
    audio, valid = _audio(s)
    return lambda a=audio, m=valid, w=_torch_window(s), pad=(0, fft - frame): torch.stft(
        F.pad(torch.where(m, a, 0.0), pad), fft, hop_length=step, win_length=fft, window=w, center=False,
        return_complex=True)


def _named_stft(s, fn):
    frame, step, fft, _, _ = _params(s)
    audio, samples = _audio(s)
    return lambda a=audio, t=samples: fn(a, in_spatial_dim=t, frame_step=step, frame_length=frame, fft_length=fft)[0]


def _mel_matrix(s):
    _, _, fft, sr, n = _params(s)
    return dt.audio.mel_filterbank_matrix(f_min=0, f_max=sr / 2, sampling_rate=sr, fft_length=fft, n_filters=n,
                                          device=s.device)


def _power(s):
    """A power spectrum (batch, frames, freq) made once from this side's audio; named over static dims."""
    frame, step, fft, _, _ = _params(s)
    if getattr(s, "_power", None) is None:
        raw = torch.stft(getattr(s, "raw", s).x.reshape(s.shapes.batch, -1).nan_to_num(), fft, hop_length=step,
                         win_length=fft, window=torch.hann_window(fft, device=s.device), center=False,
                         return_complex=True).abs().square().transpose(1, 2).contiguous()
        if hasattr(s, "api"):
            s.frames, s.freq = s.api.dim(raw.shape[1], "frames"), s.api.dim(raw.shape[2], "freq")
            s.mel = s.api.dim(_params(s)[4], "mel")
            raw = s.api.tensor(raw, (s.batch, s.frames, s.freq))
        s._power = raw
    return s._power


def _torch_log_mel(s):
    frame, step, fft, _, _ = _params(s)
    audio, valid = _audio(s)

    def log_mel(a=audio, m=valid, w=_torch_window(s), pad=(0, fft - frame), mel=_mel_matrix(s)):
        spec = torch.stft(F.pad(torch.where(m, a, 0.0), pad), fft, hop_length=step, win_length=fft, window=w,
                          center=False, return_complex=True)
        return torch.matmul(spec.abs().square().transpose(1, 2), mel).clamp_min(1e-10).log10()
    return log_mel


def _named_log_mel(s, fn):
    audio, samples = _audio(s)
    sr, n = _params(s)[3], _params(s)[4]
    mel = s.api.dim(n, "mel")
    return lambda a=audio, t=samples, m=mel: fn(a, in_spatial_dim=t, out_dim=m, sampling_rate=sr)[0]


def _positive(s):
    raw = getattr(s, "raw", s).x.abs()
    if hasattr(s, "api"):
        return s.api.tensor(raw, (s.batch, s.time, s.feature))
    return raw


SIGNAL_ROWS = (
    Row("stft", "STFT of (batch, samples) audio, samples per sequence, padding zeroed; tiny: 16-sample windows, "
        "small: 400 of 512 every 160", out=("batch", "freq", "frames"), requires=("stft",), tolerance=1e-3,
        torch=_torch_stft,
        dimtorch=lambda s: _named_stft(s, dt.stft),
        returnn=lambda s: _named_stft(s, _rf(s).stft)),
    Row("mel_filterbank", "power spectrum (batch, frames, freq) times the mel matrix", out=("batch", "frames", "mel"),
        requires=("audio.mel_filterbank",), tolerance=1e-4,
        torch=lambda s: lambda p=_power(s), w=_mel_matrix(s): torch.matmul(p, w),
        dimtorch=lambda s: lambda p=_power(s), f=s.freq, m=s.mel, sr=_params(s)[3]:
            dt.audio.mel_filterbank(p, in_dim=f, out_dim=m, sampling_rate=sr),
        returnn=lambda s: lambda p=_power(s), f=s.freq, m=s.mel, sr=_params(s)[3], mel=_rf(s).audio.mel_filterbank:
            mel(p, in_dim=f, out_dim=m, sampling_rate=sr)),
    Row("log_mel_from_raw", "log10-mel features from raw audio (stft, |.|^2, mel matrix, log of max(., 1e-10))",
        out=("batch", "frames", "mel"), requires=("audio.log_mel_filterbank_from_raw",), tolerance=1e-3,
        torch=_torch_log_mel,
        dimtorch=lambda s: _named_log_mel(s, dt.audio.log_mel_filterbank_from_raw),
        returnn=lambda s: _named_log_mel(s, _rf(s).audio.log_mel_filterbank_from_raw)),
    Row("safe_log", "log(max(x, 1e-6))", out=("batch", "time", "feature"), requires=("safe_log",),
        torch=lambda s: lambda x=_positive(s): torch.log(torch.clamp_min(x, 1e-6)),
        dimtorch=lambda s: lambda x=_positive(s): dt.safe_log(x, eps=1e-6),
        returnn=lambda s: lambda x=_positive(s), log=_rf(s).safe_log: log(x, eps=1e-6)),
    Row("conv_out_dims", "frame lengths after a window of 3 every 2 (valid); PyTorch: the lengths by hand",
        check="none", meta=False, requires=("make_conv_out_spatial_dims",),
        torch=lambda s: lambda n=s.lengths: torch.div(n - 3, 2, rounding_mode="floor").clamp_min(-1) + 1,
        dimtorch=lambda s: lambda t=[s.time]: dt.make_conv_out_spatial_dims(t, filter_size=3, strides=2,
                                                                            padding="valid"),
        returnn=lambda s: lambda t=[s.time], f=_rf(s).make_conv_out_spatial_dims: f(t, filter_size=3, strides=2,
                                                                                     padding="valid")),
)
