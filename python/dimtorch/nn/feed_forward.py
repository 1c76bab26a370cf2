"""Feed-forward blocks: FeedForward (Linear, activation, dropout, Linear), the Conformer's
ConformerPositionwiseFeedForward (FeedForward with swish) and FeedForwardGated (SwiGLU-style)."""
from __future__ import annotations

from typing import Callable, Optional, Union

from .. import _C
from .._C import Dim, Tensor
from .._C import dropout as _dropout
from .._core.args import dim_str
from .._C import split as _split
from .linear import Linear
from .module import Module

_ACTIVATIONS = {"relu": "relu", "swish": "silu", "silu": "silu", "gelu": "gelu", "tanh": "tanh",
                "sigmoid": "sigmoid"}


def _identity(x: Tensor) -> Tensor:
    return x


def get_activation(activation: Union[str, Callable], caller: str) -> Callable:
    """A dimtorch activation function from a callable or a name (relu, swish/silu, gelu, tanh, sigmoid,
    identity)."""
    if callable(activation):
        return activation
    if activation == "identity":
        return _identity
    try:
        return getattr(_C, _ACTIVATIONS[activation])
    except (KeyError, TypeError):
        raise ValueError(f"{caller}: unknown activation {activation!r} (known: {', '.join(_ACTIVATIONS)}, identity, "
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


def _gated_ff_dim(out_dim: Dim, ff_dim: Union[Dim, int, None], caller: str) -> Dim:
    if isinstance(ff_dim, Dim):
        if ff_dim.size is None:
            raise ValueError(f"{caller}: ff_dim {dim_str(ff_dim)} must be static")
        return ff_dim
    if ff_dim is None:
        # RETURNN's default: 4 * 2/3 * out_dim (the parameter count of a FeedForward with ff 4 * out_dim,
        # as in the SwiGLU paper), rounded up to a multiple of 256.
        size = -(-(out_dim.size * 4 * 2 // 3) // 256) * 256
        return Dim(size, name="ff")
    if isinstance(ff_dim, bool) or not isinstance(ff_dim, int) or ff_dim < 1:
        raise TypeError(f"{caller}: ff_dim must be a static Dim, an int >= 1 or None, got {ff_dim!r}")
    return Dim(ff_dim, name="ff")


class FeedForwardGated(Module):
    """Gated feed-forward (GLU variants; SwiGLU with the defaults), RETURNN frontend's FeedForwardGated:
    linear_ff (out_dim -> 2 * ff_dim) split into halves a, b -> activation(a) * gate_activation(b) ->
    dropout -> linear_out (ff_dim -> out_dim). Defaults as rf's: activation swish, gate_activation
    identity, no biases, ff_dim 4 * 2/3 * out_dim rounded up to a multiple of 256 (an int makes a Dim).
    forward(x) -> Tensor with x's dims (out_dim in its place); in_dim is out_dim."""

    def __init__(self, out_dim: Dim, *, ff_dim: Union[Dim, int, None] = None, dropout: float = 0.1,
                 activation: Union[str, Callable] = "swish", gate_activation: Union[str, Callable] = "identity",
                 with_bias: bool = False, dtype="float32", device=None):
        super().__init__()
        caller = "FeedForwardGated()"
        if not isinstance(out_dim, Dim) or out_dim.size is None:
            raise TypeError(f"{caller}: out_dim must be a static Dim, got {out_dim!r}")
        self.in_dim = self.out_dim = out_dim
        self.ff_dim = _gated_ff_dim(out_dim, ff_dim, caller)
        self.gated_dim = Dim(2 * self.ff_dim.size, name=f"{self.ff_dim.name}_gated")
        self.activation = get_activation(activation, caller)
        self.gate_activation = get_activation(gate_activation, caller)
        self.dropout = dropout
        self.linear_ff = Linear(out_dim, self.gated_dim, with_bias=with_bias, dtype=dtype, device=device)
        self.linear_out = Linear(self.ff_dim, out_dim, with_bias=with_bias, dtype=dtype, device=device)

    def forward(self, x: Tensor) -> Tensor:
        h = self.linear_ff(x)
        a, b = _split(h, axis=self.gated_dim, out_dims=[self.ff_dim, self.ff_dim])
        h = self.activation(a) * self.gate_activation(b)
        h = _dropout(h, self.dropout, training=self.training) if self.training and self.dropout else h
        return self.linear_out(h)

    def extra_repr(self) -> str:
        return f"out_dim={dim_str(self.out_dim)}, ff_dim={dim_str(self.ff_dim)}, dropout={self.dropout}"


class ConformerPositionwiseFeedForward(FeedForward):
    """The Conformer's feed-forward module: FeedForward with swish (linear_ff, swish, dropout, linear_out)."""

    def __init__(self, in_dim: Dim, ff_dim: Dim, *, dropout: float = 0.1, activation="swish", dtype="float32",
                 device=None):
        super().__init__(in_dim, ff_dim, activation=activation, dropout=dropout, dtype=dtype, device=device)
