"""The C++ fast paths of slice, shift_right, split, stack, top_k, search_sorted, reverse_sequence, pack_padded,
scatter, scatter_count (and of gather, pad, reshape, masked_select for their new argument forms) against their Python definitions (the full ops, tested against positional torch in their own
test files): the same dims, markers, values and gradients on padded batches, the cases they must
hand to the Python definition (which owns the errors), and their index caches keyed by layout."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, strategies as st

import dimtorch as dt
from dimtorch.ops import (
    packing as _packing, reshape as _reshape, scatter as _scatter, slicing as _slicing, sort as _sort, stack as _stack,
)

from fast_path_checks import assert_same, both, definition_calls, same_dim  # noqa: F401
from helpers import PAD_LARGE, PAD_NAN, make_padded_batch


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("start", [0, 1, 2, 7])
def test_slice_dynamic(pad, start):
    b = make_padded_batch((5, 3, 1, 0), pad_value=pad, extra_time=1)
    x = dt.Tensor(b.x.raw, b.x.dims, feature_dim=b.feature)
    out, out_dim = both(dt.slice, _slicing.slice, x, axis=b.time, start=start)
    assert out_dim.lengths.raw.tolist() == [max(0, n - start) for n in b.lengths]
    assert out.feature_dim is b.feature


@pytest.mark.parametrize("start,end", [(0, None), (1, None), (-3, None), (1, 3), (0, -1), (-2, -1), (4, 4),
                                       (3, 1)])
def test_slice_static(start, end):
    b = make_padded_batch((5, 3), feature=4)
    x = dt.Tensor(b.x.raw, b.x.dims, feature_dim=b.feature)
    out, out_dim = both(dt.slice, _slicing.slice, x, axis=b.feature, start=start, end=end)
    assert out.feature_dim is None and out_dim.size == len(range(4)[start:end])


def test_slice_cases_for_the_python_definition():
    b = make_padded_batch((5, 3))
    both(dt.slice, _slicing.slice, b.x, axis=b.time, start=1, end=-1)
    both(dt.slice, _slicing.slice, b.x, axis=b.feature, start=0, end=4, step=2)
    with pytest.raises(ValueError, match=r"dimtorch.slice\(\): slice 5:None is out of range"):
        dt.slice(b.x, axis=b.feature, start=5)
    with pytest.raises(ValueError, match=r"dimtorch.slice\(\): start=-1 on the dynamic dim"):
        dt.slice(b.x, axis=b.time, start=-1)
    with pytest.raises(TypeError, match=r"dimtorch.slice\(\): start, end and step must be ints"):
        dt.slice(b.x, axis=b.time, start=1.0)
    other = dt.Dim(3, name="other")
    with pytest.raises(ValueError, match=r"dimtorch.slice\(\)"):
        dt.slice(b.x, axis=other, start=1)


def test_slice_backward():
    b = make_padded_batch((5, 3, 1), pad_value=0.0)
    raw = b.x.raw.clone().requires_grad_(True)
    x = dt.Tensor(raw, b.x.dims)
    out, _ = dt.slice(x, axis=b.time, start=1)
    (out.raw * torch.arange(out.raw.numel()).view(out.raw.shape)).sum().backward()
    expected = torch.zeros_like(raw)
    expected[:, 1:] = torch.arange(out.raw.numel(), dtype=raw.dtype).view(out.raw.shape)
    torch.testing.assert_close(raw.grad, expected)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("amount,value", [(1, 0.0), (2, -1), (9, 3.5)])
def test_shift_right(pad, amount, value):
    b = make_padded_batch((5, 3, 0), pad_value=pad)
    x = dt.Tensor(b.x.raw, b.x.dims, feature_dim=b.feature)
    for axis in (b.time, b.feature, b.batch):
        both(dt.shift_right, _slicing.shift_right, x, axis=axis, amount=amount, pad_value=value)
    out = dt.shift_right(x, axis=b.time, amount=amount, pad_value=value)
    k = min(amount, x.raw.shape[1])
    torch.testing.assert_close(out.raw[:, k:], x.raw[:, :x.raw.shape[1] - k], equal_nan=True)
    assert bool((out.raw[:, :k] == value).all())


def test_shift_right_cases_for_the_python_definition():
    b = make_padded_batch((5, 3))
    assert dt.shift_right(b.x, axis=b.time, amount=0) is b.x
    with pytest.raises(ValueError, match=r"dimtorch.shift_right\(\): amount must be an int >= 0"):
        dt.shift_right(b.x, axis=b.time, amount=True)
    with pytest.raises(ValueError, match=r"dimtorch.shift_right\(\)"):
        dt.shift_right(b.x, axis=dt.Dim(2, name="other"))


def test_shift_right_backward():
    b = make_padded_batch((4, 2), pad_value=0.0)
    raw = b.x.raw.clone().requires_grad_(True)
    out = dt.shift_right(dt.Tensor(raw, b.x.dims), axis=b.time)
    out.raw.sum().backward()
    expected = torch.ones_like(raw)
    expected[:, -1] = 0
    torch.testing.assert_close(raw.grad, expected)


@pytest.mark.parametrize("as_list", [False, True])
def test_split_static(as_list):
    b = make_padded_batch((4, 2), feature=6)
    x = dt.Tensor(b.x.raw, b.x.dims, feature_dim=b.feature)
    parts = [dt.Dim(2, name="a"), dt.Dim(4, name="b")]
    out = both(dt.split, _stack.split, x, axis=b.feature, out_dims=parts if as_list else tuple(parts))
    assert [p.dims[2] for p in out] == parts and all(p.feature_dim is None for p in out)
    one = dt.Dim(6, name="all")
    both(dt.split, _stack.split, x, axis=b.feature, out_dims=one)


def test_split_cases_for_the_python_definition():
    b = make_padded_batch((4, 2), feature=6)
    both(dt.split, _stack.split, b.x, axis=b.time, out_dims=(dt.Dim(1, name="first"), b.time - 1))
    with pytest.raises(ValueError, match=r"dimtorch.split\(\): the sizes of out_dims .* add up to 5, not to the size 6"):
        dt.split(b.x, axis=b.feature, out_dims=(dt.Dim(2, name="a"), dt.Dim(3, name="b")))
    a, f = dt.Dim(2, name="a"), dt.Dim(2, name="f")
    with pytest.raises(ValueError, match=r"dimtorch.split\(\): out dim 'a'\(2\) is already a dim of x"):
        dt.split(dt.Tensor(torch.zeros(2, 2), (a, f)), axis=f, out_dims=(a,))


@pytest.mark.parametrize("as_list", [False, True])
def test_stack(as_list):
    b = make_padded_batch((4, 2))
    vocab = dt.Dim(5, name="vocab")
    x = dt.Tensor(b.x.raw, b.x.dims, feature_dim=b.feature, sparse_dim=vocab)
    y = dt.Tensor(b.x.raw * 2, b.x.dims, sparse_dim=vocab)
    z = dt.Tensor(b.x.raw * 3, b.x.dims)
    tensors = [x, y] if as_list else (x, y)
    out, _ = both(dt.stack, _stack.stack, tensors)
    assert out.sparse_dim is vocab and out.feature_dim is b.feature
    out, _ = both(dt.stack, _stack.stack, (x, y, z))
    assert out.sparse_dim is None
    given = dt.Dim(2, name="pair")
    out, out_dim = dt.stack((x, z), out_dim=given)
    assert out_dim is given and out.dims == (given,) + b.x.dims


def test_stack_cases_for_the_python_definition():
    b = make_padded_batch((4, 2))
    xt = b.x.copy_transpose((b.feature, b.time, b.batch))
    both(dt.stack, _stack.stack, (b.x, xt))
    with pytest.raises(TypeError, match=r"dimtorch.stack\(\): tensors\[1\] has dtype float64"):
        dt.stack((b.x, dt.Tensor(b.x.raw.double(), b.x.dims)))
    with pytest.raises(ValueError, match=r"dimtorch.stack\(\): out_dim .* does not fit 2 tensors"):
        dt.stack((b.x, b.x), out_dim=dt.Dim(3, name="three"))
    with pytest.raises(ValueError, match=r"dimtorch.stack\(\): no tensors"):
        dt.stack(())


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_top_k(dtype):
    b = make_padded_batch((4, 2), feature=6, pad_value=0.0)
    x = dt.Tensor((b.x.raw * 10).to(dtype), b.x.dims, feature_dim=b.feature)
    values, indices, k_dim = both(dt.top_k, _sort.top_k, x, axis=b.feature, k=3)
    assert indices.sparse_dim is b.feature and values.feature_dim is None and k_dim.name == "top3"
    both(dt.top_k, _sort.top_k, x, axis=b.feature, k=6)


def test_top_k_cases_for_the_python_definition():
    b = make_padded_batch((4, 2), feature=6)
    both(dt.top_k, _sort.top_k, b.x, axis=b.time, k=2)  # dynamic: masked, k_dim with lengths
    both(dt.top_k, _sort.top_k, b.x, axis=(b.time, b.feature), k=2)
    with pytest.raises(ValueError, match=r"dimtorch.top_k\(\): k=7 is larger than the 6 entries"):
        dt.top_k(b.x, axis=b.feature, k=7)
    with pytest.raises(ValueError, match=r"dimtorch.top_k\(\): k must be an int >= 1"):
        dt.top_k(b.x, axis=b.feature, k=0)
    with pytest.raises(TypeError, match=r"dimtorch.top_k\(\)"):
        dt.top_k(dt.Tensor(b.x.raw > 0, b.x.dims), axis=b.feature, k=1)


def test_top_k_backward():
    b = make_padded_batch((4, 2), feature=6, pad_value=0.0)
    raw = b.x.raw.clone().requires_grad_(True)
    values, _, _ = dt.top_k(dt.Tensor(raw, b.x.dims), axis=b.feature, k=2)
    values.raw.sum().backward()
    expected = torch.zeros_like(raw).scatter(2, raw.detach().topk(2, 2).indices, 1.0)
    torch.testing.assert_close(raw.grad, expected)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_top_k_mask(pad):
    """top_k_mask's fast path (topk + scatter_; a dynamic axis masked by its cached mask) against the definition:
    static and dynamic axes in every layout, k past a sequence's length and past the axis, float64, gradient-free
    bool results; the calls it takes never run the definition; an int x over a dynamic axis and bad k go to it."""
    b = make_padded_batch((5, 3, 1, 0), feature=6, pad_value=pad, extra_time=1)
    x = dt.Tensor(b.x.raw, b.x.dims, feature_dim=b.feature)
    for order in ((0, 1, 2), (2, 0, 1), (1, 2, 0)):
        xt = x.copy_transpose(tuple(x.dims[i] for i in order))
        for axis, k in ((b.feature, 3), (b.feature, 6), (b.feature, 9), (b.time, 2), (b.time, 4), (b.time, 20)):
            out = both(dt.top_k_mask, _sort.top_k_mask, xt, axis=axis, k=k)
            assert out.dims == xt.dims and out.raw.dtype == torch.bool and out.feature_dim is None
            assert definition_calls(lambda: dt.top_k_mask(xt, axis=axis, k=k), _sort.top_k_mask) == 0
    out = dt.top_k_mask(x, axis=b.time, k=2)
    for i, n in enumerate(b.lengths):  # each sequence alone
        alone = torch.zeros(n, 6, dtype=torch.bool).scatter_(0, b.x.raw[i, :n].topk(min(2, n), 0).indices, True)
        assert torch.equal(out.raw[i, :n], alone) and not out.raw[i, n:].any()
    both(dt.top_k_mask, _sort.top_k_mask, dt.Tensor(b.x.raw.double(), b.x.dims), axis=b.time, k=2)
    ints = dt.Tensor(torch.randint(-9, 9, b.x.raw.shape, generator=torch.Generator().manual_seed(6)), b.x.dims)
    both(dt.top_k_mask, _sort.top_k_mask, ints, axis=b.feature, k=2)
    both(dt.top_k_mask, _sort.top_k_mask, ints, axis=b.time, k=2)
    assert definition_calls(lambda: dt.top_k_mask(ints, axis=b.time, k=2), _sort.top_k_mask) == 1
    for k in (0, True, 1.0):
        with pytest.raises(ValueError, match=r"^dimtorch\.top_k_mask\(\): k must be an int >= 1"):
            dt.top_k_mask(x, axis=b.feature, k=k)
    with pytest.raises(TypeError, match=r"^dimtorch\.top_k_mask\(\): .*unexpected keyword argument 'dim'"):
        dt.top_k_mask(x, dim=b.feature, k=2)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_replace_dim_v2(pad):
    """replace_dim_v2's fast path (narrow or constant_pad_nd, one where with in_dim's cached mask) against the
    definition: a dynamic in_dim replaced by a longer dynamic or static dim (masked: no padding value reaches
    out_dim's frames), a static one cut or padded, every layout, bool and int dtypes, markers moved, gradients;
    the calls it takes never run the definition; a shorter out_dim (the definition reads lengths) and the flags
    go to it."""
    b = make_padded_batch((5, 3, 1, 0), feature=6, pad_value=pad, extra_time=1)
    vocab = dt.Dim(9, name="vocab")
    x = dt.Tensor(b.x.raw, b.x.dims, feature_dim=b.feature)
    ints = dt.Tensor(torch.randint(9, b.x.raw.shape, generator=torch.Generator().manual_seed(7)), b.x.dims,
                     sparse_dim=vocab)
    fast = [(b.time, b.time + 2), (b.time, dt.Dim(6, name="six")), (b.time, dt.Dim(9, name="nine")),
            (b.feature, dt.Dim(8, name="f8")), (b.feature, dt.Dim(2, name="f2")), (b.feature, dt.Dim(6, name="f6"))]
    for order in ((0, 1, 2), (2, 0, 1), (1, 2, 0)):
        for src in (x, ints, dt.Tensor(b.x.raw > 0, b.x.dims)):
            xt = src.copy_transpose(tuple(src.dims[i] for i in order))
            for in_dim, out_dim in fast:
                y = both(dt.replace_dim_v2, _reshape.replace_dim_v2, xt, in_dim=in_dim, out_dim=out_dim)
                assert y.dims[xt.dims.index(in_dim)] is out_dim
                assert definition_calls(lambda: dt.replace_dim_v2(xt, in_dim=in_dim, out_dim=out_dim),
                                        _reshape.replace_dim_v2) == 0
    y = dt.replace_dim_v2(x, in_dim=b.time, out_dim=b.time + 2)
    for i, n in enumerate(b.lengths):  # each sequence alone: its frames, then zeros
        assert torch.equal(y.raw[i, :n], b.x.raw[i, :n]) and not y.raw[i, n:].any()
    assert y.feature_dim is b.feature
    assert dt.replace_dim_v2(x, in_dim=b.feature, out_dim=vocab).feature_dim is vocab
    for kwargs in ({"out_dim": b.time - 1}, {"out_dim": dt.Dim(3, name="three")},
                   {"out_dim": b.time + 2, "allow_expand": True, "allow_shrink": False}):
        call = lambda: dt.replace_dim_v2(x, in_dim=b.time, **kwargs)  # noqa: E731
        both(lambda: call(), lambda: _reshape.replace_dim_v2(x, in_dim=b.time, **kwargs))
        assert definition_calls(call, _reshape.replace_dim_v2) == 1
    with pytest.raises(ValueError, match=r"^dimtorch\.replace_dim_v2\(\): out_dim .* is already a dim of source"):
        dt.replace_dim_v2(x, in_dim=b.time, out_dim=b.feature)
    grads = []
    for fn in (dt.replace_dim_v2, _reshape.replace_dim_v2):
        raw = b.x.raw.clone().requires_grad_(True)
        fn(dt.Tensor(raw, b.x.dims), in_dim=b.time, out_dim=b.time + 2).raw.sum().backward()
        grads.append(raw.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_reverse_sequence(pad):
    b = make_padded_batch((5, 3, 1, 0), pad_value=pad, extra_time=1)
    both(dt.reverse_sequence, _slicing.reverse_sequence, b.x, axis=b.time)
    both(dt.reverse_sequence, _slicing.reverse_sequence, b.x, axis=b.feature)  # static: flip
    # Other layouts of the same dim get their own cached index.
    for order in [(b.time, b.batch, b.feature), (b.feature, b.time, b.batch)]:
        xt = b.x.copy_transpose(order)
        out = both(dt.reverse_sequence, _slicing.reverse_sequence, xt, axis=b.time)
        assert_same(out.copy_transpose(b.x.dims), dt.reverse_sequence(b.x, axis=b.time))
    # Another size of the other dims (a cache hit on the first layout would give the wrong shape).
    wide = dt.Tensor(torch.randn(4, b.x.raw.shape[1], 7), (b.batch, b.time, dt.Dim(7, name="wide")))
    both(dt.reverse_sequence, _slicing.reverse_sequence, wide, axis=b.time)


def test_reverse_sequence_per_sequence_and_backward():
    b = make_padded_batch((5, 3, 1), pad_value=0.0)
    raw = b.x.raw.clone().requires_grad_(True)
    out = dt.reverse_sequence(dt.Tensor(raw, b.x.dims), axis=b.time)
    for i, n in enumerate(b.lengths):
        torch.testing.assert_close(out.raw[i, :n], raw[i, :n].flip(0))
    weights = torch.randn(out.raw.shape)
    (out.raw * weights).sum().backward()
    for i, n in enumerate(b.lengths):
        torch.testing.assert_close(raw.grad[i, :n], weights[i, :n].flip(0))


def test_reverse_sequence_lengths_over_a_missing_dim():
    b = make_padded_batch((5, 3))
    no_batch = dt.Tensor(b.x.raw[0], (b.time, b.feature))
    with pytest.raises(ValueError, match=r"dimtorch.reverse_sequence\(\): the lengths of .*time.* vary over"):
        dt.reverse_sequence(no_batch, axis=b.time)


@pytest.mark.parametrize("static_batch", [False, True])
@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_pack_padded(static_batch, pad):
    b = make_padded_batch((5, 3, 1, 0), pad_value=pad)
    batch = dt.Dim(4, name="batch") if static_batch else b.batch
    if static_batch:
        time = dt.Dim(dt.Tensor(torch.tensor(b.lengths), (batch,)), name="time")
        x = dt.Tensor(b.x.raw, (batch, time, b.feature), feature_dim=b.feature)
    else:
        time, x = b.time, dt.Tensor(b.x.raw, b.x.dims, feature_dim=b.feature)
    out, pack_dim = both(dt.pack_padded, _packing.pack_padded, x, dims=(batch, time))
    assert pack_dim.size == sum(b.lengths) and out.feature_dim is b.feature
    expected = torch.cat([b.x.raw[i, :n] for i, n in enumerate(b.lengths)])
    torch.testing.assert_close(out.raw, expected)
    again, _ = dt.pack_padded(x, dims=(batch, time), out_dim=pack_dim)  # cached index, given out dim
    torch.testing.assert_close(again.raw, expected)
    assert again.dims[0] is pack_dim
    # dims as a list (RETURNN's calls pass one): the same fast path
    as_list, _ = both(dt.pack_padded, _packing.pack_padded, x, dims=[batch, time], out_dim=pack_dim)
    assert definition_calls(lambda: dt.pack_padded(x, dims=[batch, time]), _packing.pack_padded) == 0


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_pack_padded_of_dims_leading_in_another_order(pad):
    """dims leading x in another order (a scan's stacked output is (time, batch, ...)): the fast path packs them
    by their places in x's order, one index_select of x's leading axes (no copy of x); the definition's result
    and gradient; with a third dim, each order of it its own cached index."""
    b = make_padded_batch((5, 3, 1, 0), pad_value=pad)
    xt = b.x.copy_transpose((b.time, b.batch, b.feature))
    expected = torch.cat([b.x.raw[i, :n] for i, n in enumerate(b.lengths)])
    out, pack = both(dt.pack_padded, _packing.pack_padded, xt, dims=[b.batch, b.time])
    torch.testing.assert_close(out.raw, expected)
    assert definition_calls(lambda: dt.pack_padded(xt, dims=(b.batch, b.time)), _packing.pack_padded) == 0
    raw = xt.raw.clone().requires_grad_(True)
    dt.pack_padded(dt.Tensor(raw, xt.dims), dims=(b.batch, b.time))[0].raw.sum().backward()
    torch.testing.assert_close(raw.grad, b.mask.t()[:, :, None].expand_as(raw).to(raw.dtype))
    heads = dt.Dim(2, name="heads")
    x3 = dt.Tensor(torch.randn(2, 4, 5, b.feature.size), (heads, b.batch, b.time, b.feature))
    for order in ((heads, b.time, b.batch), (b.time, heads, b.batch), (b.batch, heads, b.time)):
        xo = x3.copy_transpose(order + (b.feature,))
        both(dt.pack_padded, _packing.pack_padded, xo, dims=(b.batch, heads, b.time))


def test_pack_padded_cache_follows_sizes():
    # The same time dim with a second static dim of another size: its own index.
    b = make_padded_batch((3, 2))
    heads2 = dt.Dim(2, name="heads")
    heads3 = dt.Dim(3, name="heads")
    for heads in (heads2, heads3, heads2):
        x = dt.Tensor(torch.randn(2, heads.size, 3), (b.batch, heads, b.time))
        both(dt.pack_padded, _packing.pack_padded, x, dims=(b.batch, heads, b.time))


def test_pack_padded_cases_for_the_python_definition():
    b = make_padded_batch((5, 3, 1), extra_time=2)  # frames beyond the max length: Python narrows
    both(dt.pack_padded, _packing.pack_padded, b.x, dims=(b.batch, b.time))
    xt = b.x.copy_transpose((b.time, b.batch, b.feature))
    both(dt.pack_padded, _packing.pack_padded, xt, dims=(b.batch, b.time))
    with pytest.raises(ValueError, match=r"dimtorch.pack_padded\(\): out_dim .* does not fit the 9 valid frames"):
        dt.pack_padded(b.x, dims=(b.batch, b.time), out_dim=dt.Dim(8, name="pack"))
    # time's lengths vary over batch, which is not packed: each sequence packs on its own (Python)
    out, pack = both(dt.pack_padded, _packing.pack_padded, b.x, dims=(b.time,))
    assert out.dims == (b.batch, pack, b.feature) and pack.lengths.raw.tolist() == [5, 3, 1]


def test_pack_padded_backward():
    b = make_padded_batch((4, 2), pad_value=0.0)
    raw = b.x.raw.clone().requires_grad_(True)
    out, _ = dt.pack_padded(dt.Tensor(raw, b.x.dims), dims=(b.batch, b.time))
    out.raw.sum().backward()
    torch.testing.assert_close(raw.grad, b.mask[:, :, None].expand_as(raw).to(raw.dtype))


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_scatter(pad):
    b = make_padded_batch((5, 3, 1, 0), pad_value=pad, extra_time=1)
    vocab = dt.Dim(6, name="vocab")
    g = torch.Generator().manual_seed(1)
    labels = torch.randint(6, (4, b.x.raw.shape[1]), generator=g)
    labels[:, -1] = 10**6  # garbage in the padding: never used
    x = dt.Tensor(b.x.raw, b.x.dims, feature_dim=b.feature)
    indices = dt.Tensor(labels, (b.batch, b.time), sparse_dim=vocab)
    out = both(dt.scatter, _scatter.scatter, x, indices=indices, indices_dim=b.time)
    assert out.dims == (b.batch, vocab, b.feature) and out.feature_dim is b.feature
    for i, n in enumerate(b.lengths):
        expected = torch.zeros(6, 4).index_add_(0, labels[i, :n], b.x.raw[i, :n])
        torch.testing.assert_close(out.raw[i], expected)
    # Static indices dim, and indices over fewer dims than x (broadcast over batch and time).
    both(dt.scatter, _scatter.scatter, x, indices=dt.Tensor(torch.tensor([5, 0, 5, 1]), (b.feature,),
                                                                  sparse_dim=vocab), indices_dim=b.feature)
    # Given out_dim, int32 indices (the Python definition converts them).
    plain = dt.Tensor(labels.clamp(max=5), (b.batch, b.time))
    both(dt.scatter, _scatter.scatter, x, indices=plain, indices_dim=b.time, out_dim=vocab)
    both(dt.scatter, _scatter.scatter, x, indices=dt.Tensor(labels.clamp(max=5).int(), (b.batch, b.time),
                                                            sparse_dim=vocab), indices_dim=b.time)


def test_scatter_count():
    """scatter_count's fast path (scatter's common call on cached int32 ones) against its definition: padding
    frames (garbage labels there) never counted, time not last, out_dim given, the ones cache reused and
    kept apart per shape, and the calls it hands over (fill_value, int32 indices, a second dynamic dim)."""
    b = make_padded_batch((5, 3, 1, 0), extra_time=1)
    vocab = dt.Dim(6, name="vocab")
    labels = torch.randint(6, (4, b.x.raw.shape[1]), generator=torch.Generator().manual_seed(2))
    labels[:, -1] = 10**6  # garbage in the padding: never counted
    indices = dt.Tensor(labels, (b.batch, b.time), sparse_dim=vocab)
    out = both(dt.scatter_count, _scatter.scatter_count, indices=indices, indices_dim=b.time)
    assert out.dims == (b.batch, vocab) and out.raw.dtype == torch.int32 and out.sparse_dim is None
    for i, n in enumerate(b.lengths):
        assert out.raw[i].tolist() == torch.bincount(labels[i, :n], minlength=6).tolist()
    assert_same(dt.scatter_count(indices=indices, indices_dim=b.time), out)  # from the cache
    transposed = dt.Tensor(labels.t().contiguous(), (b.time, b.batch), sparse_dim=vocab)
    both(dt.scatter_count, _scatter.scatter_count, indices=transposed, indices_dim=b.time)
    plain = dt.Tensor(labels.clamp(max=5), (b.batch, b.time))
    both(dt.scatter_count, _scatter.scatter_count, indices=plain, indices_dim=b.time, out_dim=vocab)
    both(dt.scatter_count, _scatter.scatter_count, indices=indices, indices_dim=b.time, fill_value=0)
    both(dt.scatter_count, _scatter.scatter_count, indices=indices, indices_dim=b.time, fill_value=-1)
    both(dt.scatter_count, _scatter.scatter_count, indices=dt.Tensor(labels.int(), indices.dims, sparse_dim=vocab),
         indices_dim=b.time)
    static = dt.Tensor(torch.tensor([5, 0, 5, 1]), (b.feature,), sparse_dim=vocab)
    assert both(dt.scatter_count, _scatter.scatter_count, indices=static, indices_dim=b.feature).raw.tolist() == \
        [1, 1, 0, 0, 0, 2]
    beam = dt.Dim(dt.Tensor(torch.tensor([2, 1, 1, 2]), (b.batch,)), name="beam")
    over_beam = dt.Tensor(torch.zeros(4, 2, labels.shape[1], dtype=torch.int64), (b.batch, beam, b.time),
                          sparse_dim=vocab)
    both(dt.scatter_count, _scatter.scatter_count, indices=over_beam, indices_dim=b.time)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_scatter_modes_are_the_python_definition(pad):
    """mode, fill_value and use_mask: whichever path takes a call (the fast path: sum, max, min, mean), the
    results are the definition's."""
    b = make_padded_batch((5, 3, 1, 0), pad_value=pad, extra_time=1)
    vocab = dt.Dim(6, name="vocab")
    labels = torch.randint(6, (4, b.x.raw.shape[1]), generator=torch.Generator().manual_seed(3))
    indices = dt.Tensor(labels, (b.batch, b.time), sparse_dim=vocab)
    plain = both(dt.scatter, _scatter.scatter, b.x, indices=indices, indices_dim=b.time)
    assert_same(both(dt.scatter, _scatter.scatter, b.x, indices=indices, indices_dim=b.time, mode="sum"), plain)
    assert_same(both(dt.scatter, _scatter.scatter, b.x, indices=indices, indices_dim=b.time, use_mask=True), plain)
    for mode in ("max", "min", "mean", "logsumexp", "logmeanexp", "argmax"):
        both(dt.scatter, _scatter.scatter, b.x, indices=indices, indices_dim=b.time, mode=mode)
        both(dt.scatter, _scatter.scatter, b.x, indices=indices, indices_dim=b.time, mode=mode, fill_value=-3)
    both(dt.scatter, _scatter.scatter, b.x, indices=indices, indices_dim=b.time, fill_value=1.5)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("mode", ["max", "min", "mean", "logsumexp", "logmeanexp", "argmax"])
def test_scatter_reduce_fast_path(pad, mode):
    """scatter's fast path of max, min and mean (one scatter_reduce_), and of logsumexp, logmeanexp and argmax
    (the definition's steps from the counts and the max per position) against the definition: x in every
    layout, padding NaN or huge and garbage labels there (reaching neither result nor gradient), each sequence
    alone against torch, a static indices dim, a given fill_value and out_dim, float64; the calls it takes never
    run the definition, an int x and use_mask=False go to it."""
    b = make_padded_batch((5, 3, 1, 0), pad_value=pad, extra_time=1)
    vocab = dt.Dim(6, name="vocab")
    labels = torch.randint(6, (4, b.x.raw.shape[1]), generator=torch.Generator().manual_seed(4))
    labels[:, -1] = 10**6  # garbage in the padding: never used
    indices = dt.Tensor(labels, (b.batch, b.time), sparse_dim=vocab)
    x = dt.Tensor(b.x.raw, b.x.dims, feature_dim=b.feature)
    for order in ((0, 1, 2), (2, 0, 1), (1, 2, 0)):
        xt = x.copy_transpose(tuple(x.dims[i] for i in order))
        both(dt.scatter, _scatter.scatter, xt, indices=indices, indices_dim=b.time, mode=mode)
        assert definition_calls(lambda: dt.scatter(xt, indices=indices, indices_dim=b.time, mode=mode),
                                _scatter.scatter) == 0
    out = dt.scatter(x, indices=indices, indices_dim=b.time, mode=mode)
    assert out.dims == (b.batch, vocab, b.feature)
    if mode == "argmax":
        assert out.sparse_dim is b.time and out.feature_dim is None
    else:
        assert out.feature_dim is b.feature
    for i, n in enumerate(b.lengths):  # each sequence alone
        torch.testing.assert_close(out.raw[i], _scatter_alone(b.x.raw[i, :n], labels[i, :n], 6, mode))
    both(dt.scatter, _scatter.scatter, x, indices=indices, indices_dim=b.time, mode=mode, fill_value=-3)
    both(dt.scatter, _scatter.scatter, x, indices=indices, indices_dim=b.time, mode=mode, fill_value=2.5,
         out_dim=vocab, use_mask=True)
    static = dt.Tensor(torch.tensor([5, 0, 5, 1]), (b.feature,), sparse_dim=vocab)
    both(dt.scatter, _scatter.scatter, x, indices=static, indices_dim=b.feature, mode=mode)
    both(dt.scatter, _scatter.scatter, dt.Tensor(b.x.raw.double(), b.x.dims), indices=indices, indices_dim=b.time,
         mode=mode)
    ints = dt.Tensor(torch.randint(-9, 9, b.x.raw.shape, generator=torch.Generator().manual_seed(5)), b.x.dims)
    clean = dt.Tensor(labels.clamp(max=5), indices.dims, sparse_dim=vocab)
    for xi, ii, use_mask in ((ints, indices, None), (x, clean, False)):
        if xi is ints and mode in ("logsumexp", "logmeanexp"):  # (the definition refuses it, in its own words)
            errors = []
            for fn in (dt.scatter, _scatter.scatter):
                with pytest.raises(RuntimeError) as info:
                    fn(xi, indices=ii, indices_dim=b.time, mode=mode)
                errors.append(str(info.value))
            assert errors[0] == "dimtorch.scatter(): " + errors[1]  # (the definition named by the C function)
            continue
        else:
            both(dt.scatter, _scatter.scatter, xi, indices=ii, indices_dim=b.time, mode=mode, use_mask=use_mask)
        assert definition_calls(lambda: dt.scatter(xi, indices=ii, indices_dim=b.time, mode=mode, use_mask=use_mask),
                                _scatter.scatter) == 1
    both(dt.scatter, _scatter.scatter, x, indices=indices, indices_dim=b.time, mode="".join(mode))  # not interned
    grads = []
    weights = torch.randn(4, 6, 4)
    if mode == "argmax":  # (an int64 result: no gradient)
        return
    for fn in (dt.scatter, _scatter.scatter):
        raw = b.x.raw.clone().requires_grad_(True)
        y = fn(dt.Tensor(raw, b.x.dims), indices=indices, indices_dim=b.time, mode=mode).raw
        (torch.where(torch.isfinite(y), y, 0.0) * weights).sum().backward()
        assert torch.isfinite(raw.grad).all()
        grads.append(raw.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)


def _scatter_alone(x: torch.Tensor, labels: torch.Tensor, n_out: int, mode: str) -> torch.Tensor:
    """scatter of one sequence's frames x (n, F) at labels (n,) into n_out rows, entry by entry (the reference)."""
    rows = []
    for v in range(n_out):
        frames = x[labels == v]
        if mode == "argmax":
            at = (labels == v).nonzero()[:, 0]  # the frames' positions along time
            rows.append(at[frames.argmax(0)] if len(frames) else torch.full((x.shape[1],), -1))
        elif not len(frames):
            rows.append(torch.full((x.shape[1],), {"max": -float("inf"), "min": float("inf"), "mean": 0.0}.get(
                mode, -float("inf"))))
        else:
            rows.append({"max": lambda f: f.amax(0), "min": lambda f: f.amin(0), "mean": lambda f: f.mean(0),
                         "logsumexp": lambda f: f.logsumexp(0),
                         "logmeanexp": lambda f: f.logsumexp(0) - math.log(len(f))}[mode](frames))
    return torch.stack(rows)


def test_scatter_cases_for_the_python_definition():
    b = make_padded_batch((5, 3))
    vocab = dt.Dim(6, name="vocab")
    labels = torch.zeros(2, 5, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"dimtorch.scatter\(\): indices have no sparse_dim and no out_dim"):
        dt.scatter(b.x, indices=dt.Tensor(labels, (b.batch, b.time)), indices_dim=b.time)
    with pytest.raises(ValueError, match=r"dimtorch.scatter\(\): the sparse_dim of indices is"):
        dt.scatter(b.x, indices=dt.Tensor(labels, (b.batch, b.time), sparse_dim=vocab), indices_dim=b.time,
                   out_dim=dt.Dim(6, name="other"))
    with pytest.raises(TypeError, match=r"dimtorch.scatter\(\): indices must be of an integer dtype"):
        dt.scatter(b.x, indices=dt.Tensor(labels.float(), (b.batch, b.time), sparse_dim=vocab), indices_dim=b.time)
    with pytest.raises(ValueError, match=r"dimtorch.scatter\(\): out_dim .*feature.* is already a dim of x"):
        dt.scatter(b.x, indices=dt.Tensor(labels, (b.batch, b.time), sparse_dim=b.feature), indices_dim=b.time)


def test_scatter_backward():
    b = make_padded_batch((4, 2), pad_value=0.0)
    vocab = dt.Dim(3, name="vocab")
    labels = torch.tensor([[0, 2, 2, 1], [1, 1, 0, 0]])
    raw = b.x.raw.clone().requires_grad_(True)
    out = dt.scatter(dt.Tensor(raw, b.x.dims), indices=dt.Tensor(labels, (b.batch, b.time), sparse_dim=vocab),
                     indices_dim=b.time)
    weights = torch.randn(out.raw.shape)
    (out.raw * weights).sum().backward()
    expected = torch.gather(weights, 1, labels[:, :, None].expand(2, 4, 4)) * b.mask[:, :, None]
    torch.testing.assert_close(raw.grad, expected)


def test_odd_arguments_raise_python_errors_not_crashes():
    # Every fast path parses its arguments itself: odd values anywhere must end as a result or a
    # Python exception that names the call (from the fast path or the Python definition; Python's
    # own for a missing argument), never a crash or a leak.
    b = make_padded_batch((3, 2, 0), feature=4)
    vocab = dt.Dim(5, name="vocab")
    labels = dt.Tensor(torch.zeros(3, 3, dtype=torch.int64), (b.batch, b.time), sparse_dim=vocab)
    odd = [None, 0, -1, 1, 2**70, True, 1.5, "time", (), [], (b.time,), [b.batch, b.time], (b.time, b.time),
           (b.batch, 3), b.batch, b.time, b.feature, vocab, b.x, labels, b.x.raw, dt.Tensor(torch.zeros(()), ()),
           [b.x, b.x], (b.x, labels), (b.x, None), [b.x] * 30]
    calls = [
        (dt.slice, ("axis", "start", "end", "step", "size", "out_dim")),
        (dt.shift_right, ("axis", "amount", "pad_value")),
        (dt.split, ("axis", "out_dims")),
        (dt.stack, ("out_dim",)),
        (dt.top_k, ("axis", "k")),
        (dt.top_k_mask, ("axis", "k")),
        (dt.reduce_out, ("mode", "num_pieces", "out_dim")),
        (dt.replace_dim_v2, ("in_dim", "out_dim", "allow_expand", "allow_shrink")),
        (dt.reverse_sequence, ("axis", "handle_dynamic_dims")),
        (dt.gather, ("indices", "axis", "clip_to_valid")),
        (dt.pad, ("axes", "padding", "value", "mode")),
        (dt.reshape, ("in_dims", "out_dims")),
        (dt.masked_select, ("mask", "dims", "out_dim")),
        (dt.masked_scatter, ("backup", "mask", "dims", "in_dim")),
        (dt.pack_padded, ("dims", "out_dim")),
        (dt.scatter, ("indices", "indices_dim", "out_dim", "mode", "fill_value", "use_mask")),
    ]
    g = torch.Generator().manual_seed(0)
    for fn, names in calls:
        for _ in range(300):
            pick = torch.randint(len(odd), (len(names) + 1,), generator=g).tolist()
            kwargs = {n: odd[i] for n, i in zip(names, pick[1:]) if torch.rand((), generator=g) < 0.8}
            try:
                fn(odd[pick[0]], **kwargs)
            except (TypeError, ValueError, RuntimeError, IndexError, OverflowError) as e:
                assert "dimtorch." in str(e) or "required keyword-only argument" in str(e), (fn, kwargs, e)


def test_dims_arguments_of_the_wrong_type_name_the_call():
    b = make_padded_batch((3, 2))
    vocab = dt.Dim(5, name="vocab")
    labels = dt.Tensor(torch.zeros(2, 3, dtype=torch.int64), (b.batch, b.time), sparse_dim=vocab)
    cases = [
        (lambda: dt.merge_dims(b.x, dims=3),
         r"dimtorch.merge_dims\(\): dims must be a Dim or a sequence of Dims, got int"),
        (lambda: dt.pad(b.x, axes=1.5, padding=(1, 1)), r"dimtorch.pad\(\): axes must be .* got float"),
        (lambda: dt.split_dims(b.x, axis=b.feature, dims=(2, 2)),
         r"dimtorch.split_dims\(\): dims\[0\] must be a Dim, got int"),
        (lambda: dt.pack_padded(b.x, dims=("batch", "time")),
         r"dimtorch.pack_padded\(\): dims\[0\] must be a Dim, got str"),
        (lambda: dt.scatter(b.x, indices=labels, indices_dim=None),
         r"dimtorch.scatter\(\): indices_dim .* got NoneType"),
        (lambda: dt.top_k(b.x, axis=2, k=1), r"dimtorch.top_k\(\): axis must be a Dim or a sequence of Dims, got int"),
        (lambda: dt.split(b.x, axis=b.feature, out_dims=4), r"dimtorch.split\(\): out_dims .* got int"),
        (lambda: dt.dropout(b.x, 0.5, axis=[b.batch, 0]), r"dimtorch.dropout\(\): axis\[1\] must be a Dim, got int"),
        (lambda: dt.stack(3), r"dimtorch.stack\(\): tensors must be a sequence of Tensors, got 3"),
        (lambda: dt.shift_right(b.x, axis=b.time, pad_value="0"),
         r"dimtorch.shift_right\(\): pad_value must be a Python number"),
        (lambda: dt.shift_left(b.x, axis=b.time, pad_value=None),
         r"dimtorch.shift_left\(\): pad_value must be a Python number"),
    ]
    for call, message in cases:
        with pytest.raises(TypeError, match=message):
            call()


def test_gather_batched_indices():
    """gather's fast path for batched indices (one torch.gather in x's layout) against the definition, and
    the indices it hands over: two new dims, int32, a batch dim of another size, axis among the indices'
    dims, out of range (torch's error, named, from both)."""
    from dimtorch.ops import gather as _gather
    b = make_padded_batch((4, 2, 0), feature=3, pad_value=PAD_NAN)
    heads, beam, beam2 = dt.Dim(2, name="heads"), dt.Dim(3, name="beam"), dt.Dim(2, name="beam2")
    x = dt.Tensor(torch.randn(3, b.x.raw.shape[1], 2, 3), (b.batch, b.time, heads, b.feature), feature_dim=b.feature)
    back = torch.tensor([[1, 0, 1], [0, 0, 1], [1, 1, 0]])
    out = both(dt.gather, _gather.gather, x, indices=dt.Tensor(back, (b.batch, beam), sparse_dim=heads), axis=heads)
    assert out.dims == (b.batch, b.time, beam, b.feature) and out.feature_dim is b.feature
    torch.testing.assert_close(out.raw, torch.gather(x.raw, 2, back[:, None, :, None].expand(3, x.raw.shape[1], 3, 3)),
                               equal_nan=True)
    raw = x.raw.clone().requires_grad_(True)
    dt.gather(dt.Tensor(raw, x.dims), indices=dt.Tensor(back, (b.batch, beam), sparse_dim=heads), axis=heads).raw.sum(
        ).backward()
    assert raw.grad[0, :, 1].eq(2).all() and raw.grad[0, :, 0].eq(1).all()
    both(dt.gather, _gather.gather, x, indices=dt.Tensor(back[..., None].expand(3, 3, 2).contiguous(),
                                                         (b.batch, beam, beam2), sparse_dim=heads), axis=heads)
    both(dt.gather, _gather.gather, x, indices=dt.Tensor(back.int(), (b.batch, beam), sparse_dim=heads), axis=heads)
    with pytest.raises(ValueError, match=r"dimtorch\.gather\(\)"):
        dt.gather(x, indices=dt.Tensor(back[:2], (b.batch, beam), sparse_dim=heads), axis=heads)
    # indices over the gathered axis index it anew (a beam backtrack, as RETURNN frontend): the fast path
    # hands them to the definition
    both(dt.gather, _gather.gather, x, indices=dt.Tensor(back[:, :2], (b.batch, heads), sparse_dim=heads), axis=heads)
    with pytest.raises(RuntimeError, match=r"dimtorch\.gather\(\): index 6 is out of bounds"):
        dt.gather(x, indices=dt.Tensor(back + 5, (b.batch, beam), sparse_dim=heads), axis=heads)
    with pytest.raises(RuntimeError, match=r"index 6 is out of bounds"):
        _gather.gather(x, indices=dt.Tensor(back + 5, (b.batch, beam), sparse_dim=heads), axis=heads)


def test_gather_batched_indices_definition_traces_without_copying_x():
    """The definition (what torch.compile and make_fx trace) has the fast path's form for batched
    indices: the indices viewed and expanded, one gather, x neither permuted nor copied."""
    from torch.fx.experimental.proxy_tensor import make_fx
    batch, time, heads, feat = dt.Dim(3, name="batch"), dt.Dim(5, name="time"), dt.Dim(2, name="heads"), dt.Dim(4, name="f")
    beam = dt.Dim(3, name="beam")

    def step(xr, back):
        x = dt.Tensor(xr, (batch, time, heads, feat))
        return dt.gather(x, indices=dt.Tensor(back, (batch, beam), sparse_dim=heads), axis=heads).raw

    xr, back = torch.randn(3, 5, 2, 4), torch.randint(0, 2, (3, 3))
    graph = make_fx(step, tracing_mode="symbolic")(xr, back)
    ops = [n.target for n in graph.graph.nodes if n.op == "call_function"]
    assert ops == [torch.ops.aten.view.default, torch.ops.aten.expand.default, torch.ops.aten.gather.default], ops
    torch.testing.assert_close(graph(xr, back), step(xr, back))


def test_gather_int_index():
    from dimtorch.ops import gather as _gather
    b = make_padded_batch((3, 2), feature=4, pad_value=PAD_NAN)
    vocab = dt.Dim(5, name="vocab")
    x = dt.Tensor(b.x.raw, b.x.dims, feature_dim=b.feature, sparse_dim=vocab)
    for axis in (b.batch, b.time, b.feature):
        for i in range(x.raw.shape[x.dims.index(axis)]):
            out = both(dt.gather, _gather.gather, x, indices=i, axis=axis)
            assert axis not in out.dims and out.sparse_dim is vocab
    with pytest.raises(IndexError, match=r"dimtorch.gather\(\): index 4 is out of range for axis 'feature'\(4\)"):
        dt.gather(x, indices=4, axis=b.feature)
    with pytest.raises(IndexError, match=r"dimtorch.gather\(\): index -1 is out of range"):
        dt.gather(x, indices=-1, axis=b.feature)
    with pytest.raises(TypeError, match=r"dimtorch.gather\(\): indices must be a dimtorch.Tensor or an int, got bool"):
        dt.gather(x, indices=True, axis=b.feature)
    raw = b.x.raw.nan_to_num().requires_grad_(True)
    dt.gather(dt.Tensor(raw, b.x.dims), indices=2, axis=b.feature).raw.sum().backward()
    expected = torch.zeros_like(raw)
    expected[:, :, 2] = 1
    torch.testing.assert_close(raw.grad, expected)


@given(perm=st.permutations([0, 1, 2, 3]), lengths=st.lists(st.integers(0, 5), min_size=1, max_size=3),
       extra=st.integers(0, 2), start=st.integers(0, 3), k=st.integers(1, 3), pad=st.sampled_from([PAD_NAN, PAD_LARGE]))
def test_fast_paths_match_python_in_any_layout(perm, lengths, extra, start, k, pad):
    """x over (batch, time, feature, heads) in any order, new dims every example (ids of dead dims
    get reused): every fast path gives what its Python definition gives."""
    from dimtorch.ops import gather as _gather
    b = make_padded_batch(tuple(lengths), feature=3, pad_value=pad, extra_time=extra)
    heads = dt.Dim(2, name="heads")
    raw4 = torch.stack([b.x.raw, -b.x.raw], dim=-1)
    dims = (b.batch, b.time, b.feature, heads)
    x = dt.Tensor(raw4, dims).copy_transpose(tuple(dims[i] for i in perm))
    y = dt.Tensor(raw4 * 2, dims).copy_transpose(tuple(dims[i] for i in perm))
    both(dt.slice, _slicing.slice, x, axis=b.time, start=start)
    both(dt.slice, _slicing.slice, x, axis=b.feature, start=start % 3, end=3)
    both(dt.shift_right, _slicing.shift_right, x, axis=b.time, amount=k, pad_value=0.5)
    both(dt.reverse_sequence, _slicing.reverse_sequence, x, axis=b.time)
    both(dt.split, _stack.split, x, axis=b.feature, out_dims=(dt.Dim(1, name="f1"), dt.Dim(2, name="f2")))
    both(dt.stack, _stack.stack, (x, y))
    both(dt.top_k, _sort.top_k, x, axis=b.feature, k=k)
    both(dt.gather, _gather.gather, x, indices=k % 2, axis=heads)
    beam = dt.Dim(3, name="beam")  # batched indices (beam back-pointers over batch): one torch.gather
    back = torch.arange(raw4.shape[0] * 3).view(raw4.shape[0], 3) % 2
    both(dt.gather, _gather.gather, x, indices=dt.Tensor(back, (b.batch, beam), sparse_dim=heads), axis=heads)
    both(dt.gather, _gather.gather, x, indices=dt.Tensor(back.t().contiguous(), (beam, b.batch), sparse_dim=heads),
         axis=heads)
    per_frame = torch.arange(raw4.shape[0] * raw4.shape[1] * 3).view(raw4.shape[0], raw4.shape[1], 3) % 3
    both(dt.gather, _gather.gather, x, indices=dt.Tensor(per_frame, (b.batch, b.time, beam), sparse_dim=b.feature),
         axis=b.feature)
    both(dt.pack_padded, _packing.pack_padded, x, dims=(b.batch, b.time))  # fast only where they lead x
    vocab = dt.Dim(4, name="vocab")
    labels = dt.Tensor(torch.arange(raw4.shape[0] * raw4.shape[1]).view(raw4.shape[:2]) % 4, (b.batch, b.time),
                       sparse_dim=vocab)
    both(dt.scatter, _scatter.scatter, x, indices=labels, indices_dim=b.time)
    # New argument forms: the fast paths hand them to the definitions.
    both(dt.reverse_sequence, _slicing.reverse_sequence, x, axis=b.time, handle_dynamic_dims=False)
    both(dt.gather, _gather.gather, x, indices=k + 1, axis=b.time, clip_to_valid=True)
    both(dt.scatter, _scatter.scatter, x, indices=labels, indices_dim=b.time, mode="max", fill_value=0.5)
    both(dt.slice, _slicing.slice, x, axis=b.time, start=dt.Tensor(torch.full((len(lengths),), start), (b.batch,)),
         size=dt.Dim(2, name="w"))


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("extra_time", [0, 1])
def test_cumsum_squeeze_one_hot_fast_paths(pad, extra_time):
    """cumsum (one cumsum, a dynamic axis masked first), squeeze (one select view) and one_hot (int64: one
    F.one_hot) against their definitions: dims, markers, values on valid frames, gradients, and the cases
    they hand over (frames beyond the longest sequence, int32 indices, bad input: the same errors)."""
    from dimtorch.ops import gather as _gather, shape as _shape
    b = make_padded_batch((4, 2, 0), pad_value=pad, extra_time=extra_time)
    x = dt.Tensor(b.x.raw, b.x.dims, feature_dim=b.feature)
    for axis in (b.time, b.feature, b.batch):
        both(dt.cumsum, _sort.cumsum, x, axis=axis)
    grads = []
    for fn in (dt.cumsum, _sort.cumsum):
        raw = b.x.raw.clone().requires_grad_(True)
        y = fn(dt.Tensor(raw, b.x.dims), axis=b.time)
        torch.where(b.time.get_mask(device=raw.device).raw_aligned(y.dims), y.raw, 0.0).sum().backward()
        grads.append(raw.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)
    one = dt.Dim(1, name="one")
    x1 = dt.Tensor(b.x.raw.unsqueeze(1), (b.x.dims[0], one) + b.x.dims[1:], feature_dim=one)
    y = both(dt.squeeze, _shape.squeeze, x1, axis=one)
    assert y.feature_dim is None and y.raw._base is not None
    vocab = dt.Dim(5, name="vocab")
    t3 = dt.Dim(3, name="t")
    for dtype in (torch.int64, torch.int32):
        labels = dt.Tensor(torch.tensor([[1, 4, 0], [2, 2, 3]], dtype=dtype), (b.batch, t3), sparse_dim=vocab)
        y = both(dt.one_hot, _gather.one_hot, labels)
        assert y.feature_dim is vocab and y.sparse_dim is None
    both(dt.cumsum, _sort.cumsum, x, spatial_dim=b.time)  # (RETURNN frontend's name)
    both(dt.squeeze, _shape.squeeze, x1, one)
    for fast, slow, args, kwargs in [(dt.squeeze, _shape.squeeze, (b.x,), dict(axis=b.time)),
                                     (dt.one_hot, _gather.one_hot, (b.x,), {}),
                                     (dt.cumsum, _sort.cumsum, (b.x,), dict(axis=one)),
                                     (dt.cumsum, _sort.cumsum, (b.x,), dict(axis=b.time, spatial_dim=b.feature)),
                                     (dt.cumsum, _sort.cumsum, (), dict(x=b.x, axis=b.time))]:
        with pytest.raises((ValueError, TypeError)) as e_fast:
            fast(*args, **kwargs)
        with pytest.raises((ValueError, TypeError)) as e_slow:
            slow(*args, **kwargs)
        assert type(e_fast.value) is type(e_slow.value)
        assert str(e_fast.value).endswith(str(e_slow.value)), (e_fast.value, e_slow.value)


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("out_dtype", ["int32", "int64"])
def test_search_sorted_fast_path(side, out_dtype):
    """One static sorted sequence (src/ops/sort.cpp: one searchsorted) gives the definition's result over
    values' dims in any layout; other calls (batched or dynamic sequences, mixed dtypes, errors) go to the
    definition."""
    b = make_padded_batch([5, 3, 0], feature=4, extra_time=1, pad_value=PAD_NAN)
    k = dt.Dim(6, name="k")
    seq = dt.Tensor(torch.randn(6).sort().values, (k,))
    for x in (b.x, b.x.copy_transpose((b.feature, b.batch, b.time))):
        out = both(dt.search_sorted, _sort.search_sorted, seq, x, axis=k, side=side, out_dtype=out_dtype)
        assert out.sparse_dim is k and out.dims == x.dims
    ints = dt.Tensor(torch.tensor([1, 3, 3, 7, 9, 12]), (k,))
    values = dt.Tensor(torch.tensor([[0, 3], [12, 13]]), (dt.Dim(2, name="r"), dt.Dim(2, name="c")))
    both(dt.search_sorted, _sort.search_sorted, ints, values, axis=k, side=side, out_dtype=out_dtype)
    both(dt.search_sorted, _sort.search_sorted, sorted_seq=ints, values=values, axis=k, side=side)
    both(dt.search_sorted, _sort.search_sorted, ints, dt.Tensor(torch.tensor([1.5, 12.0]), (dt.Dim(2),)), axis=k)
    per_batch = dt.Tensor(torch.randn(3, 6).sort(-1).values, (b.batch, k))
    both(dt.search_sorted, _sort.search_sorted, per_batch, b.x, axis=k, side=side)
    both(dt.search_sorted, _sort.search_sorted, b.x.copy_masked(0.0), b.x, axis=b.time, side=side)
    with pytest.raises(ValueError, match=r"^dimtorch.search_sorted\(\): side must be 'left' or 'right'"):
        dt.search_sorted(seq, b.x, axis=k, side="middle")
    with pytest.raises(ValueError, match=r"^dimtorch.search_sorted\(\): axis 'time'"):
        dt.search_sorted(seq, b.x, axis=b.time)
    with pytest.raises(TypeError, match=r"^dimtorch.search_sorted\(\): .*'dim'.*use axis="):
        dt.search_sorted(seq, b.x, dim=k)

