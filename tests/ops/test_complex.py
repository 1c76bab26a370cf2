"""Tests of python/dimtorch/ops/complex.py: real_as_complex, complex_as_real, make_complex against torch's
view_as_complex / view_as_real / complex, forward and backward, any position of the pair dim, and errors."""
import pytest
import torch

import dimtorch as dt


def _dims():
    return dt.Dim(3, name="b"), dt.Dim(4, name="f"), dt.Dim(2, name="pair")


@pytest.mark.parametrize("pair_axis", [0, 1, 2])
def test_round_trip_and_gradients(pair_axis):
    b, f, pair = _dims()
    dims = [b, f]
    dims.insert(pair_axis, pair)
    raw = torch.randn([d.size for d in dims], requires_grad=True)
    c = dt.real_as_complex(dt.Tensor(raw, tuple(dims)), pair_dim=pair)
    assert c.dims == (b, f) and c.raw.dtype == torch.complex64
    expected = torch.view_as_complex(raw.movedim(pair_axis, -1).contiguous())
    torch.testing.assert_close(c.raw, expected)
    back, d2 = dt.complex_as_real(c, out_dim=pair)
    assert d2 is pair and back.dims == (b, f, pair)
    torch.testing.assert_close(back.raw, raw.detach().movedim(pair_axis, -1))
    (g,) = torch.autograd.grad((back.raw * torch.arange(8.0).reshape(4, 2)).sum(), raw)
    torch.testing.assert_close(g.movedim(pair_axis, -1), torch.arange(8.0).reshape(4, 2).expand(3, 4, 2))


def test_make_complex_aligns_by_dims():
    b, f, _ = _dims()
    re = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    im = torch.randn(4, 3, dtype=torch.float64)
    c = dt.make_complex(dt.Tensor(re, (b, f)), dt.Tensor(im, (f, b)))
    assert c.dims == (b, f) and c.raw.dtype == torch.complex128
    torch.testing.assert_close(c.raw, torch.complex(re, im.T))
    only_f = dt.make_complex(dt.Tensor(re, (b, f)), dt.Tensor(im[:, 0].contiguous(), (f,)))
    torch.testing.assert_close(only_f.raw.imag, im[:, 0].expand(3, 4))
    (g,) = torch.autograd.grad(c.raw.real.sum(), re)
    torch.testing.assert_close(g, torch.ones(3, 4, dtype=torch.float64))


def test_errors():
    b, f, pair = _dims()
    with pytest.raises(ValueError, match=r"real_as_complex\(\): pair_dim 'f'\(4\) must be static of size 2"):
        dt.real_as_complex(dt.Tensor(torch.randn(3, 4), (b, f)), pair_dim=f)
    with pytest.raises(TypeError, match=r"real_as_complex\(\): x must be float32 or float64, got int64"):
        dt.real_as_complex(dt.Tensor(torch.zeros(3, 2, dtype=torch.int64), (b, pair)), pair_dim=pair)
    with pytest.raises(TypeError, match=r"complex_as_real\(\): x must be complex64 or complex128"):
        dt.complex_as_real(dt.Tensor(torch.randn(3), (b,)))
    c = dt.real_as_complex(dt.Tensor(torch.randn(3, 2), (b, pair)), pair_dim=pair)
    with pytest.raises(ValueError, match=r"complex_as_real\(\): out_dim must be a new static Dim of size 2"):
        dt.complex_as_real(c, out_dim=b)
    with pytest.raises(TypeError, match=r"make_complex\(\): imag must be a dimtorch.Tensor"):
        dt.make_complex(c, 1.0)
