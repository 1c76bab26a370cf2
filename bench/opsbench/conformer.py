"""One Conformer encoder layer written three ways (hand-written PyTorch, dimtorch, RETURNN frontend ops).

The layer: x + 0.5 FF(x); + MHSA (plain scaled dot-product attention, key padding masked); + conv module
(pointwise linear + GLU, depthwise conv over time on masked input, layer norm, SiLU, pointwise linear);
+ 0.5 FF; final layer norm. Eval mode (no dropout), so all three compute the same numbers from the same
weights. The conv module normalizes with a layer norm (not batch norm) to stay deterministic.
The forward+backward variant sums the output over valid frames and returns the loss and the gradients of
all weights (torch.autograd.grad, so nothing accumulates between calls).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .data import EPS

LAYER_NORMS = ("ff1_ln", "att_ln", "conv_ln", "conv_norm", "ff2_ln", "final_ln")


def weight_dims(side) -> dict:
    """Named dims of each weight, in the memory order of its torch layout (so a view maps one onto the other)."""
    feat, ff, heads, head_dim = side.feature, side.ff, side.heads, side.head_dim
    channels = side.conv_channels
    dims = {name + suffix: ((channels,) if name == "conv_norm" else (feat,))
            for name in LAYER_NORMS for suffix in ("_w", "_b")}
    for block in ("ff1", "ff2"):
        dims.update({block + "_w1": (ff, feat), block + "_b1": (ff,), block + "_w2": (feat, ff), block + "_b2": (feat,)})
    for proj in ("q", "k", "v"):
        dims.update({f"att_w{proj}": (heads, head_dim, feat), f"att_b{proj}": (heads, head_dim)})
    dims.update({"att_wo": (feat, heads, head_dim), "att_bo": (feat,),
                 "conv_pw1_w": (side.glu, channels, feat), "conv_pw1_b": (side.glu, channels),
                 "conv_dw_w": (channels, channels // side.shapes.feature, side.conformer_kernel),
                 "conv_pw2_w": (feat, channels), "conv_pw2_b": (feat,)})
    return dims


def _leaves(raw_weights: dict, backward: bool, shapes_by_name=None) -> dict:
    leaves = {}
    for name in sorted(raw_weights):
        raw = raw_weights[name]
        if shapes_by_name is not None:
            raw = raw.reshape(shapes_by_name[name])
        leaves[name] = raw.clone().requires_grad_(backward)
    return leaves


def _with_loss_and_grads(forward, masked_sum, leaves: dict):
    leaf_list = list(leaves.values())

    def forward_backward():
        loss = masked_sum(forward())
        return (loss, *torch.autograd.grad(loss, leaf_list))
    return forward_backward


# --- hand-written PyTorch -------------------------------------------------------------------------------

def build_torch(side, backward: bool):
    """The layer as a competent PyTorch user writes it: F.* calls, views for heads, cached masks."""
    p = _leaves(side.conformer, backward)
    x, mask3, key_padding4 = side.x, side.mask3, side.key_padding4
    sizes = (side.F, side.H, side.D, side.conformer_padding)

    def forward():
        return _torch_layer(x, p, mask3, key_padding4, sizes)
    if not backward:
        return forward
    return _with_loss_and_grads(forward, lambda y: torch.where(mask3, y, 0.0).sum(), p)


def _torch_layer(x, p, mask3, key_padding4, sizes):
    x = x + 0.5 * _torch_ffn(x, p, "ff1", sizes[0])
    x = x + _torch_mhsa(x, p, key_padding4, sizes)
    x = x + _torch_conv_module(x, p, mask3, sizes)
    x = x + 0.5 * _torch_ffn(x, p, "ff2", sizes[0])
    return F.layer_norm(x, (sizes[0],), p["final_ln_w"], p["final_ln_b"], EPS)


def _torch_ffn(x, p, block, features):
    h = F.layer_norm(x, (features,), p[block + "_ln_w"], p[block + "_ln_b"], EPS)
    h = F.silu(F.linear(h, p[block + "_w1"], p[block + "_b1"]))
    return F.linear(h, p[block + "_w2"], p[block + "_b2"])


def _torch_mhsa(x, p, key_padding4, sizes):
    features, heads, head_dim, _ = sizes
    batch, time = x.shape[0], x.shape[1]
    h = F.layer_norm(x, (features,), p["att_ln_w"], p["att_ln_b"], EPS)
    q = F.linear(h, p["att_wq"], p["att_bq"]).view(batch, time, heads, head_dim).transpose(1, 2)
    k = F.linear(h, p["att_wk"], p["att_bk"]).view(batch, time, heads, head_dim).transpose(1, 2)
    v = F.linear(h, p["att_wv"], p["att_bv"]).view(batch, time, heads, head_dim).transpose(1, 2)
    scores = torch.matmul(q * head_dim ** -0.5, k.transpose(-1, -2)).masked_fill(key_padding4, float("-inf"))
    att = torch.matmul(scores.softmax(dim=-1), v)
    return F.linear(att.transpose(1, 2).reshape(batch, time, features), p["att_wo"], p["att_bo"])


def _torch_conv_module(x, p, mask3, sizes):
    features, padding = sizes[0], sizes[3]
    h = F.layer_norm(x, (features,), p["conv_ln_w"], p["conv_ln_b"], EPS)
    h = F.glu(F.linear(h, p["conv_pw1_w"], p["conv_pw1_b"]), dim=-1)
    h = torch.where(mask3, h, 0.0).transpose(1, 2)
    h = F.conv1d(h, p["conv_dw_w"], padding=padding, groups=features).transpose(1, 2)
    h = F.silu(F.layer_norm(h, (features,), p["conv_norm_w"], p["conv_norm_b"], EPS))
    return F.linear(h, p["conv_pw2_w"], p["conv_pw2_b"])


# --- dimtorch -------------------------------------------------------------------------------------------

def build_dimtorch(side, backward: bool):
    """The layer in dimtorch ops: dims instead of axes, masking left to the ops."""
    import dimtorch as dt
    named_dims = weight_dims(side)
    leaves = _leaves(side.raw.conformer, backward, {k: [d.size for d in v] for k, v in named_dims.items()})
    p = {name: dt.Tensor(leaf, named_dims[name]) for name, leaf in leaves.items()}
    x, all_dims = side.x, (side.batch, side.time, side.feature)

    def forward():
        return _dt_layer(dt, x, p, side)
    if not backward:
        return forward
    return _with_loss_and_grads(forward, lambda y: dt.reduce_sum(y, axis=all_dims).raw, leaves)


def _dt_layer(dt, x, p, d):
    x = x + 0.5 * _dt_ffn(dt, x, p, "ff1", d)
    x = x + _dt_mhsa(dt, x, p, d)
    x = x + _dt_conv_module(dt, x, p, d)
    x = x + 0.5 * _dt_ffn(dt, x, p, "ff2", d)
    return _dt_layer_norm(dt, x, p, "final_ln", d.feature)


def _dt_layer_norm(dt, x, p, name, axis):
    return dt.layer_norm(x, axis=axis, weight=p[name + "_w"], bias=p[name + "_b"], eps=EPS)


def _dt_ffn(dt, x, p, block, d):
    h = dt.silu(dt.linear(_dt_layer_norm(dt, x, p, block + "_ln", d.feature), p[block + "_w1"], bias=p[block + "_b1"]))
    return dt.linear(h, p[block + "_w2"], bias=p[block + "_b2"])


def _dt_replace_dim(dt, x, old, new):
    """x with dim `old` renamed to `new` (same raw): the key side of self-attention needs its own time dim."""
    return dt.Tensor(x.raw, tuple(new if dim is old else dim for dim in x.dims))


def _dt_mhsa(dt, x, p, d):
    h = _dt_layer_norm(dt, x, p, "att_ln", d.feature)
    h_keys = _dt_replace_dim(dt, h, d.time, d.key_time)
    # dt.linear takes 2-dim weights only, so the projections to (heads, head_dim) are matmul + bias.
    q = (dt.matmul(h, p["att_wq"], reduce=d.feature) + p["att_bq"]) * d.head_dim.size ** -0.5
    k = dt.matmul(h_keys, p["att_wk"], reduce=d.feature) + p["att_bk"]
    v = dt.matmul(h_keys, p["att_wv"], reduce=d.feature) + p["att_bv"]
    weights = dt.softmax(dt.matmul(q, k, reduce=d.head_dim), axis=d.key_time)
    att = dt.matmul(weights, v, reduce=d.key_time)
    return dt.matmul(att, p["att_wo"], reduce=(d.heads, d.head_dim)) + p["att_bo"]


def _dt_conv_module(dt, x, p, d):
    gates = dt.matmul(_dt_layer_norm(dt, x, p, "conv_ln", d.feature), p["conv_pw1_w"], reduce=d.feature)
    gates = gates + p["conv_pw1_b"]
    h = dt.gather(gates, indices=0, axis=d.glu) * dt.sigmoid(dt.gather(gates, indices=1, axis=d.glu))
    h, (out_time,) = dt.conv(h, p["conv_dw_w"], in_dim=d.conv_channels, out_dim=d.conv_channels,
                             in_spatial_dims=(d.time,), filter_size=(d.conformer_kernel,), padding="same",
                             groups=d.shapes.feature)
    if out_time is not d.time:
        h = _dt_replace_dim(dt, h, out_time, d.time)
    h = dt.silu(_dt_layer_norm(dt, h, p, "conv_norm", d.conv_channels))
    return dt.linear(h, p["conv_pw2_w"], bias=p["conv_pw2_b"])


# --- RETURNN frontend ----------------------------------------------------------------------------------

def build_returnn(side, backward: bool):
    """The layer in RETURNN frontend ops (rf.matmul + bias as rf.Linear does, rf.LayerNorm modules)."""
    rf = side.api.rf
    named_dims = weight_dims(side)
    leaves = _leaves(side.raw.conformer, backward, {k: [d.dimension for d in v] for k, v in named_dims.items()})
    leaves = {name: torch.nn.Parameter(leaf, requires_grad=backward) for name, leaf in leaves.items()}
    p = {name: rf.convert_to_tensor(leaf, dims=list(named_dims[name])) for name, leaf in leaves.items()}
    for norm in LAYER_NORMS:
        p[norm] = _rf_layer_norm_module(rf, named_dims[norm + "_w"][0], leaves[norm + "_w"], leaves[norm + "_b"])
    x, all_dims = side.x, [side.batch, side.time, side.feature]

    def forward():
        return _rf_layer(rf, x, p, side)
    if not backward:
        return forward
    return _with_loss_and_grads(forward, lambda y: rf.reduce_sum(y, axis=all_dims).raw_tensor, leaves)


def _rf_layer_norm_module(rf, dim, weight, bias):
    module = rf.LayerNorm(dim, eps=EPS)
    module.scale.raw_tensor = weight
    module.bias.raw_tensor = bias
    return module


def _rf_layer(rf, x, p, d):
    x = x + 0.5 * _rf_ffn(rf, x, p, "ff1", d)
    x = x + _rf_mhsa(rf, x, p, d)
    x = x + _rf_conv_module(rf, x, p, d)
    x = x + 0.5 * _rf_ffn(rf, x, p, "ff2", d)
    return p["final_ln"](x)


def _rf_ffn(rf, x, p, block, d):
    h = rf.matmul(p[block + "_ln"](x), p[block + "_w1"], reduce=d.feature) + p[block + "_b1"]
    return rf.matmul(rf.silu(h), p[block + "_w2"], reduce=d.ff) + p[block + "_b2"]


def _rf_mhsa(rf, x, p, d):
    h = p["att_ln"](x)
    h_keys, _ = rf.replace_dim(h, in_dim=d.time, out_dim=d.key_time)
    q = (rf.matmul(h, p["att_wq"], reduce=d.feature) + p["att_bq"]) * d.head_dim.dimension ** -0.5
    k = rf.matmul(h_keys, p["att_wk"], reduce=d.feature) + p["att_bk"]
    v = rf.matmul(h_keys, p["att_wv"], reduce=d.feature) + p["att_bv"]
    weights = rf.softmax(rf.matmul(q, k, reduce=d.head_dim), axis=d.key_time)
    att = rf.matmul(weights, v, reduce=d.key_time, use_mask=False)
    return rf.matmul(att, p["att_wo"], reduce=(d.heads, d.head_dim)) + p["att_bo"]


def _rf_conv_module(rf, x, p, d):
    gates = rf.matmul(p["conv_ln"](x), p["conv_pw1_w"], reduce=d.feature) + p["conv_pw1_b"]
    h = rf.gather(gates, indices=0, axis=d.glu) * rf.sigmoid(rf.gather(gates, indices=1, axis=d.glu))
    h, (out_time,) = rf.conv(h, in_dim=d.conv_channels, out_dim=d.conv_channels, in_spatial_dims=[d.time],
                             filter=p["conv_dw_w"], filter_size=[d.conformer_kernel], padding="same",
                             groups=d.shapes.feature, use_mask=True)
    if out_time != d.time:
        h, _ = rf.replace_dim(h, in_dim=out_time, out_dim=d.time)
    h = rf.silu(p["conv_norm"](h))
    return rf.matmul(h, p["conv_pw2_w"], reduce=d.conv_channels) + p["conv_pw2_b"]
