"""Rows of dimtorch.rf (RETURNN frontend's names and signatures): each dimtorch.rf call timed against the
dimtorch call it binds to, which is the reference here (Row.reference="dimtorch": the "torch" column times
dimtorch's call). A name bound to dimtorch's op itself must cost nothing (ratio 1.00 up to noise); a thin
function (another argument order, return shape or the run context's train flag) costs its Python frame,
which these rows show. The RETURNN column runs the same rf call on RETURNN frontend, for scale.

A builder here takes (module, side): dimtorch.rf on the dimtorch side, returnn.frontend on RETURNN's; the
reference builder takes the dimtorch side. Each callable binds its inputs and the function as defaults.
"""
from __future__ import annotations

import dimtorch as dt
import dimtorch.rf as dtrf

from .data import DROPOUT_P
from .row import BTF, Row, _rf


def _ns(name: str, what: str, reference, rf_call, out=BTF, check: str = "close", meta: bool = True,
        valid_frames=None) -> Row:
    return Row(f"rf.{name}", what, torch=reference, dimtorch=lambda s: rf_call(dtrf, s),
               returnn=lambda s: rf_call(_rf(s), s), out=out, check=check, meta=meta, reference="dimtorch",
               valid_frames=valid_frames)


def _k_dim(R, s):
    if not hasattr(s, "rf_k_dim"):
        s.rf_k_dim = R.Dim(2, name="k") if R is not dtrf else dt.Dim(2, name="k")
    return s.rf_k_dim


def _with_feature(R, x, dim):
    if R is dtrf:
        return dt.Tensor(x.raw, x.dims, feature_dim=dim)
    x = x.copy()
    x.feature_dim = dim
    return x


RF_NAMESPACE_ROWS = (
    # --- names bound to dimtorch's ops themselves ------------------------------------------------------------
    _ns("pad", "pad(x, axes=[time], padding=[(1, 1)], value=0.0): dt.pad itself (a list of out dims)",
        lambda s: lambda x=s.x, f=dt.pad, T=s.time: f(x, axes=[T], padding=[(1, 1)], value=0.0)[0],
        lambda R, s: lambda x=s.x, f=R.pad, T=s.time: f(x, axes=[T], padding=[(1, 1)], value=0.0)[0],
        out=("batch", "time+2", "feature"), valid_frames="pad_valid3"),
    _ns("concat", "concat((x, feature), (z, feature2)): dt.concat itself",
        lambda s: lambda x=s.x, z=s.z, f=dt.concat, a=s.feature, b=s.feature2: f((x, a), (z, b))[0],
        lambda R, s: lambda x=s.x, z=s.z, f=R.concat, a=s.feature, b=s.feature2: f((x, a), (z, b))[0],
        out=("batch", "time", "feature+feature2")),
    _ns("gather_no_axis", "gather(emb, indices=labels): axis from the indices' sparse_dim (dt: axis=vocab)",
        lambda s: lambda e=s.emb, i=s.labels, f=dt.gather, v=s.vocab: f(e, indices=i, axis=v),
        lambda R, s: lambda e=s.emb, i=s.labels, f=R.gather: f(e, indices=i), out=("batch", "time", "feature")),
    _ns("matmul", "matmul(x, w, reduce=feature): dt.matmul itself (use_mask=True by default: static dim)",
        lambda s: lambda x=s.x, w=s.w_fo, f=dt.matmul, r=s.feature: f(x, w, reduce=r),
        lambda R, s: lambda x=s.x, w=s.w_fo, f=R.matmul, r=s.feature: f(x, w, reduce=r), out=("batch", "time", "out")),
    _ns("matmul_outer", "matmul(x, bias_out, reduce=[]): the outer product",
        lambda s: lambda x=s.x, b=s.b_o, f=dt.matmul: f(x, b, reduce=[]),
        lambda R, s: lambda x=s.x, b=s.b_o, f=R.matmul: f(x, b, reduce=[]), out=("batch", "time", "feature", "out")),
    _ns("top_k", "top_k(x, axis=feature, k_dim=k) (dt: k=2)",
        lambda s: lambda x=s.x, f=dt.top_k, a=s.feature: f(x, axis=a, k=2)[0],
        lambda R, s: lambda x=s.x, f=R.top_k, a=s.feature, k=_k_dim(R, s): f(x, axis=a, k_dim=k)[0],
        out=("batch", "time", "k")),
    _ns("reduce_sum", "reduce_sum(x, axis=time): dt.reduce_sum itself",
        lambda s: lambda x=s.x, f=dt.reduce_sum, a=s.time: f(x, axis=a),
        lambda R, s: lambda x=s.x, f=R.reduce_sum, a=s.time: f(x, axis=a), out=("batch", "feature")),
    _ns("softmax", "softmax(x, axis=time): dt.softmax itself",
        lambda s: lambda x=s.x, f=dt.softmax, a=s.time: f(x, axis=a),
        lambda R, s: lambda x=s.x, f=R.softmax, a=s.time: f(x, axis=a), valid_frames="mask3"),
    _ns("cumsum", "cumsum(x, spatial_dim=time) (dt: axis=time)",
        lambda s: lambda x=s.x, f=dt.cumsum, a=s.time: f(x, axis=a),
        lambda R, s: lambda x=s.x, f=R.cumsum, a=s.time: f(x, spatial_dim=a), valid_frames="mask3"),
    _ns("pack_padded", "pack_padded(x, dims=[batch, time], enforce_sorted=False)",
        lambda s: lambda x=s.x, f=dt.pack_padded, b=s.batch, t=s.time: f(x, dims=[b, t])[0],
        lambda R, s: lambda x=s.x, f=R.pack_padded, b=s.batch, t=s.time: f(x, dims=[b, t], enforce_sorted=False)[0],
        out=("packed", "feature"), meta=False),
    _ns("split", "split(x, axis=feature, out_dims=[a, b]): a tuple",
        lambda s: lambda x=s.x, f=dt.split, a=s.feature, d=(s.feature2,): f(x, axis=a, out_dims=d)[0],
        lambda R, s: lambda x=s.x, f=R.split, a=s.feature, d=(s.feature2,): f(x, axis=a, out_dims=d)[0]),
    _ns("slice", "slice(x, axis=time, start=None, size=None) vs dt's start=0",
        lambda s: lambda x=s.x, f=dt.slice, a=s.time: f(x, axis=a, start=1)[0],
        lambda R, s: lambda x=s.x, f=R.slice, a=s.time: f(x, axis=a, start=1)[0], out=("batch", "time-1", "feature"),
        check="none"),
    _ns("combine_rf_order", "combine(x, \"add\", y) (rf's order) vs combine(x, y, \"add\")",
        lambda s: lambda x=s.x, y=s.y, f=dt.combine: f(x, y, "add"),
        lambda R, s: lambda x=s.x, y=s.y, f=R.combine: f(x, "add", y)),
    _ns("add", "add(x, y): operator.add (Tensor's number slot) vs x + y",
        lambda s: lambda x=s.x, y=s.y: x + y, lambda R, s: lambda x=s.x, y=s.y, f=R.add: f(x, y)),
    _ns("relu", "relu(x): dt.relu itself", lambda s: lambda x=s.x, f=dt.relu: f(x),
        lambda R, s: lambda x=s.x, f=R.relu: f(x)),
    _ns("log_softmax", "log_softmax(x, axis=feature): dt.log_softmax itself",
        lambda s: lambda x=s.x, f=dt.log_softmax, a=s.feature: f(x, axis=a),
        lambda R, s: lambda x=s.x, f=R.log_softmax, a=s.feature: f(x, axis=a), valid_frames="mask3"),
    _ns("zeros", "zeros([time, feature]): dt.zeros itself",
        lambda s: lambda f=dt.zeros, d=[s.time, s.feature], dev=s.device: f(d, device=dev),
        lambda R, s: lambda f=R.zeros, d=[s.time, s.feature], dev=s.device: f(d, device=dev), out=("time", "feature")),
    # --- thin functions --------------------------------------------------------------------------------------
    _ns("constant", "constant(1.5, dims=[time, feature]) vs dt.full((time, feature), 1.5)",
        lambda s: lambda f=dt.full, d=[s.time, s.feature], dev=s.device: f(d, 1.5, device=dev),
        lambda R, s: lambda f=R.constant, d=[s.time, s.feature], dev=s.device: f(1.5, dims=d, device=dev),
        out=("time", "feature")),
    _ns("dropout", f"dropout(x, {DROPOUT_P}, on_forward=True) vs dt.dropout(x, p, training=True)",
        lambda s: lambda x=s.x, f=dt.dropout: f(x, DROPOUT_P, None, True),
        lambda R, s: lambda x=s.x, f=R.dropout: f(x, DROPOUT_P, on_forward=True), check="dropout", meta=False),
    _ns("dropout_eval", f"dropout(x, {DROPOUT_P}) outside training (the train flag read) vs dt.dropout(training=False)",
        lambda s: lambda x=s.x, f=dt.dropout: f(x, DROPOUT_P, None, False),
        lambda R, s: lambda x=s.x, f=R.dropout: f(x, DROPOUT_P)),
    _ns("compare_bc", "compare_bc(x, \">\", y) vs compare(x, y, \">\", allow_broadcast_all_sources=True)",
        lambda s: lambda x=s.x, y=s.y, f=dt.compare: f(x, y, ">", allow_broadcast_all_sources=True),
        lambda R, s: lambda x=s.x, y=s.y, f=R.compare_bc: f(x, ">", y)),
    _ns("max_pool1d", "max_pool1d(x, pool_size=2, in_spatial_dim=time) -> (y, dim) vs dt.pool -> (y, (dim,))",
        lambda s: lambda x=s.x, f=dt.pool, t=(s.time,): f(x, mode="max", pool_size=2, in_spatial_dims=t)[0],
        lambda R, s: lambda x=s.x, f=R.max_pool1d, t=s.time: f(x, pool_size=2, in_spatial_dim=t)[0], check="none"),
    _ns("concat_features", "concat_features(x, y) vs concat((x, feature), (y, feature)) and the feature marker",
        lambda s: lambda x=s.x, y=s.y, f=dt.concat, a=s.feature, T=dt.Tensor: (lambda o: T(o[0].raw, o[0].dims, feature_dim=o[1]))(
            f((x, a), (y, a))),
        lambda R, s: lambda x=_with_feature(R, s.x, s.feature), y=_with_feature(R, s.y, s.feature), f=R.concat_features: f(x, y),
        out=("batch", "time", "feature+feature")),
    _ns("sort", "sort(x, axis=feature) -> (values, indices, dim) vs dt.sort and replace_dim of both",
        lambda s: lambda x=s.x, f=dt.sort, r=dt.replace_dim, a=s.feature: (lambda v, i: (lambda v2: (
            v2[0], r(i, in_dim=a, out_dim=v2[1])[0]))(r(v, in_dim=a)))(*f(x, axis=a)),
        lambda R, s: lambda x=s.x, f=R.sort, a=s.feature: f(x, axis=a)[:2], check="none"),
    _ns("scatter_mean", "scatter_mean(x, indices=labels, indices_dim=time) vs scatter(mode=\"mean\")",
        lambda s: lambda x=s.x, f=dt.scatter, i=s.labels, t=s.time: f(x, indices=i, indices_dim=t, mode="mean"),
        lambda R, s: lambda x=s.x, f=R.scatter_mean, i=s.labels, t=s.time: f(x, indices=i, indices_dim=t),
        out=("batch", "vocab", "feature")),
    _ns("clip_by_value", "clip_by_value(x, -1.0, 1.0) vs dt.clip(x, -1.0, 1.0)",
        lambda s: lambda x=s.x, f=dt.clip: f(x, -1.0, 1.0), lambda R, s: lambda x=s.x, f=R.clip_by_value: f(x, -1.0, 1.0)),
    _ns("relu_square", "relu_square(x) vs dt.square(dt.relu(x))",
        lambda s: lambda x=s.x, sq=dt.square, r=dt.relu: sq(r(x)), lambda R, s: lambda x=s.x, f=R.relu_square: f(x)),
    _ns("reduce_mode", "reduce(x, mode=\"max\", axis=time) vs dt.reduce_max(x, axis=time)",
        lambda s: lambda x=s.x, f=dt.reduce_max, a=s.time: f(x, axis=a),
        lambda R, s: lambda x=s.x, f=R.reduce, a=s.time: f(x, mode="max", axis=a), out=("batch", "feature")),
    _ns("stop_gradient", "stop_gradient(x): dt.stop_gradient itself",
        lambda s: lambda x=s.x, f=dt.stop_gradient: f(x),
        lambda R, s: lambda x=s.x, f=R.stop_gradient: f(x)),
    _ns("dot_attention", "dot_attention(q, k, k, key_dim, axis) vs dt.dot_attention (no dropout)",
        lambda s: lambda q=s.q, k=s.k, f=dt.dot_attention, d=s.head_dim, a=s.key_time: f(q, k, k, key_dim=d, axis=a),
        lambda R, s: lambda q=s.q, k=s.k, f=R.dot_attention, d=s.head_dim, a=s.key_time: f(q, k, k, key_dim=d, axis=a),
        out=("batch", "heads", "time", "head_dim"), check="none"),
    _ns("specaugment_eval", "audio.specaugment(x) outside training (the train flag read) vs dt's (training=False)",
        lambda s: lambda x=s.x, f=dt.audio.specaugment, t=s.time, d=s.feature: f(
            x, spatial_dim=t, feature_dim=d, training=False, step=0),
        lambda R, s: lambda x=s.x, f=R.audio.specaugment, t=s.time, d=s.feature: f(x, spatial_dim=t, feature_dim=d)),
)
