"""Reference and lifetime errors of the core, found by reading it: each case wrote past a tuple, used a
Dim after the collector could free it, recursed without end or read a field not yet set. Results are
checked against what the Python definitions give; CI also runs this file under ASan + UBSan."""
import gc

import pytest
import torch

import dimtorch as dt
from dimtorch.ops import dim as _dim


def _batch():
    b = dt.Dim(None, name="batch")
    t = dt.Dim(dt.Tensor(torch.tensor([2, 3]), (b,)), name="time")
    f = dt.Dim(4, name="feature")
    return b, t, f, dt.Tensor(torch.ones(2, 3, 4), (b, t, f))


def test_remaining_dims_with_a_dim_named_twice():
    """remove=(time, time): the result tuple was sized by len(remove) and written one item past its end
    (into the next pymalloc block: the likely cause of a CI segfault in the fuzz)."""
    b, t, f, x = _batch()
    for _ in range(1000):
        assert x.remaining_dims((t, t)) == [b, f]
    assert x.remaining_dims((t, f, t)) == [b]


def test_dim_math_fold_holds_its_base():
    """(T + 1) + 2 folds to T + 3 on T, which (T + 1) holds only by a borrowed pointer: with T left only
    in cyclic garbage, the collector (run by the allocations inside) freed it during the call."""
    b = dt.Dim(None, name="batch")
    t = dt.Dim(dt.Tensor(torch.tensor([2, 3]), (b,)), name="time")
    a = t + 1
    cycle = [t]
    cycle.append(cycle)
    del t, cycle
    old = gc.get_threshold()
    gc.set_threshold(1, 1, 1)
    try:
        r = a + 2
    finally:
        gc.set_threshold(*old)
    assert r.lengths.raw.tolist() == [5, 6]
    gc.collect()
    assert r.lengths.raw.tolist() == [5, 6]


def test_copy_masked_with_a_dim_named_many_times():
    """Each repeat was one more axis in an array of 24 (a stack overflow past 24)."""
    b, t, f, x = _batch()
    x = dt.Tensor(torch.randn(2, 3, 4), (b, t, f))
    assert torch.equal(x.copy_masked(0.0, [t] * 200).raw, x.copy_masked(0.0, [t]).raw)


def test_masked_scatter_with_more_dims_than_the_mask():
    """len(dims) > mask's rank read before src's dims tuple; now the definition's error."""
    b, t, f, x = _batch()
    mask = dt.Tensor(torch.ones(2, dtype=torch.bool), (b,))
    with pytest.raises(ValueError, match=r"dimtorch\.masked_scatter\(\)"):
        dt.masked_scatter(x, mask=mask, dims=(b, t, f), in_dim=b)


def test_a_derivation_may_not_make_a_cycle():
    """A dim derived from itself (directly or through another) made every reader recurse without end."""
    d = object.__new__(dt.Dim)
    with pytest.raises(ValueError, match=r"would derive the dim from itself"):
        d.derivation = ("add", d, None, 1)
    e, g = object.__new__(dt.Dim), object.__new__(dt.Dim)
    e.derivation = ("add", g, None, 1)
    with pytest.raises(ValueError, match=r"would derive the dim from itself"):
        g.derivation = ("mul", e, None, 2)


def test_lengths_set_before_they_are_complete():
    """The _lengths setter takes a Tensor whose fields torch.compile's replay sets later; read before
    that, it was a NULL read. Now an error, and the dim still prints."""
    d = object.__new__(dt.Dim)
    d._lengths = object.__new__(dt.Tensor)
    with pytest.raises(RuntimeError, match=r"lengths of dim .* are not a complete Tensor"):
        d.get_max_size()
    assert "[?]" in repr(d)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int32])
def test_dim_math_on_narrow_lengths_computes_in_int64(dtype):
    """T - 1 of uint8 lengths [0, 2] gave [255, 1] (max 1), and T * 200 wrapped; core and definition."""
    b = dt.Dim(None, name="batch")
    t = dt.Dim(dt.Tensor(torch.tensor([0, 2], dtype=dtype), (b,)), name="time")
    assert (t - 1).lengths.raw.tolist() == [0, 1] and (t - 1).get_max_size() == 1
    assert (t * 200).lengths.raw.tolist() == [0, 400] and (t * 200).get_max_size() == 400
    t2 = dt.Dim(dt.Tensor(torch.tensor([0, 2], dtype=dtype), (b,)), name="time2")
    assert _dim.lengths(_dim.derive(t2, "sub", 1, None, "test")).raw.tolist() == [0, 1]
    assert _dim.lengths(_dim.derive(t2, "mul", 200, None, "test")).raw.tolist() == [0, 400]
