"""Tests of dt.nn.register_parametrization / remove_parametrization / is_parametrized and weight_dropout /
weight_noise (RETURNN frontend's): values in training and eval against torch by hand, gradients reaching the
original parameter, the state dict unchanged, a parametrization with its own parameters, copies, errors."""
import copy

import pytest
import torch

import dimtorch as dt


def _linear():
    torch.manual_seed(0)
    i, o, b = dt.Dim(16, name="i"), dt.Dim(32, name="o"), dt.Dim(4, name="b")
    lin = dt.nn.Linear(i, o)
    x = dt.Tensor(torch.randn(4, 16), (b, i))
    return lin, x


def test_weight_dropout_in_training_only():
    lin, x = _linear()
    w = lin.weight.raw.detach().clone()
    plain = lin(x).raw.detach()
    dt.nn.weight_dropout(lin, "weight", drop_prob=0.25)
    assert dt.nn.is_parametrized(lin) and dt.nn.is_parametrized(lin, "weight")
    assert not dt.nn.is_parametrized(lin, "bias") and list(lin.state_dict()) == ["weight", "bias"]
    read = lin.weight.raw
    dropped = read == 0
    assert 0.1 < dropped.float().mean() < 0.4
    torch.testing.assert_close(read[~dropped], w[~dropped] / 0.75)
    # the gradient reaches the original parameter through the mask
    weight = lin._parameters["weight"]
    torch.manual_seed(5)
    y = lin(x)
    (g,) = torch.autograd.grad(y.raw.sum(), weight)
    torch.manual_seed(5)
    mask = lin.weight.raw != 0  # the same draw
    grad_of_plain = x.raw.sum(0)[:, None].expand(16, 32)  # dL/dW for W over (i, o)
    if lin.weight.dims[0] is lin.out_dim:
        grad_of_plain = grad_of_plain.T
    expected = grad_of_plain / 0.75 * mask
    torch.testing.assert_close(g, expected)
    lin.eval()
    torch.testing.assert_close(lin(x).raw, plain)
    assert lin.weight.raw is weight


def test_weight_noise_and_remove():
    lin, x = _linear()
    plain = lin(x).raw.detach()
    dt.nn.weight_noise(lin, "weight", std=0.1)
    noise = lin.weight.raw - lin._parameters["weight"]
    assert 0.05 < float(noise.detach().std()) < 0.15
    lin.eval()
    torch.testing.assert_close(lin(x).raw, plain)
    copied = copy.deepcopy(lin).train()
    assert not torch.equal(copied.weight.raw, copied._parameters["weight"])
    lin.train()
    dt.nn.remove_parametrization(lin, "weight")
    assert not dt.nn.is_parametrized(lin) and dt.nn.is_parametrized(copied, "weight")
    torch.testing.assert_close(lin(x).raw, plain)


class _WeightNorm(dt.nn.Module):
    """g * v / |v| over the input dim: a parametrization with parameters of its own."""

    def __init__(self, dims, norm_dim):
        super().__init__()
        self.dims, self.norm_dim = dims, norm_dim
        out = [d for d in dims if d is not norm_dim]
        self.v = dt.nn.Parameter(dims)
        self.g = dt.nn.Parameter(out, init=1.0)

    def assign(self, weight):
        self.v = dt.Tensor(weight.raw.detach(), weight.dims)  # copies the values in

    def forward(self):
        v = self.v
        return self.g * v / dt.sqrt(dt.reduce_sum(dt.square(v), axis=self.norm_dim))


def test_parametrization_with_its_own_parameters():
    lin, x = _linear()
    w = lin.weight.raw.detach().clone()
    dt.nn.register_parametrization(lin, "weight", _WeightNorm(lin.weight.dims, lin.in_dim), keep_existing_param=False)
    assert sorted(n for n, _ in lin.named_parameters()) == ["bias", "weight.g", "weight.v"]
    expected = w / w.norm(dim=lin.weight.dims.index(lin.in_dim), keepdim=True)
    torch.testing.assert_close(lin.weight.raw_aligned(tuple(lin.weight.dims)), expected)
    lin(x).raw.sum().backward()
    assert lin._modules["weight"]._parameters["g"].grad is not None
    dt.nn.remove_parametrization(lin, "weight")
    assert sorted(n for n, _ in lin.named_parameters()) == ["bias", "weight"]
    torch.testing.assert_close(lin.weight.raw, expected)


def test_errors():
    lin, _ = _linear()
    with pytest.raises(ValueError, match=r"register_parametrization\(\): Linear\.nope is not a dimtorch\.nn\.Parameter"):
        dt.nn.register_parametrization(lin, "nope", lambda w: w)
    dt.nn.register_parametrization(lin, "weight", lambda w: w * 2.0)
    with pytest.raises(ValueError, match=r"Linear\.weight is parametrized already"):
        dt.nn.weight_noise(lin, "weight", std=0.1)
    with pytest.raises(ValueError, match=r"must have no parameters of its own"):
        dt.nn.register_parametrization(lin, "bias", dt.nn.Linear(lin.out_dim, lin.out_dim))
    with pytest.raises(TypeError, match=r"keep_existing_param=False the parametrization must be a module"):
        dt.nn.register_parametrization(lin, "bias", lambda: None, keep_existing_param=False)
    with pytest.raises(ValueError, match=r"remove_parametrization\(\): Linear\.bias is not parametrized"):
        dt.nn.remove_parametrization(lin, "bias")
    with pytest.raises(ValueError, match=r"WeightDropout\(\): drop_prob must be a number in \[0, 1\)"):
        dt.nn.WeightDropout(1.0)
    with pytest.raises(ValueError, match=r"WeightNoise\(\): std must be a number >= 0"):
        dt.nn.WeightNoise(-1)
