"""Tests of python/dimtorch/nn/e_branchformer.py (RETURNN frontend's E-Branchformer): FeedForwardConvGated,
Merge and EBranchformerLayer against a hand-written positional PyTorch computation with the same weights
(forward and backward, padding holding NaN and 1e30), batch independence, dropout, use in
ConformerEncoderV2, errors. The comparison with rf itself is in tests/rf/test_parity_nn.py."""
import math

import pytest
import torch
import torch.nn.functional as F

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, check_batch_independence, make_padded_batch
from nn_layer_check import check_layer

D, H, FF, CG = 8, 2, 16, 12
LENGTHS = (7, 4, 1)


# --- the positional reference: (B, T, C) raws, params by dimtorch's names (torch layouts) ---

def _ln(x, p, name):
    return F.layer_norm(x, (x.shape[-1],), p[f"{name}.scale"], p[f"{name}.bias"], eps=1e-5)


def _lin(x, p, name):
    return F.linear(x, p[f"{name}.weight"], p.get(f"{name}.bias"))


def _mask(lengths, t):
    return torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]  # (B, T)


def _depthwise_same(x, valid, p, name):
    """Depthwise conv over T ('same', odd kernel) of x with its padding frames zeroed."""
    w = p[f"{name}.weight"]  # (C, 1, K)
    x = torch.where(valid[..., None], x, 0.0).transpose(1, 2)
    return F.conv1d(x, w, p.get(f"{name}.bias"), padding=w.shape[-1] // 2, groups=x.shape[1]).transpose(1, 2)


def _cgmlp(x, valid, p, prefix="cgmlp."):
    x = torch.where(valid[..., None], x, 0.0)
    h = F.gelu(_lin(x, p, f"{prefix}linear_ff"))
    gate, rest = h.chunk(2, dim=-1)
    gate = _depthwise_same(_ln(gate, p, f"{prefix}norm"), valid, p, f"{prefix}conv")
    return _lin(gate * rest, p, f"{prefix}linear_out")


def _merge(x1, x2, valid, p, prefix="merge."):
    x = torch.cat([x1, x2], dim=-1)
    return _lin(x + _depthwise_same(x, valid, p, f"{prefix}depthwise_conv_fusion"), p, f"{prefix}merge_proj")


def _sinusoidal(dist, dim):
    w = torch.exp(torch.arange(dim // 2, dtype=torch.float32) * (-2.0 * math.log(1e4) / dim))
    arg = dist[..., None].float() * w
    return torch.cat([arg.sin(), arg.cos()], dim=-1)


def _rel_pos_att(x, valid, p, name="self_att"):
    """score(i, j) = ((q_i + u) . k_j + (q_i + v) . P[j - i]) / sqrt(dh) over the valid keys j, by indexing."""
    b, t, d = x.shape
    dh = d // H
    qkv = _lin(x, p, f"{name}.qkv").view(b, t, H, 3, dh)
    q, k, v = qkv.unbind(3)
    dist = torch.arange(t)[None, :] - torch.arange(t)[:, None]
    pos = F.linear(_sinusoidal(dist, d), p[f"{name}.linear_pos.weight"]).view(t, t, H, dh)
    ac = torch.einsum("bihd,bjhd->bhij", q + p[f"{name}.pos_bias_u"], k)
    bd = torch.einsum("bihd,ijhd->bhij", q + p[f"{name}.pos_bias_v"], pos)
    scores = ((ac + bd) / math.sqrt(dh)).masked_fill(~valid[:, None, None, :], float("-inf"))
    out = torch.einsum("bhij,bjhd->bihd", scores.softmax(-1), v).reshape(b, t, d)
    return _lin(out, p, f"{name}.proj")


def _ffn(x, p, name):
    return _lin(F.silu(_lin(x, p, f"{name}.linear_ff")), p, f"{name}.linear_out")


def _layer(x, valid, p):
    x = torch.where(valid[..., None], x, 0.0)
    x = x + 0.5 * _ffn(_ln(x, p, "ffn1_layer_norm"), p, "ffn1")
    att = _rel_pos_att(_ln(x, p, "self_att_layer_norm"), valid, p)
    local = _cgmlp(_ln(x, p, "cgmlp_layer_norm"), valid, p)
    x = x + _merge(att, local, valid, p)
    x = x + 0.5 * _ffn(_ln(x, p, "ffn2_layer_norm"), p, "ffn2")
    return _ln(x, p, "final_layer_norm")


# --- the modules ---

def _randomize(module):
    """Random parameters (norm scales around 1), so that biases and norms matter; eval mode."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if name.endswith(".scale") else 0.0))
    return module.eval()


def _layer_module(feature, **kw):
    torch.manual_seed(0)
    m = dt.nn.EBranchformerLayer(feature, ff_dim=FF, num_heads=H, cgmlp_ff_dim=CG, cgmlp_conv_kernel=5,
                                 dropout=0.0, att_dropout=0.0, **kw)
    return _randomize(m)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_layer_matches_torch_forward_and_backward(pad):
    pb = make_padded_batch(LENGTHS, D, pad_value=pad, seed=2)
    m = _layer_module(pb.feature)
    valid = _mask(LENGTHS, pb.x.raw.shape[1])
    check_layer(m, lambda m, x: m(x, spatial_dim=pb.time), lambda x, p: _layer(x, valid, p), pb.x,
                (pb.batch, pb.time, pb.feature), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("pad", [0.0, PAD_NAN, PAD_LARGE])
def test_cgmlp_matches_torch(pad):
    pb = make_padded_batch(LENGTHS, D, pad_value=pad, seed=3)
    torch.manual_seed(0)
    m = _randomize(dt.nn.FeedForwardConvGated(pb.feature, ff_dim=CG, kernel_size=3, dropout=0.0))
    valid = _mask(LENGTHS, pb.x.raw.shape[1])
    check_layer(m, lambda m, x: m(x, spatial_dim=pb.time), lambda x, p: _cgmlp(x, valid, p, ""), pb.x,
                (pb.batch, pb.time, pb.feature))
    m.zero_padding = False  # as in the layer, on input with finite padding
    pb0 = make_padded_batch(LENGTHS, D, pad_value=0.0, seed=3, dims=(pb.batch, pb.time, pb.feature))
    check_layer(m, lambda m, x: m(x, spatial_dim=pb0.time), lambda x, p: _cgmlp(x, valid, p, ""), pb0.x,
                (pb0.batch, pb0.time, pb0.feature))


@pytest.mark.parametrize("pad", [0.0, PAD_NAN, PAD_LARGE])
def test_merge_matches_torch(pad):
    pb = make_padded_batch(LENGTHS, D, pad_value=pad, seed=4)
    out = dt.Dim(6, name="out")
    torch.manual_seed(0)
    m = _randomize(dt.nn.Merge(in_dim1=pb.feature, in_dim2=pb.feature, out_dim=out, merge_conv_kernel=3))
    valid = _mask(LENGTHS, pb.x.raw.shape[1])
    # Frame-wise but for the conv (which zeroes its input's padding): NaN/inf padding reaches the projection's
    # weight gradient (0 * NaN) as in any frame-wise layer; the parameters' gradients are compared on padding 0.
    check_layer(m, lambda m, x: m(x, 2.0 * x - 1.0, spatial_dim=pb.time),
                lambda x, p: _merge(x, 2.0 * x - 1.0, valid, p, ""), pb.x, (pb.batch, pb.time, out),
                finite_grads=pad == 0.0, param_grads=pad == 0.0)


def _strip_prefix(params: dict, prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in params.items()}


def test_reference_names_are_the_modules():
    """The reference reads every parameter of the layer (names as the module's)."""
    m = _layer_module(dt.Dim(D, name="model"))
    seen = set()

    class Spy(dict):
        def __getitem__(self, k):
            seen.add(k)
            return dict.__getitem__(self, k)

        def get(self, k, default=None):
            if k in self:
                seen.add(k)
            return dict.get(self, k, default)

    x = torch.randn(2, 5, D)
    _layer(x, _mask([5, 3], 5), Spy(dict(m.named_parameters())))
    assert seen == {n for n, _ in m.named_parameters()}


def test_layer_batch_independence():
    pb = make_padded_batch(LENGTHS, D, pad_value=PAD_NAN, seed=5)
    m = _layer_module(pb.feature)
    check_batch_independence(lambda x, dm: m(x, spatial_dim=dm(pb.time)).copy_masked(0.0), pb.x, pb.batch, pb.time,
                             atol=1e-5, rtol=1e-4)


def test_empty_sequence_stays_finite():
    pb = make_padded_batch((4, 0, 2), D, pad_value=PAD_NAN, seed=10)
    m = _layer_module(pb.feature)
    y = m(pb.x, spatial_dim=pb.time)
    assert torch.isfinite(y.raw).all()
    y.copy_masked(0.0).raw.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters())


def test_other_dims_order():
    pb = make_padded_batch((5, 3), D, pad_value=PAD_LARGE, seed=6)
    m = _layer_module(pb.feature)
    y = m(pb.x, spatial_dim=pb.time)
    xt = pb.x.copy_transpose((pb.feature, pb.time, pb.batch))
    yt = m(xt, spatial_dim=pb.time)
    torch.testing.assert_close(yt.raw_aligned((pb.batch, pb.time, pb.feature))[pb.mask],
                               y.raw_aligned((pb.batch, pb.time, pb.feature))[pb.mask], atol=1e-5, rtol=1e-4)


def test_dropout_broadcast_and_eval():
    pb = make_padded_batch((5, 3), D, pad_value=0.0, seed=7)
    torch.manual_seed(0)
    m = dt.nn.FeedForwardConvGated(pb.feature, ff_dim=CG, kernel_size=3, dropout=0.5)
    seen = []
    m.linear_out.register_forward_pre_hook(lambda mod, args: seen.append(args[0]))
    m.train()
    m(pb.x, spatial_dim=pb.time)
    h = seen[-1].raw_aligned((pb.batch, pb.time, m.ff_dim))[pb.mask]  # (valid frames, ff_dim)
    kept = h[0] != 0
    assert 0 < kept.sum() < CG
    assert ((h != 0) == kept).all(), "rf's default: one mask over ff_dim for all frames"
    m.dropout_broadcast = False
    m(pb.x, spatial_dim=pb.time)
    h = seen[-1].raw_aligned((pb.batch, pb.time, m.ff_dim))[pb.mask]
    assert not ((h != 0) == (h[0] != 0)).all()
    layer = dt.nn.EBranchformerLayer(pb.feature, ff_dim=FF, num_heads=H, cgmlp_ff_dim=CG, cgmlp_conv_kernel=3)
    layer.eval()
    torch.testing.assert_close(layer(pb.x, spatial_dim=pb.time).raw, layer(pb.x, spatial_dim=pb.time).raw)
    layer.train()
    assert not torch.equal(layer(pb.x, spatial_dim=pb.time).raw, layer(pb.x, spatial_dim=pb.time).raw)


def test_defaults_and_options():
    model = dt.Dim(D, name="model")
    m = dt.nn.EBranchformerLayer(model, num_heads=H)
    assert m.ffn1.ff_dim.size == 4 * D and m.cgmlp.ff_dim.size == 3 * D
    assert m.cgmlp.conv.filter_dims[0].size == 31 and m.merge.depthwise_conv_fusion.filter_dims[0].size == 3
    assert m.merge.concat_in_dim.size == 2 * D and m.self_att.heads.size == H
    assert m.ffn1 is not m.ffn2 and m.ffn1.linear_ff.weight is not m.ffn2.linear_ff.weight
    # rf's keywords: an ff class (rf's form), an attention class, a cgmlp class or module, a norm class
    cg = dt.nn.FeedForwardConvGated(model, ff_dim=5, kernel_size=3, activation="relu", gate_activation="sigmoid",
                                    with_bias=False)
    assert cg.linear_ff.bias is None and cg.conv.bias is None and cg.gated_dim.size == 10
    m2 = dt.nn.EBranchformerLayer(model, ff=dt.nn.FeedForwardGated, ff_dim=12, num_heads=H,
                                  self_att=dt.nn.SelfAttention, cgmlp=cg, norm=dt.nn.RMSNorm)
    assert isinstance(m2.ffn1, dt.nn.FeedForwardGated) and m2.ffn1.ff_dim.size == 12
    assert type(m2.self_att) is dt.nn.SelfAttention and m2.cgmlp is not cg and m2.cgmlp.ff_dim.size == 5
    assert isinstance(m2.final_layer_norm, dt.nn.RMSNorm)
    m3 = dt.nn.EBranchformerLayer(model, num_heads=H, cgmlp=dt.nn.FeedForwardConvGated, cgmlp_ff_dim=7,
                                  cgmlp_conv_kernel=5, ff_activation="relu")
    assert m3.cgmlp.ff_dim.size == 7 and m3.cgmlp.conv.filter_dims[0].size == 5
    assert m3.ffn1.activation is dt.relu and m.ffn1.activation is dt.silu
    enc = dt.nn.ConformerEncoderV2(model, num_layers=1, num_heads=H, ff_activation="relu",
                                   encoder_layer=dt.nn.EBranchformerLayer)
    assert enc.layers[0].ffn2.activation is dt.relu and enc.layers[0].cgmlp.conv.filter_dims[0].size == 31
    with pytest.raises(TypeError, match="conv_kernel_size"):  # as rf: the layer has no conv block
        dt.nn.ConformerEncoderV2(model, num_layers=1, conv_kernel_size=3, encoder_layer=dt.nn.EBranchformerLayer)


def test_as_conformer_encoder_v2_layer():
    pb = make_padded_batch(LENGTHS, D, pad_value=PAD_NAN, seed=8)
    torch.manual_seed(0)
    enc = dt.nn.ConformerEncoderV2(pb.feature, num_layers=2, ff_dim=dt.Dim(FF, name="ff"), num_heads=H, dropout=0.0,
                                   att_dropout=0.0, encoder_layer=dt.nn.EBranchformerLayer,
                                   encoder_layer_opts=dict(cgmlp_ff_dim=CG, cgmlp_conv_kernel=3))
    enc.eval()
    assert all(type(layer) is dt.nn.EBranchformerLayer and not layer.zero_padding for layer in enc.layers)
    assert enc.layers[0].cgmlp.ff_dim.size == CG and enc.layers[0].ffn1.ff_dim.size == FF
    assert enc.layers[0].merge.merge_proj.weight is not enc.layers[1].merge.merge_proj.weight
    _randomize(enc)
    y = enc(pb.x, spatial_dim=pb.time)
    valid = _mask(LENGTHS, pb.x.raw.shape[1])
    params = dict(enc.named_parameters())
    ref = pb.x.raw
    for i in range(2):
        ref = _layer(ref, valid, _strip_prefix({k: v for k, v in params.items() if k.startswith(f"layers.{i}.")},
                                               f"layers.{i}."))
    torch.testing.assert_close(y.raw_aligned((pb.batch, pb.time, pb.feature))[valid], ref[valid], atol=1e-4,
                               rtol=1e-4)
    y.copy_masked(0.0).raw.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in enc.parameters())


def test_errors():
    model = dt.Dim(D, name="model")
    with pytest.raises(TypeError, match=r"EBranchformerLayer\(\): out_dim must be a static Dim"):
        dt.nn.EBranchformerLayer(8)
    with pytest.raises(TypeError, match=r"EBranchformerLayer\(\): self_att must be None"):
        dt.nn.EBranchformerLayer(model, self_att="rel_pos")
    with pytest.raises(TypeError, match=r"EBranchformerLayer\(\): cgmlp must be None"):
        dt.nn.EBranchformerLayer(model, cgmlp={"class": "FeedForwardConvGated"})
    with pytest.raises(TypeError, match=r"FeedForwardConvGated\(\): ff_dim must be a static Dim or an int >= 1"):
        dt.nn.FeedForwardConvGated(model, ff_dim=0)
    with pytest.raises(ValueError, match=r"FeedForwardConvGated\(\): unknown activation 'gelu_new'"):
        dt.nn.FeedForwardConvGated(model, activation="gelu_new")
    with pytest.raises(TypeError, match=r"Merge\(\): in_dim2 must be a static Dim"):
        dt.nn.Merge(in_dim1=model, in_dim2=4, out_dim=model)
    pb = make_padded_batch((3, 2), D, seed=9)
    layer = dt.nn.EBranchformerLayer(pb.feature, num_heads=H, cgmlp_conv_kernel=3)
    other = dt.Dim(5, name="other")
    with pytest.raises(ValueError, match=r"EBranchformerLayer\(\): x lacks the spatial_dim 'other'\(5\)"):
        layer(pb.x, spatial_dim=other)
    with pytest.raises(ValueError, match=r"EBranchformerLayer\(\): x lacks the feature dim"):
        dt.nn.EBranchformerLayer(model, num_heads=H)(pb.x, spatial_dim=pb.time)
    with pytest.raises(TypeError, match=r"FeedForwardConvGated\(\): x must be a dimtorch.Tensor, got Tensor"):
        layer.cgmlp(pb.x.raw, spatial_dim=pb.time)
    with pytest.raises(ValueError, match=r"Merge\(\): x2 lacks the feature dim"):
        layer.merge(pb.x, dt.Tensor(torch.zeros(2, 3, 5), (pb.batch, pb.time, other)), spatial_dim=pb.time)
