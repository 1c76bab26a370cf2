"""Tests of src/ops/matmul.cpp: matmul/dot over named dims against einsum, all dims orders, masking; linear against
F.linear."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import dimtorch as dt
from helpers import (PAD_LARGE, PAD_NAN, align_raw, check_against_torch, check_batch_independence,
                     check_padding_invariance, make_padded_batch)

LETTERS = "abcdefghij"


def einsum_oracle(a_dims, b_dims, out_dims, all_dims):
    letter = {id(d): LETTERS[i] for i, d in enumerate(all_dims)}
    spec = "".join(letter[id(d)] for d in a_dims) + "," + "".join(letter[id(d)] for d in b_dims) + "->" + \
        "".join(letter[id(d)] for d in out_dims)
    return lambda ra, rb: torch.einsum(spec, ra, rb)


@settings(max_examples=40)
@given(data=st.data())
def test_matmul_all_dim_orders_against_einsum(data):
    batch, heads = dt.Dim(None, name="batch"), dt.Dim(3, name="heads")
    f, g = dt.Dim(4, name="f"), dt.Dim(2, name="g")
    i, j = dt.Dim(3, name="i"), dt.Dim(5, name="j")
    o, p = dt.Dim(5, name="o"), dt.Dim(2, name="p")
    sizes = {batch: 2, heads: 3, f: 4, g: 2, i: 3, j: 5, o: 5, p: 2}
    # Draw positions, not Dims: hypothesis caches strategies by argument, which would keep Dims alive.
    def pick(pool, label, min_size=0):
        idx = data.draw(st.lists(st.integers(0, len(pool) - 1), unique=True, min_size=min_size, max_size=len(pool)),
                        label=label)
        return [pool[k] for k in idx]

    def shuffled(items, label):
        order = data.draw(st.permutations(list(range(len(items)))), label=label)
        return tuple(items[k] for k in order)

    common = pick([batch, heads], "common")
    reduce = pick([f, g], "reduce", min_size=1)
    a_rest = pick([i, j], "a_rest")
    b_rest = pick([o, p], "b_rest")
    a_dims = shuffled(common + reduce + a_rest, "a_dims")
    b_dims = shuffled(common + reduce + b_rest, "b_dims")
    seed = data.draw(st.integers(0, 1000), label="seed")
    gen = torch.Generator().manual_seed(seed)
    a = dt.Tensor(torch.randn(*[sizes[d] for d in a_dims], generator=gen), a_dims)
    b = dt.Tensor(torch.randn(*[sizes[d] for d in b_dims], generator=gen), b_dims)
    # DESIGN §2: common dims (in a's order), then a's rest, then b's rest.
    expect = tuple(d for d in a_dims if d in common) + tuple(d for d in a_dims if d in a_rest) + \
        tuple(d for d in b_dims if d in b_rest)
    red = reduce[0] if len(reduce) == 1 and data.draw(st.booleans(), label="single") else tuple(reduce)
    fn = dt.dot if data.draw(st.booleans(), label="dot") else dt.matmul
    check_against_torch(lambda a, b: fn(a, b, reduce=red), einsum_oracle(a_dims, b_dims, expect, list(sizes)),
                        [a, b], expect_dims=expect, rtol=1e-4, atol=1e-5)


def test_matmul_is_linear_over_feature():
    pb = make_padded_batch((4, 2), pad_value=PAD_LARGE)
    out = dt.Dim(3, name="out")
    w = dt.Tensor(torch.randn(4, 3), (pb.feature, out))
    y = dt.matmul(pb.x, w, reduce=pb.feature)
    assert y.dims == (pb.batch, pb.time, out)
    torch.testing.assert_close(y.raw[pb.mask], pb.x.raw[pb.mask] @ w.raw)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_matmul_use_mask_over_dynamic_reduce_dim(pad):
    """Attention-like: weights over (batch, time) times values over (batch, time, feature)."""
    pb = make_padded_batch((5, 3, 0, 1), pad_value=pad, extra_time=1)
    att_raw = torch.rand(4, 6)
    att_raw[~pb.mask] = pad
    att = dt.Tensor(att_raw, (pb.batch, pb.time))
    mask = pb.mask

    def oracle(ra, rv):
        return torch.einsum("bt,btf->bf", torch.where(mask, ra, 0), torch.where(mask[:, :, None], rv, 0))

    check_against_torch(lambda a, v: dt.matmul(a, v, reduce=pb.time, use_mask=True), oracle, [att, pb.x],
                        expect_dims=(pb.batch, pb.feature))
    # Every gradient finite, padding included; a length-0 sequence gives 0.
    la, lv = att_raw.clone().requires_grad_(True), pb.x.raw.clone().requires_grad_(True)
    y = dt.matmul(dt.Tensor(la, att.dims), dt.Tensor(lv, pb.x.dims), reduce=pb.time, use_mask=True)
    assert (y.raw[2] == 0).all() and not y.raw.isnan().any()
    y.raw.sum().backward()
    assert torch.isfinite(la.grad).all() and torch.isfinite(lv.grad).all()


def test_matmul_without_mask_reduces_padding():
    pb = make_padded_batch((3, 1), pad_value=1.0)
    att = dt.Tensor(torch.ones(2, 3), (pb.batch, pb.time))
    y = dt.matmul(att, pb.x, reduce=pb.time, use_mask=False)
    torch.testing.assert_close(y.raw, pb.x.raw.sum(1))


def test_matmul_masks_by_default():
    """use_mask=True is the default (RETURNN frontend's): padding of a dynamic reduced dim counts as 0."""
    pb = make_padded_batch((3, 1), pad_value=1.0)
    att = dt.Tensor(torch.ones(2, 3), (pb.batch, pb.time))
    for op in (dt.matmul, dt.dot):
        y = op(att, pb.x, reduce=pb.time)
        torch.testing.assert_close(y.raw, torch.where(pb.mask[..., None], pb.x.raw, 0).sum(1))


@pytest.mark.parametrize("pad", [PAD_NAN, 1e30])
def test_matmul_reduce_nothing_is_the_product(pad):
    """reduce=[]: no contraction. An outer product of each operand's own dims, batched over the common
    ones, and a scaling by a tensor of common dims; against positional torch, forward and backward,
    with NaN/1e30 padding, and each sequence alone."""
    pb = make_padded_batch((4, 2, 1), pad_value=pad)
    out = dt.Dim(3, name="out")
    w = dt.Tensor(torch.randn(3), (out,))
    check_against_torch(lambda x, w: dt.matmul(x, w, reduce=[]), lambda x, w: x[..., None] * w, [pb.x, w],
                        expect_dims=(pb.batch, pb.time, pb.feature, out))
    check_against_torch(lambda w, x: dt.dot(w, x, reduce=()), lambda w, x: w[:, None, None, None] * x, [w, pb.x],
                        expect_dims=(out, pb.batch, pb.time, pb.feature))
    scale = dt.Tensor(torch.randn(3), (pb.batch,))
    check_against_torch(lambda x, s: dt.matmul(x, s, reduce=[]), lambda x, s: x * s[:, None, None], [pb.x, scale],
                        expect_dims=(pb.batch, pb.time, pb.feature))
    check_batch_independence(lambda x, m: dt.matmul(x, w, reduce=[]), pb.x, pb.batch, pb.time)


def test_matmul_batch_independence():
    pb = make_padded_batch((5, 3, 1), pad_value=PAD_NAN, extra_time=1)
    out = dt.Dim(3, name="out")
    w = dt.Tensor(torch.randn(3, 4), (out, pb.feature))
    check_batch_independence(lambda x, m: dt.matmul(x, w, reduce=pb.feature), pb.x, pb.batch, pb.time,
                             rtol=1e-5, atol=1e-5)
    check_batch_independence(
        lambda x, m: dt.matmul(dt.softmax(x, axis=m(pb.time)), dt.Tensor(torch.ones(4), (pb.feature,)),
                               reduce=pb.feature), pb.x, pb.batch, pb.time, rtol=1e-5, atol=1e-6)


def test_matmul_plan_cache_gives_same_result_on_reuse():
    a_d, f, o = dt.Dim(2, name="a"), dt.Dim(3, name="f"), dt.Dim(4, name="o")
    a = dt.Tensor(torch.randn(3, 2), (f, a_d))
    b = dt.Tensor(torch.randn(4, 3), (o, f))
    first = dt.matmul(a, b, reduce=f).raw
    for _ in range(3):
        torch.testing.assert_close(dt.matmul(a, b, reduce=f).raw, first)
    torch.testing.assert_close(first, a.raw.t() @ b.raw.t())


def test_matmul_bad_input():
    batch, feat, out = dt.Dim(None, name="batch"), dt.Dim(4, name="feature"), dt.Dim(3, name="out")
    a = dt.Tensor(torch.randn(2, 4), (batch, feat))
    b = dt.Tensor(torch.randn(2, 3), (batch, out))
    with pytest.raises(ValueError, match=r"dimtorch\.matmul\(\): dim 'feature'\(4\) is in a but not in b \(dims: batch:2, out:3\)"):
        dt.matmul(a, b, reduce=feat)
    with pytest.raises(ValueError, match=r"dimtorch\.dot\(\): dim 'feature'\(4\) is in b but not in a \(dims: batch:2, out:3\)"):
        dt.dot(b, a, reduce=feat)
    with pytest.raises(ValueError, match=r"dimtorch\.matmul\(\): dim .*'feature'.* is given twice in reduce"):
        dt.matmul(a, a, reduce=(feat, feat))
    c = dt.Tensor(torch.randn(5, 4), (batch, feat))
    with pytest.raises(ValueError, match=r"dimtorch\.matmul\(\): dim .*'batch'.* has raw size 2 in a but 5 in b"):
        dt.matmul(a, c, reduce=feat)
    with pytest.raises(TypeError, match=r"dimtorch\.matmul\(\): b must be a dimtorch\.Tensor"):
        dt.matmul(a, torch.randn(4), reduce=feat)


# ---- linear (src/ops/matmul.cpp) ----

@pytest.mark.parametrize("layout", ["in_out", "out_in"])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("x_order", [(0, 1, 2), (2, 0, 1), (1, 2, 0)])
def test_linear_against_torch(layout, with_bias, x_order):
    pb = make_padded_batch((4, 2), pad_value=PAD_LARGE)
    out = dt.Dim(3, name="out")
    w_raw = torch.randn(3, 4)  # (out, in)
    w = dt.Tensor(w_raw, (out, pb.feature)) if layout == "out_in" else dt.Tensor(w_raw.t().contiguous(), (pb.feature, out))
    b = dt.Tensor(torch.randn(3), (out,))
    dims = tuple(pb.x.dims[i] for i in x_order)
    x = dt.Tensor(pb.x.raw.permute(*x_order), dims, feature_dim=pb.feature)
    inputs = [x, w] + ([b] if with_bias else [])
    expect_dims = tuple(d for d in dims if d is not pb.feature) + (out,)

    def oracle(xr, wr, *br):
        c = align_raw(xr, dims, (pb.batch, pb.time, pb.feature))
        wt = wr if layout == "out_in" else wr.t()
        res = F.linear(c, wt, *br)
        return align_raw(res, (pb.batch, pb.time, out), expect_dims)

    check_against_torch(lambda *a: dt.linear(*a), oracle, inputs, expect_dims=expect_dims, rtol=1e-5, atol=1e-5)
    assert dt.linear(*inputs).feature_dim is out


def test_linear_padding_does_not_leak_into_valid_frames():
    # linear is per frame: valid outputs, valid x grads and (for finite padding) weight grads stay.
    out = dt.Dim(3, name="out")
    w_raw = torch.randn(4, 3)
    fn = lambda x: dt.linear(x, dt.Tensor(w_raw, (x.feature_dim, out)))  # noqa: E731
    check_padding_invariance(fn, (4, 2, 0), pads=(0.0, PAD_NAN, PAD_LARGE), finite_grads=False)


def test_linear_bad_input():
    pb = make_padded_batch((3, 2))
    out = dt.Dim(3, name="out")
    with pytest.raises(ValueError, match=r"dimtorch\.linear\(\): exactly one dim of weight \(out:3, other:4\) must be in x"):
        dt.linear(pb.x, dt.Tensor(torch.randn(3, 4), (out, dt.Dim(4, name="other"))))
    with pytest.raises(ValueError, match=r"dimtorch\.linear\(\): weight must have 2 dims"):
        dt.linear(pb.x, dt.Tensor(torch.randn(4), (pb.feature,)))
    with pytest.raises(ValueError, match=r"dimtorch\.linear\(\): bias must have the dims .*'out'"):
        dt.linear(pb.x, dt.Tensor(torch.randn(4, 3), (pb.feature, out)), dt.Tensor(torch.randn(4), (pb.feature,)))
    f5 = dt.Dim(None, name="f5")
    with pytest.raises(ValueError, match=r"dimtorch\.linear\(\): dim .*'f5'.* has raw size 4 in x but 5 in weight"):
        dt.linear(dt.Tensor(torch.randn(2, 4), (pb.batch, f5)), dt.Tensor(torch.randn(5, 3), (f5, out)))


@pytest.mark.parametrize("ndim", [1, 2, 4])
def test_linear_in_out_with_bias_as_matmul_plus_bias(ndim):
    # weight (in, out) with a bias: x folded to 2-D and one addmm (any number of x's other dims), the values and
    # gradients of x @ w + b; dtypes that addmm does not mix promote as matmul + add does.
    feat, out = dt.Dim(4, name="feat"), dt.Dim(3, name="out")
    others = [dt.Dim(n, name=f"o{n}") for n in (2, 5, 3)][: ndim - 1]
    x_raw = torch.randn(*[d.size for d in others], 4, requires_grad=True)
    w_raw, b_raw = torch.randn(4, 3, requires_grad=True), torch.randn(3, requires_grad=True)
    y = dt.linear(dt.Tensor(x_raw, (*others, feat)), dt.Tensor(w_raw, (feat, out)), dt.Tensor(b_raw, (out,)))
    assert y.dims == (*others, out)
    want = torch.matmul(x_raw, w_raw) + b_raw
    torch.testing.assert_close(y.raw, want)
    g = torch.randn_like(want)
    grads = torch.autograd.grad(y.raw, (x_raw, w_raw, b_raw), g)
    for got, ref in zip(grads, torch.autograd.grad(want, (x_raw, w_raw, b_raw), g)):
        torch.testing.assert_close(got, ref)
    b64 = dt.Tensor(b_raw.detach().double(), (out,))
    y64 = dt.linear(dt.Tensor(x_raw.detach(), (*others, feat)), dt.Tensor(w_raw.detach(), (feat, out)), b64)
    assert y64.raw.dtype == torch.float64
    torch.testing.assert_close(y64.raw, torch.matmul(x_raw.detach(), w_raw.detach()) + b64.raw)


def test_linear_in_out_under_autocast_promotes_as_matmul_plus_bias():
    # under torch.autocast the (in, out) layout stays matmul + bias, as RETURNN's rf.Linear: the float32 bias
    # promotes the result to float32 (the (out, in) layout is F.linear: the autocast dtype, as torch's Linear)
    b, f, o = dt.Dim(2, name="b"), dt.Dim(4, name="f"), dt.Dim(5, name="o")
    x = dt.Tensor(torch.randn(2, 3, 4), (b, dt.Dim(3, name="t"), f))
    w, bias = dt.Tensor(torch.randn(4, 5), (f, o)), dt.Tensor(torch.randn(5), (o,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = dt.linear(x, w, bias).raw
        want = torch.matmul(x.raw, w.raw) + bias.raw
        assert dt.linear(x, dt.Tensor(w.raw.t().contiguous(), (o, f)), bias).raw.dtype == torch.bfloat16
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=0, atol=0)
