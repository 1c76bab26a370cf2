"""Transformer decoder (causal self-attention, cross-attention, feed-forward): full sequence or step by step."""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

import torch

from .._core import tracing as _tracing
from .._C import Dim, Tensor
from .._C import dropout as _dropout
from .._core.args import dim_str, dims_str
from .attention import CausalSelfAttention, CausalSelfAttentionState, CrossAttention
from .embedding import Embedding
from .feed_forward import FeedForward
from .linear import Linear
from .container import ModuleList
from .module import Module
from .normalization import LayerNorm

__all__ = ["TransformerDecoder", "TransformerDecoderLayer", "TransformerDecoderState", "absolute_positional_encoding"]

_abs_cache = {}


def _sinusoids(pos: torch.Tensor, dim: int) -> torch.Tensor:
    """float32 (len(pos), dim): concat(sin(p * w), cos(p * w)) per position p, w_k = 10000^(-2k / dim),
    k < dim/2; an odd dim gets one zero column."""
    div = torch.exp(torch.arange(dim // 2, dtype=torch.float32, device=pos.device) * -(2.0 * math.log(1e4) / dim))
    arg = pos[:, None] * div[None, :]
    pe = torch.cat([torch.sin(arg), torch.cos(arg)], dim=1)
    if pe.shape[1] < dim:  # odd dim: one zero column
        pe = torch.nn.functional.pad(pe, (0, dim - pe.shape[1]))
    return pe


def absolute_positional_encoding(positions: int, dim: int, device=None, dtype=torch.float32,
                                 offset: int = 0) -> torch.Tensor:
    """Sinusoidal positions, raw (positions, dim): row t is [sin(p w), cos(p w)] at p = offset + t,
    w_k = 10000^(-2k / dim). Made on the host, cached per (offset + positions, dim, device, dtype);
    while tracing, computed in the graph (positions may be symbolic there)."""
    if _tracing.tracing():
        pos = torch.arange(offset, offset + positions, dtype=torch.float32, device=device)
        return _sinusoids(pos, dim).to(dtype)
    n = offset + positions
    key = (n, dim, torch.device("cpu") if device is None else torch.device(device), dtype)
    pe = _abs_cache.get(key)
    if pe is None:
        pe = _sinusoids(torch.arange(n, dtype=torch.float32), dim)
        pe = pe.to(device=key[2], dtype=dtype, non_blocking=True)
        if len(_abs_cache) > 256:
            _abs_cache.clear()
        _abs_cache[key] = pe
    return pe[offset:]


class TransformerDecoderState:
    """The decoder's state between steps: the number of frames seen (`pos`) and each layer's
    CausalSelfAttentionState."""

    __slots__ = ("pos", "layers")

    def __init__(self, pos: int, layers: List[Optional[CausalSelfAttentionState]]):
        self.pos, self.layers = pos, layers

    def __repr__(self):
        return f"TransformerDecoderState(pos={self.pos}, layers={len(self.layers)})"


class TransformerDecoderLayer(Module):
    """Pre-norm decoder layer: x + SelfAtt(LN(x)) (causal) -> + CrossAtt(LN(x), encoder) -> + FF(LN(x)).
    forward(x, spatial_dim=, encoder=, enc_spatial_dim=, state=) -> (y, new self-attention state);
    spatial_dim None means one step (x has no time dim)."""

    def __init__(self, encoder_dim: Dim, model_dim: Dim, *, ff_dim: Optional[Dim] = None, num_heads: int = 4,
                 dropout: float = 0.1, att_dropout: float = 0.1, ff_activation="relu", dtype="float32", device=None):
        super().__init__()
        kw = dict(dtype=dtype, device=device)
        self.model_dim, self.dropout = model_dim, dropout
        self.ff_dim = ff_dim if ff_dim is not None else Dim(4 * model_dim.size, name="ff")
        self.self_att_layer_norm = LayerNorm(model_dim, **kw)
        self.self_att = CausalSelfAttention(model_dim, model_dim, key_dim_total=model_dim, value_dim_total=model_dim,
                                            num_heads=num_heads, att_dropout=att_dropout, **kw)
        self.cross_att_layer_norm = LayerNorm(model_dim, **kw)
        self.cross_att = CrossAttention(model_dim, encoder_dim, model_dim, key_dim_total=model_dim,
                                        value_dim_total=model_dim, num_heads=num_heads, att_dropout=att_dropout, **kw)
        self.ff_layer_norm = LayerNorm(model_dim, **kw)
        self.ff = FeedForward(model_dim, self.ff_dim, activation=ff_activation, dropout=dropout, **kw)

    def _drop(self, h: Tensor) -> Tensor:
        return _dropout(h, self.dropout, training=True) if self.training and self.dropout else h

    def forward(self, x: Tensor, *, spatial_dim: Optional[Dim], encoder: Tensor, enc_spatial_dim: Dim,
                state: Optional[CausalSelfAttentionState] = None):
        h, new_state = self.self_att(self.self_att_layer_norm(x), axis=spatial_dim, state=state)
        x = self._drop(h) + x
        h = self.cross_att(self.cross_att_layer_norm(x), encoder, axis=spatial_dim, enc_axis=enc_spatial_dim)
        x = self._drop(h) + x
        x = self._drop(self.ff(self.ff_layer_norm(x))) + x
        return x, new_state


class TransformerDecoder(Module):
    """Transformer decoder over label sequences attending to an encoder output (RETURNN's TransformerDecoder):
    input_embedding (vocab_dim -> model_dim, scaled by sqrt(model_dim)) + sinusoidal absolute positions ->
    dropout -> num_layers TransformerDecoderLayers -> final_layer_norm -> logits (Linear to vocab_dim).

    forward(source, spatial_dim=T, encoder=, enc_spatial_dim=) -> (logits over (batch dims, T, vocab_dim), None):
    the full sequence (teacher forcing; source an int Tensor with sparse_dim vocab_dim).
    forward(source, spatial_dim=None, encoder=, enc_spatial_dim=, state=state) -> (logits over (batch dims,
    vocab_dim), new_state): one step; source has no time dim; state None before the first step.
    Step by step gives, frame by frame, what the full sequence gives."""

    def __init__(self, encoder_dim: Dim, vocab_dim: Dim, model_dim: Dim, *, num_layers: int = 6,
                 ff_dim: Optional[Dim] = None, num_heads: int = 8, dropout: float = 0.1, att_dropout: float = 0.1,
                 ff_activation="relu", dtype="float32", device=None):
        super().__init__()
        kw = dict(dtype=dtype, device=device)
        self.encoder_dim, self.vocab_dim, self.model_dim, self.dropout = encoder_dim, vocab_dim, model_dim, dropout
        self.input_embedding = Embedding(vocab_dim, model_dim, **kw)
        self.input_embedding_scale = math.sqrt(model_dim.size)
        self.layers = ModuleList(
            TransformerDecoderLayer(encoder_dim, model_dim, ff_dim=ff_dim, num_heads=num_heads, dropout=dropout,
                                    att_dropout=att_dropout, ff_activation=ff_activation, **kw)
            for _ in range(num_layers))
        self.final_layer_norm = LayerNorm(model_dim, **kw)
        self.logits = Linear(model_dim, vocab_dim, **kw)

    def forward(self, source: Tensor, *, spatial_dim: Optional[Dim], encoder: Tensor, enc_spatial_dim: Dim,
                state: Optional[TransformerDecoderState] = None) -> Tuple[Tensor, Optional[TransformerDecoderState]]:
        name = type(self).__name__
        if not isinstance(source, Tensor):
            raise TypeError(f"{name}(): source must be a dimtorch.Tensor of label indices, got {type(source).__name__}")
        if spatial_dim is not None:
            if state is not None:
                raise ValueError(f"{name}(): a state is only for step-by-step calls (spatial_dim=None); got "
                                 f"spatial_dim {dim_str(spatial_dim)} and a state")
            if spatial_dim not in source.dims:
                raise ValueError(f"{name}(): source lacks spatial_dim {dim_str(spatial_dim)} (source dims: "
                                 f"{dims_str(source.dims)})")
        x = self.input_embedding(source) * self.input_embedding_scale
        offset = 0 if state is None else state.pos
        steps = 1 if spatial_dim is None else source.raw.shape[source.dims.index(spatial_dim)]
        pe = absolute_positional_encoding(steps, self.model_dim.size, x.raw.device, x.raw.dtype, offset=offset)
        if spatial_dim is None:
            x = x + Tensor(pe[0], (self.model_dim,))
        else:
            x = x + Tensor(pe, (spatial_dim, self.model_dim))
        if self.training and self.dropout:
            x = _dropout(x, self.dropout, training=True)
        layer_states = []
        for i, layer in enumerate(self.layers):
            x, s = layer(x, spatial_dim=spatial_dim, encoder=encoder, enc_spatial_dim=enc_spatial_dim,
                         state=None if state is None else state.layers[i])
            layer_states.append(s)
        logits = self.logits(self.final_layer_norm(x))
        if spatial_dim is not None:
            return logits, None
        return logits, TransformerDecoderState(offset + 1, layer_states)

    def extra_repr(self) -> str:
        return (f"encoder_dim={dim_str(self.encoder_dim)}, vocab_dim={dim_str(self.vocab_dim)}, "
                f"model_dim={dim_str(self.model_dim)}, num_layers={len(self.layers)}")
