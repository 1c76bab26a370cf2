"""GroupNorm (rf's per-frame form), GroupNormSpatial (torch's pooled form), Normalize and dt.nn.sequential against
torch written by hand: forward and backward on padded batches (NaN/1e30), batch independence, errors."""
import pytest
import torch
import torch.nn.functional as F

import dimtorch as dt
from helpers import PAD_LARGE, PAD_NAN, check_batch_independence, make_padded_batch
from nn_layer_check import check_layer

G = 3



def _torch_group_norm(x, p, eps=1e-6):
    b, t, c = x.shape
    h = x.view(b, t, G, c // G)
    mean = h.mean(-1, keepdim=True)
    var = ((h - mean) ** 2).mean(-1, keepdim=True)
    return ((h - mean) * torch.rsqrt(var + eps)).view(b, t, c) * p["scale"] + p["bias"]


def _randomize(module):
    with torch.no_grad():
        for p in module.parameters():
            p.normal_()
    return module


@pytest.mark.parametrize("pad", [0.0, PAD_NAN, PAD_LARGE])
def test_group_norm_per_frame(pad):
    pb = make_padded_batch((5, 3, 1), 12, pad_value=pad)
    gn = _randomize(dt.nn.GroupNorm(pb.feature, num_groups=G))
    assert gn.in_dim is pb.feature and gn.num_groups.size == G and gn.in_group_dim.size == 4
    # per frame: padding reaches no valid value, but NaN there gives NaN scale/bias gradients (as in torch)
    check_layer(gn, lambda m, x: m(x), _torch_group_norm, pb.x, (pb.batch, pb.time, pb.feature),
                finite_grads=pad == 0.0, param_grads=pad == 0.0, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_group_norm_spatial_is_torchs_group_norm_on_each_sequence(pad):
    pb = make_padded_batch((5, 3, 1), 6, pad_value=pad)
    gn = _randomize(dt.nn.GroupNormSpatial(pb.feature, num_groups=G, eps=1e-5))

    def reference(x, p):
        out = torch.zeros_like(x)
        for b, n in enumerate(pb.lengths):  # torch's GroupNorm takes (N, C, L): each sequence alone
            out[b, :n] = F.group_norm(x[b:b + 1, :n].transpose(1, 2), G, p["scale"], p["bias"], 1e-5)[0].t()
        return out
    check_layer(gn, lambda m, x: m(x, spatial_dim=pb.time), reference, pb.x, (pb.batch, pb.time, pb.feature),
                rtol=1e-4, atol=1e-4)


def test_group_norms_batch_independence():
    pb = make_padded_batch((5, 3, 1), 6, pad_value=PAD_NAN)
    gn = dt.nn.GroupNormSpatial(pb.feature, num_groups=G)
    check_batch_independence(lambda x, dm: gn(x, spatial_dim=dm(pb.time)), pb.x, pb.batch, pb.time, rtol=1e-5,
                             atol=1e-6)
    gn1 = dt.nn.GroupNorm(pb.feature, num_groups=G)
    check_batch_independence(lambda x, dm: gn1(x), pb.x, pb.batch, pb.time)


@pytest.mark.parametrize("pad", [PAD_NAN, PAD_LARGE])
def test_normalize_module(pad):
    pb = make_padded_batch((5, 3, 1), 6, pad_value=pad)
    norm = _randomize(dt.nn.Normalize(param_dims=pb.feature, epsilon=1e-4))

    def reference(x, p):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return (x - mean) * torch.rsqrt(var + 1e-4) * p["scale"] + p["bias"]
    check_layer(norm, lambda m, x: m(x, axis=pb.feature), reference, pb.x, (pb.batch, pb.time, pb.feature),
                finite_grads=False)
    bare = dt.nn.Normalize(param_dims=[pb.feature], scale=False, bias=False)
    assert bare.scale is None and bare.bias is None and not list(bare.parameters())


def test_sequential_calls_modules_in_order():
    pb = make_padded_batch((3, 2), 6, pad_value=0.0)
    lin = dt.nn.Linear(pb.feature, pb.feature)
    fired = []
    lin.register_forward_hook(lambda *a: fired.append("lin"))
    y = dt.nn.sequential(pb.x, lin, dt.relu, lambda t: t * 2.0)
    torch.testing.assert_close(y.raw, 2.0 * torch.relu(lin(pb.x).raw))
    assert fired == ["lin", "lin"]
    assert dt.nn.sequential(pb.x) is pb.x
    with pytest.raises(TypeError, match=r"dimtorch.nn.sequential\(\): expected modules or callables"):
        dt.nn.sequential(pb.x, 3)


def test_errors():
    pb = make_padded_batch((3, 2), 6)
    with pytest.raises(ValueError, match=r"GroupNorm\(\): num_groups must be an int >= 1 or a static Dim dividing"):
        dt.nn.GroupNorm(pb.feature, num_groups=4)
    with pytest.raises(TypeError, match=r"GroupNorm\(\): in_dim must be a static Dim"):
        dt.nn.GroupNorm(6, num_groups=2)
    with pytest.raises(ValueError, match=r"GroupNorm\(\): x lacks the in_dim"):
        dt.nn.GroupNorm(dt.Dim(4, name="other"), num_groups=2)(pb.x)
    with pytest.raises(ValueError, match=r"GroupNormSpatial\(\): x lacks the spatial_dim"):
        dt.nn.GroupNormSpatial(pb.feature, num_groups=2)(pb.x, spatial_dim=dt.Dim(3, name="other"))
    with pytest.raises(TypeError, match=r"Normalize\(\): param_dims must be static Dims"):
        dt.nn.Normalize(param_dims=[])
