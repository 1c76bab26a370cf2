"""dimtorch.rf's basic modules beside RETURNN frontend's (the same RETURNN state dict loaded into both: RETURNN's
parameter names and layouts): Linear, Embedding, Conv*, TransposedConv1d, LayerNorm, RMSNorm, BatchNorm (its
masked and fused paths, running statistics), LSTM (full sequence and single steps), ZoneoutLSTM; outputs and
gradients on valid frames (ours with NaN padding), each sequence alone; and against positional torch."""
import pytest
import torch
import torch.nn.functional as F

import dimtorch as dt
import dimtorch.rf as drf
from rf_module_sides import Data, copy_their_params, per_sequence_alone, run_pair, their_raw


def _out(data, rdim, ddim, *, time=True):
    def dims(side):
        if side == "theirs":
            return [data.rbatch] + ([data.rtime] if time else []) + [rdim]
        return [data.batch] + ([data.time] if time else []) + [ddim]
    return dims


def test_linear(rf):
    from returnn.tensor import Dim as RfDim
    data = Data(rf)
    rout, out = RfDim(5, name="out"), dt.Dim(5, name="out")
    theirs, ours = rf.Linear(data.rfeat, rout), drf.Linear(data.feat, out)
    assert [tuple(p.shape) for p in ours.state_dict().values()] == [(8, 5), (5,)]  # weight (in, out)
    y, _ = run_pair(rf, data, theirs, ours, lambda: theirs(data.rx), lambda: ours(data.x), _out(data, rout, out))
    assert y.feature_dim is out
    per_sequence_alone(data, lambda x, b, t: ours(x), y, lambda b, t: (b, t, out))
    # positional torch: x @ W + b
    ref = data.x.raw @ ours.weight.raw + ours.bias.raw
    v = data.valid()
    torch.testing.assert_close(y.raw_aligned((data.batch, data.time, out))[v], ref[v])


def test_linear_same_dim(rf):
    data = Data(rf)
    theirs, ours = rf.Linear(data.rfeat, data.rfeat), drf.Linear(data.feat, data.feat)
    y, _ = run_pair(rf, data, theirs, ours, lambda: theirs(data.rx), lambda: ours(data.x),
                    _out(data, data.rfeat, data.feat))
    assert y.dims == (data.batch, data.time, data.feat)


def test_embedding(rf):
    from returnn.tensor import Dim as RfDim
    data = Data(rf, sparse=11)
    rout, out = RfDim(6, name="emb"), dt.Dim(6, name="emb")
    theirs, ours = rf.Embedding(data.rfeat, rout), drf.Embedding(data.feat, out)
    run_pair(rf, data, theirs, ours, lambda: theirs(data.rx), lambda: ours(data.x), _out(data, rout, out))


@pytest.mark.parametrize("kernel,strides,groups,padding", [(3, 1, 1, "same"), (4, 1, 1, "same"), (32, 1, 8, "same"),
                                                           (3, 2, 2, "same"), (3, 1, 1, "valid")])
def test_conv1d(rf, kernel, strides, groups, padding):
    from returnn.tensor import Dim as RfDim
    data = Data(rf)
    rout, out = RfDim(8, name="out"), dt.Dim(8, name="out")
    theirs = rf.Conv1d(data.rfeat, rout, kernel, padding=padding, strides=strides, groups=groups)
    ours = drf.Conv1d(data.feat, out, kernel, padding=padding, strides=strides, groups=groups)
    assert tuple(ours.filter.raw.shape) == (8, 8 // groups, kernel)
    dims = {}

    def call_theirs():
        y, dims["theirs"] = theirs(data.rx, in_spatial_dim=data.rtime)
        return y

    def call_ours():
        y, dims["ours"] = ours(data.x, in_spatial_dim=data.time)
        return y

    from rf_module_sides import copy_their_params as _copy  # noqa: F401
    copy_their_params(rf, theirs, ours)
    rf.init_forward_step_run_ctx()
    ry, y = call_theirs(), call_ours()
    r = their_raw(ry, [data.rbatch, dims["theirs"], rout])
    d = y.raw_aligned((data.batch, dims["ours"], out)).detach()
    r_lens = dims["theirs"].dyn_size_ext.raw_tensor.tolist()
    d_lens = dims["ours"].lengths.raw.tolist()
    assert r_lens == d_lens
    for b, n in enumerate(d_lens):
        torch.testing.assert_close(d[b, :n], r[b, :n].detach(), atol=1e-5, rtol=1e-4)
    assert torch.isfinite(d).all() or padding == "valid"


def test_conv2d_and_transposed(rf):
    from returnn.tensor import Dim as RfDim
    data = Data(rf)
    rc, c = RfDim(1, name="c"), dt.Dim(1, name="c")
    rout, out = RfDim(3, name="out"), dt.Dim(3, name="out")
    theirs = rf.Conv2d(rc, rout, (3, 3), padding="same", strides=(2, 1))
    ours = drf.Conv2d(c, out, (3, 3), padding="same", strides=(2, 1))
    copy_their_params(rf, theirs, ours)
    rf.init_forward_step_run_ctx()
    ry, (rt, rfe) = theirs(rf.expand_dim(data.rx, rc), in_spatial_dims=[data.rtime, data.rfeat])
    y, (t, fe) = ours(dt.expand_dim(data.x, c), in_spatial_dims=[data.time, data.feat])
    r = their_raw(ry, [data.rbatch, rt, rfe, rout])
    d = y.raw_aligned((data.batch, t, fe, out)).detach()
    for b, n in enumerate(t.lengths.raw.tolist()):
        torch.testing.assert_close(d[b, :n], r[b, :n].detach(), atol=1e-5, rtol=1e-4)
    theirs_t = rf.TransposedConv1d(data.rfeat, rout, 3, padding="valid", strides=2)
    ours_t = drf.TransposedConv1d(data.feat, out, 3, padding="valid", strides=2)
    assert tuple(ours_t.filter.raw.shape) == (8, 3, 3)  # (in, out, k)
    copy_their_params(rf, theirs_t, ours_t)
    ry, rt = theirs_t(data.rx, in_spatial_dim=data.rtime)
    y, t = ours_t(data.x, in_spatial_dim=data.time)
    r = their_raw(ry, [data.rbatch, rt, rout])
    d = y.raw_aligned((data.batch, t, out)).detach()
    for b, n in enumerate(t.lengths.raw.tolist()):
        torch.testing.assert_close(d[b, :n], r[b, :n].detach(), atol=1e-5, rtol=1e-4)


def test_layer_norm_and_rms_norm(rf):
    data = Data(rf, pad=1e4)  # (1e30 squared is inf: NaN in padding frames, summed into the scale's gradient)
    theirs, ours = rf.LayerNorm(data.rfeat), drf.LayerNorm(data.feat)
    assert ours.eps == 1e-6 and sorted(ours.state_dict()) == ["bias", "scale"]
    y, _ = run_pair(rf, data, theirs, ours, lambda: theirs(data.rx), lambda: ours(data.x),
                    _out(data, data.rfeat, data.feat))
    ref = F.layer_norm(data.x.raw, (8,), ours.scale.raw, ours.bias.raw, 1e-6)
    torch.testing.assert_close(y.raw_aligned((data.batch, data.time, data.feat))[data.valid()], ref[data.valid()])
    data = Data(rf, pad=1e4)
    theirs, ours = rf.RMSNorm(data.rfeat), drf.RMSNorm(data.feat)
    run_pair(rf, data, theirs, ours, lambda: theirs(data.rx), lambda: ours(data.x), _out(data, data.rfeat, data.feat))


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("use_mask", [None, True])
def test_batch_norm(rf, train, use_mask):
    """The masked path (statistics over valid frames, running stats with the biased variance) in training and
    eval; state-dict names gamma/beta/running_mean/running_variance."""
    data = Data(rf)
    theirs, ours = rf.BatchNorm(data.rfeat, use_mask=use_mask), drf.BatchNorm(data.feat, use_mask=use_mask)
    assert sorted(ours.state_dict()) == ["beta", "gamma", "running_mean", "running_variance"]
    run_pair(rf, data, theirs, ours, lambda: theirs(data.rx), lambda: ours(data.x), _out(data, data.rfeat, data.feat),
             train=train, atol=1e-4)
    for name in ("running_mean", "running_variance"):
        torch.testing.assert_close(getattr(ours, name).raw, getattr(theirs, name).raw_tensor, atol=1e-5, rtol=1e-4)


def test_batch_norm_fused(rf):
    """Without dims with lengths: torch's fused batch norm on both sides (unbiased running variance)."""
    from returnn.tensor import Dim as RfDim
    g = torch.Generator().manual_seed(0)
    raw = torch.randn(4, 5, 6, generator=g)
    rb, rt, rfe = RfDim(4, name="b"), RfDim(5, name="t"), RfDim(6, name="f")
    b, t, fe = dt.Dim(4, name="b"), dt.Dim(5, name="t"), dt.Dim(6, name="f")
    theirs, ours = rf.BatchNorm(rfe), drf.BatchNorm(fe)
    copy_their_params(rf, theirs, ours)
    rf.init_train_step_run_ctx(train_flag=True)
    drf.init_train_step_run_ctx(train_flag=True)
    ry = theirs(rf.convert_to_tensor(raw.clone(), dims=[rb, rt, rfe]))
    y = ours(dt.Tensor(raw.clone(), (b, t, fe)))
    drf.reset_run_ctx()
    torch.testing.assert_close(y.raw_aligned((b, t, fe)), their_raw(ry, [rb, rt, rfe]), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ours.running_variance.raw, theirs.running_variance.raw_tensor)


def _lstm_state(rf, module, data, rmodule_dims):
    return module.default_initial_state(batch_dims=rmodule_dims)


def test_lstm(rf):
    from returnn.tensor import Dim as RfDim, single_step_dim
    data = Data(rf)
    rout, out = RfDim(5, name="out"), dt.Dim(5, name="out")
    theirs, ours = rf.LSTM(data.rfeat, rout), drf.LSTM(data.feat, out)
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == \
        {"ff_weight": (20, 8), "rec_weight": (20, 5), "bias": (20,)}
    rstate = theirs.default_initial_state(batch_dims=[data.rbatch])
    y, _ = run_pair(rf, data, theirs, ours, lambda: theirs(data.rx, state=rstate, spatial_dim=data.rtime)[0],
                    lambda: ours(data.x, state=None, spatial_dim=data.time)[0], _out(data, rout, out))
    per_sequence_alone(data, lambda x, b, t: ours(x, state=None, spatial_dim=t)[0], y, lambda b, t: (b, t, out))
    # single steps (RETURNN: spatial_dim=single_step_dim) equal the full sequence's frames
    from dimtorch.rf._dims import single_step_dim as our_single_step
    state = drf.LstmState(h=dt.zeros((data.batch, out)) if False else None, c=None)
    state = None
    for t in range(3):
        step_x = dt.Tensor(data.raw[:, t].clone(), (data.batch, data.feat))
        ys, state = ours(step_x, state=state, spatial_dim=our_single_step)
        torch.testing.assert_close(ys.raw_aligned((data.batch, out))[:2], y.raw_aligned((data.batch, data.time, out))[:2, t])
    assert isinstance(state, drf.LstmState) and state.h.dims == (data.batch, out)
    rstate = theirs.default_initial_state(batch_dims=[data.rbatch])
    rys, rstate = theirs(rf.convert_to_tensor(data.raw[:, 0].clone(), dims=[data.rbatch, data.rfeat]), state=rstate,
                         spatial_dim=single_step_dim)
    y0, _ = ours(dt.Tensor(data.raw[:, 0].clone(), (data.batch, data.feat)), state=None, spatial_dim=our_single_step)
    torch.testing.assert_close(y0.raw_aligned((data.batch, out)), their_raw(rys, [data.rbatch, rout]), atol=1e-5,
                               rtol=1e-4)


def test_zoneout_lstm(rf):
    from returnn.tensor import Dim as RfDim
    data = Data(rf)
    rout, out = RfDim(5, name="out"), dt.Dim(5, name="out")
    opts = dict(zoneout_factor_cell=0.15, zoneout_factor_output=0.05, use_zoneout_output=False, parts_order="jifo",
                forget_bias=0.0)
    theirs, ours = rf.ZoneoutLSTM(data.rfeat, rout, **opts), drf.ZoneoutLSTM(data.feat, out, **opts)
    rstate = theirs.default_initial_state(batch_dims=[data.rbatch])
    y, _ = run_pair(rf, data, theirs, ours, lambda: theirs(data.rx, state=rstate, spatial_dim=data.rtime)[0],
                    lambda: ours(data.x, state=None, spatial_dim=data.time)[0], _out(data, rout, out))
    # the run context decides about zoneout: a train step draws it, a forward step does not
    drf.init_train_step_run_ctx(train_flag=True)
    assert ours.training
    drf.init_forward_step_run_ctx()
    assert not ours.training
    drf.reset_run_ctx()


def test_lstm_against_torch_lstm():
    """rf's LSTM parameters in torch.nn.LSTM (ff_weight = weight_ih, rec_weight = weight_hh, bias = bias_ih, 0 =
    bias_hh): each sequence alone through torch gives our frames and final state; NaN padding reaches nothing."""
    batch, feat, out = dt.Dim(None, name="b"), dt.Dim(4, name="f"), dt.Dim(3, name="o")
    lengths = [5, 2, 1]
    time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="t")
    raw = torch.randn(3, 5, 4)
    for b, n in enumerate(lengths):
        raw[b, n:] = float("nan")
    x = dt.Tensor(raw.requires_grad_(), (batch, time, feat))
    lstm = drf.LSTM(feat, out)
    with torch.no_grad():
        lstm.bias.raw.normal_()
    y, state = lstm(x, state=None, spatial_dim=time)
    ref = torch.nn.LSTM(4, 3, batch_first=True)
    with torch.no_grad():
        ref.weight_ih_l0.copy_(lstm.ff_weight.raw)
        ref.weight_hh_l0.copy_(lstm.rec_weight.raw)
        ref.bias_ih_l0.copy_(lstm.bias.raw)
        ref.bias_hh_l0.zero_()
    yr = y.raw_aligned((batch, time, out))
    for b, n in enumerate(lengths):
        y_ref, (h_ref, c_ref) = ref(raw.detach()[b:b + 1, :n])
        torch.testing.assert_close(yr[b, :n], y_ref[0], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(state.h.raw_aligned((batch, out))[b], h_ref[0, 0], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(state.c.raw_aligned((batch, out))[b], c_ref[0, 0], atol=1e-5, rtol=1e-4)
    valid = torch.arange(5)[None, :] < torch.tensor(lengths)[:, None]
    torch.where(valid[..., None], yr, 0.0).sum().backward()
    assert torch.isfinite(x.raw.grad).all() and all(torch.isfinite(p.grad).all() for p in lstm.parameters())


def test_conv1d_against_torch_per_sequence():
    batch, feat, out = dt.Dim(None, name="b"), dt.Dim(4, name="f"), dt.Dim(6, name="o")
    lengths = [7, 3]
    time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="t")
    raw = torch.randn(2, 7, 4)
    raw[1, 3:] = float("nan")
    conv = drf.Conv1d(feat, out, 4, padding="same", groups=2)
    y, out_time = conv(dt.Tensor(raw, (batch, time, feat)), in_spatial_dim=time)
    yr = y.raw_aligned((batch, out_time, out))
    for b, n in enumerate(lengths):
        seq = raw[b:b + 1, :n].transpose(1, 2)  # (1, f, n); "same" for an even kernel: 1 frame left, 2 right
        ref = F.conv1d(F.pad(seq, (1, 2)), conv.filter.raw, conv.bias.raw, groups=2)
        torch.testing.assert_close(yr[b, :n], ref[0].t().detach(), atol=1e-5, rtol=1e-4)


def test_batch_norm_against_manual_statistics():
    """Training on the masked path: mean and biased variance over valid frames (a positional computation), the
    running statistics moved by momentum; eval uses them."""
    batch, feat = dt.Dim(None, name="b"), dt.Dim(3, name="f")
    lengths = [4, 2]
    time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="t")
    raw = torch.randn(2, 4, 3)
    raw[1, 2:] = 1e30
    bn = drf.BatchNorm(feat)
    drf.init_train_step_run_ctx(train_flag=True)
    y = bn(dt.Tensor(raw, (batch, time, feat)))
    frames = torch.cat([raw[0, :4], raw[1, :2]])
    mean, var = frames.mean(0), frames.var(0, unbiased=False)
    ref = (raw - mean) / torch.sqrt(var + 1e-3)
    torch.testing.assert_close(y.raw_aligned((batch, time, feat))[0], ref[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(bn.running_mean.raw, 0.1 * mean)
    torch.testing.assert_close(bn.running_variance.raw, 0.9 + 0.1 * var)
    drf.init_forward_step_run_ctx()
    y = bn(dt.Tensor(raw, (batch, time, feat)))
    ref = (raw - bn.running_mean.raw) / torch.sqrt(bn.running_variance.raw + 1e-3)
    torch.testing.assert_close(y.raw_aligned((batch, time, feat))[0], ref[0])


@pytest.mark.parametrize("layout", ["btf", "fbt"])
@pytest.mark.parametrize("pad", [float("nan"), 1e30])
def test_batch_norm_packed_training_matches_generic_path(monkeypatch, layout, pad):
    """Eager training packs the valid frames into torch's fused batch norm: values and the gradients of x, gamma
    and beta on valid frames, and the running statistics, as the generic path (moments over valid frames, the
    path in graphs); padding (NaN or huge) reaches neither's gradients, the packed output's padding is 0.
    Without a valid frame: the generic path."""
    batch, feat = dt.Dim(3, name="b"), dt.Dim(4, name="f")
    time = dt.Dim(dt.Tensor(torch.tensor([5, 2, 3]), (batch,)), name="t")
    g = torch.Generator().manual_seed(0)
    raw = torch.randn(3, 5, 4, generator=g) * 3 + 1
    for b, n in enumerate([5, 2, 3]):
        raw[b, n:] = pad
    grad_out = torch.randn(3, 5, 4, generator=g)
    valid = torch.arange(5)[None, :] < torch.tensor([5, 2, 3])[:, None]
    dims = {"btf": (batch, time, feat), "fbt": (feat, batch, time)}[layout]
    order = [(batch, time, feat).index(d) for d in dims]

    def run(packed: bool, raw: torch.Tensor):
        bn = drf.BatchNorm(feat)
        with torch.no_grad():
            bn.gamma.raw.copy_(torch.tensor([1.0, 2.0, 0.5, -1.0]))
            bn.beta.raw.copy_(torch.tensor([0.0, 0.1, -0.2, 0.3]))
        if not packed:
            monkeypatch.setattr(drf.BatchNorm, "_packed", lambda self, source, axis: None)
        x = raw.permute(order).clone().requires_grad_()
        drf.init_train_step_run_ctx(train_flag=True)
        y = bn(dt.Tensor(x, dims)).raw_aligned((batch, time, feat))
        drf.reset_run_ctx()
        (y[valid] * grad_out[valid]).sum().backward()
        monkeypatch.undo()
        return y.detach(), x.grad.permute([order.index(k) for k in range(3)]), bn

    y, x_grad, bn = run(True, raw)
    y_ref, x_grad_ref, bn_ref = run(False, raw)
    torch.testing.assert_close(y[valid], y_ref[valid], atol=1e-5, rtol=1e-4)
    assert (y[~valid] == 0).all()
    torch.testing.assert_close(x_grad[valid], x_grad_ref[valid], atol=1e-5, rtol=1e-4)
    assert (x_grad[~valid] == 0).all()
    for name in ("gamma", "beta"):
        torch.testing.assert_close(getattr(bn, name).raw.grad, getattr(bn_ref, name).raw.grad, atol=1e-5, rtol=1e-4)
    for name in ("running_mean", "running_variance"):
        torch.testing.assert_close(getattr(bn, name).raw, getattr(bn_ref, name).raw)
    empty = dt.Dim(dt.Tensor(torch.tensor([0, 0, 0]), (batch,)), name="t0")
    x = dt.Tensor(torch.randn(3, 2, 4, generator=g), (batch, empty, feat))
    outs = []
    for packed in (True, False):
        if not packed:
            monkeypatch.setattr(drf.BatchNorm, "_packed", lambda self, source, axis: None)
        drf.init_train_step_run_ctx(train_flag=True)
        outs.append(drf.BatchNorm(feat)(x).raw)
        drf.reset_run_ctx()
    torch.testing.assert_close(outs[0], outs[1], equal_nan=True)
