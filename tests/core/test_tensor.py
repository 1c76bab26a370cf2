"""Tests of the native Tensor type (src/core/tensor.cpp): construction checks, properties, copies, views."""
import copy
import weakref

import pytest
import torch

import dimtorch as dt
from helpers import align_raw, make_padded_batch


@pytest.fixture
def bd():
    """A padded batch (lengths 5, 3, 1; NaN padding) over (batch, time, feature=4)."""
    return make_padded_batch((5, 3, 1), 4)


def test_construction_and_properties(bd):
    raw = torch.randn(3, 5, 4)
    x = dt.Tensor(raw, (bd.batch, bd.time, bd.feature))
    assert x.raw is raw
    assert x.dims == (bd.batch, bd.time, bd.feature)
    assert isinstance(x.dims, tuple)
    assert x.shape == (3, 5, 4)
    assert x.ndim == 3
    assert x.dtype == "float32"
    assert x.device == torch.device("cpu")
    assert x.sparse_dim is None and x.feature_dim is None and x.name is None
    assert x.requires_grad is False
    assert dt.Tensor(raw.requires_grad_(), (bd.batch, bd.time, bd.feature)).requires_grad is True


def test_dims_as_list_or_single_dim(bd):
    x = dt.Tensor(torch.zeros(3, 4), [bd.batch, bd.feature])
    assert x.dims == (bd.batch, bd.feature)
    y = dt.Tensor(torch.zeros(4), bd.feature)
    assert y.dims == (bd.feature,)
    s = dt.Tensor(torch.tensor(1.5), ())
    assert s.dims == () and s.shape == () and s.ndim == 0


@pytest.mark.parametrize(
    "torch_dtype, name",
    [(torch.float32, "float32"), (torch.float64, "float64"), (torch.float16, "float16"),
     (torch.bfloat16, "bfloat16"), (torch.int64, "int64"), (torch.int32, "int32"), (torch.int16, "int16"),
     (torch.int8, "int8"), (torch.uint8, "uint8"), (torch.bool, "bool"), (torch.complex64, "complex64")],
)
def test_dtype_names(torch_dtype, name):
    f = dt.Dim(2, name="f")
    assert dt.Tensor(torch.zeros(2, dtype=torch_dtype), (f,)).dtype == name


def test_sparse_feature_name(bd):
    classes = dt.Dim(10, name="classes")
    t = dt.Tensor(torch.zeros(3, 5, dtype=torch.int64), (bd.batch, bd.time), sparse_dim=classes, name="targets")
    assert t.sparse_dim is classes and t.name == "targets"
    x = dt.Tensor(torch.zeros(3, 5, 4), (bd.batch, bd.time, bd.feature), feature_dim=bd.feature,
                  sparse_dim=None, name=None)
    assert x.feature_dim is bd.feature and x.name is None


def test_positional_arguments_limit(bd):
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\(\) takes 2 positional arguments \(raw, dims\), 3 given"):
        dt.Tensor(torch.zeros(4), (bd.feature,), bd.feature)
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\(\) got an unexpected keyword argument 'foo'"):
        dt.Tensor(torch.zeros(4), (bd.feature,), foo=1)
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\(\) got multiple values for argument 'raw'"):
        dt.Tensor(torch.zeros(4), (bd.feature,), raw=torch.zeros(4))
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\(\): missing argument 'dims'"):
        dt.Tensor(torch.zeros(4))


# ---- construction checks -------------------------------------------------------------------


def test_raw_ndim_mismatch(bd):
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\(\): raw has shape torch\.Size\(\[3, 4\]\) \(2 axes\) but 3 dims were given \(dims: batch, time, feature\(4\)\)"):
        dt.Tensor(torch.zeros(3, 4), (bd.batch, bd.time, bd.feature))


def test_static_size_mismatch(bd):
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\(\): dim 'feature'\(4\) has raw size 5 at axis 2 \(raw shape torch\.Size\(\[3, 5, 5\]\)"):
        dt.Tensor(torch.zeros(3, 5, 5), (bd.batch, bd.time, bd.feature))


def test_duplicate_dims(bd):
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\(\): dim 'batch'\(\?\) appears twice \(dims: batch:3, batch:3\)"):
        dt.Tensor(torch.zeros(3, 3), (bd.batch, bd.batch))


def test_dynamic_dim_raw_shorter_than_max_length(bd):
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\(\): dim 'time'\[batch\] has max length 5 but raw axis 1 has only size 4"):
        dt.Tensor(torch.zeros(3, 4, 4), (bd.batch, bd.time, bd.feature))


def test_dynamic_dim_raw_longer_than_max_length_is_fine(bd):
    x = dt.Tensor(torch.zeros(3, 7, 4), (bd.batch, bd.time, bd.feature))
    assert x.shape == (3, 7, 4)


def test_lengths_batch_size_mismatch(bd):
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\(\): dim 'time'\[batch\] has lengths over 'batch'\(\?\) of size 3, but the raw has size 2 there"):
        dt.Tensor(torch.zeros(2, 5, 4), (bd.batch, bd.time, bd.feature))


def test_non_dim_in_dims(bd):
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\(\): dims\[1\] must be a Dim, got str"):
        dt.Tensor(torch.zeros(3, 4), (bd.batch, "feature"))
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\(\): dims must be a Dim or a sequence of Dims, got int"):
        dt.Tensor(torch.zeros(3), 3)


@pytest.mark.parametrize("raw", [[1.0, 2.0], 3.0, None])
def test_non_tensor_raw(raw):
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\(\): raw must be a torch\.Tensor, got"):
        dt.Tensor(raw, (dt.Dim(2),))


def test_a_str_first_is_returnns_form_a_named_template():
    # RETURNN's Tensor(name, dims, dtype): tests/rf/test_tensor_api.py has the rest.
    t = dt.Tensor("abc", (dt.Dim(2),))
    assert t.name == "abc" and t.raw_tensor is None and t.dtype == "float32"


def test_bad_sparse_feature_name(bd):
    raw = torch.zeros(3, 4)
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\(\): sparse_dim must be a Dim or None, got int"):
        dt.Tensor(raw, (bd.batch, bd.feature), sparse_dim=3)
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\(\): feature_dim must be one of the dims \(batch, feature\(4\)\), got 'time'\[batch\]"):
        dt.Tensor(raw, (bd.batch, bd.feature), feature_dim=bd.time)
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\(\): name must be a str or None, got int"):
        dt.Tensor(raw, (bd.batch, bd.feature), name=1)


def test_too_many_dims():
    dims = tuple(dt.Dim(1) for _ in range(25))
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\(\): at most 24 dims are supported, got 25"):
        dt.Tensor(torch.zeros([1] * 25), dims)


# ---- methods ---------------------------------------------------------------------------------


def test_repr(bd):
    x = dt.Tensor(torch.zeros(3, 5, 4), (bd.batch, bd.time, bd.feature), feature_dim=bd.feature, name="x")
    assert repr(x) == "Tensor{'x', dims=(batch:3, time:5, feature:4), dtype='float32', feature_dim='feature'(4)}"
    classes = dt.Dim(7, name="classes")
    y = dt.Tensor(torch.zeros(3, dtype=torch.int64), (bd.batch,), sparse_dim=classes)
    assert repr(y) == "Tensor{dims=(batch:3), dtype='int64', sparse_dim='classes'(7)}"


def test_copy_shares_raw_and_metadata(bd):
    x = dt.Tensor(torch.zeros(3, 5, 4), (bd.batch, bd.time, bd.feature), feature_dim=bd.feature, name="x")
    for c in (x.copy(), copy.copy(x)):
        assert c is not x
        assert c.raw is x.raw and c.dims is x.dims
        assert c.feature_dim is bd.feature and c.name == "x"


def test_deepcopy_copies_raw_keeps_dims(bd):
    x = dt.Tensor(torch.randn(3, 5, 4), (bd.batch, bd.time, bd.feature), name="x")
    c = copy.deepcopy(x)
    assert c.raw is not x.raw and torch.equal(c.raw, x.raw)
    assert c.dims == x.dims and c.dims[1] is bd.time and c.name == "x"


def test_copy_transpose(bd):
    x = bd.x
    y = x.copy_transpose((bd.feature, bd.batch, bd.time))
    assert y.dims == (bd.feature, bd.batch, bd.time)
    assert y.shape == (4, 3, 5)
    assert torch.equal(y.raw, x.raw.permute(2, 0, 1)) or torch.allclose(y.raw, x.raw.permute(2, 0, 1), equal_nan=True)
    assert y.feature_dim is bd.feature
    same = x.copy_transpose(x.dims)
    assert same.raw is x.raw


def test_copy_transpose_errors(bd):
    x = bd.x
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\.copy_transpose\(\): dims must be a permutation of the tensor's dims \(batch:3, time:5, feature:4\), got \(feature\(4\), time\)"):
        x.copy_transpose((bd.feature, bd.time))
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\.copy_transpose\(\): dim 'feature'\(4\) appears twice in the target dims"):
        x.copy_transpose((bd.feature, bd.time, bd.feature))
    other = dt.Dim(4, name="other")
    with pytest.raises(ValueError, match=r"dim 'batch'\(\?\) of the tensor is not in the target dims"):
        x.copy_transpose((bd.feature, bd.time, other))


def test_raw_aligned(bd):
    x = bd.x
    extra = dt.Dim(2, name="extra")
    order = (bd.time, extra, bd.feature, bd.batch)
    r = x.raw_aligned(order)
    assert r.shape == (5, 1, 4, 3)
    torch.testing.assert_close(r, align_raw(x.raw, x.dims, order), equal_nan=True)
    assert x.raw_aligned(x.dims) is x.raw
    assert r.data_ptr() == x.raw.data_ptr()  # a view, no copy
    assert x.raw_aligned([bd.batch, bd.time, bd.feature, extra]).shape == (3, 5, 4, 1)
    s = dt.Tensor(torch.tensor(2.0), ())
    assert s.raw_aligned((bd.feature, extra)).shape == (1, 1)


def test_raw_aligned_missing_dim_is_an_error(bd):
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\.raw_aligned\(\): dim 'time'\[batch\] of the tensor is not in the target dims \(feature\(4\), batch\); tensor dims: batch:3, time:5, feature:4"):
        bd.x.raw_aligned((bd.feature, bd.batch))
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\.raw_aligned\(\): dims must be a Dim or a sequence of Dims, got int"):
        bd.x.raw_aligned(3)
    with pytest.raises(ValueError, match=r"appears twice in the target dims"):
        bd.x.raw_aligned((bd.batch, bd.time, bd.feature, bd.batch))


def test_raw_aligned_keeps_grad(bd):
    raw = torch.randn(3, 5, 4, requires_grad=True)
    x = dt.Tensor(raw, (bd.batch, bd.time, bd.feature))
    x.raw_aligned((bd.feature, dt.Dim(1), bd.time, bd.batch)).sum().backward()
    assert torch.equal(raw.grad, torch.ones(3, 5, 4))


def test_remaining_dims(bd):
    x = bd.x
    assert x.remaining_dims(bd.time) == [bd.batch, bd.feature]  # a list, as RETURNN gives it
    assert x.remaining_dims((bd.feature, bd.batch)) == [bd.time]
    assert x.remaining_dims([]) == list(x.dims) == x.remaining_dims()
    assert x.remaining_dims((bd.time, None)) == [bd.batch, bd.feature]  # None: nothing (RETURNN's demo)
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\.remaining_dims\(\): dim 'other'\(3\) is not in the tensor \(dims: batch:3, time:5, feature:4\)"):
        x.remaining_dims(dt.Dim(3, name="other"))
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\.remaining_dims\(\): remove must be a Dim or a sequence of Dims, got str"):
        x.remaining_dims("time")


def test_get_axis(bd):
    x = bd.x
    assert [x.get_axis(d) for d in (bd.batch, bd.time, bd.feature)] == [0, 1, 2]
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\.get_axis\(\): dim 'other'\(3\) is not in the tensor \(dims: batch:3, time:5, feature:4\)"):
        x.get_axis(dt.Dim(3, name="other"))
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\.get_axis\(\): expected a Dim, got str"):
        x.get_axis("time")


def test_bool_and_len_raise(bd):
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\.__bool__\(\): the truth value of a Tensor is ambiguous"):
        bool(bd.x)
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\.__bool__\(\)"):
        if bd.x > 0:
            pass
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\.__len__\(\): a Tensor has no length, it has dims \(batch:3, time:5, feature:4\)"):
        len(bd.x)


def test_hash_is_identity(bd):
    x, y = bd.x, bd.x.copy()
    assert hash(x) == hash(x) and hash(x) != hash(y)
    assert x in {x} and y not in {x}
    assert {x: 1, y: 2}[y] == 2
    assert isinstance(x == x, dt.Tensor)  # == stays elementwise


def test_weakref(bd):
    x = bd.x.copy()
    r = weakref.ref(x)
    assert r() is x
    del x
    assert r() is None


def test_tensor_subclass_adds_no_fields():
    """A subclass (dimtorch.rf.Parameter is one) must declare __slots__ = (): its instances have
    Tensor's layout; one with an instance dict or slots is refused."""
    with pytest.raises(TypeError, match="__slots__ = \\(\\)"):
        type("Sub", (dt.Tensor,), {})
    with pytest.raises(TypeError):
        type("Sub", (dt.Tensor,), {"__slots__": ("x",)})
    sub = type("Sub", (dt.Tensor,), {"__slots__": ()})
    t = sub.__new__(sub)
    dt.Tensor.__init__(t, torch.arange(3.0), (dt.Dim(3, name="a"),))
    assert isinstance(t, dt.Tensor) and type(t) is sub
    a = t.dims[0]
    y = t * 2.0 + t  # the fast paths take it as a Tensor
    assert type(y) is dt.Tensor and y.raw.tolist() == [0.0, 3.0, 6.0]
    assert dt.reduce_sum(t, axis=a).raw.item() == 3.0
