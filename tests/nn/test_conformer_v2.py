"""Tests of python/dimtorch/nn/conformer_v2.py (RETURNN frontend's ConformerFrontend + ConformerEncoderV2) and of
Sequential called as rf's (kwargs to every module, collected_outputs, built from a generator or a dict).

V2 against V1: ConformerEncoder (V1) is tested against the hand-written PyTorch reference
(tests/nn/test_conformer.py); the front end and the encoder V2 with V1's weights give V1's output and
gradients, on padding holding NaN and 1e30, and each sequence alone gives what it gets in the batch."""
import pytest
import torch

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN

IN, MODEL, LAYERS = 12, 16, 2


def _v1_and_v2(input_dropout=0.0):
    torch.manual_seed(0)
    feature, model = dt.Dim(IN, name="feature"), dt.Dim(MODEL, name="model")
    ff = dt.Dim(32, name="ff")
    v1 = dt.nn.ConformerEncoder(feature, model, num_layers=LAYERS, ff_dim=ff, num_heads=4, conv_kernel_size=5,
                                subsample_channels=(4, 3), dropout=0.0, att_dropout=0.0)
    front = dt.nn.ConformerFrontend(feature, model, input_layer=v1.input_layer, input_dropout=input_dropout)
    enc = dt.nn.ConformerEncoderV2(model, num_layers=LAYERS, ff_dim=ff, num_heads=4, conv_kernel_size=5,
                                   dropout=0.0, att_dropout=0.0)
    front.input_projection.load_state_dict(v1.input_projection.state_dict())
    enc.layers.load_state_dict(v1.layers.state_dict())
    for m in (v1, front, enc):
        m.eval()
    return feature, v1, front, enc


def _batch(feature, lengths, pad, seed=1):
    g = torch.Generator().manual_seed(seed)
    raw = torch.randn(len(lengths), max(lengths), IN, generator=g)
    for b, n in enumerate(lengths):
        raw[b, n:] = pad
    batch = dt.Dim(len(lengths), name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor(lengths), dims=(batch,)), name="time")
    return raw.requires_grad_(True), batch, time


def _valid(y: dt.Tensor, batch, time):
    raw = y.raw.permute(*[y.dims.index(d) for d in (batch, time)], *[i for i, d in enumerate(y.dims)
                                                                    if d is not batch and d is not time])
    lengths = time.lengths.raw.tolist()
    return torch.cat([raw[b, :n] for b, n in enumerate(lengths)])


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_frontend_and_encoder_v2_equal_conformer_encoder_v1(pad):
    feature, v1, front, enc = _v1_and_v2()
    lengths = [23, 17, 9]
    raw, batch, time = _batch(feature, lengths, pad)
    x = dt.Tensor(raw, (batch, time, feature), feature_dim=feature)
    y1, t1 = v1(x, in_spatial_dim=time)
    g1 = torch.autograd.grad(_valid(y1, batch, t1).square().sum(), [raw] + list(v1.parameters()))
    h, t2 = front(x, in_spatial_dim=time)
    y2 = enc(h, spatial_dim=t2)
    g2 = torch.autograd.grad(_valid(y2, batch, t2).square().sum(),
                             [raw] + list(front.parameters()) + list(enc.parameters()))
    assert set(y2.dims) == set(y1.dims)
    torch.testing.assert_close(t2.lengths.raw, t1.lengths.raw)
    torch.testing.assert_close(_valid(y2, batch, t2), _valid(y1, batch, t1))
    valid_frames = lambda g: torch.cat([g[b, :n] for b, n in enumerate(lengths)])  # noqa: E731
    torch.testing.assert_close(valid_frames(g2[0]), valid_frames(g1[0]))
    # V2's parameter names are V1's (input_layer., input_projection., layers.N.): same gradients
    by_name_v1 = dict(zip([n for n, _ in v1.named_parameters()], g1[1:]))
    names_v2 = [n for n, _ in front.named_parameters()] + [n for n, _ in enc.named_parameters()]
    assert sorted(names_v2) == sorted(by_name_v1)
    for name, grad in zip(names_v2, g2[1:]):
        assert torch.isfinite(grad).all(), name
        torch.testing.assert_close(grad, by_name_v1[name], msg=name)


def test_encoder_v2_batch_independence():
    feature, _, front, enc = _v1_and_v2()
    lengths = [19, 11, 7]
    raw, batch, time = _batch(feature, lengths, PAD_NAN)
    h, out_time = front(dt.Tensor(raw.detach(), (batch, time, feature), feature_dim=feature), in_spatial_dim=time)
    y = _valid(enc(h, spatial_dim=out_time), batch, out_time)
    start = 0
    for b, (n, m) in enumerate(zip(lengths, out_time.lengths.raw.tolist())):
        _, batch1, time1 = _batch(feature, [n], PAD_NAN)
        h1, t1 = front(dt.Tensor(raw.detach()[b:b + 1, :n], (batch1, time1, feature), feature_dim=feature),
                       in_spatial_dim=time1)
        torch.testing.assert_close(_valid(enc(h1, spatial_dim=t1), batch1, t1), y[start:start + m],
                                   atol=1e-5, rtol=1e-4)
        start += m


def test_collected_outputs_and_layer_copies():
    feature, _, front, enc = _v1_and_v2()
    raw, batch, time = _batch(feature, [9, 5], PAD_LARGE)
    h, t = front(dt.Tensor(raw.detach(), (batch, time, feature), feature_dim=feature), in_spatial_dim=time)
    collected = {}
    y = enc(h, spatial_dim=t, collected_outputs=collected)
    assert list(collected) == ["0", "1"] and collected["1"] is y
    assert enc.layers[0] is not enc.layers[1]
    assert enc.layers[0].conv_block.depthwise_conv.weight is not enc.layers[1].conv_block.depthwise_conv.weight


@pytest.mark.allow_leaks  # the shared default out_dim (module-level, as rf's) keeps the dims derived from it
def test_defaults_fit_together_and_options():
    feature = dt.Dim(IN, name="feature")
    sub = dt.nn.ConformerConvSubsample(feature, (dt.Dim(4, name="c0"),), filter_sizes=[(3, 3)], strides=[(2, 2)])
    front = dt.nn.ConformerFrontend(feature, input_layer=sub, input_embedding_scale=2.0)
    enc = dt.nn.ConformerEncoderV2(num_layers=1, num_heads=8, conv_kernel_size=3)
    assert front.out_dim is enc.out_dim and front.out_dim.size == 512
    assert front.input_projection.in_dim is sub.out_dim and front.input_projection.bias is None
    none = dt.nn.ConformerFrontend(feature, feature, input_layer=None, input_dropout=0.0)
    assert none.input_projection is None
    raw, batch, time = _batch(feature, [5, 3], PAD_NAN)
    x = dt.Tensor(raw.detach(), (batch, time, feature), feature_dim=feature)
    y, t = none(x, in_spatial_dim=time)
    assert y is x and t is time
    front.eval()  # (input_dropout 0.1 in training)
    scaled, _ = front(x, in_spatial_dim=time)
    front.input_embedding_scale = 1.0
    plain, _ = front(x, in_spatial_dim=time)
    torch.testing.assert_close(scaled.raw, 2.0 * plain.raw, equal_nan=True)
    # a layer class with extra options, as rf's encoder_layer / encoder_layer_opts
    enc2 = dt.nn.ConformerEncoderV2(dt.Dim(8, name="m"), num_layers=2, num_heads=2, conv_kernel_size=3,
                                    encoder_layer=dt.nn.ConformerEncoderLayer,
                                    encoder_layer_opts={"pos_emb": "learned"})
    assert len(enc2.layers) == 2 and hasattr(enc2.layers[1].self_att, "learned_pos_emb")


def test_errors():
    feature = dt.Dim(IN, name="feature")
    with pytest.raises(TypeError, match=r"ConformerFrontend\(\): input_layer must be a module"):
        dt.nn.ConformerFrontend(feature, input_layer={"class": "ConformerConvSubsample"})
    with pytest.raises(ValueError, match=r"ConformerFrontend\(\): input_layer has no out_dim"):
        dt.nn.ConformerFrontend(feature, input_layer=lambda x, in_spatial_dim: (x, in_spatial_dim))
    with pytest.raises(ValueError, match=r"ConformerEncoderV2\(\): num_layers must be an int >= 0"):
        dt.nn.ConformerEncoderV2(num_layers=-1)
    with pytest.raises(TypeError, match=r"ConformerEncoderV2\(\): encoder_layer must be a module"):
        dt.nn.ConformerEncoderV2(num_layers=1, encoder_layer={"class": "x"})
    enc = dt.nn.ConformerEncoderV2(dt.Dim(8, name="m"), num_layers=1, num_heads=2, conv_kernel_size=3)
    other = dt.Dim(3, name="other")
    with pytest.raises(ValueError, match=r"ConformerEncoderV2\(\): x must be a dimtorch.Tensor over spatial_dim"):
        enc(dt.Tensor(torch.zeros(3, 8), (other, enc.out_dim)), spatial_dim=dt.Dim(4, name="time"))


def test_sequential_as_returnn_frontends():
    i = dt.Dim(3, name="i")
    torch.manual_seed(0)
    seq = dt.nn.Sequential(dt.nn.Linear(i, i) for _ in range(2))
    assert list(seq._modules) == ["0", "1"] and isinstance(seq, torch.nn.Sequential)
    named = dt.nn.Sequential({"a": seq[0], "b": lambda t, scale: t * scale})
    b = dt.Dim(2, name="b")
    x = dt.Tensor(torch.randn(2, 3), (b, i))
    with pytest.raises(TypeError):
        named(x)  # the Linear gets scale= too: kwargs go to every module, as in rf
    calls = []
    kw_seq = dt.nn.Sequential(lambda t, *, spatial_dim: calls.append(spatial_dim) or t * 2,
                              lambda t, *, spatial_dim: t + 1)
    collected = {}
    y = kw_seq(x, spatial_dim=b, collected_outputs=collected)
    assert calls == [b] and list(collected) == ["0", "1"]
    torch.testing.assert_close(y.raw, x.raw * 2 + 1)
    torch.testing.assert_close(collected["0"].raw, x.raw * 2)
    z = dt.nn.sequential(x, seq[0], seq[1])
    torch.testing.assert_close(z.raw, seq(x).raw)
    with pytest.raises(TypeError, match=r"dimtorch.nn.Sequential\(\): expected a module or a callable, got int"):
        dt.nn.Sequential(1)


def test_conformer_layer_takes_returnn_options():
    """rf's ConformerEncoderLayer options: conv_norm, ff_activation, self_att, norm; padding (NaN vs 1e30) does not
    reach valid frames, and each sequence alone gives its frames in the batch."""
    torch.manual_seed(0)
    model = dt.Dim(8, name="model")
    layer = dt.nn.ConformerEncoderLayer(model, num_heads=2, conv_kernel_size=3, dropout=0.0, att_dropout=0.0,
                                        conv_norm=dt.nn.LayerNorm, ff_activation="relu",
                                        self_att=dt.nn.SelfAttention, norm=dt.nn.RMSNorm).eval()
    assert isinstance(layer.conv_block.norm, dt.nn.LayerNorm) and isinstance(layer.self_att, dt.nn.SelfAttention)
    assert all(isinstance(getattr(layer, n), dt.nn.RMSNorm) for n in (
        "ffn1_layer_norm", "ffn2_layer_norm", "conv_layer_norm", "self_att_layer_norm", "final_layer_norm"))
    assert layer.ffn1.activation is dt.relu and layer.ffn1 is not layer.ffn2
    lengths = [6, 4, 1]
    outs = []
    for pad in (PAD_NAN, PAD_LARGE):
        g = torch.Generator().manual_seed(2)
        raw = torch.randn(3, 6, 8, generator=g)
        for b, n in enumerate(lengths):
            raw[b, n:] = pad
        batch = dt.Dim(3, name="batch")
        time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
        x = dt.Tensor(raw, (batch, time, model), feature_dim=model).copy_masked(0.0)
        y = layer(x, spatial_dim=time)
        outs.append(_valid(y, batch, time))
    torch.testing.assert_close(outs[0], outs[1])
    start = 0
    for b, n in enumerate(lengths):
        batch1 = dt.Dim(1, name="b1")
        t1 = dt.Dim(dt.Tensor(torch.tensor([n]), (batch1,)), name="t1")
        g = torch.Generator().manual_seed(2)
        raw = torch.randn(3, 6, 8, generator=g)[b:b + 1, :n]
        y1 = layer(dt.Tensor(raw, (batch1, t1, model), feature_dim=model), spatial_dim=t1)
        torch.testing.assert_close(_valid(y1, batch1, t1), outs[0][start:start + n], atol=1e-5, rtol=1e-4)
        start += n
    with pytest.raises(TypeError, match=r"ConformerEncoderLayer\(\): self_att: RETURNN config dicts"):
        dt.nn.ConformerEncoderLayer(model, num_heads=2, self_att={"class": "x"})
    with pytest.raises(TypeError, match=r"ConformerConvBlock\(\): norm must be a class, a module or a callable"):
        dt.nn.ConformerEncoderLayer(model, num_heads=2, conv_norm={"class": "x"})
