"""dimtorch.rf's attention modules beside RETURNN frontend's (RETURNN's state dict loaded into ours): SelfAttention,
RotaryPosSelfAttention, RelPosSelfAttention (rf's flag combinations, learned positions), the causal ones full
sequence and step by step through rf.scan over their CausalSelfAttentionState, CrossAttention; outputs and
gradients on valid frames with NaN padding on our side, and each sequence alone."""
import pytest
import torch

import dimtorch as dt
import dimtorch.rf as drf
from dimtorch.rf._dims import single_step_dim as our_step
from rf_module_sides import Data, copy_their_params, per_sequence_alone, run_pair, their_raw


def _dims(rf_dim_cls, sizes):
    return [rf_dim_cls(s, name=n) for n, s in sizes], [dt.Dim(s, name=n) for n, s in sizes]


def _pair(rf, cls_name: str, data: Data, **options):
    from returnn.tensor import Dim as RfDim
    (rout, rk, rv), (out, k, v) = _dims(RfDim, [("out", 5), ("key", 12), ("value", 9)])
    theirs = getattr(rf, cls_name)(data.rfeat, rout, key_dim_total=rk, value_dim_total=rv, num_heads=3,
                                   att_dropout=0.0, **options)
    ours = getattr(drf, cls_name)(data.feat, out, key_dim_total=k, value_dim_total=v, num_heads=3, att_dropout=0.0,
                                  **options)
    return theirs, ours, rout, out


def _out(data, rout, out):
    return lambda side: [data.rbatch, data.rtime, rout] if side == "theirs" else [data.batch, data.time, out]


REL_POS = [{}, dict(learnable_pos_emb=True, learnable_pos_emb_clipping=2),
           dict(with_bias=False, with_linear_pos=False, with_pos_bias=False, learnable_pos_emb=True,
                separate_pos_emb_per_head=False),  # the demo's (Shaw et al.)
           dict(with_linear_pos=False, with_pos_bias=False), dict(separate_pos_emb_per_head=False)]


@pytest.mark.parametrize("cls_name,options", [("SelfAttention", {}), ("RotaryPosSelfAttention", {})] +
                         [("RelPosSelfAttention", o) for o in REL_POS],
                         ids=["self", "rope"] + ["relpos-" + (",".join(o) or "default") for o in REL_POS])
def test_self_attention(rf, cls_name, options):
    data = Data(rf, feature=6, pad=float("nan"))
    theirs, ours, rout, out = _pair(rf, cls_name, data, **options)
    assert sorted(ours.state_dict()) == sorted(k for k in copy_their_params(rf, theirs, ours))
    y, _ = run_pair(rf, data, theirs, ours, lambda: theirs(data.rx, axis=data.rtime),
                    lambda: ours(data.x, axis=data.time), _out(data, rout, out))
    per_sequence_alone(data, lambda x, b, t: ours(x, axis=t), y, lambda b, t: (b, t, out))


@pytest.mark.parametrize("cls_name,options", [("CausalSelfAttention", {}), ("RotaryPosCausalSelfAttention", {}),
                                              ("RelPosCausalSelfAttention", {}),
                                              ("RelPosCausalSelfAttention", REL_POS[2])],
                         ids=["causal", "rope", "relpos", "relpos-shaw"])
def test_causal_self_attention_full_and_scan(rf, cls_name, options):
    """Full sequence (returns a state too, as rf's), and rf.scan over single steps with the module's
    CausalSelfAttentionState: the same outputs on valid frames as RETURNN's full sequence."""
    from returnn.tensor import single_step_dim
    data = Data(rf, feature=6, pad=float("nan"))
    theirs, ours, rout, out = _pair(rf, cls_name, data, **options)
    y, _ = run_pair(rf, data, theirs, ours, lambda: theirs(data.rx, axis=data.rtime)[0],
                    lambda: ours(data.x, axis=data.time)[0], _out(data, rout, out))
    _, state = ours(data.x, axis=data.time)
    assert isinstance(state, drf.CausalSelfAttentionState) and state.accum_axis is data.time
    per_sequence_alone(data, lambda x, b, t: ours(x, axis=t)[0], y, lambda b, t: (b, t, out))
    # step by step through rf.scan (ours) and RETURNN's own scan
    drf.init_forward_step_run_ctx()
    ys, final, _ = drf.scan(spatial_dim=data.time, xs=data.x,
                            body=lambda x_, s: ours(x_, axis=our_step, state=s),
                            ys=dt.Tensor(torch.zeros(3, 5), (data.batch, out)),
                            initial=ours.default_initial_state(batch_dims=[data.batch]))
    drf.reset_run_ctx()
    rys, _, _ = rf.scan(spatial_dim=data.rtime, xs=data.rx,
                        body=lambda x_, s: theirs(x_, axis=single_step_dim, state=s),
                        ys=rf.Tensor("y", dims=[data.rbatch, rout], dtype="float32"),
                        initial=theirs.default_initial_state(batch_dims=[data.rbatch]))
    d = ys.raw_aligned((data.batch, data.time, out)).detach()
    r = their_raw(rys, [data.rbatch, data.rtime, rout]).detach()
    for b, n in enumerate(data.lengths):
        torch.testing.assert_close(d[b, :n], r[b, :n], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(d[b, :n], y.raw_aligned((data.batch, data.time, out)).detach()[b, :n], atol=1e-5,
                                   rtol=1e-4)
    assert isinstance(final, drf.CausalSelfAttentionState)


@pytest.mark.parametrize("cls_name", ["CausalSelfAttention", "RotaryPosCausalSelfAttention"])
def test_causal_self_attention_prefix_then_steps(rf, cls_name):
    """A full-sequence prefix of unequal lengths, then single steps: each step goes after each sequence's own
    last frame (RETURNN's cum_concat_step), as in RETURNN; with RoPE each sequence's step at its own position.
    And each sequence's steps equal the last frames of that sequence's prefix and steps as one full sequence."""
    from returnn.tensor import single_step_dim
    data = Data(rf, feature=6, lengths=(4, 2, 3), pad=0.0)
    theirs, ours, rout, out = _pair(rf, cls_name, data)
    copy_their_params(rf, theirs, ours)
    rf.init_forward_step_run_ctx()
    _, rstate = theirs(data.rx, axis=data.rtime)
    _, state = ours(data.x, axis=data.time)
    g = torch.Generator().manual_seed(3)
    steps = []
    for i in range(2):
        step = torch.randn(3, 6, generator=g)
        ry, rstate = theirs(rf.convert_to_tensor(step.clone(), dims=[data.rbatch, data.rfeat]), single_step_dim,
                            state=rstate)
        y, state = ours(dt.Tensor(step.clone(), (data.batch, data.feat)), our_step, state=state)
        torch.testing.assert_close(y.raw_aligned((data.batch, out)).detach(),
                                   their_raw(ry, [data.rbatch, rout]).detach(), atol=1e-5, rtol=1e-4)
        steps.append((step, y.raw_aligned((data.batch, out)).detach()))
    x = data.x.raw_aligned((data.batch, data.time, data.feat))
    for b, n in enumerate((4, 2, 3)):  # each sequence alone, its prefix and steps as one full sequence
        seq = torch.cat([x[b, :n]] + [st[b:b + 1] for st, _ in steps])
        t1 = dt.Dim(seq.shape[0], name="t1")
        full, _ = ours(dt.Tensor(seq[None], (dt.Dim(1, name="one"), t1, data.feat)), axis=t1)
        full = full.raw_aligned((full.dims[0], t1, out))[0].detach()
        for i, (_, y_step) in enumerate(steps):
            torch.testing.assert_close(y_step[b], full[n + i], atol=1e-5, rtol=1e-4)


def test_cross_attention(rf):
    from returnn.tensor import Dim as RfDim
    data = Data(rf, feature=6, pad=float("nan"))
    (rq, rout, rk, rv), (q, out, k, v) = _dims(RfDim, [("q", 4), ("out", 5), ("key", 12), ("value", 9)])
    theirs = rf.CrossAttention(data.rfeat, rq, rout, key_dim_total=rk, value_dim_total=rv, num_heads=3,
                               att_dropout=0.0)
    ours = drf.CrossAttention(data.feat, q, out, key_dim_total=k, value_dim_total=v, num_heads=3, att_dropout=0.0)
    assert sorted(ours.state_dict()) == ["kv.bias", "kv.weight", "proj.bias", "proj.weight", "q.bias", "q.weight"]
    copy_their_params(rf, theirs, ours)
    g = torch.Generator().manual_seed(2)
    qraw = torch.randn(3, 2, 4, generator=g)
    rqt, qt = RfDim(2, name="qt"), dt.Dim(2, name="qt")
    rf.init_forward_step_run_ctx()
    ry = theirs(rf.convert_to_tensor(qraw.clone(), dims=[data.rbatch, rqt, rq]),
                theirs.transform_encoder(data.rx, axis=data.rtime))
    y = ours(dt.Tensor(qraw.clone(), (data.batch, qt, q)), ours.transform_encoder(data.x, axis=data.time))
    torch.testing.assert_close(y.raw_aligned((data.batch, qt, out)).detach(),
                               their_raw(ry, [data.rbatch, rqt, rout]).detach(), atol=1e-5, rtol=1e-4)
    # a query with a beam dim the encoder lacks
    beam = dt.Dim(2, name="beam")
    yb = ours(dt.Tensor(qraw.clone()[:, None].expand(3, 2, 2, 4), (data.batch, beam, qt, q)),
              ours.transform_encoder(data.x, axis=data.time))
    torch.testing.assert_close(yb.raw_aligned((data.batch, beam, qt, out))[:, 1].detach(),
                               y.raw_aligned((data.batch, qt, out)).detach())


def test_learned_relative_positional_encoding():
    """rf's interface: pos_emb (2 * clipping + 1, feat) of zeros; the encoding of the distances -(q-1) .. kv-1
    (clipped), and the full (query, key) matrix."""
    fe = dt.Dim(4, name="f")
    ours = drf.LearnedRelativePositionalEncoding(fe, clipping=2)
    assert sorted(ours.state_dict()) == ["pos_emb"] and not ours.pos_emb.raw.any()
    with torch.no_grad():
        ours.pos_emb.raw.copy_(torch.arange(20.0).view(5, 4))
    t = dt.Dim(5, name="t")
    e, dim = ours(query_spatial_dim=t, key_value_spatial_dim=t)
    assert dim.size == 9
    rows = (torch.arange(9) - 4).clamp(-2, 2) + 2
    torch.testing.assert_close(e.raw_aligned((dim, fe)), ours.pos_emb.raw[rows].detach())
    kv = dt.Dim(5, name="kv")
    m = ours.full_matrix(query_spatial_dim=t, key_value_spatial_dim=kv)
    rel = (torch.arange(5)[None, :] - torch.arange(5)[:, None]).clamp(-2, 2) + 2
    torch.testing.assert_close(m.raw_aligned((t, kv, fe)), ours.pos_emb.raw[rel].detach())


@pytest.mark.parametrize("causal", [False, True])
def test_learned_relative_positions_range_rows(causal):
    """range_rows (a relative attention's call: the distances first .. first + count - 1, clipped), whose row
    indices are kept per range: rows() of the same distances, forward and backward (repeated rows' gradients
    summed), for ranges inside, across and beyond the clipping, and again from the kept indices."""
    fe = dt.Dim(3, name="f")
    ours = drf.LearnedRelativePositionalEncoding(fe, clipping=2, causal=causal)
    with torch.no_grad():
        ours.pos_emb.raw.copy_(torch.randn(ours.pos_emb.raw.shape))
    for first, count in [(-1, 2), (-6, 13), (-9, 3), (4, 5), (-6, 13)]:
        g = torch.randn(count, 3)
        got = ours.range_rows(first, count)
        (gw,) = torch.autograd.grad((got * g).sum(), ours.pos_emb.raw)
        want = ours.rows(torch.arange(first, first + count))
        (ww,) = torch.autograd.grad((want * g).sum(), ours.pos_emb.raw)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        torch.testing.assert_close(gw, ww)
