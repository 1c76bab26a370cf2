"""dt.nn layers beside their RETURNN frontend modules: the rf module's parameters copied into ours, the same
padded data through both, outputs compared on valid frames (skipped where returnn is not installed).

Parameter names are the same on both sides except that rf keeps a Linear weight as (in, out) where ours is
(out, in) (transposed on copy) and rf's LSTM weights are ff_weight/rec_weight/bias as ours (ZoneoutLSTM)."""
from __future__ import annotations

import pytest
import torch

import dimtorch as dt

LENGTHS = (6, 4, 1)
PAD = 1e4  # finite, large: a leak into a valid frame shows


class Sides:
    """The same padded input (batch, time, model) on both sides, with each side's dims."""

    def __init__(self, rf, model: int = 8, lengths=LENGTHS, seed: int = 0):
        from returnn.tensor import Dim as RfDim
        g = torch.Generator().manual_seed(seed)
        self.lengths = list(lengths)
        raw = torch.randn(len(lengths), max(lengths), model, generator=g)
        for b, n in enumerate(lengths):
            raw[b, n:] = PAD
        self.raw = raw
        lens = torch.tensor(lengths, dtype=torch.int32)
        self.rbatch = RfDim(len(lengths), name="batch")
        self.rtime = RfDim(rf.convert_to_tensor(lens, dims=[self.rbatch]), name="time")
        self.rmodel = RfDim(model, name="model")
        self.rx = rf.convert_to_tensor(raw.clone(), dims=[self.rbatch, self.rtime, self.rmodel],
                                       feature_dim=self.rmodel)
        self.batch = dt.Dim(None, name="batch")
        self.time = dt.Dim(dt.Tensor(lens.to(torch.int64), (self.batch,)), name="time")
        self.model = dt.Dim(model, name="model")
        self.x = dt.Tensor(raw.clone(), (self.batch, self.time, self.model), feature_dim=self.model)

    def compare(self, rf_y, dt_y, *, rf_dims=None, dt_dims=None, atol=1e-5, rtol=1e-4):
        """rf_y, dt_y over (batch, time, model-sized feature) (or the given dims), compared on valid frames."""
        rf_dims = rf_dims or [self.rbatch, self.rtime, next(d for d in rf_y.dims if d not in (self.rbatch,
                                                                                           self.rtime))]
        dt_dims = dt_dims or (self.batch, self.time, next(d for d in dt_y.dims if d is not self.batch
                                                          and d is not self.time))
        r = rf_y.copy_compatible_to_dims_raw(rf_dims).detach()
        t = dt_y.raw_aligned(dt_dims).detach()
        assert r.shape == t.shape, (r.shape, t.shape)
        for b, n in enumerate(self.lengths):
            torch.testing.assert_close(t[b, :n], r[b, :n], atol=atol, rtol=rtol, msg=lambda m: f"sequence {b}: {m}")


def copy_params_from_rf(rf_module, ours) -> None:
    """Copies every parameter of the rf module into the same-named parameter of ours (both must have the
    same names); rf's Linear weights (in, out) are transposed into ours (out, in)."""
    import returnn.frontend as rf_
    linear = {f"{name}.weight" if name else "weight" for name, m in rf_module.named_modules()
              if isinstance(m, rf_.Linear)}
    theirs = {name: p.raw_tensor for name, p in rf_module.named_parameters()}
    mine = dict(ours.named_parameters())
    assert set(theirs) == set(mine), (sorted(theirs), sorted(mine))
    with torch.no_grad():
        for name, p in mine.items():
            p.copy_(theirs[name].t() if name in linear else theirs[name])


def test_feed_forward_gated(rf):
    from returnn.frontend.decoder.transformer import FeedForwardGated
    s = Sides(rf)
    theirs = FeedForwardGated(s.rmodel, ff_dim=12, dropout=0.0, with_bias=True)
    ours = dt.nn.FeedForwardGated(s.model, ff_dim=12, dropout=0.0, with_bias=True)
    copy_params_from_rf(theirs, ours)
    s.compare(theirs(s.rx), ours(s.x))


def _labels(rf, s: Sides, vocab: int = 11):
    from returnn.tensor import Dim as RfDim
    g = torch.Generator().manual_seed(3)
    raw = torch.randint(0, vocab, (len(s.lengths), max(s.lengths)), generator=g)
    rvocab, dvocab = RfDim(vocab, name="vocab"), dt.Dim(vocab, name="vocab")
    return (rf.convert_to_tensor(raw, dims=[s.rbatch, s.rtime], sparse_dim=rvocab), rvocab,
            dt.Tensor(raw, (s.batch, s.time), sparse_dim=dvocab), dvocab)


def test_transformer_encoder_layer(rf):
    from returnn.frontend.encoder.transformer import TransformerEncoderLayer
    s = Sides(rf)
    theirs = TransformerEncoderLayer(s.rmodel, num_heads=2, dropout=0.0, att_dropout=0.0)
    ours = dt.nn.TransformerEncoderLayer(s.model, num_heads=2, dropout=0.0, att_dropout=0.0)
    copy_params_from_rf(theirs, ours)
    # atol 1e-4: attention + feed-forward in float32 summing in other orders, outputs up to ~5 (300 seeds of
    # the weights: worst 8.4e-5)
    s.compare(theirs(s.rx, spatial_dim=s.rtime), ours(s.x, spatial_dim=s.time), atol=1e-4)


@pytest.mark.parametrize("embed", [False, True])
def test_transformer_encoder(rf, embed):
    from returnn.frontend.encoder.transformer import TransformerEncoder
    from returnn.frontend.decoder.transformer import FeedForwardGated
    from returnn.tensor import Dim as RfDim
    s = Sides(rf)
    rlabels, rvocab, labels, vocab = _labels(rf, s)
    extra = dict(embed_dim=RfDim(6, name="embed")) if embed else dict(ff=FeedForwardGated)
    theirs = TransformerEncoder(rvocab, s.rmodel, num_layers=2, num_heads=2, dropout=0.0, att_dropout=0.0, **extra)
    extra = dict(embed_dim=dt.Dim(6, name="embed")) if embed else dict(ff=dt.nn.FeedForwardGated)
    ours = dt.nn.TransformerEncoder(vocab, s.model, num_layers=2, num_heads=2, dropout=0.0, att_dropout=0.0, **extra)
    copy_params_from_rf(theirs, ours)
    rf_outs, dt_outs = {}, {}
    s.compare(theirs(rlabels, spatial_dim=s.rtime, collected_outputs=rf_outs),
              ours(labels, spatial_dim=s.time, collected_outputs=dt_outs), atol=3e-4)  # (2 layers in float32, summing in other orders: seen 1.4e-4)
    assert list(rf_outs) == list(dt_outs) == ["0", "1"]


REL_POS_OPTIONS = [{}, dict(learnable_pos_emb=True, learnable_pos_emb_clipping=2),
                   dict(with_linear_pos=False, with_pos_bias=False), dict(separate_pos_emb_per_head=False)]


def _rel_pos_causal_pair(rf, s: Sides, options: dict):
    theirs = rf.RelPosCausalSelfAttention(s.rmodel, s.rmodel, key_dim_total=s.rmodel, value_dim_total=s.rmodel,
                                          num_heads=2, att_dropout=0.0, **options)
    ours = dt.nn.RelPosCausalSelfAttention(s.model, s.model, key_dim_total=s.model, value_dim_total=s.model,
                                           num_heads=2, att_dropout=0.0, **options)
    copy_params_from_rf(theirs, ours)
    if "learnable_pos_emb" in options:  # a random table on both sides, so that every row counts
        with torch.no_grad():
            table = torch.randn(ours.learned_pos_emb.pos_emb.raw.shape, generator=torch.Generator().manual_seed(5))
            ours.learned_pos_emb.pos_emb.raw.copy_(table)
            theirs.learned_pos_emb.pos_emb.raw_tensor.copy_(table)
    return theirs, ours


@pytest.mark.parametrize("options", REL_POS_OPTIONS, ids=lambda o: ",".join(o) or "default")
def test_rel_pos_causal_self_attention_full_sequence(rf, options):
    s = Sides(rf)
    theirs, ours = _rel_pos_causal_pair(rf, s, options)
    rf_y, _ = theirs(s.rx, axis=s.rtime)
    dt_y, _ = ours(s.x, axis=s.time)
    s.compare(rf_y, dt_y)


@pytest.mark.parametrize("options", REL_POS_OPTIONS[:2], ids=lambda o: ",".join(o) or "default")
def test_rel_pos_causal_self_attention_step_by_step(rf, options):
    from returnn.tensor import single_step_dim
    s = Sides(rf, lengths=(4, 4, 4))
    theirs, ours = _rel_pos_causal_pair(rf, s, options)
    rf_state = theirs.default_initial_state(batch_dims=[s.rbatch])
    dt_state = None
    for t in range(4):
        rx = rf.convert_to_tensor(s.raw[:, t].clone(), dims=[s.rbatch, s.rmodel], feature_dim=s.rmodel)
        rf_y, rf_state = theirs(rx, axis=single_step_dim, state=rf_state)
        dt_y, dt_state = ours(dt.Tensor(s.raw[:, t].clone(), (s.batch, s.model)), axis=None, state=dt_state)
        torch.testing.assert_close(dt_y.raw_aligned((s.batch, s.model)).detach(),
                                   rf_y.copy_compatible_to_dims_raw([s.rbatch, s.rmodel]).detach(),
                                   atol=1e-5, rtol=1e-4, msg=lambda m: f"step {t}: {m}")


@pytest.mark.parametrize("options", [dict(), dict(zoneout_factor_cell=0.15, zoneout_factor_output=0.05, forget_bias=1.0),
                                     dict(zoneout_factor_cell=0.15, use_zoneout_output=False, parts_order="icfo")],
                         ids=["plain", "zoneout", "old_output_icfo"])
def test_zoneout_lstm_eval(rf, options):
    """In eval (rf's default run context here): zoneout is the deterministic mix."""
    from returnn.tensor import Dim as RfDim
    assert rf.get_run_ctx().train_flag is not True, "rf runs in training mode here: its zoneout would be random"
    s = Sides(rf)
    theirs = rf.ZoneoutLSTM(s.rmodel, RfDim(5, name="out"), **options)
    ours = dt.nn.ZoneoutLSTM(s.model, dt.Dim(5, name="out"), **options).eval()
    copy_params_from_rf(theirs, ours)
    with torch.no_grad():  # rf initializes the bias with 0: give it values
        bias = torch.randn(20, generator=torch.Generator().manual_seed(4))
        ours.bias.raw.copy_(bias)
        theirs.bias.raw_tensor.copy_(bias)
    r_y, r_state = theirs(s.rx, state=theirs.default_initial_state(batch_dims=[s.rbatch]), spatial_dim=s.rtime)
    d_y, d_state = ours(s.x, spatial_dim=s.time)
    s.compare(r_y, d_y)
    for name in ("h", "c"):
        r, d = getattr(r_state, name), getattr(d_state, name)
        r_raw = r.copy_compatible_to_dims_raw([s.rbatch, next(x for x in r.dims if x is not s.rbatch)])
        torch.testing.assert_close(d.raw_aligned((s.batch, ours.out_dim)).detach(), r_raw.detach(), atol=1e-5,
                                   rtol=1e-4, msg=lambda m: f"final state {name}: {m}")


def _randomize(rf_module, ours):
    with torch.no_grad():
        for p in ours.parameters():
            p.normal_()
    for name, p in rf_module.named_parameters():
        p.raw_tensor.data.copy_(dict(ours.named_parameters())[name])


def test_group_norm(rf):
    s = Sides(rf, model=12)
    theirs, ours = rf.GroupNorm(s.rmodel, num_groups=3), dt.nn.GroupNorm(s.model, num_groups=3)
    _randomize(theirs, ours)
    s.compare(theirs(s.rx), ours(s.x), atol=1e-4)


def test_group_norm_spatial(rf):
    s = Sides(rf, model=12)
    theirs, ours = rf.GroupNormSpatial(s.rmodel, num_groups=3), dt.nn.GroupNormSpatial(s.model, num_groups=3)
    _randomize(theirs, ours)
    s.compare(theirs(s.rx, spatial_dim=s.rtime), ours(s.x, spatial_dim=s.time), atol=1e-4)


def test_normalize_module(rf):
    s = Sides(rf)
    theirs, ours = rf.Normalize(param_dims=s.rmodel), dt.nn.Normalize(param_dims=s.model)
    _randomize(theirs, ours)
    s.compare(theirs(s.rx, axis=s.rmodel), ours(s.x, axis=s.model), atol=1e-4)


def test_sequential(rf):
    from returnn.tensor import Dim as RfDim
    s = Sides(rf)
    r_lin, d_lin = rf.Linear(s.rmodel, RfDim(5, name="out")), dt.nn.Linear(s.model, dt.Dim(5, name="out"))
    copy_params_from_rf(r_lin, d_lin)
    s.compare(rf.sequential(s.rx, r_lin, rf.relu), dt.nn.sequential(s.x, d_lin, dt.relu))


def _copy_params_renaming_filters(rf_module, ours) -> None:
    """copy_params_from_rf for modules with convolutions: rf calls a conv's weight `filter` (same layout)."""
    import returnn.frontend as rf_
    linear = {f"{name}.weight" if name else "weight" for name, m in rf_module.named_modules()
              if isinstance(m, rf_.Linear)}
    theirs = {name[: -len("filter")] + "weight" if name.endswith(".filter") else name: (name in linear, p.raw_tensor)
              for name, p in rf_module.named_parameters()}
    mine = dict(ours.named_parameters())
    assert set(theirs) == set(mine), (sorted(theirs), sorted(mine))
    torch.manual_seed(4)
    with torch.no_grad():
        for name, p in mine.items():  # random values (rf's biases start at 0, its norms at 1)
            transposed, raw = theirs[name]
            raw.copy_(torch.randn_like(raw) * 0.3 + (1.0 if name.endswith(".scale") else 0.0))
            p.copy_(raw.t() if transposed else raw)


def test_e_branchformer_cgmlp_and_merge(rf):
    from returnn.frontend.encoder.e_branchformer import FeedForwardConvGated, Merge
    s = Sides(rf)
    theirs = FeedForwardConvGated(s.rmodel, ff_dim=12, kernel_size=3, dropout=0.0)
    ours = dt.nn.FeedForwardConvGated(s.model, ff_dim=12, kernel_size=3, dropout=0.0)
    _copy_params_renaming_filters(theirs, ours)
    # rf's layer norm eps is 1e-6, ours 1e-5 (dt.nn.LayerNorm's default)
    ours.norm.eps = theirs.norm.eps
    s.compare(theirs(s.rx, spatial_dim=s.rtime), ours(s.x, spatial_dim=s.time))
    theirs = Merge(in_dim1=s.rmodel, in_dim2=s.rmodel, out_dim=s.rmodel, merge_conv_kernel=3)
    ours = dt.nn.Merge(in_dim1=s.model, in_dim2=s.model, out_dim=s.model, merge_conv_kernel=3)
    _copy_params_renaming_filters(theirs, ours)
    s.compare(theirs(s.rx, s.rx * 2.0, spatial_dim=s.rtime), ours(s.x, s.x * 2.0, spatial_dim=s.time))


def _eps_as_rf(theirs, ours) -> None:
    mine = dict(ours.named_modules())
    for name, m in theirs.named_modules():
        if hasattr(m, "eps") and isinstance(mine.get(name), dt.nn.LayerNorm):
            mine[name].eps = m.eps


def test_e_branchformer_layer(rf):
    from returnn.frontend.encoder.e_branchformer import EBranchformerLayer
    s = Sides(rf)
    opts = dict(ff_dim=16, num_heads=2, cgmlp_ff_dim=12, cgmlp_conv_kernel=5, dropout=0.0, att_dropout=0.0)
    theirs, ours = EBranchformerLayer(s.rmodel, **opts), dt.nn.EBranchformerLayer(s.model, **opts)
    _copy_params_renaming_filters(theirs, ours)
    _eps_as_rf(theirs, ours)
    s.compare(theirs(s.rx, spatial_dim=s.rtime), ours(s.x, spatial_dim=s.time), atol=1e-4)


def test_e_branchformer_in_conformer_encoder_v2(rf):
    from returnn.frontend.encoder.conformer_v2 import ConformerEncoderV2
    from returnn.frontend.encoder.e_branchformer import EBranchformerLayer
    s = Sides(rf)
    layer_opts = dict(cgmlp_ff_dim=12, cgmlp_conv_kernel=3)
    opts = dict(num_layers=2, num_heads=2, dropout=0.0, att_dropout=0.0)
    theirs = ConformerEncoderV2(s.rmodel, ff_dim=s.rmodel * 2, encoder_layer=EBranchformerLayer,
                                encoder_layer_opts=layer_opts, **opts)
    ours = dt.nn.ConformerEncoderV2(s.model, ff_dim=dt.Dim(16, name="ff"), encoder_layer=dt.nn.EBranchformerLayer,
                                    encoder_layer_opts=layer_opts, **opts)
    _copy_params_renaming_filters(theirs, ours)
    _eps_as_rf(theirs, ours)
    s.compare(theirs(s.rx, spatial_dim=s.rtime), ours(s.x, spatial_dim=s.time), atol=1e-4)
