"""Tests of dt.nn.LSTM (stacked, bidirectional) vs torch.nn.LSTM on packed sequences: copied weights, fwd, bwd."""
import re

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import dimtorch as dt
from helpers import make_padded_batch

CONFIGS = [(1, False), (2, False), (1, True), (3, True)]


def _torch_name(name: str) -> str:
    """dt.nn.LSTM's parameter name -> torch.nn.LSTM's (dimtorch leaves out the first layer's `_l0`)."""
    return re.sub(r"^(weight|bias)_(ih|hh)(?!_l\d)", r"\1_\2_l0", name)


def _pair(in_size, hidden, num_layers, bidirectional, dropout=0.0, feature=None):
    feature = feature or dt.Dim(in_size, name="feature")
    out = dt.Dim(hidden, name="out")
    lstm = dt.nn.LSTM(feature, out, num_layers=num_layers, bidirectional=bidirectional, dropout=dropout)
    ref = torch.nn.LSTM(in_size, hidden, num_layers=num_layers, bidirectional=bidirectional, dropout=dropout,
                        batch_first=True)
    with torch.no_grad():
        for name, p in lstm.named_parameters():
            getattr(ref, _torch_name(name)).copy_(p)
    assert sorted(_torch_name(n) for n, _ in lstm.named_parameters()) == sorted(n for n, _ in ref.named_parameters())
    return lstm, ref, out


def _torch_run(ref, x_raw, lengths, hx=None):
    packed = pack_padded_sequence(x_raw, torch.tensor(lengths), batch_first=True, enforce_sorted=False)
    y_p, (h, c) = ref(packed, hx)
    y, _ = pad_packed_sequence(y_p, batch_first=True, total_length=x_raw.shape[1])
    return y, h, c


def _state_raw(t: dt.Tensor, lstm, batch) -> torch.Tensor:
    """h or c as torch's (layers * directions, batch, hidden), aligned by name."""
    n = lstm.num_layers * (2 if lstm.bidirectional else 1)
    return t.raw_aligned(lstm.state_dims + (batch, lstm.out_dim)).reshape(n, -1, lstm.out_dim.size)


@pytest.mark.parametrize("num_layers,bidirectional", CONFIGS)
@pytest.mark.parametrize("with_state", [False, True])
def test_lstm_vs_torch_packed(num_layers, bidirectional, with_state):
    lengths = (5, 2, 4)
    pb = make_padded_batch(lengths, feature=3, pad_value=float("nan"))
    lstm, ref, out = _pair(3, 4, num_layers, bidirectional, feature=pb.feature)
    n = num_layers * (2 if bidirectional else 1)
    assert lstm.weight_ih.dims == (out * 4, pb.feature)
    state, hx = None, None
    if with_state:
        h0, c0 = torch.randn(n, 3, 4), torch.randn(n, 3, 4)
        shape = [d.size for d in lstm.state_dims] + [3, 4]
        # given as (batch, out, state dims...): any order is accepted
        dims = lstm.state_dims + (pb.batch, out)
        perm = [len(dims) - 2, len(dims) - 1] + list(range(len(lstm.state_dims)))
        state = dt.nn.LstmState(*(dt.Tensor(s.reshape(shape).permute(perm), tuple(dims[i] for i in perm))
                                  for s in (h0, c0)))
        hx = (h0, c0)
    x_leaf = pb.x.raw.detach().clone().requires_grad_(True)
    x_ref = torch.nan_to_num(pb.x.raw, nan=0.0).requires_grad_(True)  # torch's packing never reads the padding
    y, (h, c) = lstm(dt.Tensor(x_leaf, pb.x.dims), spatial_dim=pb.time, state=state)
    assert y.dims == (pb.batch, pb.time, lstm.y_dim) and y.feature_dim is lstm.y_dim
    assert lstm.y_dim.size == (8 if bidirectional else 4)
    assert h.dims == lstm.state_dims + (pb.batch, out) and c.dims == h.dims
    assert len(lstm.state_dims) == (num_layers > 1) + bidirectional
    y_ref, h_ref, c_ref = _torch_run(ref, x_ref, lengths, hx)
    torch.testing.assert_close(y.raw, y_ref)
    torch.testing.assert_close(_state_raw(h, lstm, pb.batch), h_ref)
    torch.testing.assert_close(_state_raw(c, lstm, pb.batch), c_ref)
    g, gh, gc = torch.randn_like(y_ref), torch.randn_like(h_ref), torch.randn_like(c_ref)
    ((y.raw * g).sum() + (_state_raw(h, lstm, pb.batch) * gh).sum()
     + (_state_raw(c, lstm, pb.batch) * gc).sum()).backward()
    ((y_ref * g).sum() + (h_ref * gh).sum() + (c_ref * gc).sum()).backward()
    for name, p in lstm.named_parameters():
        torch.testing.assert_close(p.grad, getattr(ref, _torch_name(name)).grad, msg=name)
    mask = pb.mask
    torch.testing.assert_close(x_leaf.grad[mask], x_ref.grad[mask])
    assert torch.equal(x_leaf.grad[~mask], torch.zeros_like(x_leaf.grad[~mask]))


@pytest.mark.parametrize("num_layers,bidirectional", CONFIGS)
def test_lstm_batch_independence_and_empty_sequence(num_layers, bidirectional):
    lengths = (4, 0, 2)
    pb = make_padded_batch(lengths, feature=3, pad_value=1e30)
    lstm, _, out = _pair(3, 2, num_layers, bidirectional, feature=pb.feature)
    x_leaf = pb.x.raw.detach().clone().requires_grad_(True)
    y, (h, c) = lstm(dt.Tensor(x_leaf, pb.x.dims), spatial_dim=pb.time)
    assert torch.isfinite(y.raw).all() and torch.isfinite(h.raw).all()
    (y.raw.sum() + h.raw.sum() + c.raw.sum()).backward()
    assert torch.isfinite(x_leaf.grad).all()
    assert torch.equal(x_leaf.grad[~pb.mask], torch.zeros_like(x_leaf.grad[~pb.mask]))
    b = h.dims.index(pb.batch)
    # the empty sequence: y = 0, final state = the initial (zero) state of every layer and direction
    assert torch.equal(y.raw[1], torch.zeros_like(y.raw[1]))
    assert torch.equal(h.raw.select(b, 1), torch.zeros_like(h.raw.select(b, 1)))
    for i, n in enumerate(lengths):
        if n == 0:
            continue
        alone = make_padded_batch((n,), feature=3, pad_value=float("nan"))
        x1 = dt.Tensor(pb.x.raw[i:i + 1, :n], (alone.batch, alone.time, pb.feature))
        y1, (h1, c1) = lstm(x1, spatial_dim=alone.time)
        torch.testing.assert_close(y.raw[i, :n], y1.raw[0])
        assert torch.equal(y.raw[i, n:], torch.zeros_like(y.raw[i, n:]))
        torch.testing.assert_close(h.raw.select(b, i), h1.raw.select(b, 0))
        torch.testing.assert_close(c.raw.select(b, i), c1.raw.select(b, 0))


@pytest.mark.parametrize("num_layers,bidirectional", CONFIGS)
def test_lstm_static_time_other_order(num_layers, bidirectional):
    batch, feat = dt.Dim(None, name="batch"), dt.Dim(3, name="feature")
    time = dt.Dim(4, name="time")
    lstm, ref, out = _pair(3, 2, num_layers, bidirectional, feature=feat)
    x_raw = torch.randn(2, 4, 3)
    y, (h, c) = lstm(dt.Tensor(x_raw.permute(1, 2, 0), (time, feat, batch)), spatial_dim=time)
    assert y.dims == (batch, time, lstm.y_dim)
    y_ref, (h_ref, c_ref) = ref(x_raw)
    torch.testing.assert_close(y.raw, y_ref)
    torch.testing.assert_close(_state_raw(h, lstm, batch), h_ref)
    torch.testing.assert_close(_state_raw(c, lstm, batch), c_ref)


def test_lstm_two_batch_dims_and_default_state():
    beam = dt.Dim(2, name="beam")
    pb = make_padded_batch((3, 1), feature=3, pad_value=float("nan"))
    lstm, ref, out = _pair(3, 2, 2, True, feature=pb.feature)
    x_raw = torch.stack([pb.x.raw, pb.x.raw * 0.5])  # (beam, batch, time, feature)
    y, (h, c) = lstm(dt.Tensor(x_raw, (beam,) + pb.x.dims), spatial_dim=pb.time)
    assert y.dims == (beam, pb.batch, pb.time, lstm.y_dim)
    assert h.dims == (lstm.layer_dim, lstm.direction_dim, beam, pb.batch, out)
    flat = torch.nan_to_num(x_raw, nan=0.0).reshape(4, 3, 3)
    y_ref, h_ref, _ = _torch_run(ref, flat, [3, 1, 3, 1])
    torch.testing.assert_close(y.raw.reshape(4, 3, 4), y_ref)
    torch.testing.assert_close(h.raw.reshape(4, 4, 2), h_ref)
    init = lstm.default_initial_state((beam, dt.Dim(2, name="batch2")))
    assert init.h.dims[:3] == (lstm.layer_dim, lstm.direction_dim, beam) and init.h.raw.shape == (2, 2, 2, 2, 2)
    assert not init.h.raw.any() and not init.c.raw.any()
    zeros = dt.Tensor(torch.zeros(2, 2, 2, 2, 2), h.dims)
    y2, _ = lstm(dt.Tensor(x_raw, (beam,) + pb.x.dims), spatial_dim=pb.time, state=dt.nn.LstmState(zeros, zeros))
    torch.testing.assert_close(y2.raw, y.raw)


def test_lstm_dropout_between_layers_as_torch():
    pb = make_padded_batch((5, 3), feature=3, pad_value=float("nan"))
    lstm, ref, _ = _pair(3, 4, 2, False, dropout=0.5, feature=pb.feature)
    torch.manual_seed(1)
    y, _ = lstm(pb.x, spatial_dim=pb.time)
    torch.manual_seed(1)
    y_ref, _, _ = _torch_run(ref, torch.nan_to_num(pb.x.raw, nan=0.0), [5, 3])
    torch.testing.assert_close(y.raw, y_ref)
    lstm.eval()
    ref.eval()
    y, _ = lstm(pb.x, spatial_dim=pb.time)
    y_ref, _, _ = _torch_run(ref, torch.nan_to_num(pb.x.raw, nan=0.0), [5, 3])
    torch.testing.assert_close(y.raw, y_ref)


def test_lstm_parameter_names_and_dims():
    feat, out = dt.Dim(3, name="feature"), dt.Dim(2, name="out")
    lstm = dt.nn.LSTM(feat, out, num_layers=2, bidirectional=True)
    assert lstm.y_dim is out + out
    assert lstm.weight_ih_l1_reverse.dims == (out * 4, out + out)
    assert lstm.weight_hh_reverse.dims == (out * 4, out)
    assert [n for n, _ in lstm.named_parameters()][:4] == ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]
    assert "num_layers=2, bidirectional=True" in repr(lstm)
    single = dt.nn.LSTM(feat, out, with_bias=False)
    assert single.y_dim is out and single.state_dims == ()
    assert [n for n, _ in single.named_parameters()] == ["weight_ih", "weight_hh"]


def test_lstm_errors():
    pb = make_padded_batch((3,), feature=3)
    lstm = dt.nn.LSTM(pb.feature, dt.Dim(2, name="out"))
    with pytest.raises(ValueError, match=r"LSTM\(\): x lacks the spatial_dim 'other'\(3\)"):
        lstm(pb.x, spatial_dim=dt.Dim(3, name="other"))
    with pytest.raises(ValueError, match=r"LSTM\(\): x lacks the in_dim"):
        dt.nn.LSTM(dt.Dim(5, name="model"), dt.Dim(2, name="out"))(pb.x, spatial_dim=pb.time)
    with pytest.raises(ValueError, match=r"LSTM\(\): num_layers must be an int >= 1, got 0"):
        dt.nn.LSTM(pb.feature, dt.Dim(2, name="out"), num_layers=0)
    with pytest.raises(ValueError, match=r"LSTM\(\): dropout must be in \[0, 1\], got 1.5"):
        dt.nn.LSTM(pb.feature, dt.Dim(2, name="out"), dropout=1.5)
    stacked = dt.nn.LSTM(pb.feature, dt.Dim(2, name="out"), num_layers=2, bidirectional=True)
    zeros = dt.Tensor(torch.zeros(1, 2), (pb.batch, dt.Dim(2, name="out")))
    plain = dt.nn.LstmState(zeros, zeros)  # lacks the layer and direction dims
    with pytest.raises(ValueError, match=r"LSTM\(\): state.h must have dims \('lstm_layer'\(2\), "
                                         r"'lstm_direction'\(2\), 'batch'\(\?\), 'out'\(2\)\), got \('batch'"):
        stacked(pb.x, spatial_dim=pb.time, state=plain)
