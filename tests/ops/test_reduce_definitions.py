"""The reduction, moments and softmax fast paths (src/ops/reduce.cpp) against their Python
definitions (dimtorch/ops/reduce.py): any dims order and set of reduced dims, masking, length-0
sequences, dtypes, errors."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, strategies as st

import dimtorch as dt

from definition_checks import check, check_either, check_error, padded
from helpers import PAD_LARGE, PAD_NAN

REDUCE = [dt.reduce_sum, dt.reduce_mean, dt.reduce_max, dt.reduce_min, dt.reduce_logsumexp, dt.reduce_any,
          dt.reduce_all, dt.reduce_argmax, dt.reduce_argmin]
lengths_st = st.lists(st.integers(0, 4), min_size=1, max_size=3)
pads = st.sampled_from([PAD_NAN, PAD_LARGE, -PAD_LARGE])


def _axis(dims, picks):
    chosen = tuple(d for d, p in zip(dims, picks) if p)
    return chosen or dims[1]


@pytest.mark.parametrize("op", REDUCE + [dt.moments, dt.reduce_logmeanexp])
@given(perm=st.permutations([0, 1, 2, 3]), lengths=lengths_st, extra=st.integers(0, 2), pad=pads,
       picks=st.lists(st.booleans(), min_size=4, max_size=4), reverse=st.booleans(), use_mask=st.booleans(),
       dtype=st.sampled_from([torch.float32, torch.float64, torch.int64, torch.bool]))
def test_reductions_any_layout(op, perm, lengths, extra, pad, picks, reverse, use_mask, dtype):
    x, dims = padded(lengths, extra=extra, pad=pad, dtype=dtype, perm=perm)
    vocab = dt.Dim(5, name="vocab")
    x = dt.Tensor(x.raw, x.dims, sparse_dim=vocab if dtype == torch.int64 else None, feature_dim=x.feature_dim)
    axis = _axis(dims, picks)
    if reverse and isinstance(axis, tuple):
        axis = axis[::-1]
    if op in (dt.reduce_argmax, dt.reduce_argmin) and isinstance(axis, tuple):
        axis = axis[0] if len(axis) == 1 or reverse else axis
    check_either(op, x, axis, use_mask=use_mask)


@pytest.mark.parametrize("op", REDUCE + [dt.moments, dt.reduce_logmeanexp])
@pytest.mark.parametrize("lengths", [(0,), (0, 0), (3, 0, 1)])
def test_length_0_sequences(op, lengths):
    """Neutral results, no NaN in values or gradients, also where every sequence is empty (an empty
    raw axis, which torch's max/argmax refuse)."""
    x, (batch, time, feature, heads) = padded(lengths, extra=0)
    for axis in (time, (time, feature), (batch, time), (heads, time, batch)):
        if op in (dt.reduce_argmax, dt.reduce_argmin) and isinstance(axis, tuple):
            continue
        out = check_either(op, x, axis)
        for o in out if isinstance(out, tuple) else (out,):
            if o.raw.is_floating_point() and op not in (dt.reduce_max, dt.reduce_min, dt.reduce_logsumexp):
                assert not o.raw.isnan().any(), (op, axis)


def test_mean_count_paths():
    """The three ways a masked mean counts valid frames (lengths total, lengths kept, mask sum), and
    lengths over two batch dims."""
    x, (batch, time, feature, heads) = padded((4, 2, 0, 1), extra=2)
    for axis in [(time,), (time, feature), (batch, time), (batch, time, heads), (batch,), (batch, heads),
                 (feature, time, batch, heads)]:
        for op in (dt.reduce_mean, dt.moments):
            check(op, x, axis)
    beam = dt.Dim(2, name="beam")
    lengths = dt.Tensor(torch.tensor([[3, 1], [0, 2], [4, 4], [1, 0]]), (batch, beam))
    t2 = dt.Dim(lengths, name="t2")
    y = dt.Tensor(torch.randn(4, 2, 5, 3), (batch, beam, t2, feature))
    for axis in [(t2,), (t2, feature), (batch, t2), (beam, t2, batch), (batch,), (beam, feature)]:
        for op in REDUCE[:5] + [dt.moments]:
            check_either(op, y, axis)
    two = dt.Tensor(torch.randn(4, x.raw.shape[1], 5, 3), (batch, time, t2, feature))
    with pytest.raises(ValueError):  # t2's lengths are over beam, which `two` lacks
        dt.reduce_sum(two, t2)
    check_error(dt.reduce_sum, two, t2)
    yt = y.copy_transpose((t2, feature, beam, batch))
    check(dt.reduce_mean, yt, (t2, batch))
    check(dt.moments, yt, (batch, t2, beam))


@given(perm=st.permutations([0, 1, 2, 3]), lengths=lengths_st, extra=st.integers(0, 2), pad=pads,
       axis_index=st.integers(0, 3), use_mask=st.booleans(), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_softmax_any_layout(perm, lengths, extra, pad, axis_index, use_mask, dtype):
    x, dims = padded(lengths, extra=extra, pad=pad, dtype=dtype, perm=perm)
    for op in (dt.softmax, dt.log_softmax):
        check_either(op, x, dims[axis_index], use_mask)


def test_softmax_rows_without_valid_frames():
    """A softmax over batch where frames beyond the longest sequence are padding in every sequence:
    probability 0 (log: -inf) there, and no NaN."""
    x, (batch, time, feature, heads) = padded((3, 1), extra=2)
    for op, fill in ((dt.softmax, 0.0), (dt.log_softmax, float("-inf"))):
        out = check(op, x, batch)
        assert (out.raw[:, 3:] == fill).all()
        out = check(op, x, time)
        assert not out.raw[:, :1].isnan().any()


def test_errors_name_the_call():
    x, (batch, time, feature, heads) = padded((3, 2))
    no_batch = dt.Tensor(x.raw[0], x.dims[1:])
    other = dt.Dim(7, name="other")
    bad = [((x.raw, time), {}), ((x, 3), {}), ((x, other), {}), ((x, ()), {}), ((x, (time, time)), {}),
           ((x, [time, "a"]), {}), ((x, time), {"use_mask": x}), ((no_batch, time), {}), ((x,), {}),
           ((x, time, True, 1), {}), ((x, time), {"foo": 1})]
    for op in REDUCE + [dt.moments]:
        for args, kwargs in bad:
            check_error(op, *args, **kwargs)
    for op in (dt.reduce_argmax, dt.reduce_argmin):
        check_error(op, x, (time, feature))
    check_error(dt.reduce_mean, dt.cast(x, "int64"), feature)
    check_error(dt.reduce_max, dt.cast(x, "uint16") if hasattr(torch, "uint16") else x.raw, time)
    empty = dt.Tensor(torch.zeros(2, 0), (batch, dt.Dim(0, name="zero")))
    for op in (dt.softmax, dt.log_softmax):
        for args, kwargs in bad + [((x, (time,)), {}), ((empty, empty.dims[1]), {}),
                                   ((dt.cast(x, "int64"), feature), {})]:
            check_error(op, *args, **kwargs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("order", [(0, 1, 2), (1, 0, 2), (2, 1, 0), (0, 2, 1)])
def test_logmeanexp_fast_path(dtype, pad, order):
    """reduce_logmeanexp's C++ fast path (a dynamic or static axis; the log of the lengths cached on the dim)
    against its definition: values and gradients (check), the same result on a second call (the cache), each
    sequence alone as in the batch, and which calls it hands to the definition."""
    from dimtorch.ops import reduce as _reduce
    from fast_path_checks import definition_calls, permuted_batch
    x, batch, time, chan = permuted_batch((4, 1, 0, 3), 3, extra=2, pad=pad, order=order)
    x = dt.Tensor(x.raw.to(dtype), x.dims, feature_dim=chan)
    for axis in (time, chan):
        first = check(dt.reduce_logmeanexp, x, axis)
        assert definition_calls(lambda: dt.reduce_logmeanexp(x, axis), _reduce.reduce_logmeanexp) == 0
        torch.testing.assert_close(dt.reduce_logmeanexp(x, axis=axis).raw, first.raw, rtol=0, atol=0, equal_nan=True)
    # each sequence alone (its own static time dim, no padding) gives its row of the batch's result (to
    # rounding: the definition's log of the lengths is float32 (torch.log of ints), a static size's a double)
    out = dt.reduce_logmeanexp(x, time).copy_transpose((batch, chan)).raw
    for b, n in enumerate((4, 1, 0, 3)):
        t1 = dt.Dim(n, name="t1")
        alone = dt.Tensor(x.copy_transpose((batch, time, chan)).raw[b, :n], (t1, chan))
        torch.testing.assert_close(dt.reduce_logmeanexp(alone, t1).raw, out[b], equal_nan=True)
    # handed to the definition: two axes, use_mask=False, an axis along which another dim's lengths vary
    handed = [lambda: dt.reduce_logmeanexp(x, (time, chan)), lambda: dt.reduce_logmeanexp(x, time, use_mask=False),
              lambda: dt.reduce_logmeanexp(x, batch)]
    for call in handed:
        assert definition_calls(call, _reduce.reduce_logmeanexp) == 1
    check(dt.reduce_logmeanexp, x, batch)
    check(dt.reduce_logmeanexp, dt.cast(x, "int64"), time, backward=False)  # (a float result)


def test_logmeanexp_fast_path_default_dtype():
    """The cached log of the lengths follows torch's default dtype as the definition's torch.log does."""
    x, batch, time, chan = __import__("fast_path_checks").permuted_batch((5, 2), 3, extra=1, pad=PAD_NAN,
                                                                         order=(0, 1, 2))
    before = torch.get_default_dtype()
    try:
        for default in (torch.float64, torch.float32):
            torch.set_default_dtype(default)
            check(dt.reduce_logmeanexp, x, time, in_graph=(False,))
    finally:
        torch.set_default_dtype(before)
