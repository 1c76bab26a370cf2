"""Dropout layer: dt.dropout while the module is training, identity in eval."""
from __future__ import annotations

from .._C import dropout  # the C++ fast path (falls back to dimtorch.ops.dropout)
from .module import Module


class Dropout(Module):
    """dt.dropout(x, p, axis) in training mode (module.train()), x itself in eval mode. `axis`: None
    (a draw per element) or the dim(s) the mask varies over (broadcast over x's other dims)."""

    def __init__(self, p: float, *, axis=None):
        super().__init__()
        self.p, self.axis = p, axis

    def forward(self, x):
        return dropout(x, self.p, self.axis, training=self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}" + (f", axis={self.axis!r}" if self.axis is not None else "")
