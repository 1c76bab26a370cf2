"""Tests of dt.nn.LSTM against torch.nn.LSTM on packed sequences (copied weights, forward and backward, final state)."""
import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import dimtorch as dt
from helpers import make_padded_batch


def _copy_to_torch(lstm, ref):
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(ref, name + "_l0").copy_(getattr(lstm, name).raw)


@pytest.mark.parametrize("with_state", [False, True])
def test_lstm_vs_torch_packed(with_state):
    lengths = (5, 2, 4)
    pb = make_padded_batch(lengths, feature=3, pad_value=float("nan"))
    out = dt.Dim(4, name="out")
    lstm = dt.nn.LSTM(pb.feature, out)
    ref = torch.nn.LSTM(3, 4, batch_first=True)
    _copy_to_torch(lstm, ref)
    assert lstm.weight_ih.dims == (out * 4, pb.feature)
    state = None
    hx = None
    if with_state:
        h0, c0 = torch.randn(3, 4), torch.randn(3, 4)
        state = dt.nn.LstmState(dt.Tensor(h0, (pb.batch, out)), dt.Tensor(c0, (pb.batch, out)))
        hx = (h0.unsqueeze(0), c0.unsqueeze(0))
    x_raw = torch.nan_to_num(pb.x.raw, nan=0.0)  # torch's packing never reads the padding either
    y, (h, c) = lstm(pb.x, spatial_dim=pb.time, state=state)
    assert y.dims == (pb.batch, pb.time, out) and h.dims == (pb.batch, out)
    packed = pack_padded_sequence(x_raw, torch.tensor(lengths), batch_first=True, enforce_sorted=False)
    y_p, (h_ref, c_ref) = ref(packed, hx)
    y_ref, _ = pad_packed_sequence(y_p, batch_first=True, total_length=5)
    torch.testing.assert_close(y.raw, y_ref)
    torch.testing.assert_close(h.raw, h_ref[0])
    torch.testing.assert_close(c.raw, c_ref[0])
    g, gh = torch.randn_like(y_ref), torch.randn_like(h.raw)
    ((y.raw * g).sum() + (h.raw * gh).sum()).backward()
    ((y_ref * g).sum() + (h_ref[0] * gh).sum()).backward()
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        torch.testing.assert_close(getattr(lstm, name).raw.grad, getattr(ref, name + "_l0").grad)


def test_lstm_static_time_other_order_and_empty_sequence():
    batch, feat, out = dt.Dim(None, name="batch"), dt.Dim(3, name="feature"), dt.Dim(2, name="out")
    time = dt.Dim(4, name="time")
    lstm = dt.nn.LSTM(feat, out)
    ref = torch.nn.LSTM(3, 2, batch_first=True)
    _copy_to_torch(lstm, ref)
    x_raw = torch.randn(2, 4, 3)
    x = dt.Tensor(x_raw.permute(1, 2, 0), (time, feat, batch))
    y, (h, c) = lstm(x, spatial_dim=time)
    assert y.dims == (batch, time, out)
    y_ref, (h_ref, _) = ref(x_raw)
    torch.testing.assert_close(y.raw, y_ref)
    torch.testing.assert_close(h.raw, h_ref[0])
    # a length-0 sequence: zero output, the initial state as final state
    pb = make_padded_batch((3, 0), feature=3, pad_value=float("nan"))
    lstm2 = dt.nn.LSTM(pb.feature, out)
    y, (h, c) = lstm2(pb.x, spatial_dim=pb.time)
    assert torch.equal(y.raw[1], torch.zeros(3, 2)) and torch.equal(h.raw[1], torch.zeros(2))
    assert not torch.isnan(y.raw).any()


def test_lstm_errors():
    pb = make_padded_batch((3,), feature=3)
    lstm = dt.nn.LSTM(pb.feature, dt.Dim(2, name="out"))
    with pytest.raises(ValueError, match=r"LSTM\(\): x lacks the spatial_dim 'other'\(3\)"):
        lstm(pb.x, spatial_dim=dt.Dim(3, name="other"))
    with pytest.raises(ValueError, match=r"LSTM\(\): x lacks the in_dim"):
        dt.nn.LSTM(dt.Dim(5, name="model"), dt.Dim(2, name="out"))(pb.x, spatial_dim=pb.time)
