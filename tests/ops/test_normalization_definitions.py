"""The layer_norm, rms_norm and batch_norm fast paths (src/ops/normalization.cpp) and the
dropout fast path against their Python definitions: dims orders, affine parameters in other orders,
masked statistics and the running-stat update, errors."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, strategies as st

import dimtorch as dt

from definition_checks import check, check_either, check_error, padded
from helpers import PAD_LARGE, PAD_NAN


@given(perm=st.permutations([0, 1, 2, 3]), lengths=st.lists(st.integers(0, 4), min_size=1, max_size=3),
       pad=st.sampled_from([PAD_NAN, PAD_LARGE]), two=st.booleans(), weight=st.booleans(), bias=st.booleans(),
       flip=st.booleans(), eps=st.sampled_from([None, 1e-3]), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_layer_and_rms_norm(perm, lengths, pad, two, weight, bias, flip, eps, dtype):
    x, (batch, time, feature, heads) = padded(lengths, pad=pad, perm=perm, dtype=dtype)
    axis = (feature, heads) if two else feature
    p_dims = ((heads, feature) if flip else (feature, heads)) if two else (feature,)
    shape = [d.size for d in p_dims]
    w = dt.Tensor(torch.rand(shape, dtype=dtype) + 0.5, p_dims) if weight else None
    b = dt.Tensor(torch.randn(shape, dtype=dtype), p_dims) if bias else None
    check(dt.layer_norm, x, axis, weight=w, bias=b, eps=eps)
    check(dt.rms_norm, x, axis, weight=w, eps=eps)
    if two:
        check(dt.layer_norm, x, axis[::-1], weight=w)


@pytest.mark.parametrize("perm", [(0, 1, 2, 3), (2, 1, 3, 0), (3, 0, 2, 1)])
@pytest.mark.parametrize("lengths", [(4, 2, 0), (3, 3)])
@pytest.mark.parametrize("running", [False, True])
@pytest.mark.parametrize("affine", [False, True])
def test_batch_norm_training(perm, lengths, running, affine):
    x, (batch, time, feature, heads) = padded(lengths, perm=perm)
    f = feature.size
    stats = {}
    if running:
        stats = dict(running_mean=dt.Tensor(torch.randn(f), (feature,)),
                     running_var=dt.Tensor(torch.rand(f) + 0.5, (feature,)))
    params = dict(weight=dt.Tensor(torch.rand(f) + 0.5, (feature,)), bias=dt.Tensor(torch.randn(f), (feature,))) \
        if affine else {}
    buffers = ("running_mean", "running_var")
    check(dt.batch_norm, x, **stats, **params, buffers=buffers)  # masked statistics
    check(dt.batch_norm, x, feature, momentum=0.3, eps=1e-3, **stats, **params, buffers=buffers)
    check(dt.batch_norm, x, use_mask=False, **stats, **params, buffers=buffers)  # F.batch_norm
    check(dt.batch_norm, x, heads, buffers=buffers)
    static = dt.Tensor(x.raw.nan_to_num(), tuple(d if d is not time else dt.Dim(x.raw.shape[x.dims.index(time)],
                                                                                name="t") for d in x.dims),
                       feature_dim=feature)
    check(dt.batch_norm, static, **stats, **params, buffers=buffers)
    if running:
        check(dt.batch_norm, x, training=False, **stats, **params, buffers=buffers)
        check(dt.batch_norm, x, None, training=0, **stats, buffers=buffers)


def test_batch_norm_one_dim_and_momentum_types():
    f = dt.Dim(4, name="f")
    x = dt.Tensor(torch.randn(4), (f,), feature_dim=f)
    stats = dict(running_mean=dt.Tensor(torch.zeros(4), (f,)), running_var=dt.Tensor(torch.ones(4), (f,)))
    check(dt.batch_norm, x, training=False, **stats, buffers=("running_mean", "running_var"))
    x2, (batch, time, feature, heads) = padded((3, 2))
    for momentum in (1, True, 0.5):
        check(dt.batch_norm, x2, momentum=momentum, running_mean=dt.Tensor(torch.zeros(3), (feature,)),
              running_var=dt.Tensor(torch.ones(3), (feature,)), buffers=("running_mean", "running_var"))


def test_batch_norm_two_dynamic_dims():
    x, (batch, time, feature, heads) = padded((4, 2, 1))
    beam = dt.Dim(2, name="beam")
    t2 = dt.Dim(dt.Tensor(torch.tensor([[3, 1], [0, 2], [2, 2]]), (batch, beam)), name="t2")
    y = dt.Tensor(torch.randn(3, 2, 3, 4, 3), (batch, beam, t2, time, feature), feature_dim=feature)
    stats = dict(running_mean=dt.Tensor(torch.zeros(3), (feature,)), running_var=dt.Tensor(torch.ones(3), (feature,)))
    check(dt.batch_norm, y, **stats, buffers=("running_mean", "running_var"))


def test_errors_name_the_call():
    x, (batch, time, feature, heads) = padded((3, 2))
    no_feature = dt.Tensor(x.raw, x.dims)
    f = feature.size
    rm, rv = dt.Tensor(torch.zeros(f), (feature,)), dt.Tensor(torch.ones(f), (feature,))
    for op in (dt.layer_norm, dt.rms_norm):
        bad = [((x.raw, feature), {}), ((x, time), {}), ((x, (feature, time)), {}), ((x, 3), {}),
               ((x, feature), {"weight": x.raw}), ((x, feature), {"weight": rm.raw}),
               ((x, feature), {"weight": dt.Tensor(torch.ones(2), (heads,))}),
               ((x, (feature, heads)), {"weight": rm}), ((x, feature, rm), {}), ((dt.cast(x, "int64"), feature), {})]
        if op is dt.layer_norm:
            bad += [((x, feature), {"bias": 1.0}), ((x, feature), {"bias": dt.Tensor(torch.ones(2), (heads,))})]
        for args, kwargs in bad:
            check_error(op, *args, **kwargs)
    bad = [((x.raw,), {}), ((no_feature,), {}), ((x, 3), {}), ((x, time), {}), ((x, dt.Dim(3, name="o")), {}),
           ((x,), {"running_mean": rm}), ((x,), {"training": False}), ((x,), {"training": x}),
           ((x,), {"use_mask": x}), ((x,), {"weight": rm.raw}), ((x,), {"bias": dt.Tensor(torch.ones(2), (heads,))}),
           ((x,), {"momentum": "a"}), ((x,), {"momentum": None}), ((x,), {"eps": None}),
           ((x,), {"running_mean": rm, "running_var": dt.Tensor(torch.ones(2), (heads,))}),
           ((dt.cast(x, "int64"),), {"use_mask": False})]
    for args, kwargs in bad:
        check_error(dt.batch_norm, *args, **kwargs)


@pytest.mark.parametrize("axis", [None, "feature", "time_batch"])
@pytest.mark.parametrize("p", [0.0, 0.3, 1.0])
def test_dropout(axis, p):
    """The dropout fast path and its definition (dimtorch.ops.dropout) draw the same mask from one seed."""
    x, (batch, time, feature, heads) = padded((4, 2), perm=(2, 0, 1, 3))
    a = {None: None, "feature": feature, "time_batch": (time, batch)}[axis]
    check_either(dt.dropout, x, p, axis=a, seed=3)
    check_either(dt.dropout, x, p, a, False)
