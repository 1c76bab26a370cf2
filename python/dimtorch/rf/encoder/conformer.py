"""rf.encoder.conformer (RETURNN frontend's): ConformerPositionwiseFeedForward, ConformerConvBlock,
ConformerConvSubsample, ConformerEncoderLayer, ConformerEncoder, make_ff, with rf's options (config dicts
included: build_from_dict), parameter names and layouts.

Defaults are rf's: conv kernel 32 (even sizes pad "same" as rf: k - 1 frames, (k - 1) // 2 on the left),
conv_norm BatchNorm(eps 1e-3, momentum 0.1, use_mask True: statistics over valid frames), LayerNorm eps
1e-6, RelPosSelfAttention (sinusoidal positions, linear_pos, pos biases), swish feed-forwards, input
dropout 0.1; dropout in training (the run context's train flag). The encoder's input padding is zeroed
once (NaN padding reaches no valid frame or gradient through the convs, norms and attention)."""
from __future__ import annotations

import copy as _copy
import functools
import inspect
from types import FunctionType
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F

from ... import _C
from ..._C import Dim, Tensor
from ..._core.args import dim_str, dims_str
from ...ops.conv_args import make_conv_out_spatial_dims
from ...ops.shape import expand_dim, replace_dim
from .._builders import NotSpecified, dropout as _dropout, finite_padding_inside, make_norm, not_specified, swish
from .._builders import zero_padding as _zero_padding
from ..attention import RelPosSelfAttention
from ..build_from_dict import build_from_dict
from ..container import ModuleList, Sequential
from ..conv import Conv1d, Conv2d
from ..decoder.transformer import FeedForward
from ..linear import Linear
from ..module import Module
from ..normalization import BatchNorm, LayerNorm
from .base import ISeqDownsamplingEncoder

__all__ = ["ConformerPositionwiseFeedForward", "ConformerConvBlock", "ConformerConvSubsample",
           "ConformerEncoderLayer", "ConformerEncoder", "make_ff", "conv_norm_use_mask_default"]


def conv_norm_use_mask_default() -> Optional[bool]:
    """use_mask of the conv block's BatchNorm by default: True (rf's newest behaviour)."""
    return True


class ConformerPositionwiseFeedForward(FeedForward):
    """FeedForward with swish: linear_ff, swish, dropout, linear_out."""

    def __init__(self, out_dim: Dim, *, ff_dim: Union[Dim, int] = NotSpecified, dropout: float = 0.1,
                 activation: Union[Callable[[Tensor], Tensor], Dict[str, Any], Module] = swish, **kwargs):
        if not_specified(activation):
            activation = swish
        super().__init__(out_dim, ff_dim=ff_dim, dropout=dropout, activation=activation, **kwargs)


class ConformerConvBlock(Module):
    """ConformerConvBlock(out_dim, *, kernel_size, norm): positionwise_conv1 (out -> 2 out) -> GLU ->
    depthwise_conv (kernel_size, any size, "same") -> norm (given the spatial_dim when it takes one) ->
    swish -> positionwise_conv2. __call__(inp, *, spatial_dim) -> Tensor."""

    def __init__(self, out_dim: Dim, *, kernel_size: int, norm: Union[BatchNorm, Any]):
        super().__init__()
        self.out_dim = out_dim
        self.positionwise_conv1 = Linear(out_dim, 2 * out_dim)
        self.depthwise_conv = Conv1d(out_dim, out_dim, filter_size=kernel_size, groups=out_dim.size, padding="same")
        self.positionwise_conv2 = Linear(out_dim, out_dim)
        if not callable(norm):
            raise TypeError(f"dimtorch.rf.ConformerConvBlock(): unexpected norm {norm!r}")
        self.norm = norm
        try:
            self._norm_wants_spatial_dim = "spatial_dim" in inspect.signature(norm).parameters
        except (TypeError, ValueError):
            self._norm_wants_spatial_dim = False

    def __call__(self, inp: Tensor, *, spatial_dim: Dim) -> Tensor:
        h = self.positionwise_conv1(inp)
        glu_dim = self.positionwise_conv1.out_dim
        axis = h.dims.index(glu_dim)
        h = Tensor(F.glu(h.raw, dim=axis), h.dims[:axis] + (self.out_dim,) + h.dims[axis + 1:], feature_dim=self.out_dim)
        h, _ = self.depthwise_conv(h, in_spatial_dim=spatial_dim)
        h = self.norm(h, spatial_dim=spatial_dim) if self._norm_wants_spatial_dim else self.norm(h)
        return self.positionwise_conv2(swish(h))


class ConformerConvSubsample(ISeqDownsamplingEncoder):
    """ConformerConvSubsample(in_dim, *, out_dims, filter_sizes, strides=None, pool_sizes=None, activation=relu,
    padding="same"): a channel dim of size 1 is added, then per out_dim a Conv2d over (time, in_dim) with
    activation and, for the first len(pool_sizes) of them, a max pool ("same", strides = the pool size); the
    remaining feature dim and the last channels are merged into out_dim (feature-major).
    __call__(source, *, in_spatial_dim) -> (out, out_spatial_dim)."""

    def __init__(self, in_dim: Dim, *, out_dims: List[Union[Dim, int]], filter_sizes: List[Union[int, Tuple[int, int]]],
                 strides: Optional[List[Union[int, Tuple[int, int]]]] = None,
                 pool_sizes: Optional[List[Tuple[int, int]]] = None, activation: Callable[[Tensor], Tensor] = _C.relu,
                 padding: str = "same"):
        super().__init__()
        caller = "dimtorch.rf.ConformerConvSubsample()"
        if strides is None:
            strides = [1] * len(out_dims)
        if not (len(out_dims) == len(filter_sizes) == len(strides) > 0):
            raise ValueError(f"{caller}: out_dims, filter_sizes and strides must have the same, nonzero length")
        self.pool_sizes, self.activation, self.in_dim = pool_sizes, activation, in_dim
        self.conv_layers = ModuleList()
        self._dummy_in_dim = Dim(1, name="conv_dummy_in")
        prev, second = self._dummy_in_dim, in_dim
        for i, (filter_size, stride, out_dim) in enumerate(zip(filter_sizes, strides, out_dims)):
            if isinstance(out_dim, int):
                out_dim = Dim(out_dim, name=f"conv_out_{i}")
            conv = Conv2d(prev, out_dim, filter_size=filter_size, strides=stride, padding=padding)
            self.conv_layers.append(conv)
            (second,) = make_conv_out_spatial_dims([second], filter_size=conv.filter_size[1].size,
                                                   strides=conv.strides[1] if conv.strides else 1, padding=padding)
            if pool_sizes and i < len(pool_sizes):
                (second,) = make_conv_out_spatial_dims([second], filter_size=pool_sizes[i][1],
                                                       strides=pool_sizes[i][1], padding="same")
            prev = out_dim
        self._final_second_spatial_dim = second
        self.out_dim = Dim(second.size * prev.size, name=f"{second.name}*{prev.name}")
        self.downsample_factor = 1
        for i, conv in enumerate(self.conv_layers):
            self.downsample_factor *= conv.strides[0] if conv.strides is not None else 1
            if pool_sizes and i < len(pool_sizes):
                self.downsample_factor *= pool_sizes[i][0]

    def __call__(self, source: Tensor, *, in_spatial_dim: Dim) -> Tuple[Tensor, Dim]:
        if not isinstance(source, Tensor) or self.in_dim not in source.dims:
            raise ValueError(f"dimtorch.rf.ConformerConvSubsample(): source lacks the in_dim {dim_str(self.in_dim)}")
        spatial = [in_spatial_dim, self.in_dim]
        channels = self._dummy_in_dim
        x = expand_dim(source, channels)
        for i, conv in enumerate(self.conv_layers):
            if i and self.finite_padding:
                # x's padding is finite (each conv zeroed its input's, relu keeps it): zeroed by a multiplication,
                # a third of the where the conv would run (~0.15 ms of the RETURNN demo's step)
                x, spatial = conv._run(_zero_finite_padding(x, spatial), spatial, None, padding_zeroed=True)
                spatial = list(spatial)
            else:
                x, spatial = conv(x, in_spatial_dims=spatial)
            channels = conv.out_dim
            pool = bool(self.pool_sizes) and i < len(self.pool_sizes)
            # relu commutes with a max pool (values and gradients, ties and NaN included): pooled first, relu
            # runs on the smaller result
            relu_after_pool = pool and self.activation is _C.relu
            if not relu_after_pool:
                x = self.activation(x)
            if pool:
                x, spatial = _C.pool(x, mode="max", pool_size=self.pool_sizes[i], in_spatial_dims=spatial,
                                     padding="same")
                spatial = list(spatial)
            if relu_after_pool:
                x = _C.relu(x)
        if spatial[-1] is not self._final_second_spatial_dim:
            x, _ = replace_dim(x, in_dim=spatial[-1], out_dim=self._final_second_spatial_dim)
        lead = tuple(d for d in x.dims if d is not self._final_second_spatial_dim and d is not channels)
        x = x.copy_transpose(lead + (self._final_second_spatial_dim, channels))
        out, _ = _C.merge_dims(x, dims=(self._final_second_spatial_dim, channels), out_dim=self.out_dim)
        return out, spatial[0]

    @property
    def finite_padding(self) -> bool:
        """Whether the output's padding frames are finite whatever the input's padding holds: each conv zeroes
        its input's padding, and relu maps finite to finite (another activation might not: log of a zero)."""
        return self.activation is _C.relu

    def get_out_spatial_dim(self, in_spatial_dim: Dim) -> Dim:
        """The output's spatial dim for an input spatial dim (dim math: the dim __call__ gives)."""
        out = in_spatial_dim
        for i, conv in enumerate(self.conv_layers):
            (out,) = make_conv_out_spatial_dims([out], filter_size=conv.filter_size[0].size,
                                                strides=conv.strides[0] if conv.strides else 1, padding=conv.padding)
            if self.pool_sizes and i < len(self.pool_sizes):
                (out,) = make_conv_out_spatial_dims([out], filter_size=self.pool_sizes[i][0],
                                                    strides=self.pool_sizes[i][0], padding="same")
        return out


def _zero_finite_padding(x: Tensor, spatial: list) -> Tensor:
    """x times 0/1 masks of its dynamic spatial dims: its padding zeroed where it holds finite values (a `where`
    also clears NaN and inf, at ~3x the cost)."""
    for d in spatial:
        if d.lengths is not None:
            mask = d.get_mask(device=x.raw.device)
            x = x * Tensor(mask.raw.to(x.raw.dtype), mask.dims)
    return x


def make_ff(*, out_dim: Dim, ff, ff_dim, ff_activation, dropout: float) -> Module:
    """The feed-forward of a Conformer layer: ff a class (default ConformerPositionwiseFeedForward), a config
    dict, or a module (deep-copied)."""
    if not_specified(ff):
        ff = ConformerPositionwiseFeedForward
    if isinstance(ff, torch.nn.Module):
        return _copy.deepcopy(ff)
    kwargs = {k: v for k, v in dict(out_dim=out_dim, ff_dim=ff_dim, dropout=dropout, activation=ff_activation).items()
              if not not_specified(v)}
    if isinstance(ff, type):
        return ff(**kwargs)
    if isinstance(ff, dict):
        return build_from_dict(ff, **kwargs)
    raise TypeError(f"dimtorch.rf.make_ff(): unexpected ff {ff!r}")


class ConformerEncoderLayer(Module):
    """ConformerEncoderLayer(out_dim=512, *, ff=, ff_dim=, ff_activation=, dropout=0.1, conv_kernel_size=32,
    conv_norm=BatchNorm, conv_norm_opts=None, num_heads=4, self_att=None (RelPosSelfAttention), self_att_opts=,
    att_dropout=0.1, norm=LayerNorm): x + 1/2 FF1(LN(x)) -> + MHSA(LN(x)) -> + conv(LN(x)) -> + 1/2 FF2(LN(x))
    -> LN. __call__(inp, *, spatial_dim) -> Tensor."""

    def __init__(self, out_dim: Dim = Dim(512, name="conformer-enc-default-out-dim"), *, ff=NotSpecified,
                 ff_dim=NotSpecified, ff_activation=NotSpecified, dropout: float = 0.1, conv_kernel_size: int = 32,
                 conv_norm=NotSpecified, conv_norm_opts: Optional[Dict[str, Any]] = None, num_heads: int = 4,
                 self_att=None, self_att_opts: Optional[Dict[str, Any]] = None, att_dropout: float = 0.1,
                 norm=LayerNorm):
        super().__init__()
        self.dropout, self.out_dim = dropout, out_dim
        self.dropout_broadcast = False
        self.ffn1 = make_ff(ff=ff, out_dim=out_dim, ff_dim=ff_dim, dropout=dropout, ff_activation=ff_activation)
        self.ffn1_layer_norm = make_norm(norm, out_dim)
        self.ffn2 = make_ff(ff=ff, out_dim=out_dim, ff_dim=ff_dim, dropout=dropout, ff_activation=ff_activation)
        self.ffn2_layer_norm = make_norm(norm, out_dim)
        if not_specified(conv_norm) or conv_norm is BatchNorm:
            opts = dict(conv_norm_opts or {})
            opts.setdefault("use_mask", conv_norm_use_mask_default())
            conv_norm = BatchNorm(out_dim, **opts)
        elif isinstance(conv_norm, type):
            conv_norm = conv_norm(out_dim, **(conv_norm_opts or {}))
        elif isinstance(conv_norm, dict):
            conv_norm = build_from_dict(conv_norm, out_dim, **(conv_norm_opts or {}))
        if not callable(conv_norm):
            raise TypeError(f"dimtorch.rf.ConformerEncoderLayer(): unexpected conv_norm {conv_norm!r}")
        self.conv_block = ConformerConvBlock(out_dim, kernel_size=conv_kernel_size, norm=conv_norm)
        self.conv_layer_norm = make_norm(norm, out_dim)
        if self_att is None or isinstance(self_att, (dict, type)):
            opts = dict(in_dim=out_dim, proj_dim=out_dim, key_dim_total=out_dim, value_dim_total=out_dim,
                        num_heads=num_heads, att_dropout=att_dropout)
            opts.update(self_att_opts or {})
            if self_att is None:
                self.self_att = RelPosSelfAttention(**opts)
            elif isinstance(self_att, type):
                self.self_att = self_att(**opts)
            else:
                self.self_att = build_from_dict(self_att, **{k: v for k, v in opts.items() if k not in self_att})
        elif callable(self_att):
            self.self_att = self_att
        else:
            raise TypeError(f"dimtorch.rf.ConformerEncoderLayer(): unexpected self_att {self_att!r}")
        self.self_att_layer_norm = make_norm(norm, out_dim)
        self.final_layer_norm = make_norm(norm, out_dim)
        self.zero_padding = True  # (see _builders.zero_padding; the encoders turn it off)

    def __call__(self, inp: Tensor, *, spatial_dim: Dim) -> Tensor:
        inp = _zero_padding(self, inp, spatial_dim)
        p = self.dropout
        x = _half_residual(_dropout(self, self.ffn1(self.ffn1_layer_norm(inp)), p), inp)
        x = _dropout(self, self.self_att(self.self_att_layer_norm(x), axis=spatial_dim), p) + x
        x = _dropout(self, self.conv_block(self.conv_layer_norm(x), spatial_dim=spatial_dim), p) + x
        x = _half_residual(_dropout(self, self.ffn2(self.ffn2_layer_norm(x)), p), x)
        return self.final_layer_norm(x)


def _half_residual(y: Tensor, x: Tensor) -> Tensor:
    """0.5 * y + x as one torch add (alpha=0.5: the same value, 0.5 * y is exact; one op and autograd node less)
    when y and x have the same dims and feature dim, else by dimtorch's ops."""
    if y.dims == x.dims and y.feature_dim is x.feature_dim and y.sparse_dim is None and x.sparse_dim is None:
        return Tensor(torch.add(x.raw, y.raw, alpha=0.5), x.dims, feature_dim=x.feature_dim)
    return 0.5 * y + x


def _layer_from_options(encoder_layer, opts: Dict[str, Any], extra: Optional[Dict[str, Any]], caller: str):
    """rf's encoder_layer option: None (ConformerEncoderLayer), a class or a config dict built with the
    encoder's options (NotSpecified ones left out) and encoder_layer_opts, or a module (used as it is)."""
    if not encoder_layer or isinstance(encoder_layer, (dict, type)):
        opts = {k: v for k, v in opts.items() if not not_specified(v)}
        opts.update(extra or {})
        if not encoder_layer:
            return ConformerEncoderLayer(**opts)
        if isinstance(encoder_layer, type):
            return encoder_layer(**opts)
        return build_from_dict(encoder_layer, **{k: v for k, v in opts.items() if k not in encoder_layer})
    if not callable(encoder_layer):
        raise TypeError(f"{caller}: unexpected encoder_layer {encoder_layer!r}")
    return encoder_layer


class ConformerEncoder(ISeqDownsamplingEncoder):
    """ConformerEncoder(in_dim, out_dim=512, *, num_layers, input_layer, input_embedding_scale=None,
    pos_enc=None, input_dropout=0.1, ff_dim=, ff_activation=, dropout=0.1, conv_kernel_size=, conv_norm=,
    num_heads=4, att_dropout=0.1, encoder_layer=None, encoder_layer_opts=None, sequential=Sequential):
    input_layer (e.g. ConformerConvSubsample; a config dict; None) -> input_projection (Linear, no bias,
    unless its out dim is out_dim) -> * input_embedding_scale (+ pos_enc) -> input dropout -> num_layers
    copies of encoder_layer (each its own random initial values). __call__(source, *, in_spatial_dim,
    collected_outputs=None) -> (out, out_spatial_dim)."""

    def __init__(self, in_dim: Dim, out_dim: Union[Dim, int] = Dim(512, name="conformer-enc-default-out-dim"), *,
                 num_layers: int, input_layer=None, input_embedding_scale: Optional[float] = None,
                 pos_enc: Union[None, Callable, Dict[str, Any], Module] = None, input_dropout: float = 0.1,
                 ff_dim=NotSpecified, ff_activation=NotSpecified, dropout: float = 0.1,
                 conv_kernel_size=NotSpecified, conv_norm=NotSpecified, num_heads: int = 4, att_dropout: float = 0.1,
                 encoder_layer=None, encoder_layer_opts: Optional[Dict[str, Any]] = None, sequential=Sequential):
        super().__init__()
        caller = "dimtorch.rf.ConformerEncoder()"
        if isinstance(out_dim, int):
            out_dim = Dim(out_dim, name="conformer-enc-out-dim")
        self.in_dim, self.out_dim, self.dropout = in_dim, out_dim, dropout
        self.dropout_broadcast = False
        if isinstance(input_layer, dict):
            input_layer = build_from_dict(input_layer, in_dim)
        elif input_layer is not None and not callable(input_layer):
            raise TypeError(f"{caller}: unexpected input_layer {input_layer!r}")
        self.input_layer = input_layer
        proj_in = input_layer.out_dim if input_layer is not None else in_dim
        self.input_projection = Linear(proj_in, out_dim, with_bias=False) if proj_in is not out_dim else None
        if input_embedding_scale is None:
            input_embedding_scale = out_dim.size ** 0.5 if pos_enc is not None else 1.0
        self.input_embedding_scale = input_embedding_scale
        if isinstance(pos_enc, dict):
            pos_enc = build_from_dict(pos_enc, feat_dim=out_dim)
        elif isinstance(pos_enc, (FunctionType, functools.partial)):
            pos_enc = functools.partial(pos_enc, feat_dim=out_dim)
        elif pos_enc is not None and not isinstance(pos_enc, torch.nn.Module):
            raise TypeError(f"{caller}: unexpected pos_enc {pos_enc!r}")
        self.pos_enc = pos_enc
        self.input_dropout = input_dropout
        layer = _layer_from_options(encoder_layer, dict(out_dim=out_dim, ff_dim=ff_dim, ff_activation=ff_activation,
                                                        dropout=dropout, conv_kernel_size=conv_kernel_size,
                                                        conv_norm=conv_norm, num_heads=num_heads,
                                                        att_dropout=att_dropout), encoder_layer_opts, caller)
        self.layers = sequential(_copy.deepcopy(layer) for _ in range(num_layers))
        finite_padding_inside(self.layers)

    def __call__(self, source: Tensor, *, in_spatial_dim: Dim,
                 collected_outputs: Optional[Dict[str, Tensor]] = None) -> Tuple[Tensor, Dim]:
        finite = False
        if self.input_layer is not None and self.input_layer.in_dim in source.dims:
            x, out_spatial_dim = self.input_layer(source, in_spatial_dim=in_spatial_dim)
            finite = getattr(self.input_layer, "finite_padding", False) is True
        else:
            x, out_spatial_dim = source, in_spatial_dim
        if out_spatial_dim.lengths is not None and not finite:
            x = x.copy_masked(0.0)  # finite padding for the layers (NaN there would reach valid gradients)
        if self.input_projection is not None and self.input_projection.in_dim in x.dims:
            x = self.input_projection(x)
        if self.out_dim not in x.dims:
            raise ValueError(f"dimtorch.rf.ConformerEncoder(): the input (after input_layer) lacks out_dim "
                             f"{dim_str(self.out_dim)} (dims: {dims_str(x.dims)})")
        if self.input_embedding_scale != 1.0:
            x = x * self.input_embedding_scale
        if self.pos_enc is not None:
            x = x + self.pos_enc(spatial_dim=out_spatial_dim)
        x = _dropout(self, x, self.input_dropout)
        x = self.layers(x, spatial_dim=out_spatial_dim, collected_outputs=collected_outputs)
        return x, out_spatial_dim
