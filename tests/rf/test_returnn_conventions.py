"""RETURNN conventions that dimtorch.rf keeps on dimtorch's own Tensor and Dim (docs/porting_from_returnn.md,
"What differs"): `Dim.dyn_size` is the raw lengths (dimtorch's lengths Tensor is `Dim.lengths`), numpy raws
are converted to torch where a raw is assigned (a declared dim's lengths template binds the dim),
copy_compatible_to adds a size-1 broadcast dim for a dim the tensor lacks, copy_masked leaves a dim
whose lengths are over a dim the tensor lacks unmasked, Parameter.initial takes a value over other
Dims of the same layout. Each against positional torch and, where returnn is installed, against RETURNN
(the same program on both: tests/rf_api_parity.py)."""
import math

import numpy
import pytest
import torch

import dimtorch as dt
import dimtorch.rf as drf
from dimtorch.rf.tensor import Dim, Tensor, batch_dim
from rf_api_parity import run_both
from rf_parity import setup_rf


@pytest.fixture(autouse=True)
def _unbind_batch_dim():
    yield
    batch_dim.dyn_size_ext = None  # the global batch dim holds no Tensor of a test


# ---- Dim.dyn_size: RETURNN's raw lengths ------------------------------------------------------

def _dyn_size_program(T):
    b = T.Dim(3, name="b")
    time = T.Dim(T.Tensor("time", [b], dtype="int32"))
    feat = T.Dim(4, name="feat")
    out = [time.dyn_size, feat.dyn_size]
    time.dyn_size_ext = T.Tensor("time", [b], dtype="int32", raw_tensor=torch.tensor([3, 1, 2], dtype=torch.int32))
    raw = time.dyn_size
    out += [type(raw).__name__, raw.tolist(), raw is time.dyn_size_ext.raw_tensor, str(raw.dtype)]
    return out


def test_dyn_size_is_the_raw_lengths_as_in_returnn():
    rf_out, dt_out = run_both(_dyn_size_program)
    assert dt_out == rf_out


def test_dyn_size_and_lengths_of_dims_made_by_dimtorch():
    b = dt.Dim(2, name="b")
    time = dt.Dim(dt.Tensor(torch.tensor([4, 2]), [b]), name="time")
    assert isinstance(time.lengths, dt.Tensor) and time.lengths.dims == (b,)
    assert time.dyn_size is time.lengths.raw  # the raw of dimtorch's lengths Tensor
    assert (time + 1).dyn_size.tolist() == [5, 3] and (time + 1).lengths.raw.tolist() == [5, 3]
    assert b.dyn_size is None and b.lengths is None and dt.Dim(None, name="n").dyn_size is None
    time.dyn_size = numpy.array([1, 2])  # RETURNN's setter: bound over the dims the lengths have
    assert time.lengths.raw.tolist() == [1, 2] and time.lengths.dims == (b,) and time.get_max_size() == 2
    with pytest.raises(ValueError, match=r"dimtorch\.Dim\.dyn_size = \.\.\.: dim 'n'\(\?\) has no lengths"):
        dt.Dim(None, name="n").dyn_size = torch.tensor([1])


# ---- numpy raws --------------------------------------------------------------------------------

def _numpy_program(T):
    b = T.Dim(3, name="b")
    enc = T.Dim(T.Tensor("enc", dims=[b], dtype="int64"))
    dec = T.Dim(T.Tensor("dec", dims=[b], dtype="int64"))
    enc.dyn_size_ext.raw_tensor = numpy.array([4, 2, 3])  # RETURNN binds a declared dim this way
    dec.dyn_size_ext.raw_tensor = numpy.array([1, 2, 2])
    out = [numpy.asarray(enc.dyn_size_ext.raw_tensor).tolist(), numpy.asarray(dec.dyn_size).tolist(),
           int(sum(enc.dyn_size_ext.raw_tensor * dec.dyn_size_ext.raw_tensor))]
    x = T.Tensor("x", [b, enc], dtype="float32", raw_tensor=numpy.arange(12, dtype="float32").reshape(3, 4))
    out.append(numpy.asarray(x.raw_tensor).tolist())
    y = T.Tensor("y", [b], dtype="int32")
    y.raw_tensor = numpy.array([7, 8, 9], dtype="int32")
    out.append(numpy.asarray(y.raw_tensor).tolist())
    return out


def test_numpy_raws_as_in_returnn():
    rf_out, dt_out = run_both(_numpy_program)
    assert dt_out == rf_out


def test_numpy_raws_become_torch_once_and_bind_declared_dims():
    b = Dim(3, name="b")
    enc = Dim(Tensor("enc", dims=[b], dtype="int64"))
    copy = enc.copy(same_as_self=False, description="enc2")  # declared with the same template
    enc.dyn_size_ext.raw_tensor = numpy.array([4, 2, 3])
    assert isinstance(enc.dyn_size, torch.Tensor) and enc.lengths.raw.tolist() == [4, 2, 3]
    assert enc.get_max_size() == 4 and copy.lengths.raw.tolist() == [4, 2, 3]
    x = Tensor("x", [b, enc], dtype="float32", raw_tensor=numpy.zeros((3, 4), dtype="float32"))
    assert type(x.raw_tensor) is torch.Tensor and dt.reduce_sum(x, axis=enc).raw.tolist() == [0, 0, 0]
    x.raw_tensor = numpy.ones((3, 4), dtype="float32")
    assert type(x.raw_tensor) is torch.Tensor and dt.reduce_sum(x, axis=enc).raw.tolist() == [4, 2, 3]
    # what stays refused names the setter
    with pytest.raises(TypeError, match=r"dimtorch\.Tensor\.raw_tensor = \.\.\.: raw must be a torch\.Tensor"):
        x.raw_tensor = [[1.0] * 4] * 3
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\.raw_tensor = \.\.\."):
        x.raw_tensor = numpy.ones((2, 4), dtype="float32")
    with pytest.raises(AttributeError, match="frozen"):  # bound lengths: rebound by dyn_size_ext = ...
        enc.lengths.raw_tensor = torch.tensor([1, 1, 1])
    other = Dim(Tensor("other", dims=[b], dtype="int64"))
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\.raw_tensor = \.\.\. \(the lengths of 'other'\(\?\)\): "
                                         r"dimtorch\.Tensor: raw has shape .*b\(3\)"):
        other.dyn_size_ext.raw_tensor = numpy.array(5)
    assert other.lengths is None


# ---- copy_compatible_to: a size-1 broadcast dim for a dim the tensor lacks ---------------------

def _copy_compatible_program(T):
    b, beam, hist, one = T.Dim(2, name="b"), T.Dim(3, name="beam"), T.Dim(0, name="hist"), T.Dim(1, name="one")
    x = T.Tensor("x", [b, beam], dtype="int32", raw_tensor=torch.arange(6, dtype=torch.int32).view(2, 3))
    out = []
    for template_dims in ([b, beam, hist], [hist, beam, b, one], [beam, b]):
        y = x.copy_compatible_to(T.Tensor("t", template_dims, dtype="int32"))
        out.append([(d.dimension, d in template_dims) for d in y.dims])
        out.append([tuple(y.raw_tensor.shape), y.raw_tensor.flatten().tolist()])
    y = x.copy_compatible_to(T.Tensor("t", [b, beam, hist], dtype="int32"), unbroadcast=True)
    out.append([list(y.dims) == [b, beam, hist], tuple(y.raw_tensor.shape)])
    return out


def test_copy_compatible_to_adds_broadcast_dims_as_returnn():
    rf_out, dt_out = run_both(_copy_compatible_program)
    assert dt_out == rf_out


def test_copy_compatible_to_against_torch():
    b, beam, hist = Dim(2, name="b"), Dim(3, name="beam"), Dim(5, name="hist")
    raw = torch.randn(2, 3)
    x = Tensor(raw, [b, beam])
    y = x.copy_compatible_to(Tensor("t", [beam, hist, b], dtype="float32"))
    assert y.dims[0] is beam and y.dims[2] is b and y.dims[1] is not hist and y.dims[1].size == 1
    assert y.dims[1].name == "hist_dummy_dim1" and torch.equal(y.raw, raw.t().unsqueeze(1))
    assert (y + dt.Tensor(torch.ones(3, 2), [beam, b])).dims == y.dims  # it broadcasts as a dim of its own
    with pytest.raises(ValueError, match=r"'beam'\(3\)"):  # a dim of the tensor that the template lacks
        x.copy_compatible_to(Tensor("t", [b, hist], dtype="float32"))


# ---- copy_masked: lengths over a dim the tensor lacks ------------------------------------------

def _copy_masked_program(T):
    b, beam = T.Dim(2, name="b"), T.Dim(3, name="beam")
    per_beam = T.Dim(T.Tensor("per_beam", [b, beam], dtype="int32"))  # lengths over (b, beam)
    per_beam.dyn_size_ext = T.Tensor("per_beam", [b, beam], dtype="int32",
                                     raw_tensor=torch.tensor([[1, 2, 3], [3, 2, 1]], dtype=torch.int32))
    time = T.Dim(T.Tensor("time", [b], dtype="int32"))
    time.dyn_size_ext = T.Tensor("time", [b], dtype="int32", raw_tensor=torch.tensor([2, 1], dtype=torch.int32))
    x = T.Tensor("x", [b, time, per_beam], dtype="float32", raw_tensor=torch.arange(12.0).view(2, 2, 3) + 1)
    return [x.copy_masked(0.0).raw_tensor.tolist(), x.copy_masked(0.0, dims=[per_beam]).raw_tensor.tolist()]


def test_copy_masked_skips_lengths_over_a_missing_dim_as_returnn():
    rf_out, dt_out = run_both(_copy_masked_program)
    assert dt_out == rf_out


def test_copy_masked_skips_lengths_over_a_missing_dim_against_torch():
    b, beam = Dim(2, name="b"), Dim(3, name="beam")
    per_beam = Dim(Tensor(torch.tensor([[1, 2, 3], [3, 2, 1]]), [b, beam]), name="per_beam")
    time = Dim(Tensor(torch.tensor([2, 1]), [b]), name="time")
    raw = torch.randn(2, 2, 3)
    raw[1, 1:] = math.nan  # time's padding
    x = Tensor(raw, [b, time, per_beam])
    expected = torch.where(torch.arange(2).view(1, 2, 1) < torch.tensor([2, 1]).view(2, 1, 1), raw, 0.0)
    assert torch.equal(x.copy_masked(0.0).raw, expected)  # time masked, per_beam left as it is
    assert torch.equal(x.copy_masked(0.0, dims=[per_beam]).raw.nan_to_num(7.0), raw.nan_to_num(7.0))
    with pytest.raises(ValueError, match=r"dimtorch\.Tensor\.copy_masked\(\): dim 'beam'\(3\) is not in the tensor"):
        x.copy_masked(0.0, dims=[beam])


# ---- masks of copied dims -----------------------------------------------------------------------

def test_masks_are_per_dim_so_raws_are_not_dim_independent():
    b = Dim(2, name="b")
    time = Dim(Tensor(torch.tensor([2, 1]), [b]), name="time")
    copy = Dim(None, name="time_copy")
    copy.copy_from(time)
    assert not drf.is_backend_raw_tensor_dim_tag_independent()  # RETURNN's torch backend shares the raw
    m, mc = time.get_mask(), copy.get_mask()
    assert m is time.get_mask() and mc.dims == (b, copy) and torch.equal(m.raw, mc.raw)


# ---- Parameter.initial over other Dims of the same layout ---------------------------------------

def _initial_program(rf, out_dim):
    rf.set_random_seed(1)
    att = rf.SelfAttention(in_dim=out_dim, proj_dim=out_dim, key_dim_total=out_dim, value_dim_total=out_dim,
                           num_heads=2)
    qkv_weight = rf.random(dims=[out_dim, 3 * out_dim], distribution="normal", dtype="float32")
    proj_weight = rf.random(dims=[out_dim.copy(match_priority=1), out_dim], distribution="normal", dtype="float32")
    att.qkv.weight.initial = qkv_weight
    att.proj.weight.initial = proj_weight
    return [torch.equal(att.qkv.weight.raw_tensor.detach(), qkv_weight.raw_tensor),
            torch.equal(att.proj.weight.raw_tensor.detach(), proj_weight.raw_tensor)]


def test_parameter_initial_of_the_same_layout_as_returnn():
    rf, problem = setup_rf()
    if rf is None:
        pytest.skip(f"returnn not usable here: {problem}")
    import returnn.tensor as rt
    assert _initial_program(rf, rt.Dim(6, name="out")) == [True, True]
    assert _initial_program(drf, Dim(6, name="out")) == [True, True]


def test_parameter_initial_of_the_same_layout_against_torch():
    out, qkv = Dim(4, name="out"), Dim(12, name="qkv")
    p = drf.Parameter([out, qkv])
    raw = torch.randn(4, 12)
    p.initial = Tensor(raw, [out, 3 * out])
    assert torch.equal(p.raw.detach(), raw)
    p.initial = Tensor(raw.t().contiguous(), [qkv, out])  # its own dims: aligned by identity
    assert torch.equal(p.raw.detach(), raw)
    with pytest.raises(ValueError, match=r"dimtorch\.rf\.Parameter\.initial: the value has dims \('out'\(4\), "
                                         r"'x'\(4\)\), the parameter \('out'\(4\), 'qkv'\(12\)\)"):
        p.initial = Tensor(torch.zeros(4, 4), [out, Dim(4, name="x")])
    with pytest.raises(ValueError, match="the value has dims"):  # a parameter's dim at another position
        p.initial = Tensor(torch.zeros(12, 4), [Dim(12, name="y"), out])
