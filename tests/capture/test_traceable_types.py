"""Tensor and Dim as torch.compile makes and replays them (object.__new__ + set-once fields), and
their Python definitions (dimtorch.ops.tensor, dimtorch.ops.dim) against the C++ types."""
import pickle

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import dimtorch as dt
from dimtorch.ops import dim as _dim, tensor as _tensor
from helpers import PAD_NAN, make_padded_batch


def _new_tensor():
    return object.__new__(dt.Tensor)


def test_no_own_new_in_the_type_dicts():
    # torch.compile makes a graph's objects with object.__new__(cls); it must be allowed.
    assert dt.Tensor.__new__ is object.__new__ and dt.Dim.__new__ is object.__new__
    assert repr(_new_tensor()) == "Tensor{<not initialized>}"


def test_tensor_fields_are_set_once_and_complete_with_checks():
    b = make_padded_batch()
    t = _new_tensor()
    t.feature_dim = b.feature
    t.dims = b.x.dims
    with pytest.raises(ValueError, match="raw has shape"):
        t.raw = torch.zeros(2, 2)  # wrong number of axes: refused, raw stays unset
    t.raw = b.x.raw
    assert t.shape == b.x.shape and t.dims == b.x.dims and t.feature_dim is b.feature
    assert torch.equal(dt.reduce_sum(t, axis=b.time).raw.nan_to_num(), dt.reduce_sum(b.x, axis=b.time).raw.nan_to_num())
    for name, value in (("raw", b.x.raw), ("dims", b.x.dims)):
        with pytest.raises(AttributeError, match="read-only"):
            setattr(t, name, value)
    with pytest.raises(AttributeError, match="read-only"):
        setattr(b.x, "raw", b.x.raw)  # raw and dims are set once (raw_tensor is RETURNN's assignable raw)
    # The markers stay assignable (RETURNN code sets them on a fresh copy), except on a frozen Tensor.
    t.name, t.sparse_dim = "n", b.time
    assert t.name == "n" and t.sparse_dim is b.time
    t._frozen = True
    with pytest.raises(AttributeError, match="frozen"):
        t.sparse_dim = None


def test_tensor_init_on_a_new_object():
    b = make_padded_batch()
    t = _new_tensor()
    t.__init__(b.x.raw, b.x.dims, name="x")
    assert t.name == "x" and t.shape == b.x.shape
    with pytest.raises(TypeError, match="already initialized"):
        t.__init__(b.x.raw, b.x.dims)


def test_static_size_checked_when_completed_by_setters():
    f = dt.Dim(3, name="f")
    t = _new_tensor()
    t.raw = torch.zeros(4)
    with pytest.raises(ValueError, match="has raw size 4"):
        t.dims = (f,)


@pytest.mark.parametrize("make", [
    lambda: _new_tensor(),
    lambda: _half_tensor(),
])
def test_incomplete_tensor_is_refused_everywhere_without_crash(make):
    b = make_padded_batch()
    t = make()
    calls = [
        lambda: t + 1, lambda: 1 + t, lambda: t + b.x, lambda: -t, lambda: abs(t), lambda: ~t, lambda: t < 1,
        lambda: t.dims, lambda: t.shape, lambda: t.dtype, lambda: t.ndim, lambda: t.device,
        lambda: t.raw_aligned(b.x.dims), lambda: t.copy_transpose(b.x.dims), lambda: t.copy_masked(0.0),
        lambda: t.copy(), lambda: t.remaining_dims(b.time), lambda: t.get_axis(b.time), lambda: len(t),
        lambda: dt.reduce_sum(t, axis=b.time), lambda: dt.softmax(t, axis=b.time), lambda: dt.exp(t),
        lambda: dt.matmul(t, b.x, reduce=b.feature), lambda: dt.pad(t, axes=b.time, padding=(1, 0)),
        lambda: dt.concat((t, b.time), (b.x, b.time)), lambda: dt.stack([t, b.x]), lambda: pickle.dumps(t),
        lambda: dt.Dim(t), lambda: dt.where(t, 1.0, 0.0), lambda: dt.cast(t, "float64"),
    ]
    for call in calls:
        with pytest.raises((TypeError, ValueError, AttributeError, RuntimeError)):
            call()
    repr(t)


def _half_tensor():
    t = _new_tensor()
    t.raw = torch.zeros(3)
    return t


def test_dim_fields_set_once_only_on_a_new_dim():
    d = object.__new__(dt.Dim)
    assert d.size is None and d.lengths is None and d.name is None  # a size-from-data dim
    d.name = "time"
    d.size = 5
    assert d.size == 5 and d.dimension == 5 and d.is_static()
    with pytest.raises(AttributeError, match="read-only"):
        d.size = 6
    made = dt.Dim(4, name="f")
    for name, value in (("name", "g"), ("size", 3), ("_lengths", None), ("derivation", None)):
        with pytest.raises(AttributeError, match="read-only"):
            setattr(made, name, value)
    with pytest.raises(TypeError, match="already initialized"):
        made.__init__(3)


def test_dim_with_lengths_set_by_setter_reads_its_max_lazily():
    b = make_padded_batch(lengths=(4, 2))
    d = object.__new__(dt.Dim)
    d._lengths = b.time.lengths
    assert d.get_max_size() == 4 and d.is_dynamic()
    x = dt.Tensor(torch.zeros(2, 4), (b.batch, d))
    assert dt.reduce_sum(x + 1.0, axis=d).raw.tolist() == [4.0, 2.0]


# ---- the Python definitions against the C++ types ----------------------------------------------

def _same(a, b):
    """Same shape, dtype and values (NaN where the other has NaN)."""
    assert a.shape == b.shape and a.dtype == b.dtype
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def _definition_tensor(raw, dims, **kw):
    t = _new_tensor()
    _tensor.__init__(t, raw, dims, **kw)
    return t


def test_tensor_init_definition_matches_the_constructor():
    b = make_padded_batch()
    d = _definition_tensor(b.x.raw, b.x.dims, feature_dim=b.feature, name="x")
    assert d.dims == b.x.dims and d.feature_dim is b.feature and d.name == "x" and d.shape == b.x.shape
    bad = [
        ((torch.zeros(3, 5), b.x.dims), {}, ValueError),
        ((torch.zeros(3, 5, 3), b.x.dims), {}, ValueError),
        ((b.x.raw, (b.batch, b.batch, b.feature)), {}, ValueError),
        (([1.0], b.x.dims), {}, TypeError),
        ((b.x.raw, b.x.dims), {"feature_dim": dt.Dim(4)}, ValueError),
        ((b.x.raw, b.x.dims), {"sparse_dim": 3}, TypeError),
        ((b.x.raw, b.x.dims), {"name": 3}, TypeError),
        ((b.x.raw, (b.batch, b.time, "f")), {}, TypeError),
    ]
    for args, kw, error in bad:
        with pytest.raises(error) as c_error:
            dt.Tensor(*args, **kw)
        with pytest.raises(error) as py_error:
            _definition_tensor(*args, **kw)
        assert "dimtorch.Tensor()" in str(c_error.value) and "dimtorch.Tensor()" in str(py_error.value)


@given(st.permutations([0, 1, 2]), st.permutations([0, 1, 2, 3]), st.floats(-3, 3))
def test_tensor_method_definitions_match(order, target_order, value):
    b = make_padded_batch(lengths=(4, 2, 0), pad_value=PAD_NAN)
    x = b.x.copy_transpose([b.x.dims[i] for i in order])
    extra = dt.Dim(1, name="extra")
    target = [(*x.dims, extra)[i] for i in target_order]
    _same(_tensor.raw_aligned(x, target), x.raw_aligned(target))
    y = _tensor.copy_transpose(x, b.x.dims)
    assert y.dims == b.x.dims
    _same(y.raw, b.x.raw)
    for dims in (None, b.time, (b.batch,)):
        got, want = _tensor.copy_masked(x, value, dims), x.copy_masked(value, dims)
        assert got.dims == want.dims
        _same(got.raw, want.raw)
    assert _tensor.remaining_dims(x, b.time) == x.remaining_dims(b.time)
    assert _tensor.get_axis(x, b.time) == x.get_axis(b.time)
    for name, prop in _tensor.PROPERTIES.items():
        got, want = prop(x), getattr(x, name)
        assert got is want if isinstance(want, torch.Tensor) else got == want


def test_method_definition_errors_name_the_call():
    b = make_padded_batch()
    other = dt.Dim(2, name="other")
    for method, arg in (("raw_aligned", (b.batch, b.time)), ("copy_transpose", (b.batch, other)),
                        ("remaining_dims", other), ("get_axis", other), ("copy_masked", "x")):
        with pytest.raises((ValueError, TypeError)) as c_error:
            getattr(b.x, method)(arg)
        with pytest.raises(type(c_error.value)) as py_error:
            _tensor.METHODS[method](b.x, arg)
        assert f"dimtorch.Tensor.{method}()" in str(py_error.value)


def _same_dim(a, b):
    """Same name, size, and lengths values (two Dims are never equal unless identical)."""
    assert a.name == b.name and a.size == b.size
    la, lb = a.lengths, b.lengths
    assert (la is None) == (lb is None)
    if la is not None:
        assert la.dims == lb.dims and torch.equal(la.raw, lb.raw)


_C_MATH = {"add": lambda a, k: a + k, "sub": lambda a, k: a - k, "mul": lambda a, k: a * k,
           "floordiv": lambda a, k: a // k, "ceildiv": dt.ceildiv}


@pytest.mark.parametrize("op,k", [("add", 2), ("add", -2), ("sub", 1), ("mul", 3), ("floordiv", 2),
                                  ("ceildiv", 3), ("add", 0), ("mul", 1)])
def test_dim_math_definition_shares_the_cache_with_the_core(op, k):
    b = make_padded_batch(lengths=(5, 3, 0))
    f = dt.Dim(6, name="f")
    for a in (b.time, f, b.time + 1):
        c_first = _C_MATH[op](a, k)
        assert _dim.derive(a, op, k, None, "test") is c_first
    for a in (dt.Dim(dt.Tensor(torch.tensor([5, 3, 0]), (b.batch,)), name="t"), dt.Dim(7, name="g")):
        py_first = _dim.derive(a, op, k, None, "test")
        assert _C_MATH[op](a, k) is py_first


def _defined_time(batch, lengths):
    """A dynamic dim made by the Python definition of the constructor."""
    d = object.__new__(dt.Dim)
    _dim.__init__(d, dt.Tensor(torch.tensor(lengths), (batch,)), name="time")
    return d


@pytest.mark.parametrize("expr", ["t + 2", "t - 1", "t * 2", "t // 2", "ceildiv(t, 2)", "(t + 1) + 2",
                                  "(t - 3) + 1", "t + u", "f + t", "f + 3", "f + f"])
def test_dim_definitions_give_what_the_core_gives(expr):
    b = make_padded_batch(lengths=(5, 3, 0))
    other_batch = dt.Dim(None, name="other")
    f = dt.Dim(4, name="f")
    names = {"ceildiv": _dim.ceildiv}
    py = eval(expr, {**names, "t": _defined_time(b.batch, [5, 3, 0]),
                     "u": _defined_time(other_batch, [2, 1]), "f": f}, {})
    c = eval(expr, {"ceildiv": dt.ceildiv, "t": dt.Dim(dt.Tensor(torch.tensor([5, 3, 0]), (b.batch,)), name="time"),
                    "u": dt.Dim(dt.Tensor(torch.tensor([2, 1]), (other_batch,)), name="time"), "f": f}, {})
    if not isinstance(py, dt.Dim) or not isinstance(c, dt.Dim):
        raise AssertionError(expr)
    _same_dim(py, c)
    assert _dim.is_dynamic(py) == c.is_dynamic() and _dim.is_static(py) == c.is_static()
    assert _dim.lengths(py) is None or torch.equal(_dim.lengths(py).raw, c.lengths.raw)


def test_dim_operator_definitions_refuse_what_the_core_refuses():
    t = dt.Dim(3, name="t")
    for op, other in (("__sub__", 5), ("__mul__", 0), ("__floordiv__", -1)):
        with pytest.raises(ValueError) as c_error:
            getattr(t, op)(other) if op != "__sub__" else t - other
        with pytest.raises(ValueError) as py_error:
            _dim.OPERATORS[op](t, other)
        assert str(c_error.value).split(":")[0] == str(py_error.value).split(":")[0]
    assert _dim.__add__(t, "x") is NotImplemented and _dim.__mul__(t, 1.5) is NotImplemented


def test_dim_init_definition_errors_match():
    b = make_padded_batch()
    for args, error in (((-1,), ValueError), ((1.5,), TypeError), ((torch.tensor([1]),), TypeError),
                        ((dt.Tensor(torch.tensor([1.0, 2.0, 3.0]), (b.batch,)),), TypeError),
                        ((3, 4), TypeError)):
        with pytest.raises(error):
            dt.Dim(*args)
        with pytest.raises(error):
            _dim.__init__(object.__new__(dt.Dim), *args)


def test_get_max_size_definition():
    b = make_padded_batch()
    assert _dim.get_max_size(dt.Dim(3)) == 3 and _dim.get_max_size(b.batch) is None
    with pytest.raises(RuntimeError, match="traced"):
        _dim.get_max_size(b.time)  # the definition is what runs while tracing


def test_dims_derived_by_the_definition_are_owned_like_the_cores():
    """A derived dim made field by field (torch.compile's replay) joins its operand's cache: no
    reference cycle, the same Dim for the same expression afterwards, and its lengths survive the
    operand's death."""
    import gc
    b = make_padded_batch(lengths=(4, 2))
    t = dt.Dim(dt.Tensor(torch.tensor([4, 2]), (b.batch,)), name="t")
    d = _dim.derive(t, "add", 3, None, "test")
    assert t + 3 is d and _dim.derive(t, "add", 3, None, "test") is d
    u = dt.Dim(dt.Tensor(torch.tensor([1, 1]), (b.batch,)), name="u")
    c = _dim.derive(t, "concat", 0, u, "test")
    assert t + u is c
    gc.collect()  # the garbage of earlier tests is not this test's
    gc.disable()
    try:
        del t
        assert d.lengths.raw.tolist() == [7, 5] and d.derivation is None  # detached, lengths kept
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_merged_dim_definition_finds_the_cores_merges():
    a, b, c = dt.Dim(2, name="a"), dt.Dim(3, name="b"), dt.Dim(4, name=None)
    made = dt._C._merged_dim((a, b))
    assert _dim.merged_dim((a, b)) is made
    new = _dim.merged_dim((a, c))
    assert new.size == 8 and new.name == dt._C._merged_dim((b, c)).name.replace("b", "a") == "a*None"
    with pytest.raises(ValueError, match="static"):
        _dim.merged_dim((a, dt.Dim(None)))


@pytest.mark.parametrize("expr", ["h * 2**40", "h + h", "h + 2**62", "(h * 2) * 2", "(g + 2**62) + 2**62",
                                  "h - (-2**63)", "h + (-2**63)"])
def test_dim_math_past_int64_is_an_overflow_error_in_both(expr):
    """Static sizes past 2**63 - 1 (the fuzz found the core's signed overflow): an OverflowError naming the
    operation, the same from the core and from the Python definition; folded chains too."""
    h, g = dt.Dim(2**62, name="huger"), dt.Dim(2**40, name="huge")
    names = {"h": h, "g": g}
    with pytest.raises(OverflowError, match=r"overflows \(a size is at most 2\*\*63 - 1\)") as c_error:
        eval(expr, dict(names))
    py_ops = {"__add__": _dim.OPERATORS["__add__"], "__sub__": _dim.OPERATORS["__sub__"],
              "__mul__": _dim.OPERATORS["__mul__"]}

    class Py:  # the same expression through the Python definitions of Dim's operators
        def __init__(self, d):
            self.d = d

        def __add__(self, o):
            return Py(py_ops["__add__"](self.d, o.d if isinstance(o, Py) else o))

        def __sub__(self, o):
            return Py(py_ops["__sub__"](self.d, o))

        def __mul__(self, o):
            return Py(py_ops["__mul__"](self.d, o))

    with pytest.raises(OverflowError) as py_error:
        eval(expr, {k: Py(v) for k, v in names.items()})
    assert str(c_error.value) == str(py_error.value)
