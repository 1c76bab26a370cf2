"""Tests of python/dimtorch/ops/signal.py (dt.stft) against a positional STFT written
out per sequence (frames by slicing, the Hann window by its formula, torch.fft.rfft), forward (complex)
and backward (through the power spectrum), with NaN/1e30 padding and each sequence alone."""
import math

import pytest
import torch

import dimtorch as dt
from stft_oracle import _hann, _stft_one  # noqa: F401
from helpers import PAD_LARGE, PAD_NAN, check_against_torch, check_batch_independence_by_position


def _batch(lengths, pad, seed=0):
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
    raw = torch.randn(len(lengths), max(lengths) + 1, generator=torch.Generator().manual_seed(seed))
    for b, n in enumerate(lengths):
        raw[b, n:] = pad
    return batch, time, dt.Tensor(raw, (batch, time))


def _oracle(raw, lengths, n_out, **kw):
    fft = kw["fft"]
    out = torch.zeros(len(lengths), fft // 2 + 1, n_out, dtype=torch.complex64)
    for b, n in enumerate(lengths):
        one = _stft_one(raw[b, :n], **kw)
        out[b, :, :one.shape[-1]] = one
    return out


CASES = [  # step, frame, fft, window_use_frame_length, align_window_left, window_enforce_even
    (3, 8, 8, True, True, True),
    (4, 6, 10, True, True, True),
    (4, 6, 10, True, False, True),
    (2, 5, 8, False, False, False),
    (3, 7, 7, True, True, True),
    (3, 7, 7, True, True, False),
]


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("step,frame,fft,use_frame,left,even", CASES)
def test_stft_against_positional(step, frame, fft, use_frame, left, even, pad):
    lengths = [20, 13, 4, 0]
    batch, time, x = _batch(lengths, pad)
    kw = dict(step=step, frame=frame, fft=fft, use_frame=use_frame, left=left, even=even)
    span = frame if use_frame else fft
    out_lengths = [max(0, (n - span) // step + 1) for n in lengths]

    def run(t):
        y, out_time, freq = dt.stft(t, in_spatial_dim=time, frame_step=step, frame_length=frame, fft_length=fft,
                                    window_use_frame_length=use_frame, align_window_left=left,
                                    window_enforce_even=even)
        assert y.dims == (batch, freq, out_time) and freq.size == fft // 2 + 1 and y.feature_dim is freq
        assert out_time.lengths.raw.tolist() == out_lengths
        return y

    y = run(x)
    n_out = y.raw.shape[-1]
    check_against_torch(run, lambda r: _oracle(r, lengths, n_out, **kw), [x], backward=False, atol=1e-4, rtol=1e-4)
    check_against_torch(lambda t: dt.abs(run(t)) ** 2.0,
                        lambda r: _oracle(r, lengths, n_out, **kw).abs() ** 2.0, [x], atol=1e-3, rtol=1e-4)
    check_batch_independence_by_position(lambda t, m: dt.stft(t, in_spatial_dim=m(time), frame_step=step, frame_length=frame,
                                                              fft_length=fft, window_use_frame_length=use_frame,
                                                              align_window_left=left, window_enforce_even=even)[0],
                                         x, batch, time, atol=1e-4, rtol=1e-4)


def test_stft_other_layouts_and_short_inputs():
    lengths = [9, 6]
    batch, time, x = _batch(lengths, 0.0)
    chan = dt.Dim(2, name="chan")
    x2 = dt.Tensor(torch.stack([x.raw, -x.raw]).permute(2, 1, 0).contiguous(), (time, batch, chan))
    y, out_time, freq = dt.stft(x2, in_spatial_dim=time, frame_step=2, frame_length=4)
    assert y.dims == (batch, chan, freq, out_time)
    ref, _, _ = dt.stft(x, in_spatial_dim=time, frame_step=2, frame_length=4, out_dim=freq, out_spatial_dim=out_time)
    torch.testing.assert_close(y.raw[:, 0], ref.raw)
    torch.testing.assert_close(y.raw[:, 1], -ref.raw)
    # every sequence shorter than a window: no frames
    y, out_time, _ = dt.stft(x, in_spatial_dim=time, frame_step=2, frame_length=16)
    assert out_time.lengths.raw.tolist() == [0, 0] and y.raw.shape[-1] == 0
    static = dt.Dim(10, name="static")
    signal = torch.randn(10)
    y, out_time, _ = dt.stft(dt.Tensor(signal, (static,)), in_spatial_dim=static, frame_step=3, frame_length=4)
    torch.testing.assert_close(y.raw, _stft_one(signal, 3, 4, 4, True, True, True), atol=1e-5, rtol=1e-5)
    assert out_time.size == 3 and y.dims[1] is out_time


def test_stft_errors():
    batch, time, x = _batch([5, 3], 0.0)
    with pytest.raises(ValueError, match=r"dimtorch\.stft\(\): frame_step must be an int >= 1"):
        dt.stft(x, in_spatial_dim=time, frame_step=0, frame_length=4)
    with pytest.raises(ValueError, match=r"dimtorch\.stft\(\): fft_length 4 is smaller than frame_length 5"):
        dt.stft(x, in_spatial_dim=time, frame_step=1, frame_length=5, fft_length=4)
    with pytest.raises(ValueError, match=r"dimtorch\.stft\(\): in_spatial_dim 'other'.* is not a dim of x"):
        dt.stft(x, in_spatial_dim=dt.Dim(3, name="other"), frame_step=1, frame_length=2)
    with pytest.raises(TypeError, match=r"dimtorch\.stft\(\): x must be a real float tensor, got int64"):
        dt.stft(dt.Tensor(torch.zeros(2, 6, dtype=torch.int64), (batch, time)), in_spatial_dim=time, frame_step=1,
                frame_length=2)
    with pytest.raises(ValueError, match=r"dimtorch\.stft\(\): out_dim must be a static Dim of size"):
        dt.stft(x, in_spatial_dim=time, frame_step=1, frame_length=4, out_dim=dt.Dim(4, name="f"))


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_stft_fast_path_is_the_definition(pad):
    """dt.stft's C++ fast path (masked where, one stft with the cached window) gives the definition's dims, values
    and gradients: every CASES configuration, x in other layouts with a channel dim, a static signal, extra frames
    past the longest sequence, float64; the calls it takes never run the definition; half precision, given out
    dims, use_mask=False, no whole window and the errors go to it."""
    from dimtorch.ops import signal as _signal
    from fast_path_checks import both, definition_calls
    lengths = [9, 6, 0, 4]
    batch, time, x = _batch(lengths, pad)
    chan = dt.Dim(2, name="chan")
    x3 = dt.Tensor(torch.stack([x.raw, -x.raw]).permute(2, 1, 0).contiguous(), (time, batch, chan))
    static = dt.Dim(10, name="static")
    signal = dt.Tensor(torch.randn(10, generator=torch.Generator().manual_seed(3)), (static,))
    for step, frame, fft, use_frame, left, even in CASES:
        kw = dict(frame_step=step, frame_length=frame, fft_length=fft, window_use_frame_length=use_frame,
                  align_window_left=left, window_enforce_even=even)
        for src, d in ((x, time), (x3, time), (dt.Tensor(x.raw.double(), x.dims), time), (signal, static)):
            y, out_time, freq = both(dt.stft, _signal.stft, src, in_spatial_dim=d, **kw)
            assert freq.name == "stft-freq" and y.feature_dim is freq and y.dims[-2:] == (freq, out_time)
            assert definition_calls(lambda: dt.stft(src, in_spatial_dim=d, **kw), _signal.stft) == 0
    kw = dict(in_spatial_dim=time, frame_step=2, frame_length=4)
    y, out_time, freq = dt.stft(x, **kw)
    ref, _, _ = _signal.stft(x, **kw, out_dim=freq, out_spatial_dim=out_time)
    assert out_time is _signal.stft(x, **kw)[1]  # the same out dim by dim math
    for handed_over in (dict(x=dt.Tensor(x.raw.half(), x.dims), **kw), dict(x=x, **kw, use_mask=False),
                        dict(x=x, **kw, out_dim=freq), dict(x=x, **kw, out_spatial_dim=out_time),
                        dict(x=x, in_spatial_dim=time, frame_step=2, frame_length=16)):
        both(lambda: dt.stft(**handed_over), lambda: _signal.stft(**handed_over))
        assert definition_calls(lambda: dt.stft(**handed_over), _signal.stft) == 1
    grads = []
    for fn in (dt.stft, _signal.stft):
        raw = x.raw.clone().requires_grad_(True)
        y, _, _ = fn(dt.Tensor(raw, x.dims), **kw)
        y.raw.abs().square().sum().backward()
        grads.append(raw.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)
    with pytest.raises(TypeError, match=r"^dimtorch\.stft\(\): .*unexpected keyword argument 'axis'"):
        dt.stft(x, axis=time, frame_step=2, frame_length=4)
