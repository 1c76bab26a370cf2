"""The matmul, dot and linear fast paths (src/ops/matmul.cpp) against their Python
definitions (dimtorch/ops/matmul.py): any dims of a and b, batch and reduced dims, masking, errors."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, strategies as st

import dimtorch as dt

from definition_checks import check, check_either, check_error, padded
from helpers import PAD_LARGE, PAD_NAN


def _operand(x, dims, picks, order_seed, extra=()):
    """A Tensor over some of `dims` (x's sizes) plus `extra` dims, in a shuffled order."""
    chosen = [d for d, p in zip(dims, picks) if p] + list(extra)
    g = torch.Generator().manual_seed(order_seed)
    chosen = [chosen[i] for i in torch.randperm(len(chosen), generator=g).tolist()]
    shape = [x.raw.shape[x.dims.index(d)] if d in x.dims else d.size for d in chosen]
    return dt.Tensor(torch.randn(shape, generator=g, dtype=x.raw.dtype), tuple(chosen))


@given(perm=st.permutations([0, 1, 2, 3]), lengths=st.lists(st.integers(0, 4), min_size=1, max_size=3),
       extra=st.integers(0, 2), pad=st.sampled_from([PAD_NAN, PAD_LARGE]),
       b_picks=st.lists(st.booleans(), min_size=4, max_size=4), r_picks=st.lists(st.booleans(), min_size=4, max_size=4),
       order=st.integers(0, 100), use_mask=st.booleans(), out_dims=st.integers(0, 2), swap=st.booleans(),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_matmul_any_layout(perm, lengths, extra, pad, b_picks, r_picks, order, use_mask, out_dims, swap, dtype):
    x, dims = padded(lengths, extra=extra, pad=pad, perm=perm, dtype=dtype)
    outs = [dt.Dim(3, name="out"), dt.Dim(2, name="out2")][:out_dims]
    y = _operand(x, dims, b_picks, order, extra=outs)
    reduce = [d for d, p, q in zip(dims, r_picks, b_picks) if p and q] or [d for d in y.dims if d in x.dims][:1]
    a, b = (y, x) if swap else (x, y)
    if not reduce:  # no contraction: the product (the definition; the fast path hands it there)
        check_either(dt.matmul, a, b, reduce, use_mask)
        return
    for op in (dt.matmul, dt.dot):
        check_either(op, a, b, reduce[::-1] if order % 2 else reduce, use_mask)
    check_either(dt.matmul, a, b, reduce[0], use_mask=use_mask)


def test_matmul_weight_layouts():
    """No common dims: b a weight matrix (out, in) or (in, out), several reduced and output dims."""
    x, (batch, time, feature, heads) = padded((4, 2, 0))
    out, out2 = dt.Dim(5, name="out"), dt.Dim(2, name="out2")
    for w_dims in [(out, feature), (feature, out), (out, heads, feature), (heads, out2, feature, out), (feature,)]:
        shape = [d.size for d in w_dims]
        w = dt.Tensor(torch.randn(shape), w_dims)
        check(dt.matmul, x, w, feature)
        check(dt.matmul, w, x, feature)
        if heads in w_dims:
            check(dt.matmul, x, w, (heads, feature))
            check(dt.matmul, x, w, [feature, heads])


def test_matmul_masks_reduced_padding():
    x, (batch, time, feature, heads) = padded((4, 2, 0), pad=PAD_NAN)
    y = dt.Tensor(torch.randn(x.raw.shape[:2]), (batch, time))
    check(dt.matmul, x, y, time, use_mask=True)
    check(dt.matmul, x, y, (time, batch), use_mask=True)
    no_batch = dt.Tensor(torch.randn(x.raw.shape[1]), (time,))  # cannot hold padding: left as it is
    check(dt.matmul, x, no_batch, time, use_mask=True)
    check(dt.matmul, no_batch, x, time, use_mask=True)


@pytest.mark.parametrize("w_order", ["out_in", "in_out"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("perm", [(0, 1, 2, 3), (2, 0, 3, 1), (3, 2, 1, 0)])
def test_linear(w_order, bias, perm):
    x, (batch, time, feature, heads) = padded((4, 2, 0), perm=perm)
    out = dt.Dim(5, name="out")
    w_dims = (out, feature) if w_order == "out_in" else (feature, out)
    w = dt.Tensor(torch.randn([d.size for d in w_dims]), w_dims)
    b = dt.Tensor(torch.randn(5), (out,)) if bias else None
    result = check(dt.linear, x, w, b)
    assert result.dims[-1] is out and result.feature_dim is out
    check(dt.linear, x, w, bias=b)
    on_heads = dt.Tensor(torch.randn(5, 2), (out, heads))
    result = check(dt.linear, x, on_heads)
    assert result.feature_dim is feature


def test_errors_name_the_call():
    x, (batch, time, feature, heads) = padded((3, 2))
    out = dt.Dim(5, name="out")
    w = dt.Tensor(torch.randn(5, 3), (out, feature))
    other = dt.Dim(None, name="n")
    y = dt.Tensor(torch.randn(3, 3), (other, feature))
    z = dt.Tensor(torch.randn(7, 3), (batch, feature))  # batch: 7 here, 2 in x
    for op in (dt.matmul, dt.dot):
        for args, kwargs in [((x.raw, w, feature), {}), ((x, 1, feature), {}), ((x, w, "feature"), {}),
                             ((x, w, out), {}), ((x, w, (feature, feature)), {}),
                             ((x, w, feature), {"use_mask": x}), ((x, z, feature), {}), ((x, w), {}),
                             ((x, dt.cast(w, "int64"), feature), {}), ((w, x, time), {})]:
            check_error(op, *args, **kwargs)
    check_either(dt.matmul, x, y, feature)
    for args in [(x.raw, w), (x, w.raw), (x, w, w), (x, dt.Tensor(torch.randn(5), (out,))),
                 (x, dt.Tensor(torch.randn(3, 2), (feature, heads))), (x, dt.Tensor(torch.randn(5, 4), (out, other))),
                 (x, w, dt.Tensor(torch.randn(3), (feature,))), (dt.cast(x, "int64"), w),
                 (dt.Tensor(torch.randn(2, 4), (batch, other)), dt.Tensor(torch.randn(5, 3), (out, other)))]:
        check_error(dt.linear, *args)
