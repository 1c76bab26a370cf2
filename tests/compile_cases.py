"""One call of every public op of dimtorch's op table (and variants), as a function of an environment made inside
the traced function from raws: the cases of tests/capture/test_compile.py.

E(raw, lengths, labels, label_lengths) makes the batch's dims and tensors the way a compiled training step
does (lengths are graph inputs); each case returns a list of outputs (dimtorch Tensors, raws, numbers; Dims
are skipped). Padding of the outputs is not compared (test_compile masks it to 0).
"""
from __future__ import annotations

import torch

import dimtorch as dt

F = 4


class E:
    """The batch's dims and tensors, made from the raws (inside the graph when traced)."""

    def __init__(self, raw, lengths, labels, label_lengths, static):
        self.f, self.k, self.h, self.d2, self.o, self.f2 = static
        self.b = dt.Dim(None, name="batch")
        self.t = dt.Dim(dt.Tensor(lengths, dims=(self.b,)), name="time")
        self.s = dt.Dim(dt.Tensor(label_lengths, dims=(self.b,)), name="labels_time")
        self.x = dt.Tensor(raw, (self.b, self.t, self.f), feature_dim=self.f)
        self.y = dt.Tensor(labels, (self.b, self.s), sparse_dim=self.f)
        # frame labels over (b, t) derived from x (integer, in range)
        self.yt = dt.Tensor((raw[..., 0].nan_to_num(0.0).clamp(-3, 3).abs() * 1.3).long() % F, (self.b, self.t),
                            sparse_dim=self.f)
        self.one = dt.Dim(1, name="one")
        self.w = dt.Tensor(torch.linspace(-1.0, 1.0, F), (self.f,))


def static_dims():
    """The model's static dims (made outside the traced function, once per test); f2 = f // 2 is made here,
    as a model makes the dims of its dim math when it is built."""
    f = dt.Dim(F, name="feature")
    return (f, dt.Dim(3, name="k"), dt.Dim(2, name="h"), dt.Dim(2, name="d2"), dt.Dim(5, name="out"), f // 2)


def _w(*dims, scale=0.3):
    n = 1
    for d in dims:
        n *= d.size
    return dt.Tensor((torch.arange(n, dtype=torch.float32).reshape([d.size for d in dims]) % 5 - 2) * scale, dims)


def _scan(e):
    def body(x_t, h):
        h = dt.tanh(x_t + h * 0.5)
        return h, h
    h0 = dt.zeros_like(dt.reduce_sum(e.x, axis=e.t))
    ys, last, _ = dt.scan(spatial_dim=e.t, initial=h0, xs=e.x, ys=dt.reduce_sum(e.x, axis=e.t), body=body)
    return [ys, last]


def _while(e):
    def cond(v):
        return v[0] < 3

    def body(v):
        return (v[0] + 1, v[1] * 1.5)
    return [dt.while_loop(cond, body, (0, e.x))[1]]


def _nested_select(e):
    m = dt.compare(dt.reduce_sum(e.x.copy_masked(0.0), axis=e.f), 0.0, ">")
    packed, pack_dim, dim_map = dt.masked_select_nested((e.x,), mask=m, dims=(e.b, e.t))
    return [packed[0]]


def _nested_scatter(e):
    m = dt.compare(dt.reduce_sum(e.x.copy_masked(0.0), axis=e.f), 0.0, ">")
    packed, pack_dim, dim_map = dt.masked_select_nested((e.x,), mask=m, dims=(e.b, e.t))
    back = dt.masked_scatter_nested((packed[0] * 2.0,), (e.x,), mask=m, dims=(e.b, e.t), in_dim=pack_dim,
                                    masked_select_dim_map=dim_map)
    return [back[0]]


def _unpack(e):
    p, pd = dt.pack_padded(e.x, dims=(e.b, e.t))
    return [dt.unpack_padded(p * 2.0, dims=(e.b, e.t), in_dim=pd)]


def _conv(e):
    w = _w(e.o, e.f, e.k)
    y, (od,) = dt.conv(e.x, w, in_dim=e.f, out_dim=e.o, in_spatial_dims=[e.t], filter_size=[e.k], padding="same")
    return [y]


def _conv_strided(e):
    w = _w(e.o, e.f, e.k)
    y, (od,) = dt.conv(e.x, w, in_dim=e.f, out_dim=e.o, in_spatial_dims=[e.t], filter_size=[e.k], strides=2,
                       padding="valid")
    return [y]


def _tconv(e):
    w = _w(e.f, e.o, e.k)
    y, (od,) = dt.transposed_conv(e.x, w, in_dim=e.f, out_dim=e.o, in_spatial_dims=[e.t], filter_size=[e.k],
                                  strides=2)
    return [y]


def _ctc_path(e):
    return dt.ctc_best_path(logits=e.x, targets=e.y, input_spatial_dim=e.t, targets_spatial_dim=e.s, blank_index=0)


def _attention(e):
    q = dt.split_dims(e.x, axis=e.f, dims=(e.h, e.d2))
    return [dt.dot_attention(q, q, q, key_dim=e.d2, axis=e.t, att_dropout=0.0)]


def _mk_cumconcat(e):
    frame = dt.reduce_mean(e.x, axis=e.t)
    y, od = dt.cum_concat_step(frame, prev_accum=e.x, axis=e.t)
    return [y]


def _repeat(e):
    reps = dt.Tensor(torch.ones_like(e.yt.raw) + (e.yt.raw % 2), (e.b, e.t))
    y, od = dt.repeat(e.x, in_spatial_dim=e.t, repeats=reps)
    return [y]


def _repeat_bounded(e):
    reps = dt.Tensor(torch.ones_like(e.yt.raw) + (e.yt.raw % 2), (e.b, e.t))
    y, od = dt.repeat(e.x, in_spatial_dim=e.t, repeats=reps, max_len_factor=2.0)
    return [y]


def _rope(e):
    pe = dt.sinusoidal_positional_encoding(spatial_dim=e.t, feat_dim=e.f)
    return [dt.apply_rope(e.x, pe, e.f)]


def _relpos(e):
    enc, d = dt.relative_positional_encoding(query_spatial_dim=e.t, key_value_spatial_dim=e.t, feat_dim=e.f)
    return [enc]


def _path(e):
    return dt.Tensor((e.x.raw[..., 1].nan_to_num(0.0).abs() * 2).long() % 3, (e.b, e.t), sparse_dim=dt.Dim(3, name="w"))


def _dur(e, fn):
    d, od = fn(path=_path(e), path_spatial_dim=e.t, blank_index=0, targets_spatial_dim=e.s, check_dims=False)
    return [d]


def _greedy(e):
    y, od = dt.ctc_greedy_decode(e.x, in_spatial_dim=e.t, blank_index=0)
    return [y]


def _edit(e):
    return [dt.edit_distance(e.yt, e.t, e.y, e.s)]


def _gather_nested(e):
    idx = dt.Tensor(e.t.lengths.raw - 1, (e.b,), sparse_dim=e.t)  # each sequence's last frame
    return list(dt.gather_nested((e.x,), indices=idx))


def _stft(e):
    sig = dt.Tensor(e.x.raw[..., 0], (e.b, e.t))
    y, ot, fd = dt.stft(sig, in_spatial_dim=e.t, frame_step=1, frame_length=2)
    return [dt.abs(y)]


def _window(e):
    y, od = dt.window(e.x, spatial_dim=e.t, window_dim=e.k)
    return [y]


def _scatter_dyn(e):
    """scatter frames of time into a new dynamic dim (half as long)."""
    out_t = dt.Dim(dt.Tensor(e.t.lengths.raw // 2 + 1, dims=(e.b,)), name="half")
    idx = dt.Tensor(torch.arange(e.x.raw.shape[1]).expand(e.x.raw.shape[0], -1) // 2, (e.b, e.t), sparse_dim=out_t)
    return [dt.scatter(e.x, indices=idx, indices_dim=e.t)]


def _scatter_static(e):
    return [dt.scatter(dt.reduce_sum(e.x, axis=e.f), indices=e.yt, indices_dim=e.t)]


def _masked_select(e):
    m = dt.compare(dt.reduce_sum(e.x.copy_masked(0.0), axis=e.f), 0.0, ">")
    y, od = dt.masked_select(e.x, mask=m, dims=(e.b, e.t))
    return [y]


def _masked_scatter(e):
    m = dt.compare(dt.reduce_sum(e.x.copy_masked(0.0), axis=e.f), 0.0, ">")
    y, od = dt.masked_select(e.x, mask=m, dims=(e.b, e.t))
    return [dt.masked_scatter(y * 2.0, mask=m, dims=(e.b, e.t), in_dim=od)]


def _top_p(e):
    return [dt.top_p_mask(dt.softmax(e.x, axis=e.f), axis=e.f, p=0.7)]


def _slice_update(e):
    return [dt.slice_update(e.x, dt.reduce_sum(e.x, axis=e.t), axis=e.t, start=1)]


def _random_choice_wo(e):
    return [dt.random_choice_without_replacement(log_probs=dt.log_softmax(e.x, axis=e.f), axis=e.f,
                                                 num_samples_dim=e.h)]


def _random_choice_w(e):
    probs = dt.softmax(dt.reduce_sum(e.x.copy_masked(0.0), axis=e.f), axis=e.t)
    return [dt.random_choice_with_replacement([e.b, e.h], probs=probs, axis=e.t)]


def _limit(e):
    reps = dt.Tensor(torch.ones_like(e.yt.raw) + (e.yt.raw % 3), (e.b, e.t))
    return [dt.limit_repeats(reps, in_spatial_dim=e.t, max_len_factor=1.5)]


CASES = {
    # ---- array / shape ops (fast path + definition) ----
    "pad": lambda e: [dt.pad(e.x, axes=e.t, padding=(1, 2), value=0.5)[0]],
    "concat": lambda e: [dt.concat((e.x, e.t), (e.x * 2.0, e.t))[0]],
    "gather": lambda e: [dt.gather(e.x, indices=dt.reduce_argmax(e.x, axis=e.f), axis=e.f)],
    "merge_dims": lambda e: [dt.merge_dims(dt.split_dims(e.x, axis=e.f, dims=(e.h, e.d2)), dims=(e.h, e.d2))[0]],
    "slice": lambda e: [dt.slice(e.x, axis=e.t, start=1)[0]],
    "shift_right": lambda e: [dt.shift_right(e.x, axis=e.t, amount=1)],
    "reverse_sequence": lambda e: [dt.reverse_sequence(e.x, axis=e.t)],
    "split": lambda e: dt.split(e.x, axis=e.f, out_dims=(e.h, e.d2)),
    "stack": lambda e: [dt.stack((e.x, e.x * 2.0))[0]],
    "top_k": lambda e: [dt.top_k(e.x, axis=e.f, k=2)[0]],
    "pack_padded": lambda e: [dt.pack_padded(e.x, dims=(e.b, e.t))[0]],
    "scatter": _scatter_static,
    "dropout": lambda e: [dt.dropout(e.x, 0.5, training=True)],
    "ceildiv": lambda e: [dt.ceildiv(e.t, 2).lengths],
    "reshape": lambda e: [dt.reshape(e.x, (e.f,), (e.h, e.d2))],
    "masked_select": _masked_select,
    "masked_scatter": _masked_scatter,
    # ---- elementwise ----
    "combine": lambda e: [dt.combine(e.x, e.w, "mul")],
    "compare": lambda e: [dt.compare(e.x, e.w, "<")],
    "maximum": lambda e: [dt.maximum(e.x, e.w)],
    "minimum": lambda e: [dt.minimum(e.x, e.w)],
    "logical_and": lambda e: [dt.logical_and(e.x > 0.0, e.w > 0.0)],
    "logical_or": lambda e: [dt.logical_or(e.x > 0.0, e.w > 0.0)],
    "where": lambda e: [dt.where(e.x > 0.0, e.x * 2.0, e.w)],
    "clip": lambda e: [dt.clip(e.x, -0.5, 0.5)],
    "cast": lambda e: [dt.cast(e.x, "float64")],
    **{n: (lambda n: lambda e: [getattr(dt, n)(e.x)])(n) for n in (
        "exp", "square", "tanh", "sigmoid", "relu", "gelu", "silu", "softplus", "sin", "cos", "floor", "ceil",
        "round", "is_finite", "abs", "neg", "log_sigmoid", "is_infinite", "is_neg_infinite", "expm1", "elu",
        "selu")},
    "log": lambda e: [dt.log(dt.abs(e.x) + 1.0)],
    "log1p": lambda e: [dt.log1p(dt.abs(e.x))],
    "sqrt": lambda e: [dt.sqrt(dt.abs(e.x) + 0.1)],
    "rsqrt": lambda e: [dt.rsqrt(dt.abs(e.x) + 0.1)],
    "logical_not": lambda e: [dt.logical_not(e.x > 0.0)],
    "squared_difference": lambda e: [dt.squared_difference(e.x, e.w)],
    "log_add_exp": lambda e: [dt.log_add_exp(e.x, e.w)],
    "lerp": lambda e: [dt.lerp(e.x, e.w, 0.25)],
    # ---- reductions ----
    **{n: (lambda n: lambda e: [getattr(dt, n)(e.x, axis=e.t)])(n) for n in (
        "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_logsumexp", "reduce_argmax",
        "reduce_argmin", "softmax", "log_softmax", "reduce_logmeanexp")},
    "reduce_any": lambda e: [dt.reduce_any(e.x > 0.0, axis=e.t)],
    "reduce_all": lambda e: [dt.reduce_all(e.x > 0.0, axis=e.t)],
    "moments": lambda e: list(dt.moments(e.x, axis=(e.b, e.t))),
    # ---- matmul, norms ----
    "matmul": lambda e: [dt.matmul(e.x, e.x, reduce=e.t, use_mask=True)],
    "dot": lambda e: [dt.dot(e.x, _w(e.f, e.o), reduce=e.f)],
    "linear": lambda e: [dt.linear(e.x, _w(e.f, e.o), _w(e.o))],
    "layer_norm": lambda e: [dt.layer_norm(e.x, e.f, weight=_w(e.f), bias=_w(e.f))],
    "rms_norm": lambda e: [dt.rms_norm(e.x, e.f, weight=_w(e.f))],
    "batch_norm": lambda e: [dt.batch_norm(e.x, e.f, training=True)],
    # ---- creation ----
    "zeros": lambda e: [e.x + dt.zeros((e.t, e.f))],
    "ones": lambda e: [e.x * dt.ones((e.t, e.f))],
    "full": lambda e: [e.x * dt.full((e.t, e.f), 2.0)],
    "constant": lambda e: [e.x * dt.constant(2.0, dims=(e.t, e.f))],
    "one_hot": lambda e: [dt.one_hot(e.y)],
    "sparse_to_dense": lambda e: [dt.sparse_to_dense(e.y, label_value=1.0, other_value=0.25)],
    "unpack_padded": _unpack,
    "cumsum": lambda e: [dt.cumsum(e.x, axis=e.t)],
    "sort": lambda e: list(dt.sort(e.x.copy_masked(0.0), axis=e.t)),
    "unstack": lambda e: dt.unstack(e.x, axis=e.f),
    "shift_left": lambda e: [dt.shift_left(e.x, axis=e.t, amount=1)],
    "split_dims": lambda e: [dt.split_dims(e.x, axis=e.f, dims=(e.h, e.d2))],
    "expand_dim": lambda e: [dt.expand_dim(e.x, e.k)],
    "expand_dims": lambda e: [dt.expand_dims(e.x, (e.k, e.h))],
    "squeeze": lambda e: [dt.squeeze(dt.Tensor(e.x.raw[:, :, :1], (e.b, e.t, e.one)), axis=e.one)],
    "replace_dim": lambda e: [dt.replace_dim(e.x, in_dim=e.t)[0]],
    "conv": _conv,
    "transposed_conv": _tconv,
    "pool": lambda e: [dt.pool(e.x, mode="max", pool_size=2, strides=2, padding="same", in_spatial_dims=[e.t])[0]],
    "cross_entropy": lambda e: [dt.cross_entropy(estimated=e.x, target=e.yt, axis=e.f)],
    "ctc_loss": lambda e: [dt.ctc_loss(logits=e.x, targets=e.y, input_spatial_dim=e.t, targets_spatial_dim=e.s,
                                       blank_index=0)],
    "loss_mean_over_frames": lambda e: [dt.loss_mean_over_frames(dt.reduce_sum(e.x, axis=(e.t, e.f)), frames_dim=e.t)],
    "sequence_mask": lambda e: [dt.sequence_mask((e.b, e.t))],
    "convert_to_tensor": lambda e: [e.x * dt.convert_to_tensor(2.0)],
    "zeros_like": lambda e: [e.x + dt.zeros_like(e.x)],
    "ones_like": lambda e: [e.x * dt.ones_like(e.x)],
    "range_over_dim": lambda e: [e.x * dt.cast(dt.range_over_dim(e.t), "float32")],
    "random_uniform": lambda e: [e.x * dt.random_uniform((e.t, e.f))],
    "random_normal": lambda e: [e.x * dt.random_normal((e.t, e.f))],
    # ---- RETURNN frontend coverage ----
    "apply_rope": _rope,
    "cond": lambda e: [dt.cond(True, lambda: e.x * 2.0, lambda: e.x)],
    "ctc_best_path": lambda e: [_ctc_path(e)],
    "ctc_durations_from_path": lambda e: _dur(e, dt.ctc_durations_from_path),
    "ctc_greedy_decode": _greedy,
    "ctc_no_label_loop_blank_durations_from_path": lambda e: _dur(e, dt.ctc_no_label_loop_blank_durations_from_path),
    "cum_concat_step": _mk_cumconcat,
    "dot_attention": _attention,
    "edit_distance": _edit,
    "gather_nested": _gather_nested,
    "gating": lambda e: [dt.gating(e.x, axis=e.f)[0]],
    "normalize": lambda e: [dt.normalize(e.x, axis=[e.t, e.f])],
    "label_smoothed_log_prob_gradient": lambda e: [dt.label_smoothed_log_prob_gradient(
        dt.log_softmax(e.x, axis=e.f), 0.1, axis=e.f)],
    "label_smoothing": lambda e: [dt.label_smoothing(dt.softmax(e.x, axis=e.f), 0.1, axis=e.f)],
    "smooth_one_hot": lambda e: [dt.smooth_one_hot(e.y, label_prob=0.9)],
    "last_frame_position_of_dim": lambda e: [dt.last_frame_position_of_dim(e.t)],
    "make_conv_out_spatial_dims": lambda e: [dt.make_conv_out_spatial_dims([e.t], filter_size=3, padding="valid",
                                                                           strides=2)[0].lengths],
    "make_transposed_conv_out_spatial_dims": lambda e: [dt.make_transposed_conv_out_spatial_dims(
        [e.t], filter_size=3, padding="valid", strides=2)[0].lengths],
    "mask_nested": lambda e: list(dt.mask_nested((e.x,), mask=e.x > 0.0, mask_value=0.0)),
    "masked_scatter_nested": _nested_scatter,
    "masked_select_nested": _nested_select,
    "relative_positional_encoding": _relpos,
    "repeat": _repeat,
    "replace_dim_v2": lambda e: [dt.replace_dim_v2(e.x, in_dim=e.t, out_dim=e.t + 2)],
    "safe_log": lambda e: [dt.safe_log(dt.abs(e.x))],
    "scan": _scan,
    "scatter_count": lambda e: [dt.scatter_count(indices=e.yt, indices_dim=e.t)],
    "search_sorted": lambda e: [dt.search_sorted(dt.cumsum(dt.abs(e.x.copy_masked(0.0)), axis=e.t),
                                                 dt.reduce_mean(e.x, axis=e.t), axis=e.t)],
    "sinusoidal_encoding": lambda e: [dt.sinusoidal_encoding(e.yt, feat_dim=e.f)],
    "sinusoidal_positional_encoding": lambda e: [e.x + dt.sinusoidal_positional_encoding(spatial_dim=e.t,
                                                                                         feat_dim=e.f)],
    "stft": _stft,
    "top_k_mask": lambda e: [dt.top_k_mask(e.x, axis=e.f, k=2)],
    "top_p_mask": _top_p,
    "where_nested": lambda e: list(dt.where_nested((e.x,), (e.x * 2.0,), condition=e.x > 0.0)),
    "while_loop": _while,
    "scaled_gradient": lambda e: [dt.scaled_gradient(e.x, 2.0)],
    "stop_gradient": lambda e: [e.x + dt.stop_gradient(e.x) * 2.0],  # (the gradient: 1, not 3)
    "scaled_gradient_ext": lambda e: [dt.scaled_gradient_ext(e.x, scale=2.0, shift=0.1,
                                                             scale_shift_by_sum_over_axis=e.t)],
    "reduce_out": lambda e: [dt.reduce_out(e.x, mode="max", num_pieces=2)],
    "range_over_dim_strided": lambda e: [e.x * 0.0 + 1.0, dt.range_over_dim_strided(e.t, stride=2)[0]],
    "range_over_merged_dims": lambda e: [dt.range_over_merged_dims([e.t, e.f])],
    "linspace_over_dim": lambda e: [e.x * dt.linspace_over_dim(e.t, 1.0, 3.0)],
    "num_elements_of_shape": lambda e: [dt.num_elements_of_shape([e.b, e.t, e.f])],
    "masked_fraction_of_shape": lambda e: [dt.masked_fraction_of_shape([e.b, e.t])],
    "real_as_complex": lambda e: [dt.complex_as_real(dt.real_as_complex(
        dt.split_dims(e.x, axis=e.f, dims=(e.h, e.d2)), pair_dim=e.d2) * 2.0)[0]],
    "complex_as_real": lambda e: [dt.complex_as_real(dt.make_complex(e.x, e.x * 0.5))[0]],
    "make_complex": lambda e: [dt.complex_as_real(dt.make_complex(e.x, e.w))[0]],
    "limit_repeats": _limit,
    "assert_": lambda e: [dt.assert_(dt.reduce_all(dt.is_finite(e.x.copy_masked(0.0)), axis=(e.b, e.t, e.f)), "ok")
                          or e.x * 1.0],
    "random_truncated_normal": lambda e: [e.x * dt.random_truncated_normal((e.t, e.f))],
    "random_choice_without_replacement": _random_choice_wo,
    "random_choice_with_replacement": _random_choice_w,
    "slice_update": _slice_update,
    "expand_make_non_empty": lambda e: [dt.expand_make_non_empty(e.x, axis=e.t)[0]],
    "window": _window,
}

def _unpack_rows(e):
    p, pd = dt.pack_padded(e.x, dims=(e.t,))
    return [p, dt.unpack_padded(p * 2.0, dims=(e.t,), in_dim=pd)]


def _masked_select_rows(e):
    m = dt.compare(dt.reduce_sum(e.x.copy_masked(0.0), axis=e.f), 0.0, ">")
    y, od = dt.masked_select(e.x, mask=m, dims=(e.t,))
    return [y, dt.masked_scatter(y * 2.0, mask=m, dims=(e.t,), in_dim=od)]


def _durations_counted(e):
    d, od = dt.ctc_durations_from_path(path=_path(e), path_spatial_dim=e.t, blank_index=0)
    return [d]


def _relpos_rows(e):
    """The positional encodings over dims of the batch, none of them static (the AED's learned positions)."""
    kv = dt.range_over_dim(e.t)
    q = dt.range_over_dim(e.t - 1)
    return [dt.cast(kv, "float32"), dt.cast(q, "float32"), e.x + dt.sinusoidal_positional_encoding(
        spatial_dim=e.t, feat_dim=e.f, offset=dt.Tensor(e.t.lengths.raw * 0 + 2, (e.b,)))]


# Variants and the scenarios beyond the table (dims of a new tensor that no input gives in eager).
SCENARIOS = {
    "scatter into a dynamic dim": _scatter_dyn,
    "pack_padded per row (dims=(time,))": lambda e: [dt.pack_padded(e.x, dims=(e.t,))[0]],
    "unpack_padded per row": _unpack_rows,
    "masked_select per row": _masked_select_rows,
    "repeat with max_len_factor": _repeat_bounded,
    "ctc_durations_from_path without targets_spatial_dim": _durations_counted,
    "conv strided (valid)": _conv_strided,
    "get_mask": lambda e: [dt.where(e.t.get_mask(), e.x, 0.0)],
    "zeros over (batch, time, heads)": lambda e: [dt.zeros((e.b, e.t, e.h)) + dt.reduce_sum(e.x, axis=e.f)],
    "random_uniform over (batch, time)": lambda e: [e.x * dt.random_uniform((e.b, e.t))],
    "ranges over time and time - 1": _relpos_rows,
}
