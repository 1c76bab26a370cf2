"""Tests of the native Dim type (src/core/dim.cpp): kinds, sizes, lengths, identity, repr, bad input."""
import copy

import pytest
import torch

import dimtorch as dt


def _lengths(values, batch=None):
    batch = batch if batch is not None else dt.Dim(None, name="batch")
    return dt.Tensor(torch.tensor(values), (batch,)), batch


def test_static_dim():
    d = dt.Dim(512, name="model")
    assert d.name == "model"
    assert d.size == 512 and d.dimension == 512
    assert d.lengths is None
    assert d.is_static() and not d.is_dynamic()
    assert d.get_max_size() == 512
    assert repr(d) == "Dim{'model'(512)}"


def test_static_dim_size_zero_and_positional_name():
    d = dt.Dim(0, "empty")
    assert d.size == 0 and d.get_max_size() == 0 and d.name == "empty"


def test_size_from_data_dim():
    d = dt.Dim(None, name="batch")
    assert d.size is None and d.lengths is None
    assert not d.is_static() and not d.is_dynamic()
    assert d.get_max_size() is None
    assert repr(d) == "Dim{'batch'(?)}"
    assert repr(dt.Dim()) == "Dim{'<unnamed>'(?)}"
    assert dt.Dim().name is None


def test_dynamic_dim():
    lengths, batch = _lengths([3, 5, 2])
    time = dt.Dim(lengths, name="time")
    assert time.name == "time"
    assert time.size is None
    assert time.lengths is lengths
    assert time.is_dynamic() and not time.is_static()
    assert time.get_max_size() == 5
    assert repr(time) == "Dim{'time'[batch]}"


def test_dynamic_dim_keyword_size_and_int32_lengths():
    batch = dt.Dim(None, name="batch")
    lengths = dt.Tensor(torch.tensor([4, 1], dtype=torch.int32), (batch,))
    time = dt.Dim(size=lengths, name="time")
    assert time.get_max_size() == 4
    assert time.lengths.dtype == "int32"


def test_dynamic_dim_all_zero_and_empty_lengths():
    lengths, _ = _lengths([0, 0])
    assert dt.Dim(lengths, name="t").get_max_size() == 0
    empty = dt.Tensor(torch.zeros(0, dtype=torch.int64), (dt.Dim(None, name="b"),))
    assert dt.Dim(empty, name="t").get_max_size() == 0


def test_dynamic_dim_over_two_batch_dims():
    b1, b2 = dt.Dim(None, name="b1"), dt.Dim(2, name="b2")
    lengths = dt.Tensor(torch.tensor([[1, 6], [3, 2]]), (b1, b2))
    t = dt.Dim(lengths, name="t")
    assert t.get_max_size() == 6
    assert repr(t) == "Dim{'t'[b1,b2]}"


@pytest.mark.parametrize("n", [7, 1024, 1025, 3000])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_host_min_max_of_many_lengths(n, dtype):
    # Up to 1024 lengths are read by one tolist(), more by aminmax: both give the same min and max.
    g = torch.Generator().manual_seed(n)
    values = torch.randint(3, 200, (n,), generator=g)
    values[n // 2] = 250
    values[n // 3] = 1
    t = dt.Dim(dt.Tensor(values.to(dtype), (dt.Dim(None, name="batch"),)), name="t")
    assert t.get_max_size() == 250
    assert (t - 1).lengths.raw.min().item() == 0  # the host min (1) keeps T - 1 from clamping
    grid = dt.Tensor(values.view(-1, 1).expand(n, 2).to(dtype), (dt.Dim(None, name="b1"), dt.Dim(2, name="b2")))
    assert dt.Dim(grid, name="t2").get_max_size() == 250


def test_negative_lengths_among_many():
    values = torch.full((2000,), 5)
    values[1500] = -1
    with pytest.raises(ValueError, match=r"dimtorch\.Dim\(\): lengths must be >= 0, got min -1"):
        dt.Dim(dt.Tensor(values, (dt.Dim(None, name="batch"),)), name="time")


def test_max_size_is_computed_once_not_from_later_changes():
    # The max is taken at construction (host); it is the contract that lengths are not mutated,
    # and the dim never re-reads them.
    lengths, _ = _lengths([2, 3])
    t = dt.Dim(lengths, name="t")
    lengths.raw[0] = 10
    assert t.get_max_size() == 3


def test_identity_equality_and_hash():
    a, b = dt.Dim(3, name="x"), dt.Dim(3, name="x")
    assert a == a and a != b and not (a == b)
    assert hash(a) == hash(a) and hash(a) != hash(b)
    assert {a: 1, b: 2}[a] == 1
    assert len({a, b, a}) == 2
    assert a in (b, a) and a not in [b]
    assert a != 3 and a != "x"


def test_copy_returns_same_dim():
    lengths, _ = _lengths([1, 2])
    for d in (dt.Dim(4, name="f"), dt.Dim(None), dt.Dim(lengths, name="t")):
        assert copy.copy(d) is d
        assert copy.deepcopy(d) is d
        assert copy.deepcopy({"dims": [d]})["dims"][0] is d


def test_dims_are_weak_referenceable():
    import weakref

    d = dt.Dim(2)
    r = weakref.ref(d)
    assert r() is d
    del d
    assert r() is None


@pytest.mark.parametrize(
    "size, exc, match",
    [
        (1.5, TypeError, r"dimtorch\.Dim\(\): size must be an int, None, or an integer dimtorch\.Tensor of lengths, got float"),
        ("3", TypeError, r"dimtorch\.Dim\(\): size must be .* got str"),
        (True, TypeError, r"dimtorch\.Dim\(\): size must be .* got bool"),
        ([1, 2], TypeError, r"dimtorch\.Dim\(\): size must be .* got list"),
        (-1, ValueError, r"dimtorch\.Dim\(\): size must be >= 0, got -1"),
        (torch.tensor([1, 2]), TypeError, r"dimtorch\.Dim\(\): lengths must be a dimtorch\.Tensor over batch dims.*got a raw torch\.Tensor"),
    ],
)
def test_bad_size(size, exc, match):
    with pytest.raises(exc, match=match):
        dt.Dim(size, name="x")


def test_bad_lengths_dtype():
    lengths = dt.Tensor(torch.tensor([1.0, 2.0]), (dt.Dim(None, name="batch"),))
    with pytest.raises(TypeError, match=r"dimtorch\.Dim\(\): lengths must be an integer Tensor, got dtype float32 \(dims: batch:2\)"):
        dt.Dim(lengths, name="time")
    bools = dt.Tensor(torch.tensor([True]), (dt.Dim(None, name="batch"),))
    with pytest.raises(TypeError, match=r"got dtype bool"):
        dt.Dim(bools)


def test_negative_lengths():
    lengths, _ = _lengths([3, -2, 1])
    with pytest.raises(ValueError, match=r"dimtorch\.Dim\(\): lengths must be >= 0, got min -2 \(dims: batch:3\)"):
        dt.Dim(lengths, name="time")


def test_lengths_over_a_dynamic_dim():
    lengths, batch = _lengths([2, 2])
    time = dt.Dim(lengths, name="time")
    inner = dt.Tensor(torch.tensor([[1, 1], [1, 1]]), (batch, time))
    with pytest.raises(ValueError, match=r"dimtorch\.Dim\(\): lengths must be over batch dims without lengths of their own, but dim 'time'\[batch\] has lengths"):
        dt.Dim(inner, name="sub")


def test_bad_name_and_arguments():
    with pytest.raises(TypeError, match=r"dimtorch\.Dim\(\): name must be a str or None, got int"):
        dt.Dim(3, name=5)
    with pytest.raises(TypeError, match=r"dimtorch\.Dim\(\) got an unexpected keyword argument 'foo'"):
        dt.Dim(3, foo=1)
    with pytest.raises(TypeError, match=r"dimtorch\.Dim\(\) takes at most 2 positional arguments \(3 given\)"):
        dt.Dim(3, "a", "b")
    with pytest.raises(TypeError, match=r"dimtorch\.Dim\(\) got multiple values for argument 'size'"):
        dt.Dim(3, size=4)


def test_dims_are_not_ordered():
    with pytest.raises(TypeError):
        dt.Dim(3) < dt.Dim(4)
