"""RETURNN's Dim API on dimtorch.Dim itself: RETURNN's constructor options (kind=, description=, dimension=,
capacity=, lengths declared as a template), Dim.Types, the global batch_dim and single_step_dim,
get_dim_value(_tensor), get_size_tensor, copy, copy_from, declare_same_as, div_left/right,
ceildiv_left/right, Dim * Dim; where the behaviour is RETURNN's, compared with RETURNN itself
(tests/rf_api_parity.py; skipped without `returnn`)."""
import copy as _copy

import pytest
import torch

import dimtorch as dt
from dimtorch.rf.tensor import Dim, Tensor, batch_dim, single_step_dim
from helpers import make_padded_batch
from rf_api_parity import run_both


@pytest.fixture(autouse=True)
def _unbind_batch_dim():
    yield
    batch_dim.dyn_size_ext = None


def test_global_dims_are_defined_once():
    from dimtorch._core import global_dims
    import dimtorch.rf.tensor as T
    assert T.batch_dim is global_dims.batch_dim and T.single_step_dim is global_dims.single_step_dim
    assert batch_dim.kind is Dim.Types.Batch and batch_dim.is_batch_dim() and batch_dim.size is None
    assert single_step_dim.size == 1 and single_step_dim.kind is Dim.Types.Spatial
    assert Dim.Types.Time is Dim.Types.Spatial and Dim.Types.Unspecified is None
    assert repr(Dim.Types.Feature) == "feature"
    assert _copy.deepcopy(batch_dim) is batch_dim  # dims are identities


def test_returnn_constructor_options():
    f = Dim(dimension=3, name="f", kind=Dim.Types.Feature)
    assert f.size == f.dimension == 3 and f.kind is Dim.Types.Feature and f.is_feature_dim()
    assert not f.is_batch_dim() and f.description == "f"
    d = Dim(4, description="desc")
    assert d.name == d.description == "desc" and d.kind is None
    c = Dim(None, name="time", capacity=100)
    assert c.capacity == 100 and c.get_dim_value() == 100 and c.size is None
    declared = Dim(Tensor("time", [batch_dim], dtype="int32"))
    assert declared.name == "time" and declared.size is None and not declared.is_dynamic()
    ext = declared.dyn_size_ext
    assert ext.raw_tensor is None and ext.dims == (batch_dim,) and ext.dtype == "int32" and ext._frozen
    with pytest.raises(TypeError, match=r"dimtorch\.Dim\(\) got an unexpected keyword argument 'foo'"):
        Dim(3, foo=1)
    with pytest.raises(TypeError, match=r"dimtorch\.Dim\(\): kind must be one of Dim\.Types"):
        Dim(3, kind="feature")
    with pytest.raises(ValueError, match=r"dimtorch\.Dim\(\): a batch dim takes its size from data"):
        Dim(Tensor("t", [batch_dim], dtype="int32"), kind=Dim.Types.Batch)


def test_declared_lengths_template_binds_by_assignment_in_place():
    time = Dim(Tensor("time", [batch_dim], dtype="int32"))
    template = time.dyn_size_ext
    template.raw_tensor = torch.tensor([3, 2], dtype=torch.int32)  # RETURNN's in-place binding
    assert template.raw_tensor is None and template._frozen  # the declaration stays a template
    assert time.lengths.raw.tolist() == [3, 2] and time.lengths.dims == (batch_dim,) and time.get_max_size() == 3
    with pytest.raises(AttributeError, match=r"raw_tensor = \.\.\.: this Tensor is frozen.*dim\.dyn_size_ext = Tensor"):
        time.lengths.raw_tensor = torch.tensor([1, 1], dtype=torch.int32)  # bound lengths: rebind instead
    time.reset_eager()


def test_sizes_of_static_dynamic_and_batch_dims():
    b = make_padded_batch(lengths=(4, 2, 3))
    assert b.feature.get_dim_value() == 4 and b.feature.get_dim_value_tensor() == 4
    assert b.time.get_dim_value() == 4
    v = b.time.get_dim_value_tensor()
    assert v.dims == () and v.raw.item() == 4 and v.dtype == "int64"  # the lengths' dtype
    assert b.time.get_size_tensor().raw.tolist() == [4, 2, 3]
    assert b.time.get_dyn_size_ext_for_device("cpu").raw.tolist() == [4, 2, 3]
    with pytest.raises(ValueError, match=r"dimtorch\.Dim\.get_dim_value\(\): dim 'batch'\(\?\) takes its size from "
                                         r"data and has no lengths or size bound"):
        batch_dim.get_dim_value()
    batch_dim.dyn_size_ext = Tensor("batch", [], dtype="int32", raw_tensor=torch.tensor(5, dtype=torch.int32))
    assert batch_dim.get_dim_value() == 5 and batch_dim.get_max_size() == 5
    assert batch_dim.get_dim_value_tensor() is batch_dim.dyn_size_ext and batch_dim.dyn_size_ext._frozen
    assert batch_dim.get_size_tensor().raw.item() == 5
    f = Dim(3, name="f")
    z = dt.zeros((batch_dim, f))  # an op that makes a tensor over the batch dim takes its bound size
    assert z.shape == (5, 3) and dt.range_over_dim(batch_dim).raw.tolist() == [0, 1, 2, 3, 4]
    batch_dim.dyn_size_ext = None
    assert batch_dim.dyn_size_ext is None and batch_dim.get_max_size() is None
    with pytest.raises(ValueError, match="takes its size from data"):
        dt.zeros((batch_dim, f))


def test_batch_dim_takes_a_size_not_lengths():
    with pytest.raises(ValueError, match=r"dyn_size_ext = \.\.\.: batch dim 'batch'\(\?\) takes a 0-dim size, got lengths over"):
        batch_dim.dyn_size_ext = Tensor("b", [Dim(2, name="x")], dtype="int32", raw_tensor=torch.tensor([1, 2], dtype=torch.int32))
    with pytest.raises(TypeError, match="must be an integer Tensor"):
        batch_dim.dyn_size_ext = Tensor("b", [], dtype="float32", raw_tensor=torch.tensor(2.0))
    with pytest.raises(ValueError, match="must be >= 0"):
        batch_dim.dyn_size_ext = Tensor("b", [], dtype="int64", raw_tensor=torch.tensor(-1))


def test_copy_copy_from_declare_same_as():
    b = make_padded_batch(lengths=(3, 1))
    assert b.time.copy() is b.time  # the same dim (dimtorch's dims are identities)
    other = b.time.copy(same_as_self=False, description="time2")
    assert other is not b.time and other.name == "time2" and other.lengths.raw.tolist() == [3, 1]
    twice = b.feature.copy(match_priority=1)  # RETURNN's way to have a dim twice (a square matrix)
    assert twice is not b.feature and twice.size == 4
    w = dt.Tensor(torch.randn(4, 4), (twice, b.feature))
    assert w.dims == (twice, b.feature)
    with pytest.raises(ValueError, match="needs a new description"):
        b.time.copy(same_as_self=False)
    c = Dim(None, name="copy")
    c.copy_from(b.time)
    assert c.lengths.raw.tolist() == [3, 1] and c is not b.time
    m = c.get_mask()
    assert m.dims == (b.batch, c) and m is not b.time.get_mask()
    o = Dim(None, name="out")
    o.declare_same_as(b.time)
    assert o.same_as is b.time and o.lengths.raw.tolist() == [3, 1]
    s = Dim(4, name="s")
    s.declare_same_as(b.feature)  # static: the sizes agree
    with pytest.raises(ValueError, match=r"copy_from\(\): dim 'f3'\(3\) cannot take the size of 'feature'\(4\)"):
        Dim(3, name="f3").copy_from(b.feature)


def test_dim_math_of_returnn():
    heads, k = Dim(4, name="heads"), Dim(8, name="k")
    prod = heads * k
    assert prod.size == 32 and prod is heads * k  # cached: the same Dim each time
    assert prod.div_left(heads) is k and prod.div_right(k) is heads
    total = Dim(12, name="total")
    assert total.div_left(3).size == 4 and total.div_left(3) is total // 3 and total.div_left(Dim(1, name="one")) is total
    with pytest.raises(ValueError, match=r"div_left\(\): 5 does not divide the size of 'total'\(12\)"):
        total.div_left(5)
    b = make_padded_batch(lengths=(5, 2))
    assert b.time * Dim(2, name="two") is b.time * 2 and Dim(2, name="two2") * b.time is b.time * 2
    half = b.time.ceildiv_right(2)
    assert half is dt.ceildiv(b.time, 2) and half.lengths.raw.tolist() == [3, 1]
    assert b.time.ceildiv_left(2) is half and b.time.div_right(2).lengths.raw.tolist() == [2, 1]
    with pytest.raises(ValueError, match="a product of dims needs one of them static"):
        b.time * Dim(None, name="other")
    merged, _ = dt.merge_dims(dt.Tensor(torch.zeros(4, 8), (heads, k)), dims=(heads, k))
    assert merged.dims == (prod,)  # merge_dims makes the same product


def _dim_program(T):
    out = []
    time = T.Dim(T.Tensor("time", [T.batch_dim], dtype="int32"))
    feat = T.Dim(5, name="feat")
    d0 = T.Dim(None, name="in_spatial")
    out += [time.name, time.description, time.dimension, time.is_static(), d0.name, d0.dimension, d0.dyn_size_ext]
    out += [T.Dim(3, name="f3", kind=T.Dim.Types.Feature).kind is T.Dim.Types.Feature, feat.kind,
            T.batch_dim.kind is T.Dim.Types.Batch, T.single_step_dim.dimension,
            T.Dim(dimension=4, name="d4").dimension, T.Dim(4, description="dd").name]
    T.batch_dim.dyn_size_ext = T.Tensor("batch", [], dtype="int32", raw_tensor=torch.tensor(3, dtype=torch.int32))
    time.dyn_size_ext = T.Tensor("time", [T.batch_dim], dtype="int32",
                                 raw_tensor=torch.tensor([4, 2, 3], dtype=torch.int32))
    out += [int(T.batch_dim.get_dim_value()), int(time.get_dim_value()), time.get_dim_value_tensor().dtype,
            int(time.get_dim_value_tensor().raw_tensor), int(T.batch_dim.get_dim_value_tensor().raw_tensor),
            feat.get_dim_value_tensor(), time.get_size_tensor().raw_tensor.tolist(),
            int(T.batch_dim.get_size_tensor().raw_tensor), time.is_dynamic(), feat.is_static()]
    t1 = time + 1
    out += [t1.dyn_size_ext.raw_tensor.tolist(), t1 is time + 1, time.ceildiv_right(2).dyn_size_ext.raw_tensor.tolist(),
            T.Dim(12, name="k").div_left(3).dimension]
    heads, k8 = T.Dim(4, name="heads"), T.Dim(8, name="k8")
    prod = heads * k8
    out += [prod.dimension, prod is heads * k8, prod.div_left(heads) is k8, prod.div_right(k8) is heads]
    c = T.Dim(None, name="cp")
    c.copy_from(time)
    out.append(c.dyn_size_ext.raw_tensor.tolist())
    o = T.Dim(None, name="o")
    o.declare_same_as(time)
    out.append(o.dyn_size_ext.raw_tensor.tolist())
    out += [time.copy(same_as_self=False, description="tc").name, time.copy(same_as_self=False, description="tc") == time]
    out.append(time.get_mask().raw_tensor.tolist())
    return out


def test_dim_api_gives_what_returnn_gives():
    rf_out, dt_out = run_both(_dim_program)
    assert dt_out == rf_out
