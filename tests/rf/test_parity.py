"""Programs run on RETURNN frontend and on dimtorch with the same data, compared on valid frames
(tests/rf_parity.py), so that drift between the two shows up wherever `returnn` is installed (the
bench extra); skipped cleanly where it is not. Adding a program: one Program(...) entry below.

Known differences are pinned by their own tests at the end (what differs, and that RETURNN frontend is
batch-dependent there): see docs/rf_coverage.md, "Differences".
"""
import pytest
import torch

import dimtorch as dt
from rf_parity import LENGTHS, Program, make_data, run_both

BTF = ("batch", "time", "feature")


def _scan_rnn(F, d, x):
    """A tanh RNN over time by scan: ys and the final state."""
    h0 = F.zeros([d.batch, d.out]) if F is not dt else dt.Tensor(torch.zeros(3, d.out.size), (d.batch, d.out))

    def body(x_t, h):
        h = F.tanh(F.matmul(x_t, x.w, reduce=d.feature) + h)
        return h, h

    template = h0
    if F is not dt:
        from returnn.tensor import Tensor as RfTensor
        template = RfTensor("y", dims=[d.batch, d.out], dtype="float32")
    ys, h, out_dim = F.scan(spatial_dim=d.time, initial=h0, xs=x.x, ys=template, body=body)
    return ys, h


def _while_double(F, d, x):
    v = F.reduce_sum(x.positive, axis=[d.batch, d.time, d.feature])
    i = F.convert_to_tensor(torch.tensor(0), dims=[])
    return F.while_loop(lambda s: s[0] < 5, lambda s: (s[0] + 1, s[1] * 1.5), (i, v))[1]


def _cond_branch(F, d, x):
    s = F.reduce_max(x.x, axis=[d.batch, d.time, d.feature])
    return F.cond(s > 0.0, lambda: x.x * 2.0, lambda: x.x - 1.0)


def _mha(F, d, x):
    return F.dot_attention(x.q4, x.k4, x.v4, key_dim=d.head_dim, axis=d.time2)


def _self_att(F, d, x):
    return F.dot_attention(x.q4, x.q4, x.q4, key_dim=d.head_dim, axis=d.time)


def _causal_self_att(F, d, x):
    return F.dot_attention(x.q4, x.q4, x.q4, key_dim=d.head_dim, axis=d.time, causal_query_spatial_dim=d.time)


def _conv(F, d, x, padding, strides):
    y, (out_time,) = F.conv(x.x, in_dim=d.feature, out_dim=d.out, in_spatial_dims=[d.time], filter=x.filter,
                            filter_size=[d.k3], padding=padding, strides=strides, bias=x.bias)
    return y, out_time


def _dt_conv(F, d, x, padding, strides):
    y, (out_time,) = dt.conv(x.x, x.filter, in_dim=d.feature, out_dim=d.out, in_spatial_dims=[d.time],
                             filter_size=[d.k3], padding=padding, strides=strides, bias=x.bias)
    return y, out_time


def _new_dim(F, size, name):
    return dt.Dim(size, name=name) if F is dt else _rf_dim(size, name)


def _split_2x2(F, x, axis, names, channel):
    """x with `axis` (size 4) split into two new dims of size 2, and `channel` (size 1) added."""
    a, b = _new_dim(F, 2, names[0]), _new_dim(F, 2, names[1])
    return F.expand_dim(F.split_dims(x, axis=axis, dims=[a, b]), channel), a, b


def _conv3d(F, d, x):
    """conv over (time, a, b): x's feature split into a, b (2 x 2), one input channel."""
    ch = _new_dim(F, 1, "ch")
    x5, a, b = _split_2x2(F, x.x, d.feature, ("a", "b"), ch)
    w5, ka, kb = _split_2x2(F, x.filter, d.feature, ("ka", "kb"), ch)
    kw = dict(in_dim=ch, out_dim=d.out, in_spatial_dims=[d.time, a, b], filter_size=[d.k3, ka, kb], padding="same",
              bias=x.bias)
    if F is dt:
        return dt.conv(x5, w5, **kw)[0]
    return F.conv(x5, filter=w5, **kw)[0]


def _pool3d(F, d, x):
    x5, a, b = _split_2x2(F, x.x, d.feature, ("a", "b"), _new_dim(F, 1, "ch"))
    return F.pool(x5, mode="max", pool_size=(2, 2, 1), padding="valid", in_spatial_dims=[d.time, a, b])


def _window(F, d, x, **kw):
    return F.window(x.x, spatial_dim=d.time, window_dim=_new_dim(F, 3, "window"), **kw)


def _mask_amount_1(F, d, x):
    """rf.audio.mask with max_amount=1: exactly the frame at pos per sequence (deterministic)."""
    raw = torch.tensor([5, 2, 0])
    if F is dt:
        return dt.audio.mask(x.x, mask_axis=d.time, pos=dt.Tensor(raw, (d.batch,)), max_amount=1)
    return F.audio.mask(x.x, mask_axis=d.time, pos=F.convert_to_tensor(raw.int(), dims=[d.batch]), max_amount=1)


def _random_mask_count(F, d, x):
    """Frames masked per sequence by 2 single-frame masks: min(2, T) on both sides (where they fall is random)."""
    y = F.audio.random_mask(x.x, mask_axis=d.time, broadcast_axis=d.feature, min_num=2, max_num=2, max_dims=1)
    return F.reduce_sum(F.cast(F.reduce_all(y == 0.0, axis=d.feature), "int32"), axis=d.time)


def _dropout_family(F, d, x):
    """rf.dropout(axis=feature) on both: the mask varies along the feature only (0 spread over batch and time)
    and every value is 0 or x / keep. (The draws themselves come from different kernels: not compared.)"""
    kwargs = {} if F is dt else {"on_forward": True}  # (dimtorch's own dropout has no train flag to follow)
    y = F.dropout(x.positive, 0.5, axis=d.feature, **kwargs)
    kept = F.cast(y != 0.0, "float32")
    # (one axis per reduce: RETURNN's torch backend takes max/min over one axis only)
    spread = (F.reduce_max(F.reduce_max(kept, axis=d.time), axis=d.batch)
              - F.reduce_min(F.reduce_min(kept, axis=d.time), axis=d.batch))
    family = F.logical_or(y == 0.0, F.abs(y - x.positive * 2.0) < 1e-5)
    return spread, F.reduce_all(family, axis=[d.batch, d.time, d.feature])


def _stft(F, d, x):
    y, out_time, freq = F.stft(x.audio, in_spatial_dim=d.samples, frame_step=40, frame_length=100, fft_length=128)
    return abs(y) if F is not dt else dt.abs(y), out_time


def _log_mel(F, d, x):
    mel = F.Dim(20, name="mel") if F is dt else _rf_dim(20, "mel")
    return F.audio.log_mel_filterbank_from_raw(x.audio, in_spatial_dim=d.samples, out_dim=mel, sampling_rate=4000)


def _best_path(F, d, x, label_loop=True):
    if F is dt:
        logits = dt.Tensor(x.logits.raw, x.logits.dims, feature_dim=d.vocab)
    else:  # rf needs the class dim as the feature dim
        logits = x.logits.copy()
        logits.feature_dim = d.vocab
    return F.ctc_best_path(logits=logits, targets=x.ctc_targets, input_spatial_dim=d.time,
                           targets_spatial_dim=d.time3, blank_index=0, label_loop=label_loop)


def _durations(F, d, x, targets_dim):
    return F.ctc_durations_from_path(path=_best_path(F, d, x), path_spatial_dim=d.time, blank_index=0,
                                     targets_spatial_dim=d.time3 if targets_dim else None)


def _blank_durations(F, d, x):
    return F.ctc_no_label_loop_blank_durations_from_path(path=_best_path(F, d, x, label_loop=False),
                                                         path_spatial_dim=d.time, blank_index=0,
                                                         targets_spatial_dim=d.time3)


def _rf_dim(size, name):
    from returnn.tensor import Dim
    return Dim(size, name=name)


def _sin_pos(F, d, x):
    return F.sinusoidal_positional_encoding(spatial_dim=d.time, feat_dim=d.feature, offset=2)


def _rel_pos(F, d, x):
    pe, _ = F.relative_positional_encoding(query_spatial_dim=d.time, key_value_spatial_dim=d.time2,
                                          feat_dim=d.feature)
    return pe


def _conv_dims(F, d, x):
    return tuple(F.make_conv_out_spatial_dims([d.time, d.time2], filter_size=[3, 2], padding="valid",
                                              strides=[2, 1], dilation_rate=[1, 2]))


def _rf_with_feature(x, feature):
    """An rf Tensor's copy with `feature` as its feature_dim (rf's reduce_out needs one)."""
    x = x.copy()
    x.feature_dim = feature
    return x


PROGRAMS = [
    # --- elementwise, reductions, softmax (existing ops) ------------------------------------------------------
    Program("add_mul", both=lambda F, d, x: x.x * 2.0 + x.y, out=(BTF,)),
    Program("copy_masked", both=lambda F, d, x: x.x.copy_masked(0.0), out=(BTF,)),
    Program("where", both=lambda F, d, x: F.where(x.cond, x.x, x.y), out=(BTF,)),
    Program("reduce_sum_time", both=lambda F, d, x: F.reduce_sum(x.x, axis=d.time), out=(("batch", "feature"),)),
    Program("reduce_mean_time", both=lambda F, d, x: F.reduce_mean(x.x, axis=d.time), out=(("batch", "feature"),)),
    Program("reduce_max_time", both=lambda F, d, x: F.reduce_max(x.x, axis=d.time), out=(("batch", "feature"),)),
    Program("reduce_logsumexp_time", both=lambda F, d, x: F.reduce_logsumexp(x.x, axis=d.time),
            out=(("batch", "feature"),)),
    Program("softmax_time", both=lambda F, d, x: F.softmax(x.x, axis=d.time), out=(BTF,)),
    Program("log_softmax_vocab", both=lambda F, d, x: F.log_softmax(x.logits, axis=d.vocab),
            out=(("batch", "time", "vocab"),)),
    Program("matmul", both=lambda F, d, x: F.matmul(x.x, x.w, reduce=d.feature), out=(("batch", "time", "out"),)),
    Program("moments", both=lambda F, d, x: F.moments(x.x, axis=[d.batch, d.time]), out=(("feature",), ("feature",))),
    Program("cross_entropy", both=lambda F, d, x: F.cross_entropy(estimated=x.logits, target=x.labels,
                                                                 axis=d.vocab, estimated_type="logits"),
            out=(("batch", "time"),)),
    # --- shape and indexing ----------------------------------------------------------------------------
    Program("concat_time", both=lambda F, d, x: F.concat((x.x, d.time), (x.z, d.time2)), out=(("batch", "*", "feature"),)),
    Program("pad_time", rf=lambda F, d, x: F.pad(x.x, axes=[d.time], padding=[(1, 2)], value=0.0),
            dt=lambda F, d, x: dt.pad(x.x, axes=[d.time], padding=[(1, 2)], value=0.0),
            out=(("batch", "*", "feature"),)),
    Program("slice_time", both=lambda F, d, x: F.slice(x.x, axis=d.time, start=1), out=(("batch", "*", "feature"),)),
    Program("shift_right", both=lambda F, d, x: F.shift_right(x.x, axis=d.time, pad_value=0.0), out=(BTF,)),
    Program("reverse_sequence", both=lambda F, d, x: F.reverse_sequence(x.x, axis=d.time), out=(BTF,)),
    Program("cumsum", rf=lambda F, d, x: F.cumsum(x.x, spatial_dim=d.time),
            dt=lambda F, d, x: dt.cumsum(x.x, axis=d.time), out=(BTF,)),
    Program("gather_embedding", both=lambda F, d, x: F.gather(x.emb, indices=x.labels, axis=d.vocab), out=(BTF,),
            atol=0),
    Program("top_k", both=lambda F, d, x: F.top_k(x.x, axis=d.feature, k=2)[:2], out=(("batch", "time", "*"),) * 2),
    Program("one_hot", both=lambda F, d, x: F.one_hot(x.labels), out=(("batch", "time", "vocab"),)),
    Program("scatter_add", both=lambda F, d, x: F.scatter(x.x, indices=x.labels, indices_dim=d.time),
            out=(("batch", "vocab", "feature"),)),
    Program("pack_padded", both=lambda F, d, x: F.pack_padded(x.x, dims=[d.batch, d.time]), out=(("*", "feature"),)),
    Program("merge_split_dims", both=lambda F, d, x: F.merge_dims(x.q4, dims=[d.heads, d.head_dim])[0],
            out=(("batch", "time", "*"),)),
    # --- conv and pool -----------------------------------------------------------------------------------
    Program("conv_same", rf=lambda F, d, x: _conv(F, d, x, "same", 1), dt=lambda F, d, x: _dt_conv(F, d, x, "same", 1),
            out=(("batch", "out", "time"),)),
    Program("conv_valid_stride2", rf=lambda F, d, x: _conv(F, d, x, "valid", 2),
            dt=lambda F, d, x: _dt_conv(F, d, x, "valid", 2), out=(("batch", "out", "*"),)),
    Program("conv_same_stride2", rf=lambda F, d, x: _conv(F, d, x, "same", 2),
            dt=lambda F, d, x: _dt_conv(F, d, x, "same", 2), out=(("batch", "out", "*"),)),
    Program("pool_max_same_stride2", both=lambda F, d, x: F.pool(x.x, mode="max", pool_size=3, strides=2, padding="same",
                                                                 in_spatial_dims=[d.time]),
            out=(("batch", "feature", "*"),)),
    Program("pool_avg_valid", both=lambda F, d, x: F.pool(x.x, mode="avg", pool_size=2, strides=2, padding="valid",
                                                          in_spatial_dims=[d.time]),
            out=(("batch", "feature", "*"),)),
    Program("make_conv_out_spatial_dims", both=_conv_dims),
    Program("conv_int_padding_stride2", rf=lambda F, d, x: _conv(F, d, x, 1, 2),
            dt=lambda F, d, x: _dt_conv(F, d, x, 1, 2), out=(("batch", "out", "*"),)),
    Program("pool_max_int_padding", both=lambda F, d, x: F.pool(x.x, mode="max", pool_size=3, strides=2, padding=1,
                                                                in_spatial_dims=[d.time]),
            out=(("batch", "feature", "*"),)),
    Program("conv3d_same", both=_conv3d, out=(("batch", "out", "time", "*", "*"),)),
    Program("specaugment_mask_amount_1", both=_mask_amount_1, out=(BTF,)),
    Program("specaugment_random_mask_count", both=_random_mask_count, out=(("batch",),)),
    Program("dropout_broadcast_mask_family", both=_dropout_family, out=(("feature",), ())),
    Program("window_same", both=_window, out=(("batch", "time", "feature", "*"),)),
    Program("window_causal_pad_value", both=lambda F, d, x: _window(F, d, x, window_left=2, pad_value=0.5),
            out=(("batch", "time", "feature", "*"),)),
    Program("window_same_stride2", both=lambda F, d, x: _window(F, d, x, stride=2),
            out=(("batch", "*", "feature", "*"),)),
    Program("pool3d_max_valid", both=_pool3d, out=(("batch", "*", "*", "*", "*"),)),
    # --- part B: attention, positions, loops, signal -------------------------------------------------------------
    Program("dot_attention_cross", both=_mha, out=(("batch", "heads", "time", "head_dim"),)),
    Program("dot_attention_self", both=_self_att, out=(("batch", "heads", "time", "head_dim"),)),
    Program("dot_attention_causal", both=_causal_self_att, out=(("batch", "heads", "time", "head_dim"),)),
    Program("sinusoidal_positional_encoding", both=_sin_pos, out=(("time", "feature"),)),
    Program("relative_positional_encoding", both=_rel_pos, out=(("*", "feature"),)),
    Program("scan_rnn", both=_scan_rnn, out=(("time", "batch", "out"), ("batch", "out"))),
    Program("while_loop", both=_while_double, out=((),)),
    Program("cond", both=_cond_branch, out=(BTF,)),
    Program("stft", both=_stft, out=(("batch", "*", "*"),), atol=1e-3),
    Program("log_mel_filterbank", both=_log_mel, out=(("batch", "*", "*"),), atol=1e-3),
    Program("safe_log", both=lambda F, d, x: F.safe_log(x.positive - 0.5, eps=1e-6), out=(BTF,)),
    Program("reduce_out_max", rf=lambda F, d, x: F.reduce_out(_rf_with_feature(x.x, d.feature), mode="max",
                                                              num_pieces=2),
            dt=lambda F, d, x: F.reduce_out(F.Tensor(x.x.raw, x.x.dims, feature_dim=d.feature), mode="max",
                                            num_pieces=2),
            out=(("batch", "time", "*"),)),
    Program("scaled_gradient", both=lambda F, d, x: F.scaled_gradient(x.x, -0.5), out=(BTF,)),
    Program("range_over_dim_strided", both=lambda F, d, x: F.range_over_dim_strided(d.time, stride=2),
            out=(("*",),)),
    Program("range_over_merged_dims", both=lambda F, d, x: F.range_over_merged_dims([d.heads, d.head_dim]),
            out=(("heads", "head_dim"),)),
    Program("linspace_over_dim", both=lambda F, d, x: F.linspace_over_dim(d.time, 1.0, 3.0),
            out=(("batch", "time"),)),
    Program("num_elements_of_shape", both=lambda F, d, x: F.num_elements_of_shape([d.batch, d.time, d.feature]),
            out=((),)),
    Program("masked_fraction_of_shape", both=lambda F, d, x: F.masked_fraction_of_shape([d.batch, d.time]),
            out=((),)),
    Program("limit_repeats", both=lambda F, d, x: F.limit_repeats(x.labels, in_spatial_dim=d.time, max_len_factor=1.5),
            out=(("batch", "time"),)),
    Program("slice_update", both=lambda F, d, x: F.slice_update(x.x, F.reduce_sum(x.y, axis=d.time), axis=d.time,
                                                                 start=F.convert_to_tensor(2, dims=(), dtype="int64")),
            out=(BTF,)),
    Program("complex_round_trip", both=lambda F, d, x: F.complex_as_real(
        F.real_as_complex(x.q4, pair_dim=d.heads))[0], out=(("batch", "time", "head_dim", "*"),)),
    Program("make_complex", both=lambda F, d, x: F.complex_as_real(F.make_complex(x.x, x.y))[0],
            out=(("batch", "time", "feature", "*"),)),
    Program("ctc_greedy_decode", rf=lambda F, d, x: F.ctc_greedy_decode(x.logits, in_spatial_dim=d.time, blank_index=5,
                                                                         wb_target_dim=d.vocab),
            dt=lambda F, d, x: dt.ctc_greedy_decode(x.logits, in_spatial_dim=d.time, blank_index=5, wb_target_dim=d.vocab),
            out=(("batch", "*"),)),
    Program("edit_distance", both=lambda F, d, x: F.edit_distance(x.labels, d.time, x.labels2, d.time2),
            out=(("batch",),)),
    Program("gating", both=lambda F, d, x: F.gating(x.x, axis=d.feature), out=(("batch", "time", "*"),)),
    Program("cum_concat_step", both=lambda F, d, x: F.cum_concat_step(F.reduce_sum(x.z, axis=d.time2), prev_accum=x.x,
                                                                      axis=d.time),
            out=(("batch", "*", "feature"),)),
    Program("last_frame_position_of_dim", both=lambda F, d, x: F.last_frame_position_of_dim(d.time), out=(("batch",),)),
    Program("gather_nested", rf=lambda F, d, x: F.nested.gather_nested({"a": x.logits, "b": (x.emb, x.w)},
                                                                         indices=x.labels2),
            dt=lambda F, d, x: dt.gather_nested({"a": x.logits, "b": (x.emb, x.w)}, indices=x.labels2),
            out=(("batch", "time", "time2"), ("batch", "time2", "feature"), ("feature", "out"))),
    # --- part A of issue 13 -----------------------------------------------------------------------------------
    Program("squared_difference", both=lambda F, d, x: F.squared_difference(x.x, x.y), out=(BTF,),
            requires=("squared_difference",)),
    Program("log_add_exp", both=lambda F, d, x: F.log_add_exp(x.x, x.y), out=(BTF,), requires=("log_add_exp",)),
    Program("log_sigmoid", both=lambda F, d, x: F.log_sigmoid(x.x), out=(BTF,), requires=("log_sigmoid",)),
    Program("masked_select", both=lambda F, d, x: F.masked_select(x.x, mask=x.cond, dims=[d.time]),
            out=(("batch", "*", "feature"),), requires=("masked_select",)),
    # (rf keeps the raw padding of x where time2 outlasts time; dimtorch gives 0 there: compared with x's padding 0)
    Program("replace_dim_v2", both=lambda F, d, x: F.replace_dim_v2(x.x.copy_masked(0.0), in_dim=d.time,
                                                                    out_dim=d.time2),
            out=(("batch", "time2", "feature"),), requires=("replace_dim_v2",)),
    Program("scatter_max", both=lambda F, d, x: F.scatter(x.x, indices=x.labels, indices_dim=d.time, mode="max",
                                                         fill_value=0.0),
            out=(("batch", "vocab", "feature"),), pending=True),
    Program("label_smoothed_log_prob_gradient",
            both=lambda F, d, x: F.label_smoothed_log_prob_gradient(F.log_softmax(x.logits, axis=d.vocab), 0.1,
                                                                    axis=d.vocab),
            out=(("batch", "time", "vocab"),), requires=("label_smoothed_log_prob_gradient",)),
    Program("normalize_feature", both=lambda F, d, x: F.normalize(x.x, axis=d.feature), out=(BTF,),
            requires=("normalize",)),
    Program("normalize_time_feature", both=lambda F, d, x: F.normalize(x.x, axis=[d.time, d.feature]), out=(BTF,),
            requires=("normalize",)),
    Program("gather_clip_to_valid", both=lambda F, d, x: F.gather(x.x, indices=x.index, axis=d.time,
                                                                  clip_to_valid=True),
            out=(("batch", "time2", "feature"),), pending=True),
    # --- issue 13: label smoothing, logmeanexp ---------------------------------------------------------------
    Program("label_smoothing_probs", both=lambda F, d, x: F.label_smoothing(F.softmax(x.logits, axis=d.vocab), 0.1,
                                                                          axis=d.vocab),
            out=(("batch", "time", "vocab"),), requires=("label_smoothing",)),
    Program("label_smoothing_labels", both=lambda F, d, x: F.label_smoothing(x.labels, 0.2),
            out=(("batch", "time", "vocab"),), requires=("label_smoothing",)),
    Program("smooth_one_hot", both=lambda F, d, x: F.smooth_one_hot(x.labels, label_prob=0.6),
            out=(("batch", "time", "vocab"),), requires=("smooth_one_hot",)),
    Program("reduce_logmeanexp_time", both=lambda F, d, x: F.reduce_logmeanexp(x.x, axis=d.time),
            out=(("batch", "feature"),), requires=("reduce_logmeanexp",)),
    Program("reduce_logmeanexp_batch_time", both=lambda F, d, x: F.reduce_logmeanexp(x.x, axis=[d.batch, d.time]),
            out=(("feature",),), requires=("reduce_logmeanexp",)),
    # --- issue 13: small elementwise and array ops ----------------------------------------------------------
    Program("is_infinite", both=lambda F, d, x: F.is_infinite(F.log(x.positive - 0.1)), out=(BTF,),
            requires=("is_infinite",)),
    Program("is_neg_infinite", both=lambda F, d, x: F.is_neg_infinite(F.log(x.positive - 0.1)), out=(BTF,),
            requires=("is_neg_infinite",)),
    Program("expm1", both=lambda F, d, x: F.expm1(x.x), out=(BTF,), requires=("expm1",)),
    Program("elu", both=lambda F, d, x: F.elu(x.x), out=(BTF,), requires=("elu",)),
    Program("selu", both=lambda F, d, x: F.selu(x.x), out=(BTF,), requires=("selu",)),
    Program("lerp", both=lambda F, d, x: F.lerp(x.x, x.y, 0.3), out=(BTF,), requires=("lerp",)),
    Program("lerp_tensor_weight", both=lambda F, d, x: F.lerp(x.x, x.y, F.sigmoid(F.reduce_mean(x.x, axis=d.time))),
            out=(BTF,), requires=("lerp",)),
    Program("expand_dims", both=lambda F, d, x: F.expand_dims(x.x, [d.out, d.heads]),
            out=(("out", "heads", "batch", "time", "feature"),), requires=("expand_dims",)),
    Program("scatter_count", both=lambda F, d, x: F.scatter_count(indices=x.labels, indices_dim=d.time),
            out=(("batch", "vocab"),), requires=("scatter_count",)),
    Program("top_k_mask", both=lambda F, d, x: F.top_k_mask(x.logits, axis=d.vocab, k=2),
            out=(("batch", "time", "vocab"),), requires=("top_k_mask",)),
    Program("top_p_mask", both=lambda F, d, x: F.top_p_mask(F.softmax(x.logits, axis=d.vocab), axis=d.vocab, p=0.7),
            out=(("batch", "time", "vocab"),), requires=("top_p_mask",)),
    Program("top_p_mask_no_one_more", both=lambda F, d, x: F.top_p_mask(F.softmax(x.logits, axis=d.vocab),
                                                                         axis=d.vocab, p=0.7, one_more=False,
                                                                         min_tokens_to_keep=2),
            out=(("batch", "time", "vocab"),), requires=("top_p_mask",)),
    # --- issue 13: CTC alignments ----------------------------------------------------------------------------
    Program("ctc_best_path", both=_best_path, out=(("time", "batch"),), requires=("ctc_best_path",)),
    Program("ctc_best_path_no_label_loop", both=lambda F, d, x: _best_path(F, d, x, label_loop=False),
            out=(("time", "batch"),), requires=("ctc_best_path",)),
    Program("ctc_durations_from_path", both=lambda F, d, x: _durations(F, d, x, True), out=(("batch", "*"),),
            requires=("ctc_durations_from_path",)),
    Program("ctc_durations_from_path_new_dim", both=lambda F, d, x: _durations(F, d, x, False),
            out=(("batch", "*"),), requires=("ctc_durations_from_path",)),
    Program("ctc_no_label_loop_blank_durations", both=_blank_durations, out=(("batch", "*"),),
            requires=("ctc_no_label_loop_blank_durations_from_path",)),
]


# RETURNN runs these with its native ops, which it compiles with a C++ compiler once per environment (1-2 min
# each): the slow group; the two of one op in one worker, so that it compiles once (pytest-xdist's --dist
# loadgroup), the other op's compile in parallel.
NATIVE_OPS = {"ctc_best_path": "returnn_viterbi", "ctc_best_path_no_label_loop": "returnn_viterbi",
              "edit_distance": "returnn_edit_distance"}


@pytest.mark.parametrize("program", [
    pytest.param(p, marks=[pytest.mark.slow, pytest.mark.xdist_group(NATIVE_OPS[p.name])]) if p.name in NATIVE_OPS
    else p for p in PROGRAMS], ids=lambda p: p.name)
def test_program_agrees_with_returnn_frontend(rf, program):
    missing = program.missing()
    if missing:
        pytest.skip(f"dimtorch lacks {', '.join(missing)} (not landed yet)")
    try:
        problems = run_both(program, rf)
    except TypeError as e:
        if program.pending and "unexpected keyword argument" in str(e):
            pytest.skip(f"dimtorch lacks an argument of {program.name} (not landed yet): {e}")
        raise
    assert not problems, f"{program.name}: " + "; ".join(problems)


def test_program_names_are_unique():
    names = [p.name for p in PROGRAMS]
    assert len(names) == len(set(names))


def test_scan_with_cond_keeps_returnn_frontends_state_rule(rf):
    """RETURNN frontend's scan with cond: the step whose new state turns an entry's cond false counts
    for the lengths and outputs, but that new state is dropped. dimtorch follows it."""
    from returnn.tensor import Dim as RfDim, Tensor as RfTensor
    results = {}
    for F in (rf, dt):
        batch = RfDim(3, name="batch") if F is rf else dt.Dim(None, name="batch")
        make = (lambda r, dims: rf.convert_to_tensor(r, dims=list(dims))) if F is rf else dt.Tensor
        limit, zero = make(torch.tensor([3, 1, 0]), (batch,)), make(torch.zeros(3, dtype=torch.int64), (batch,))
        template = RfTensor("y", dims=[batch], dtype="int64") if F is rf else zero
        for before in (True, False):
            ys, final, new_dim = F.scan(cond=lambda _, s: s < limit, cond_dims=[batch], cond_before_body=before,
                                        initial=zero, ys=template, body=lambda _, s: (s + 1, s + 1))
            lengths = new_dim.dyn_size_ext.raw_tensor if F is rf else new_dim.lengths.raw
            raw = final.raw_tensor if F is rf else final.raw
            results[(F is rf, before)] = (lengths.tolist(), raw.tolist())
    for before in (True, False):
        assert results[(True, before)] == results[(False, before)]


def _pool_avg(F, d, x, pool_size, strides):
    return F.pool(x, mode="avg", pool_size=pool_size, strides=strides, padding="same", in_spatial_dims=[d.time])[0]


@pytest.mark.parametrize("premask", [False, True])
@pytest.mark.parametrize("pool_size,strides", [(3, 1), (3, 2)])
def test_avg_pool_same_differs_where_returnn_frontend_is_batch_dependent(rf, pool_size, strides, premask):
    """avg pool with padding="same" and an odd window: RETURNN frontend pads with torch's own padding
    (not counted: count_include_pad=False) but masks the padding of shorter sequences with 0 and
    counts those frames, so a shorter sequence's last output frame differs between the batch and the
    sequence alone. dimtorch averages over the sequence's own frames only, which is what rf gives for
    each sequence alone. They agree on the longest sequence and on every window inside a sequence.
    premask: copy_masked(1.0) first, as rf's own test_copy_masked does (the "copy_masked difference":
    copy_masked itself agrees; the avg pool after it is what differs)."""
    from returnn.tensor import Dim as RfDim
    rf_d, rf_x = make_data(rf, RfDim, RfDim(3, name="batch"))
    dt_d, dt_x = make_data(dt, dt.Dim, dt.Dim(None, name="batch"))
    r_in = rf_x.x.copy_masked(1.0) if premask else rf_x.x
    t_in = dt_x.x.copy_masked(1.0) if premask else dt_x.x
    r = _pool_avg(rf, rf_d, r_in, pool_size, strides)
    t = _pool_avg(dt, dt_d, t_in, pool_size, strides)
    out_rf = next(e for e in r.dims if e not in (rf_d.batch, rf_d.feature))
    out_dt = next(e for e in t.dims if e not in (dt_d.batch, dt_d.feature))
    r_raw = r.copy_compatible_to_dims_raw([rf_d.batch, out_rf, rf_d.feature])
    t_raw = t.raw_aligned((dt_d.batch, out_dt, dt_d.feature))
    n_out = [-(-n // strides) for n in LENGTHS]
    half, differs = pool_size // 2, []
    for b, n in enumerate(LENGTHS):
        inside = [i for i in range(n_out[b]) if i * strides + half < n]
        torch.testing.assert_close(t_raw[b, inside], r_raw[b, inside])
        differs.append(not torch.allclose(t_raw[b, :n_out[b]], r_raw[b, :n_out[b]]))
        # rf on this sequence alone (no batch padding) gives dimtorch's values
        one = RfDim(1, name="one")
        t1 = RfDim(rf.convert_to_tensor(torch.tensor([n], dtype=torch.int32), dims=[one]), name="t1")
        x1 = rf.convert_to_tensor(rf_x.x.raw_tensor[b:b + 1, :n].clone(), dims=[one, t1, rf_d.feature])
        y1, (o1,) = rf.pool(x1, mode="avg", pool_size=pool_size, strides=strides, padding="same", in_spatial_dims=[t1])
        torch.testing.assert_close(t_raw[b, :n_out[b]], y1.copy_compatible_to_dims_raw([one, o1, rf_d.feature])[0])
    longest = LENGTHS.index(max(LENGTHS))
    assert not differs[longest] and any(differs), differs


def test_avg_pool_int_padding_differs_where_returnn_frontend_is_batch_dependent(rf):
    """avg pool with int padding: as with "same", rf masks a shorter sequence's padding with 0 and counts those
    frames (torch's own padding is not counted), so windows within p of a shorter sequence's end differ from
    the sequence alone; dimtorch gives what rf gives for each sequence alone."""
    from returnn.tensor import Dim as RfDim
    rf_d, rf_x = make_data(rf, RfDim, RfDim(3, name="batch"))
    dt_d, dt_x = make_data(dt, dt.Dim, dt.Dim(None, name="batch"))
    kw = dict(mode="avg", pool_size=3, strides=1, padding=1)
    r, (out_rf,) = rf.pool(rf_x.x, in_spatial_dims=[rf_d.time], **kw)
    t, (out_dt,) = dt.pool(dt_x.x, in_spatial_dims=[dt_d.time], **kw)
    r_raw = r.copy_compatible_to_dims_raw([rf_d.batch, out_rf, rf_d.feature])
    t_raw = t.raw_aligned((dt_d.batch, out_dt, dt_d.feature))
    differs = []
    for b, n in enumerate(LENGTHS):
        differs.append(not torch.allclose(t_raw[b, :n], r_raw[b, :n]))
        one = RfDim(1, name="one")
        t1 = RfDim(rf.convert_to_tensor(torch.tensor([n], dtype=torch.int32), dims=[one]), name="t1")
        x1 = rf.convert_to_tensor(rf_x.x.raw_tensor[b:b + 1, :n].clone(), dims=[one, t1, rf_d.feature])
        y1, (o1,) = rf.pool(x1, in_spatial_dims=[t1], **kw)
        torch.testing.assert_close(t_raw[b, :n], y1.copy_compatible_to_dims_raw([one, o1, rf_d.feature])[0])
    assert not differs[LENGTHS.index(max(LENGTHS))] and any(differs), differs


def test_window_valid_on_a_sequence_shorter_than_the_window_differs(rf):
    """window(padding="valid") on a sequence shorter than the window: rf's dim math gives it a frame (T - W + 1 < 0
    rounds up to 1 with stride 2), a window reaching past the sequence's end; dimtorch gives 0 frames, as conv and
    pool do with "valid". The other sequences agree."""
    from returnn.tensor import Dim as RfDim
    rf_d, rf_x = make_data(rf, RfDim, RfDim(3, name="batch"))
    dt_d, dt_x = make_data(dt, dt.Dim, dt.Dim(None, name="batch"))
    r, r_out = _window(rf, rf_d, rf_x, padding="valid", stride=2)
    t, t_out = _window(dt, dt_d, dt_x, padding="valid", stride=2)
    assert LENGTHS == (6, 4, 1)
    assert r_out.dyn_size_ext.raw_tensor.tolist() == [2, 1, 1] and t_out.lengths.raw.tolist() == [2, 1, 0]
    r_win = next(e for e in r.dims if e.name == "window")
    t_win = t.dims[-1]
    r_raw = r.copy_compatible_to_dims_raw([rf_d.batch, r_out, rf_d.feature, r_win])
    t_raw = t.raw_aligned((dt_d.batch, t_out, dt_d.feature, t_win))
    torch.testing.assert_close(t_raw[0, :2], r_raw[0, :2])
    torch.testing.assert_close(t_raw[1, :1], r_raw[1, :1])
