"""E-Branchformer (RETURNN frontend's rf.encoder.e_branchformer; https://arxiv.org/abs/2210.00077):
FeedForwardConvGated (cgMLP, the local branch), Merge (the two branches' fusion) and EBranchformerLayer,
a layer for ConformerEncoderV2(encoder_layer=EBranchformerLayer, ...)."""
from __future__ import annotations

import copy
from typing import Callable, Union

from .._C import Dim, Tensor
from .._C import concat as _concat
from .._C import dropout as _dropout
from .._C import split as _split
from .._core.args import dim_str, dims_str
from .attention import RelPosSelfAttention
from .builders import make_ff, make_norm, make_self_att
from .frames import narrow_to_longest
from .feed_forward import ConformerPositionwiseFeedForward
from .conformer_v2 import DEFAULT_OUT_DIM
from .conv import Conv1d
from .feed_forward import get_activation
from .linear import Linear
from .module import Module
from .normalization import LayerNorm

__all__ = ["FeedForwardConvGated", "Merge", "EBranchformerLayer"]


def _static_dim(dim: Union[Dim, int], what: str, caller: str) -> Dim:
    if isinstance(dim, Dim):
        if dim.size is None:
            raise ValueError(f"{caller}: {what} {dim_str(dim)} must be static")
        return dim
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise TypeError(f"{caller}: {what} must be a static Dim or an int >= 1, got {dim!r}")
    return Dim(dim, name=what)


def _check_x(caller: str, x, feature: Dim, spatial_dim: Dim, what: str = "x") -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{caller}: {what} must be a dimtorch.Tensor, got {type(x).__name__}")
    for dim, role in ((feature, "feature dim"), (spatial_dim, "spatial_dim")):
        if not any(d is dim for d in x.dims):
            raise ValueError(f"{caller}: {what} lacks the {role} "
                             f"{dim_str(dim) if isinstance(dim, Dim) else repr(dim)} ({what} dims: {dims_str(x.dims)})")


def _drop(module: Module, h: Tensor, p: float, broadcast_dim: Dim) -> Tensor:
    """rf's dropout in these blocks: training only; with `dropout_broadcast` (rf's default, its config option
    rf_dropout_broadcast) one mask over broadcast_dim shared by the other dims, else a draw per element."""
    if not (module.training and p):
        return h
    return _dropout(h, p, broadcast_dim if module.dropout_broadcast else None, training=True)


class FeedForwardConvGated(Module):
    """cgMLP, the E-Branchformer's local branch: linear_ff (out_dim -> 2 * ff_dim) -> activation (default gelu)
    -> split into x_g, x_r (first and second half) -> x_g: norm (over ff_dim) -> conv (depthwise over
    spatial_dim, kernel_size, 'same') -> gate_activation (default identity) -> x_g * x_r -> dropout ->
    linear_out (ff_dim -> out_dim). ff_dim defaults to 3 * out_dim (an int makes a Dim); with_bias for both
    linears and the conv. forward(x, spatial_dim=) -> Tensor with x's dims.

    x's padding frames are zeroed first (`zero_padding`; EBranchformerLayer, whose input to it is finite, turns
    this off): the conv's outputs at padding frames come from valid frames, and their product with NaN/inf
    padding of x_r would carry NaN back into the gradients of those valid frames."""

    def __init__(self, out_dim: Dim, *, ff_dim: Union[Dim, int, None] = None, kernel_size: int = 31,
                 dropout: float = 0.1, activation: Union[str, Callable] = "gelu",
                 gate_activation: Union[str, Callable] = "identity", with_bias: bool = True,
                 norm: Union[type, Module, Callable] = LayerNorm, dtype="float32", device=None):
        super().__init__()
        caller = "FeedForwardConvGated()"
        if not isinstance(out_dim, Dim) or out_dim.size is None:
            raise TypeError(f"{caller}: out_dim must be a static Dim, got {out_dim!r}")
        self.out_dim = out_dim
        self.ff_dim = _static_dim(3 * out_dim.size if ff_dim is None else ff_dim, "ff_dim", caller)
        self.gated_dim = Dim(2 * self.ff_dim.size, name=f"{self.ff_dim.name}_gated")
        self.dropout, self.dropout_broadcast = dropout, True
        self.activation = get_activation(activation, caller)
        self.gate_activation = get_activation(gate_activation, caller)
        kw = dict(dtype=dtype, device=device)
        self.linear_ff = Linear(out_dim, self.gated_dim, with_bias=with_bias, **kw)
        self.norm = LayerNorm(self.ff_dim, **kw) if norm is LayerNorm else make_norm(norm, self.ff_dim)
        self.conv = Conv1d(self.ff_dim, self.ff_dim, kernel_size, padding="same", groups=self.ff_dim.size,
                           with_bias=with_bias, **kw)
        self.linear_out = Linear(self.ff_dim, out_dim, with_bias=with_bias, **kw)
        self.zero_padding = True

    def forward(self, x: Tensor, *, spatial_dim: Dim) -> Tensor:
        _check_x("FeedForwardConvGated()", x, self.out_dim, spatial_dim)
        if self.zero_padding and spatial_dim.lengths is not None:
            x = x.copy_masked(0.0)
        h = self.activation(self.linear_ff(x))
        gate, rest = _split(h, axis=self.gated_dim, out_dims=[self.ff_dim, self.ff_dim])
        gate, _ = self.conv(self.norm(gate), in_spatial_dim=spatial_dim)  # 'same', stride 1: spatial_dim again
        h = self.gate_activation(gate) * rest
        return self.linear_out(_drop(self, h, self.dropout, self.ff_dim))

    def extra_repr(self) -> str:
        return (f"out_dim={dim_str(self.out_dim)}, ff_dim={dim_str(self.ff_dim)}, "
                f"kernel_size={self.conv.filter_dims[0].size}, dropout={self.dropout}")


class Merge(Module):
    """The E-Branchformer's merge of its two branches: x = concat(x1 over in_dim1, x2 over in_dim2) ->
    merge_proj(x + depthwise_conv_fusion(x)), the conv depthwise over spatial_dim (merge_conv_kernel, 'same'),
    merge_proj a Linear to out_dim. forward(x1, x2, spatial_dim=) -> Tensor over x1's other dims and out_dim."""

    def __init__(self, *, in_dim1: Dim, in_dim2: Dim, out_dim: Dim, merge_conv_kernel: int = 3, dtype="float32",
                 device=None):
        super().__init__()
        caller = "Merge()"
        for what, dim in (("in_dim1", in_dim1), ("in_dim2", in_dim2), ("out_dim", out_dim)):
            if not isinstance(dim, Dim) or dim.size is None:
                raise TypeError(f"{caller}: {what} must be a static Dim, got {dim!r}")
        self.in_dim1, self.in_dim2, self.out_dim = in_dim1, in_dim2, out_dim
        self.concat_in_dim = Dim(in_dim1.size + in_dim2.size, name="merge_concat")
        kw = dict(dtype=dtype, device=device)
        self.depthwise_conv_fusion = Conv1d(self.concat_in_dim, self.concat_in_dim, merge_conv_kernel,
                                            padding="same", groups=self.concat_in_dim.size, **kw)
        self.merge_proj = Linear(self.concat_in_dim, out_dim, **kw)

    def forward(self, x1: Tensor, x2: Tensor, *, spatial_dim: Dim) -> Tensor:
        _check_x("Merge()", x1, self.in_dim1, spatial_dim, "x1")
        _check_x("Merge()", x2, self.in_dim2, spatial_dim, "x2")
        x, _ = _concat((x1, self.in_dim1), (x2, self.in_dim2), out_dim=self.concat_in_dim)
        conv, _ = self.depthwise_conv_fusion(x, in_spatial_dim=spatial_dim)
        return self.merge_proj(x + conv)

    def extra_repr(self) -> str:
        return (f"in_dim1={dim_str(self.in_dim1)}, in_dim2={dim_str(self.in_dim2)}, out_dim={dim_str(self.out_dim)}, "
                f"merge_conv_kernel={self.depthwise_conv_fusion.filter_dims[0].size}")


class EBranchformerLayer(Module):
    """E-Branchformer layer (RETURNN's EBranchformerLayer), pre-norm:
    x = x + 1/2 dropout(ffn1(ffn1_layer_norm(x)));
    x = x + dropout(merge(dropout(self_att(self_att_layer_norm(x))), dropout(cgmlp(cgmlp_layer_norm(x)))));
    x = x + 1/2 dropout(ffn2(ffn2_layer_norm(x))); -> final_layer_norm.

    ff: None gives dt.nn.ConformerPositionwiseFeedForward (ff_dim default 4 * out_dim, ff_activation default
    swish); a class or a module as in dt.nn.make_ff. self_att: None gives dt.nn.RelPosSelfAttention over
    out_dim (num_heads, att_dropout); a class is built with in_dim, proj_dim, key_dim_total, value_dim_total
    (all out_dim), num_heads, att_dropout; a module is deep-copied. cgmlp: None gives FeedForwardConvGated
    (cgmlp_ff_dim default 3 * out_dim, cgmlp_conv_kernel, dropout); a class is built with those (out_dim
    first); a module is deep-copied. norm: a class (default dt.nn.LayerNorm), a module or a callable.
    Dropout in training only, one mask over out_dim shared by batch and time while `dropout_broadcast`
    (rf's default). forward(x, spatial_dim=) -> Tensor with x's dims.

    x's padding frames are zeroed first (`zero_padding`; ConformerEncoderV2 zeroes its input once and turns
    this off): layer norm's backward on NaN/inf padding would put NaN into the parameters' gradients."""

    def __init__(self, out_dim: Dim = DEFAULT_OUT_DIM, *, ff: Union[type, Module, None] = None,
                 ff_dim: Union[Dim, int, None] = None, ff_activation: Union[str, Callable, None] = None,
                 dropout: float = 0.1, num_heads: int = 4, self_att: Union[type, Module, None] = None,
                 att_dropout: float = 0.1, cgmlp: Union[type, Module, None] = None,
                 cgmlp_ff_dim: Union[Dim, int, None] = None, cgmlp_conv_kernel: int = 31, merge_conv_kernel: int = 3,
                 norm: Union[type, Module, Callable] = LayerNorm, dtype="float32", device=None):
        super().__init__()
        caller = "EBranchformerLayer()"
        if not isinstance(out_dim, Dim) or out_dim.size is None:
            raise TypeError(f"{caller}: out_dim must be a static Dim, got {out_dim!r}")
        kw = dict(dtype=dtype, device=device)
        self.out_dim, self.dropout, self.dropout_broadcast = out_dim, dropout, True
        self.ffn1 = self._make_ff(ff, ff_dim, ff_activation, **kw)
        self.ffn1_layer_norm = self._make_norm(norm, **kw)
        self.ffn2 = self._make_ff(ff, ff_dim, ff_activation, **kw)
        self.ffn2_layer_norm = self._make_norm(norm, **kw)
        # (its input's padding is finite: zeroed here or by the encoder)
        self.self_att = make_self_att(self_att, out_dim, num_heads=num_heads, att_dropout=att_dropout,
                                      default=RelPosSelfAttention, caller=caller, **kw)
        self.self_att_layer_norm = self._make_norm(norm, **kw)
        if cgmlp is None:
            cgmlp = FeedForwardConvGated(out_dim, ff_dim=cgmlp_ff_dim, kernel_size=cgmlp_conv_kernel, dropout=dropout,
                                         **kw)
        elif isinstance(cgmlp, type):
            opts = dict(ff_dim=cgmlp_ff_dim) if cgmlp_ff_dim is not None else {}
            cgmlp = cgmlp(out_dim, kernel_size=cgmlp_conv_kernel, dropout=dropout, **opts)
        elif isinstance(cgmlp, Module):
            cgmlp = copy.deepcopy(cgmlp)
        else:
            raise TypeError(f"{caller}: cgmlp must be None, a module class or a module, got {cgmlp!r}")
        if isinstance(getattr(cgmlp, "zero_padding", None), bool):
            cgmlp.zero_padding = False  # its input's padding is finite, as the attention's
        self.cgmlp = cgmlp
        self.cgmlp_layer_norm = self._make_norm(norm, **kw)
        self.merge = Merge(in_dim1=out_dim, in_dim2=out_dim, out_dim=out_dim, merge_conv_kernel=merge_conv_kernel,
                           **kw)
        self.final_layer_norm = self._make_norm(norm, **kw)
        self.zero_padding = True

    def _make_ff(self, ff, ff_dim, ff_activation, **kw) -> Module:
        if ff is not None:
            return make_ff(out_dim=self.out_dim, ff=ff, ff_dim=ff_dim, ff_activation=ff_activation,
                           dropout=self.dropout)
        ff_dim = _static_dim(4 * self.out_dim.size if ff_dim is None else ff_dim, "ff", "EBranchformerLayer()")
        return ConformerPositionwiseFeedForward(self.out_dim, ff_dim, dropout=self.dropout,
                                                activation=ff_activation or "swish", **kw)

    def _make_norm(self, norm, **kw) -> Callable:
        return LayerNorm(self.out_dim, **kw) if norm is LayerNorm else make_norm(norm, self.out_dim)

    def forward(self, x: Tensor, *, spatial_dim: Dim) -> Tensor:
        _check_x("EBranchformerLayer()", x, self.out_dim, spatial_dim)
        x = narrow_to_longest(x, spatial_dim)
        if self.zero_padding and spatial_dim.lengths is not None:
            x = x.copy_masked(0.0)
        out = self.out_dim
        x = 0.5 * _drop(self, self.ffn1(self.ffn1_layer_norm(x)), self.dropout, out) + x
        att = self.self_att(self.self_att_layer_norm(x), axis=spatial_dim)
        if isinstance(att, tuple):  # a causal attention's (y, state)
            att = att[0]
        att = _drop(self, att, self.dropout, out)
        local = _drop(self, self.cgmlp(self.cgmlp_layer_norm(x), spatial_dim=spatial_dim), self.dropout, out)
        x = _drop(self, self.merge(att, local, spatial_dim=spatial_dim), self.dropout, out) + x
        x = 0.5 * _drop(self, self.ffn2(self.ffn2_layer_norm(x)), self.dropout, out) + x
        return self.final_layer_norm(x)

    def extra_repr(self) -> str:
        return f"out_dim={dim_str(self.out_dim)}, dropout={self.dropout}"
