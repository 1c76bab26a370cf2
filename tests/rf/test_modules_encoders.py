"""dimtorch.rf's encoders and decoder beside RETURNN frontend's, RETURNN's state dict loaded into ours:
ConformerConvSubsample (pool_sizes, the demo's front end), ConformerConvBlock (kernel 32), ConformerEncoderLayer
(defaults and the demo's options), ConformerEncoder (encoder_layer as a config dict, encoder_layer_opts,
input_dropout, collected_outputs), ConformerFrontend + ConformerEncoderV2, EBranchformerLayer, TransformerEncoder,
FeedForwardGated, TransformerDecoder (full sequence and step by step, encoder_dim=None, options); outputs and
gradients on valid frames with NaN padding on our side."""
import pytest
import torch

import dimtorch as dt
import dimtorch.rf as drf
from dimtorch.rf._dims import single_step_dim as our_step
from dimtorch.rf.decoder import transformer as our_dec
from dimtorch.rf.encoder import conformer as our_conf, conformer_v2 as our_conf2, e_branchformer as our_eb
from dimtorch.rf.encoder import transformer as our_tr
from rf_module_sides import Data, copy_their_params, per_sequence_alone, run_pair, their_raw


def _d(rf_dim, name, size):
    return rf_dim(size, name=name), dt.Dim(size, name=name)


def _square_relu(x):
    import dimtorch as _dt
    if isinstance(x, _dt.Tensor):
        return _dt.relu(x) ** 2.0
    import returnn.frontend as _rf
    return _rf.relu(x) ** 2.0


DEMO_LAYER_OPTS = dict(conv_norm_opts=dict(use_mask=True),
                       self_att_opts=dict(with_bias=False, with_linear_pos=False, with_pos_bias=False,
                                          learnable_pos_emb=True, separate_pos_emb_per_head=False),
                       ff_activation=_square_relu)


def _subsample(module_cls, rfeat, names_sizes, rdimcls):
    return module_cls(rfeat, out_dims=[rdimcls(s, name=n) for n, s in names_sizes], filter_sizes=[(3, 3)] * 3,
                      pool_sizes=[(1, 2)], strides=[(1, 1), (3, 1), (2, 1)])


def test_conformer_conv_subsample(rf):
    """The demo's front end: 3 Conv2d, a max pool (1, 2) after the first, 6x time downsampling."""
    from returnn.frontend.encoder.conformer import ConformerConvSubsample
    from returnn.tensor import Dim as RfDim
    data = Data(rf, feature=10, lengths=(13, 7, 1), pad=float("nan"))
    chans = [("c1", 4), ("c2", 6), ("c3", 6)]
    theirs = _subsample(ConformerConvSubsample, data.rfeat, chans, RfDim)
    ours = _subsample(our_conf.ConformerConvSubsample, data.feat, chans, dt.Dim)
    assert ours.out_dim.size == theirs.out_dim.dimension and ours.downsample_factor == theirs.downsample_factor == 6
    copy_their_params(rf, theirs, ours)
    rf.init_forward_step_run_ctx()
    drf.init_forward_step_run_ctx()
    ry, rt = theirs(data.rx, in_spatial_dim=data.rtime)
    y, t = ours(data.x, in_spatial_dim=data.time)
    drf.reset_run_ctx()
    assert t.lengths.raw.tolist() == rt.dyn_size_ext.raw_tensor.tolist()
    r = their_raw(ry, [data.rbatch, rt, theirs.out_dim]).detach()
    d = y.raw_aligned((data.batch, t, ours.out_dim))
    for b, n in enumerate(t.lengths.raw.tolist()):
        torch.testing.assert_close(d[b, :n].detach(), r[b, :n], atol=1e-5, rtol=1e-4)
    d.sum().backward()  # NaN input padding reaches no gradient
    for p in ours.parameters():
        assert torch.isfinite(p.grad).all()


def test_conformer_conv_block_kernel_32(rf):
    from returnn.frontend.encoder.conformer import ConformerConvBlock
    data = Data(rf, feature=8, lengths=(40, 20, 1), pad=float("nan"))
    theirs = ConformerConvBlock(data.rfeat, kernel_size=32, norm=rf.BatchNorm(data.rfeat, use_mask=True))
    ours = our_conf.ConformerConvBlock(data.feat, kernel_size=32, norm=drf.BatchNorm(data.feat, use_mask=True))
    x = data.x.copy_masked(0.0)  # (a conv block alone takes finite padding: its Linear's weight gradient sums it)
    y, _ = run_pair(rf, data, theirs, ours, lambda: theirs(data.rx, spatial_dim=data.rtime),
                    lambda: ours(x, spatial_dim=data.time),
                    lambda side: [data.rbatch, data.rtime, data.rfeat] if side == "theirs" else
                    [data.batch, data.time, data.feat], atol=1e-4)


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("opts", [{}, DEMO_LAYER_OPTS], ids=["default", "demo"])
def test_conformer_encoder_layer(rf, opts, train):
    """Eval, and train mode (dropout 0): the masked BatchNorm's batch statistics, as RETURNN's."""
    from returnn.frontend.encoder.conformer import ConformerEncoderLayer
    from returnn.tensor import Dim as RfDim
    data = Data(rf, feature=8, lengths=(9, 5, 1), pad=float("nan"))
    rff, ff = _d(RfDim, "ff", 16)
    theirs = ConformerEncoderLayer(data.rfeat, ff_dim=rff, num_heads=2, dropout=0.0, att_dropout=0.0, **opts)
    ours = our_conf.ConformerEncoderLayer(data.feat, ff_dim=ff, num_heads=2, dropout=0.0, att_dropout=0.0, **opts)
    assert ours.conv_block.depthwise_conv.filter.raw.shape[-1] == 32
    out = lambda side: [data.rbatch, data.rtime, data.rfeat] if side == "theirs" else [data.batch, data.time, data.feat]
    run_pair(rf, data, theirs, ours, lambda: theirs(data.rx, spatial_dim=data.rtime),
             lambda: ours(data.x, spatial_dim=data.time), out, train=train, atol=1e-4, grad_atol=1e-3)


def test_conformer_encoder_demo_config(rf):
    """The demo's encoder (small): ConformerConvSubsample with pool_sizes, encoder_layer_opts, input dropout;
    and encoder_layer given as a RETURNN config dict (rf.build_dict), collected_outputs."""
    from returnn.frontend.encoder.conformer import ConformerConvSubsample, ConformerEncoder, ConformerEncoderLayer
    from returnn.tensor import Dim as RfDim
    data = Data(rf, feature=10, lengths=(25, 13, 6), pad=float("nan"))
    (rmodel, model), (rff, ff) = _d(RfDim, "model", 8), _d(RfDim, "ff", 16)
    chans = [("c1", 4), ("c2", 4), ("c3", 4)]
    theirs = ConformerEncoder(data.rfeat, rmodel, ff_dim=rff, input_layer=_subsample(ConformerConvSubsample, data.rfeat,
                                                                                    chans, RfDim),
                              encoder_layer_opts=DEMO_LAYER_OPTS, num_layers=2, num_heads=2, dropout=0.0,
                              att_dropout=0.0, input_dropout=0.0)
    ours = our_conf.ConformerEncoder(data.feat, model, ff_dim=ff,
                                     input_layer=_subsample(our_conf.ConformerConvSubsample, data.feat, chans, dt.Dim),
                                     encoder_layer_opts=DEMO_LAYER_OPTS, num_layers=2, num_heads=2, dropout=0.0,
                                     att_dropout=0.0, input_dropout=0.0)
    sd = copy_their_params(rf, theirs, ours)
    assert "layers.1.self_att.learned_pos_emb.pos_emb" in sd and "input_projection.weight" in sd
    rf.init_forward_step_run_ctx()
    drf.init_forward_step_run_ctx()
    r_coll, d_coll = {}, {}
    ry, rt = theirs(data.rx, in_spatial_dim=data.rtime, collected_outputs=r_coll)
    y, t = ours(data.x, in_spatial_dim=data.time, collected_outputs=d_coll)
    drf.reset_run_ctx()
    assert list(r_coll) == list(d_coll) == ["0", "1"]
    r = their_raw(ry, [data.rbatch, rt, rmodel]).detach()
    d = y.raw_aligned((data.batch, t, model))
    for b, n in enumerate(t.lengths.raw.tolist()):
        torch.testing.assert_close(d[b, :n].detach(), r[b, :n], atol=1e-4, rtol=1e-3)
    # encoder_layer as a config dict (RETURNN's class path): built as dimtorch.rf's layer
    layer = rf.build_dict(ConformerEncoderLayer, ff_dim=rff, num_heads=2, dropout=0.0, att_dropout=0.0)
    ours_dict = our_conf.ConformerEncoder(data.feat, model, input_layer=None, num_layers=1,
                                          encoder_layer=dict(layer, ff_dim=ff))
    assert layer["class"].startswith("returnn.frontend.")
    assert isinstance(ours_dict.layers[0], our_conf.ConformerEncoderLayer)
    assert ours_dict.layers[0].ffn1.linear_ff.out_dim is ff



def test_conformer_encoder_masks_the_frontend_output_only_when_its_padding_may_be_non_finite(monkeypatch):
    """After ConformerConvSubsample with relu (each conv zeroes its input's padding: finite padding out), the
    encoder does not zero the padding again: outputs on valid frames and every parameter gradient (training,
    NaN padding in the input) are those of the masked path, and finite. Another activation may make the
    padding non-finite (log of a zero): then the encoder masks it."""
    batch, feat, model = dt.Dim(3, name="b"), dt.Dim(10, name="f"), dt.Dim(8, name="model")
    time = dt.Dim(dt.Tensor(torch.tensor([25, 13, 6]), (batch,)), name="t")
    raw = torch.randn(3, 25, 10, generator=torch.Generator().manual_seed(0))
    for b, n in enumerate([25, 13, 6]):
        raw[b, n:] = float("nan")
    chans = [("c1", 4), ("c2", 4), ("c3", 4)]

    def subsample(**kw):
        return our_conf.ConformerConvSubsample(feat, out_dims=[dt.Dim(s, name=n) for n, s in chans],
                                               filter_sizes=[(3, 3)] * 3, pool_sizes=[(1, 2)],
                                               strides=[(1, 1), (3, 1), (2, 1)], **kw)

    def run(skip_allowed: bool):
        torch.manual_seed(1)
        enc = our_conf.ConformerEncoder(feat, model, ff_dim=dt.Dim(16, name="ff"), input_layer=subsample(),
                                        encoder_layer_opts=DEMO_LAYER_OPTS, num_layers=1, num_heads=2, dropout=0.0,
                                        att_dropout=0.0, input_dropout=0.0)
        if not skip_allowed:
            monkeypatch.setattr(our_conf.ConformerConvSubsample, "finite_padding", property(lambda self: False))
        drf.init_train_step_run_ctx(train_flag=True)
        y, t = enc(dt.Tensor(raw.clone(), (batch, time, feat)), in_spatial_dim=time)
        drf.reset_run_ctx()
        monkeypatch.undo()
        valid = y.raw_aligned((batch, t, model))
        lengths = t.lengths.raw.tolist()
        sum(valid[b, :n].sum() for b, n in enumerate(lengths)).backward()
        return [valid[b, :n].detach() for b, n in enumerate(lengths)], {k: p.grad for k, p in enc.named_parameters()}

    outs, grads = run(True)
    ref_outs, ref_grads = run(False)
    for a, b in zip(outs, ref_outs):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert grads.keys() == ref_grads.keys()
    for k in grads:
        assert torch.isfinite(grads[k]).all(), k
        torch.testing.assert_close(grads[k], ref_grads[k], atol=1e-5, rtol=1e-4)
    assert subsample().finite_padding and not subsample(activation=drf.log).finite_padding


def test_conformer_conv_subsample_pools_before_relu_exactly():
    """With relu, the max pool runs before it (on the conv output): values and every gradient equal relu then
    pool (the same module with another relu function object), bit for bit; conv outputs with ties, zeros,
    negatives and NaN (a NaN input frame) included."""
    batch, feat = dt.Dim(3, name="b"), dt.Dim(10, name="f")
    time = dt.Dim(dt.Tensor(torch.tensor([9, 5, 2]), (batch,)), name="t")
    raw = torch.randn(3, 9, 10, generator=torch.Generator().manual_seed(0))
    raw[0, 3, 4] = float("nan")
    chans = [("c1", 4), ("c2", 4), ("c3", 4)]
    results = []
    for activation in (drf.relu, lambda x: drf.relu(x)):
        torch.manual_seed(3)
        sub = our_conf.ConformerConvSubsample(feat, out_dims=[dt.Dim(s, name=n) for n, s in chans],
                                              filter_sizes=[(3, 3)] * 3, pool_sizes=[(1, 2)],
                                              strides=[(1, 1), (3, 1), (2, 1)], activation=activation)
        with torch.no_grad():  # ties among the first conv's outputs: positive (channel 1), negative (2)
            sub.conv_layers[0].filter.raw[1:3] = 0.0
            sub.conv_layers[0].bias.raw[1:3] = torch.tensor([0.5, -0.5])
        x = raw.clone().requires_grad_()
        y, t = sub(dt.Tensor(x, (batch, time, feat)), in_spatial_dim=time)
        out = y.raw_aligned((batch, t, sub.out_dim))
        out.backward(torch.linspace(-1, 1, out.numel()).view(out.shape))
        results.append([out.detach(), x.grad] + [p.grad for p in sub.parameters()])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def test_conformer_layers_get_their_own_initial_values():
    """A layer copied per layer (as rf's deep copy) is initialized again: the layers differ."""
    model = dt.Dim(8, name="model")
    enc = our_conf2.ConformerEncoderV2(model, num_layers=2, num_heads=2)
    w0 = enc.layers[0].ffn1.linear_ff.weight.raw
    w1 = enc.layers[1].ffn1.linear_ff.weight.raw
    assert w0.shape == w1.shape and not torch.equal(w0, w1)


def test_conformer_v2_and_frontend(rf):
    from returnn.frontend.encoder.conformer import ConformerConvSubsample
    from returnn.frontend.encoder.conformer_v2 import ConformerEncoderV2, ConformerFrontend
    from returnn.tensor import Dim as RfDim
    data = Data(rf, feature=10, lengths=(13, 7, 1), pad=float("nan"))
    rmodel, model = _d(RfDim, "model", 8)
    chans = [("c1", 4), ("c2", 4), ("c3", 4)]
    rfront = ConformerFrontend(data.rfeat, rmodel, input_layer=_subsample(ConformerConvSubsample, data.rfeat, chans,
                                                                         RfDim), input_dropout=0.0)
    front = our_conf2.ConformerFrontend(data.feat, model, input_layer=_subsample(our_conf.ConformerConvSubsample,
                                                                                 data.feat, chans, dt.Dim),
                                        input_dropout=0.0)
    copy_their_params(rf, rfront, front)
    renc = ConformerEncoderV2(rmodel, num_layers=2, num_heads=2, dropout=0.0, att_dropout=0.0)
    enc = our_conf2.ConformerEncoderV2(model, num_layers=2, num_heads=2, dropout=0.0, att_dropout=0.0)
    copy_their_params(rf, renc, enc)
    rf.init_forward_step_run_ctx()
    drf.init_forward_step_run_ctx()
    rx, rt = rfront(data.rx, in_spatial_dim=data.rtime)
    x, t = front(data.x, in_spatial_dim=data.time)
    ry, y = renc(rx, spatial_dim=rt), enc(x, spatial_dim=t)
    drf.reset_run_ctx()
    r = their_raw(ry, [data.rbatch, rt, rmodel]).detach()
    d = y.raw_aligned((data.batch, t, model)).detach()
    for b, n in enumerate(t.lengths.raw.tolist()):
        torch.testing.assert_close(d[b, :n], r[b, :n], atol=1e-4, rtol=1e-3)


def test_e_branchformer_layer(rf):
    from returnn.frontend.encoder.e_branchformer import EBranchformerLayer
    from returnn.tensor import Dim as RfDim
    data = Data(rf, feature=8, lengths=(9, 5, 1), pad=float("nan"))
    rff, ff = _d(RfDim, "ff", 16)
    theirs = EBranchformerLayer(data.rfeat, ff_dim=rff, num_heads=2, dropout=0.0, att_dropout=0.0, cgmlp_ff_dim=6,
                                cgmlp_conv_kernel=5)
    ours = our_eb.EBranchformerLayer(data.feat, ff_dim=ff, num_heads=2, dropout=0.0, att_dropout=0.0, cgmlp_ff_dim=6,
                                     cgmlp_conv_kernel=5)
    out = lambda side: [data.rbatch, data.rtime, data.rfeat] if side == "theirs" else [data.batch, data.time, data.feat]
    run_pair(rf, data, theirs, ours, lambda: theirs(data.rx, spatial_dim=data.rtime),
             lambda: ours(data.x, spatial_dim=data.time), out, atol=1e-4, grad_atol=1e-3)


def test_transformer_encoder(rf):
    from returnn.frontend.decoder.transformer import FeedForwardGated
    from returnn.frontend.encoder.transformer import TransformerEncoder
    from returnn.tensor import Dim as RfDim
    data = Data(rf, sparse=11)
    rmodel, model = _d(RfDim, "model", 8)
    theirs = TransformerEncoder(data.rfeat, rmodel, num_layers=2, num_heads=2, dropout=0.0, att_dropout=0.0,
                                ff=FeedForwardGated)
    ours = our_tr.TransformerEncoder(data.feat, model, num_layers=2, num_heads=2, dropout=0.0, att_dropout=0.0,
                                     ff=our_dec.FeedForwardGated)
    out = lambda side: [data.rbatch, data.rtime, rmodel] if side == "theirs" else [data.batch, data.time, model]
    y, _ = run_pair(rf, data, theirs, ours, lambda: theirs(data.rx, spatial_dim=data.rtime),
                    lambda: ours(data.x, spatial_dim=data.time), out, atol=1e-4, grad_atol=1e-3)
    per_sequence_alone(data, lambda x, b, t: ours(x, spatial_dim=t), y, lambda b, t: (b, t, model), atol=1e-4)


@pytest.mark.parametrize("options", [dict(), dict(encoder_dim=None), dict(share_embedding=False, logits_with_bias=True),
                                     dict(input_embedding_scale=1.0, decoder_layer_opts=dict(self_att_opts=dict(
                                         with_bias=False)))],
                         ids=["default", "no-encoder", "unshared", "compat-names"])
def test_transformer_decoder(rf, options):
    """Full sequence (teacher forcing) and step by step with the state, against RETURNN's full sequence."""
    from returnn.frontend.decoder.transformer import TransformerDecoder
    from returnn.tensor import Dim as RfDim, single_step_dim
    options = dict(options)
    enc = Data(rf, feature=6, lengths=(5, 3, 2), pad=float("nan"))
    labels = Data(rf, sparse=9, lengths=(4, 2, 3), seed=3)
    # the labels over the encoder's batch dim on both sides
    labels.rbatch, labels.batch = enc.rbatch, enc.batch
    lens = torch.tensor(labels.lengths, dtype=torch.int32)
    labels.rtime = RfDim(rf.convert_to_tensor(lens, dims=[enc.rbatch]), name="labels")
    labels.rx = rf.convert_to_tensor(labels.raw.clone(), dims=[enc.rbatch, labels.rtime], sparse_dim=labels.rfeat)
    rmodel, model = _d(RfDim, "model", 8)
    with_enc = options.pop("encoder_dim", 1) is not None
    theirs = TransformerDecoder(enc.rfeat if with_enc else None, labels.rfeat, rmodel, num_layers=2, num_heads=2,
                                dropout=0.0, att_dropout=0.0, **options)
    ours = our_dec.TransformerDecoder(enc.feat if with_enc else None, labels.feat, model, num_layers=2, num_heads=2,
                                      dropout=0.0, att_dropout=0.0, **options)
    sd = copy_their_params(rf, theirs, ours)
    assert sorted(ours.state_dict()) == sorted(sd)
    if options.get("share_embedding", True):
        assert ours.logits.weight.raw is ours.input_embedding.weight.raw
    rf.init_forward_step_run_ctx()
    drf.init_forward_step_run_ctx()
    r_enc = theirs.transform_encoder(enc.rx, axis=enc.rtime) if with_enc else None
    d_enc = ours.transform_encoder(enc.x, axis=enc.time) if with_enc else None
    ry, _ = theirs(labels.rx, spatial_dim=labels.rtime, state=theirs.default_initial_state(batch_dims=[labels.rbatch]),
                   encoder=r_enc)
    ltime = dt.Dim(dt.Tensor(torch.tensor(labels.lengths), (enc.batch,)), name="labels")  # over the encoder's batch
    labels_ours = dt.Tensor(labels.x.raw, (enc.batch, ltime), sparse_dim=labels.feat)
    y, _ = ours(labels_ours, spatial_dim=ltime, state=ours.default_initial_state(batch_dims=[enc.batch]),
                encoder=d_enc)
    r = their_raw(ry, [enc.rbatch, labels.rtime, labels.rfeat]).detach()
    d = y.raw_aligned((enc.batch, ltime, labels.feat)).detach()
    for b, n in enumerate(labels.lengths):
        torch.testing.assert_close(d[b, :n], r[b, :n], atol=1e-4, rtol=1e-3)
    state = ours.default_initial_state(batch_dims=[enc.batch])
    for i in range(2):
        step = dt.Tensor(labels.x.raw[:, i].clone(), (enc.batch,), sparse_dim=labels.feat)
        ys, state = ours(step, spatial_dim=our_step, state=state, encoder=d_enc)
        torch.testing.assert_close(ys.raw_aligned((enc.batch, labels.feat)).detach(), r[:, i], atol=1e-4, rtol=1e-3)
    drf.reset_run_ctx()
