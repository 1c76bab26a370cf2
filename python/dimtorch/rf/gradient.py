"""rf.gradient: gradients on the raws (torch.autograd), dimtorch's scaled_gradient ops."""
from __future__ import annotations

import contextlib

import torch

import dimtorch as _dt
from dimtorch import Tensor

__all__ = ["set_requires_gradient", "gradient", "stop_gradient", "stop_gradient_scope", "scaled_gradient",
           "scaled_gradient_ext", "gradient_checkpoint_scope"]

scaled_gradient = _dt.scaled_gradient
stop_gradient = _dt.stop_gradient  # (C++: the raw's detach, markers kept)
scaled_gradient_ext = _dt.scaled_gradient_ext


def set_requires_gradient(source: Tensor):
    """Makes source's raw (a leaf) require a gradient."""
    source.raw.requires_grad_()


def gradient(y: Tensor, x: Tensor) -> Tensor:
    """The gradient of the scalar y with respect to x (over x's dims), itself differentiable
    (torch.autograd.grad with create_graph=True)."""
    (grad,) = torch.autograd.grad(y.raw, x.raw, create_graph=True)
    return Tensor(grad, x.dims, feature_dim=x.feature_dim)


def stop_gradient_scope():
    """A block whose results get no gradient (torch.no_grad())."""
    return torch.no_grad()


def gradient_checkpoint_scope():
    """RETURNN's recomputation of a block's activations in backward. Here a block that runs as without
    it: the same results and gradients, the activations kept (torch.utils.checkpoint recomputes a
    function's)."""
    return contextlib.nullcontext()
