"""RETURNN frontend's Conformer V2: the front end (ConformerFrontend) apart from the layers (ConformerEncoderV2).

ConformerFrontend + ConformerEncoderV2 compute what ConformerEncoder (V1) computes, in two modules, so that
a model can put something between them (e.g. a different front end, or SpecAugment after the subsampling).
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Dict, Optional, Tuple, Union

from .._C import Dim, Tensor
from .._C import dropout as _dropout
from .._core.args import dim_str, dims_str
from .conformer import ConformerConvSubsample, ConformerEncoderLayer
from .container import Sequential
from .frames import narrow_to_longest
from .linear import Linear
from .module import Module

__all__ = ["ConformerFrontend", "ConformerEncoderV2"]

# rf's default out_dim is one Dim object shared by both modules' signatures, so that a ConformerFrontend
# and a ConformerEncoderV2 made with their defaults fit together; the same here.
DEFAULT_OUT_DIM = Dim(512, name="conformer-enc-default-out-dim")


class ConformerFrontend(Module):
    """input_layer (e.g. ConformerConvSubsample; None: no input layer and no projection) ->
    input_projection (Linear to out_dim, no bias) -> times input_embedding_scale -> dropout (training).
    forward(source, in_spatial_dim=) -> (x over (batch dims, out_spatial_dim, out_dim), out_spatial_dim)."""

    def __init__(self, in_dim: Dim, out_dim: Dim = DEFAULT_OUT_DIM, *, input_layer: Optional[Callable],
                 input_embedding_scale: float = 1.0, input_dropout: float = 0.1, dtype="float32", device=None):
        super().__init__()
        caller = "dimtorch.nn.ConformerFrontend()"
        if not isinstance(in_dim, Dim) or not isinstance(out_dim, Dim):
            raise TypeError(f"{caller}: in_dim and out_dim must be Dims, got {type(in_dim).__name__} and "
                            f"{type(out_dim).__name__}")
        if input_layer is not None and not callable(input_layer):
            # rf also takes a dict for its build_from_dict; dimtorch takes the module itself.
            raise TypeError(f"{caller}: input_layer must be a module, a callable (x, in_spatial_dim=) -> "
                            f"(y, out_spatial_dim) or None, got {type(input_layer).__name__}")
        self.in_dim, self.out_dim = in_dim, out_dim
        self.input_layer = input_layer
        self.input_projection = None
        if input_layer is not None:
            proj_in = getattr(input_layer, "out_dim", None)
            if not isinstance(proj_in, Dim):
                raise ValueError(f"{caller}: input_layer has no out_dim (a Dim) to project from")
            self.input_projection = Linear(proj_in, out_dim, with_bias=False, dtype=dtype, device=device)
        self.input_embedding_scale = input_embedding_scale
        self.input_dropout = input_dropout

    def forward(self, source: Tensor, *, in_spatial_dim: Dim) -> Tuple[Tensor, Dim]:
        if self.input_layer is not None:
            x, out_spatial_dim = self.input_layer(source, in_spatial_dim=in_spatial_dim)
        else:
            x, out_spatial_dim = source, in_spatial_dim
        if self.input_projection is not None:
            x = self.input_projection(x)
        if self.input_embedding_scale != 1.0:
            x = x * self.input_embedding_scale
        if self.training and self.input_dropout:
            x = _dropout(x, self.input_dropout, training=True)
        return x, out_spatial_dim

    def extra_repr(self) -> str:
        return f"in_dim={dim_str(self.in_dim)}, out_dim={dim_str(self.out_dim)}"


class ConformerEncoderV2(Module):
    """num_layers Conformer layers, no front end: `layers` is a Sequential of deep copies of
    encoder_layer (a module), or of encoder_layer(**options) (a class, e.g. dt.nn.EBranchformerLayer), or of
    ConformerEncoderLayer (None), the options being out_dim, ff_dim, dropout, num_heads, att_dropout,
    conv_kernel_size, ff_activation and conv_norm (these three when given, as rf: a layer without a conv block,
    such as EBranchformerLayer, does not take conv_kernel_size; ConformerEncoderLayer's default is 31) and
    encoder_layer_opts. forward(x, spatial_dim=, collected_outputs=None) -> Tensor over x's dims.

    x's padding is zeroed once here, so the layers' attention skips its own masking of the values (and a
    layer with a `zero_padding` switch, as EBranchformerLayer, its own zeroing of its input)."""

    def __init__(self, out_dim: Dim = DEFAULT_OUT_DIM, *, num_layers: int, ff_dim: Optional[Dim] = None,
                 ff_activation=None, dropout: float = 0.1, conv_kernel_size: Optional[int] = None, conv_norm=None,
                 num_heads: int = 4, att_dropout: float = 0.1,
                 encoder_layer: Union[Module, type, None] = None, encoder_layer_opts: Optional[Dict[str, Any]] = None,
                 sequential: Callable = Sequential, dtype="float32", device=None):
        super().__init__()
        caller = "dimtorch.nn.ConformerEncoderV2()"
        if not isinstance(out_dim, Dim):
            raise TypeError(f"{caller}: out_dim must be a Dim, got {type(out_dim).__name__}")
        if type(num_layers) is not int or num_layers < 0:
            raise ValueError(f"{caller}: num_layers must be an int >= 0, got {num_layers!r}")
        self.out_dim, self.dropout = out_dim, dropout
        if encoder_layer is None or isinstance(encoder_layer, type):
            opts = dict(out_dim=out_dim, ff_dim=ff_dim, dropout=dropout, num_heads=num_heads,
                        att_dropout=att_dropout, dtype=dtype, device=device)
            # given only: a layer class of the user's need not take them (rf leaves NotSpecified ones out too)
            opts.update({k: v for k, v in dict(conv_kernel_size=conv_kernel_size, ff_activation=ff_activation,
                                               conv_norm=conv_norm).items() if v is not None})
            opts.update(encoder_layer_opts or {})
            encoder_layer = (encoder_layer or ConformerEncoderLayer)(**opts)
        elif not callable(encoder_layer):
            raise TypeError(f"{caller}: encoder_layer must be a module, a module class or None, got "
                            f"{type(encoder_layer).__name__}")
        self.layers = sequential(copy.deepcopy(encoder_layer) for _ in range(num_layers))
        for layer in self.layers:
            att = getattr(layer, "self_att", None)
            if att is not None and hasattr(att, "zero_padding"):
                att.zero_padding = False
            if isinstance(getattr(layer, "zero_padding", None), bool):
                layer.zero_padding = False

    def forward(self, x: Tensor, *, spatial_dim: Dim,
                collected_outputs: Optional[Dict[str, Tensor]] = None) -> Tensor:
        if not isinstance(x, Tensor) or spatial_dim not in x.dims:
            got = dims_str(x.dims) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"dimtorch.nn.ConformerEncoderV2(): x must be a dimtorch.Tensor over spatial_dim "
                             f"{dim_str(spatial_dim) if isinstance(spatial_dim, Dim) else spatial_dim!r}, got {got}")
        if spatial_dim.lengths is not None:
            x = narrow_to_longest(x, spatial_dim).copy_masked(0.0)
        return self.layers(x, spatial_dim=spatial_dim, collected_outputs=collected_outputs)

    def extra_repr(self) -> str:
        return f"out_dim={dim_str(self.out_dim)}, num_layers={len(self.layers)}"
