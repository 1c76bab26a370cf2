"""The rows table: every benchmarked op, each written three ways (hand-written PyTorch, dimtorch, RETURNN).

A builder takes one framework's side (see data.py: same attribute names on every side) and returns a
zero-argument callable; that callable is what gets timed, so everything a builder does before returning
(binding tensors, making masks the PyTorch user would cache) is outside the timed region. Callables bind
their inputs as default arguments, so the three sides pay the same call cost.
A row lights up for dimtorch once every name in `requires` exists in dimtorch; until then it is listed
as skipped and only the other two columns are measured.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import dimtorch as dt

from . import conformer
from .data import DROPOUT_P, EPS
from .rows_array import ARRAY_ROWS
from .rows_attention import ATTENTION_ROWS
from .rows_decoding import DECODING_ROWS
from .rows_loop import LOOP_ROWS
from .rows_rf import RF_ROWS
from .rows_rf_namespace import RF_NAMESPACE_ROWS
from .rows_signal import SIGNAL_ROWS
from .rows_speech import SPEECH_ROWS
from .row import BTF, Row, _rf, _same


def _rf_linear(side):
    module = _rf(side).Linear(side.feature, side.out)
    module.weight.raw_tensor = torch.nn.Parameter(side.raw.w_of.t().contiguous(), requires_grad=False)
    module.bias.raw_tensor = torch.nn.Parameter(side.raw.b_o.clone(), requires_grad=False)
    return module


def _rf_norm(side, module_type, with_bias):
    module = module_type(side.feature, eps=EPS)
    module.scale.raw_tensor = torch.nn.Parameter(side.raw.ln_w.clone(), requires_grad=False)
    if with_bias:
        module.bias.raw_tensor = torch.nn.Parameter(side.raw.ln_b.clone(), requires_grad=False)
    return module




def _torch_masked_variance(x, mask, n_valid):
    """Biased variance over (batch, time) of the valid frames, as a PyTorch user writes it."""
    mean = torch.where(mask, x, 0.0).sum(dim=(0, 1)) / n_valid
    return torch.where(mask, (x - mean) ** 2, 0.0).sum(dim=(0, 1)) / n_valid

def _torch_masked_batch_norm(x, mask, n_valid, w, b, running_mean, running_var, momentum=0.1):
    """Training batch norm over (batch, time) of the valid frames with running stats, as a PyTorch user
    writes it (n_valid a host number; F.batch_norm's unbiased running variance)."""
    xz = torch.where(mask, x, 0.0)
    mean = xz.sum(dim=(0, 1)) / n_valid
    centered = xz - mean
    var = torch.where(mask, centered.square(), 0.0).sum(dim=(0, 1)) / n_valid
    with torch.no_grad():
        running_mean.mul_(1 - momentum).add_(mean, alpha=momentum)
        running_var.mul_(1 - momentum).add_(var * (n_valid / max(n_valid - 1, 1)), alpha=momentum)
    return centered * torch.rsqrt(var + EPS) * w + b


_OPEN_CONTEXTS = []


def _rf_batch_norm(side):
    rf = _rf(side)
    # Training statistics, as inside a RETURNN train step; the flag is set for rf.BatchNorm alone (no other
    # row uses it) and stays set (the context is kept open), so no context switch lands in the timed region.
    train_flag = rf.get_run_ctx().train_flag_ctx(True, func=rf.BatchNorm.__call__)
    train_flag.__enter__()
    _OPEN_CONTEXTS.append(train_flag)
    module = rf.BatchNorm(side.feature, use_mask=True, eps=EPS)
    module.gamma.raw_tensor = torch.nn.Parameter(side.raw.ln_w.clone(), requires_grad=False)
    module.beta.raw_tensor = torch.nn.Parameter(side.raw.ln_b.clone(), requires_grad=False)
    return module


ROWS = (
    # --- elementwise -------------------------------------------------------------------------------------
    Row("add_same_dims", "x + y, both (batch, time, feature)", out=BTF,
        **_same(lambda s: lambda x=s.x, y=s.y: x + y)),
    Row("mul_scalar", "x * 2.0", out=BTF, **_same(lambda s: lambda x=s.x: x * 2.0)),
    Row("add_broadcast", "x + bias, bias (feature,)", out=BTF,
        **_same(lambda s: lambda x=s.x, b=s.bias: x + b)),
    Row("add_transposed", "x (batch, time, feature) + y (time, batch, feature)", out=BTF,
        torch=lambda s: lambda x=s.x, y=s.y_tb: x + y.transpose(0, 1),
        dimtorch=lambda s: lambda x=s.x, y=s.y_tb: x + y,
        returnn=lambda s: lambda x=s.x, y=s.y_tb: x + y),
    Row("compare_gt", "x > y", out=BTF, **_same(lambda s: lambda x=s.x, y=s.y: x > y)),
    Row("unary_exp", "exp(x)", out=BTF,
        torch=lambda s: lambda x=s.x: torch.exp(x),
        dimtorch=lambda s: lambda x=s.x: dt.exp(x),
        returnn=lambda s: lambda x=s.x, exp=_rf(s).exp: exp(x)),
    Row("where", "where(cond (batch, time), x, 0.0)", out=BTF, requires=("where",),
        torch=lambda s: lambda c=s.cond, x=s.x: torch.where(c.unsqueeze(-1), x, 0.0),
        dimtorch=lambda s: lambda c=s.cond, x=s.x: dt.where(c, x, 0.0),
        returnn=lambda s: lambda c=s.cond, x=s.x, where=_rf(s).where: where(c, x, 0.0)),
    # --- creation and metadata ---------------------------------------------------------------------------
    Row("zeros", "zeros over (time, feature); time dynamic", out=("time", "feature"), requires=("zeros",),
        torch=lambda s: lambda T=s.T, F=s.F, dev=s.device: torch.zeros(T, F, device=dev),
        dimtorch=lambda s: lambda dims=(s.time, s.feature), dev=s.device: dt.zeros(dims, device=dev),
        returnn=lambda s: lambda dims=[s.time, s.feature], dev=s.device, zeros=_rf(s).zeros: zeros(dims, device=dev)),
    Row("tensor_from_raw", "named tensor from a raw (batch, time, feature); no PyTorch counterpart", out=BTF,
        meta=False, torch=None,
        dimtorch=lambda s: lambda raw=s.raw.x, dims=(s.batch, s.time, s.feature): dt.Tensor(raw, dims),
        returnn=lambda s: lambda raw=s.raw.x, dims=[s.batch, s.time, s.feature], make=_rf(s).convert_to_tensor:
            make(raw, dims=dims)),
    Row("dim_static", "Dim(8, name=...); no PyTorch counterpart", check="none", meta=False, torch=None,
        dimtorch=lambda s: lambda Dim=dt.Dim: Dim(8, name="feature"),
        returnn=lambda s: lambda Dim=s.api.Dim: Dim(8, name="feature")),
    Row("dim_dynamic", "Dim(lengths, name=...); no PyTorch counterpart", check="none", meta=False, torch=None,
        dimtorch=lambda s: lambda Dim=dt.Dim, lengths=s.lengths: Dim(lengths, name="time"),
        returnn=lambda s: lambda Dim=s.api.Dim, lengths=s.lengths: Dim(lengths, name="time")),
    Row("dim_eq_hash", "dim == other, hash(dim); PyTorch: the same on int axes", check="none", meta=False,
        torch=lambda s: lambda a=1, b=2: (a == b, hash(a)),
        dimtorch=lambda s: lambda a=s.time, b=s.feature: (a == b, hash(a)),
        returnn=lambda s: lambda a=s.time, b=s.feature: (a == b, hash(a))),
    Row("raw_aligned", "raw in (time, batch, feature) order; RETURNN: copy_compatible_to_dims_raw",
        out=("time", "batch", "feature"),
        torch=lambda s: lambda x=s.x: x.permute(1, 0, 2),
        dimtorch=lambda s: lambda x=s.x, order=s.transposed_order: x.raw_aligned(order),
        returnn=lambda s: lambda x=s.x, order=list(s.transposed_order): x.copy_compatible_to_dims_raw(order)),
    Row("copy_transpose", "named tensor transposed to (time, batch, feature)", out=("time", "batch", "feature"),
        torch=lambda s: lambda x=s.x: x.permute(1, 0, 2),
        dimtorch=lambda s: lambda x=s.x, order=s.transposed_order: x.copy_transpose(order),
        returnn=lambda s: lambda x=s.x, order=list(s.transposed_order): x.copy_transpose(order)),
    # --- reductions and softmax --------------------------------------------------------------------------
    Row("reduce_sum_static", "sum over feature", out=("batch", "time"), requires=("reduce_sum",),
        torch=lambda s: lambda x=s.x: x.sum(dim=-1),
        dimtorch=lambda s: lambda x=s.x, f=s.feature: dt.reduce_sum(x, axis=f),
        returnn=lambda s: lambda x=s.x, f=s.feature, red=_rf(s).reduce_sum: red(x, axis=f)),
    Row("reduce_mean_masked", "mean over dynamic time, padding ignored", out=("batch", "feature"),
        requires=("reduce_mean",),
        torch=lambda s: lambda x=s.x, m=s.mask3, n=s.lengths_col: torch.where(m, x, 0.0).sum(dim=1) / n,
        dimtorch=lambda s: lambda x=s.x, t=s.time: dt.reduce_mean(x, axis=t),
        returnn=lambda s: lambda x=s.x, t=s.time, red=_rf(s).reduce_mean: red(x, axis=t)),
    Row("reduce_max_masked", "max over dynamic time, padding ignored", out=("batch", "feature"),
        requires=("reduce_max",),
        torch=lambda s: lambda x=s.x, m=s.mask3: torch.where(m, x, float("-inf")).amax(dim=1),
        dimtorch=lambda s: lambda x=s.x, t=s.time: dt.reduce_max(x, axis=t),
        returnn=lambda s: lambda x=s.x, t=s.time, red=_rf(s).reduce_max: red(x, axis=t)),
    Row("softmax_static", "softmax over feature", out=BTF, requires=("softmax",),
        torch=lambda s: lambda x=s.x: x.softmax(dim=-1),
        dimtorch=lambda s: lambda x=s.x, f=s.feature: dt.softmax(x, axis=f),
        returnn=lambda s: lambda x=s.x, f=s.feature, sm=_rf(s).softmax: sm(x, axis=f)),
    Row("softmax_masked", "softmax over dynamic time, padding gets 0", out=BTF, requires=("softmax",),
        torch=lambda s: lambda x=s.x, m=s.mask3: torch.where(m, x, float("-inf")).softmax(dim=1),
        dimtorch=lambda s: lambda x=s.x, t=s.time: dt.softmax(x, axis=t),
        returnn=lambda s: lambda x=s.x, t=s.time, sm=_rf(s).softmax: sm(x, axis=t)),
    Row("log_softmax_masked", "log-softmax over dynamic time, padding gets -inf", out=BTF,
        requires=("log_softmax",), valid_frames="mask3",
        torch=lambda s: lambda x=s.x, m=s.mask3: torch.where(m, x, float("-inf")).log_softmax(dim=1),
        dimtorch=lambda s: lambda x=s.x, t=s.time: dt.log_softmax(x, axis=t),
        returnn=lambda s: lambda x=s.x, t=s.time, sm=_rf(s).log_softmax: sm(x, axis=t)),
    Row("copy_masked", "padding of dynamic time set to 0", out=BTF, requires=("Tensor.copy_masked",),
        torch=lambda s: lambda x=s.x, m=s.mask3: torch.where(m, x, 0.0),
        dimtorch=lambda s: lambda x=s.x: x.copy_masked(0.0),
        returnn=lambda s: lambda x=s.x: x.copy_masked(0.0)),
    Row("moments_masked", "variance over (batch, dynamic time), padding ignored", out=("feature",),
        requires=("moments",),
        torch=lambda s: lambda x=s.x, m=s.mask3, n=s.n_valid: _torch_masked_variance(x, m, n),
        dimtorch=lambda s: lambda x=s.x, b=s.batch, t=s.time: dt.moments(x, axis=(b, t))[1],
        returnn=lambda s: lambda x=s.x, b=s.batch, t=s.time, mom=_rf(s).moments: mom(x, axis=[b, t])[1]),
    Row("batch_norm_masked", "batch norm over feature, training: statistics over valid (batch, time) frames, "
        "running stats updated, weight and bias; RETURNN: rf.BatchNorm(use_mask=True)", out=BTF,
        valid_frames="mask3", requires=("batch_norm",),
        torch=lambda s: lambda x=s.x, m=s.mask3, n=float(s.lengths.sum()), w=s.ln_w, b=s.ln_b,
            rm=torch.zeros_like(s.ln_w), rv=torch.ones_like(s.ln_w): _torch_masked_batch_norm(x, m, n, w, b, rm, rv),
        dimtorch=lambda s: lambda x=s.x, f=s.feature, w=s.ln_w, b=s.ln_b,
            rm=dt.Tensor(torch.zeros_like(s.ln_w.raw), (s.feature,)),
            rv=dt.Tensor(torch.ones_like(s.ln_w.raw), (s.feature,)):
            dt.batch_norm(x, f, running_mean=rm, running_var=rv, weight=w, bias=b, momentum=0.1, eps=EPS),
        returnn=lambda s: lambda x=s.x, norm=_rf_batch_norm(s): norm(x)),
    # --- matmul, linear, normalization, dropout ----------------------------------------------------------
    Row("matmul", "x (batch, time, feature) . w (feature, out)", out=("batch", "time", "out"),
        requires=("matmul",),
        torch=lambda s: lambda x=s.x, w=s.w_fo: torch.matmul(x, w),
        dimtorch=lambda s: lambda x=s.x, w=s.w_fo, f=s.feature: dt.matmul(x, w, reduce=f),
        returnn=lambda s: lambda x=s.x, w=s.w_fo, f=s.feature, mm=_rf(s).matmul: mm(x, w, reduce=f)),
    Row("matmul_batched", "attention scores q (b, heads, time, d) . k (b, heads, key_time, d)",
        out=("batch", "heads", "time", "key_time"), requires=("matmul",),
        torch=lambda s: lambda q=s.q, k=s.k: torch.matmul(q, k.transpose(-1, -2)),
        dimtorch=lambda s: lambda q=s.q, k=s.k, d=s.head_dim: dt.matmul(q, k, reduce=d),
        returnn=lambda s: lambda q=s.q, k=s.k, d=s.head_dim, mm=_rf(s).matmul: mm(q, k, reduce=d)),
    Row("linear", "linear feature -> out with bias; RETURNN: rf.Linear", out=("batch", "time", "out"),
        requires=("linear",),
        torch=lambda s: lambda x=s.x, w=s.w_of, b=s.b_o: F.linear(x, w, b),
        dimtorch=lambda s: lambda x=s.x, w=s.w_of, b=s.b_o: dt.linear(x, w, bias=b),
        returnn=lambda s: lambda x=s.x, layer=_rf_linear(s): layer(x)),
    Row("layer_norm", "layer norm over feature, weight and bias; RETURNN: rf.LayerNorm", out=BTF,
        requires=("layer_norm",),
        torch=lambda s: lambda x=s.x, w=s.ln_w, b=s.ln_b, shape=(s.F,): F.layer_norm(x, shape, w, b, EPS),
        dimtorch=lambda s: lambda x=s.x, f=s.feature, w=s.ln_w, b=s.ln_b:
            dt.layer_norm(x, axis=f, weight=w, bias=b, eps=EPS),
        returnn=lambda s: lambda x=s.x, norm=_rf_norm(s, _rf(s).LayerNorm, True): norm(x)),
    Row("rms_norm", "RMS norm over feature, weight; RETURNN: rf.RMSNorm", out=BTF, requires=("rms_norm",),
        torch=lambda s: lambda x=s.x, w=s.ln_w, shape=(s.F,): F.rms_norm(x, shape, w, EPS),
        dimtorch=lambda s: lambda x=s.x, f=s.feature, w=s.ln_w: dt.rms_norm(x, axis=f, weight=w, eps=EPS),
        returnn=lambda s: lambda x=s.x, norm=_rf_norm(s, _rf(s).RMSNorm, False): norm(x)),
    Row("dropout_train", f"dropout p={DROPOUT_P}, training, one mask per element", out=BTF, check="dropout",
        requires=("dropout",),
        torch=lambda s: lambda x=s.x: F.dropout(x, DROPOUT_P, training=True),
        dimtorch=lambda s: lambda x=s.x: dt.dropout(x, DROPOUT_P, training=True),
        returnn=lambda s: lambda x=s.x, drop=_rf(s).dropout: drop(x, DROPOUT_P, on_forward=True)),
    # --- array ops and convolution -----------------------------------------------------------------------
    Row("concat_feature", "concat (x, feature), (z, feature2)", out=("batch", "time", "feature+feature2"),
        requires=("concat",),
        torch=lambda s: lambda x=s.x, z=s.z: torch.cat((x, z), dim=-1),
        dimtorch=lambda s: lambda x=s.x, z=s.z, a=s.feature, b=s.feature2: dt.concat((x, a), (z, b))[0],
        returnn=lambda s: lambda x=s.x, z=s.z, a=s.feature, b=s.feature2, cat=_rf(s).concat: cat((x, a), (z, b))[0]),
    Row("pad_time", "pad dynamic time by (1, 1) with 0; the right pad goes after each sequence's end",
        out=("batch", "time+2", "feature"), valid_frames="pad_valid3", requires=("pad",),
        torch=lambda s: lambda x=s.x, keep=s.pad_keep3: torch.where(keep, F.pad(x, (0, 0, 1, 1)), 0.0),
        dimtorch=lambda s: lambda x=s.x, t=s.time: dt.pad(x, axes=t, padding=(1, 1), value=0.0)[0],
        returnn=lambda s: lambda x=s.x, t=s.time, pad=_rf(s).pad:
            pad(x, axes=[t], padding=[(1, 1)], value=0.0, handle_dynamic_dims=True)[0]),
    Row("gather_embedding", "gather emb (vocab, feature) at labels (batch, time)", out=BTF, requires=("gather",),
        torch=lambda s: lambda labels=s.labels, emb=s.emb: F.embedding(labels, emb),
        dimtorch=lambda s: lambda labels=s.labels, emb=s.emb, v=s.vocab: dt.gather(emb, indices=labels, axis=v),
        returnn=lambda s: lambda labels=s.labels, emb=s.emb, v=s.vocab, gather=_rf(s).gather:
            gather(emb, indices=labels, axis=v)),
    Row("merge_dims", "merge (heads, head_dim) of (batch, time, heads, head_dim)",
        out=("batch", "time", "heads*head_dim"), requires=("merge_dims",),
        torch=lambda s: lambda x=s.x4: x.flatten(2),
        dimtorch=lambda s: lambda x=s.x4, dims=(s.heads, s.head_dim): dt.merge_dims(x, dims=dims)[0],
        returnn=lambda s: lambda x=s.x4, dims=[s.heads, s.head_dim], merge=_rf(s).merge_dims: merge(x, dims=dims)[0]),
    Row("conv1d", "conv over dynamic time, feature -> out, kernel 3, 'same', masked input",
        out=("batch", "time", "out"), valid_frames="mask3", requires=("conv",),
        torch=lambda s: lambda x=s.x, m=s.mask3, w=s.conv_w, pad=s.conv_padding:
            F.conv1d(torch.where(m, x, 0.0).transpose(1, 2), w, padding=pad).transpose(1, 2),
        dimtorch=lambda s: lambda x=s.x, w=s.conv_w, f=s.feature, o=s.out, t=(s.time,), k=(s.kernel,):
            dt.conv(x, w, in_dim=f, out_dim=o, in_spatial_dims=t, filter_size=k, padding="same")[0],
        returnn=lambda s: lambda x=s.x, w=s.conv_w, f=s.feature, o=s.out, t=[s.time], k=[s.kernel], conv=_rf(s).conv:
            conv(x, in_dim=f, out_dim=o, in_spatial_dims=t, filter=w, filter_size=k, padding="same", use_mask=True)[0]),
    # --- a model layer ----------------------------------------------------------------------------------
    Row("conformer_layer_fwd", "one Conformer encoder layer, forward (eval)", out=BTF, valid_frames="mask3",
        requires=("layer_norm", "linear", "matmul", "softmax", "gather", "conv", "silu", "sigmoid",
                  "Dim.__floordiv__"),
        tolerance=1e-3,
        torch=lambda s: conformer.build_torch(s, backward=False),
        dimtorch=lambda s: conformer.build_dimtorch(s, backward=False),
        returnn=lambda s: conformer.build_returnn(s, backward=False)),
    Row("conformer_layer_fwd_bwd", "one Conformer layer, forward + backward of the valid-frame sum",
        out="raw", tolerance=1e-3,
        requires=("layer_norm", "linear", "matmul", "softmax", "gather", "conv", "silu", "sigmoid",
                  "Dim.__floordiv__", "reduce_sum"),
        torch=lambda s: conformer.build_torch(s, backward=True),
        dimtorch=lambda s: conformer.build_dimtorch(s, backward=True),
        returnn=lambda s: conformer.build_returnn(s, backward=True)),
)
ROWS += (ARRAY_ROWS + RF_ROWS + ATTENTION_ROWS + SIGNAL_ROWS + SPEECH_ROWS + LOOP_ROWS + DECODING_ROWS
         + RF_NAMESPACE_ROWS)
