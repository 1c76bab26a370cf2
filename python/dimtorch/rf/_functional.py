"""Functions that RETURNN frontend keeps in the modules of its layers, loops and attention (rf.conv,
rf.normalization, rf.attention, rf.loop, rf.cond), bound here so that dimtorch.rf has them whichever
of those modules a checkout has; those modules re-export these (one implementation). dimtorch's op
itself wherever it takes rf's signature; thin functions for rf's other spellings (max_pool1d and
pool1d return one dim; dot_attention drops out by the run context's train flag)."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import dimtorch as _dt
from dimtorch import Dim, Tensor

from ._run_ctx_flags import is_train_flag_enabled
from .dropout import dropout as _rf_dropout  # the train flag RETURNN's attention drops out by is rf.dropout's

__all__ = [
    "conv", "transposed_conv", "pool", "max_pool", "max_pool1d", "pool1d", "pool2d", "pool3d",
    "make_conv_out_spatial_dims", "calc_conv_out_length", "make_transposed_conv_out_spatial_dims",
    "calc_transposed_conv_out_length", "moments", "normalize", "dot_attention", "relative_positional_encoding",
    "sinusoidal_positional_encoding", "sinusoidal_encoding", "while_loop", "scan", "cond",
]

conv = _dt.conv
transposed_conv = _dt.transposed_conv
pool = _dt.pool
make_conv_out_spatial_dims = _dt.make_conv_out_spatial_dims
make_transposed_conv_out_spatial_dims = _dt.make_transposed_conv_out_spatial_dims
moments = _dt.moments
normalize = _dt.normalize
relative_positional_encoding = _dt.relative_positional_encoding
sinusoidal_positional_encoding = _dt.sinusoidal_positional_encoding
sinusoidal_encoding = _dt.sinusoidal_encoding
while_loop = _dt.while_loop
scan = _dt.scan
cond = _dt.cond

_IntOrSeq = Union[int, Sequence[int]]


def max_pool(source: Tensor, *, pool_size: _IntOrSeq, padding: str = "valid", dilation_rate: _IntOrSeq = 1,
             strides: Optional[_IntOrSeq] = None, in_spatial_dims: Union[Sequence[Dim], Dim],
             out_spatial_dims: Optional[Union[Sequence[Dim], Dim]] = None) -> Tuple[Tensor, Sequence[Dim]]:
    """pool(mode="max")."""
    return _dt.pool(source, mode="max", pool_size=pool_size, padding=padding, dilation_rate=dilation_rate,
                    strides=strides, in_spatial_dims=in_spatial_dims, out_spatial_dims=out_spatial_dims)


def pool1d(source: Tensor, *, mode: str, pool_size: int, padding: str = "valid", dilation_rate: int = 1,
           strides: Optional[int] = None, in_spatial_dim: Dim, out_spatial_dim: Optional[Dim] = None
           ) -> Tuple[Tensor, Dim]:
    """pool over one spatial dim; returns (tensor, out_spatial_dim)."""
    out, (out_dim,) = _dt.pool(source, mode=mode, pool_size=pool_size, padding=padding, dilation_rate=dilation_rate,
                               strides=strides, in_spatial_dims=(in_spatial_dim,),
                               out_spatial_dims=None if out_spatial_dim is None else (out_spatial_dim,))
    return out, out_dim


def max_pool1d(source: Tensor, *, pool_size: int, padding: str = "valid", dilation_rate: int = 1,
               strides: Optional[int] = None, in_spatial_dim: Dim, out_spatial_dim: Optional[Dim] = None
               ) -> Tuple[Tensor, Dim]:
    """pool1d(mode="max")."""
    out, (out_dim,) = _dt.pool(source, mode="max", pool_size=pool_size, padding=padding, dilation_rate=dilation_rate,
                               strides=strides, in_spatial_dims=(in_spatial_dim,),
                               out_spatial_dims=None if out_spatial_dim is None else (out_spatial_dim,))
    return out, out_dim


def _pool_nd(n: int):
    def pool_nd(source: Tensor, *, mode: str, pool_size: _IntOrSeq, padding: str = "valid",
                dilation_rate: _IntOrSeq = 1, strides: Optional[_IntOrSeq] = None, in_spatial_dims: Sequence[Dim],
                out_spatial_dims: Optional[Sequence[Dim]] = None) -> Tuple[Tensor, Sequence[Dim]]:
        return _dt.pool(source, nd=n, mode=mode, pool_size=pool_size, padding=padding, dilation_rate=dilation_rate,
                        strides=strides, in_spatial_dims=in_spatial_dims, out_spatial_dims=out_spatial_dims)
    pool_nd.__name__ = pool_nd.__qualname__ = f"pool{n}d"
    pool_nd.__doc__ = f"pool over {n} spatial dims."
    return pool_nd


pool2d = _pool_nd(2)
pool3d = _pool_nd(3)


def _ceildiv(a, b):
    return -(-a // b)


def _at_least_0(x):
    return max(x, 0) if isinstance(x, int) else _dt.maximum(x, 0)


def calc_conv_out_length(in_length, *, filter_size, stride: int, padding: Union[str, int], dilation_rate: int = 1,
                         name: Optional[str] = None):
    """The output length of a conv over in_length (an int, a Tensor of lengths, or a Dim: the dim
    dimtorch.conv gives) for padding "valid", "same" or an int."""
    if isinstance(in_length, Dim):
        return _dt.make_conv_out_spatial_dims([in_length], filter_size=filter_size, padding=padding, strides=stride,
                                              dilation_rate=dilation_rate)[0]
    k = filter_size.size if isinstance(filter_size, Dim) else filter_size
    k_eff = dilation_rate * (k - 1) + 1
    if padding == "same":
        return _ceildiv(in_length, stride)
    if padding == "valid":
        return _at_least_0(_ceildiv(in_length - (k_eff - 1), stride))
    return _at_least_0((in_length + 2 * padding - k_eff) // stride + 1)


def calc_transposed_conv_out_length(in_length, *, filter_size, padding: Union[str, int],
                                    output_padding: Optional[int] = None, stride: Optional[int] = None,
                                    dilation_rate: int = 1, name: Optional[str] = None):
    """The output length of a transposed conv (see dimtorch.transposed_conv) over in_length (an int, a
    Tensor of lengths, or a Dim)."""
    if isinstance(in_length, Dim):
        return _dt.make_transposed_conv_out_spatial_dims(
            [in_length], filter_size=filter_size, padding=padding, output_padding=output_padding, strides=stride,
            dilation_rate=dilation_rate)[0]
    k = filter_size.size if isinstance(filter_size, Dim) else filter_size
    s = k if stride is None else stride
    k_eff = dilation_rate * (k - 1) + 1
    if output_padding is None:
        if padding == "same":
            return in_length * s
        return in_length * s + max(k_eff - s, 0)
    out = (in_length - 1) * s + k_eff + output_padding
    return out - 2 * (k_eff // 2) if padding == "same" else out


def dot_attention(query: Tensor, keys: Tensor, values: Tensor, *, key_dim: Dim, axis: Dim, att_dropout: float = 0.0,
                  att_dropout_broadcast: Optional[bool] = None, causal_query_spatial_dim: Optional[Dim] = None,
                  scale: Optional[float] = None) -> Tensor:
    """dimtorch.dot_attention with its dropout in training only (the run context's train flag, as
    rf.dropout reads it)."""
    training = bool(att_dropout) and bool(is_train_flag_enabled(_rf_dropout))
    return _dot_attention(query, keys, values, key_dim=key_dim, axis=axis, att_dropout=att_dropout,
                          att_dropout_broadcast=att_dropout_broadcast, causal_query_spatial_dim=causal_query_spatial_dim,
                          scale=scale, training=training)


_dot_attention = _dt.dot_attention
