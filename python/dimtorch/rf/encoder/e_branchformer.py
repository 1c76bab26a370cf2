"""rf.encoder.e_branchformer (RETURNN frontend's): EBranchformerLayer (usable as ConformerEncoder's
encoder_layer), FeedForwardConvGated (cgMLP), Merge; rf's options, parameter names and layouts."""
from __future__ import annotations

import copy as _copy
from typing import Any, Callable, Dict, Union

import torch

from ... import _C
from ..._C import Dim, Tensor
from .._builders import NotSpecified, dropout as _dropout, identity, make_activation, make_norm, not_specified
from .._builders import zero_padding as _zero_padding
from ..attention import RelPosSelfAttention
from ..build_from_dict import build_from_dict
from ..conv import Conv1d
from ..linear import Linear
from ..module import Module
from ..normalization import LayerNorm
from .conformer import make_ff

__all__ = ["EBranchformerLayer", "FeedForwardConvGated", "Merge"]


class EBranchformerLayer(Module):
    """EBranchformerLayer(out_dim=512, *, ff=, ff_dim=, ff_activation=, dropout=0.1, num_heads=4, self_att=
    (RelPosSelfAttention), att_dropout=0.1, cgmlp=FeedForwardConvGated, cgmlp_ff_dim=, cgmlp_conv_kernel=31,
    merge_conv_kernel=3, norm=LayerNorm): x + 1/2 FF1 -> + merge(MHSA(LN(x)), cgMLP(LN(x))) -> + 1/2 FF2 -> LN.
    __call__(inp, *, spatial_dim) -> Tensor."""

    def __init__(self, out_dim: Dim = Dim(512, name="conformer-enc-default-out-dim"), *, ff=NotSpecified,
                 ff_dim=NotSpecified, ff_activation=NotSpecified, dropout: float = 0.1, num_heads: int = 4,
                 self_att=NotSpecified, att_dropout: float = 0.1, cgmlp=NotSpecified, cgmlp_ff_dim=NotSpecified,
                 cgmlp_conv_kernel: int = 31, merge_conv_kernel: int = 3, norm=LayerNorm):
        super().__init__()
        self.dropout, self.out_dim = dropout, out_dim
        self.dropout_broadcast = False
        self.ffn1 = make_ff(ff=ff, out_dim=out_dim, ff_dim=ff_dim, dropout=dropout, ff_activation=ff_activation)
        self.ffn1_layer_norm = make_norm(norm, out_dim)
        self.ffn2 = make_ff(ff=ff, out_dim=out_dim, ff_dim=ff_dim, dropout=dropout, ff_activation=ff_activation)
        self.ffn2_layer_norm = make_norm(norm, out_dim)
        opts = dict(in_dim=out_dim, proj_dim=out_dim, key_dim_total=out_dim, value_dim_total=out_dim,
                    num_heads=num_heads, att_dropout=att_dropout)
        if not_specified(self_att):
            self.self_att = RelPosSelfAttention(**opts)
        elif isinstance(self_att, type):
            self.self_att = self_att(**opts)
        elif isinstance(self_att, dict):
            self.self_att = build_from_dict(self_att, **{k: v for k, v in opts.items() if k not in self_att})
        elif isinstance(self_att, torch.nn.Module):
            self.self_att = _copy.deepcopy(self_att)
        else:
            raise TypeError(f"dimtorch.rf.EBranchformerLayer(): unexpected self_att {self_att!r}")
        self.self_att_layer_norm = make_norm(norm, out_dim)
        if not_specified(cgmlp):
            cgmlp = FeedForwardConvGated
        cg_opts = {k: v for k, v in dict(ff_dim=cgmlp_ff_dim, kernel_size=cgmlp_conv_kernel, dropout=dropout).items()
                   if not not_specified(v)}
        if isinstance(cgmlp, type):
            cgmlp = cgmlp(out_dim, **cg_opts)
        elif isinstance(cgmlp, dict):
            cgmlp = build_from_dict(cgmlp, out_dim, **{k: v for k, v in cg_opts.items() if k not in cgmlp})
        elif isinstance(cgmlp, torch.nn.Module):
            cgmlp = _copy.deepcopy(cgmlp)
        else:
            raise TypeError(f"dimtorch.rf.EBranchformerLayer(): unexpected cgmlp {cgmlp!r}")
        self.cgmlp = cgmlp
        self.cgmlp_layer_norm = make_norm(norm, out_dim)
        self.merge = Merge(in_dim1=out_dim, in_dim2=out_dim, out_dim=out_dim, merge_conv_kernel=merge_conv_kernel)
        self.final_layer_norm = make_norm(norm, out_dim)
        self.zero_padding = True

    def __call__(self, inp: Tensor, *, spatial_dim: Dim) -> Tensor:
        inp = _zero_padding(self, inp, spatial_dim)
        p = self.dropout
        x = 0.5 * _dropout(self, self.ffn1(self.ffn1_layer_norm(inp)), p) + inp
        att = _dropout(self, self.self_att(self.self_att_layer_norm(x), axis=spatial_dim), p)
        cg = _dropout(self, self.cgmlp(self.cgmlp_layer_norm(x), spatial_dim=spatial_dim), p)
        x = _dropout(self, self.merge(att, cg, spatial_dim=spatial_dim), p) + x
        x = 0.5 * _dropout(self, self.ffn2(self.ffn2_layer_norm(x)), p) + x
        return self.final_layer_norm(x)


class FeedForwardConvGated(Module):
    """FeedForwardConvGated(out_dim, *, ff_dim=3 * out_dim, kernel_size=31, dropout=0.1, activation=gelu,
    gate_activation=identity, with_bias=True, norm=LayerNorm): linear_ff (out -> 2 ff) -> activation -> split
    (g, r) -> g: norm, depthwise conv, gate_activation -> g * r -> dropout -> linear_out.
    __call__(x, *, spatial_dim) -> Tensor."""

    def __init__(self, out_dim: Dim, *, ff_dim=NotSpecified, kernel_size: int = 31, dropout: float = 0.1,
                 activation: Union[Callable[[Tensor], Tensor], Dict[str, Any], Module] = _C.gelu,
                 gate_activation=identity, with_bias: bool = True, norm=LayerNorm):
        super().__init__()
        ff = out_dim * 3 if not_specified(ff_dim) else ff_dim
        if isinstance(ff, int):
            ff = Dim(ff, name="e-branchformer-ff-dim")
        self.out_dim, self.ff_dim, self.dropout = out_dim, ff, dropout
        self.dropout_broadcast = False
        self.activation = _C.gelu if not_specified(activation) else make_activation(activation)
        self.gate_activation = (None if gate_activation is identity or not_specified(gate_activation)  # (no call)
                                else make_activation(gate_activation))
        self.linear_ff = Linear(out_dim, 2 * ff, with_bias=with_bias)
        self.norm = make_norm(norm, ff)
        self.conv = Conv1d(ff, ff, filter_size=kernel_size, groups=ff.size, padding="same", with_bias=with_bias)
        self.linear_out = Linear(ff, out_dim, with_bias=with_bias)

    def __call__(self, x: Tensor, *, spatial_dim: Dim) -> Tensor:
        x = self.activation(self.linear_ff(x))
        g, r = _C.split(x, axis=self.linear_ff.out_dim, out_dims=[self.ff_dim] * 2)
        g, _ = self.conv(self.norm(g), in_spatial_dim=spatial_dim)
        if self.gate_activation is not None:
            g = self.gate_activation(g)
        return self.linear_out(_dropout(self, g * r, self.dropout))


class Merge(Module):
    """Merge(*, in_dim1, in_dim2, out_dim, merge_conv_kernel=3): concat -> + depthwise conv (depthwise_conv_fusion)
    -> merge_proj. __call__(x1, x2, *, spatial_dim) -> Tensor."""

    def __init__(self, *, in_dim1: Dim, in_dim2: Dim, out_dim: Dim, merge_conv_kernel: int = 3):
        super().__init__()
        self.in_dim1, self.in_dim2, self.out_dim = in_dim1, in_dim2, out_dim
        self.concat_in_dim = in_dim1 + in_dim2
        self.depthwise_conv_fusion = Conv1d(self.concat_in_dim, self.concat_in_dim, groups=self.concat_in_dim.size,
                                            filter_size=merge_conv_kernel, padding="same")
        self.merge_proj = Linear(self.concat_in_dim, out_dim)

    def __call__(self, x1: Tensor, x2: Tensor, *, spatial_dim: Dim) -> Tensor:
        x, _ = _C.concat((x1, self.in_dim1), (x2, self.in_dim2), out_dim=self.concat_in_dim)
        conv, _ = self.depthwise_conv_fusion(x, in_spatial_dim=spatial_dim)
        return self.merge_proj(x + conv)
