"""dt.nn layers call their submodules through torch.nn.Module.__call__: a forward hook on any
submodule fires (nothing reads a submodule's weights and applies them by hand)."""
import pytest
import torch

import dimtorch as dt


def _dims():
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor([7, 4]), (batch,)), name="time")
    return batch, time


def _fired_submodules(module, call) -> set:
    """Names of module's submodules whose forward hooks fired during call()."""
    fired, handles = set(), []
    for name, sub in module.named_modules():
        if sub is not module:
            handles.append(sub.register_forward_hook(lambda m, a, o, name=name: fired.add(name)))
    try:
        call()
    finally:
        for h in handles:
            h.remove()
    return fired


def _layers():
    model, enc_dim, feature = dt.Dim(8, name="model"), dt.Dim(6, name="enc"), dt.Dim(12, name="feature")
    key, value = dt.Dim(8, name="key"), dt.Dim(8, name="value")
    batch, time = _dims()
    enc_time = dt.Dim(dt.Tensor(torch.tensor([5, 3]), (batch,)), name="enc_time")
    x = dt.Tensor(torch.randn(2, 7, 8), (batch, time, model))
    enc = dt.Tensor(torch.randn(2, 5, 6), (batch, enc_time, enc_dim))
    feats = dt.Tensor(torch.randn(2, 7, 12), (batch, time, feature))
    att = dict(key_dim_total=key, value_dim_total=value, num_heads=2)
    return {
        "SelfAttention": (dt.nn.SelfAttention(model, model, **att), lambda m: m(x, axis=time)),
        "CausalSelfAttention": (dt.nn.CausalSelfAttention(model, model, **att), lambda m: m(x, axis=time)),
        "CrossAttention": (dt.nn.CrossAttention(model, enc_dim, model, **att),
                           lambda m: m(x, enc, axis=time, enc_axis=enc_time)),
        "RelPosSelfAttention": (dt.nn.RelPosSelfAttention(model, model, **att), lambda m: m(x, axis=time)),
        "RelPosSelfAttention learned": (dt.nn.RelPosSelfAttention(model, model, pos_emb="learned", **att),
                                        lambda m: m(x, axis=time)),
        "FeedForwardGated": (dt.nn.FeedForwardGated(model, ff_dim=8), lambda m: m(x)),
        "TransformerEncoderLayer": (dt.nn.TransformerEncoderLayer(model, num_heads=2), lambda m: m(x, spatial_dim=time)),
        "TransformerEncoder": (dt.nn.TransformerEncoder(dt.Dim(5, name="vocab"), model, num_layers=1, num_heads=2,
                                                        embed_dim=dt.Dim(6, name="embed")),
                               lambda m: m(dt.Tensor(torch.zeros(2, 7, dtype=torch.int64), (batch, time),
                                                     sparse_dim=m.vocab_dim), spatial_dim=time)),
        "RelPosCausalSelfAttention learned": (
            dt.nn.RelPosCausalSelfAttention(model, model, learnable_pos_emb=True, **att), lambda m: m(x, axis=time)),
        "RelPosCausalSelfAttention step": (dt.nn.RelPosCausalSelfAttention(model, model, **att),
                                           lambda m: m(dt.Tensor(x.raw[:, 0], (batch, model)), axis=None)),
        "ZoneoutLSTM": (dt.nn.ZoneoutLSTM(model, dt.Dim(3, name="out")), lambda m: m(x, spatial_dim=time)),
        "FeedForwardConvGated": (dt.nn.FeedForwardConvGated(model, ff_dim=6, kernel_size=3),
                                 lambda m: m(x, spatial_dim=time)),
        "Merge": (dt.nn.Merge(in_dim1=model, in_dim2=model, out_dim=model), lambda m: m(x, x, spatial_dim=time)),
        "EBranchformerLayer": (dt.nn.EBranchformerLayer(model, num_heads=2, cgmlp_ff_dim=6, cgmlp_conv_kernel=3),
                               lambda m: m(x, spatial_dim=time)),
        "ConformerConvBlock": (dt.nn.ConformerConvBlock(model, kernel_size=3), lambda m: m(x, spatial_dim=time)),
        "ConformerConvSubsample": (dt.nn.ConformerConvSubsample(feature, (dt.Dim(2, name="c0"), dt.Dim(3, name="c1"))),
                                   lambda m: m(feats, in_spatial_dim=time)),
        "ConformerEncoder": (dt.nn.ConformerEncoder(feature, model, num_layers=1, num_heads=2, conv_kernel_size=3),
                             lambda m: m(feats, in_spatial_dim=time)),
    }


@pytest.mark.parametrize("name", list(_layers()))
def test_forward_hooks_of_every_submodule_fire(name):
    module, call = _layers()[name]
    module.train()
    want = {n for n, sub in module.named_modules() if sub is not module and not isinstance(sub, dt.nn.ModuleList)}
    assert _fired_submodules(module, lambda: call(module)) == want


def test_a_hook_that_changes_the_output_of_a_projection_takes_effect():
    model = dt.Dim(8, name="model")
    batch, time = _dims()
    layer = dt.nn.SelfAttention(model, model, key_dim_total=model, value_dim_total=dt.Dim(8, name="value"),
                                num_heads=2, att_dropout=0.0)
    x = dt.Tensor(torch.randn(2, 7, 8), (batch, time, model))
    layer.proj.register_forward_hook(lambda m, args, out: out * 0.0)
    assert torch.all(layer(x, axis=time).raw == 0)
