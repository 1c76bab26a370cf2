"""rf.decoder.transformer (RETURNN frontend's): TransformerDecoder, TransformerDecoderLayer, FeedForward,
FeedForwardGated, make_norm, with rf's constructor options, parameter names and layouts (rf.Linear weights
(in, out)) and call conventions:

    dec = TransformerDecoder(encoder_dim, vocab_dim, model_dim, num_layers=, ...)
    enc = dec.transform_encoder(encoder_out, axis=enc_spatial)          # once (None for encoder_dim=None)
    state = dec.default_initial_state(batch_dims=[batch])
    logits, state = dec(labels, spatial_dim=time, state=state, encoder=enc)   # full sequence, or
    logits, state = dec(label, spatial_dim=single_step_dim, state=state, encoder=enc)  # one step

Defaults are rf's at its newest behaviour version: share_embedding (logits weight tied to the input
embedding's) when there is no separate embed_dim, input_embedding_scale sqrt(model_dim), input_dropout =
dropout, logits without bias; dropout in training (the run context's train flag)."""
from __future__ import annotations

import copy as _copy
import functools
from types import FunctionType
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

import torch

from ... import _C
from ..._C import Dim, Tensor
from ...ops.positional import sinusoidal_positional_encoding as _sinusoidal
from .._builders import NotSpecified, dropout as _dropout, identity, make_activation, make_norm, not_specified, swish
from .._dims import single_step_dim
from ..attention import CausalSelfAttention, CrossAttention
from ..build_from_dict import build_from_dict
from ..container import Sequential
from ..linear import Embedding, Linear
from ..module import Module
from ..normalization import LayerNorm
from ..state import State

__all__ = ["TransformerDecoder", "TransformerDecoderLayer", "FeedForward", "FeedForwardGated", "make_norm",
           "sinusoidal_positional_encoding"]


def sinusoidal_positional_encoding(*, spatial_dim: Dim, feat_dim: Dim, offset=None, base=1e4, dtype=None,
                                   device=None) -> Tensor:
    """rf's absolute sinusoidal encoding (single_step_dim: the position `offset`); dt.sinusoidal_positional_encoding."""
    return _sinusoidal(spatial_dim=None if spatial_dim is single_step_dim else spatial_dim, feat_dim=feat_dim,
                       offset=offset, base=base, dtype=dtype, device=device)


class FeedForward(Module):
    """FeedForward(out_dim, *, ff_dim=4 * out_dim, dropout=0.1, activation=relu, with_bias=True):
    linear_ff (out_dim -> ff_dim), activation, dropout, linear_out (ff_dim -> out_dim)."""

    def __init__(self, out_dim: Dim, *, ff_dim: Optional[Union[Dim, int]] = NotSpecified, dropout: float = 0.1,
                 activation: Union[Callable[[Tensor], Tensor], Dict[str, Any], Module] = _C.relu,
                 with_bias: bool = True):
        super().__init__()
        if isinstance(ff_dim, int):
            ff_dim = Dim(ff_dim, name="transformer-ff-dim")
        if not_specified(ff_dim) or ff_dim is None:
            ff_dim = out_dim * 4
        if not isinstance(ff_dim, Dim):
            raise TypeError(f"dimtorch.rf.FeedForward(): unexpected ff_dim {ff_dim!r}")
        self.out_dim, self.dropout = out_dim, dropout
        self.dropout_broadcast = False
        self.activation = _C.relu if not_specified(activation) else make_activation(activation)
        self.linear_ff = Linear(out_dim, ff_dim, with_bias=with_bias)
        self.linear_out = Linear(ff_dim, out_dim, with_bias=with_bias)

    def __call__(self, inp: Tensor) -> Tensor:
        x = self.activation(self.linear_ff(inp))
        return self.linear_out(_dropout(self, x, self.dropout))


class FeedForwardGated(Module):
    """FeedForwardGated(out_dim, *, ff_dim=(4 * 2/3 * out_dim, to a multiple of 256), dropout=0.1,
    activation=swish, gate_activation=identity, with_bias=False): linear_ff (out_dim -> 2 * ff_dim) split
    into a, b; activation(a) * gate_activation(b); dropout; linear_out."""

    def __init__(self, out_dim: Dim, *, ff_dim: Optional[Union[Dim, int]] = NotSpecified, dropout: float = 0.1,
                 activation: Union[Callable[[Tensor], Tensor], Dict[str, Any], Module] = swish,
                 gate_activation: Union[Callable[[Tensor], Tensor], Dict[str, Any], Module] = identity,
                 with_bias: bool = False):
        super().__init__()
        if isinstance(ff_dim, int):
            ff_dim = Dim(ff_dim, name="transformer-ff-dim")
        if not_specified(ff_dim) or ff_dim is None:
            size = out_dim.size * 4 * 2 // 3
            ff_dim = Dim(-(-size // 256) * 256, name="transformer-ff-dim")
        if not isinstance(ff_dim, Dim):
            raise TypeError(f"dimtorch.rf.FeedForwardGated(): unexpected ff_dim {ff_dim!r}")
        self.out_dim, self.dropout = out_dim, dropout
        self.dropout_broadcast = False
        self.activation = swish if not_specified(activation) else make_activation(activation)
        self.gate_activation = (None if gate_activation is identity or not_specified(gate_activation)  # (no call)
                                else make_activation(gate_activation))
        self.linear_ff = Linear(out_dim, 2 * ff_dim, with_bias=with_bias)
        self.linear_out = Linear(ff_dim, out_dim, with_bias=with_bias)

    def __call__(self, inp: Tensor) -> Tensor:
        x = self.linear_ff(inp)
        a, b = _C.split(x, axis=self.linear_ff.out_dim, out_dims=[self.linear_out.in_dim] * 2)
        x = self.activation(a) * (self.gate_activation(b) if self.gate_activation is not None else b)
        return self.linear_out(_dropout(self, x, self.dropout))


def _make_ff(ff, *, out_dim: Dim, ff_dim, ff_activation, dropout) -> Module:
    if not_specified(ff):
        ff = FeedForward
    if isinstance(ff, torch.nn.Module):
        return _copy.deepcopy(ff)
    kwargs = {k: v for k, v in dict(out_dim=out_dim, ff_dim=ff_dim, dropout=dropout, activation=ff_activation).items()
              if not not_specified(v)}
    if isinstance(ff, type):
        return ff(**kwargs)
    if isinstance(ff, dict):
        return build_from_dict(ff, **kwargs)
    raise TypeError(f"dimtorch.rf: unexpected ff {ff!r}")


def _make_self_att(self_att, self_att_opts, default: type, **opts):
    opts.update(self_att_opts or {})
    if self_att is None or not_specified(self_att):
        return default(**opts)
    if isinstance(self_att, type):
        return self_att(**opts)
    if isinstance(self_att, dict):
        return build_from_dict(self_att, **{k: v for k, v in opts.items() if k not in self_att})
    if isinstance(self_att, torch.nn.Module):
        return _copy.deepcopy(self_att)
    raise TypeError(f"dimtorch.rf: unexpected self_att {self_att!r}")


class TransformerDecoderLayer(Module):
    """TransformerDecoderLayer(encoder_dim, out_dim, *, ff=, ff_dim=, ff_activation=, dropout=0.1, num_heads=8,
    self_att=None (CausalSelfAttention), self_att_opts=, att_dropout=0.1, cross_att=None, norm=LayerNorm):
    x + self_att(LN(x)) (causal) -> + cross_att(LN(x), encoder) (when encoder_dim) -> + ff(LN(x)).
    __call__(x, *, spatial_dim, state, encoder=None) -> (x, State(self_att=...))."""

    def __init__(self, encoder_dim: Optional[Dim], out_dim: Dim = Dim(512, name="transformer-dec-default-out-dim"), *,
                 ff=NotSpecified, ff_dim=NotSpecified, ff_activation=NotSpecified, dropout: float = 0.1,
                 num_heads: int = 8, self_att=None, self_att_opts: Optional[Dict[str, Any]] = None,
                 att_dropout: float = 0.1, cross_att: Optional[Dict[str, Any]] = None, norm=LayerNorm):
        super().__init__()
        self.encoder_dim, self.out_dim, self.dropout = encoder_dim, out_dim, dropout
        self.dropout_broadcast = False
        self.ff = _make_ff(ff, out_dim=out_dim, ff_dim=ff_dim, ff_activation=ff_activation, dropout=dropout)
        self.ff_layer_norm = make_norm(norm, out_dim)
        self.self_att = _make_self_att(self_att, self_att_opts, CausalSelfAttention, in_dim=out_dim, proj_dim=out_dim,
                                       key_dim_total=out_dim, value_dim_total=out_dim, num_heads=num_heads,
                                       att_dropout=att_dropout)
        self.self_att_layer_norm = make_norm(norm, out_dim)
        self.cross_att = self.cross_att_layer_norm = None
        if encoder_dim is not None:
            opts = dict(encoder_dim=encoder_dim, query_in_dim=out_dim, proj_dim=out_dim, key_dim_total=out_dim,
                        value_dim_total=out_dim, num_heads=num_heads, att_dropout=att_dropout)
            if cross_att is None:
                self.cross_att = CrossAttention(**opts)
            elif isinstance(cross_att, dict):
                self.cross_att = build_from_dict(cross_att, **opts)
            else:
                raise TypeError(f"dimtorch.rf.TransformerDecoderLayer(): unexpected cross_att {cross_att!r}")
            self.cross_att_layer_norm = make_norm(norm, out_dim)

    def default_initial_state(self, *, batch_dims: Sequence[Dim]) -> State:
        return State(self_att=self.self_att.default_initial_state(batch_dims=batch_dims))

    def transform_encoder(self, encoder: Tensor, *, axis: Dim) -> State:
        if self.cross_att is None:
            raise ValueError("dimtorch.rf.TransformerDecoderLayer.transform_encoder(): no cross attention "
                             "(encoder_dim=None)")
        return State(cross_att=self.cross_att.transform_encoder(encoder, axis=axis))

    def __call__(self, x: Tensor, *, spatial_dim: Dim, state: State, encoder: Optional[State] = None
                 ) -> Tuple[Tensor, State]:
        new_state = State()
        h, new_state.self_att = self.self_att(self.self_att_layer_norm(x), axis=spatial_dim, state=state.self_att)
        x = _dropout(self, h, self.dropout) + x
        if self.cross_att is not None:
            if encoder is None:
                raise ValueError("dimtorch.rf.TransformerDecoderLayer(): this layer attends to an encoder: give "
                                 "encoder= (from transform_encoder())")
            h = self.cross_att(self.cross_att_layer_norm(x), encoder.cross_att)
            x = _dropout(self, h, self.dropout) + x
        x = _dropout(self, self.ff(self.ff_layer_norm(x)), self.dropout) + x
        return x, new_state


class TransformerDecoder(Module):
    """TransformerDecoder(encoder_dim, vocab_dim, model_dim=512, *, num_layers, ff=, ff_dim=, ff_activation=,
    pos_enc=sinusoidal_positional_encoding, dropout=0.1, num_heads=8, att_dropout=0.1, norm=LayerNorm,
    layer=None, layer_opts=None (decoder_layer=, decoder_layer_opts= as rf's old names), embed_dim=None,
    share_embedding=None, input_embedding=True, input_embedding_scale=None, input_dropout=None,
    logits_with_bias=False, sequential=Sequential). See the module docstring."""

    def __init__(self, encoder_dim: Optional[Dim], vocab_dim: Dim,
                 model_dim: Union[Dim, int] = Dim(512, name="transformer-dec-default-model-dim"), *, num_layers: int,
                 ff=NotSpecified, ff_dim=NotSpecified, ff_activation=NotSpecified,
                 pos_enc: Union[None, Callable, Dict[str, Any], Module] = sinusoidal_positional_encoding,
                 dropout: float = 0.1, num_heads: int = 8, att_dropout: float = 0.1, norm=LayerNorm, layer=None,
                 layer_opts: Optional[Dict[str, Any]] = None, embed_dim: Optional[Dim] = None,
                 share_embedding: Optional[bool] = None, input_embedding: bool = True,
                 input_embedding_scale: Optional[float] = None, input_dropout: Optional[float] = None,
                 logits_with_bias: bool = False, sequential=Sequential, **compat_kwargs):
        super().__init__()
        caller = "dimtorch.rf.TransformerDecoder()"
        if "decoder_layer" in compat_kwargs:
            layer = compat_kwargs.pop("decoder_layer")
        if "decoder_layer_opts" in compat_kwargs:
            layer_opts = compat_kwargs.pop("decoder_layer_opts")
        if compat_kwargs:
            raise TypeError(f"{caller}: unexpected keyword arguments {sorted(compat_kwargs)}")
        if not isinstance(vocab_dim, Dim):
            raise TypeError(f"{caller}: vocab_dim must be a Dim, got {vocab_dim!r}")
        if isinstance(model_dim, int):
            model_dim = Dim(model_dim, name="transformer-dec-model-dim")
        self.encoder_dim, self.vocab_dim, self.model_dim, self.embed_dim = encoder_dim, vocab_dim, model_dim, embed_dim
        self.input_embedding = Embedding(vocab_dim, embed_dim or model_dim) if input_embedding else None
        self.input_embedding_proj = Linear(embed_dim, model_dim, with_bias=False) if embed_dim else None
        feat = embed_dim or model_dim
        if isinstance(pos_enc, dict):
            pos_enc = build_from_dict(pos_enc, feat_dim=feat)
        elif isinstance(pos_enc, FunctionType) or isinstance(pos_enc, functools.partial):
            pos_enc = functools.partial(pos_enc, feat_dim=feat)
        elif pos_enc is not None and not isinstance(pos_enc, torch.nn.Module):
            raise TypeError(f"{caller}: unexpected pos_enc {pos_enc!r}")
        self.pos_enc = pos_enc
        if share_embedding is None:
            share_embedding = bool(input_embedding) and not (embed_dim and embed_dim is not model_dim)
        if input_embedding_scale is None:
            input_embedding_scale = model_dim.size ** 0.5 if (input_embedding or pos_enc) else 1.0
        self.input_embedding_scale = input_embedding_scale
        self.input_dropout = dropout if input_dropout is None else input_dropout
        if not layer or isinstance(layer, (dict, type)):
            opts = dict(encoder_dim=encoder_dim, out_dim=model_dim, ff=ff, ff_dim=ff_dim, ff_activation=ff_activation,
                        dropout=dropout, num_heads=num_heads, att_dropout=att_dropout, norm=norm)
            opts = {k: v for k, v in opts.items() if not not_specified(v)}
            opts.update(layer_opts or {})
            if not layer:
                layer = TransformerDecoderLayer(**opts)
            elif isinstance(layer, type):
                layer = layer(**opts)
            else:
                layer = build_from_dict(layer, **{k: v for k, v in opts.items() if k not in layer})
        self.layers = sequential(_copy.deepcopy(layer) for _ in range(num_layers))
        self.final_layer_norm = make_norm(norm, model_dim)
        self.logits = Linear(model_dim, vocab_dim, with_bias=logits_with_bias)
        if share_embedding:
            if not input_embedding or logits_with_bias:
                raise ValueError(f"{caller}: share_embedding needs input_embedding=True and logits_with_bias=False")
            self.logits.weight = self.input_embedding.weight

    def default_initial_state(self, *, batch_dims: Sequence[Dim]) -> State:
        state = State({k: v.default_initial_state(batch_dims=batch_dims) for k, v in self.layers.items()})
        state.pos = Tensor(torch.zeros((), dtype=torch.int32), ())
        return state

    def transform_encoder(self, encoder: Tensor, *, axis: Dim) -> State:
        return State({k: v.transform_encoder(encoder, axis=axis) for k, v in self.layers.items()})

    def __call__(self, source: Tensor, *, spatial_dim: Dim, state: State, encoder: Optional[State] = None,
                 collected_outputs: Optional[Dict[str, Tensor]] = None, output_only_last_frame: bool = False
                 ) -> Tuple[Tensor, State]:
        step = spatial_dim is None or spatial_dim is single_step_dim
        x = self.input_embedding(source) if self.input_embedding is not None else source
        if self.input_embedding_scale != 1:
            x = x * self.input_embedding_scale
        pos = state.pos
        if self.pos_enc is not None:
            x = x + self.pos_enc(spatial_dim=single_step_dim if step else spatial_dim, offset=pos)
        x = _dropout(self, x, self.input_dropout)
        if self.input_embedding_proj is not None:
            x = self.input_embedding_proj(x)
        new_state = State()
        if step:
            new_state.pos = pos + 1
        else:
            lengths = spatial_dim.lengths
            new_state.pos = pos + (lengths if lengths is not None else spatial_dim.get_max_size())
        for name, layer in self.layers.items():
            x, new_state[name] = layer(x, spatial_dim=spatial_dim, state=state[name],
                                       encoder=encoder[name] if encoder else None)
            if collected_outputs is not None:
                collected_outputs[name] = x
        if output_only_last_frame and not step:
            from ...ops.mask import last_frame_position_of_dim
            x = _C.gather(x, axis=spatial_dim, indices=last_frame_position_of_dim(spatial_dim))
        return self.logits(self.final_layer_norm(x)), new_state
