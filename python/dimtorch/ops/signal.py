"""Short-time Fourier transform over a named (dynamic) dim (dt.stft, RETURNN frontend's); frame counts by dim math."""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F

from .._core import tracing as _tracing
from .._C import Dim, Tensor
from .._core import tracing as _tracing
from .conv_args import out_spatial_dim as out_spatial_dim_of
from .._core.args import axis_of, check_tensor, dim_str, dims_str
from ._support import names_errors

_WINDOWS: dict = {}  # (frame_length, fft_length, align_left, enforce_even, dtype, device) -> window raw


def _positive_int(caller: str, what: str, value) -> int:
    if type(value) is not int or value < 1:
        raise ValueError(f"{caller}: {what} must be an int >= 1, got {value!r}")
    return value


def _window(frame_length: int, fft_length: int, align_left: bool, enforce_even: bool, dtype, device) -> torch.Tensor:
    """The Hann window of frame_length (less one when odd and enforce_even) placed in fft_length
    samples: at the left, or centred (zeros around it). Cached, but made in the graph while tracing (a
    cached raw is no tensor of the trace)."""
    traced = _tracing.tracing()
    key = (frame_length, fft_length, align_left, enforce_even, dtype, device)
    w = None if traced else _WINDOWS.get(key)
    if w is None:
        length = frame_length - frame_length % 2 if enforce_even else frame_length
        w = torch.hann_window(length, dtype=dtype, device=device)
        if length < fft_length:
            left = 0 if align_left else (fft_length - length) // 2
            w = F.pad(w, (left, fft_length - length - left))
        if traced:
            return w
        if len(_WINDOWS) > 64:
            _WINDOWS.clear()
        _WINDOWS[key] = w
    return w


@names_errors("dimtorch.stft()")
def stft(x: Tensor, *, in_spatial_dim: Dim, frame_step: int, frame_length: int, fft_length: Optional[int] = None,
         window_use_frame_length: bool = True, align_window_left: bool = True, window_enforce_even: bool = True,
         out_spatial_dim: Optional[Dim] = None, out_dim: Optional[Dim] = None, use_mask: Optional[bool] = None):
    """STFT of x along `in_spatial_dim` with a Hann window (torch.stft, center=False); returns
    (complex Tensor over (x's other dims, out_dim, out_spatial_dim), out_spatial_dim, out_dim).

    out_dim: fft_length // 2 + 1 frequencies (fft_length defaults to frame_length). Frames: one per
    frame_step samples whose window fits in the sequence: out_spatial_dim is by dim math
    ceildiv(T - (w - 1), frame_step), 0 when T < w, lengths per sequence on the host, with w =
    frame_length (window_use_frame_length, TF/SciPy's; the fft_length - frame_length samples past
    the window are zeros) or fft_length (PyTorch/librosa's). align_window_left places a shorter
    window at the left of the fft_length samples (TF), else in the middle (PyTorch);
    window_enforce_even shortens an odd window by one (TF). Padding of a dynamic in_spatial_dim is
    zeroed first (use_mask, default True), so each sequence gets what it gets alone."""
    caller = "dimtorch.stft()"
    check_tensor(x, caller)
    axis = axis_of(x, in_spatial_dim, caller, what="in_spatial_dim")
    frame_step = _positive_int(caller, "frame_step", frame_step)
    frame_length = _positive_int(caller, "frame_length", frame_length)
    fft = frame_length if fft_length is None else _positive_int(caller, "fft_length", fft_length)
    if fft < frame_length:
        raise ValueError(f"{caller}: fft_length {fft} is smaller than frame_length {frame_length}")
    if x.raw.is_complex() or not x.raw.is_floating_point():
        raise TypeError(f"{caller}: x must be a real float tensor, got {x.dtype}")
    window_span = frame_length if window_use_frame_length else fft
    if out_spatial_dim is None:  # make_conv_out_spatial_dims's dim math, without its argument parsing
        out_spatial_dim = out_spatial_dim_of(in_spatial_dim, window_span, frame_step, "valid")
    elif not isinstance(out_spatial_dim, Dim):
        raise TypeError(f"{caller}: out_spatial_dim must be a Dim, got {type(out_spatial_dim).__name__}")
    if out_dim is None:
        out_dim = Dim(fft // 2 + 1, name="stft-freq")
    elif not isinstance(out_dim, Dim) or out_dim.size != fft // 2 + 1:
        raise ValueError(f"{caller}: out_dim must be a static Dim of size fft_length // 2 + 1 = {fft // 2 + 1}, "
                         f"got {out_dim!r}")
    if any(d is out_dim or d is out_spatial_dim for d in x.dims if d is not in_spatial_dim):
        raise ValueError(f"{caller}: out_dim and out_spatial_dim must not be dims of x (dims: {dims_str(x.dims)})")
    masked = use_mask is not False and in_spatial_dim.lengths is not None and \
        all(d in x.dims for d in in_spatial_dim.lengths.dims)
    if masked:
        x = x.copy_masked(0, (in_spatial_dim,))
    batch = x.dims[:axis] + x.dims[axis + 1:]
    raw = x.raw if axis == len(x.dims) - 1 else x.raw.movedim(axis, -1)
    batch_shape = tuple(raw.shape[:-1])
    raw = raw.reshape(math.prod(batch_shape), raw.shape[-1])
    # While tracing there are no host lengths: the raw axis is kept (frames beyond the longest sequence are
    # padding, as for dt.conv in graph) and the frames are what the raw gives.
    traced = _tracing.tracing()
    longest = None if traced else in_spatial_dim.get_max_size()
    if longest is not None and raw.shape[-1] > longest:
        raw = raw[:, :longest]
    n_out = None if traced else out_spatial_dim.get_max_size()
    if window_span < fft:  # windows of frame_length: the samples up to fft_length past the last window are 0
        raw = F.pad(raw, (0, fft - window_span))
    orig_dtype = raw.dtype
    if orig_dtype in (torch.float16, torch.bfloat16):
        raw = raw.float()  # torch.stft has no half-precision kernel on every device
    if raw.shape[-1] < fft:  # no sequence holds a whole window
        y = torch.zeros(raw.shape[0], out_dim.size, 0, dtype=torch.complex64 if raw.dtype != torch.float64
                        else torch.complex128, device=raw.device)
    else:
        window = _window(frame_length, fft, align_window_left, window_enforce_even, raw.dtype, raw.device)
        y = torch.stft(raw, n_fft=fft, hop_length=frame_step, win_length=fft, window=window, center=False,
                       return_complex=True)
    if n_out is not None and y.shape[-1] != n_out:
        if y.shape[-1] < n_out:
            raise ValueError(f"{caller}: out_spatial_dim {dim_str(out_spatial_dim)} has {n_out} frames, the signal "
                             f"gives {y.shape[-1]}")
        y = y[..., :n_out]
    y = y.reshape(batch_shape + tuple(y.shape[1:]))
    return Tensor(y, batch + (out_dim, out_spatial_dim), feature_dim=out_dim), out_spatial_dim, out_dim


__all__ = ["stft"]
