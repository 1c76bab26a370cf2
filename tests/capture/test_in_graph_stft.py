"""dt.stft and dt.audio.log_mel_filterbank_from_raw in their in-graph form (while torch.compile/export/make_fx
trace: no host lengths, the raw axis kept): the same values on every sequence's frames as eagerly, run eagerly
under force_in_graph, with frames beyond the longest sequence in the raw; and under make_fx."""
import torch

import dimtorch as dt
from dimtorch._core.tracing import force_in_graph


def _audio(extra: int = 0):
    batch = dt.Dim(None, name="batch")
    lengths = torch.tensor([1000, 640, 399, 0])
    samples = dt.Dim(dt.Tensor(lengths, dims=(batch,)), name="samples")
    raw = torch.randn(4, 1000 + extra)
    raw[torch.arange(raw.shape[1])[None, :] >= lengths[:, None]] = float("nan")
    return dt.Tensor(raw, dims=(batch, samples)), batch, samples, lengths


def test_log_mel_in_graph_form_matches_eager_on_valid_frames(monkeypatch):
    # force_in_graph reaches Python definitions only: log-mel's stft is the C++ fast path, which a real trace sends
    # to the definition (its raws are not plain tensors); here it is the definition itself.
    from dimtorch.audio import mel as _mel
    from dimtorch.ops import signal as _signal
    monkeypatch.setattr(_mel, "stft", _signal.stft)
    for extra in (0, 333):  # raw as long as the longest sequence, and longer
        x, batch, samples, lengths = _audio(extra)
        mel = dt.Dim(16, name="mel")
        eager, frames = dt.audio.log_mel_filterbank_from_raw(x, in_spatial_dim=samples, out_dim=mel,
                                                             sampling_rate=16000)
        with force_in_graph():
            traced, frames2 = dt.audio.log_mel_filterbank_from_raw(x, in_spatial_dim=samples, out_dim=mel,
                                                                   sampling_rate=16000)
        n = frames.lengths.raw.tolist()
        assert n == [4, 2, 0, 0] and frames2.lengths.raw.tolist() == n
        a, b = eager.raw_aligned((batch, frames, mel)), traced.raw_aligned((batch, frames2, mel))
        assert b.shape[1] == (1000 + extra - 400) // 160 + 1  # the raw's frames, padding included
        for i, k in enumerate(n):
            torch.testing.assert_close(a[i, :k], b[i, :k])
            assert bool(torch.isfinite(b[i, :k]).all())


def test_stft_traces_with_make_fx():
    from torch.fx.experimental.proxy_tensor import make_fx
    lengths = torch.tensor([900, 500])

    def fn(raw, lengths):
        batch = dt.Dim(None, name="batch")
        samples = dt.Dim(dt.Tensor(lengths, dims=(batch,)), name="samples")
        y, frames, freq = dt.stft(dt.Tensor(raw, dims=(batch, samples)), in_spatial_dim=samples, frame_step=160,
                                  frame_length=400, fft_length=512)
        return y.raw_aligned((batch, frames, freq)).abs()

    raw = torch.randn(2, 900)
    graph = make_fx(fn)(raw, lengths)
    torch.testing.assert_close(graph(raw, lengths), fn(raw, lengths))
