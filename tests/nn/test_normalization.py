"""Tests of dt.nn.LayerNorm/RMSNorm (vs torch.nn.LayerNorm/RMSNorm) and BatchNorm (vs hand-written masked statistics)."""
import pytest
import torch

import dimtorch as dt
from helpers import make_padded_batch


def _check_module_vs_torch(mod, ref, pb):
    y = mod(pb.x)
    assert y.dims == pb.x.dims
    y_ref = ref(pb.x.raw)
    mask = pb.mask
    torch.testing.assert_close(y.raw[mask], y_ref[mask])
    g = torch.randn_like(y_ref) * mask.unsqueeze(-1)
    (torch.where(mask.unsqueeze(-1), y.raw, 0) * g).sum().backward()
    (torch.where(mask.unsqueeze(-1), y_ref, 0) * g).sum().backward()
    for p, q in zip(mod.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def test_layer_norm_vs_torch():
    pb = make_padded_batch((5, 3, 0), feature=6, pad_value=1e3)
    ln = dt.nn.LayerNorm(pb.feature, eps=1e-5)
    with torch.no_grad():
        ln.scale.raw.normal_()
        ln.bias.raw.normal_()
    ref = torch.nn.LayerNorm(6, eps=1e-5)
    ref.load_state_dict({"weight": ln.scale.raw.detach(), "bias": ln.bias.raw.detach()})
    _check_module_vs_torch(ln, ref, pb)


def test_rms_norm_vs_torch():
    pb = make_padded_batch((5, 3), feature=6, pad_value=1e3)
    rn = dt.nn.RMSNorm(pb.feature, eps=1e-6)
    with torch.no_grad():
        rn.scale.raw.normal_()
    ref = torch.nn.RMSNorm(6, eps=1e-6)
    ref.load_state_dict({"weight": rn.scale.raw.detach()})
    _check_module_vs_torch(rn, ref, pb)


def test_layer_norm_lacking_in_dim():
    pb = make_padded_batch((2,), feature=3)
    with pytest.raises(ValueError, match=r"LayerNorm\(\): x lacks the in_dim 'model'\(5\)"):
        dt.nn.LayerNorm(dt.Dim(5, name="model"))(pb.x)
    with pytest.raises(ValueError, match=r"RMSNorm\(\): x lacks the in_dim 'model'\(5\)"):
        dt.nn.RMSNorm(dt.Dim(5, name="model"))(pb.x)


def test_batch_norm_masked_statistics_and_running_stats():
    lengths = (5, 3, 1)
    pb = make_padded_batch(lengths, feature=4, pad_value=1e30)
    bn = dt.nn.BatchNorm(pb.feature, momentum=0.1, eps=1e-3)
    with torch.no_grad():
        bn.scale.raw.uniform_(0.5, 2)
        bn.bias.raw.normal_()
    x_leaf = pb.x.raw.detach().clone().requires_grad_(True)
    y = bn(dt.Tensor(x_leaf, pb.x.dims))
    # hand-written: statistics over the valid frames only
    valid = torch.cat([pb.x.raw[b, :n] for b, n in enumerate(lengths)])  # (frames, feature)
    mean, var = valid.mean(0), valid.var(0, unbiased=False)
    expect = (pb.x.raw - mean) / torch.sqrt(var + 1e-3) * bn.scale.raw.detach() + bn.bias.raw.detach()
    mask = pb.mask
    torch.testing.assert_close(y.raw[mask], expect[mask])
    n = valid.shape[0]
    torch.testing.assert_close(bn.running_mean.raw, 0.1 * mean)
    torch.testing.assert_close(bn.running_var.raw, 0.9 + 0.1 * var * n / (n - 1))
    # backward: against the same computation on the valid frames in plain torch
    v_leaf = valid.detach().clone().requires_grad_(True)
    m2, v2 = v_leaf.mean(0), v_leaf.var(0, unbiased=False)
    out_valid = (v_leaf - m2) / torch.sqrt(v2 + 1e-3)
    g = torch.randn_like(out_valid)
    (out_valid * g).sum().backward()
    g_full = torch.zeros_like(pb.x.raw)
    g_full[mask] = g
    (torch.where(mask.unsqueeze(-1), y.raw, 0) * g_full / bn.scale.raw.detach()).sum().backward()
    torch.testing.assert_close(x_leaf.grad[mask], v_leaf.grad)
    # eval: running statistics
    bn.eval()
    y_eval = bn(pb.x)
    expect_eval = ((pb.x.raw - bn.running_mean.raw) / torch.sqrt(bn.running_var.raw + 1e-3)
                   * bn.scale.raw + bn.bias.raw)
    torch.testing.assert_close(y_eval.raw[mask], expect_eval[mask])
    assert list(bn.state_dict()) == ["scale", "bias", "running_mean", "running_var"]
