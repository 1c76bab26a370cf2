"""Transformer encoder (RETURNN frontend's rf.encoder.transformer): pre-norm self-attention + feed-forward layers."""
from __future__ import annotations

import copy
import math
from typing import Any, Callable, Dict, Optional, Union

from .._C import Dim, Tensor
from .._C import dropout as _dropout
from .._core.args import dim_str, dims_str
from ..ops.positional import sinusoidal_positional_encoding
from .attention import SelfAttention
from .builders import make_ff, make_norm, make_self_att
from .container import ModuleList
from .embedding import Embedding
from .feed_forward import FeedForward
from .linear import Linear
from .module import Module
from .normalization import LayerNorm

__all__ = ["TransformerEncoder", "TransformerEncoderLayer"]


def _dropout_in_training(module: Module, h: Tensor, p: float) -> Tensor:
    return _dropout(h, p, training=True) if module.training and p else h


class TransformerEncoderLayer(Module):
    """Pre-norm Transformer encoder block (RETURNN's TransformerEncoderLayer):
    x + dropout(self_att(self_att_layer_norm(x))) -> + dropout(ff(ff_layer_norm(x))).

    ff: None gives dt.nn.FeedForward (ff dim 4 * out_dim, relu, `dropout`); a class is built with out_dim
    and dropout (dt.nn.make_ff); a module is deep-copied. self_att: None gives dt.nn.SelfAttention over
    out_dim (key, value and projection out_dim, num_heads, att_dropout); a class is built with those
    keywords (in_dim, proj_dim, key_dim_total, value_dim_total, num_heads, att_dropout), e.g.
    dt.nn.RelPosCausalSelfAttention; a module is deep-copied. An attention that returns (y, state)
    (the causal ones) gives its y. norm: a class (default dt.nn.LayerNorm), a module or a callable
    (dt.nn.make_norm). forward(x, spatial_dim=) -> Tensor with x's dims.

    x's padding frames are zeroed first (`zero_padding`; one where): in a pre-norm block, layer norm's
    backward on NaN/inf padding gives NaN there, and the attention would carry it from padding queries into
    the gradients of valid frames (torch's own pre-norm layer does so too). TransformerEncoder zeroes its
    input once and turns this off for its layers (their padding stays finite)."""

    def __init__(self, out_dim: Dim, *, ff: Union[type, Module, None] = None, dropout: float = 0.1,
                 num_heads: int = 8, self_att: Union[type, Module, None] = None, att_dropout: float = 0.1,
                 norm: Union[type, Module, Callable] = LayerNorm, dtype="float32", device=None):
        super().__init__()
        caller = "TransformerEncoderLayer()"
        if not isinstance(out_dim, Dim) or out_dim.size is None:
            raise TypeError(f"{caller}: out_dim must be a static Dim, got {out_dim!r}")
        kw = dict(dtype=dtype, device=device)
        self.out_dim, self.dropout = out_dim, dropout
        self.ff = (FeedForward(out_dim, Dim(4 * out_dim.size, name="ff"), dropout=dropout, **kw) if ff is None
                   else make_ff(out_dim=out_dim, ff=ff, dropout=dropout))
        self.ff_layer_norm = make_norm(norm, out_dim)
        # (the attention sees finite padding: zeroed here or by TransformerEncoder, and layer norm keeps it so)
        self.self_att = make_self_att(self_att, out_dim, num_heads=num_heads, att_dropout=att_dropout,
                                      default=SelfAttention, caller=caller, **kw)
        self.self_att_layer_norm = make_norm(norm, out_dim)
        self.zero_padding = True

    def forward(self, x: Tensor, *, spatial_dim: Dim) -> Tensor:
        if not isinstance(x, Tensor):
            raise TypeError(f"TransformerEncoderLayer(): x must be a dimtorch.Tensor, got {type(x).__name__}")
        if spatial_dim not in x.dims:
            raise ValueError(f"TransformerEncoderLayer(): x lacks the spatial_dim {dim_str(spatial_dim)} "
                             f"(x dims: {dims_str(x.dims)})")
        if self.zero_padding and spatial_dim.lengths is not None:
            x = x.copy_masked(0.0)
        h = self.self_att(self.self_att_layer_norm(x), axis=spatial_dim)
        if isinstance(h, tuple):  # a causal attention's (y, state)
            h = h[0]
        x = _dropout_in_training(self, h, self.dropout) + x
        return _dropout_in_training(self, self.ff(self.ff_layer_norm(x)), self.dropout) + x

    def extra_repr(self) -> str:
        return f"out_dim={dim_str(self.out_dim)}, dropout={self.dropout}"


class TransformerEncoder(Module):
    """Transformer encoder over label (or feature) sequences (RETURNN's rf.encoder.transformer.TransformerEncoder):
    input_embedding (vocab_dim -> embed_dim or model_dim) * input_embedding_scale (default sqrt(model_dim))
    + pos_enc -> dropout (input_dropout, default dropout) -> input_embedding_proj (embed_dim -> model_dim, no
    bias; only with embed_dim) -> num_layers TransformerEncoderLayers -> final_layer_norm.

    input_embedding: a class (default dt.nn.Embedding) built as (vocab_dim, embed_dim or model_dim), a module,
    or None: then source is already over model_dim (no embedding, no scale). pos_enc: the default
    dt.sinusoidal_positional_encoding, another function called as f(spatial_dim=, feat_dim=), a module called
    as m(spatial_dim=), or None. layer: None (TransformerEncoderLayer with ff, dropout, num_heads, att_dropout,
    norm and layer_opts) or a class built with those, once per layer; or a module deep-copied per layer (its
    values too: rf's deep copy re-initializes them). norm: as in the layer.
    forward(source, spatial_dim=, collected_outputs=None) -> Tensor over source's dims with model_dim (the
    full sequence; no step-by-step state); the padding frames are zeroed before the first layer.
    collected_outputs, a dict, gets each layer's output by name."""

    def __init__(self, vocab_dim: Optional[Dim], model_dim: Union[Dim, int] = 512, *, num_layers: int,
                 ff: Union[type, Module, None] = None,
                 pos_enc: Union[None, Callable, Module] = sinusoidal_positional_encoding,
                 dropout: float = 0.1, num_heads: int = 8, att_dropout: float = 0.1,
                 norm: Union[type, Module, Callable] = LayerNorm, layer: Union[type, Module, None] = None,
                 layer_opts: Optional[Dict[str, Any]] = None, embed_dim: Optional[Dim] = None,
                 input_embedding: Union[type, Module, None] = Embedding, input_embedding_scale: Optional[float] = None,
                 input_dropout: Optional[float] = None, dtype="float32", device=None):
        super().__init__()
        caller = "TransformerEncoder()"
        if isinstance(model_dim, int) and not isinstance(model_dim, bool):
            model_dim = Dim(model_dim, name="model")
        if not isinstance(model_dim, Dim) or model_dim.size is None:
            raise TypeError(f"{caller}: model_dim must be a static Dim or an int, got {model_dim!r}")
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 0:
            raise ValueError(f"{caller}: num_layers must be an int >= 0, got {num_layers!r}")
        kw = dict(dtype=dtype, device=device)
        self.vocab_dim, self.model_dim, self.embed_dim = vocab_dim, model_dim, embed_dim
        self.out_dim = model_dim
        feat_dim = embed_dim or model_dim
        if isinstance(input_embedding, type):
            if not isinstance(vocab_dim, Dim):
                raise TypeError(f"{caller}: an input_embedding class needs vocab_dim as a Dim, got {vocab_dim!r}")
            input_embedding = input_embedding(vocab_dim, feat_dim, **kw)
        elif input_embedding is not None and not isinstance(input_embedding, Module):
            raise TypeError(f"{caller}: input_embedding must be a module class, a module or None, "
                            f"got {input_embedding!r}")
        self.input_embedding = input_embedding
        self.input_embedding_proj = Linear(embed_dim, model_dim, with_bias=False, **kw) if embed_dim else None
        if pos_enc is not None and not callable(pos_enc):
            raise TypeError(f"{caller}: pos_enc must be None, a function or a module, got {pos_enc!r}")
        self.pos_enc = pos_enc
        self.input_embedding_scale = (math.sqrt(model_dim.size) if input_embedding_scale is None
                                      else input_embedding_scale)
        self.dropout = dropout
        self.input_dropout = dropout if input_dropout is None else input_dropout
        if layer is None or isinstance(layer, type):
            opts = dict(out_dim=model_dim, ff=ff, dropout=dropout, num_heads=num_heads, att_dropout=att_dropout,
                        norm=norm)
            if layer is None:
                opts.update(kw)
            opts.update(layer_opts or {})
            # Each layer built anew: its own initial values (rf deep-copies one layer, which re-initializes).
            self.layers = ModuleList((layer or TransformerEncoderLayer)(**opts) for _ in range(num_layers))
        elif isinstance(layer, Module):
            self.layers = ModuleList(copy.deepcopy(layer) for _ in range(num_layers))  # (its values copied)
        else:
            raise TypeError(f"{caller}: layer must be None, a layer class or a module, got {layer!r}")
        for each in self.layers:
            if isinstance(each, TransformerEncoderLayer):
                each.zero_padding = False  # forward zeroes the padding once, before the first layer
        self.final_layer_norm = make_norm(norm, model_dim)

    def _positions(self, spatial_dim: Dim, like: Tensor) -> Tensor:
        feat_dim = self.embed_dim or self.model_dim
        if self.pos_enc is sinusoidal_positional_encoding:
            return sinusoidal_positional_encoding(spatial_dim=spatial_dim, feat_dim=feat_dim, dtype=like.raw.dtype,
                                                  device=like.raw.device)
        if isinstance(self.pos_enc, Module):
            return self.pos_enc(spatial_dim=spatial_dim)
        return self.pos_enc(spatial_dim=spatial_dim, feat_dim=feat_dim)

    def forward(self, source: Tensor, *, spatial_dim: Dim,
                collected_outputs: Optional[Dict[str, Tensor]] = None) -> Tensor:
        name = type(self).__name__
        if not isinstance(source, Tensor):
            raise TypeError(f"{name}(): source must be a dimtorch.Tensor, got {type(source).__name__}")
        if spatial_dim not in source.dims:
            raise ValueError(f"{name}(): source lacks spatial_dim {dim_str(spatial_dim)} "
                             f"(source dims: {dims_str(source.dims)})")
        if self.input_embedding is not None:
            x = self.input_embedding(source) * self.input_embedding_scale
        else:
            if self.model_dim not in source.dims:
                raise ValueError(f"{name}(): without input_embedding, source must be over model_dim "
                                 f"{dim_str(self.model_dim)} (source dims: {dims_str(source.dims)})")
            x = source
        if self.pos_enc is not None:
            x = x + self._positions(spatial_dim, x)
        x = _dropout_in_training(self, x, self.input_dropout)
        if self.input_embedding_proj is not None:
            x = self.input_embedding_proj(x)
        if spatial_dim.lengths is not None:
            x = x.copy_masked(0.0)  # once here; see TransformerEncoderLayer
        for key, layer in self.layers.items():
            x = layer(x, spatial_dim=spatial_dim)
            if collected_outputs is not None:
                collected_outputs[key] = x
        return self.final_layer_norm(x)

    def extra_repr(self) -> str:
        vocab = dim_str(self.vocab_dim) if self.vocab_dim is not None else None
        return f"vocab_dim={vocab}, model_dim={dim_str(self.model_dim)}, num_layers={len(self.layers)}"
