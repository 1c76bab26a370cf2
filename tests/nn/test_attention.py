"""Tests of dt.nn attention: SelfAttention and CrossAttention vs torch.nn.MultiheadAttention (copied weights,
forward and backward on valid frames), RelPosSelfAttention vs a hand-written positional implementation,
causal step-by-step == full sequence, batch independence with NaN padding, errors."""
import math

import pytest
import torch

import dimtorch as dt
from helpers import make_padded_batch

D, H = 8, 2


def _self_att(cls=dt.nn.SelfAttention, feat=None, **kw):
    torch.manual_seed(0)
    feat = dt.Dim(D, name="feature") if feat is None else feat
    out = dt.Dim(6, name="out")
    key_total, value_total = dt.Dim(D, name="key"), dt.Dim(D, name="value")
    att = cls(feat, out, key_dim_total=key_total, value_dim_total=value_total, num_heads=H, att_dropout=0.0, **kw)
    return att, feat, out


def _mha_from(att):
    """nn.MultiheadAttention with att's weights: qkv rows h*(3*dh) + j -> in_proj rows [q; k; v], head-major."""
    dh = D // H
    mha = torch.nn.MultiheadAttention(D, H, batch_first=True)
    mha.out_proj = torch.nn.Linear(D, att.proj_dim.size)
    with torch.no_grad():
        w = att.qkv.weight.raw.view(H, 3, dh, D).permute(1, 0, 2, 3).reshape(3 * D, D)
        b = att.qkv.bias.raw.view(H, 3, dh).permute(1, 0, 2).reshape(3 * D)
        mha.in_proj_weight.copy_(w)
        mha.in_proj_bias.copy_(b)
        mha.out_proj.weight.copy_(att.proj.weight.raw)
        mha.out_proj.bias.copy_(att.proj.bias.raw)
    return mha


def _valid(lengths, t):
    return torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]


def test_self_attention_vs_multihead_attention():
    lengths = [6, 4, 1]
    # 1e30, not NaN: a weight's gradient sums x * dy over all frames, and 0 * NaN is NaN (any Linear)
    pb = make_padded_batch(lengths, feature=D, pad_value=1e30, seed=1)
    feat_pb = pb.feature
    att, feat, out = _self_att(feat=feat_pb)
    mha = _mha_from(att)
    x = pb.x.raw.detach().clone().requires_grad_(True)
    y = att(dt.Tensor(x, (pb.batch, pb.time, feat_pb)), axis=pb.time)
    assert y.dims == (pb.batch, pb.time, out)
    x_ref = torch.where(_valid(lengths, 6)[..., None], pb.x.raw, 0.0).detach().clone().requires_grad_(True)
    y_ref, _ = mha(x_ref, x_ref, x_ref, key_padding_mask=~_valid(lengths, 6), need_weights=False)
    valid = _valid(lengths, 6)
    torch.testing.assert_close(y.raw[valid], y_ref[valid])
    g = torch.randn_like(y_ref)
    (y.raw[valid] * g[valid]).sum().backward()
    (y_ref[valid] * g[valid]).sum().backward()
    dh = D // H
    torch.testing.assert_close(att.qkv.weight.raw.grad.view(H, 3, dh, D).permute(1, 0, 2, 3).reshape(3 * D, D),
                               mha.in_proj_weight.grad)
    torch.testing.assert_close(att.proj.weight.raw.grad, mha.out_proj.weight.grad)
    torch.testing.assert_close(x.grad[valid], x_ref.grad[valid])
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("cls", [dt.nn.SelfAttention, dt.nn.RelPosSelfAttention])
def test_self_attention_batch_independence_and_length_zero(cls):
    lengths = [5, 0, 3]
    for pad in (float("nan"), 1e30):
        pb = make_padded_batch(lengths, feature=D, pad_value=pad, seed=2)
        att, feat, out = _self_att(cls, feat=pb.feature)
        y = att(pb.x, axis=pb.time).raw
        assert torch.isfinite(y[_valid(lengths, 5)]).all()
        for b, n in enumerate(lengths):
            if n == 0:
                continue
            one = dt.Dim(None, name="one")
            t1 = dt.Dim(dt.Tensor(torch.tensor([n]), (one,)), name="t1")
            y1 = att(dt.Tensor(pb.x.raw[b:b + 1, :n], (one, t1, pb.feature)), axis=t1).raw
            torch.testing.assert_close(y[b, :n], y1[0], rtol=1e-5, atol=1e-6)


def test_self_attention_other_dims_order():
    pb = make_padded_batch([4, 2], feature=D, pad_value=0.0)
    att, feat, out = _self_att(feat=pb.feature)
    y = att(pb.x, axis=pb.time)
    y_t = att(pb.x.copy_transpose((pb.feature, pb.time, pb.batch)), axis=pb.time)
    valid = _valid([4, 2], 4)
    torch.testing.assert_close(y.raw_aligned((pb.batch, pb.time, out))[valid],
                               y_t.raw_aligned((pb.batch, pb.time, out))[valid])


def test_cross_attention_vs_multihead_attention():
    torch.manual_seed(0)
    pb_q = make_padded_batch([3, 2], feature=D, pad_value=0.0, seed=3)
    enc_feat = dt.Dim(5, name="enc_feature")
    enc_time = dt.Dim(dt.Tensor(torch.tensor([4, 2]), (pb_q.batch,)), name="enc_time")
    enc_raw = torch.randn(2, 4, 5)
    enc_raw[1, 2:] = 1e30  # not NaN: the kv weight's gradient sums enc * dy over all frames
    out = dt.Dim(6, name="out")
    att = dt.nn.CrossAttention(pb_q.feature, enc_feat, out, key_dim_total=dt.Dim(D, name="key"),
                               value_dim_total=dt.Dim(D, name="value"), num_heads=H, att_dropout=0.0)
    dh = D // H
    mha = torch.nn.MultiheadAttention(D, H, kdim=5, vdim=5, batch_first=True)
    mha.out_proj = torch.nn.Linear(D, 6)
    with torch.no_grad():
        kv_w = att.kv.weight.raw.view(H, 2, dh, 5)
        kv_b = att.kv.bias.raw.view(H, 2, dh)
        mha.q_proj_weight.copy_(att.query.weight.raw)
        mha.k_proj_weight.copy_(kv_w[:, 0].reshape(D, 5))
        mha.v_proj_weight.copy_(kv_w[:, 1].reshape(D, 5))
        mha.in_proj_bias.copy_(torch.cat([att.query.bias.raw, kv_b[:, 0].reshape(D), kv_b[:, 1].reshape(D)]))
        mha.out_proj.weight.copy_(att.proj.weight.raw)
        mha.out_proj.bias.copy_(att.proj.bias.raw)
    y = att(pb_q.x, dt.Tensor(enc_raw, (pb_q.batch, enc_time, enc_feat)), axis=pb_q.time, enc_axis=enc_time)
    assert y.dims == (pb_q.batch, pb_q.time, out)
    enc_clean = torch.where(_valid([4, 2], 4)[..., None], enc_raw, 0.0)
    y_ref, _ = mha(pb_q.x.raw, enc_clean, enc_clean, key_padding_mask=~_valid([4, 2], 4), need_weights=False)
    valid = _valid([3, 2], 3)
    torch.testing.assert_close(y.raw[valid], y_ref[valid])
    g = torch.randn_like(y_ref)
    (y.raw[valid] * g[valid]).sum().backward()
    (y_ref[valid] * g[valid]).sum().backward()
    torch.testing.assert_close(att.query.weight.raw.grad, mha.q_proj_weight.grad)
    torch.testing.assert_close(att.kv.weight.raw.grad.view(H, 2, dh, 5)[:, 0].reshape(D, 5), mha.k_proj_weight.grad)
    # one step (no query time dim) gives the full sequence's frame
    y0 = att(dt.Tensor(pb_q.x.raw[:, 1], (pb_q.batch, pb_q.feature)),
             dt.Tensor(enc_raw, (pb_q.batch, enc_time, enc_feat)), axis=None, enc_axis=enc_time)
    assert y0.dims == (pb_q.batch, out)
    torch.testing.assert_close(y0.raw, y.raw[:, 1])


def test_causal_self_attention_full_vs_masked_mha_and_steps():
    lengths = [5, 3]
    pb = make_padded_batch(lengths, feature=D, pad_value=float("nan"), seed=4)
    att, feat, out = _self_att(dt.nn.CausalSelfAttention, feat=pb.feature)
    mha = _mha_from(att)
    y, state = att(pb.x, axis=pb.time)
    assert state is None and y.dims == (pb.batch, pb.time, out)
    causal = torch.ones(5, 5, dtype=torch.bool).triu(1)
    x_clean = pb.x.raw.nan_to_num(0.0)
    y_ref, _ = mha(x_clean, x_clean, x_clean, attn_mask=causal, need_weights=False)
    valid = _valid(lengths, 5)
    torch.testing.assert_close(y.raw[valid], y_ref[valid])
    state = None
    for t in range(5):
        y_t, state = att(dt.Tensor(pb.x.raw[:, t], (pb.batch, pb.feature)), axis=None, state=state)
        assert y_t.dims == (pb.batch, out)
        for b, n in enumerate(lengths):
            if t < n:
                torch.testing.assert_close(y_t.raw[b], y.raw[b, t], rtol=1e-5, atol=1e-6)
    assert state.k.raw.shape[-2] == 5


def _sinusoidal(rel, dim):
    """pe(d) = [sin(d w_k), cos(d w_k)], w_k = 10000^(-2k/dim), written per element."""
    pe = torch.zeros(len(rel), dim)
    for r, d in enumerate(rel):
        for k in range(dim // 2):
            w = 10000.0 ** (-2.0 * k / dim)
            pe[r, k] = math.sin(d * w)
            pe[r, dim // 2 + k] = math.cos(d * w)
    return pe


def _rel_pos_reference(att, x, lengths, pe_of_distance):
    """score(i, j) = ((q_i + u) . k_j + (q_i + v) . P[j - i]) / sqrt(dh), keys j >= length masked;
    P[d] = linear_pos(pe(d)); per (i, j) pair by indexing, no rel shift."""
    b, t, _ = x.shape
    dh = D // H
    qkv = torch.nn.functional.linear(x, att.qkv.weight.raw, att.qkv.bias.raw).view(b, t, H, 3, dh)
    q, k, v = qkv[..., 0, :], qkv[..., 1, :], qkv[..., 2, :]  # (B, T, H, dh)
    dist = torch.arange(t)[None, :] - torch.arange(t)[:, None]  # [i, j] = j - i
    pe = pe_of_distance(dist.reshape(-1)).view(t, t, -1)
    p = torch.nn.functional.linear(pe, att.linear_pos.weight.raw).view(t, t, H, dh)
    u, w = att.pos_bias_u.raw, att.pos_bias_v.raw
    ac = torch.einsum("bihd,bjhd->bhij", q + u, k)
    bd = torch.einsum("bihd,ijhd->bhij", q + w, p)
    scores = (ac + bd) / math.sqrt(dh)
    scores = scores.masked_fill(~_valid(lengths, t)[:, None, None, :], float("-inf"))
    out = torch.einsum("bhij,bjhd->bihd", scores.softmax(-1), v).reshape(b, t, D)
    return torch.nn.functional.linear(out, att.proj.weight.raw, att.proj.bias.raw)


@pytest.mark.parametrize("pos_emb", ["sinusoidal", "learned"])
def test_rel_pos_self_attention_vs_positional_reference(pos_emb):
    lengths = [6, 4, 2]
    pb = make_padded_batch(lengths, feature=D, pad_value=1e30, seed=5)  # finite: see the MHA test
    att, feat, out = _self_att(dt.nn.RelPosSelfAttention, feat=pb.feature, pos_emb=pos_emb, clipping=3)
    y = att(pb.x, axis=pb.time)
    assert y.dims == (pb.batch, pb.time, out)
    if pos_emb == "sinusoidal":
        pe_fn = lambda d: _sinusoidal(d.tolist(), D)  # noqa: E731
    else:
        pe_fn = lambda d: att.learned_pos_emb.raw[d.clamp(-3, 3) + 3]  # noqa: E731
    x_clean = torch.where(_valid(lengths, 6)[..., None], pb.x.raw, 0.0)
    y_ref = _rel_pos_reference(att, x_clean, lengths, pe_fn)
    valid = _valid(lengths, 6)
    torch.testing.assert_close(y.raw[valid], y_ref[valid], rtol=1e-5, atol=1e-5)
    g = torch.randn_like(y_ref)
    params = [att.qkv.weight.raw, att.pos_bias_u.raw, att.pos_bias_v.raw, att.linear_pos.weight.raw]
    if pos_emb == "learned":
        params.append(att.learned_pos_emb.raw)
    grads = torch.autograd.grad((y.raw[valid] * g[valid]).sum(), params)
    grads_ref = torch.autograd.grad((y_ref[valid] * g[valid]).sum(), params)
    for a, b in zip(grads, grads_ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_rel_shift_matches_indexing():
    x = torch.randn(2, 4, 7)
    out = dt.nn.attention.rel_shift(x)
    i = torch.arange(4)[:, None]
    j = torch.arange(4)[None, :]
    torch.testing.assert_close(out, x[:, i, j - i + 3])


def test_attention_errors():
    att, feat, out = _self_att()
    pb = make_padded_batch([3], feature=5)
    with pytest.raises(ValueError, match=r"SelfAttention\(\): x lacks the in_dim 'feature'\(8\) \(x dims: 'batch'"):
        att(pb.x, axis=pb.time)
    with pytest.raises(TypeError, match=r"SelfAttention\(\): x must be a dimtorch.Tensor, got Tensor"):
        att(torch.zeros(3, 8), axis=pb.time)
    other = dt.Dim(3, name="other")
    x = dt.Tensor(torch.zeros(3, 8), (other, feat))
    with pytest.raises(ValueError, match=r"SelfAttention\(\): x lacks the axis 'time'"):
        att(x, axis=pb.time)
    with pytest.raises(ValueError, match=r"SelfAttention\(\): key_dim_total 'key'\(8\) is not divisible by "
                                         r"num_heads 3"):
        dt.nn.SelfAttention(feat, out, key_dim_total=dt.Dim(8, name="key"), value_dim_total=dt.Dim(9, name="v"),
                            num_heads=3)
    causal, feat2, _ = _self_att(dt.nn.CausalSelfAttention)
    x2 = dt.Tensor(torch.zeros(3, 8), (other, feat2))
    _, state = causal(dt.Tensor(torch.zeros(8), (feat2,)), axis=None)
    with pytest.raises(ValueError, match=r"CausalSelfAttention\(\): a state is only for step-by-step calls"):
        causal(x2, axis=other, state=state)
    with pytest.raises(ValueError, match=r"RelPosSelfAttention\(\): pos_emb must be 'sinusoidal' or 'learned'"):
        _self_att(dt.nn.RelPosSelfAttention, pos_emb="rope")


def test_frame_mask_cache_follows_the_dim_and_copies_start_empty():
    import copy
    pb1 = make_padded_batch([5, 2], feature=D, pad_value=float("nan"), seed=6)
    att, feat, out = _self_att(dt.nn.RelPosSelfAttention, feat=pb1.feature)
    att(pb1.x, axis=pb1.time)
    # a new batch (new dims, other lengths) with the same feature dim
    pb2 = make_padded_batch([2, 5], feature=D, pad_value=float("nan"), seed=7, dims=None)
    x2 = dt.Tensor(pb2.x.raw, (pb2.batch, pb2.time, pb1.feature))
    y2 = att(x2, axis=pb2.time).raw
    assert torch.isfinite(y2[_valid([2, 5], 5)]).all()
    twin = copy.deepcopy(att)
    assert twin._frame_mask_cache.key is None
    torch.testing.assert_close(twin(x2, axis=pb2.time).raw[_valid([2, 5], 5)], y2[_valid([2, 5], 5)])


def test_causal_state_in_another_dims_order():
    pb = make_padded_batch([4, 4], feature=D, pad_value=0.0, seed=8)
    att, feat, out = _self_att(dt.nn.CausalSelfAttention, feat=pb.feature)
    y, _ = att(pb.x, axis=pb.time)
    state = None
    for t in range(4):
        if state is not None:  # as after a reordering op: other dims order, same content
            state = dt.nn.CausalSelfAttentionState(state.k.copy_transpose(state.k.dims[::-1]),
                                                   state.v.copy_transpose(state.v.dims[::-1]))
        y_t, state = att(dt.Tensor(pb.x.raw[:, t], (pb.batch, pb.feature)), axis=None, state=state)
        torch.testing.assert_close(y_t.raw, y.raw[:, t], rtol=1e-5, atol=1e-6)
    bad = dt.nn.CausalSelfAttentionState(dt.Tensor(torch.zeros(2, 8), (pb.batch, pb.feature)), state.v)
    with pytest.raises(ValueError, match=r"CausalSelfAttention\(\): the state \(k dims: 'batch'.*does not fit x"):
        att(dt.Tensor(pb.x.raw[:, 0], (pb.batch, pb.feature)), axis=None, state=bad)


def test_attention_module_attributes_as_returnn_frontend():
    att, feat, out = _self_att()
    assert att.in_dim is feat and att.out_dim is out and att.num_heads is att.heads and att.num_heads.size == H
    assert att.key_dim_total.size == D and att.value_dim_total.size == D
    assert att.key_dim_per_head.size == D // H and att.qkv_dim_per_head.size == 3 * (D // H)
    assert att.att_dropout == 0.0 and att.att_dropout_broadcast is False
    no_proj = dt.nn.SelfAttention(feat, None, key_dim_total=att.key_dim_total, value_dim_total=att.value_dim_total,
                                  num_heads=H)
    assert no_proj.out_dim is att.value_dim_total
    enc = dt.Dim(5, name="enc")
    cross = dt.nn.CrossAttention(feat, enc, out, key_dim_total=att.key_dim_total, value_dim_total=att.value_dim_total,
                                 num_heads=dt.Dim(H, name="h"))
    assert cross.query_in_dim is feat and cross.encoder_dim is enc and cross.out_dim is out
    assert cross.num_heads.name == "h" and cross.kv_dim_per_head.size == 2 * (D // H)


def test_causal_default_initial_state():
    lengths = [4, 3]
    pb = make_padded_batch(lengths, feature=D, pad_value=float("nan"), seed=9)
    att, feat, out = _self_att(dt.nn.CausalSelfAttention, feat=pb.feature)
    y, _ = att(pb.x, axis=pb.time)
    init = att.default_initial_state(batch_dims=[pb.batch])
    assert init.k.dims[1:] == (att.num_heads, init.k.dims[2], att.key_dim_per_head) and init.k.raw.shape[2] == 0
    y0, state0 = att(pb.x, axis=pb.time, state=init)  # an empty state with the full sequence is no state
    assert state0 is None
    valid = _valid(lengths, 4)
    torch.testing.assert_close(y0.raw[valid], y.raw[valid])
    state = init
    for t in range(4):
        y_t, state = att(dt.Tensor(pb.x.raw[:, t], (pb.batch, pb.feature)), axis=None, state=state)
        for b, n in enumerate(lengths):
            if t < n:
                torch.testing.assert_close(y_t.raw[b], y.raw[b, t], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"CausalSelfAttention\(\): a state is only for step-by-step calls .* with "
                                         r"history"):
        att(pb.x, axis=pb.time, state=state)
    with pytest.raises(ValueError, match=r"CausalSelfAttention\.default_initial_state\(\): capacity"):
        att.default_initial_state(batch_dims=[pb.batch], capacity=10)
    with pytest.raises(TypeError, match=r"CausalSelfAttention\.default_initial_state\(\): batch_dims must be Dims"):
        att.default_initial_state(batch_dims=[3])


def _rope_reference(att, x, lengths, causal):
    """q, k, v from the qkv weights by hand; RoPE as complex rotation by t * 10000^(-2i/dh); masked softmax."""
    b, t, _ = x.shape
    dh = D // H
    qkv = torch.nn.functional.linear(x, att.qkv.weight.raw, att.qkv.bias.raw).view(b, t, H, 3, dh)
    q, k, v = qkv[..., 0, :], qkv[..., 1, :], qkv[..., 2, :]  # (B, T, H, dh)
    angle = torch.arange(t, dtype=torch.float64)[:, None] * 10000.0 ** (-2.0 * torch.arange(dh // 2) / dh)
    turn = torch.polar(torch.ones_like(angle), angle).to(torch.complex64)[:, None, :]  # (T, 1, dh/2)

    def rotate(z):
        return torch.view_as_real(torch.view_as_complex(z.unflatten(-1, (-1, 2)).contiguous()) * turn).flatten(-2)

    q, k = rotate(q), rotate(k)
    scores = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(dh)
    allowed = _valid(lengths, t)[:, None, None, :]
    if causal:
        allowed = allowed & torch.ones(t, t, dtype=torch.bool).tril()
    scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.einsum("bhij,bjhd->bihd", scores.softmax(-1), v).reshape(b, t, D)
    return torch.nn.functional.linear(out, att.proj.weight.raw, att.proj.bias.raw)


@pytest.mark.parametrize("pad", [float("nan"), 1e30])
@pytest.mark.parametrize("cls", [dt.nn.RotaryPosSelfAttention, dt.nn.RotaryPosCausalSelfAttention])
def test_rotary_attention_vs_positional_reference(cls, pad):
    lengths = [6, 4, 1]
    pb = make_padded_batch(lengths, feature=D, pad_value=pad, seed=10)
    att, feat, out = _self_att(cls, feat=pb.feature)
    causal = cls is dt.nn.RotaryPosCausalSelfAttention
    y = att(pb.x, axis=pb.time)
    y = y[0] if causal else y
    valid = _valid(lengths, 6)
    ref = _rope_reference(att, torch.where(valid[..., None], pb.x.raw, 0.0), lengths, causal)
    torch.testing.assert_close(y.raw[valid], ref[valid], rtol=1e-4, atol=1e-5)
    if causal:  # step by step: the position is the history's length
        state = att.default_initial_state(batch_dims=[pb.batch])
        for t in range(6):
            y_t, state = att(dt.Tensor(pb.x.raw[:, t], (pb.batch, pb.feature)), axis=None, state=state)
            for b, n in enumerate(lengths):
                if t < n:
                    torch.testing.assert_close(y_t.raw[b], y.raw[b, t], rtol=1e-4, atol=1e-5)
    for b, n in enumerate(lengths):  # each sequence alone
        one = dt.Dim(None, name="one")
        t1 = dt.Dim(dt.Tensor(torch.tensor([n]), (one,)), name="t1")
        y1 = att(dt.Tensor(pb.x.raw[b:b + 1, :n], (one, t1, pb.feature)), axis=t1)
        y1 = y1[0] if causal else y1
        torch.testing.assert_close(y1.raw[0], y.raw[b, :n], rtol=1e-4, atol=1e-5)
    if pad == 1e30:  # backward against the reference (NaN padding makes any Linear's weight gradient NaN)
        x = pb.x.raw.detach().clone().requires_grad_(True)
        x_ref = pb.x.raw.detach().clone().requires_grad_(True)
        y = att(dt.Tensor(x, pb.x.dims), axis=pb.time)
        y = y[0] if causal else y
        g = torch.randn(y.raw.shape, generator=torch.Generator().manual_seed(0))
        (y.raw[valid] * g[valid]).sum().backward()
        dt_grads = [p.grad.clone() for p in att.parameters()]
        att.zero_grad()
        ref = _rope_reference(att, torch.where(valid[..., None], x_ref, 0.0), lengths, causal)
        (ref[valid] * g[valid]).sum().backward()
        torch.testing.assert_close(x.grad[valid], x_ref.grad[valid], rtol=1e-4, atol=1e-5)
        for a, p in zip(dt_grads, att.parameters()):
            torch.testing.assert_close(a, p.grad, rtol=1e-4, atol=1e-5)


def test_rotary_needs_even_head_dim():
    feat = dt.Dim(6, name="feature")
    att = dt.nn.RotaryPosSelfAttention(feat, None, key_dim_total=dt.Dim(6, name="k"), value_dim_total=dt.Dim(6, name="v"),
                                       num_heads=2)
    pb = make_padded_batch([2], feature=6, dims=None)
    with pytest.raises(ValueError, match=r"RotaryPosSelfAttention\(\): RoPE needs an even key_dim_per_head >= 4"):
        att(dt.Tensor(pb.x.raw, (pb.batch, pb.time, feat)), axis=pb.time)


def test_frame_mask_caches_are_forgotten_when_their_modules_die():
    """The registry of frame-mask caches (which new lengths bound to a dim clear) holds them weakly: modules
    that die leave no entry behind, and a rebind still clears the live ones."""
    import gc
    from dimtorch.nn.attention import FrameMaskCache
    gc.collect()
    before = len(FrameMaskCache._instances)
    modules = [_self_att()[0] for _ in range(20)]
    assert len(FrameMaskCache._instances) > before
    del modules
    gc.collect()
    assert len(FrameMaskCache._instances) == before
    pb = make_padded_batch([3, 1], feature=D, pad_value=float("nan"))
    att, _, _ = _self_att(feat=pb.feature)
    time_dim = pb.time
    att(pb.x, axis=time_dim)
    cached = [r() for r in FrameMaskCache._instances if r() is not None and r().key is not None]
    assert cached and all(c.key[0] is time_dim for c in cached)
    FrameMaskCache.forget(time_dim)
    assert all(c.key is None for c in cached)
