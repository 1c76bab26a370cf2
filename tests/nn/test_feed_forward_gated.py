"""FeedForwardGated (SwiGLU) against torch by hand, forward and backward on padded batches; make_norm, make_ff."""
import pytest
import torch
import torch.nn.functional as F

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, check_batch_independence, make_padded_batch
from nn_layer_check import check_layer


def _torch_gated(x, p, act=F.silu, gate=lambda t: t):
    h = F.linear(x, p["linear_ff.weight"], p.get("linear_ff.bias"))
    a, b = h.chunk(2, dim=-1)
    return F.linear(act(a) * gate(b), p["linear_out.weight"], p.get("linear_out.bias"))


@pytest.mark.parametrize("pad", [0.0, PAD_NAN, PAD_LARGE])
@pytest.mark.parametrize("with_bias", [False, True])
def test_gated_matches_torch_forward_and_backward(pad, with_bias):
    pb = make_padded_batch((5, 3, 1), 6, pad_value=pad)
    ff = dt.nn.FeedForwardGated(pb.feature, ff_dim=10, dropout=0.0, with_bias=with_bias)
    assert ff.in_dim is pb.feature and ff.out_dim is pb.feature and ff.ff_dim.size == 10
    assert ff.linear_ff.out_dim.size == 20 and ff.linear_out.in_dim is ff.ff_dim
    assert (ff.linear_ff.bias is None) != with_bias
    # frame-wise: padding frames are computed like valid ones (NaN there gives NaN weight gradients, as in torch)
    check_layer(ff, lambda m, x: m(x), _torch_gated, pb.x, (pb.batch, pb.time, pb.feature), finite_grads=pad == 0.0)


def test_gated_activations_by_name_and_callable():
    pb = make_padded_batch((4, 2), 6, pad_value=0.0)
    ff = dt.nn.FeedForwardGated(pb.feature, ff_dim=dt.Dim(8, name="ff"), dropout=0.0, activation="gelu",
                                gate_activation=dt.sigmoid)
    check_layer(ff, lambda m, x: m(x), lambda x, p: _torch_gated(x, p, F.gelu, torch.sigmoid), pb.x,
                (pb.batch, pb.time, pb.feature))


def test_gated_default_ff_dim_is_returnns():
    """4 * 2/3 * out_dim rounded up to a multiple of 256."""
    assert dt.nn.FeedForwardGated(dt.Dim(512, name="m")).ff_dim.size == 1536
    assert dt.nn.FeedForwardGated(dt.Dim(16, name="m")).ff_dim.size == 256


def test_gated_batch_independence():
    pb = make_padded_batch((5, 3, 1), 6, pad_value=PAD_NAN)
    ff = dt.nn.FeedForwardGated(pb.feature, ff_dim=8, dropout=0.0)
    check_batch_independence(lambda x, dim_map: ff(x), pb.x, pb.batch, pb.time, rtol=1e-5, atol=1e-6)


def test_gated_dropout_only_in_training():
    pb = make_padded_batch((5, 3), 6, pad_value=0.0)
    ff = dt.nn.FeedForwardGated(pb.feature, ff_dim=8, dropout=0.5)
    ff.eval()
    torch.testing.assert_close(ff(pb.x).raw, ff(pb.x).raw)
    ff.train()
    torch.manual_seed(0)
    assert not torch.allclose(ff(pb.x).raw, ff(pb.x).raw)


def test_gated_errors():
    pb = make_padded_batch((3,), 6)
    with pytest.raises(ValueError, match=r"FeedForwardGated\(\): unknown activation 'nope'"):
        dt.nn.FeedForwardGated(pb.feature, activation="nope")
    with pytest.raises(TypeError, match=r"FeedForwardGated\(\): ff_dim must be"):
        dt.nn.FeedForwardGated(pb.feature, ff_dim=2.5)
    with pytest.raises(TypeError, match=r"FeedForwardGated\(\): out_dim must be a static Dim"):
        dt.nn.FeedForwardGated(8)
    ff = dt.nn.FeedForwardGated(dt.Dim(5, name="other"), ff_dim=4)
    with pytest.raises(ValueError, match=r"Linear\(\): x lacks the in_dim"):
        ff(pb.x)


def test_make_norm_builds_copies_and_passes_callables():
    model = dt.Dim(6, name="model")
    ln = dt.nn.make_norm(dt.nn.LayerNorm, model)
    assert isinstance(ln, dt.nn.LayerNorm) and ln.in_dim is model
    proto = dt.nn.RMSNorm(model)
    copy = dt.nn.make_norm(proto, model)
    assert isinstance(copy, dt.nn.RMSNorm) and copy is not proto and copy.scale.raw is not proto.scale.raw

    def fn(x):
        return x

    assert dt.nn.make_norm(fn, model) is fn
    with pytest.raises(TypeError, match=r"make_norm\(\): RETURNN config dicts"):
        dt.nn.make_norm({"class": "rf.LayerNorm"}, model)
    with pytest.raises(TypeError, match=r"make_norm\(\): norm must be a class, a module or a callable"):
        dt.nn.make_norm(3, model)


def test_make_ff_default_class_and_options():
    model = dt.Dim(6, name="model")
    ff = dt.nn.make_ff(out_dim=model, ff_dim=12, dropout=0.0)
    assert isinstance(ff, dt.nn.ConformerPositionwiseFeedForward)
    assert ff.in_dim is model and ff.ff_dim.size == 12 and ff.dropout == 0.0
    assert dt.nn.make_ff(out_dim=model).ff_dim.size == 24  # rf's FeedForward default: 4 * out_dim
    gated = dt.nn.make_ff(out_dim=model, ff=dt.nn.FeedForwardGated, ff_dim=8, ff_activation="relu", dropout=0.2)
    assert isinstance(gated, dt.nn.FeedForwardGated) and gated.ff_dim.size == 8 and gated.dropout == 0.2
    proto = dt.nn.FeedForward(model, dt.Dim(4, name="ff"))
    copy = dt.nn.make_ff(out_dim=model, ff=proto)
    assert isinstance(copy, dt.nn.FeedForward) and copy is not proto
    with pytest.raises(TypeError, match=r"make_ff\(\): ff must be a module class"):
        dt.nn.make_ff(out_dim=model, ff="gated")
    with pytest.raises(TypeError, match=r"make_ff\(\): RETURNN config dicts"):
        dt.nn.make_ff(out_dim=model, ff={"class": "x"})
