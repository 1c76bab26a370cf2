"""Tests of elementwise ops (src/ops/elementwise.cpp, src/core/plan.cpp) against positional torch, forward and backward.

Operands are padded batches (NaN or 1e30 in the padding); the torch side is written by hand with
the indexing/permutes a user would write, and `check_against_torch` compares values at valid
frames and the gradients of all floating inputs.
"""
import operator

import pytest
import torch
import torch.nn.functional as F

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, align_raw, check_against_torch, check_batch_independence, make_padded_batch


def _positive(t: dt.Tensor, lo=0.5) -> dt.Tensor:
    """Same dims, values in [lo, lo + ~3): safe divisors, exponents, log arguments (NaN stays NaN)."""
    return dt.Tensor(t.raw.abs() + lo, t.dims, feature_dim=t.feature_dim)


def _operands(pad_value):
    """x over (batch, time, feature), padded; the other operands of the alignment cases."""
    bd = make_padded_batch((5, 3, 1), 4, pad_value=pad_value, extra_time=1)
    g = torch.Generator().manual_seed(1)
    b_ = dt.Tensor(torch.rand(4, generator=g) + 0.5, (bd.feature,))
    c_ = dt.Tensor(torch.rand(3, 4, generator=g) + 0.5, (bd.batch, bd.feature))
    d_raw = torch.rand(4, 6, 3, generator=g) + 0.5
    for i, n in enumerate(bd.lengths):
        d_raw[:, n:, i] = pad_value
    d_ = dt.Tensor(d_raw, (bd.feature, bd.time, bd.batch))
    return bd, b_, c_, d_


# Each case: (id, pick the two operands, torch alignment of their raws to the output order,
# index of the operand whose dims the output keeps).
ALIGN_CASES = [
    ("same_dims", lambda bd, b, c, d: (bd.x, _positive(bd.x).copy()), lambda x, y: (x, y), 0),
    ("x_feat", lambda bd, b, c, d: (bd.x, b), lambda x, y: (x, y), 0),
    ("feat_x", lambda bd, b, c, d: (b, bd.x), lambda y, x: (y, x), 1),
    ("x_batch_feat", lambda bd, b, c, d: (bd.x, c), lambda x, y: (x, y[:, None, :]), 0),
    ("batch_feat_x", lambda bd, b, c, d: (c, bd.x), lambda y, x: (y[:, None, :], x), 1),
    ("x_feat_time_batch", lambda bd, b, c, d: (bd.x, d), lambda x, y: (x, y.permute(2, 1, 0)), 0),
    ("feat_time_batch_x", lambda bd, b, c, d: (d, bd.x), lambda y, x: (y, x.permute(2, 1, 0)), 0),
]

ARITH_OPS = [
    ("add", operator.add, True),
    ("sub", operator.sub, True),
    ("mul", operator.mul, True),
    ("truediv", operator.truediv, True),
    ("floordiv", operator.floordiv, False),  # torch has no gradient for floor_divide
    ("mod", operator.mod, True),
    ("pow", operator.pow, True),
]


@pytest.mark.parametrize("pad_value", [PAD_NAN, PAD_LARGE], ids=["nan_pad", "large_pad"])
@pytest.mark.parametrize("case", ALIGN_CASES, ids=[c[0] for c in ALIGN_CASES])
@pytest.mark.parametrize("op", ARITH_OPS, ids=[o[0] for o in ARITH_OPS])
def test_arithmetic_against_torch(op, case, pad_value):
    name, fn, differentiable = op
    _, pick, align, holder = case
    bd, b, c, d = _operands(pad_value)
    x, y = pick(bd, b, c, d)
    if name == "pow":  # a positive base keeps pow real
        x = _positive(x, 0.1)
    check_against_torch(
        lambda p, q: fn(p, q),
        lambda p, q: fn(*align(p, q)),
        [x, y],
        expect_dims=(x, y)[holder].dims,
        backward=differentiable,
        rtol=1e-5, atol=1e-5,
    )


@pytest.mark.parametrize("scalar", [2, 2.5, -1.5, True], ids=["int", "float", "neg_float", "bool"])
@pytest.mark.parametrize("op", ARITH_OPS, ids=[o[0] for o in ARITH_OPS])
def test_arithmetic_with_scalar_both_sides(op, scalar):
    name, fn, differentiable = op
    if scalar is True and name == "sub":
        pytest.skip("torch refuses `-` with bool")
    bd = make_padded_batch((4, 2), 3, pad_value=PAD_LARGE)
    x = _positive(bd.x) if name in ("pow", "truediv", "floordiv", "mod") else bd.x
    # torch has no gradient for remainder(Scalar, Tensor), and its pow backward fails on a bool
    # exponent (an internal assert in torch 2.13).
    for args, torch_fn, backward in (
        ([x, scalar], lambda p, s: fn(p, s), differentiable and not (name == "pow" and scalar is True)),
        ([scalar, x], lambda s, p: fn(s, p), differentiable and name != "mod" and not (name == "pow" and scalar is True)),
    ):
        check_against_torch(lambda *a: fn(*a), torch_fn, args, expect_dims=x.dims, backward=backward,
                            rtol=1e-5, atol=1e-5)


def test_python_scalars_keep_torch_type_promotion():
    f = dt.Dim(3, name="f")
    i = dt.Tensor(torch.tensor([1, 2, 3]), (f,))
    assert (i + 1).dtype == "int64"
    assert (i + 1.5).dtype == "float32"  # a Python float does not make float64
    assert (i / 2).dtype == "float32"
    h = dt.Tensor(torch.ones(3, dtype=torch.float16), (f,))
    assert (h * 3.0).dtype == "float16"
    assert (2 ** i).dtype == "int64"


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.int32, torch.uint8])
@pytest.mark.parametrize("op", [operator.and_, operator.or_, operator.xor], ids=["and", "or", "xor"])
def test_bitwise_ops(op, dtype):
    bd = make_padded_batch((3, 2), 2)
    g = torch.Generator().manual_seed(0)
    raw_a = torch.randint(0, 7, (2, 3, 2), generator=g).to(dtype)
    raw_b = torch.randint(0, 7, (2, 2), generator=g).to(dtype)
    a = dt.Tensor(raw_a, (bd.batch, bd.time, bd.feature))
    b = dt.Tensor(raw_b, (bd.feature, bd.batch))
    check_against_torch(op, lambda p, q: op(p, q.t()[:, None, :]), [a, b], expect_dims=a.dims)
    check_against_torch(op, lambda q, p: op(q.t()[:, None, :], p), [b, a], expect_dims=a.dims)
    scalar = True if dtype == torch.bool else 5
    check_against_torch(lambda p: op(p, scalar), lambda p: op(p, scalar), [a])
    check_against_torch(lambda p: op(scalar, p), lambda p: op(scalar, p), [a])


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.uint8])
def test_invert(dtype):
    f = dt.Dim(4, name="f")
    a = dt.Tensor(torch.tensor([0, 1, 5, 3]).to(dtype), (f,))
    check_against_torch(operator.invert, operator.invert, [a])


@pytest.mark.parametrize("fn", [operator.neg, operator.abs, operator.pos], ids=["neg", "abs", "pos"])
def test_unary_operators(fn):
    bd = make_padded_batch((4, 2), 3)
    check_against_torch(fn, fn, [bd.x], expect_dims=bd.x.dims)


def test_unary_plus_returns_self():
    bd = make_padded_batch((2,), 2)
    assert +bd.x is bd.x


COMPARISONS = [operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge]


@pytest.mark.parametrize("op", COMPARISONS, ids=lambda o: o.__name__)
def test_comparisons(op):
    bd, b, c, d = _operands(PAD_NAN)
    x = bd.x
    # Ties make == and <= interesting: copy some values over.
    y_raw = x.raw.clone()
    y_raw[:, ::2] += 1.0
    y = dt.Tensor(y_raw, x.dims)
    out, _ = check_against_torch(op, op, [x, y], expect_dims=x.dims)
    assert out[0].dtype == torch.bool
    check_against_torch(op, lambda p, q: op(p, q[:, None, :]), [x, c], expect_dims=x.dims)
    check_against_torch(op, lambda p, q: op(p, q.permute(2, 1, 0)), [x, d], expect_dims=x.dims)
    check_against_torch(op, lambda q, p: op(q, p.permute(2, 1, 0)), [d, x], expect_dims=d.dims)
    check_against_torch(lambda p: op(p, 0.0), lambda p: op(p, 0.0), [x])
    check_against_torch(lambda p: op(0.0, p), lambda p: op(0.0, p), [x])
    r = op(x, y)
    assert r.dtype == "bool" and r.sparse_dim is None


def test_comparison_results_are_hashable_tensors():
    bd = make_padded_batch((2,), 2)
    x = bd.x
    eq = x == x
    assert isinstance(eq, dt.Tensor) and eq.dtype == "bool"
    assert x in {x} and x in [x]  # containment tries identity first
    assert {x: "x"}[x] == "x"


# ---- combine / compare -------------------------------------------------------------------------

COMBINE_KINDS = [
    ("add", torch.add), ("+", torch.add), ("sub", torch.sub), ("-", torch.sub),
    ("mul", torch.mul), ("*", torch.mul), ("truediv", torch.div), ("/", torch.div),
    ("floordiv", torch.floor_divide), ("//", torch.floor_divide), ("mod", torch.remainder),
    ("%", torch.remainder), ("pow", torch.pow), ("**", torch.pow), ("maximum", torch.maximum),
    ("max", torch.maximum), ("minimum", torch.minimum), ("min", torch.minimum),
    ("squared_difference", lambda p, q: (p - q).square()), ("logaddexp", torch.logaddexp),
]


@pytest.mark.parametrize("kind, torch_fn", COMBINE_KINDS, ids=[k for k, _ in COMBINE_KINDS])
def test_combine_float_kinds(kind, torch_fn):
    bd, b, c, d = _operands(PAD_LARGE)
    x = _positive(bd.x)
    backward = kind not in ("floordiv", "//")
    check_against_torch(lambda p, q: dt.combine(p, q, kind), lambda p, q: torch_fn(p, q.permute(2, 1, 0)),
                        [x, d], expect_dims=x.dims, backward=backward, rtol=1e-5, atol=1e-5)
    check_against_torch(lambda p, q: dt.combine(p, q, kind), lambda p, q: torch_fn(p, q),
                        [x, b], expect_dims=x.dims, backward=backward, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind, torch_fn", [
    ("logical_and", torch.logical_and), ("logical_or", torch.logical_or), ("bitwise_and", torch.bitwise_and),
    ("bitwise_or", torch.bitwise_or), ("bitwise_xor", torch.bitwise_xor),
])
def test_combine_bool_kinds(kind, torch_fn):
    bd = make_padded_batch((3, 2), 2)
    g = torch.Generator().manual_seed(0)
    a = dt.Tensor(torch.rand(2, 3, 2, generator=g) > 0.5, (bd.batch, bd.time, bd.feature))
    b = dt.Tensor(torch.rand(2, 2, generator=g) > 0.5, (bd.feature, bd.batch))
    check_against_torch(lambda p, q: dt.combine(p, q, kind), lambda p, q: torch_fn(p, q.t()[:, None, :]),
                        [a, b], expect_dims=a.dims)


def test_combine_outer_broadcast():
    bd = make_padded_batch((3, 2), 2)
    b_f = dt.Tensor(torch.randn(2, 2), (bd.batch, bd.feature))
    t_only = dt.Tensor(torch.randn(3), (bd.time,))
    with pytest.raises(ValueError, match=r"dimtorch\.combine\(\): no operand has all dims of the others \(a: \(batch, feature\(2\)\); b: \(time\)\)\. This outer broadcast is usually a bug; if it is intended, use dimtorch\.combine\(\.\.\., allow_broadcast_all_sources=True\)"):
        dt.combine(b_f, t_only, "add")
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\.__mul__\(\): no operand has all dims"):
        b_f * t_only
    # Output dims: a's, then the rest of b's.
    check_against_torch(lambda p, q: dt.combine(p, q, "mul", allow_broadcast_all_sources=True),
                        lambda p, q: p[:, :, None] * q[None, None, :], [b_f, t_only],
                        expect_dims=(bd.batch, bd.feature, bd.time))
    t_b = dt.Tensor(torch.randn(3, 2), (bd.time, bd.batch))
    check_against_torch(lambda p, q: dt.combine(p, q, "add", allow_broadcast_all_sources=True),
                        lambda p, q: p[:, :, None] + q.t()[:, None, :], [b_f, t_b],
                        expect_dims=(bd.batch, bd.feature, bd.time))
    check_against_torch(lambda q, p: dt.combine(q, p, "sub", allow_broadcast_all_sources=True),
                        lambda q, p: q[:, :, None] - p[None, :, :], [t_b, b_f],
                        expect_dims=(bd.time, bd.batch, bd.feature))
    # Permission is not needed (and changes nothing) when one operand holds all dims.
    x = bd.x
    r = dt.combine(x, b_f, "add", allow_broadcast_all_sources=True)
    assert r.dims == x.dims


@pytest.mark.parametrize("kind, op", [
    ("equal", operator.eq), ("==", operator.eq), ("not_equal", operator.ne), ("!=", operator.ne),
    ("less", operator.lt), ("<", operator.lt), ("less_equal", operator.le), ("<=", operator.le),
    ("greater", operator.gt), (">", operator.gt), ("greater_equal", operator.ge), (">=", operator.ge),
])
def test_compare_kinds(kind, op):
    bd, b, c, d = _operands(PAD_NAN)
    x = bd.x
    check_against_torch(lambda p, q: dt.compare(p, q, kind), lambda p, q: op(p, q[:, None, :]), [x, c],
                        expect_dims=x.dims)
    check_against_torch(lambda p: dt.compare(p, 0.5, kind), lambda p: op(p, 0.5), [x])
    t_only = dt.Tensor(torch.randn(6), (bd.time,))
    b_f = dt.Tensor(torch.randn(3, 4), (bd.batch, bd.feature))
    check_against_torch(lambda p, q: dt.compare(p, q, kind, allow_broadcast_all_sources=True),
                        lambda p, q: op(p[:, :, None], q[None, None, :]), [b_f, t_only],
                        expect_dims=(bd.batch, bd.feature, bd.time))


def test_combine_and_compare_bad_kind():
    bd = make_padded_batch((2,), 2)
    x = bd.x
    with pytest.raises(ValueError, match=r"dimtorch\.combine\(\): unknown kind 'foo' \(known: add, \+, sub, .*bitwise_xor, squared_difference, logaddexp\)"):
        dt.combine(x, x, "foo")
    with pytest.raises(TypeError, match=r"dimtorch\.combine\(\): kind must be a str, got int"):
        dt.combine(x, x, 1)
    with pytest.raises(ValueError, match=r"dimtorch\.compare\(\): unknown kind 'add' \(known: equal, ==, .*>=\)"):
        dt.compare(x, x, "add")
    with pytest.raises(TypeError, match=r"dimtorch\.combine\(\): at least one operand must be a dimtorch\.Tensor"):
        dt.combine(1, 2, "add")
    with pytest.raises(TypeError, match=r"dimtorch\.combine\(\) missing required argument 'kind'"):
        dt.combine(x, x)
    with pytest.raises(TypeError, match=r"dimtorch\.compare\(\) got an unexpected keyword argument 'allow'"):
        dt.compare(x, x, "==", allow=True)


# ---- where / cast / minimum / maximum / clip -------------------------------------------------


def test_where_tensors_and_scalars():
    bd, b, c, d = _operands(PAD_NAN)
    x = bd.x
    cond = x > 0.0
    cond_bf = dt.Tensor(c.raw > 1.0, c.dims)
    check_against_torch(dt.where, torch.where, [cond, x, 0.0], expect_dims=x.dims)
    check_against_torch(dt.where, torch.where, [cond, -1.0, x], expect_dims=x.dims)
    check_against_torch(dt.where, lambda k, p, q: torch.where(k, p, q), [cond, 1.0, 2.0], expect_dims=x.dims)
    # condition over (batch, feature), values over x and d (feature, time, batch)
    check_against_torch(dt.where, lambda k, p, q: torch.where(k[:, None, :], p, q.permute(2, 1, 0)),
                        [cond_bf, x, d], expect_dims=x.dims)
    # values hold fewer dims than the condition
    check_against_torch(dt.where, lambda k, p, q: torch.where(k, p, q[:, None, :]),
                        [cond, b, c], expect_dims=x.dims)
    check_against_torch(lambda k, p: dt.where(k, p, 0), lambda k, p: torch.where(k[:, None, :], p, 0),
                        [cond_bf, x], expect_dims=x.dims)


def test_where_alignment_and_errors():
    bd = make_padded_batch((3, 2), 2)
    cond_t = dt.Tensor(torch.tensor([True, False, True]), (bd.time,))
    b_f = dt.Tensor(torch.randn(2, 2), (bd.batch, bd.feature))
    with pytest.raises(ValueError, match=r"dimtorch\.where\(\): no operand has all dims of the others \(condition: \(time\); true_value: \(batch, feature\(2\)\)\)"):
        dt.where(cond_t, b_f, 0.0)
    check_against_torch(lambda k, p: dt.where(k, p, 0.0, allow_broadcast_all_sources=True),
                        lambda k, p: torch.where(k[:, None, None], p[None], 0.0), [cond_t, b_f],
                        expect_dims=(bd.time, bd.batch, bd.feature))
    with pytest.raises(TypeError, match=r"dimtorch\.where\(\): condition must be a bool dimtorch\.Tensor, got bool"):
        dt.where(True, 1.0, 0.0)
    with pytest.raises(TypeError, match=r"dimtorch\.where\(\): operand is a raw torch\.Tensor of shape torch\.Size\(\[3\]\); wrap it with its dims"):
        dt.where(cond_t.raw, 1.0, 0.0)
    with pytest.raises(TypeError, match=r"dimtorch\.where\(\): operands must be dimtorch\.Tensor or Python scalars .* got str"):
        dt.where(cond_t, "a", 0.0)
    with pytest.raises(TypeError, match=r"dimtorch\.where\(\) takes at most 3 positional arguments \(4 given\)"):
        dt.where(cond_t, 1.0, 0.0, True)


def test_where_keeps_common_sparse_dim():
    f = dt.Dim(3, name="f")
    classes = dt.Dim(10, name="classes")
    labels = dt.Tensor(torch.tensor([1, 2, 3]), (f,), sparse_dim=classes)
    cond = dt.Tensor(torch.tensor([True, False, True]), (f,))
    assert dt.where(cond, labels, 0).sparse_dim is classes
    assert dt.where(cond, labels, labels).sparse_dim is classes
    other = dt.Tensor(torch.tensor([1, 2, 3]), (f,))
    assert dt.where(cond, labels, other).sparse_dim is None


@pytest.mark.parametrize("dtype", ["float64", "float16", "int32", "int64", "bool", torch.float64, torch.int8])
def test_cast(dtype):
    bd = make_padded_batch((3, 2), 2, pad_value=PAD_LARGE)
    torch_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    x = bd.x * 3.0
    check_against_torch(lambda p: dt.cast(p, dtype), lambda p: p.to(torch_dtype), [x],
                        backward=torch_dtype.is_floating_point, expect_dims=x.dims)
    assert dt.cast(x, dtype).feature_dim is bd.feature


def test_cast_sparse_dim_and_errors():
    f = dt.Dim(2, name="f")
    classes = dt.Dim(10, name="classes")
    labels = dt.Tensor(torch.tensor([1, 2]), (f,), sparse_dim=classes)
    assert dt.cast(labels, "int32").sparse_dim is classes
    assert dt.cast(labels, "float32").sparse_dim is None
    with pytest.raises(ValueError, match=r"dimtorch\.cast\(\): unknown dtype 'foo'"):
        dt.cast(labels, "foo")
    with pytest.raises(TypeError, match=r"dimtorch\.cast\(\): dtype must be a dtype name such as 'float32' or a torch\.dtype, got 3"):
        dt.cast(labels, 3)
    with pytest.raises(TypeError, match=r"dimtorch\.cast\(\): expected a dimtorch\.Tensor, got float"):
        dt.cast(1.0, "float32")


@pytest.mark.parametrize("fn, torch_fn", [(dt.maximum, torch.maximum), (dt.minimum, torch.minimum)],
                         ids=["maximum", "minimum"])
def test_maximum_minimum(fn, torch_fn):
    bd, b, c, d = _operands(PAD_LARGE)
    x = bd.x
    check_against_torch(fn, torch_fn, [x, x.copy_transpose(x.dims)], expect_dims=x.dims)
    check_against_torch(fn, lambda p, q: torch_fn(p, q[:, None, :]), [x, c], expect_dims=x.dims)
    check_against_torch(fn, lambda q, p: torch_fn(q, p.permute(2, 1, 0)), [d, x], expect_dims=d.dims)
    check_against_torch(fn, lambda q, p: torch_fn(q, p), [b, x], expect_dims=x.dims)
    check_against_torch(lambda p: fn(p, 0.1), lambda p: torch_fn(p, torch.tensor(0.1)), [x])
    check_against_torch(lambda p: fn(0.1, p), lambda p: torch_fn(torch.tensor(0.1), p), [x])
    i = dt.Tensor(torch.tensor([1, 5, 3]), (dt.Dim(3),))
    check_against_torch(lambda p: fn(p, 2), lambda p: torch_fn(p, torch.tensor(2)), [i])
    b_f = dt.Tensor(torch.randn(3, 4), (bd.batch, bd.feature))
    t_only = dt.Tensor(torch.randn(6), (bd.time,))
    with pytest.raises(ValueError, match=rf"dimtorch\.{fn.__name__}\(\): no operand has all dims"):
        fn(b_f, t_only)
    check_against_torch(lambda p, q: fn(p, q, allow_broadcast_all_sources=True),
                        lambda p, q: torch_fn(p[:, :, None], q), [b_f, t_only],
                        expect_dims=(bd.batch, bd.feature, bd.time))


@pytest.mark.parametrize("fn, torch_fn", [(dt.squared_difference, lambda p, q: (p - q) ** 2),
                                          (dt.log_add_exp, torch.logaddexp)],
                         ids=["squared_difference", "log_add_exp"])
def test_squared_difference_log_add_exp(fn, torch_fn):
    """rf.squared_difference and rf.log_add_exp: aligned by dims like every binary op, padded data
    with NaN and 1e30 in the padding (which stays out of the valid frames)."""
    for pad in (PAD_NAN, PAD_LARGE):
        bd, b, c, d = _operands(pad)
        x = bd.x
        check_against_torch(fn, torch_fn, [x, x.copy_transpose(x.dims)], expect_dims=x.dims, rtol=1e-5, atol=1e-5)
        check_against_torch(fn, lambda p, q: torch_fn(p, q[:, None, :]), [x, c], expect_dims=x.dims,
                            rtol=1e-5, atol=1e-5)
        check_against_torch(fn, lambda q, p: torch_fn(q, p.permute(2, 1, 0)), [d, x], expect_dims=d.dims,
                            rtol=1e-5, atol=1e-5)
        check_against_torch(lambda p: fn(p, 0.5), lambda p: torch_fn(p, torch.tensor(0.5)), [x], rtol=1e-5, atol=1e-5)
        check_against_torch(lambda p: fn(2, p), lambda p: torch_fn(torch.tensor(2.0), p), [x], rtol=1e-5, atol=1e-5)
    # Batch independence: each sequence alone gives its frames of the batch result.
    bd, b, _, _ = _operands(PAD_NAN)
    check_batch_independence(lambda t, m: fn(t, b), bd.x, bd.batch, bd.time)
    check_batch_independence(lambda t, m: fn(t.copy_transpose((m(bd.time), bd.feature, m(bd.batch))), t * 0.5),
                             bd.x, bd.batch, bd.time)
    name = fn.__name__
    with pytest.raises(ValueError, match=rf"dimtorch\.{name}\(\): no operand has all dims"):
        fn(dt.Tensor(torch.randn(3, 4), (bd.batch, bd.feature)), dt.Tensor(torch.randn(6), (bd.time,)))
    with pytest.raises(TypeError, match=rf"dimtorch\.{name}\(\): operand is a raw torch\.Tensor"):
        fn(bd.x, torch.ones(2))
    with pytest.raises(ValueError, match=rf"dimtorch\.{name}\(\): dim .*time.* has raw size 6 in a but 5 in b"):
        fn(bd.x, dt.Tensor(torch.randn(3, 5, 4), (bd.batch, bd.time, bd.feature)))


def test_clip():
    bd, b, c, d = _operands(PAD_NAN)
    x = bd.x
    check_against_torch(lambda p: dt.clip(p, -0.5, 0.5), lambda p: torch.clamp(p, -0.5, 0.5), [x])
    check_against_torch(lambda p: dt.clip(p, min=0.0), lambda p: torch.clamp(p, min=0.0), [x])
    check_against_torch(lambda p: dt.clip(p, max=0.0), lambda p: torch.clamp(p, max=0.0), [x])
    lo = dt.Tensor(-c.raw, c.dims)
    check_against_torch(lambda p, lo_, hi: dt.clip(p, lo_, hi),
                        lambda p, lo_, hi: torch.clamp(p, lo_[:, None, :], hi.permute(2, 1, 0)),
                        [x, lo, d], expect_dims=x.dims)
    check_against_torch(lambda p, hi: dt.clip(p, None, hi), lambda p, hi: torch.clamp(p, None, hi), [x, b],
                        expect_dims=x.dims)
    i = dt.Tensor(torch.tensor([1, 5, 3]), (dt.Dim(3),))
    check_against_torch(lambda p: dt.clip(p, 2, 4), lambda p: torch.clamp(p, 2, 4), [i])
    # One tensor bound and one number bound (torch.clamp itself takes only two of a kind).
    check_against_torch(lambda p, lo_: dt.clip(p, lo_, 0.5),
                        lambda p, lo_: torch.clamp(p, lo_[:, None, :], torch.tensor(0.5)), [x, lo], expect_dims=x.dims)
    check_against_torch(lambda p, hi: dt.clip(p, -0.5, hi),
                        lambda p, hi: torch.clamp(p, torch.tensor(-0.5), hi.permute(2, 1, 0)), [x, d], expect_dims=x.dims)
    # min > max gives max everywhere, as in torch.clamp
    check_against_torch(lambda p, hi: dt.clip(p, 10.0, hi),
                        lambda p, hi: torch.clamp(p, torch.tensor(10.0), hi), [x, b], expect_dims=x.dims)
    check_against_torch(lambda p, lo_: dt.clip(p, lo_, -10.0),
                        lambda p, lo_: torch.clamp(p, lo_, torch.tensor(-10.0)), [x, b], expect_dims=x.dims)


def test_clip_errors():
    bd = make_padded_batch((2,), 2)
    with pytest.raises(ValueError, match=r"dimtorch\.clip\(\): give min, max or both \(both are None\)"):
        dt.clip(bd.x)
    with pytest.raises(TypeError, match=r"dimtorch\.clip\(\): expected a dimtorch\.Tensor, got float"):
        dt.clip(1.0, 0.0, 1.0)
    with pytest.raises(TypeError, match=r"dimtorch\.clip\(\): operands must be dimtorch\.Tensor or Python scalars .* got str"):
        dt.clip(bd.x, "a")
    t_only = dt.Tensor(torch.zeros(2), (bd.time,))
    b_f = dt.Tensor(torch.zeros(1, 2), (bd.batch, bd.feature))
    with pytest.raises(ValueError, match=r"dimtorch\.clip\(\): no operand has all dims of the others \(x: \(batch, feature\(2\)\); min: \(time\)\)"):
        dt.clip(b_f, t_only)


# ---- unary functions ---------------------------------------------------------------------------

UNARY = [
    ("exp", dt.exp, torch.exp, None),
    ("log", dt.log, torch.log, "positive"),
    ("log1p", dt.log1p, torch.log1p, "positive"),
    ("sqrt", dt.sqrt, torch.sqrt, "positive"),
    ("rsqrt", dt.rsqrt, torch.rsqrt, "positive"),
    ("square", dt.square, torch.square, None),
    ("tanh", dt.tanh, torch.tanh, None),
    ("sigmoid", dt.sigmoid, torch.sigmoid, None),
    ("relu", dt.relu, torch.relu, None),
    ("gelu", dt.gelu, F.gelu, None),
    ("silu", dt.silu, F.silu, None),
    ("softplus", dt.softplus, F.softplus, None),
    ("sin", dt.sin, torch.sin, None),
    ("cos", dt.cos, torch.cos, None),
    ("floor", dt.floor, torch.floor, None),
    ("ceil", dt.ceil, torch.ceil, None),
    ("round", dt.round, torch.round, None),
    ("abs", dt.abs, torch.abs, None),
    ("neg", dt.neg, torch.neg, None),
    ("log_sigmoid", dt.log_sigmoid, F.logsigmoid, None),
]


@pytest.mark.parametrize("pad_value", [PAD_NAN, PAD_LARGE], ids=["nan_pad", "large_pad"])
@pytest.mark.parametrize("name, fn, torch_fn, domain", UNARY, ids=[u[0] for u in UNARY])
def test_unary_functions(name, fn, torch_fn, domain, pad_value):
    bd = make_padded_batch((5, 3, 0), 4, pad_value=pad_value, extra_time=1)
    x = bd.x * 2.0
    if domain == "positive":
        x = _positive(x, 0.1)
    out, _ = check_against_torch(fn, torch_fn, [x], expect_dims=x.dims, rtol=1e-5, atol=1e-6)
    assert fn(x).feature_dim is bd.feature
    assert torch.isfinite(out[0][bd.mask]).all()  # padding never reaches valid frames


def test_unary_functions_on_other_dtypes():
    f = dt.Dim(4, name="f")
    i = dt.Tensor(torch.tensor([-2, 0, 3, 7]), (f,))
    for fn, torch_fn in ((dt.abs, torch.abs), (dt.neg, torch.neg), (dt.square, torch.square), (dt.exp, torch.exp),
                         (dt.relu, torch.relu), (dt.sqrt, torch.sqrt)):
        check_against_torch(fn, torch_fn, [i])
    d = dt.Tensor(torch.tensor([0.25, 1.5, -3.0, 4.0], dtype=torch.float64), (f,))
    check_against_torch(dt.softplus, F.softplus, [d])
    check_against_torch(dt.gelu, F.gelu, [d])


def test_is_finite_and_logical():
    f, g = dt.Dim(5, name="f"), dt.Dim(2, name="g")
    x = dt.Tensor(torch.tensor([[0.0, float("inf"), float("nan"), -float("inf"), 1e30]] * 2).t().contiguous(), (f, g))
    check_against_torch(dt.is_finite, torch.isfinite, [x])
    assert dt.is_finite(x).dtype == "bool"
    a = dt.Tensor(torch.tensor([True, False, True, False, True]), (f,))
    b = dt.Tensor(torch.tensor([[True, True, False, False, True], [False] * 5]).t().contiguous(), (f, g))
    check_against_torch(dt.logical_not, torch.logical_not, [a])
    check_against_torch(dt.logical_and, lambda p, q: torch.logical_and(p[:, None], q), [a, b], out_dims=(f, g),
                        expect_dims=(f, g))
    check_against_torch(dt.logical_or, lambda q, p: torch.logical_or(q, p[:, None]), [b, a], expect_dims=(f, g))
    check_against_torch(lambda p: dt.logical_and(p, True), lambda p: torch.logical_and(p, torch.tensor(True)), [a])
    check_against_torch(lambda p: dt.logical_or(False, p), lambda p: torch.logical_or(torch.tensor(False), p), [a])
    # logical ops on non-bool tensors follow torch (nonzero is true)
    n = dt.Tensor(torch.tensor([0.0, 2.0, 0.0, -1.0, 0.5]), (f,))
    check_against_torch(dt.logical_not, torch.logical_not, [n])
    check_against_torch(dt.logical_and, torch.logical_and, [n, a], backward=False)


@pytest.mark.parametrize("name", [u[0] for u in UNARY] + ["is_finite", "logical_not"])
def test_unary_function_bad_input(name):
    fn = getattr(dt, name)
    with pytest.raises(TypeError, match=rf"dimtorch\.{name}\(\): expected a dimtorch\.Tensor, got float"):
        fn(1.0)
    with pytest.raises(TypeError, match=rf"dimtorch\.{name}\(\): operand is a raw torch\.Tensor of shape torch\.Size\(\[2\]\)"):
        fn(torch.ones(2))


# ---- alignment semantics (DESIGN.md §2) ------------------------------------------------------


def test_output_keeps_dims_order_of_the_holder():
    bd, b, c, d = _operands(PAD_LARGE)
    x = bd.x
    assert (x + b).dims == x.dims and (b + x).dims == x.dims
    assert (x + c).dims == x.dims and (c + x).dims == x.dims
    assert (x + d).dims == x.dims  # both hold all: the first operand's order
    assert (d + x).dims == d.dims
    assert (x + b).dims is x.dims  # the holder's tuple itself, no new tuple
    assert (x + x).dims is x.dims


def test_feature_dim_follows_the_holder():
    bd, b, c, d = _operands(PAD_LARGE)
    x = bd.x  # feature_dim is feature
    assert (x + b).feature_dim is bd.feature
    assert (b + x).feature_dim is bd.feature
    assert (x * 2).feature_dim is bd.feature


def test_sparse_dim_propagation():
    f = dt.Dim(3, name="f")
    classes = dt.Dim(10, name="classes")
    labels = dt.Tensor(torch.tensor([1, 2, 3]), (f,), sparse_dim=classes)
    assert (labels + 1).sparse_dim is classes
    assert (labels + labels).sparse_dim is classes
    assert (labels == 1).sparse_dim is None
    plain = dt.Tensor(torch.tensor([1, 2, 3]), (f,))
    assert (labels + plain).sparse_dim is None


def test_size_mismatch_of_a_shared_dim():
    batch = dt.Dim(None, name="batch")
    feat = dt.Dim(4, name="feature")
    a = dt.Tensor(torch.randn(3, 4), (batch, feat))
    b = dt.Tensor(torch.randn(2, 4), (batch, feat))
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\.__add__\(\): dim 'batch'\(\?\) has raw size 3 in a but 2 in b"):
        a + b
    same_tuple = dt.Tensor(torch.randn(2, 4), a.dims)  # the same dims tuple: the no-plan fast path
    assert same_tuple.dims is a.dims
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\.__mul__\(\): dim 'batch'\(\?\) has raw size 3 in a but 2 in b \(dims: batch, feature\(4\)\)"):
        a * same_tuple
    with pytest.raises(ValueError, match=r"dimtorch\.maximum\(\): dim 'batch'\(\?\) has raw size 2 in a but 3 in b"):
        dt.maximum(same_tuple, a)
    b_t = dt.Tensor(torch.randn(4, 2), (feat, batch))
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\.__sub__\(\): dim 'batch'\(\?\) has raw size 3 in a but 2 in b \(a dims: batch:3, feature:4; b dims: feature:4, batch:2\)"):
        a - b_t
    b_only = dt.Tensor(torch.randn(5), (batch,))
    with pytest.raises(ValueError, match=r"dimtorch\.combine\(\): dim 'batch'\(\?\) has raw size 3 in a but 5 in b"):
        dt.combine(a, b_only, "mul")
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\.__lt__\(\): dim 'batch'\(\?\) has raw size 3 in b but 5 in a \(b dims: batch:3, feature:4; a dims: batch:5\)"):
        b_only < a
    cond = dt.Tensor(torch.ones(5, dtype=torch.bool), (batch,))
    with pytest.raises(ValueError, match=r"dimtorch\.where\(\): dim 'batch'\(\?\) has raw size 3 in true_value but 5 in condition"):
        dt.where(cond, a, 0.0)


def test_size_one_static_dim_and_zero_dim_tensors():
    one = dt.Dim(1, name="one")
    feat = dt.Dim(3, name="feature")
    a = dt.Tensor(torch.randn(1, 3), (one, feat))
    b = dt.Tensor(torch.randn(3), (feat,))
    check_against_torch(operator.add, operator.add, [a, b], expect_dims=a.dims)
    s = dt.Tensor(torch.tensor(2.0), ())
    check_against_torch(operator.mul, operator.mul, [a, s], expect_dims=a.dims)
    check_against_torch(operator.mul, operator.mul, [s, a], expect_dims=a.dims)
    check_against_torch(operator.mul, operator.mul, [s, s.copy()], expect_dims=())


def test_empty_tensors():
    batch = dt.Dim(None, name="batch")
    feat = dt.Dim(3, name="feature")
    a = dt.Tensor(torch.randn(0, 3), (batch, feat))
    b = dt.Tensor(torch.randn(3), (feat,))
    r = a + b
    assert r.shape == (0, 3) and r.dims == a.dims


def test_many_dims_alignment():
    dims = [dt.Dim(2 if i % 3 == 0 else 1, name=f"d{i}") for i in range(12)]
    g = torch.Generator().manual_seed(0)
    a = dt.Tensor(torch.randn([d.size for d in dims], generator=g), dims)
    rev = list(reversed(dims[::2]))
    b = dt.Tensor(torch.randn([d.size for d in rev], generator=g), rev)
    check_against_torch(operator.add, lambda p, q: p + align_raw(q, rev, dims), [a, b], expect_dims=a.dims)


# ---- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("op, name", [
    (operator.add, "__add__"), (operator.sub, "__sub__"), (operator.mul, "__mul__"),
    (operator.truediv, "__truediv__"), (operator.floordiv, "__floordiv__"), (operator.mod, "__mod__"),
    (operator.pow, "__pow__"), (operator.and_, "__and__"), (operator.or_, "__or__"), (operator.xor, "__xor__"),
    (operator.lt, "__lt__"), (operator.le, "__le__"), (operator.eq, "__eq__"), (operator.ne, "__ne__"),
    (operator.gt, "__gt__"), (operator.ge, "__ge__"),
])
def test_non_tensor_operands(op, name):
    bd = make_padded_batch((2,), 2)
    x = bd.x
    pat = rf"dimtorch\.Tensor\.{name}\(\): "
    with pytest.raises(TypeError, match=pat + r"operand is a raw torch\.Tensor of shape torch\.Size\(\[3\]\); wrap it with its dims: dimtorch\.Tensor\(raw, dims=\(\.\.\.\)\)"):
        op(x, torch.ones(3))
    with pytest.raises(TypeError, match=pat + r"operands must be dimtorch\.Tensor or Python scalars \(bool, int, float, complex\), got str"):
        op(x, "a")
    with pytest.raises(TypeError, match=pat + r".*got NoneType"):
        op(x, None)
    # On the left, comparisons reach the reflected slot (a < x calls x.__gt__(a)).
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\.__\w+__\(\): operands must be .* got list"):
        op([1.0], x)


def test_raw_torch_tensor_on_the_left():
    bd = make_padded_batch((2,), 2)
    with pytest.raises(TypeError, match=r"wrap it with its dims"):
        torch.ones(2, 2, 2) + bd.x


def test_numpy_operands_are_refused_on_both_sides():
    np = pytest.importorskip("numpy")
    bd = make_padded_batch((2,), 2)
    x = bd.x
    # Without Tensor.__array_ufunc__ = None, numpy would build an object array of Tensors here.
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\.__add__\(\): operands must be .* got numpy\.ndarray"):
        np.ones(2) + x
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\.__gt__\(\): .* got numpy\.ndarray"):
        np.ones(2) < x
    with pytest.raises(TypeError, match=r"got numpy\.ndarray"):
        x * np.ones(2)


def test_pow_modulus():
    bd = make_padded_batch((2,), 2)
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\.__pow__\(\): a modulus is not supported"):
        pow(bd.x, 2, 3)


def test_functions_bad_operands():
    bd = make_padded_batch((2,), 2)
    x = bd.x
    with pytest.raises(TypeError, match=r"dimtorch\.maximum\(\): operand is a raw torch\.Tensor"):
        dt.maximum(x, torch.ones(2))
    with pytest.raises(TypeError, match=r"dimtorch\.minimum\(\): at least one operand must be a dimtorch\.Tensor"):
        dt.minimum(1.0, 2.0)
    with pytest.raises(TypeError, match=r"dimtorch\.logical_and\(\): operands must be dimtorch\.Tensor or Python scalars .* got str"):
        dt.logical_and(x > 0, "yes")
    with pytest.raises(TypeError, match=r"dimtorch\.maximum\(\) missing required argument 'b'"):
        dt.maximum(x)
    # more operands (RETURNN frontend's *other_tensors) fold left to right
    torch.testing.assert_close(dt.maximum(x, -x, x * 2.0).raw, torch.maximum(torch.maximum(x.raw, -x.raw), x.raw * 2))
    torch.testing.assert_close(dt.minimum(x, 0.5, x * 2.0).raw, torch.clamp(x.raw, max=0.5).minimum(x.raw * 2))


# ---- property tests: random dim orders, subsets, scalars ------------------------------------------

from hypothesis import given, strategies as st  # noqa: E402


def _dim_pool():
    """Dims whose raw sizes coincide (2, 2, 2), so a wrong alignment gives wrong values, not an error."""
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor([2, 1]), (batch,)), name="time")
    return [batch, time, dt.Dim(2, name="feature"), dt.Dim(3, name="model"), dt.Dim(1, name="one"),
            dt.Dim(None, name="beam")]


_SIZES = {"batch": 2, "time": 2, "feature": 2, "model": 3, "one": 1, "beam": 2}


def _tensor_over(dims, gen, dtype=torch.float32):
    raw = torch.randn([_SIZES[d.name] for d in dims], generator=gen).to(dtype)
    return dt.Tensor(raw, dims)


def _expected_out_dims(dims_list, allow):
    """DESIGN.md §2: the first operand holding all dims, else (when allowed) the union in order."""
    for dims in dims_list:
        if all(all(any(d is e for e in dims) for d in other) for other in dims_list):
            return tuple(dims)
    if not allow:
        return None
    out = []
    for dims in dims_list:
        out += [d for d in dims if not any(d is e for e in out)]
    return tuple(out)


_subset = st.lists(st.integers(0, 5), unique=True, max_size=6)

BINARY_KINDS = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
    "maximum": torch.maximum, "minimum": torch.minimum,
}
COMPARE_KINDS = {"less": operator.lt, "equal": operator.eq, "greater_equal": operator.ge}


@given(a_idx=_subset, b_idx=_subset, kind=st.sampled_from(sorted(BINARY_KINDS) + sorted(COMPARE_KINDS)),
       allow=st.booleans(), scalar_side=st.sampled_from([None, None, "a", "b"]), seed=st.integers(0, 2**16))
def test_property_binary_alignment(a_idx, b_idx, kind, allow, scalar_side, seed):
    pool = _dim_pool()
    gen = torch.Generator().manual_seed(seed)
    a_dims, b_dims = [pool[i] for i in a_idx], [pool[i] for i in b_idx]
    a, b = _tensor_over(a_dims, gen), _tensor_over(b_dims, gen)
    is_compare = kind in COMPARE_KINDS
    op = COMPARE_KINDS[kind] if is_compare else BINARY_KINDS[kind]
    call = dt.compare if is_compare else dt.combine
    if scalar_side is not None:
        scalar = 0.75
        tensor = a if scalar_side == "b" else b
        args = [tensor, scalar] if scalar_side == "b" else [scalar, tensor]
        scalar_raw = torch.tensor(scalar)
        torch_fn = (lambda p, s: op(p, scalar_raw)) if scalar_side == "b" else (lambda s, p: op(scalar_raw, p))
        check_against_torch(lambda p, q: call(p, q, kind, allow_broadcast_all_sources=allow), torch_fn, args,
                            expect_dims=tensor.dims, rtol=1e-5, atol=1e-5)
        return
    out = _expected_out_dims([a_dims, b_dims], allow)
    if out is None:
        with pytest.raises(ValueError, match=r"no operand has all dims of the others"):
            call(a, b, kind)
        return
    check_against_torch(
        lambda p, q: call(p, q, kind, allow_broadcast_all_sources=allow),
        lambda p, q: op(align_raw(p, a_dims, out), align_raw(q, b_dims, out)),
        [a, b], expect_dims=out, rtol=1e-5, atol=1e-5)
    if not allow and not is_compare and kind in ("add", "sub", "mul", "truediv"):
        sym = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv}[kind]
        r = sym(a, b)
        assert r.dims == out
        torch.testing.assert_close(align_raw(r.raw, r.dims, out),
                                   sym(align_raw(a.raw, a_dims, out), align_raw(b.raw, b_dims, out)))


@given(c_idx=_subset, t_idx=_subset, f_idx=_subset, allow=st.booleans(),
       scalars=st.sampled_from(["", "t", "f", "tf"]), seed=st.integers(0, 2**16))
def test_property_where_alignment(c_idx, t_idx, f_idx, allow, scalars, seed):
    pool = _dim_pool()
    gen = torch.Generator().manual_seed(seed)
    c_dims, t_dims, f_dims = ([pool[i] for i in idx] for idx in (c_idx, t_idx, f_idx))
    cond = dt.Tensor(torch.rand([_SIZES[d.name] for d in c_dims], generator=gen) > 0.5, c_dims)
    tv = 1.5 if "t" in scalars else _tensor_over(t_dims, gen)
    fv = -2.0 if "f" in scalars else _tensor_over(f_dims, gen)
    tensors = [v for v in (cond, tv, fv) if isinstance(v, dt.Tensor)]
    out = _expected_out_dims([v.dims for v in tensors], allow)
    if out is None:
        with pytest.raises(ValueError, match=r"dimtorch\.where\(\): no operand has all dims of the others"):
            dt.where(cond, tv, fv)
        return

    def torch_fn(k, p, q):
        def al(v, src):
            return align_raw(v, src.dims, out) if isinstance(src, dt.Tensor) else v
        return torch.where(al(k, cond), al(p, tv), al(q, fv))

    check_against_torch(lambda k, p, q: dt.where(k, p, q, allow_broadcast_all_sources=allow), torch_fn,
                        [cond, tv, fv], expect_dims=out)


@given(x_idx=st.permutations(range(6)), n=st.integers(0, 6), lo_idx=_subset, use_hi=st.booleans(),
       seed=st.integers(0, 2**16))
def test_property_clip_alignment(x_idx, n, lo_idx, use_hi, seed):
    pool = _dim_pool()
    gen = torch.Generator().manual_seed(seed)
    x_dims = [pool[i] for i in x_idx[:n]]
    lo_dims = [d for d in (pool[i] for i in lo_idx) if any(d is e for e in x_dims)]
    x = _tensor_over(x_dims, gen)
    lo = _tensor_over(lo_dims, gen) - 0.5
    hi = 0.5 if use_hi else None
    check_against_torch(lambda p, q: dt.clip(p, q, hi),
                        lambda p, q: torch.clamp(p, align_raw(q, lo_dims, x_dims), None if hi is None else torch.tensor(hi)),
                        [x, lo],
                        expect_dims=tuple(x_dims))


@given(perm=st.permutations(range(6)), n=st.integers(0, 6), extra=_subset)
def test_property_raw_aligned_and_copy_transpose(perm, n, extra):
    pool = _dim_pool()
    gen = torch.Generator().manual_seed(0)
    dims = [pool[i] for i in perm[:n]]
    x = _tensor_over(dims, gen)
    target = list(reversed(dims)) + [pool[i] for i in extra if not any(pool[i] is d for d in dims)]
    torch.testing.assert_close(x.raw_aligned(target), align_raw(x.raw, dims, target))
    t = x.copy_transpose(list(reversed(dims)))
    assert t.dims == tuple(reversed(dims))
    torch.testing.assert_close(t.raw, align_raw(x.raw, dims, reversed(dims)))


def test_plans_of_dead_dims_never_serve_new_dims_at_their_addresses():
    """Plans keep their dims as borrowed pointers, and CPython gives a dead dim's memory to the next
    new one. A plan made for static dims checks no sizes; if it survived its dims, new dims sized
    from data at their addresses would skip the check of their raw sizes (and broadcast 1 against
    3 silently). A dying dim must evict its plans."""
    reused = 0
    for _ in range(50):
        a, b = dt.Dim(3, name="a"), dt.Dim(4, name="b")
        ids = (id(a), id(b))
        x, y = dt.Tensor(torch.randn(3, 4), (a, b)), dt.Tensor(torch.randn(4, 3), (b, a))
        assert torch.equal((x + y).raw, x.raw + y.raw.t())
        dt.matmul(x, y, reduce=b)  # a matmul plan too: a is a batch dim of both
        del x, y
        del b  # freed last to first: the next two dims take a's memory, then b's
        del a
        a2, b2 = dt.Dim(None, name="a2"), dt.Dim(None, name="b2")
        reused += (id(a2), id(b2)) == ids
        x2, y2 = dt.Tensor(torch.randn(3, 4), (a2, b2)), dt.Tensor(torch.randn(4, 1), (b2, a2))
        with pytest.raises(ValueError, match=r"dim 'a2'\(\?\) has raw size 3 in a but 1 in b"):
            x2 + y2
        with pytest.raises(ValueError, match=r"dimtorch.matmul\(\): dim 'a2'\(\?\) has raw size 3 in a but 1 in b"):
            dt.matmul(x2, y2, reduce=b2)
        del x2, y2, b2, a2
    assert reused > 0  # the case this test is about happened


# ---- Python-only elementwise ops of rf: is_infinite, is_neg_infinite, expm1, elu, selu, lerp --------------------

@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("name, torch_fn", [("expm1", torch.expm1), ("elu", F.elu), ("selu", F.selu),
                                            ("is_infinite", torch.isinf), ("is_neg_infinite", torch.isneginf)])
def test_rf_unary_against_torch(name, torch_fn, pad):
    pb = make_padded_batch((5, 3, 0, 1), pad_value=pad, extra_time=1)
    raw = pb.x.raw.clone()
    raw[0, 0, :2] = torch.tensor([float("inf"), float("-inf")])
    x = dt.Tensor(raw, pb.x.dims, feature_dim=pb.feature)
    bool_out = name.startswith("is_")
    check_against_torch(lambda t: getattr(dt, name)(t), torch_fn, [x.copy_transpose((pb.time, pb.feature, pb.batch))],
                        backward=not bool_out)
    out = getattr(dt, name)(x)
    assert out.feature_dim is pb.feature and out.dtype == ("bool" if bool_out else "float32")
    check_batch_independence(lambda t, m: getattr(dt, name)(t), pb.x, pb.batch, pb.time)
    with pytest.raises(TypeError, match=rf"dimtorch\.{name}\(\): operand is a raw torch\.Tensor|"
                                        rf"dimtorch\.{name}\(\): expected a dimtorch\.Tensor"):
        getattr(dt, name)(raw)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_lerp_against_torch(pad):
    pb = make_padded_batch((5, 3, 0, 1), pad_value=pad, extra_time=1)
    end = make_padded_batch((5, 3, 0, 1), pad_value=pad, extra_time=1, seed=1, dims=(pb.batch, pb.time, pb.feature)).x
    weight = dt.Tensor(torch.rand(4), (pb.batch,))
    check_against_torch(lambda a, b: dt.lerp(a, b, 0.3), lambda a, b: torch.lerp(a, b, 0.3), [pb.x, end])
    # end in another dims order, a per-sequence weight (broadcast by dims)
    check_against_torch(lambda a, b, w: dt.lerp(a, b, w),
                        lambda a, b, w: a + w[:, None, None] * (b.permute(1, 2, 0) - a),
                        [pb.x, end.copy_transpose((pb.feature, pb.batch, pb.time)), weight],
                        out_dims=(pb.batch, pb.time, pb.feature))
    check_batch_independence(lambda a, m: dt.lerp(a, a * 2.0, 0.25), pb.x, pb.batch, pb.time)
    other = dt.Dim(3, name="other")
    with pytest.raises(ValueError, match=r"dimtorch\.lerp\(\): no operand has all dims of the others"):
        dt.lerp(pb.x, dt.Tensor(torch.zeros(3), (other,)), 0.5)
    out = dt.lerp(dt.Tensor(torch.zeros(2), (dt.Dim(2, name="a"),)), dt.Tensor(torch.ones(3), (other,)), 0.5,
                  allow_broadcast_all_sources=True)
    assert [d.name for d in out.dims] == ["a", "other"] and torch.equal(out.raw, torch.full((2, 3), 0.5))
    with pytest.raises(TypeError, match=r"dimtorch\.lerp\(\): end must be a dimtorch\.Tensor"):
        dt.lerp(pb.x, 1.0, 0.5)
    with pytest.raises(TypeError, match=r"dimtorch\.lerp\(\): weight must be a number or a dimtorch\.Tensor"):
        dt.lerp(pb.x, pb.x, "half")


def test_combine_and_compare_take_returnn_frontends_order():
    """combine(a, kind, b) as RETURNN frontend orders it (the str is the kind), and dim_order; the same
    torch call as dimtorch's order (the C++ fast path swaps the two arguments)."""
    pb = make_padded_batch((3, 1), feature=2)
    y = dt.Tensor(torch.randn(2), (pb.feature,))
    for a, b in ((pb.x, y), (pb.x, 2.0)):
        torch.testing.assert_close(dt.combine(a, "sub", b).raw, dt.combine(a, b, "sub").raw, equal_nan=True)
        assert torch.equal(dt.compare(a, ">", b).raw, dt.compare(a, b, ">").raw)
    out = dt.combine(y, "+", pb.x, allow_broadcast_all_sources=True, dim_order=(pb.time, pb.batch))
    assert out.dims == (pb.time, pb.batch, pb.feature)
    torch.testing.assert_close(out.raw, (y.raw + pb.x.raw).permute(1, 0, 2), equal_nan=True)
    assert dt.compare(pb.x, "==", pb.x, dim_order=(pb.feature,)).dims == (pb.feature, pb.batch, pb.time)
