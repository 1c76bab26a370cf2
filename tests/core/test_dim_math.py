"""Tests of src/core/dim_math.cpp: derived dims, their lengths (src/core/dim.cpp), caching."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

import dimtorch as dt


def dyn(lengths, batch=None, name="time"):
    batch = batch or dt.Dim(None, name="batch")
    return batch, dt.Dim(dt.Tensor(torch.tensor(lengths, dtype=torch.int64), (batch,)), name=name)


def lengths_of(d):
    return d.lengths.raw.tolist()


def test_static_arithmetic():
    f = dt.Dim(10, name="f")
    assert (f + 2).size == 12 and (f - 3).size == 7 and (f * 2).size == 20 and (2 * f).size == 20
    assert (f // 3).size == 3 and dt.ceildiv(f, 3).size == 4 and (f + dt.Dim(5, name="g")).size == 15
    assert (3 + f).size == 13
    assert not (f + 2).is_dynamic() and (f + 2).lengths is None


@pytest.mark.parametrize("op, expected", [
    (lambda t: t + 2, lambda n: n + 2),
    (lambda t: 2 + t, lambda n: n + 2),
    (lambda t: t - 2, lambda n: max(n - 2, 0)),  # clamped at 0: a sequence never has < 0 frames
    (lambda t: t + (-1), lambda n: max(n - 1, 0)),
    (lambda t: t * 3, lambda n: n * 3),
    (lambda t: t // 2, lambda n: n // 2),
    (lambda t: dt.ceildiv(t, 3), lambda n: -(-n // 3)),
    (lambda t: dt.ceildiv(t + 1, 2) - 1, lambda n: max(-(-(n + 1) // 2) - 1, 0)),
])
def test_derived_lengths_by_hand(op, expected):
    lens = [0, 1, 2, 5, 7]
    batch, t = dyn(lens)
    d = op(t)
    assert d.is_dynamic() and d.size is None
    assert lengths_of(d) == [expected(n) for n in lens]
    assert d.lengths.dims == (batch,) and d.lengths.dtype == "int64" and d.lengths.raw.device.type == "cpu"
    assert d.get_max_size() == max(expected(n) for n in lens)


def test_concat_lengths():
    batch, a = dyn([3, 0, 2])
    _, b = dyn([1, 4, 0], batch=batch, name="b")
    assert lengths_of(a + b) == [4, 4, 2]
    assert lengths_of(a + dt.Dim(2, name="s")) == [5, 2, 4]
    assert (a + b).derivation == ("concat", a, b, 0)
    assert lengths_of(dt.Dim(2, name="s") + a) == [5, 2, 4]


def test_concat_over_different_batch_dims_broadcasts():
    beam = dt.Dim(2, name="beam")
    batch, a = dyn([3, 1])
    b = dt.Dim(dt.Tensor(torch.tensor([1, 2]), (beam,)), name="b")
    c = a + b
    assert set(c.lengths.dims) == {batch, beam}
    raw = c.lengths.raw
    expect = torch.tensor([3, 1])[:, None] + torch.tensor([1, 2])[None, :]
    if c.lengths.dims[0] is beam:
        expect = expect.t()
    assert torch.equal(raw, expect)


def test_caching_identity():
    _, t = dyn([3, 1])
    assert (t + 1) is (t + 1)
    assert (t - 1) is (t - 1) and (t * 2) is (t * 2) and (t // 2) is (t // 2)
    assert dt.ceildiv(t, 3) is dt.ceildiv(t, 3)
    assert (t + (-1)) is (t - 1) and (t - (-1)) is (t + 1)
    assert (1 + t) is (t + 1) and (2 * t) is (t * 2)
    _, u = dyn([2, 2], name="u")
    assert (t + u) is (t + u) and (t + u) is not (u + t)
    assert (t + 1) == (t + 1) and (t + 1) != (t + 2)
    assert hash(t + 1) == hash(t + 1)


def test_identities_keep_the_dim():
    _, t = dyn([3, 1])
    assert (t + 0) is t and (t - 0) is t and (t * 1) is t and (t // 1) is t and dt.ceildiv(t, 1) is t


def test_derivation():
    _, t = dyn([3, 1])
    assert t.derivation is None
    assert (t + 1).derivation == ("add", t, None, 1)
    assert (t - 2).derivation == ("sub", t, None, 2)
    assert (t * 2).derivation == ("mul", t, None, 2)
    assert (t // 2).derivation == ("floordiv", t, None, 2)
    assert dt.ceildiv(t, 3).derivation == ("ceildiv", t, None, 3)


def test_lengths_are_lazy_and_computed_once():
    _, t = dyn([4, 2])
    d = t * 2
    first = d.lengths
    assert d.lengths is first  # cached host lengths


def test_derived_mask():
    batch, t = dyn([3, 0, 1])
    d = t + 2
    m = d.get_mask()
    assert m.dims == (batch, d)
    expect = torch.arange(5)[None, :] < torch.tensor([5, 2, 3])[:, None]
    assert torch.equal(m.raw, expect)


def test_derived_dim_masks_a_reduction():
    batch, t = dyn([3, 0, 1])
    d = t // 2 + 1
    x = dt.Tensor(torch.ones(3, d.get_max_size()), (batch, d))
    assert dt.reduce_sum(x, axis=d).raw.tolist() == [2.0, 1.0, 1.0]


@settings(max_examples=30)
@given(lens=st.lists(st.integers(0, 20), min_size=1, max_size=5), k=st.integers(1, 5),
       op=st.sampled_from(["add", "sub", "mul", "floordiv", "ceildiv"]))
def test_lengths_fuzzed(lens, k, op):
    _, t = dyn(lens)
    d = {"add": lambda: t + k, "sub": lambda: t - k, "mul": lambda: t * k,
         "floordiv": lambda: t // k, "ceildiv": lambda: dt.ceildiv(t, k)}[op]()
    f = {"add": lambda n: n + k, "sub": lambda n: max(n - k, 0), "mul": lambda n: n * k,
         "floordiv": lambda n: n // k, "ceildiv": lambda n: -(-n // k)}[op]
    assert lengths_of(d) == [f(n) for n in lens]
    # The host max comes from the operand's for these monotone ops (no read of the lengths): the same.
    assert d.get_max_size() == max(f(n) for n in lens)
    assert d.lengths.dtype == "int64"


def test_derived_lengths_of_int32_lengths_are_int64():
    batch = dt.Dim(None, name="batch")
    t = dt.Dim(dt.Tensor(torch.tensor([4, 0, 7], dtype=torch.int32), (batch,)), name="t")
    for d in (t + 1, dt.ceildiv(t, 2), t - 5):
        assert d.lengths.dtype == "int64"
    assert lengths_of(dt.ceildiv(t, 2)) == [2, 0, 4] and (t - 5).get_max_size() == 2


def test_bad_factors_raise():
    _, t = dyn([3, 1])
    with pytest.raises(ValueError, match=r"dimtorch\.Dim\.__floordiv__\(\): factor must be a positive int, got 0 \(dim .*time"):
        t // 0
    with pytest.raises(ValueError, match=r"dimtorch\.Dim\.__mul__\(\): factor must be a positive int, got -2"):
        t * -2
    with pytest.raises(ValueError, match=r"dimtorch\.ceildiv\(\): factor must be a positive int, got 0"):
        dt.ceildiv(t, 0)
    with pytest.raises(ValueError, match=r"dimtorch\.Dim\.__sub__\(\): .*'f'.*- 5 would have a negative size"):
        dt.Dim(3, name="f") - 5
    with pytest.raises(TypeError, match=r"dimtorch\.ceildiv\(\): expected \(Dim, int\)"):
        dt.ceildiv(t, 1.5)
    with pytest.raises(TypeError):
        t + 1.5
    with pytest.raises(TypeError):
        t - t


def test_chains_of_one_op_fold():
    _, t = dyn([5, 1])
    f = dt.Dim(8, name="feature")
    assert (t + 1) + 2 is t + 3
    assert (t - 1) - 2 is t - 3
    assert (t * 2) * 3 is t * 6
    assert (t // 2) // 2 is t // 4
    assert dt.ceildiv(dt.ceildiv(t, 2), 3) is dt.ceildiv(t, 6)
    assert (f + 1) + 2 is f + 3 and (f + 3).size == 11
    assert lengths_of((t - 1) - 2) == [2, 0]


def test_mixed_chains_stay_apart():
    _, t = dyn([5, 1])
    # max(t - 3, 0) + 1 is not t - 2 where a length reaches 0.
    assert (t - 3) + 1 is not t - 2
    assert lengths_of((t - 3) + 1) == [3, 1]
    assert lengths_of(t - 2) == [3, 0]


def test_concat_with_a_size_from_data_dim_is_an_error():
    batch, t = dyn([3, 2])
    with pytest.raises(ValueError, match=r"dimtorch\.Dim\.__add__\(\): 'time'\[batch\] \+ 'batch'\(\?\): a dim whose size comes from data"):
        t + batch
