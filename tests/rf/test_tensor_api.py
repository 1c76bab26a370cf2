"""RETURNN's Tensor API on dimtorch.Tensor itself (dimtorch.rf.tensor.Tensor is dimtorch.Tensor): RETURNN's
constructor and templates, raw_tensor, the markers RETURNN code assigns on a fresh copy, frozen Tensors
(cached and handed out more than once) refusing assignment, copy/copy_template/copy_transpose/
remaining_dims/copy_compatible_to_dims, verify_out_shape, mark_as_* through the run context; each
against positional torch, and where the behaviour is RETURNN's, against RETURNN itself
(tests/rf_api_parity.py; skipped without `returnn`)."""
import pickle

import pytest
import torch

import dimtorch as dt
from dimtorch._core import run_ctx
from dimtorch.rf.tensor import Dim, Tensor, TensorDict, VerifyOutShapeException, batch_dim
from helpers import PAD_LARGE, PAD_NAN, make_padded_batch
from rf_api_parity import names, run_both


@pytest.fixture(autouse=True)
def _unbind_batch_dim():
    yield
    batch_dim.dyn_size_ext = None  # the global batch dim holds no Tensor of a test


def test_the_rf_types_are_dimtorchs_own():
    assert Tensor is dt.Tensor and Dim is dt.Dim
    b = make_padded_batch()
    y = dt.reduce_sum(b.x, axis=b.feature)  # what every op returns has the API
    assert type(y) is Tensor and y.raw_tensor is y.raw and y.dims_set == {b.batch, b.time}


# ---- construction ----------------------------------------------------------------------------

def test_template_form():
    f = Dim(4, name="f")
    t = Tensor("x", [batch_dim, f], dtype="float32")
    assert t.name == "x" and t.dims == (batch_dim, f) and t.dtype == "float32" and t.raw_tensor is None
    assert t.ndim == 2 and t.sparse_dim is None and t.feature_dim is None and t.feature_dim_axis is None
    assert "template" in repr(t)
    assert Tensor(name="k", dims=[f], dtype="int64").dtype == "int64"  # all by keyword
    v = Dim(7, name="v")
    s = Tensor("s", [batch_dim], dtype="int32", sparse_dim=v)
    assert s.sparse_dim is v and s.dtype == "int32"
    assert Tensor("s", [batch_dim], sparse_dim=v).dtype == "int32"  # (RETURNN requires a dtype)
    assert Tensor("y", [batch_dim, f], dtype="float32", feature_dim_axis=-1).feature_dim is f
    assert Tensor("y", [batch_dim, f], dtype="float32", feature_dim=f).feature_dim_axis == 1


def test_template_with_raw_is_a_tensor():
    b = make_padded_batch()
    t = Tensor("x", dims=b.x.dims, dtype="float32", raw_tensor=b.x.raw)
    assert t.raw is b.x.raw and t.name == "x" and t.shape == b.x.shape
    torch.testing.assert_close(dt.reduce_sum(t, axis=b.time).raw, dt.reduce_sum(b.x, axis=b.time).raw)
    assert Tensor("n", [b.batch], raw_tensor=torch.zeros(3, dtype=torch.int64)).dtype == "int64"


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(dims=None), TypeError, "dims are missing"),
    (dict(dtype=3), TypeError, "dtype must be a str"),
    (dict(raw_tensor=[1.0]), TypeError, "raw_tensor must be a torch.Tensor"),
    (dict(raw_tensor=torch.zeros(2)), ValueError, "raw has shape"),
    (dict(raw_tensor=torch.zeros(3, 4, dtype=torch.float64)), ValueError, "has dtype 'float32' but the raw has dtype 'float64'"),
    (dict(feature_dim_axis=5), ValueError, "feature_dim_axis must be an axis"),
    (dict(version=1), ValueError, "version 2"),
    (dict(sparse_dim=3), TypeError, "sparse_dim must be a Dim"),
    (dict(unknown=1), TypeError, "unexpected keyword"),
])
def test_template_form_errors_name_the_call(kwargs, error, match):
    f = Dim(4, name="f")
    args = dict(dims=[Dim(3, name="b"), f], dtype="float32")
    args.update(kwargs)
    with pytest.raises(error, match=match) as info:
        Tensor("x", **args)
    assert "dimtorch.Tensor" in str(info.value) or "unexpected keyword" in str(info.value)


def test_ops_refuse_a_template_naming_it():
    f = Dim(4, name="f")
    t = Tensor("x", [f], dtype="float32")
    with pytest.raises(TypeError, match=r"dimtorch\.exp\(\): an operand is a template without a raw \(dims: f\(4\)\)"):
        dt.exp(t)
    with pytest.raises(AttributeError, match="template without a raw"):
        t.shape
    with pytest.raises(RuntimeError, match="template without a raw"):
        t.raw


# ---- raw_tensor ------------------------------------------------------------------------------

def test_raw_tensor_assignment_checks_like_the_constructor():
    b = make_padded_batch(lengths=(4, 2))
    t = Tensor("x", [b.batch, b.time, b.feature], dtype="float32")
    with pytest.raises(ValueError, match=r"raw_tensor = \.\.\.: raw has shape"):
        t.raw_tensor = torch.zeros(2, 4)
    with pytest.raises(ValueError, match=r"raw_tensor = \.\.\.: dim 'feature'\(4\) has raw size 5"):
        t.raw_tensor = torch.zeros(2, 4, 5)
    with pytest.raises(ValueError, match="max length 4 but raw axis 1 has only size 3"):
        t.raw_tensor = torch.zeros(2, 3, 4)
    with pytest.raises(ValueError, match="has dtype 'float32' but the raw has dtype 'int64'"):
        t.raw_tensor = torch.zeros(2, 4, 4, dtype=torch.int64)
    with pytest.raises(TypeError, match="raw must be a torch.Tensor or None"):
        t.raw_tensor = [1.0]
    assert t.raw_tensor is None  # every refusal left it a template
    raw = torch.randn(2, 6, 4)  # padded beyond the longest: allowed
    t.raw_tensor = raw
    assert t.raw is raw and t.shape == (2, 6, 4)
    t.raw_tensor = torch.zeros(2, 4, 4)  # another raw of another padded size, same dtype
    assert t.shape == (2, 4, 4) and t.dtype == "float32"
    with pytest.raises(ValueError, match="has dtype 'float32' but the raw has dtype 'float64'"):
        t.raw_tensor = torch.zeros(2, 4, 4, dtype=torch.float64)
    t.raw_tensor = None  # a template again: ops refuse it, it keeps its dtype
    assert t.raw_tensor is None and t.dtype == "float32"
    with pytest.raises(TypeError, match="template"):
        dt.exp(t)
    t.raw_tensor = raw
    torch.testing.assert_close(dt.exp(t).raw, raw.exp())


def test_raw_tensor_on_a_tensor_made_by_dimtorch():
    b = make_padded_batch(pad_value=PAD_LARGE)
    x = b.x.copy()
    new = torch.randn(*b.x.shape)
    x.raw_tensor = new
    assert x.raw is new and b.x.raw is not new  # the copy changed, the original did not
    torch.testing.assert_close(dt.reduce_max(x, axis=b.time).raw,
                               torch.stack([new[i, :n].amax(0) for i, n in enumerate(b.lengths)]))


# ---- markers ---------------------------------------------------------------------------------

def test_markers_assigned_on_a_fresh_copy():
    b = make_padded_batch()
    vocab = Dim(10, name="vocab")
    y = b.x.copy()
    y.sparse_dim = vocab
    y.feature_dim = b.feature
    assert y.sparse_dim is vocab and y.feature_dim is b.feature and y.feature_dim_axis == 2
    y.feature_dim_axis = 0
    assert y.feature_dim is b.batch
    assert b.x.sparse_dim is None and b.x.feature_dim is b.feature  # the copy's, not the original's
    y.feature_dim_axis = -1
    assert y.feature_dim is b.feature
    y.feature_dim_axis = None
    assert y.feature_dim is None
    y.name = "renamed"
    assert y.name == "renamed"
    with pytest.raises(ValueError, match=r"feature_dim = \.\.\.: 'vocab'\(10\) is not one of the dims"):
        y.feature_dim = vocab
    with pytest.raises(ValueError, match=r"feature_dim_axis = \.\.\.: expected an axis"):
        y.feature_dim_axis = 3
    with pytest.raises(TypeError, match=r"sparse_dim = \.\.\.: expected a Dim or None, got int"):
        y.sparse_dim = 3
    # ops carry the assigned markers as they carry given ones
    assert dt.exp(y.copy()).name is None and dt.cast(y, "int64").sparse_dim is vocab


def test_frozen_tensors_refuse_assignment_naming_the_call():
    b = make_padded_batch()
    mask = b.time.get_mask()
    lengths = b.time.lengths
    for frozen in (mask, lengths, (b.time + 1).lengths):
        assert frozen._frozen
        for name, value in (("raw_tensor", frozen.raw), ("raw_tensor", None), ("sparse_dim", b.feature),
                            ("feature_dim", None if frozen.feature_dim is None else frozen.dims[0]),
                            ("name", "n")):
            if name == "feature_dim" and value is None:
                continue
            with pytest.raises(AttributeError, match=rf"dimtorch\.Tensor\.{name} = \.\.\.: this Tensor is frozen.*copy\(\) it"):
                setattr(frozen, name, value)
        with pytest.raises(AttributeError, match="frozen"):
            frozen.feature_dim_axis = 0
        c = frozen.copy()  # a copy may change
        assert not c._frozen
        c.name = "free"
        assert c.name == "free"
    with pytest.raises(AttributeError, match="stays frozen"):
        mask._frozen = False


def test_get_mask_gives_the_same_tensor_while_it_lives():
    b = make_padded_batch(lengths=(3, 1))
    m1 = b.time.get_mask()
    m2 = b.time.get_mask()
    assert m1 is m2 and m1._frozen
    assert b.time.get_mask(dims_order=(b.time, b.batch)) is not m1  # another layout
    m3 = b.time.get_mask(dims_order=[b.time, b.batch])  # the definition's path (a list)
    assert m3 is b.time.get_mask(dims_order=(b.time, b.batch)) and m3.dims == (b.time, b.batch)
    torch.testing.assert_close(m1.raw, torch.tensor([[True, True, True], [True, False, False]]))


# ---- copies, dims ----------------------------------------------------------------------------

def test_copy_copy_template_copy_transpose():
    b = make_padded_batch()
    x = Tensor("x", b.x.dims, dtype="float32", raw_tensor=b.x.raw, feature_dim=b.feature)
    c = x.copy()
    assert c is not x and c.raw is x.raw and c.name == "x" and c.feature_dim is b.feature
    assert x.copy("other").name == "other" and x.copy(name="o2").name == "o2"
    t = x.copy_template()
    assert t.raw_tensor is None and t.dims == x.dims and t.dtype == "float32" and t.feature_dim is b.feature
    assert t.copy().raw_tensor is None and t.copy("n").name == "n"  # a template's copy is a template
    assert x.copy_template(name="i", dtype="int32").dtype == "int32"
    y = x.copy_transpose([2, 0, 1])  # RETURNN's axes by position
    assert y.dims == (b.feature, b.batch, b.time)
    torch.testing.assert_close(y.raw, x.raw.permute(2, 0, 1), equal_nan=True)
    assert x.copy_transpose([b.feature, 0, -2]).dims == (b.feature, b.batch, b.time)
    with pytest.raises(ValueError, match=r"copy_transpose\(\): axis 3 is out of range"):
        x.copy_transpose([3, 0, 1])
    import copy as _copy
    assert _copy.deepcopy(t).raw_tensor is None and _copy.copy(x).raw is x.raw


def test_remaining_dims_and_dim_helpers():
    b = make_padded_batch()
    x = b.x
    assert x.remaining_dims((b.time, None)) == [b.batch, b.feature]
    assert x.remaining_dims() == [b.batch, b.time, b.feature]
    assert x.dims_set == {b.batch, b.time, b.feature} and x.dim_tags == x.dims
    assert x.batch_dim_axis is None  # b.batch is a plain Dim(None), not of kind Batch
    assert Tensor("t", [Dim(2, name="a"), batch_dim], dtype="float32").batch_dim_axis == 1
    assert x.get_axis_from_description(b.time) == 1 and x.get_axis_from_description(-1) == 2
    assert x.get_dim_tag(0) is b.batch and x.get_dyn_size_tags() == [b.time]
    assert x.batch_shape == (None, None, 4) and x.control_flow_ctx is None


def test_copy_compatible_to_dims_against_torch():
    b = make_padded_batch(lengths=(3, 2))
    extra = Dim(2, name="extra")
    v = Tensor("v", [b.feature, b.batch], dtype="float32", raw_tensor=torch.randn(4, 2))
    dims = (b.batch, extra, b.time, b.feature)
    raw = v.copy_compatible_to_dims_raw(dims)
    torch.testing.assert_close(raw, v.raw.t()[:, None, None, :])
    full = v.copy_compatible_to_dims_raw(dims, unbroadcast=True)
    assert full.shape == (2, 2, 3, 4)
    torch.testing.assert_close(full, v.raw.t()[:, None, None, :].expand(2, 2, 3, 4))
    y = v.copy_compatible_to_dims(dims)  # dimtorch has no size-1 broadcast dims: a broadcast view
    assert y.dims == dims and y.shape == (2, 2, 3, 4)
    torch.testing.assert_close(y.raw, full)
    assert v.copy_compatible_to_dims((b.batch, b.feature)).dims == (b.batch, b.feature)
    with pytest.raises(ValueError, match="add_dims=False"):
        v.copy_compatible_to_dims(dims, add_dims=False)
    with pytest.raises(ValueError, match=r"copy_compatible_to_dims\(\): dim 'batch'\(\?\) is not in the tensor and "
                                         r"takes its size from data"):
        Tensor("w", [b.feature], dtype="float32", raw_tensor=torch.ones(4)).copy_compatible_to_dims((b.batch, b.feature))
    t = Tensor("t", dims, dtype="float32")
    assert v.copy_compatible_to(t, unbroadcast=True).dims == dims
    with pytest.raises(ValueError, match="dtype float32 differs"):
        v.copy_compatible_to(Tensor("i", dims, dtype="int32"))


def test_verify_out_shape():
    b = make_padded_batch()
    b.x.verify_out_shape({b.batch, b.time, b.feature})
    b.x.verify_out_shape([b.feature, b.time, b.batch])
    with pytest.raises(VerifyOutShapeException, match=r"verify_out_shape\(\): the tensor has dims .*missing: 'other'"):
        b.x.verify_out_shape({b.batch, b.time, b.feature, Dim(2, name="other")})
    with pytest.raises(VerifyOutShapeException, match="not expected: 'time'"):
        b.x.verify_out_shape({b.batch, b.feature})
    assert issubclass(VerifyOutShapeException, ValueError)


# ---- the run context -------------------------------------------------------------------------

class _FakeRunCtx:
    step = 0  # the protocol's attribute (python/dimtorch/_core/run_ctx.py): install() reads it

    def __init__(self):
        self.calls = []

    def mark_as_loss(self, tensor, name, **options):
        self.calls.append(("loss", tensor, name, options))

    def mark_as_output(self, tensor, name, *, shape=None):
        self.calls.append(("output", tensor, name, shape))

    def mark_as_default_output(self, tensor, *, shape=None):
        self.calls.append(("default", tensor, shape))


@pytest.fixture
def fake_ctx():
    ctx = _FakeRunCtx()
    run_ctx.install(ctx)
    yield ctx
    run_ctx.install(None)


def test_mark_as_hands_the_tensor_to_the_run_context(fake_ctx):
    b = make_padded_batch()
    b.x.mark_as_loss("ce", scale=0.5, as_error=True, use_normalized_loss=True, custom_inv_norm_factor=b.time.lengths)
    b.x.mark_as_output("out", shape=(b.batch, b.time, b.feature))
    b.time.get_mask().mark_as_default_output(shape=[b.batch, b.time])  # frozen: handing it on is no change
    (kind, t, name, options), out, default = fake_ctx.calls
    assert (kind, name) == ("loss", "ce") and t is b.x
    assert options == dict(scale=0.5, as_error=True, use_normalized_loss=True, use_flatten_frames=True,
                           custom_inv_norm_factor=b.time.lengths)
    assert out == ("output", b.x, "out", (b.batch, b.time, b.feature))
    assert default[0] == "default" and default[2] == [b.batch, b.time]
    with pytest.raises(TypeError, match=r"mark_as_output\(\): name must be a str"):
        b.x.mark_as_output(3)


def test_mark_as_without_a_run_context_names_the_call():
    x = make_padded_batch().x
    for call, name in ((lambda: x.mark_as_loss("l"), "mark_as_loss"), (lambda: x.mark_as_output("o"), "mark_as_output"),
                       (lambda: x.mark_as_default_output(), "mark_as_default_output")):
        with pytest.raises(RuntimeError, match=rf"dimtorch\.Tensor\.{name}\(\): no run context: call "
                                               r"dimtorch\.rf\.init_train_step_run_ctx\(\)"):
            call()


# ---- torch.compile, pickling ------------------------------------------------------------------

def test_marker_assignment_and_templates_under_torch_compile():
    b = make_padded_batch(lengths=(4, 2), pad_value=0.0)
    vocab = Dim(10, name="vocab")

    def fn(x):
        y = x.copy()
        y.sparse_dim = vocab
        y.feature_dim_axis = -1
        t = Tensor("t", [b.batch, b.time, b.feature], dtype="float32")
        t.raw_tensor = y.raw * 2
        return y, t

    y, t = torch.compile(fn, backend="eager", fullgraph=True)(b.x)
    assert y.sparse_dim is vocab and y.feature_dim is b.feature and b.x.sparse_dim is None
    assert t.dims == b.x.dims and t.name == "t"
    torch.testing.assert_close(t.raw, b.x.raw * 2)


def test_pickled_copy_keeps_assigned_markers():
    b = make_padded_batch()
    y = b.x.copy()
    y.sparse_dim = b.feature
    z = pickle.loads(pickle.dumps(y))
    assert z.sparse_dim.name == "feature" and z.shape == y.shape


# ---- RETURNN gives the same ------------------------------------------------------------------

def _tensor_program(T):
    time = T.Dim(T.Tensor("time", [T.batch_dim], dtype="int32"))
    feat, vocab = T.Dim(5, name="feat"), T.Dim(10, name="vocab")
    x = T.Tensor("x", [T.batch_dim, time, feat], dtype="float32")
    out = [x.dtype, x.raw_tensor, x.feature_dim, x.feature_dim_axis, x.batch_dim_axis, names(x.dims, T)]
    out.append(T.Tensor("s", [T.batch_dim, time], dtype="int32", sparse_dim=vocab).dtype)
    out.append(T.Tensor("y", [T.batch_dim, feat], dtype="float32", feature_dim_axis=-1).feature_dim.name)
    T.batch_dim.dyn_size_ext = T.Tensor("batch", [], dtype="int32", raw_tensor=torch.tensor(3, dtype=torch.int32))
    time.dyn_size_ext = T.Tensor("time", [T.batch_dim], dtype="int32",
                                 raw_tensor=torch.tensor([4, 2, 3], dtype=torch.int32))
    raw = torch.arange(60, dtype=torch.float32).view(3, 4, 5)
    xx = T.Tensor("x", [T.batch_dim, time, feat], dtype="float32", raw_tensor=raw)
    out += [xx.copy().name, xx.copy("n2").name, xx.copy().raw_tensor is raw, xx.copy_template().raw_tensor,
            xx.copy_template(name="c", dtype="int32").dtype, names(xx.remaining_dims(time), T),
            type(xx.remaining_dims(time)).__name__, names(xx.copy_transpose([2, 0, 1]).dims, T),
            xx.copy_transpose([2, 0, 1]).raw_tensor.tolist(), sorted(names(xx.dims_set, T))]
    v = T.Tensor("v", [feat], dtype="float32", raw_tensor=torch.arange(5.0))
    out.append(v.copy_compatible_to_dims_raw((T.batch_dim, time, feat)).tolist())
    out.append(xx.verify_out_shape({T.batch_dim, time, feat}))
    try:
        xx.verify_out_shape({T.batch_dim, feat})
        out.append("no error")
    except Exception as e:  # noqa: BLE001
        out.append(type(e).__name__)
    y = xx.copy()
    y.sparse_dim = vocab
    out += [y.sparse_dim.name, xx.sparse_dim]
    y = xx.copy()
    y.feature_dim = feat
    out += [y.feature_dim_axis, xx.feature_dim]
    y = xx.copy()
    y.feature_dim_axis = 2
    out.append(y.feature_dim.name)
    y.raw_tensor = torch.ones(3, 4, 5)
    out.append(y.raw_tensor.sum().item())
    for bad in (torch.zeros(3, 4, 6), torch.zeros(3, 4, 5, dtype=torch.float64)):
        try:
            y.raw_tensor = bad
            out.append("no error")
        except ValueError:
            out.append("ValueError")
    m = time.get_mask()
    out += [m is time.get_mask(), names(m.dims, T), m.raw_tensor.tolist()]
    return out


def test_tensor_api_gives_what_returnn_gives():
    rf_out, dt_out = run_both(_tensor_program)
    assert dt_out == rf_out


def test_templates_and_global_dims_pickle():
    import io
    f = Dim(3, name="f")
    t = Tensor("t", [batch_dim, f], dtype="int32", sparse_dim=f)
    buf = io.BytesIO()
    torch.save({"t": t, "b": batch_dim}, buf)
    for u in (pickle.loads(pickle.dumps({"t": t, "b": batch_dim})),
              torch.load(io.BytesIO(buf.getvalue()), weights_only=True)):
        u, b = u["t"], u["b"]
        assert b is batch_dim and u.dims[0] is batch_dim and u.raw_tensor is None and u.dtype == "int32"
        assert u.name == "t" and u.sparse_dim is u.dims[1] and u.dims[1].size == 3
