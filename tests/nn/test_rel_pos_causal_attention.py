"""RelPosCausalSelfAttention against Transformer-XL attention written by hand in torch (the distance of each
(query, key) pair gathered directly, no shift trick): forward and backward on padded batches (NaN/1e30), the
options, step by step = full sequence, batch independence, errors."""
import math

import pytest
import torch
import torch.nn.functional as F

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, check_batch_independence, make_padded_batch
from nn_layer_check import check_layer

H = 2


def _sin_rel(distances, feat):
    w = torch.exp(torch.arange(feat // 2) * -(2 * math.log(1e4) / feat))
    arg = distances[..., None].float() * w
    return torch.cat([arg.sin(), arg.cos()], dim=-1)


def _torch_rel_pos_causal(x, p, lengths, *, learned_clip=None, linear_pos=True, pos_bias=True, separate=True):
    b, t, d = x.shape
    dk = d // H
    keep = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]
    x = torch.where(keep[:, :, None], x, 0.0)  # padding zeroed first: NaN * 0 would reach the gradients
    qkv = F.linear(x, p["qkv.weight"], p["qkv.bias"])
    q, k, v = qkv.view(b, t, H, 3 * dk).transpose(1, 2).split(dk, dim=-1)  # (B, H, T, dk)
    dist = torch.arange(t)[None, :] - torch.arange(t)[:, None]  # [i, j] = j - i
    feat = d if linear_pos else (d if separate else dk)
    if learned_clip is not None:
        pe = p["learned_pos_emb.pos_emb"][dist.clamp(-learned_clip, learned_clip) + learned_clip]  # (T, T, feat)
    else:
        pe = _sin_rel(dist, feat)
    if linear_pos:
        pe = F.linear(pe, p["linear_pos.weight"])
    pos = pe.view(t, t, H, dk) if separate else pe.view(t, t, 1, dk).expand(t, t, H, dk)
    qu = q + p["pos_bias_u"][:, None, :] if pos_bias else q
    qv = q + p["pos_bias_v"][:, None, :] if pos_bias else q
    scores = qu @ k.transpose(-1, -2) + torch.einsum("bhid,ijhd->bhij", qv, pos)
    scores = (scores / math.sqrt(dk)).masked_fill(dist > 0, float("-inf"))
    o = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
    return F.linear(o, p["proj.weight"], p["proj.bias"])


def _module(feature, **options):
    return dt.nn.RelPosCausalSelfAttention(feature, feature, key_dim_total=feature, value_dim_total=feature,
                                           num_heads=H, att_dropout=0.0, **options)


OPTIONS = {
    "default": ({}, {}),
    "learned": (dict(learnable_pos_emb=True, learnable_pos_emb_clipping=2), dict(learned_clip=2)),
    "no_linear_pos_no_bias": (dict(with_linear_pos=False, with_pos_bias=False), dict(linear_pos=False, pos_bias=False)),
    "shared_over_heads": (dict(separate_pos_emb_per_head=False), dict(separate=False)),
    "shared_no_linear_pos": (dict(separate_pos_emb_per_head=False, with_linear_pos=False),
                             dict(separate=False, linear_pos=False)),
}


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("name", list(OPTIONS))
def test_full_sequence_matches_torch(name, pad):
    options, ref_options = OPTIONS[name]
    pb = make_padded_batch((5, 3, 1), 8, pad_value=pad)
    att = _module(pb.feature, **options)
    with torch.no_grad():
        if att.learned_pos_emb is not None:
            att.learned_pos_emb.pos_emb.raw.normal_()
    check_layer(att, lambda m, x: m(x, axis=pb.time)[0],
                lambda x, p: _torch_rel_pos_causal(x, p, pb.lengths, **ref_options), pb.x,
                (pb.batch, pb.time, pb.feature))


def test_attributes_are_returnns():
    m = dt.Dim(8, name="model")
    att = _module(m)
    assert att.in_dim is m and att.out_dim is m and att.num_heads.size == H
    assert att.pos_emb_feat_dim is m and att.linear_pos.out_dim is att.key_dim_total
    assert att.pos_bias_u.raw.shape == (H, 4) and att.learned_pos_emb is None
    shared = _module(m, separate_pos_emb_per_head=False, with_linear_pos=False, with_pos_bias=False)
    assert shared.pos_emb_feat_dim is shared.key_dim_per_head and shared.linear_pos is None
    assert shared.pos_bias_u is None and shared.pos_bias_v is None
    learned = _module(m, learnable_pos_emb=True, learnable_pos_emb_clipping=3)
    assert learned.learned_pos_emb.pos_emb.raw.shape == (7, 8)


@pytest.mark.parametrize("name", ["default", "learned", "shared_no_linear_pos"])
def test_step_by_step_gives_the_full_sequence(name):
    pb = make_padded_batch((4, 4), 8, pad_value=0.0)
    att = _module(pb.feature, **OPTIONS[name][0]).eval()
    full = att(pb.x, axis=pb.time)[0].raw_aligned((pb.batch, pb.time, pb.feature))
    state = att.default_initial_state(batch_dims=[pb.batch]) if name == "default" else None
    for t in range(4):
        y, state = att(dt.Tensor(pb.x.raw[:, t], (pb.batch, pb.feature)), axis=None, state=state)
        torch.testing.assert_close(y.raw_aligned((pb.batch, pb.feature)), full[:, t], rtol=1e-5, atol=1e-6)
    assert state.k.raw.shape[-2] == 4


def test_batch_independence():
    pb = make_padded_batch((5, 3, 0, 1), 8, pad_value=PAD_NAN)
    att = _module(pb.feature, learnable_pos_emb=True, learnable_pos_emb_clipping=2)
    check_batch_independence(lambda x, dm: att(x, axis=dm(pb.time))[0], pb.x, pb.batch, pb.time, rtol=1e-5, atol=1e-6)


def test_dropout_only_in_training():
    pb = make_padded_batch((5, 3), 8, pad_value=0.0)
    att = dt.nn.RelPosCausalSelfAttention(pb.feature, pb.feature, key_dim_total=pb.feature,
                                          value_dim_total=pb.feature, num_heads=H, att_dropout=0.3,
                                          pos_emb_dropout=0.3)
    att.eval()
    torch.testing.assert_close(att(pb.x, axis=pb.time)[0].raw, att(pb.x, axis=pb.time)[0].raw)
    att.train()
    torch.manual_seed(0)
    assert not torch.allclose(att(pb.x, axis=pb.time)[0].raw, att(pb.x, axis=pb.time)[0].raw)


def test_errors():
    pb = make_padded_batch((3, 2), 8)
    att = _module(pb.feature)
    with pytest.raises(ValueError, match=r"RelPosCausalSelfAttention\(\): x lacks the axis"):
        att(pb.x, axis=dt.Dim(3, name="other"))
    with pytest.raises(ValueError, match=r"RelPosCausalSelfAttention\(\): x lacks the in_dim"):
        _module(dt.Dim(6, name="other"))(pb.x, axis=pb.time)
    _, state = att(dt.Tensor(pb.x.raw[:, 0], (pb.batch, pb.feature)), axis=None)
    with pytest.raises(ValueError, match=r"RelPosCausalSelfAttention\(\): a state is only for step-by-step calls"):
        att(pb.x, axis=pb.time, state=state)
    with pytest.raises(ValueError, match=r"RelPosCausalSelfAttention\(\): the state .* does not fit x"):
        att(dt.Tensor(pb.x.raw[:, 0], (dt.Dim(2, name="b2"), pb.feature)), axis=None, state=state)
    with pytest.raises(ValueError, match=r"RelPosCausalSelfAttention\(\): learnable_pos_emb_clipping must be"):
        _module(pb.feature, learnable_pos_emb=True, learnable_pos_emb_clipping=-1)
    with pytest.raises(ValueError, match=r"RelPosCausalSelfAttention\(\): key_dim_total .* is not divisible"):
        dt.nn.RelPosCausalSelfAttention(pb.feature, pb.feature, key_dim_total=dt.Dim(7, name="k"),
                                        value_dim_total=pb.feature, num_heads=H)
