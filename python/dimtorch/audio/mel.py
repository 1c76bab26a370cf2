"""Mel filterbank and log-mel features from raw audio (dt.audio, RETURNN frontend's rf.audio)."""
from __future__ import annotations

import math
from typing import Optional, Tuple, Union

import torch

from .._C import Dim, Tensor, abs as _abs, cast, log, matmul, maximum, square, stft  # (stft: the C++ fast path)
from ..ops.safe_log import safe_log
from .._core.args import check_tensor, dim_str
from .._core.dim_cache import store_while_both_live
from ..ops.shape import squeeze
from ..ops._support import names_errors


_MATRICES: dict = {}  # (f_min, f_max, sampling_rate, fft_length, n_filters, dtype, device) -> raw
# mel_filterbank's last calls by argument ids, checked by weak refs (no Dim is held): the checks cost more
# than the lookup on small inputs.
_FAST: dict = {}


def _mel(f):
    return 1125.0 * math.log(1.0 + f / 700.0)


@names_errors("dimtorch.audio.mel_filterbank_matrix()")
def mel_filterbank_matrix(*, f_min: float, f_max: float, sampling_rate: float, fft_length: int, n_filters: int,
                          dtype=torch.float32, device=None) -> torch.Tensor:
    """Raw (fft_length // 2 + 1, n_filters): triangular filters on the mel scale m(f) = 1125
    ln(1 + f / 700) (Huang, Acero & Hon 2001, eq. 6.141). Filter i's corners are the FFT bins of n+2
    points equally spaced in mel from f_min to f_max: it rises linearly from corner i-1 to 1 at
    corner i and falls to corner i+1, 0 elsewhere (not area-normalized). Cached per arguments."""
    key = (f_min, f_max, sampling_rate, fft_length, n_filters, dtype, device)
    w = _MATRICES.get(key)
    if w is None:
        lo, hi = _mel(f_min), _mel(f_max)
        mels = torch.tensor([lo + i * (hi - lo) / (n_filters + 1) for i in range(n_filters + 2)], dtype=torch.float64)
        corners = (fft_length / sampling_rate) * 700.0 * (torch.exp(mels / 1125.0) - 1.0)  # in FFT bins
        bins = torch.arange(fft_length // 2 + 1, dtype=torch.float64)[:, None]
        left, mid, right = corners[:-2], corners[1:-1], corners[2:]
        rising = (bins - left) / (mid - left)
        falling = (right - bins) / (right - mid)
        w = torch.where((bins > left) & (bins < right), torch.where(bins < mid, rising, falling), 0.0)
        w = w.to(dtype=dtype, device=device)
        if len(_MATRICES) > 64:
            _MATRICES.clear()
        _MATRICES[key] = w
    return w


@names_errors("dimtorch.audio.mel_filterbank()")
def mel_filterbank(x: Tensor, *, in_dim: Dim, out_dim: Dim, sampling_rate: Union[int, float],
                   fft_length: Optional[int] = None, f_min: Optional[Union[int, float]] = None,
                   f_max: Optional[Union[int, float]] = None) -> Tensor:
    """x (e.g. a power spectrum over in_dim = fft_length // 2 + 1 frequencies, as dt.stft gives it)
    times the mel filterbank matrix (see mel_filterbank_matrix): over x's other dims and out_dim
    (the filters; its size is their number), out_dim the feature dim. fft_length defaults to
    (in_dim - 1) * 2, f_min to 0, f_max to sampling_rate / 2. One matmul with a cached matrix."""
    caller = "dimtorch.audio.mel_filterbank()"
    raw = x.raw if type(x) is Tensor else None
    fast = _FAST.get((id(in_dim), id(out_dim), sampling_rate, fft_length, f_min, f_max, raw.dtype, raw.device)) \
        if raw is not None else None
    if fast is not None and fast[0]() is in_dim and fast[1]() is out_dim and in_dim in x.dims:
        y = matmul(x, Tensor(fast[2], (in_dim, out_dim)), reduce=in_dim)
        return Tensor(y.raw, y.dims, feature_dim=out_dim)
    key = (id(in_dim), id(out_dim), sampling_rate, fft_length, f_min, f_max)
    check_tensor(x, caller)
    for name, d in (("in_dim", in_dim), ("out_dim", out_dim)):
        if not isinstance(d, Dim) or d.size is None:
            raise ValueError(f"{caller}: {name} must be a static Dim, got {d!r}")
    if in_dim not in x.dims:
        raise ValueError(f"{caller}: in_dim {dim_str(in_dim)} is not a dim of x")
    fft = fft_length or (in_dim.size - 1) * 2
    if fft // 2 + 1 != in_dim.size:
        raise ValueError(f"{caller}: in_dim {dim_str(in_dim)} must have fft_length // 2 + 1 = {fft // 2 + 1} "
                         f"frequencies")
    f_min = f_min or 0
    f_max = f_max or sampling_rate / 2.0
    if not 0 <= f_min < f_max:
        raise ValueError(f"{caller}: need 0 <= f_min < f_max, got f_min={f_min}, f_max={f_max}")
    raw = x.raw
    w = mel_filterbank_matrix(f_min=f_min, f_max=f_max, sampling_rate=sampling_rate, fft_length=fft,
                              n_filters=out_dim.size, dtype=raw.dtype, device=raw.device)
    store_while_both_live(_FAST, key + (raw.dtype, raw.device), in_dim, out_dim, w)
    y = matmul(x, Tensor(w, (in_dim, out_dim)), reduce=in_dim)
    return Tensor(y.raw, y.dims, feature_dim=out_dim)


@names_errors("dimtorch.audio.log_mel_filterbank_from_raw()")
def log_mel_filterbank_from_raw(raw_audio: Tensor, *, in_spatial_dim: Dim, out_dim: Dim, sampling_rate: int = 16_000,
                                window_len: float = 0.025, step_len: float = 0.010, n_fft: Optional[int] = None,
                                log_base: Union[int, float] = 10) -> Tuple[Tensor, Dim]:
    """Log-mel features of raw audio over in_spatial_dim (RETURNN frontend's); returns (features,
    out_spatial_dim), the features over (the other dims, out_spatial_dim, out_dim).

    STFT (dt.stft) with windows of int(window_len * sampling_rate) samples every
    int(step_len * sampling_rate), n_fft the next power of two (default); power spectrum |X|^2 in
    raw_audio's dtype; mel_filterbank to out_dim filters; log_base-logarithm of max(., 1e-10).
    Frames per sequence by dim math (each sequence's own length); a feature dim of size 1 in
    raw_audio is squeezed first. (The stft is its C++ fast path; the mel matrix and safe_log are inlined.)"""
    caller = "dimtorch.audio.log_mel_filterbank_from_raw()"
    check_tensor(raw_audio, caller, what="raw_audio")
    feature = raw_audio.feature_dim
    if feature is not None and feature.size == 1 and feature is not in_spatial_dim:
        raw_audio = squeeze(raw_audio, axis=feature)
    window = int(window_len * sampling_rate)
    step = int(step_len * sampling_rate)
    if window < 1 or step < 1:
        raise ValueError(f"{caller}: window_len and step_len must give at least one sample, got {window} and {step}")
    if not n_fft:
        n_fft = 1 << (window - 1).bit_length()
    spectrum, out_spatial_dim, freq_dim = stft(raw_audio, in_spatial_dim=in_spatial_dim, frame_step=step,
                                               frame_length=window, fft_length=n_fft)
    power = cast(square(_abs(spectrum)), raw_audio.dtype)
    if isinstance(out_dim, Dim) and out_dim.size is not None and type(sampling_rate) in (int, float) and \
            sampling_rate > 0:
        # mel_filterbank's own call, its checks known to pass: stft's freq dim is new on every call, so its
        # lookup by the dims' ids would miss (and register weak references) every time. The matrix from
        # mel_filterbank_matrix's cache.
        raw = power.raw
        f_max, fft = sampling_rate / 2.0, (freq_dim.size - 1) * 2
        w = _MATRICES.get((0, f_max, sampling_rate, fft, out_dim.size, raw.dtype, raw.device))
        if w is None:
            w = mel_filterbank_matrix(f_min=0, f_max=f_max, sampling_rate=sampling_rate, fft_length=fft,
                                      n_filters=out_dim.size, dtype=raw.dtype, device=raw.device)
        mel = matmul(power, Tensor(w, (freq_dim, out_dim)), reduce=freq_dim)
        log_mel = log(maximum(mel, 1e-10))  # safe_log(mel, eps=1e-10)
    else:
        mel = mel_filterbank(power, in_dim=freq_dim, out_dim=out_dim, sampling_rate=sampling_rate)
        log_mel = safe_log(mel, eps=1e-10)
    if log_base != math.e:
        log_mel = log_mel * (1.0 / math.log(log_base))
    return Tensor(log_mel.raw, log_mel.dims, feature_dim=out_dim), out_spatial_dim


