"""rf.encoder.transformer (RETURNN frontend's): TransformerEncoder (embedding, positions, layers, final norm)
and TransformerEncoderLayer (pre-norm self-attention + feed-forward); rf's options and layouts."""
from __future__ import annotations

import copy as _copy
import functools
from types import FunctionType
from typing import Any, Callable, Dict, Optional, Sequence, Union

import torch

from ..._C import Dim, Tensor
from .._builders import NotSpecified, dropout as _dropout, finite_padding_inside, make_norm, not_specified
from .._builders import zero_padding as _zero_padding
from ..attention import SelfAttention
from ..build_from_dict import build_from_dict
from ..container import Sequential
from ..decoder.transformer import FeedForward, sinusoidal_positional_encoding
from ..linear import Embedding, Linear
from ..module import Module
from ..normalization import LayerNorm
from ..state import State

__all__ = ["TransformerEncoder", "TransformerEncoderLayer"]


class TransformerEncoderLayer(Module):
    """TransformerEncoderLayer(out_dim=512, *, ff=FeedForward, dropout=0.1, num_heads=8, self_att=None
    (SelfAttention), att_dropout=0.1, norm=LayerNorm): x + self_att(LN(x)) -> + ff(LN(x)).
    __call__(inp, *, spatial_dim) -> Tensor (a causal self_att's state is dropped)."""

    def __init__(self, out_dim: Dim = Dim(512, name="transformer-enc-default-out-dim"), *, ff=NotSpecified,
                 dropout: float = 0.1, num_heads: int = 8, self_att=None, att_dropout: float = 0.1, norm=LayerNorm):
        super().__init__()
        self.dropout, self.out_dim = dropout, out_dim
        self.dropout_broadcast = False
        if not_specified(ff):
            ff = FeedForward
        if isinstance(ff, torch.nn.Module):
            ff = _copy.deepcopy(ff)
        elif isinstance(ff, type):
            ff = ff(out_dim=out_dim, dropout=dropout)
        elif isinstance(ff, dict):
            ff = build_from_dict(ff, out_dim=out_dim, dropout=dropout)
        else:
            raise TypeError(f"dimtorch.rf.TransformerEncoderLayer(): unexpected ff {ff!r}")
        self.ff = ff
        self.ff_layer_norm = make_norm(norm, out_dim)
        opts = dict(in_dim=out_dim, proj_dim=out_dim, key_dim_total=out_dim, value_dim_total=out_dim,
                    num_heads=num_heads, att_dropout=att_dropout)
        if self_att is None:
            self.self_att = SelfAttention(**opts)
        elif isinstance(self_att, type):
            self.self_att = self_att(**opts)
        elif isinstance(self_att, dict):
            self.self_att = build_from_dict(self_att, **opts)
        elif isinstance(self_att, torch.nn.Module):
            self.self_att = _copy.deepcopy(self_att)
        else:
            raise TypeError(f"dimtorch.rf.TransformerEncoderLayer(): unexpected self_att {self_att!r}")
        self.self_att_layer_norm = make_norm(norm, out_dim)
        self.zero_padding = True

    def default_initial_state(self, *, batch_dims: Sequence[Dim]) -> State:
        return State(self_att=self.self_att.default_initial_state(batch_dims=batch_dims))

    def __call__(self, inp: Tensor, *, spatial_dim: Dim) -> Tensor:
        inp = _zero_padding(self, inp, spatial_dim)
        h = self.self_att(self.self_att_layer_norm(inp), axis=spatial_dim)
        if isinstance(h, tuple):
            h = h[0]
        x = _dropout(self, h, self.dropout) + inp
        return _dropout(self, self.ff(self.ff_layer_norm(x)), self.dropout) + x


class TransformerEncoder(Module):
    """TransformerEncoder(vocab_dim, model_dim=512, *, num_layers, ff=, pos_enc=sinusoidal_positional_encoding,
    dropout=0.1, num_heads=8, att_dropout=0.1, norm=LayerNorm, layer=None, layer_opts=None, embed_dim=None,
    input_embedding=Embedding, input_embedding_scale=sqrt(model_dim), input_dropout=dropout, sequential=Sequential).
    __call__(source, *, spatial_dim, collected_outputs=None) -> Tensor (after the final layer norm)."""

    def __init__(self, vocab_dim: Dim, model_dim: Union[Dim, int] = Dim(512, name="transformer-enc-default-model-dim"),
                 *, num_layers: int, ff=NotSpecified,
                 pos_enc: Union[None, Callable, Dict[str, Any], Module] = sinusoidal_positional_encoding,
                 dropout: float = 0.1, num_heads: int = 8, att_dropout: float = 0.1, norm=LayerNorm, layer=None,
                 layer_opts: Optional[Dict[str, Any]] = None, embed_dim: Optional[Dim] = None,
                 input_embedding=Embedding, input_embedding_scale: Optional[float] = None,
                 input_dropout: Optional[float] = None, sequential=Sequential, **compat_kwargs):
        super().__init__()
        caller = "dimtorch.rf.TransformerEncoder()"
        if "decoder_layer" in compat_kwargs:
            layer = compat_kwargs.pop("decoder_layer")
        if compat_kwargs:
            raise TypeError(f"{caller}: unexpected keyword arguments {sorted(compat_kwargs)}")
        if isinstance(model_dim, int):
            model_dim = Dim(model_dim, name="transformer-enc-model-dim")
        self.vocab_dim, self.model_dim, self.embed_dim = vocab_dim, model_dim, embed_dim
        self.out_dim = model_dim
        if isinstance(input_embedding, type):
            input_embedding = input_embedding(vocab_dim, embed_dim or model_dim)
        elif isinstance(input_embedding, dict):
            input_embedding = build_from_dict(input_embedding, vocab_dim, embed_dim or model_dim)
        elif input_embedding is not None and not isinstance(input_embedding, torch.nn.Module):
            raise TypeError(f"{caller}: unexpected input_embedding {input_embedding!r}")
        self.input_embedding = input_embedding
        self.input_embedding_proj = Linear(embed_dim, model_dim, with_bias=False) if embed_dim else None
        feat = embed_dim or model_dim
        if isinstance(pos_enc, dict):
            pos_enc = build_from_dict(pos_enc, feat_dim=feat)
        elif isinstance(pos_enc, (FunctionType, functools.partial)):
            pos_enc = functools.partial(pos_enc, feat_dim=feat)
        elif pos_enc is not None and not isinstance(pos_enc, torch.nn.Module):
            raise TypeError(f"{caller}: unexpected pos_enc {pos_enc!r}")
        self.pos_enc = pos_enc
        self.input_embedding_scale = model_dim.size ** 0.5 if input_embedding_scale is None else input_embedding_scale
        self.input_dropout = dropout if input_dropout is None else input_dropout
        if not layer or isinstance(layer, (dict, type)):
            opts = {k: v for k, v in dict(out_dim=model_dim, ff=ff, dropout=dropout, num_heads=num_heads,
                                          att_dropout=att_dropout, norm=norm).items() if not not_specified(v)}
            opts.update(layer_opts or {})
            if not layer:
                layer = TransformerEncoderLayer(**opts)
            elif isinstance(layer, type):
                layer = layer(**opts)
            else:
                layer = build_from_dict(layer, **{k: v for k, v in opts.items() if k not in layer})
        self.layers = sequential(_copy.deepcopy(layer) for _ in range(num_layers))
        finite_padding_inside(self.layers)
        self.final_layer_norm = make_norm(norm, model_dim)

    def __call__(self, source: Tensor, *, spatial_dim: Dim,
                 collected_outputs: Optional[Dict[str, Tensor]] = None) -> Tensor:
        if self.input_embedding is not None:
            x = self.input_embedding(source) * self.input_embedding_scale
        else:
            x = source.copy_masked(0.0) if spatial_dim.lengths is not None else source
        if self.pos_enc is not None:
            x = x + self.pos_enc(spatial_dim=spatial_dim)
        x = _dropout(self, x, self.input_dropout)
        if self.input_embedding_proj is not None:
            x = self.input_embedding_proj(x)
        for name, layer in self.layers.items():
            x = layer(x, spatial_dim=spatial_dim)
            if collected_outputs is not None:
                collected_outputs[name] = x
        return self.final_layer_norm(x)
