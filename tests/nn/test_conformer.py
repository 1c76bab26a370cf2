"""Tests of the Conformer modules: same loss and gradients as the pure-PyTorch reference (demo/reference_model.py)
with the same weights, batch independence, conv front-end lengths, errors."""
import pathlib
import sys

import pytest
import torch
import torch.nn.functional as F

import dimtorch as dt

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
try:
    from demo.reference_model import ConformerCTC
except ImportError:  # the demo lands separately; the tests that need it are skipped until then
    ConformerCTC = None
needs_reference = pytest.mark.skipif(ConformerCTC is None, reason="demo/reference_model.py is not there")


class Config:
    in_dim, num_labels, model_dim, num_layers, num_heads, ff_dim = 12, 7, 16, 2, 4, 32
    conv_kernel_size, subsample_channels, dropout, att_dropout = 5, (4, 3), 0.0, 0.0


CFG = Config()
if ConformerCTC is not None:
    from demo.reference_model import ModelConfig
    CFG = ModelConfig(**{k: getattr(Config, k) for k in ModelConfig.__dataclass_fields__})


class DimtorchCTC(dt.nn.Module):
    """ConformerEncoder + CTC head in dimtorch, with the reference's parameter names."""

    def __init__(self, cfg, feature: dt.Dim):
        super().__init__()
        self.model_dim = dt.Dim(cfg.model_dim, name="model")
        self.vocab = dt.Dim(cfg.num_labels + 1, name="vocab")
        self.encoder = dt.nn.ConformerEncoder(
            feature, self.model_dim, num_layers=cfg.num_layers, ff_dim=dt.Dim(cfg.ff_dim, name="ff"),
            num_heads=cfg.num_heads, conv_kernel_size=cfg.conv_kernel_size, subsample_channels=cfg.subsample_channels,
            dropout=cfg.dropout, att_dropout=cfg.att_dropout)
        self.output = dt.nn.Linear(self.model_dim, self.vocab)

    def forward(self, x, time):
        h, out_time = self.encoder(x, in_spatial_dim=time)
        return self.output(h), out_time


def _batch(lengths, pad_value, seed=0, feature=12):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(len(lengths), max(lengths), feature, generator=g)
    for b, n in enumerate(lengths):
        x[b, n:] = pad_value
    return x


def _models(seed=0):
    torch.manual_seed(seed)
    feature = dt.Dim(CFG.in_dim, name="feature")
    model = DimtorchCTC(CFG, feature)
    if ConformerCTC is None:
        return None, model, feature
    ref = ConformerCTC(CFG)
    model.load_state_dict(dt.nn.torch_state_dict_to_dimtorch(model, ref.state_dict()))
    with torch.no_grad():  # non-trivial norm statistics and scales
        for name, p in ref.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layer_norm.weight"):
                p.add_(torch.randn_like(p) * 0.1)
        model.load_state_dict(dt.nn.torch_state_dict_to_dimtorch(model, ref.state_dict()))
    return ref, model, feature


def _dt_loss(model, feature, x, lengths, targets, target_lengths):
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(lengths, (batch,)), name="time")
    logits, out_time = model(dt.Tensor(x, (batch, time, feature)), time)
    raw = logits.raw_aligned((out_time, batch, model.vocab))
    out_lengths = out_time.lengths.raw_aligned((batch,))
    log_probs = F.log_softmax(raw, dim=-1)
    loss = F.ctc_loss(log_probs, targets, out_lengths, target_lengths, blank=CFG.num_labels, reduction="sum",
                      zero_infinity=True)
    return loss / max(1, int(target_lengths.sum())), logits, out_time


@needs_reference
@pytest.mark.parametrize("training", [True, False])
def test_conformer_ctc_matches_reference_loss_and_gradients(training):
    ref, model, feature = _models()
    ref.train(training)
    model.train(training)
    lengths = torch.tensor([29, 17, 8, 1])
    x = _batch(lengths.tolist(), float("nan"))
    targets = torch.randint(0, CFG.num_labels, (4, 3), generator=torch.Generator().manual_seed(1))
    target_lengths = torch.tensor([3, 2, 1, 1])
    loss_ref, logits_ref, lens_ref = ref.loss(x, lengths, targets, target_lengths)
    loss, logits, out_time = _dt_loss(model, feature, x, lengths, targets, target_lengths)
    assert out_time.lengths.raw.tolist() == lens_ref.tolist()
    assert torch.isfinite(loss_ref) and torch.isfinite(loss)
    torch.testing.assert_close(loss, loss_ref, rtol=1e-5, atol=1e-6)
    loss_ref.backward()
    loss.backward()
    ref_params = dict(ref.named_parameters())
    for name, p in model.named_parameters():
        twin = name[: -len("scale")] + "weight" if name.endswith(".scale") else name
        q = ref_params[twin]
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")
    if training:  # running statistics updated alike (masked)
        for name, b in model.named_buffers():
            torch.testing.assert_close(b, dict(ref.named_buffers())[name], rtol=1e-5, atol=1e-6)


def test_conformer_encoder_batch_independence():
    _, model, feature = _models(seed=3)
    model.eval()  # in training, batch norm's statistics come from the whole batch (by design)
    lengths = [21, 13, 4, 0]
    for pad_value in (float("nan"), 1e30):
        x = _batch(lengths, pad_value, seed=2)
        batch = dt.Dim(None, name="batch")
        time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
        h, out_time = model.encoder(dt.Tensor(x, (batch, time, feature)), in_spatial_dim=time)
        full = h.raw_aligned((batch, out_time, model.model_dim))
        out_lengths = out_time.lengths.raw.tolist()
        assert out_lengths == [-(-(-(-n // 2)) // 2) for n in lengths]
        for b, n in enumerate(lengths):
            if n == 0:
                continue
            one = dt.Dim(None, name="one")
            t1 = dt.Dim(dt.Tensor(torch.tensor([n]), (one,)), name="t1")
            h1, o1 = model.encoder(dt.Tensor(x[b:b + 1, :n], (one, t1, feature)), in_spatial_dim=t1)
            alone = h1.raw_aligned((one, o1, model.model_dim))[0]
            assert alone.shape[0] == out_lengths[b]
            torch.testing.assert_close(full[b, :out_lengths[b]], alone, rtol=1e-5, atol=1e-5)
        assert torch.isfinite(full[0]).all()


def test_conformer_encoder_training_batch_norm_uses_valid_frames_only():
    # In training the batch norm's statistics come from valid frames only: padding values never matter.
    _, model, feature = _models(seed=4)
    model.train()
    lengths = [11, 6, 3]
    outs = []
    for pad_value in (0.0, 1e30):
        x = _batch(lengths, pad_value, seed=5)
        batch = dt.Dim(None, name="batch")
        time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
        h, out_time = model.encoder(dt.Tensor(x, (batch, time, feature)), in_spatial_dim=time)
        mask = torch.arange(h.raw.shape[1])[None, :] < out_time.lengths.raw[:, None]
        outs.append(h.raw_aligned((batch, out_time, model.model_dim))[mask])
    torch.testing.assert_close(outs[0], outs[1])


def test_conformer_layer_other_dims_order():
    torch.manual_seed(0)
    model = dt.Dim(8, name="model")
    layer = dt.nn.ConformerEncoderLayer(model, num_heads=2, conv_kernel_size=3, dropout=0.0, att_dropout=0.0)
    layer.eval()
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor([5, 2]), (batch,)), name="time")
    x = dt.Tensor(torch.randn(2, 5, 8), (batch, time, model))
    y = layer(x, spatial_dim=time)
    y_t = layer(x.copy_transpose((time, model, batch)), spatial_dim=time)
    mask = torch.tensor([[1] * 5, [1, 1, 0, 0, 0]], dtype=torch.bool)
    a = y.raw_aligned((batch, time, model))[mask]
    b = y_t.raw_aligned((batch, time, model))[mask]
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_conv_subsample_lengths_and_layout():
    feature = dt.Dim(10, name="feature")
    chans = (dt.Dim(2, name="c0"), dt.Dim(3, name="c1"))
    sub = dt.nn.ConformerConvSubsample(feature, chans, strides=[(2, 2), (3, 1)])
    batch = dt.Dim(None, name="batch")
    lengths = [13, 6, 1, 0]
    time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
    x = dt.Tensor(torch.randn(4, 13, 10), (batch, time, feature))
    y, out_time = sub(x, in_spatial_dim=time)
    assert y.dims == (batch, out_time, sub.out_dim)
    assert sub.out_dim.size == 5 * 3  # ceil(10 / 2) = 5 features, then stride 1
    assert out_time.lengths.raw.tolist() == [-(-(-(-n // 2)) // 3) for n in lengths]
    assert y.raw.shape[1] == out_time.get_max_size()


def test_conformer_errors():
    feature = dt.Dim(12, name="feature")
    model = dt.Dim(16, name="model")
    enc = dt.nn.ConformerEncoder(feature, model, num_layers=1, num_heads=4, conv_kernel_size=3)
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor([5]), (batch,)), name="time")
    other = dt.Dim(7, name="other")
    with pytest.raises(ValueError, match=r"ConformerConvSubsample\(\): x lacks the in_dim 'feature'\(12\)"):
        enc(dt.Tensor(torch.zeros(1, 5, 7), (batch, time, other)), in_spatial_dim=time)
    with pytest.raises(ValueError, match=r"ConformerConvBlock\(\): kernel_size must be an odd int, got 4"):
        dt.nn.ConformerConvBlock(model, kernel_size=4)
    with pytest.raises(ValueError, match=r"RelPosSelfAttention\(\): key_dim_total 'model'\(16\) is not divisible by "
                                         r"num_heads 3"):
        dt.nn.ConformerEncoderLayer(model, num_heads=3)
    with pytest.raises(ValueError, match=r"ConformerEncoder\(\): input_layer must be 'conv'"):
        dt.nn.ConformerEncoder(feature, model, num_layers=1, input_layer="vgg")


def _subsample_by_hand(module, raw, lengths):
    """ConformerConvSubsample as hand-written PyTorch: per conv, padding frames zeroed, F.conv2d with
    symmetric 'same' padding and relu; lengths ceildiv(T, stride). raw (N, T, F) -> (N, T', F' * C), lengths."""
    h = raw[:, None]
    lengths = torch.tensor(lengths)
    for conv in module.conv_layers:
        valid = torch.arange(h.shape[2])[None, :] < lengths[:, None]
        h = torch.where(valid[:, None, :, None], h, 0.0)
        ks = tuple(d.size for d in conv.filter_dims)
        h = torch.relu(F.conv2d(h, conv.weight.raw, conv.bias.raw, stride=conv.strides,
                                padding=tuple((k - 1) // 2 for k in ks)))
        lengths = -(-lengths // conv.strides[0])
    n, c, t, f = h.shape
    return h.permute(0, 2, 3, 1).reshape(n, t, f * c), lengths


def test_conv_subsample_equals_hand_written_pytorch():
    """The front end is dt.conv through Conv2d (no copy of it): over extra batch dims, a sequence of
    length 0 and NaN padding, its valid frames are those of the hand-written PyTorch computation."""
    feature = dt.Dim(9, name="feature")
    chans = (dt.Dim(2, name="c0"), dt.Dim(3, name="c1"))
    torch.manual_seed(0)
    module = dt.nn.ConformerConvSubsample(feature, chans, strides=[(2, 2), (2, 1)])
    beam, batch = dt.Dim(2, name="beam"), dt.Dim(None, name="batch")
    lengths = [11, 4, 0]
    time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
    raw = torch.randn(2, 3, 12, 9)  # one frame more than the longest sequence
    raw[:, 1, 4:] = float("nan")
    y, out_time = module(dt.Tensor(raw, (beam, batch, time, feature)), in_spatial_dim=time)
    assert out_time.lengths.raw.tolist() == [3, 1, 0]
    want, want_lengths = _subsample_by_hand(module, raw.reshape(6, 12, 9), lengths * 2)
    assert want_lengths.tolist() == [3, 1, 0] * 2
    got = y.raw_aligned((beam, batch, out_time, module.out_dim)).reshape(6, -1, 15)
    for i, n in enumerate(want_lengths.tolist()):
        torch.testing.assert_close(got[i, :n], want[i, :n])


def test_conformer_encoder_without_front_end_and_learned_positions():
    torch.manual_seed(0)
    feature, model = dt.Dim(6, name="feature"), dt.Dim(8, name="model")
    enc = dt.nn.ConformerEncoder(feature, model, num_layers=1, num_heads=2, conv_kernel_size=3, input_layer=None,
                                 pos_emb="learned", dropout=0.0, att_dropout=0.0)
    enc.eval()
    assert enc.input_layer is None and enc.layers[0].self_att.learned_pos_emb.dims[1] is model
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor([7, 3]), (batch,)), name="time")
    raw = torch.randn(2, 7, 6)
    raw[1, 3:] = float("nan")
    y, out_time = enc(dt.Tensor(raw, (batch, time, feature)), in_spatial_dim=time)
    assert out_time is time and y.dims == (batch, time, model)
    one = dt.Dim(None, name="one")
    t1 = dt.Dim(dt.Tensor(torch.tensor([3]), (one,)), name="t1")
    y1, _ = enc(dt.Tensor(raw[1:, :3], (one, t1, feature)), in_spatial_dim=t1)
    torch.testing.assert_close(y.raw[1, :3], y1.raw[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("input_layer", ["conv", None])
def test_conformer_encoder_nan_padding_gives_finite_gradients(input_layer):
    """The encoder's layers skip the attention's own zeroing (zero_padding=False): the encoder keeps
    their input padding finite, so NaN input padding still reaches no value or gradient."""
    torch.manual_seed(0)
    feature, model = dt.Dim(8, name="feature"), dt.Dim(8, name="model")
    enc = dt.nn.ConformerEncoder(feature, model, num_layers=2, num_heads=2, conv_kernel_size=3,
                                 input_layer=input_layer, subsample_channels=(2, 2), dropout=0.0, att_dropout=0.0)
    assert not any(layer.self_att.zero_padding for layer in enc.layers)
    lengths = [9, 5, 0]
    raw = torch.randn(3, 9, 8)
    for b, n in enumerate(lengths):
        raw[b, n:] = float("nan")
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
    y, out_time = enc(dt.Tensor(raw, (batch, time, feature)), in_spatial_dim=time)
    y.copy_masked(0.0).raw.sum().backward()
    assert torch.isfinite(y.copy_masked(0.0).raw).all()
    for name, p in enc.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("input_layer, raw_frames", [("conv", 1), ("conv", 0), (None, 0)])
def test_conformer_ctc_on_a_batch_of_empty_sequences(input_layer, raw_frames):
    """A batch whose sequences are all empty (what a data-parallel rank without data in a step runs, so
    that it joins the collectives; demo.data.collate pads to 1 raw frame): the front end's output has
    0 frames; the CTC loss is 0 and every
    parameter gets a (zero) gradient, so DDP's and FSDP's reductions see all of them."""
    torch.manual_seed(0)
    feature, model, vocab = dt.Dim(8, name="feature"), dt.Dim(8, name="model"), dt.Dim(5, name="vocab")
    enc = dt.nn.ConformerEncoder(feature, model, num_layers=1, num_heads=2, conv_kernel_size=3,
                                 input_layer=input_layer, subsample_channels=(2, 2), dropout=0.1, att_dropout=0.1)
    out = dt.nn.Linear(model, vocab)
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor([0, 0]), (batch,)), name="time")
    y, out_time = enc(dt.Tensor(torch.randn(2, raw_frames, 8), (batch, time, feature)), in_spatial_dim=time)
    assert out_time.lengths.raw.tolist() == [0, 0]
    target_time = dt.Dim(dt.Tensor(torch.tensor([0, 0]), (batch,)), name="target_time")
    loss = dt.ctc_loss(logits=out(y), targets=dt.Tensor(torch.zeros(2, 1, dtype=torch.int64), (batch, target_time)),
                       input_spatial_dim=out_time, targets_spatial_dim=target_time, blank_index=4)
    assert loss.raw.tolist() == [0.0, 0.0]
    loss.raw.sum().backward()
    for name, p in list(enc.named_parameters()) + list(out.named_parameters()):
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
