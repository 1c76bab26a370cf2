"""FeedForward block: Linear(in, ff) -> activation -> dropout -> Linear(ff, out)."""
from __future__ import annotations

from typing import Callable, Optional, Union

from .. import _C
from .._C import Dim, Tensor
from .._C import dropout as _dropout
from .._args import dim_str
from .linear import Linear
from .module import Module

_ACTIVATIONS = {"relu": "relu", "swish": "silu", "silu": "silu", "gelu": "gelu", "tanh": "tanh",
                "sigmoid": "sigmoid"}


def get_activation(activation: Union[str, Callable], caller: str) -> Callable:
    """A dimtorch activation function from a callable or a name (relu, swish/silu, gelu, tanh, sigmoid)."""
    if callable(activation):
        return activation
    try:
        return getattr(_C, _ACTIVATIONS[activation])
    except (KeyError, TypeError):
        raise ValueError(f"{caller}: unknown activation {activation!r} (known: {', '.join(_ACTIVATIONS)}, "
                         f"or a callable)") from None


class FeedForward(Module):
    """Position-wise feed-forward: linear_ff (in_dim -> ff_dim), activation (default relu; a name or
    a callable on dimtorch Tensors), dropout (p, `dropout_axis` as in dt.dropout), linear_out
    (ff_dim -> out_dim, default in_dim)."""

    def __init__(self, in_dim: Dim, ff_dim: Dim, out_dim: Optional[Dim] = None, *,
                 activation: Union[str, Callable] = "relu", dropout: float = 0.1, dropout_axis=None,
                 with_bias: bool = True, dtype="float32", device=None):
        super().__init__()
        self.in_dim, self.ff_dim = in_dim, ff_dim
        self.out_dim = in_dim if out_dim is None else out_dim
        self.activation = get_activation(activation, "FeedForward()")
        self.dropout, self.dropout_axis = dropout, dropout_axis
        self.linear_ff = Linear(in_dim, ff_dim, with_bias=with_bias, dtype=dtype, device=device)
        self.linear_out = Linear(ff_dim, self.out_dim, with_bias=with_bias, dtype=dtype, device=device)

    def forward(self, x: Tensor) -> Tensor:
        h = self.activation(self.linear_ff(x))
        h = _dropout(h, self.dropout, self.dropout_axis, training=self.training)
        return self.linear_out(h)

    def extra_repr(self) -> str:
        return (f"in_dim={dim_str(self.in_dim)}, ff_dim={dim_str(self.ff_dim)}, out_dim={dim_str(self.out_dim)}, "
                f"dropout={self.dropout}")
