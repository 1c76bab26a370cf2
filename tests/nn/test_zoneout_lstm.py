"""ZoneoutLSTM against an LSTM loop written by hand in torch, per sequence (forward and backward on padded
batches with NaN/1e30 padding), against torch.nn.LSTM without zoneout, zoneout in training, steps and
state passing, batch independence, errors."""
import pytest
import torch

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, check_batch_independence, make_padded_batch
from nn_layer_check import check_layer

OUT = 5


def _torch_zoneout_lstm(x, p, lengths, *, cell=0.0, output=0.0, use_zoneout_output=True, forget_bias=0.0,
                        order="ifco"):
    """Eval-mode zoneout LSTM, each sequence alone over its own frames; (B, T, OUT) with 0 on padding."""
    order = order.replace("c", "j")
    ys = torch.zeros(x.shape[0], x.shape[1], OUT)
    rows = []
    for b, n in enumerate(lengths):
        h = c = torch.zeros(OUT)
        frames = []
        for t in range(n):
            z = p["ff_weight"] @ x[b, t] + p["rec_weight"] @ h + (p["bias"] if "bias" in p else 0)
            parts = dict(zip(order, z.split(OUT)))
            new_c = torch.sigmoid(parts["f"] + forget_bias) * c + torch.sigmoid(parts["i"]) * torch.tanh(parts["j"])
            new_h = torch.sigmoid(parts["o"]) * torch.tanh(new_c)
            c = (1 - cell) * new_c + cell * c
            h_z = (1 - output) * new_h + output * h
            frames.append(h_z if use_zoneout_output else new_h)
            h = h_z
        rows.append(torch.stack(frames) if frames else torch.zeros(0, OUT))
    return torch.stack([torch.cat([r, ys.new_zeros(x.shape[1] - r.shape[0], OUT)]) for r in rows])


OPTIONS = {"plain": ({}, {}),
           "zoneout": (dict(zoneout_factor_cell=0.15, zoneout_factor_output=0.05, forget_bias=1.0),
                       dict(cell=0.15, output=0.05, forget_bias=1.0)),
           "old_output_icfo_no_bias": (dict(zoneout_factor_cell=0.3, zoneout_factor_output=0.2,
                                            use_zoneout_output=False, parts_order="icfo", with_bias=False),
                                       dict(cell=0.3, output=0.2, use_zoneout_output=False, order="icfo"))}


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("name", list(OPTIONS))
def test_matches_torch_loop_in_eval(name, pad):
    options, ref = OPTIONS[name]
    pb = make_padded_batch((5, 3, 0, 1), 4, pad_value=pad)
    lstm = dt.nn.ZoneoutLSTM(pb.feature, dt.Dim(OUT, name="out"), **options).eval()
    if lstm.bias is not None:
        with torch.no_grad():
            lstm.bias.raw.normal_()
    out = lstm.out_dim
    check_layer(lstm, lambda m, x: m(x, spatial_dim=pb.time)[0],
                lambda x, p: _torch_zoneout_lstm(x, p, pb.lengths, **ref), pb.x, (pb.batch, pb.time, out))


def test_without_zoneout_is_torchs_lstm():
    pb = make_padded_batch((5, 3), 4, pad_value=0.0)
    lstm = dt.nn.ZoneoutLSTM(pb.feature, dt.Dim(OUT, name="out"))
    ref = torch.nn.LSTM(4, OUT, batch_first=True)
    with torch.no_grad():
        ref.weight_ih_l0.copy_(lstm.ff_weight.raw)
        ref.weight_hh_l0.copy_(lstm.rec_weight.raw)
        ref.bias_ih_l0.normal_()
        lstm.bias.raw.copy_(ref.bias_ih_l0)
        ref.bias_hh_l0.zero_()
    y, state = lstm(pb.x, spatial_dim=pb.time)
    want, (h, c) = ref(pb.x.raw[:1])  # the full-length sequence
    torch.testing.assert_close(y.raw_aligned((pb.batch, pb.time, lstm.out_dim))[0], want[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(state.h.raw_aligned((pb.batch, lstm.out_dim))[0], h[0, 0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(state.c.raw_aligned((pb.batch, lstm.out_dim))[0], c[0, 0], rtol=1e-5, atol=1e-6)


def test_final_state_is_that_of_the_last_valid_frame():
    pb = make_padded_batch((5, 3, 0), 4, pad_value=PAD_NAN)
    lstm = dt.nn.ZoneoutLSTM(pb.feature, dt.Dim(OUT, name="out"), zoneout_factor_cell=0.2).eval()
    _, state = lstm(pb.x, spatial_dim=pb.time)
    for b, n in enumerate(pb.lengths):
        one = make_padded_batch((max(n, 1),), 4, pad_value=0.0)
        one.x.raw[0, :n] = pb.x.raw[b, :n]
        if n == 0:
            assert torch.equal(state.h.raw[b], torch.zeros(OUT)) and torch.equal(state.c.raw[b], torch.zeros(OUT))
            continue
        _, alone = lstm(dt.Tensor(one.x.raw[:, :n], (one.batch, one.time, pb.feature)), spatial_dim=one.time)
        torch.testing.assert_close(state.h.raw[b], alone.h.raw[0])
        torch.testing.assert_close(state.c.raw[b], alone.c.raw[0])


def test_steps_and_state_passing_give_the_full_sequence():
    pb = make_padded_batch((4, 4), 4, pad_value=0.0)
    lstm = dt.nn.ZoneoutLSTM(pb.feature, dt.Dim(OUT, name="out"), zoneout_factor_cell=0.2,
                             zoneout_factor_output=0.1).eval()
    y, final = lstm(pb.x, spatial_dim=pb.time)
    full = y.raw_aligned((pb.batch, pb.time, lstm.out_dim))
    b2 = dt.Dim(2, name="b2")
    zero = lstm.default_initial_state(batch_dims=[b2])
    assert zero.h.dims == (b2, lstm.out_dim) and not zero.c.raw.any()
    state = None
    for t in range(4):
        y_t, state = lstm(dt.Tensor(pb.x.raw[:, t], (pb.batch, pb.feature)), spatial_dim=None, state=state)
        torch.testing.assert_close(y_t.raw_aligned((pb.batch, lstm.out_dim)), full[:, t])
    torch.testing.assert_close(state.c.raw, final.c.raw)
    # two halves with the state between them
    t2 = dt.Dim(2, name="half")
    first = dt.Tensor(pb.x.raw[:, :2], (pb.batch, t2, pb.feature))
    second = dt.Tensor(pb.x.raw[:, 2:], (pb.batch, t2, pb.feature))
    _, mid = lstm(first, spatial_dim=t2)
    y2, end = lstm(second, spatial_dim=t2, state=mid)
    torch.testing.assert_close(y2.raw_aligned((pb.batch, t2, lstm.out_dim)), full[:, 2:])
    torch.testing.assert_close(end.h.raw, final.h.raw)


def test_steps_give_the_full_sequences_gradients_with_two_batch_dims():
    """Step by step (spatial_dim=None, the scan body's call) over two batch dims: the outputs, the input's
    gradient and every parameter's gradient are the full sequence's."""
    b1, b2, time, feat = dt.Dim(2, name="b1"), dt.Dim(3, name="b2"), dt.Dim(4, name="t"), dt.Dim(5, name="f")
    raw = torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(0))
    lstm = dt.nn.ZoneoutLSTM(feat, dt.Dim(OUT, name="out"), zoneout_factor_cell=0.2,
                             zoneout_factor_output=0.1).eval()

    def grads(y_raw, x_raw):
        lstm.zero_grad(set_to_none=True)
        (y_raw * torch.linspace(-1, 1, y_raw.numel()).view(y_raw.shape)).sum().backward()
        return [x_raw.grad] + [p.grad for p in lstm.parameters()]

    x_full = raw.clone().requires_grad_()
    y = lstm(dt.Tensor(x_full, (b1, b2, time, feat)), spatial_dim=time)[0].raw_aligned((b1, b2, time, lstm.out_dim))
    want = grads(y, x_full)
    x_steps = raw.clone().requires_grad_()
    state, ys = None, []
    for t in range(4):  # (b2, b1) order: the steps also align their input
        y_t, state = lstm(dt.Tensor(x_steps[:, :, t].transpose(0, 1), (b2, b1, feat)), spatial_dim=None, state=state)
        ys.append(y_t.raw_aligned((b1, b2, lstm.out_dim)))
    y_steps = torch.stack(ys, 2)
    torch.testing.assert_close(y_steps, y.detach())
    for got, ref in zip(grads(y_steps, x_steps), want):
        torch.testing.assert_close(got, ref)


def test_zoneout_in_training_keeps_previous_units():
    """One step from the zero state: each unit of h is either kept (0) or the new value; about factor kept."""
    batch, feat = dt.Dim(None, name="batch"), dt.Dim(4, name="feature")
    x = dt.Tensor(torch.randn(2000, 4, generator=torch.Generator().manual_seed(0)), (batch, feat))
    lstm = dt.nn.ZoneoutLSTM(feat, dt.Dim(OUT, name="out"), zoneout_factor_output=0.3)
    lstm.eval()
    new_h = lstm(x, spatial_dim=None)[0].raw / 0.7  # eval: 0.7 * new + 0.3 * 0
    lstm.train()
    torch.manual_seed(1)
    h = lstm(x, spatial_dim=None)[0].raw
    kept = h == 0
    assert torch.allclose(h[~kept], new_h[~kept], rtol=1e-5, atol=1e-6)
    assert 0.27 < kept.float().mean() < 0.33


def test_zoneout_of_cell_and_output_drawn_independently():
    """Both factors set (one draw of both masks): from the zero state, a unit's c is kept (0) with about the
    cell factor, its h with about the output factor, and the two masks are independent (both kept: about the
    product); the same on a sequence of one frame as in a single step, from the same seed."""
    batch, feat = dt.Dim(None, name="batch"), dt.Dim(4, name="feature")
    x = dt.Tensor(torch.randn(4000, 4, generator=torch.Generator().manual_seed(0)), (batch, feat))
    lstm = dt.nn.ZoneoutLSTM(feat, dt.Dim(OUT, name="out"), zoneout_factor_cell=0.2, zoneout_factor_output=0.4)
    torch.manual_seed(3)
    h, state = lstm(x, spatial_dim=None)
    c_kept, h_kept = state.c.raw == 0, h.raw == 0
    assert 0.18 < c_kept.float().mean() < 0.22 and 0.38 < h_kept.float().mean() < 0.42
    assert 0.07 < (c_kept & h_kept).float().mean() < 0.09
    one = dt.Dim(1, name="one")
    torch.manual_seed(3)
    y1, state1 = lstm(dt.Tensor(x.raw[:, None], (batch, one, feat)), spatial_dim=one)
    torch.testing.assert_close(y1.raw[:, 0], h.raw)
    torch.testing.assert_close(state1.c.raw, state.c.raw)


def test_batch_independence():
    pb = make_padded_batch((5, 3, 0, 1), 4, pad_value=PAD_NAN)
    lstm = dt.nn.ZoneoutLSTM(pb.feature, dt.Dim(OUT, name="out"), zoneout_factor_cell=0.2).eval()
    check_batch_independence(lambda x, dm: lstm(x, spatial_dim=dm(pb.time))[0], pb.x, pb.batch, pb.time)


def test_errors():
    pb = make_padded_batch((3, 2), 4)
    out = dt.Dim(OUT, name="out")
    with pytest.raises(ValueError, match=r"ZoneoutLSTM\(\): parts_order must name each"):
        dt.nn.ZoneoutLSTM(pb.feature, out, parts_order="iffo")
    with pytest.raises(ValueError, match=r"ZoneoutLSTM\(\): zoneout_factor_cell must be in \[0, 1\)"):
        dt.nn.ZoneoutLSTM(pb.feature, out, zoneout_factor_cell=1.0)
    lstm = dt.nn.ZoneoutLSTM(pb.feature, out)
    with pytest.raises(ValueError, match=r"ZoneoutLSTM\(\): x lacks the spatial_dim"):
        lstm(pb.x, spatial_dim=dt.Dim(3, name="other"))
    with pytest.raises(ValueError, match=r"ZoneoutLSTM\(\): x lacks the in_dim"):
        dt.nn.ZoneoutLSTM(dt.Dim(3, name="other"), out)(pb.x, spatial_dim=pb.time)
    bad = dt.nn.LstmState(dt.zeros((out,)), dt.zeros((out,)))
    with pytest.raises(ValueError, match=r"ZoneoutLSTM\(\): state.h must have dims"):
        lstm(pb.x, spatial_dim=pb.time, state=bad)
