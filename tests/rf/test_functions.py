"""dimtorch.rf's functions against RETURNN frontend: each program is written once against rf's API and run
on both (returnn.frontend and dimtorch.rf, the same raw data, padding 1e4), compared on valid frames and
op-made dims (tests/rf_parity.py); skipped cleanly without returnn. The forms are those the op gaps of
issue 21 and rf's signatures need: pad's list of out dims and out_dims=, concat(allow_broadcast=), top_k
over several axes with k_dim=, matmul(reduce=[]), dot, constant, concat_features, gather without axis or
without a sparse_dim, cumsum(spatial_dim=), pack_padded(enforce_sorted=), max_pool1d/pool1d, ctc_loss
(use_native_op=, logits broadcast over an extra dim), split's tuple, cross_entropy with int32 targets,
stack onto a dim made by dim math, mask_nested merging two dims, masked_select, slice(end=Tensor), sort,
combine(a, kind, b), maximum of three, reduce(mode=). Known differences are pinned by their own tests."""
import pytest
import torch

import dimtorch as dt
import dimtorch.rf as dtrf
from rf_parity import LENGTHS, Program, make_data, run_both


def _is_rf(F) -> bool:
    return F is not dtrf


def _with_feature(F, t, dim):
    """t with feature_dim `dim` (rf: the marker set on a copy; dimtorch: a new Tensor over the raw)."""
    if _is_rf(F):
        t = t.copy()
        t.feature_dim = dim
        return t
    return dt.Tensor(t.raw, t.dims, sparse_dim=t.sparse_dim, feature_dim=dim)


def _without_sparse_dim(F, t):
    if _is_rf(F):
        t = t.copy()
        t.sparse_dim = None
        return t
    return dt.Tensor(t.raw, t.dims)


def _lengths(F, d, values):
    return F.convert_to_tensor(torch.tensor(values, dtype=torch.int32), dims=[d.batch])


def _pad(F, d, x):
    y1, dims1 = F.pad(x.x, axes=[d.time], padding=[(1, 0)], value=0.5)
    assert isinstance(dims1, list)
    y2, dims2 = F.pad(x.x, axes=[d.time], padding=[(0, 1)], value=-1.0, out_dims=dims1)
    assert dims2 == dims1 and isinstance(dims2, list)
    return y1, y2


def _top_k_two_axes(F, d, x):
    k = F.Dim(3, name="k")
    values, indices, k_dim = F.top_k(x.q4, axis=[d.heads, d.head_dim], k_dim=k)
    assert isinstance(indices, list) and len(indices) == 2 and k_dim is k
    return values, indices[0], indices[1]


def _top_k_one_axis(F, d, x):
    values, indices, _ = F.top_k(x.x, axis=d.feature, k=2)
    return values, indices


def _concat_features(F, d, x):
    return F.concat_features(_with_feature(F, x.x, d.feature), _with_feature(F, x.y, d.feature))


def _gather_no_sparse_dim(F, d, x):
    return F.gather(x.x, indices=_without_sparse_dim(F, x.index), axis=d.time, clip_to_valid=True)


def _ctc_broadcast(F, d, x):
    branch = F.Dim(2, name="branch")
    logits = _with_feature(F, F.expand_dim(x.logits, dim=branch), d.vocab)
    return F.ctc_loss(logits=logits, targets=x.ctc_targets, input_spatial_dim=d.time, targets_spatial_dim=d.time3,
                      blank_index=0, use_native_op=False), branch


def _split(F, d, x):
    a, b = F.Dim(1, name="a"), F.Dim(3, name="b")
    parts = F.split(x.x, axis=d.feature, out_dims=[a, b])
    assert isinstance(parts, tuple)
    return parts


def _stack_onto_dim_math(F, d, x):
    total = d.time + d.time3
    frames = [F.gather(x.x, indices=min(i, 5), axis=d.time) for i in range(max(LENGTHS) + 3)]
    out, dim = F.stack(frames, out_dim=total)
    assert dim is total
    return out


def _mask_nested_merge(F, d, x):
    label = F.reduce_max(x.x, axis=d.time)
    new_h, new_t = F.cum_concat_step(label, prev_accum=x.x, axis=d.time)
    mask = F.convert_to_tensor(torch.tensor([True, False, True]), dims=[d.batch])
    h, t = F.nested.mask_nested((new_h, new_t), mask=mask, mask_value=(x.x, d.time))
    return h, t


def _sort(F, d, x):
    values, indices, dim = F.sort(x.x, axis=d.feature, descending=True)
    return values, indices, dim


PROGRAMS = [
    Program("pad_list_and_out_dims", both=_pad, out=(("batch", "*", "feature"),) * 2),
    Program("concat_allow_broadcast", out=(("batch", "time", "*"),),
            both=lambda F, d, x: F.concat((x.x, d.feature), (x.bias, d.out), allow_broadcast=True)),
    Program("top_k_two_axes_k_dim", both=_top_k_two_axes, out=(("batch", "time", "*"),) * 3),
    Program("top_k_one_axis", both=_top_k_one_axis, out=(("batch", "time", "*"),) * 2),
    Program("matmul_reduce_nothing", both=lambda F, d, x: F.matmul(x.x, x.bias, reduce=[]),
            out=(("batch", "time", "feature", "out"),)),
    Program("dot", both=lambda F, d, x: F.dot(x.x, x.w, reduce=d.feature), out=(("batch", "time", "out"),)),
    Program("constant", both=lambda F, d, x: F.constant(1.5, dims=[d.feature, d.out]), out=(("feature", "out"),)),
    Program("concat_features", both=_concat_features, out=(("batch", "time", "*"),)),
    Program("gather_axis_from_sparse_dim", both=lambda F, d, x: F.gather(x.x, indices=x.index, clip_to_valid=True),
            out=(("batch", "time2", "feature"),)),
    Program("gather_indices_without_sparse_dim", both=_gather_no_sparse_dim, out=(("batch", "time2", "feature"),)),
    Program("cumsum_spatial_dim", both=lambda F, d, x: F.cumsum(x.x, spatial_dim=d.time),
            out=(("batch", "time", "feature"),)),
    Program("pack_padded", both=lambda F, d, x: F.pack_padded(x.x, dims=[d.batch, d.time], enforce_sorted=False),
            out=(("*", "feature"),)),
    Program("max_pool1d", out=(("batch", "*", "feature"),),
            both=lambda F, d, x: F.max_pool1d(x.x, pool_size=2, padding="same", strides=2, in_spatial_dim=d.time)),
    Program("pool1d_avg_valid", out=(("batch", "*", "feature"),),
            both=lambda F, d, x: F.pool1d(x.x, mode="avg", pool_size=3, padding="valid", strides=1,
                                          in_spatial_dim=d.time)),
    Program("ctc_loss_use_native_op_false", out=(("batch",),),
            both=lambda F, d, x: F.ctc_loss(logits=_with_feature(F, x.logits, d.vocab), targets=x.ctc_targets,
                                            input_spatial_dim=d.time,
                                            targets_spatial_dim=d.time3, blank_index=0, use_native_op=False)),
    Program("ctc_loss_broadcast_over_a_dim", both=_ctc_broadcast, out=(("batch", "*"),), atol=1e-4),
    Program("split_tuple", both=_split, out=(("batch", "time", "*"),) * 2),
    Program("replace_dim_new_dim", both=lambda F, d, x: F.replace_dim(x.x, in_dim=d.feature),
            out=(("batch", "time", "*"),)),
    Program("cross_entropy_int32_targets", out=(("batch", "time"),),
            both=lambda F, d, x: F.cross_entropy(estimated=x.logits, target=F.cast(x.labels, "int32"),
                                                 axis=d.vocab, estimated_type="logits")),
    Program("stack_onto_dim_math", both=_stack_onto_dim_math, out=(("*", "batch", "feature"),)),
    Program("mask_nested_merges_two_dims", both=_mask_nested_merge, out=(("batch", "*", "feature"),)),
    Program("masked_select_per_row", out=(("batch", "*", "feature"),),
            both=lambda F, d, x: F.masked_select(x.x, mask=x.cond, dims=[d.time])),
    Program("slice_end_tensor", out=(("batch", "*", "feature"),),
            both=lambda F, d, x: F.slice(x.x, axis=d.time, start=1, end=_lengths(F, d, [4, 3, 1]))),
    Program("sort_three_results", both=_sort, out=(("batch", "time", "*"),) * 2),
    Program("combine_rf_order", both=lambda F, d, x: (F.combine(x.x, "-", x.y), F.compare(x.x, ">", x.y)),
            out=(("batch", "time", "feature"),) * 2),
    Program("maximum_of_three", both=lambda F, d, x: F.maximum(x.x, x.y, x.positive),
            out=(("batch", "time", "feature"),)),
    Program("reduce_mode", both=lambda F, d, x: F.reduce(x.x, mode="max", axis=d.time), out=(("batch", "feature"),)),
    Program("dropout_outside_training_is_identity", out=(("batch", "time", "feature"),),
            both=lambda F, d, x: F.dropout(x.x, 0.5, axis=d.feature)),
    Program("relu_square", both=lambda F, d, x: F.relu_square(x.x), out=(("batch", "time", "feature"),)),
    Program("scatter_mean", out=(("batch", "vocab", "feature"),),
            both=lambda F, d, x: F.scatter_mean(x.x, indices=x.labels, indices_dim=d.time)),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_program_agrees_with_returnn_frontend(rf, program):
    problems = run_both(program, rf, dtrf)
    assert not problems, "; ".join(problems)


def test_masked_select_with_the_batch_dim_differs_where_returnn_frontend_selects_padding(rf):
    """masked_select over dims=[batch, time] with a mask that holds on padding frames: rf packs those padding
    frames too (so its result depends on what the padding holds), dimtorch only the valid frames, as rf does
    with dims=[time] and as every sequence alone gives. Equal once the mask is False on padding."""
    from returnn.tensor import Dim as RfDim
    rf_d, rf_x = make_data(rf, RfDim, RfDim(3, name="batch"))
    dt_d, dt_x = make_data(dt, dt.Dim, dt.Dim(None, name="batch"))
    everywhere = torch.ones(3, max(LENGTHS), dtype=torch.bool)
    r, r_dim = rf.masked_select(rf_x.x, mask=rf.convert_to_tensor(everywhere, dims=[rf_d.batch, rf_d.time]),
                                dims=[rf_d.batch, rf_d.time])
    t, t_dim = dtrf.masked_select(dt_x.x, mask=dt.Tensor(everywhere, (dt_d.batch, dt_d.time)),
                                  dims=[dt_d.batch, dt_d.time])
    valid = torch.arange(max(LENGTHS))[None, :] < torch.tensor(LENGTHS)[:, None]
    assert t_dim.size == sum(LENGTHS) and torch.equal(t.raw, dt_x.x.raw[valid])
    assert r.raw_tensor.shape[0] == valid.numel()  # rf: every frame, padding included
    r2, _ = rf.masked_select(rf_x.x, mask=rf.convert_to_tensor(valid, dims=[rf_d.batch, rf_d.time]),
                             dims=[rf_d.batch, rf_d.time])
    torch.testing.assert_close(r2.raw_tensor, t.raw)


def test_random_uniform_int_dtype_and_sparse_dim_on_both(rf):
    """random_uniform(sparse_dim=) with an int dtype: integers over the sparse dim's indices on both (the
    draws differ: each has its own generator); dimtorch's dtype None with a sparse_dim is int64 (rf: int32)."""
    for F in (rf, dtrf):
        big, vocab = F.Dim(2000, name="big"), F.Dim(5, name="vocab")
        r = F.random_uniform([big], sparse_dim=vocab, dtype="int32")
        raw = r.raw_tensor if F is rf else r.raw
        assert r.dtype == "int32" and r.sparse_dim is vocab and set(raw.unique().tolist()) == set(range(5))
    assert dtrf.random_uniform([dt.Dim(3, name="n")], sparse_dim=dt.Dim(4, name="v")).dtype == "int64"


def test_dropout_follows_the_train_flag():
    """rf.dropout drops only when the run context's train flag is set (for dropout) or on_forward: without a
    context, in train and forward contexts, under train_flag_ctx for it alone or for all, with a Tensor flag
    (which only the definition reads). The C++ function (the flag the context publishes) and its definition
    (the flag the context gives) agree on each."""
    from dimtorch.ops.dropout import train_flag_dropout
    n, feat = dt.Dim(4000, name="n"), dt.Dim(2, name="f")
    x = dt.ones((n, feat))

    def drops(fn, *args, **kwargs):
        y = fn(x, 0.5, *args, **kwargs)
        if y is x:
            return False
        assert set(y.raw.unique().tolist()) <= {0.0, 2.0}
        assert float((y.raw == 0).float().mean()) == pytest.approx(0.5, abs=0.05)
        return True

    def both(expected, *args, **kwargs):
        assert drops(dtrf.dropout, *args, **kwargs) is expected
        assert drops(train_flag_dropout, *args, **kwargs) is expected

    try:
        dtrf.reset_run_ctx()
        both(False)
        both(True, on_forward=True)
        dtrf.init_train_step_run_ctx(train_flag=True)
        both(True)
        with dtrf.get_run_ctx().train_flag_ctx(False, func=dtrf.dropout):
            both(False)
            both(True, on_forward=True)
        both(True)
        with dtrf.get_run_ctx().train_flag_ctx(False, func=dtrf.BatchNorm.__call__):  # another function's flag
            both(True)
        with dtrf.get_run_ctx().train_flag_ctx(False):
            both(False)
            with dtrf.get_run_ctx().train_flag_ctx(True, func=[dtrf.dropout]):
                both(True)
            both(False)
        dtrf.get_run_ctx_step()
        dtrf.init_train_step_run_ctx(train_flag=False)
        both(False)
        dtrf.init_forward_step_run_ctx()
        both(False)
        dtrf.init_train_step_run_ctx(train_flag=dtrf.convert_to_tensor(True))
        both(True)
        dtrf.init_train_step_run_ctx(train_flag=dtrf.convert_to_tensor(False))
        both(False)
        dtrf.init_train_step_run_ctx(train_flag=True)
        y = dtrf.dropout(x, drop_prob=0.5, axis=feat)
        assert set(y.raw.unique().tolist()) <= {0.0, 2.0} and bool((y.raw == y.raw[:1]).all())  # one mask over feat
        assert dtrf.dropout(x, 0.5, axis=False).raw.unique().numel() == 2
        for fn in (dtrf.dropout, train_flag_dropout):
            with pytest.raises(ValueError, match=r"dimtorch\.rf\.dropout\(\): axis=True"):
                fn(x, 0.5, axis=True)
            with pytest.raises(ValueError, match=r"dimtorch\.rf\.dropout\(\): drop_prob must be in \[0, 1\)"):
                fn(x, 1.5)
        keep = dtrf.dropout(x, dtrf.convert_to_tensor(0.25), axis=feat)  # a Tensor drop probability
        assert set(keep.raw.unique().tolist()) <= {0.0, torch.tensor(1.0 / 0.75).item()}
    finally:
        dtrf.reset_run_ctx()
    assert dtrf.dropout(x, 0.5) is x


def test_dropout_binding_errors_are_named():
    with pytest.raises(TypeError, match=r"dimtorch\.rf\.dropout\(\)|train_flag_dropout\(\)"):
        dtrf.dropout(dt.ones((dt.Dim(2, name="n"),)), 0.5, dim=None)
    with pytest.raises(TypeError):
        dtrf.dropout()


def test_calc_conv_out_lengths_agree_with_returnn_frontend(rf):
    """calc_conv_out_length / calc_transposed_conv_out_length on ints, as rf computes them, for the paddings
    and strides of RETURNN's models; on a Dim, the dim dimtorch.conv makes."""
    for n in (0, 1, 2, 5, 7, 16):
        for k, s, pad in ((3, 1, "same"), (3, 2, "same"), (3, 1, "valid"), (5, 3, "valid"), (4, 2, "same")):
            assert dtrf.calc_conv_out_length(n, filter_size=k, stride=s, padding=pad) == \
                rf.calc_conv_out_length(n, filter_size=k, stride=s, padding=pad), (n, k, s, pad)
        for k, s, pad in ((3, 2, "valid"), (4, 2, "same"), (2, 2, "valid")):
            if n == 0:
                continue
            assert dtrf.calc_transposed_conv_out_length(n, filter_size=k, stride=s, padding=pad) == \
                rf.calc_transposed_conv_out_length(n, filter_size=k, stride=s, padding=pad), (n, k, s, pad)
    time = dt.Dim(dt.Tensor(torch.tensor([5, 2]), (dt.Dim(None, name="b"),)), name="t")
    out = dtrf.calc_conv_out_length(time, filter_size=3, stride=2, padding="same")
    assert out is dt.make_conv_out_spatial_dims([time], filter_size=3, padding="same", strides=2)[0]
    assert out.lengths.raw.tolist() == [3, 1]


def test_concat_features_fast_path_agrees_with_its_definition():
    """rf.concat_features (C++: each source's feature dim to concat's fast path) and its definition: the same
    values, dims and feature dim, forward and backward, on static features and on a padded dynamic feature
    dim (NaN padding: concat's definition); the same errors."""
    from dimtorch.ops.concat import rf_concat_features as definition
    b, f, g = dt.Dim(3, name="b"), dt.Dim(2, name="f"), dt.Dim(4, name="g")
    lengths = dt.Tensor(torch.tensor([3, 1, 2]), (b,))
    dyn = dt.Dim(lengths, name="dyn")
    dyn_raw = torch.randn(3, 3)
    dyn_raw[1, 1:] = float("nan")
    dyn_raw[2, 2:] = float("nan")
    for second_dims, second_raw in (((b, g), torch.randn(3, 4)), ((b, dyn), dyn_raw)):
        outs = []
        for fn in (dtrf.concat_features, definition):
            xr = torch.randn(3, 2, generator=torch.Generator().manual_seed(1)).requires_grad_()
            yr = second_raw.clone().requires_grad_()
            x = dt.Tensor(xr, (b, f), feature_dim=f)
            y = dt.Tensor(yr, second_dims, feature_dim=second_dims[1])
            out = fn(x, y)
            assert out.feature_dim is out.dims[1] and out.dims[0] is b
            valid = out.dims[1].get_mask(dims_order=out.dims).raw if out.dims[1].is_dynamic() else None
            vals = out.raw if valid is None else torch.where(valid, out.raw, 0.0)
            vals.sum().backward()
            outs.append((vals.detach(), xr.grad, torch.nan_to_num(yr.grad, nan=7.0)))
        for got, want in zip(*outs):
            torch.testing.assert_close(got, want)
    x = dt.Tensor(torch.randn(3, 2), (b, f), feature_dim=f)
    for fn in (dtrf.concat_features, definition):
        with pytest.raises(ValueError, match=r"dimtorch\.rf\.concat_features\(\): every source needs a feature_dim"):
            fn(x, dt.Tensor(torch.randn(3, 4), (b, g)))
    z = dt.Tensor(torch.randn(4), (g,), feature_dim=g)
    assert dtrf.concat_features(x, z, allow_broadcast=True).dims == definition(x, z, allow_broadcast=True).dims
