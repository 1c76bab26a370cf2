"""Tests of python/dimtorch/audio/mel.py: the mel filterbank matrix against its formula element by element,
mel_filterbank as a positional matmul, log-mel features against a positional pipeline per sequence
(forward and backward, NaN/1e30 padding, each sequence alone); errors name the call."""
import math

import pytest
import torch

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, check_against_torch, check_batch_independence_by_position
from stft_oracle import _stft_one


def _mel_matrix(f_min, f_max, sr, fft, n):
    """The triangular filters, one element at a time (mel(f) = 1125 ln(1 + f/700))."""
    def mel(f):
        return 1125.0 * math.log(1 + f / 700.0)

    def inv(m):
        return 700.0 * (math.exp(m / 1125.0) - 1)

    c = [fft / sr * inv(mel(f_min) + i * (mel(f_max) - mel(f_min)) / (n + 1)) for i in range(n + 2)]
    w = torch.zeros(fft // 2 + 1, n, dtype=torch.float64)
    for j in range(fft // 2 + 1):
        for i in range(1, n + 1):
            if c[i - 1] < j < c[i + 1]:
                w[j, i - 1] = (j - c[i - 1]) / (c[i] - c[i - 1]) if j < c[i] else (c[i + 1] - j) / (c[i + 1] - c[i])
    return w


@pytest.mark.parametrize("f_min,f_max,sr,fft,n", [(0, 8000, 16000, 512, 40), (20, 4000, 8000, 64, 10)])
def test_mel_matrix_against_formula(f_min, f_max, sr, fft, n):
    got = dt.audio.mel_filterbank_matrix(f_min=f_min, f_max=f_max, sampling_rate=sr, fft_length=fft, n_filters=n,
                                         dtype=torch.float64)
    torch.testing.assert_close(got, _mel_matrix(f_min, f_max, sr, fft, n))


def test_mel_filterbank_matmul():
    batch, time = dt.Dim(None, name="batch"), dt.Dim(5, name="time")
    freq, mel = dt.Dim(33, name="freq"), dt.Dim(8, name="mel")
    x = dt.Tensor(torch.rand(2, 33, 5), (batch, freq, time))
    w = _mel_matrix(0, 4000, 8000, 64, 8).float()
    check_against_torch(lambda t: dt.audio.mel_filterbank(t, in_dim=freq, out_dim=mel, sampling_rate=8000),
                        lambda r: torch.einsum("bft,fm->btm", r, w), [x], out_dims=(batch, time, mel),
                        atol=1e-5, rtol=1e-5)
    y = dt.audio.mel_filterbank(x, in_dim=freq, out_dim=mel, sampling_rate=8000, f_min=300, f_max=3000)
    assert y.feature_dim is mel
    torch.testing.assert_close(y.raw_aligned((batch, time, mel)),
                               torch.einsum("bft,fm->btm", x.raw, _mel_matrix(300, 3000, 8000, 64, 8).float()),
                               atol=1e-5, rtol=1e-5)


def _log_mel_one(signal, sr, n_mel, window, step, fft):
    spec = _stft_one(signal, step, window, fft, True, True, True)  # (F, frames)
    power = spec.abs() ** 2
    mel = torch.einsum("ft,fm->tm", power, _mel_matrix(0, sr / 2, sr, fft, n_mel).float())
    return torch.log10(torch.clamp(mel, min=1e-10))


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_log_mel_against_positional_pipeline(pad):
    sr, n_mel = 800, 6  # window 20 samples (fft 32), step 8
    lengths = [100, 61, 19]
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
    raw = torch.randn(3, 101, generator=torch.Generator().manual_seed(0))
    for b, n in enumerate(lengths):
        raw[b, n:] = pad
    x = dt.Tensor(raw, (batch, time))
    mel = dt.Dim(n_mel, name="mel")

    def run(t):
        y, out_time = dt.audio.log_mel_filterbank_from_raw(t, in_spatial_dim=time, out_dim=mel, sampling_rate=sr)
        assert y.dims == (batch, out_time, mel) and y.feature_dim is mel
        assert out_time.lengths.raw.tolist() == [max(0, (n - 20) // 8 + 1) for n in lengths]
        return y

    n_out = run(x).raw.shape[1]

    def oracle(r):
        out = torch.zeros(3, n_out, n_mel)
        for b, n in enumerate(lengths):
            one = _log_mel_one(r[b, :n], sr, n_mel, 20, 8, 32)
            out[b, :one.shape[0]] = one
        return out

    check_against_torch(run, oracle, [x], atol=1e-4, rtol=1e-4)
    check_batch_independence_by_position(
        lambda t, m: dt.audio.log_mel_filterbank_from_raw(t, in_spatial_dim=m(time), out_dim=mel, sampling_rate=sr)[0],
        x, batch, time, atol=1e-4, rtol=1e-4)
    # natural log, a feature dim of size 1 squeezed away
    one = dt.Dim(1, name="channel")
    x1 = dt.Tensor(raw[:, :, None], (batch, time, one), feature_dim=one)
    y_e, _ = dt.audio.log_mel_filterbank_from_raw(x1, in_spatial_dim=time, out_dim=mel, sampling_rate=sr,
                                                  log_base=math.e)
    torch.testing.assert_close(y_e.raw[0, :3], run(x).raw[0, :3] * math.log(10), atol=1e-4, rtol=1e-4)


def test_audio_errors():
    batch, freq, mel = dt.Dim(None, name="batch"), dt.Dim(33, name="freq"), dt.Dim(8, name="mel")
    x = dt.Tensor(torch.rand(2, 33), (batch, freq))
    with pytest.raises(ValueError, match=r"dimtorch\.audio\.mel_filterbank\(\): in_dim 'freq'\(33\) must have "
                                         r"fft_length // 2 \+ 1 = 65"):
        dt.audio.mel_filterbank(x, in_dim=freq, out_dim=mel, sampling_rate=8000, fft_length=128)
    with pytest.raises(ValueError, match=r"mel_filterbank\(\): in_dim 'mel'\(8\) is not a dim of x"):
        dt.audio.mel_filterbank(x, in_dim=mel, out_dim=freq, sampling_rate=8000)
    with pytest.raises(ValueError, match=r"mel_filterbank\(\): need 0 <= f_min < f_max"):
        dt.audio.mel_filterbank(x, in_dim=freq, out_dim=mel, sampling_rate=8000, f_min=5000)
    with pytest.raises(ValueError, match=r"log_mel_filterbank_from_raw\(\): window_len and step_len must give"):
        dt.audio.log_mel_filterbank_from_raw(x, in_spatial_dim=freq, out_dim=mel, sampling_rate=10)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_mel_filterbank_fast_path(pad):
    """dt.audio.mel_filterbank's C++ fast path (in_dim x's last dim: one matmul with the definition's matrix,
    cached on in_dim) against the definition (dimtorch.audio.mel.mel_filterbank): values, dims, markers and
    gradients the same (dynamic frames with NaN/1e30 padding, float64, given fft_length/f_min/f_max, a second call
    from the cache, two filter counts on one in_dim); the calls it takes never run the definition, the others
    (in_dim not last, inconsistent fft_length, bad frequencies, dim=) go to it, its errors named."""
    from fast_path_checks import assert_same, definition_calls
    from dimtorch.audio import mel as _mel
    from helpers import make_padded_batch
    pb = make_padded_batch((4, 2, 0), feature=33, pad_value=pad)
    freq, mel, mel6 = pb.feature, dt.Dim(8, name="mel"), dt.Dim(6, name="mel6")
    x = pb.x
    taken = [(x, dict(in_dim=freq, out_dim=mel, sampling_rate=8000)),
             (x, dict(in_dim=freq, out_dim=mel6, sampling_rate=8000)),
             (x, dict(in_dim=freq, out_dim=mel, sampling_rate=8000.0, fft_length=64, f_min=300, f_max=3000.0)),
             (x, dict(in_dim=freq, out_dim=mel, sampling_rate=8000, f_min=0.0)),
             (dt.cast(x, "float64"), dict(in_dim=freq, out_dim=mel, sampling_rate=8000))]
    for t, kwargs in taken:
        for _ in range(2):  # (the second from the cache on in_dim)
            assert_same(dt.audio.mel_filterbank(t, **kwargs), _mel.mel_filterbank(t, **kwargs))
        assert definition_calls(lambda: dt.audio.mel_filterbank(t, **kwargs), _mel.mel_filterbank) == 0, kwargs
    grads = []
    for fn in (dt.audio.mel_filterbank, _mel.mel_filterbank):
        raw = x.raw.clone().requires_grad_(True)
        y = fn(dt.Tensor(raw, x.dims), in_dim=freq, out_dim=mel, sampling_rate=8000).raw
        (torch.where(torch.isfinite(y), y, 0.0) * torch.linspace(-1, 1, y.numel()).view(y.shape)).sum().backward()
        grads.append(raw.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0, equal_nan=True)
    handed = [(x.copy_transpose((pb.batch, freq, pb.time)), dict(in_dim=freq, out_dim=mel, sampling_rate=8000)),
              (x, dict(in_dim=freq, out_dim=mel, sampling_rate=8000, fft_length=512)),
              (x, dict(in_dim=freq, out_dim=mel, sampling_rate=8000, f_min=5000))]
    for t, kwargs in handed:
        def call(t=t, kwargs=kwargs):
            try:
                return dt.audio.mel_filterbank(t, **kwargs)
            except (TypeError, ValueError) as e:
                assert str(e).startswith("dimtorch.audio.mel_filterbank(): "), e
        assert definition_calls(call, _mel.mel_filterbank) == 1, kwargs
    assert_same(dt.audio.mel_filterbank(*handed[0][:1], **handed[0][1]), _mel.mel_filterbank(*handed[0][:1],
                                                                                           **handed[0][1]))
    with pytest.raises(TypeError, match=r"^dimtorch\.audio\.mel_filterbank\(\): .*'dim'.* use in_dim="):
        dt.audio.mel_filterbank(x, in_dim=freq, out_dim=mel, sampling_rate=8000, dim=2)
