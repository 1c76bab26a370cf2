"""A dt.nn layer against its hand-written positional torch computation: outputs at valid frames, the
gradients of the input and of every parameter (the torch side runs on its own copies of them).

`reference(x_raw, params)` gets x's raw (axes in x's dims order) and a dict parameter name -> raw
leaf (the module's layout) and returns the raw result with axes in `out_dims` order."""
from __future__ import annotations

from typing import Callable, Sequence

import torch

import dimtorch as dt
from helpers import valid_mask


def check_layer(module, forward: Callable, reference: Callable, x: dt.Tensor, out_dims: Sequence[dt.Dim], *,
                rtol: float = 1e-5, atol: float = 1e-5, seed: int = 0, finite_grads: bool = True,
                param_grads: bool = True) -> torch.Tensor:
    """forward(module, x) -> the Tensor to compare (over out_dims in any order). Returns the aligned raw.
    finite_grads: x's gradient must be finite everywhere (padding included) and so must the parameters'
    (what a layer that masks its padding guarantees); a frame-wise layer computes padding frames like
    valid ones, so NaN padding gives NaN weight gradients there as in torch (then compared NaN == NaN).
    param_grads=False skips the parameters' gradients (a frame-wise layer's, with padding that the two sides
    compute differently: 0 * NaN on one side, 0 * finite on the other)."""
    params = dict(module.named_parameters())
    ref_params = {n: p.detach().clone().requires_grad_(True) for n, p in params.items()}
    xd, xt = x.raw.detach().clone().requires_grad_(True), x.raw.detach().clone().requires_grad_(True)
    for p in params.values():
        p.grad = None
    y = forward(module, dt.Tensor(xd, x.dims, feature_dim=x.feature_dim))
    assert isinstance(y, dt.Tensor), type(y)
    assert set(map(id, y.dims)) == set(map(id, out_dims)), (y.dims, tuple(out_dims))
    a = y.raw_aligned(tuple(out_dims))
    t = reference(xt, ref_params)
    assert a.shape == t.shape, (a.shape, t.shape)
    mask = valid_mask(out_dims, a.shape).expand(a.shape)
    torch.testing.assert_close(a[mask], t[mask], rtol=rtol, atol=atol, msg=lambda m: f"values: {m}")
    cot = torch.randn(a.shape, generator=torch.Generator().manual_seed(seed))
    (torch.where(mask, a, 0) * cot).sum().backward()
    (torch.where(mask, t, 0) * cot).sum().backward()
    x_mask = valid_mask(x.dims, x.raw.shape).expand(x.raw.shape)
    torch.testing.assert_close(xd.grad[x_mask], xt.grad[x_mask], rtol=rtol, atol=atol,
                               msg=lambda m: f"x gradient: {m}")
    if finite_grads:
        assert torch.isfinite(xd.grad).all(), "x gradient has NaN/inf (padding leaked into the backward pass)"
    for name, p in params.items() if param_grads else ():
        ref = ref_params[name].grad
        assert (p.grad is None) == (ref is None), f"{name}: gradient {p.grad is not None} vs torch {ref is not None}"
        if ref is not None:
            if finite_grads:
                assert torch.isfinite(p.grad).all(), f"{name} gradient has NaN/inf"
            torch.testing.assert_close(p.grad, ref, rtol=rtol, atol=atol, equal_nan=True,
                                       msg=lambda m: f"{name} gradient: {m}")
    return a.detach()
