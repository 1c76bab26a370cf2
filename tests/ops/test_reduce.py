"""Tests of src/ops/reduce.cpp: masked reductions and softmax/log_softmax against hand-masked torch, forward and
backward."""
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

import dimtorch as dt
from helpers import (PAD_LARGE, PAD_NAN, align_raw, check_against_torch, check_batch_independence,
                     check_padding_invariance, make_padded_batch)

FLOAT_REDUCTIONS = ["sum", "mean", "max", "min", "logsumexp"]


def dt_reduce(kind):
    return getattr(dt, f"reduce_{kind}")


def torch_masked_reduce(kind, raw, mask, axes):
    """Hand-written masked reduction: `mask` (bool, broadcastable to raw) False on padding."""
    axes = tuple(axes)
    if kind in ("sum", "mean"):
        s = torch.where(mask, raw, 0).sum(axes)
        if kind == "sum":
            return s
        count = mask.expand(raw.shape).sum(axes).clamp(min=1)
        return s / count
    if kind in ("max", "argmax", "logsumexp"):
        low = -math.inf if raw.is_floating_point() else torch.iinfo(raw.dtype).min
        r = torch.where(mask, raw, low)
        return {"max": lambda: r.amax(axes), "argmax": lambda: r.argmax(axes[0]),
                "logsumexp": lambda: r.logsumexp(axes)}[kind]()
    if kind in ("min", "argmin"):
        high = math.inf if raw.is_floating_point() else torch.iinfo(raw.dtype).max
        r = torch.where(mask, raw, high)
        return r.amin(axes) if kind == "min" else r.argmin(axes[0])
    if kind == "any":
        return torch.where(mask, raw, False).any(axes[0]) if len(axes) == 1 else torch.where(mask, raw, False).flatten(0, 1).any(0)
    if kind == "all":
        return torch.where(mask, raw, True).all(axes[0]) if len(axes) == 1 else torch.where(mask, raw, True).flatten(0, 1).all(0)
    raise ValueError(kind)


def axis_cases(pb):
    """(name, dims to reduce, raw axes, whether the time padding is masked)."""
    b, t, f = pb.batch, pb.time, pb.feature
    return {
        "time": ((t,), (1,), True),
        "batch_time": ((b, t), (0, 1), True),
        "batch": ((b,), (0,), True),  # time's lengths vary along batch: masked
        "feature": ((f,), (2,), False),
        "time_feature": ((t, f), (1, 2), True),
    }


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE, -PAD_LARGE])
@pytest.mark.parametrize("case", ["time", "batch_time", "batch", "feature", "time_feature"])
@pytest.mark.parametrize("kind", FLOAT_REDUCTIONS)
def test_float_reduction_against_torch(kind, case, pad):
    pb = make_padded_batch((5, 3, 1), pad_value=pad, extra_time=1)
    dims, axes, masked = axis_cases(pb)[case]
    mask = pb.mask[:, :, None] if masked else torch.ones((), dtype=torch.bool)
    check_against_torch(lambda x: dt_reduce(kind)(x, axis=dims),
                        lambda r: torch_masked_reduce(kind, r, mask, axes), [pb.x])


@pytest.mark.parametrize("kind", ["argmax", "argmin"])
@pytest.mark.parametrize("pad", [PAD_LARGE, -PAD_LARGE, PAD_NAN])
def test_arg_reduction_never_picks_padding(kind, pad):
    pb = make_padded_batch((5, 3, 1), pad_value=pad, extra_time=2)
    out, _ = check_against_torch(lambda x: dt_reduce(kind)(x, axis=pb.time),
                                 lambda r: torch_masked_reduce(kind, r, pb.mask[:, :, None], (1,)),
                                 [pb.x], backward=False)
    idx = out[0]
    assert (idx < torch.tensor(pb.lengths)[:, None]).all()
    res = dt_reduce(kind)(pb.x, axis=pb.time)
    assert res.sparse_dim is pb.time and res.dtype == "int64"


@pytest.mark.parametrize("kind", ["any", "all"])
@pytest.mark.parametrize("case", ["time", "batch_time"])
def test_bool_reduction_against_torch(kind, case):
    pb = make_padded_batch((5, 3, 0, 1), extra_time=1)
    raw = pb.x.raw > 0
    raw[~pb.mask] = kind == "any"  # padding holds the value that would change the result
    x = dt.Tensor(raw, pb.x.dims)
    dims, axes, _ = axis_cases(pb)[case]
    check_against_torch(lambda x: dt_reduce(kind)(x, axis=dims),
                        lambda r: torch_masked_reduce(kind, r, pb.mask[:, :, None], axes), [x])


@pytest.mark.parametrize("kind", ["sum", "max", "min"])
def test_integer_reduction_uses_dtype_limits(kind):
    pb = make_padded_batch((4, 2, 1), extra_time=1, pad_value=0.0)
    raw = (pb.x.raw * 100).to(torch.int32)
    raw[~pb.mask] = 2**31 - 1 if kind != "min" else -(2**31)
    x = dt.Tensor(raw, pb.x.dims)
    out = dt_reduce(kind)(x, axis=pb.time)
    assert out.dtype == ("int64" if kind == "sum" else "int32")
    expected = torch_masked_reduce(kind, raw, pb.mask[:, :, None], (1,))
    torch.testing.assert_close(out.raw, expected)


@pytest.mark.parametrize("kind", FLOAT_REDUCTIONS)
def test_padding_invariance_and_finite_grads(kind):
    # Lengths 0 and 1 included: a length-0 sequence gives the neutral value, no NaN in gradients.
    outs, _ = check_padding_invariance(lambda x: dt_reduce(kind)(x, axis=x.dims[1]), (5, 3, 0, 1))
    neutral = {"sum": 0.0, "mean": 0.0, "max": -math.inf, "min": math.inf, "logsumexp": -math.inf}[kind]
    assert (outs[0][2] == neutral).all(), outs[0][2]
    assert not torch.isnan(outs[0]).any()


@pytest.mark.parametrize("kind", FLOAT_REDUCTIONS + ["argmax", "argmin"])
def test_batch_independence(kind):
    pb = make_padded_batch((6, 3, 1, 0), pad_value=PAD_NAN, extra_time=1)
    check_batch_independence(lambda x, m: dt_reduce(kind)(x, axis=m(pb.time)), pb.x, pb.batch, pb.time)


def test_length_one_sequence_is_its_frame():
    pb = make_padded_batch((1, 1), pad_value=PAD_LARGE, extra_time=2)
    for kind in ("sum", "mean", "max", "min", "logsumexp"):
        out = dt_reduce(kind)(pb.x, axis=pb.time)
        torch.testing.assert_close(out.raw, pb.x.raw[:, 0], msg=kind)


def test_use_mask_false_reduces_padding_too():
    pb = make_padded_batch((3, 1), pad_value=1.0, extra_time=0)
    out = dt.reduce_sum(pb.x, axis=pb.time, use_mask=False)
    torch.testing.assert_close(out.raw, pb.x.raw.sum(1))


def test_output_dims_and_feature_dim():
    pb = make_padded_batch((3, 2))
    out = dt.reduce_mean(pb.x, axis=pb.time)
    assert out.dims == (pb.batch, pb.feature) and out.feature_dim is pb.feature
    out = dt.reduce_mean(pb.x, axis=[pb.feature, pb.batch])
    assert out.dims == (pb.time,) and out.feature_dim is None


@settings(max_examples=25)
@given(perm=st.permutations([0, 1, 2]), kind=st.sampled_from(FLOAT_REDUCTIONS),
       n_axes=st.integers(1, 2), seed=st.integers(0, 1000))
def test_dim_orders_fuzzed(perm, kind, n_axes, seed):
    """Any raw dims order, reducing time (and another dim), gives the batch-major result."""
    pb = make_padded_batch((4, 2, 0), pad_value=PAD_NAN, extra_time=1, seed=seed)
    dims = [pb.x.dims[i] for i in perm]
    x = dt.Tensor(pb.x.raw.permute(*perm), tuple(dims))
    red = (pb.time,) if n_axes == 1 else (pb.time, pb.feature)
    out = dt_reduce(kind)(x, axis=red)
    axes = (1,) if n_axes == 1 else (1, 2)
    expected = torch_masked_reduce(kind, pb.x.raw, pb.mask[:, :, None], axes)
    got = align_raw(out.raw, out.dims, [d for d in (pb.batch, pb.time, pb.feature) if d not in red])
    torch.testing.assert_close(got, expected, equal_nan=True)


def test_lengths_over_two_batch_dims():
    beam, batch, feat = dt.Dim(2, name="beam"), dt.Dim(None, name="batch"), dt.Dim(3, name="feature")
    lengths = torch.tensor([[3, 0, 2], [1, 4, 2]])  # (beam, batch)
    time = dt.Dim(dt.Tensor(lengths, (beam, batch)), name="time")
    raw = torch.randn(3, 4, 2, 3)  # (batch, time, beam, feat)
    mask = torch.arange(4)[None, :, None] < lengths.t()[:, None, :]  # (batch, time, beam)
    raw[~mask] = float("nan")
    x = dt.Tensor(raw, (batch, time, beam, feat))
    check_against_torch(lambda x: dt.reduce_mean(x, axis=time),
                        lambda r: torch_masked_reduce("mean", r, mask[..., None], (1,)), [x])
    check_against_torch(lambda x: dt.reduce_max(x, axis=(beam, time)),
                        lambda r: torch_masked_reduce("max", r, mask[..., None], (1, 2)), [x])


def test_reduce_over_missing_dim_raises():
    pb = make_padded_batch((3, 2))
    other = dt.Dim(4, name="other")
    with pytest.raises(ValueError, match=r"dimtorch\.reduce_sum\(\): dim .*'other'.* is not in x \(dims: .*batch"):
        dt.reduce_sum(pb.x, axis=other)
    with pytest.raises(ValueError, match=r"dimtorch\.reduce_mean\(\): dim .*'time'.* twice"):
        dt.reduce_mean(pb.x, axis=(pb.time, pb.time))
    with pytest.raises(ValueError, match=r"dimtorch\.reduce_argmax\(\): axis must be a single dim"):
        dt.reduce_argmax(pb.x, axis=(pb.time, pb.feature))
    with pytest.raises(ValueError, match=r"dimtorch\.reduce_max\(\): axis must name at least one dim"):
        dt.reduce_max(pb.x, axis=())
    with pytest.raises(TypeError, match=r"dimtorch\.reduce_sum\(\): x must be a dimtorch\.Tensor"):
        dt.reduce_sum(pb.x.raw, axis=pb.time)


def test_masked_reduce_without_the_lengths_batch_dim_raises():
    pb = make_padded_batch((3, 2))
    x = dt.Tensor(pb.x.raw[0], (pb.time, pb.feature))  # time's lengths are over batch, absent here
    with pytest.raises(ValueError, match=r"dimtorch\.reduce_sum\(\): the lengths of dim .*time.* are over .*batch"):
        dt.reduce_sum(x, axis=pb.time)


@pytest.mark.parametrize("kind", FLOAT_REDUCTIONS)
def test_reduce_over_batch_with_frames_beyond_every_length(kind):
    # time's lengths vary along batch, so time is masked; frames past the longest are all padding.
    check_padding_invariance(lambda x: dt_reduce(kind)(x, axis=x.dims[0]), (5, 3, 0, 1), extra_time=2)
    check_padding_invariance(lambda x: dt_reduce(kind)(x, axis=x.dims[:2]), (5, 3, 0, 1), extra_time=2)


@pytest.mark.parametrize("kind", FLOAT_REDUCTIONS + ["argmax", "argmin"])
def test_all_sequences_empty(kind):
    """A batch whose sequences all have length 0 (raw time size 0) gives the neutral value, as a
    length-0 sequence does inside a batch, and backpropagates (to an empty gradient)."""
    pb = make_padded_batch((0, 0))
    leaf = pb.x.raw.clone().requires_grad_(True)
    out = dt_reduce(kind)(dt.Tensor(leaf, pb.x.dims), axis=pb.time)
    assert out.dims == (pb.batch, pb.feature)
    neutral = {"sum": 0.0, "mean": 0.0, "max": -math.inf, "min": math.inf, "logsumexp": -math.inf,
               "argmax": 0, "argmin": 0}[kind]
    assert (out.raw == neutral).all()
    assert out.dtype == ("int64" if kind.startswith("arg") else "float32")
    if not kind.startswith("arg"):
        torch.nan_to_num(out.raw, 0.0, 0.0, 0.0).sum().backward()
        assert leaf.grad is not None and leaf.grad.shape == (2, 0, 4)


def test_all_sequences_empty_integer_max():
    pb = make_padded_batch((0, 0))
    x = dt.Tensor(pb.x.raw.to(torch.int32), pb.x.dims)
    assert (dt.reduce_max(x, axis=pb.time).raw == -(2**31)).all()
    assert dt.reduce_max(x, axis=pb.time).dtype == "int32"


def test_keyword_names_made_at_run_time():
    # Keyword names at call sites are interned and found by pointer; names built at run time are
    # other str objects and must be found by their text.
    b, f = dt.Dim(None, name="batch"), dt.Dim(4, name="feature")
    x = dt.Tensor(torch.randn(2, 4), (b, f))
    axis_kw, mask_kw = "".join(["ax", "is"]), "".join(["use_", "mask"])
    out = dt.reduce_sum(x, **{axis_kw: f, mask_kw: False})
    torch.testing.assert_close(out.raw, x.raw.sum(1))
    with pytest.raises(TypeError, match=r"dimtorch.reduce_sum\(\) got an unexpected keyword argument 'axes'"):
        dt.reduce_sum(x, **{"".join(["ax", "es"]): f})
    with pytest.raises(TypeError, match=r"dimtorch.reduce_sum\(\) got multiple values for argument 'axis'"):
        dt.reduce_sum(x, f, **{axis_kw: f})


# ---- softmax / log_softmax (masked; src/ops/reduce.cpp) ----

SOFTMAXES = {"softmax": (dt.softmax, torch.softmax), "log_softmax": (dt.log_softmax, torch.log_softmax)}


def masked_softmax(log, raw, mask, axis):
    """Hand-written: padding -inf before, probability 0 (log: -inf) after."""
    out = (torch.log_softmax if log else torch.softmax)(torch.where(mask, raw, -math.inf), axis)
    return torch.where(mask, out, -math.inf if log else 0.0)


# ---- softmax / log_softmax ----

@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE, -PAD_LARGE])
@pytest.mark.parametrize("case", ["time", "batch", "feature"])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_against_torch(name, case, pad):
    pb = make_padded_batch((5, 3, 1), pad_value=pad, extra_time=1)
    dim, axis, masked = {"time": (pb.time, 1, True), "batch": (pb.batch, 0, True),
                         "feature": (pb.feature, 2, False)}[case]
    mask = pb.mask[:, :, None] if masked else torch.ones((1, 1, 1), dtype=torch.bool)
    log = name == "log_softmax"
    check_against_torch(lambda x: SOFTMAXES[name][0](x, axis=dim),
                        lambda r: masked_softmax(log, r, mask, axis), [pb.x], expect_dims=pb.x.dims)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_padding_gets_probability_zero(name):
    pb = make_padded_batch((4, 2, 0, 1), pad_value=PAD_NAN, extra_time=1)
    y = SOFTMAXES[name][0](pb.x, axis=pb.time).raw
    pad = ~pb.mask
    if name == "softmax":
        assert (y[pad] == 0).all()
        torch.testing.assert_close(y[[0, 1, 3]].sum(1), torch.ones(3, 4))
        assert (y[3, 0] == 1).all()  # length 1: all the mass on the one frame
    else:
        assert (y[pad] == -math.inf).all()
        assert (y[3, 0] == 0).all()
    assert not y.isnan().any()


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_padding_invariance_and_finite_grads(name):
    outs, _ = check_padding_invariance(lambda x: SOFTMAXES[name][0](x, axis=x.dims[1]), (5, 3, 0, 1))
    assert not outs[0].isnan().any()


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_over_batch_with_frames_beyond_every_length(name):
    # time is masked (its lengths vary along batch); frames past the longest are all padding.
    check_padding_invariance(lambda x: SOFTMAXES[name][0](x, axis=x.dims[0]), (5, 3, 0, 1), extra_time=2)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_batch_independence(name):
    pb = make_padded_batch((6, 3, 1), pad_value=PAD_NAN, extra_time=1)
    check_batch_independence(lambda x, m: SOFTMAXES[name][0](x, axis=m(pb.time)), pb.x, pb.batch, pb.time)


def test_softmax_use_mask_false_is_plain_torch():
    pb = make_padded_batch((5, 3), pad_value=1.0)
    y = dt.softmax(pb.x, axis=pb.time, use_mask=False)
    torch.testing.assert_close(y.raw, torch.softmax(pb.x.raw, 1))


@settings(max_examples=20)
@given(perm=st.permutations([0, 1, 2]), seed=st.integers(0, 100))
def test_softmax_dim_orders_fuzzed(perm, seed):
    pb = make_padded_batch((4, 2, 0), pad_value=PAD_NAN, extra_time=1, seed=seed)
    dims = tuple(pb.x.dims[i] for i in perm)
    x = dt.Tensor(pb.x.raw.permute(*perm), dims)
    y = dt.softmax(x, axis=pb.time)
    assert y.dims == dims
    got = align_raw(y.raw, dims, pb.x.dims)
    torch.testing.assert_close(got, masked_softmax(False, pb.x.raw, pb.mask[:, :, None], 1))


def test_softmax_bad_input():
    pb = make_padded_batch((3, 2))
    empty = dt.Dim(0, name="empty")
    x = dt.Tensor(torch.zeros(2, 0), (pb.batch, empty))
    with pytest.raises(ValueError, match=r"dimtorch\.softmax\(\): dim .*'empty'.* has size 0 in x \(dims: batch:2, empty:0\)"):
        dt.softmax(x, axis=empty)
    with pytest.raises(ValueError, match=r"dimtorch\.log_softmax\(\): dim .*'empty'.* has size 0"):
        dt.log_softmax(x, axis=empty)
    with pytest.raises(ValueError, match=r"dimtorch\.softmax\(\): dim .*'other'.* is not in x"):
        dt.softmax(pb.x, axis=dt.Dim(2, name="other"))
    with pytest.raises(TypeError, match=r"dimtorch\.softmax\(\): axis must be a Dim"):
        dt.softmax(pb.x, axis=(pb.time,))
    with pytest.raises(TypeError, match=r"dimtorch\.softmax\(\): x must be a dimtorch\.Tensor"):
        dt.softmax(pb.x.raw, axis=pb.time)
# ---- reduce_logmeanexp (a Python definition in ops/reduce.py) ------------------------------------------------

def torch_logmeanexp(raw, mask, axes):
    """Hand-written: logsumexp over the valid frames minus the log of their count (at least 1)."""
    count = mask.expand(raw.shape).sum(tuple(axes)).clamp(min=1)
    return torch.where(mask, raw, -math.inf).logsumexp(tuple(axes)) - torch.log(count.float())


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE, -PAD_LARGE])
@pytest.mark.parametrize("case", ["time", "batch_time", "batch", "feature", "time_feature"])
def test_reduce_logmeanexp_against_torch(case, pad):
    pb = make_padded_batch((5, 3, 1, 0), pad_value=pad, extra_time=1)
    dims, axes, masked = axis_cases(pb)[case]
    mask = pb.mask[:, :, None] if masked else torch.ones(1, 1, 1, dtype=torch.bool)
    out_dims = [d for d in (pb.batch, pb.time, pb.feature) if d not in dims]
    check_against_torch(lambda x: dt.reduce_logmeanexp(x, axis=dims), lambda r: torch_logmeanexp(r, mask, axes),
                        [pb.x], out_dims=out_dims)


def test_reduce_logmeanexp_per_sequence_and_use_mask():
    # each sequence alone; a length-0 sequence gives -inf with finite gradients
    outs, _ = check_padding_invariance(lambda x: dt.reduce_logmeanexp(x, axis=x.dims[1]), (5, 3, 0, 1))
    assert (outs[0][2] == -math.inf).all()
    pb = make_padded_batch((6, 3, 1), pad_value=PAD_NAN, extra_time=1)
    check_batch_independence(lambda x, m: dt.reduce_logmeanexp(x, axis=m(pb.time)), pb.x, pb.batch, pb.time)
    # a frame repeated: its logmeanexp is itself
    one = make_padded_batch((1, 1), pad_value=PAD_LARGE, extra_time=2)
    torch.testing.assert_close(dt.reduce_logmeanexp(one.x, axis=one.time).raw, one.x.raw[:, 0])
    # without the mask: every raw frame counts
    x = make_padded_batch((3, 2), pad_value=0.5).x
    torch.testing.assert_close(dt.reduce_logmeanexp(x, axis=x.dims[1], use_mask=False).raw,
                               x.raw.logsumexp(1) - math.log(3))
    # lengths over two batch dims, reduced over one of them and time
    beam, batch = dt.Dim(2, name="beam"), dt.Dim(None, name="batch")
    lengths = torch.tensor([[3, 0, 2], [1, 4, 2]])
    time = dt.Dim(dt.Tensor(lengths, (beam, batch)), name="time")
    raw = torch.randn(3, 4, 2)
    mask = torch.arange(4)[None, :, None] < lengths.t()[:, None, :]
    raw[~mask] = float("nan")
    check_against_torch(lambda x: dt.reduce_logmeanexp(x, axis=(beam, time)),
                        lambda r: torch_logmeanexp(r, mask, (1, 2)), [dt.Tensor(raw, (batch, time, beam))])


def test_reduce_logmeanexp_errors():
    pb = make_padded_batch((3, 2))
    with pytest.raises(ValueError, match=r"dimtorch\.reduce_logmeanexp\(\): dim 'other'\(2\) is not in x"):
        dt.reduce_logmeanexp(pb.x, axis=dt.Dim(2, name="other"))
    with pytest.raises(TypeError, match=r"dimtorch\.reduce_logmeanexp\(\): x must be a dimtorch\.Tensor"):
        dt.reduce_logmeanexp(pb.x.raw, axis=pb.time)
    with pytest.raises(TypeError, match=r"dimtorch\.reduce_logmeanexp\(\).*use axis="):
        dt.reduce_logmeanexp(pb.x, dim=pb.time)
