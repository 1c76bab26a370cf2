"""rf.encoder.conformer_v2 (RETURNN frontend's): ConformerFrontend (input_layer, input_projection, scale,
input dropout) and ConformerEncoderV2 (the layers only)."""
from __future__ import annotations

import copy as _copy
from typing import Any, Dict, Optional, Tuple

from ..._C import Dim, Tensor
from .._builders import NotSpecified, dropout as _dropout, finite_padding_inside
from ..build_from_dict import build_from_dict
from ..container import Sequential
from ..linear import Linear
from .base import ISeqDownsamplingEncoder, ISeqFramewiseEncoder
from .conformer import ConformerConvSubsample, ConformerEncoderLayer, _layer_from_options  # noqa: F401

__all__ = ["ConformerFrontend", "ConformerEncoderV2"]


class ConformerFrontend(ISeqDownsamplingEncoder):
    """ConformerFrontend(in_dim, out_dim=512, *, input_layer, input_embedding_scale=1.0, input_dropout=0.1):
    input_layer (a module or config dict; None) -> input_projection (Linear, no bias; only with an input
    layer) -> * input_embedding_scale -> input dropout. __call__(source, *, in_spatial_dim) -> (out, dim)."""

    def __init__(self, in_dim: Dim, out_dim: Dim = Dim(512, name="conformer-enc-default-out-dim"), *,
                 input_layer=None, input_embedding_scale: float = 1.0, input_dropout: float = 0.1):
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.dropout_broadcast = False
        if isinstance(input_layer, dict):
            input_layer = build_from_dict(input_layer, in_dim)
        self.input_layer = input_layer
        self.input_projection = (Linear(input_layer.out_dim if input_layer else in_dim, out_dim, with_bias=False)
                                 if input_layer else None)
        self.input_embedding_scale, self.input_dropout = input_embedding_scale, input_dropout

    def __call__(self, source: Tensor, *, in_spatial_dim: Dim) -> Tuple[Tensor, Dim]:
        if self.input_layer:
            x, out_spatial_dim = self.input_layer(source, in_spatial_dim=in_spatial_dim)
        else:
            x, out_spatial_dim = source, in_spatial_dim
        if out_spatial_dim.lengths is not None:
            x = x.copy_masked(0.0)
        x = self.input_projection(x) if self.input_projection is not None else x
        if self.input_embedding_scale != 1.0:
            x = x * self.input_embedding_scale
        return _dropout(self, x, self.input_dropout), out_spatial_dim


class ConformerEncoderV2(ISeqFramewiseEncoder):
    """ConformerEncoderV2(out_dim=512, *, num_layers, ff_dim=, ff_activation=, dropout=0.1, conv_kernel_size=,
    conv_norm=, num_heads=4, att_dropout=0.1, encoder_layer=None, encoder_layer_opts=None,
    sequential=Sequential): the Conformer layers (copies of encoder_layer: a class, config dict or module).
    __call__(x, *, spatial_dim, collected_outputs=None) -> Tensor."""

    def __init__(self, out_dim: Dim = Dim(512, name="conformer-enc-default-out-dim"), *, num_layers: int,
                 ff_dim=NotSpecified, ff_activation=NotSpecified, dropout: float = 0.1, conv_kernel_size=NotSpecified,
                 conv_norm=NotSpecified, num_heads: int = 4, att_dropout: float = 0.1, encoder_layer=None,
                 encoder_layer_opts: Optional[Dict[str, Any]] = None, sequential=Sequential):
        super().__init__()
        self.out_dim, self.dropout = out_dim, dropout
        self.dropout_broadcast = False
        layer = _layer_from_options(encoder_layer, dict(out_dim=out_dim, ff_dim=ff_dim, ff_activation=ff_activation,
                                                        dropout=dropout, conv_kernel_size=conv_kernel_size,
                                                        conv_norm=conv_norm, num_heads=num_heads,
                                                        att_dropout=att_dropout), encoder_layer_opts,
                                    "dimtorch.rf.ConformerEncoderV2()")
        self.layers = sequential(_copy.deepcopy(layer) for _ in range(num_layers))
        finite_padding_inside(self.layers)

    def __call__(self, x: Tensor, *, spatial_dim: Dim, collected_outputs: Optional[Dict[str, Tensor]] = None) -> Tensor:
        if spatial_dim.lengths is not None:
            x = x.copy_masked(0.0)
        return self.layers(x, spatial_dim=spatial_dim, collected_outputs=collected_outputs)
