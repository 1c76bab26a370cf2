"""TransformerEncoderLayer / TransformerEncoder against a pre-norm Transformer written by hand in torch (forward and
backward, padding NaN/1e30), batch independence, options (ff, self_att, norm, embed_dim, pos_enc), errors."""
import math

import pytest
import torch
import torch.nn.functional as F

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, check_batch_independence, make_padded_batch
from nn_layer_check import check_layer

HEADS = 2


def _torch_mha(x, p, prefix, lengths, causal=False):
    b, t, d = x.shape
    qkv = F.linear(x, p[prefix + "qkv.weight"], p[prefix + "qkv.bias"]).view(b, t, HEADS, 3 * d // HEADS)
    keep = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]  # (B, T) valid keys
    # padding zeroed first: NaN there would reach valid gradients through 0 * NaN in the backward pass
    qkv = torch.where(keep[:, :, None, None], qkv, 0.0)
    q, k, v = qkv.transpose(1, 2).split(d // HEADS, dim=-1)  # (B, H, T, dk)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d // HEADS)
    mask = keep[:, None, None, :]
    if causal:
        mask = mask & torch.ones(t, t, dtype=torch.bool).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    o = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
    return F.linear(o, p[prefix + "proj.weight"], p[prefix + "proj.bias"])


def _ln(x, p, name):
    return F.layer_norm(x, x.shape[-1:], p[name + ".scale"], p[name + ".bias"], eps=1e-5)


def _torch_layer(x, p, prefix, lengths):
    keep = torch.arange(x.shape[1])[None, :] < torch.tensor(lengths)[:, None]
    x = torch.where(keep[:, :, None], x, 0.0)  # NaN padding would reach valid gradients (layer norm's backward)
    x = x + _torch_mha(_ln(x, p, prefix + "self_att_layer_norm"), p, prefix + "self_att.", lengths)
    h = _ln(x, p, prefix + "ff_layer_norm")
    h = F.linear(F.relu(F.linear(h, p[prefix + "ff.linear_ff.weight"], p[prefix + "ff.linear_ff.bias"])),
                 p[prefix + "ff.linear_out.weight"], p[prefix + "ff.linear_out.bias"])
    return x + h


def _sinusoids(t, d):
    """RETURNN frontend's absolute encoding: [sin(p w_k), cos(p w_k)], w_k = 10000^(-k / (d/2 - 1))."""
    w = torch.exp(torch.arange(d // 2) * -(math.log(1e4) / (d // 2 - 1)))
    arg = torch.arange(t)[:, None] * w[None, :]
    return torch.cat([arg.sin(), arg.cos()], dim=-1)


@pytest.mark.parametrize("pad", [0.0, PAD_NAN, PAD_LARGE])
def test_layer_matches_torch(pad):
    pb = make_padded_batch((5, 3, 1), 8, pad_value=pad)
    layer = dt.nn.TransformerEncoderLayer(pb.feature, num_heads=HEADS, dropout=0.0, att_dropout=0.0)
    assert layer.out_dim is pb.feature and layer.self_att.num_heads.size == HEADS
    assert layer.ff.ff_dim.size == 32
    check_layer(layer, lambda m, x: m(x, spatial_dim=pb.time), lambda x, p: _torch_layer(x, p, "", pb.lengths),
                pb.x, (pb.batch, pb.time, pb.feature))


def test_layer_batch_independence():
    pb = make_padded_batch((5, 3, 1), 8, pad_value=PAD_NAN)
    layer = dt.nn.TransformerEncoderLayer(pb.feature, num_heads=HEADS, dropout=0.0, att_dropout=0.0)
    check_batch_independence(lambda x, dm: layer(x, spatial_dim=dm(pb.time)), pb.x, pb.batch, pb.time,
                             rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_encoder_on_features_matches_torch(pad):
    """input_embedding=None: source over model_dim, no scale; sinusoidal positions; two layers; final norm."""
    pb = make_padded_batch((5, 3, 1), 8, pad_value=pad)
    enc = dt.nn.TransformerEncoder(None, pb.feature, num_layers=2, num_heads=HEADS, dropout=0.0, att_dropout=0.0,
                                   input_embedding=None)
    assert enc.out_dim is enc.model_dim is pb.feature

    def reference(x, p):
        x = x + _sinusoids(x.shape[1], 8)
        for i in range(2):
            x = _torch_layer(x, p, f"layers.{i}.", pb.lengths)
        return _ln(x, p, "final_layer_norm")
    check_layer(enc, lambda m, x: m(x, spatial_dim=pb.time), reference, pb.x, (pb.batch, pb.time, pb.feature),
                rtol=1e-4, atol=1e-5)


def test_encoder_on_labels_with_embed_dim():
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor([5, 2]), (batch,)), name="time")
    vocab, model, embed = dt.Dim(11, name="vocab"), dt.Dim(8, name="model"), dt.Dim(6, name="embed")
    labels = torch.randint(0, 11, (2, 5), generator=torch.Generator().manual_seed(1))
    src = dt.Tensor(labels, (batch, time), sparse_dim=vocab)
    enc = dt.nn.TransformerEncoder(vocab, model, num_layers=1, num_heads=HEADS, dropout=0.0, att_dropout=0.0,
                                   embed_dim=embed)
    assert enc.input_embedding.out_dim is embed and enc.input_embedding_proj.in_dim is embed
    p = {n: v.detach() for n, v in enc.named_parameters()}
    x = F.embedding(labels, p["input_embedding.weight"]) * math.sqrt(8) + _sinusoids(5, 6)
    x = F.linear(x, p["input_embedding_proj.weight"])
    want = _ln(_torch_layer(x, p, "layers.0.", [5, 2]), p, "final_layer_norm")
    y = enc(src, spatial_dim=time).raw_aligned((batch, time, model)).detach()
    torch.testing.assert_close(y[0], want[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(y[1, :2], want[1, :2], rtol=1e-4, atol=1e-5)


def test_encoder_layers_have_their_own_initial_values_and_options():
    model = dt.Dim(8, name="model")
    enc = dt.nn.TransformerEncoder(dt.Dim(5, name="vocab"), model, num_layers=2, num_heads=HEADS,
                                   ff=dt.nn.FeedForwardGated, norm=dt.nn.RMSNorm,
                                   layer_opts=dict(self_att=dt.nn.RelPosCausalSelfAttention), dropout=0.0)
    a, b = enc.layers[0], enc.layers[1]
    assert not torch.equal(a.self_att.qkv.weight.raw, b.self_att.qkv.weight.raw)
    assert isinstance(a.self_att, dt.nn.RelPosCausalSelfAttention) and a.self_att.in_dim is model
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor([4, 2]), (batch,)), name="time")
    src = dt.Tensor(torch.randint(0, 5, (2, 4)), (batch, time), sparse_dim=enc.vocab_dim)
    enc.eval()
    full = enc(src, spatial_dim=time).raw
    # causal attention: the first two frames do not depend on the later ones
    short = dt.Dim(2, name="short")
    head = enc(dt.Tensor(src.raw[:, :2], (batch, short), sparse_dim=enc.vocab_dim), spatial_dim=short).raw
    torch.testing.assert_close(head, full[:, :2], rtol=1e-5, atol=1e-5)
    assert isinstance(a.ff, dt.nn.FeedForwardGated) and isinstance(enc.final_layer_norm, dt.nn.RMSNorm)
    proto = dt.nn.TransformerEncoderLayer(model, num_heads=HEADS)
    enc2 = dt.nn.TransformerEncoder(None, model, num_layers=2, layer=proto, input_embedding=None, pos_enc=None)
    assert torch.equal(enc2.layers[0].ff.linear_ff.weight.raw, proto.ff.linear_ff.weight.raw)
    assert enc2.layers[0].ff is not proto.ff


def test_encoder_errors():
    model = dt.Dim(8, name="model")
    pb = make_padded_batch((3, 2), 8)
    with pytest.raises(TypeError, match=r"TransformerEncoder\(\): an input_embedding class needs vocab_dim"):
        dt.nn.TransformerEncoder(None, model, num_layers=1)
    with pytest.raises(ValueError, match=r"TransformerEncoder\(\): num_layers must be an int >= 0"):
        dt.nn.TransformerEncoder(dt.Dim(3, name="v"), model, num_layers=-1)
    with pytest.raises(TypeError, match=r"TransformerEncoderLayer\(\): self_att must be None"):
        dt.nn.TransformerEncoderLayer(model, self_att="relpos")
    enc = dt.nn.TransformerEncoder(None, model, num_layers=1, num_heads=HEADS, input_embedding=None)
    with pytest.raises(ValueError, match=r"TransformerEncoder\(\): without input_embedding, source must be over"):
        enc(pb.x, spatial_dim=pb.time)
    with pytest.raises(ValueError, match=r"TransformerEncoder\(\): source lacks spatial_dim"):
        enc(pb.x, spatial_dim=dt.Dim(3, name="other"))
    layer = dt.nn.TransformerEncoderLayer(pb.feature, num_heads=HEADS)
    with pytest.raises(ValueError, match=r"TransformerEncoderLayer\(\): x lacks the spatial_dim"):
        layer(pb.x, spatial_dim=dt.Dim(3, name="other"))
