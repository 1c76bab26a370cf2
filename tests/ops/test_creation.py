"""Tests of creation functions (python/dimtorch/ops/creation.py): zeros/ones/full, *_like, random, range, convert."""
import numpy as np
import pytest
import torch

import dimtorch as dt
from helpers import make_padded_batch


@pytest.fixture
def dims():
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor([4, 2]), (batch,)), name="time")
    feat = dt.Dim(3, name="feature")
    return batch, time, feat


@pytest.mark.parametrize("fn, value", [(dt.zeros, 0), (dt.ones, 1)], ids=["zeros", "ones"])
def test_zeros_ones(dims, fn, value):
    _, time, feat = dims
    x = fn((time, feat))
    assert x.dims == (time, feat) and x.shape == (4, 3)  # a dynamic dim gets its max size
    assert x.dtype == "float32"
    assert torch.equal(x.raw, torch.full((4, 3), float(value)))
    i = fn([feat], dtype="int64")
    assert i.dtype == "int64" and torch.equal(i.raw, torch.full((3,), value))
    assert fn(feat, dtype=torch.float64).dtype == "float64"
    s = fn(())
    assert s.dims == () and s.raw.item() == value


def test_full_and_metadata(dims):
    _, time, feat = dims
    classes = dt.Dim(10, name="classes")
    x = dt.full((feat, time), 2.5, feature_dim=feat)
    assert x.shape == (3, 4) and x.feature_dim is feat
    assert torch.equal(x.raw, torch.full((3, 4), 2.5))
    y = dt.full(feat, 7, dtype="int32", sparse_dim=classes)
    assert y.dtype == "int32" and y.sparse_dim is classes
    b = dt.full(feat, True, dtype="bool")
    assert b.dtype == "bool" and bool(b.raw.all())


@pytest.mark.parametrize("name", ["zeros", "ones", "full", "random_uniform", "random_normal"])
def test_size_from_data_dim_is_a_clear_error(dims, name):
    batch, _, feat = dims
    fn = getattr(dt, name)
    args = ((batch, feat), 1.0) if name == "full" else ((batch, feat),)
    with pytest.raises(ValueError, match=rf"dimtorch\.{name}\(\): dim 'batch'\(\?\) takes its size from data, so a new tensor over it has no size; make it from an existing tensor \(zeros_like\), give the dim a size, or list a dim whose lengths are over it beside it"):
        fn(*args)


def test_bad_dims_and_dtype(dims):
    _, _, feat = dims
    with pytest.raises(TypeError, match=r"dimtorch\.zeros\(\): dims\[1\] must be a Dim, got str"):
        dt.zeros((feat, "time"))
    with pytest.raises(TypeError, match=r"dimtorch\.ones\(\): dims must be a Dim or a sequence of Dims, got int"):
        dt.ones(5)
    with pytest.raises(ValueError, match=r"dimtorch\.full\(\): unknown dtype 'foo' \(known: float16, .*\)"):
        dt.full(feat, 1.0, dtype="foo")


def test_zeros_like_ones_like():
    bd = make_padded_batch((3, 1), 2, extra_time=2)
    x = bd.x
    z = dt.zeros_like(x)
    assert z.dims == x.dims and z.shape == x.shape and z.dtype == "float32"  # raw sizes, not max sizes
    assert z.feature_dim is bd.feature
    assert not z.raw.any()
    o = dt.ones_like(x, dtype="int64")
    assert o.dtype == "int64" and bool((o.raw == 1).all())
    with pytest.raises(TypeError, match=r"dimtorch\.zeros_like\(\): expected a dimtorch\.Tensor, got Tensor"):
        dt.zeros_like(x.raw)


@pytest.mark.parametrize("fn", [dt.random_uniform, dt.random_normal], ids=["uniform", "normal"])
def test_random_seeded(dims, fn):
    _, time, feat = dims
    a = fn((time, feat), seed=5)
    b = fn((time, feat), seed=5)
    c = fn((time, feat), seed=6)
    assert a.dims == (time, feat) and a.shape == (4, 3) and a.dtype == "float32"
    assert torch.equal(a.raw, b.raw) and not torch.equal(a.raw, c.raw)
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    assert torch.equal(fn(feat, generator=g1).raw, fn(feat, generator=g2).raw)
    assert fn(feat, dtype="float64").dtype == "float64"
    with pytest.raises(ValueError, match=rf"dimtorch\.{fn.__name__}\(\): give either seed or generator, not both"):
        fn(feat, seed=1, generator=torch.Generator())


def test_random_ranges(dims):
    _, _, feat = dims
    big = dt.Dim(4000, name="big")
    u = dt.random_uniform((big,), minval=2.0, maxval=3.0, seed=0)
    assert float(u.raw.min()) >= 2.0 and float(u.raw.max()) < 3.0
    n = dt.random_normal((big,), mean=5.0, stddev=0.5, seed=0)
    assert abs(float(n.raw.mean()) - 5.0) < 0.05 and abs(float(n.raw.std()) - 0.5) < 0.05
    assert dt.random_normal(feat, feature_dim=feat).feature_dim is feat


def test_range_over_dim(dims):
    batch, time, feat = dims
    r = dt.range_over_dim(feat)
    assert r.dims == (feat,) and r.sparse_dim is feat and r.dtype == "int64"
    assert r.raw.tolist() == [0, 1, 2]
    t = dt.range_over_dim(time, dtype="int32")
    assert t.raw.tolist() == [0, 1, 2, 3] and t.dtype == "int32"
    with pytest.raises(ValueError, match=r"dimtorch\.range_over_dim\(\): dim 'batch'\(\?\) takes its size from data"):
        dt.range_over_dim(batch)
    with pytest.raises(TypeError, match=r"dimtorch\.range_over_dim\(\): expected a Dim, got int"):
        dt.range_over_dim(3)


def test_convert_to_tensor(dims):
    batch, _, feat = dims
    x = dt.Tensor(torch.zeros(3), (feat,))
    assert dt.convert_to_tensor(x) is x
    s = dt.convert_to_tensor(3.0)
    assert s.dims == () and s.dtype == "float32" and s.raw.item() == 3.0
    assert dt.convert_to_tensor(3).dtype == "int64"
    lst = dt.convert_to_tensor([1, 2, 3], dims=feat)
    assert lst.dims == (feat,) and lst.raw.tolist() == [1, 2, 3]
    arr = dt.convert_to_tensor(np.ones((2, 3), dtype=np.float32), dims=(batch, feat), dtype="float64")
    assert arr.dtype == "float64" and arr.shape == (2, 3)
    raw = torch.arange(3)
    t = dt.convert_to_tensor(raw, dims=[feat], sparse_dim=feat)
    assert t.raw is raw and t.sparse_dim is feat
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\(\): dim 'feature'\(3\) has raw size 2 at axis 0"):
        dt.convert_to_tensor([1, 2], dims=feat)
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\(\): raw has shape torch\.Size\(\[3\]\) \(1 axes\) but 0 dims were given"):
        dt.convert_to_tensor([1, 2, 3])
    with pytest.raises(TypeError, match=r"dimtorch\.convert_to_tensor\(\): dims\[0\] must be a Dim, got str"):
        dt.convert_to_tensor([1], dims=("x",))


def test_random_uniform_integers_and_sparse_dim(dims):
    """RETURNN frontend's forms: an int dtype draws integers in [minval, maxval); with a sparse_dim and no
    bounds, uniform over its indices (dtype None: int64 with a sparse_dim); the sparse_dim is set."""
    _, _, feat = dims
    big, vocab = dt.Dim(3000, name="big"), dt.Dim(7, name="vocab")
    r = dt.random_uniform((big,), dtype="int32", minval=-2, maxval=3, seed=0)
    assert r.dtype == "int32" and set(r.raw.unique().tolist()) == {-2, -1, 0, 1, 2}
    s = dt.random_uniform((big,), sparse_dim=vocab, seed=1)
    assert s.dtype == "int64" and s.sparse_dim is vocab and set(s.raw.unique().tolist()) == set(range(7))
    s32 = dt.random_uniform((big,), sparse_dim=vocab, dtype="int32", seed=1)
    assert s32.dtype == "int32" and int(s32.raw.max()) == 6
    f = dt.random_uniform((big,), seed=2)
    assert f.raw.dtype == torch.get_default_dtype() and 0.0 <= float(f.raw.min()) and float(f.raw.max()) < 1.0
    with pytest.raises(TypeError, match=r"dimtorch\.random_uniform\(\): maxval must be a Python number"):
        dt.random_uniform((feat,), maxval=dt.ones((feat,)))


def test_default_device_of_new_tensors(dims):
    """dimtorch._core.default_device (RETURNN frontend's set_default_device): zeros/ones/full (C++ and their
    definitions), random_*, range_over_dim and convert_to_tensor put new tensors there when given no device;
    an explicit device wins; the block restores the one before."""
    from dimtorch._core import default_device
    from dimtorch.ops import creation
    _, _, feat = dims
    makers = [lambda: dt.zeros((feat,)), lambda: dt.ones((feat,)), lambda: dt.full((feat,), 2.0),
              lambda: creation.zeros((feat,)), lambda: dt.random_uniform((feat,)), lambda: dt.random_normal((feat,)),
              lambda: dt.range_over_dim(feat), lambda: dt.convert_to_tensor([1.0, 2.0, 3.0], dims=(feat,))]
    assert default_device.get() is None
    with default_device.set_ctx("meta"):
        assert all(m().raw.device.type == "meta" for m in makers)
        assert dt.zeros((feat,), device="cpu").raw.device.type == "cpu"
        assert dt.convert_to_tensor(1.0, keep_scalar_on_cpu=True).raw.device.type == "cpu"
    assert default_device.get() is None
    assert all(m().raw.device.type == "cpu" for m in makers)
