"""Conformer: conv subsampling front end, conv block, encoder layer (macaron FF, rel-pos MHSA, conv), encoder."""
from __future__ import annotations

import inspect
from typing import Optional, Sequence, Tuple, Union

import torch.nn.functional as F

from .. import _C
from .._C import Dim, Tensor
from .._C import dropout as _dropout, merge_dims  # the public op (its C++ fast path)
from .._core.args import dim_str, dims_str
from ..ops.conv_args import out_spatial_dim
from .attention import RelPosSelfAttention
from .builders import make_ff, make_norm, make_self_att
from .conv import Conv1d, Conv2d
from .feed_forward import ConformerPositionwiseFeedForward, FeedForward  # noqa: F401  (the former for old imports)
from .frames import narrow_to_longest
from .linear import Linear, check_in_dim
from .container import ModuleList
from .module import Module
from .normalization import BatchNorm, LayerNorm

__all__ = ["ConformerConvSubsample", "ConformerPositionwiseFeedForward", "ConformerConvBlock",
           "ConformerEncoderLayer", "ConformerEncoder"]


def _takes_keyword(cls: type, name: str) -> bool:
    try:
        return name in inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False


class ConformerConvSubsample(Module):
    """Conv2d front end over (time, in_dim): x gets a channel dim of size 1, then per entry of
    `out_dims` a Conv2d (filter_sizes[i], strides[i], padding) + activation; the last channel dim
    and the remaining feature dim are merged into `out_dim` (feature-major, channel-minor, as
    RETURNN's merge_dims of (feature, channel)). Padding is zeroed before each conv (dt.conv), so the
    output time dim comes from dim math with exact per-sequence lengths (padding 'same':
    ceildiv(T, stride) per conv). forward(x, in_spatial_dim=) -> (y, out_spatial_dim)."""

    def __init__(self, in_dim: Dim, out_dims: Sequence[Dim], *,
                 filter_sizes: Sequence[Tuple[int, int]] = ((3, 3), (3, 3)),
                 strides: Sequence[Tuple[int, int]] = ((2, 2), (2, 2)), padding: str = "same",
                 activation=_C.relu, dtype="float32", device=None):
        super().__init__()
        out_dims = tuple(out_dims)
        if not out_dims or len(filter_sizes) != len(out_dims) or len(strides) != len(out_dims):
            raise ValueError(f"ConformerConvSubsample(): out_dims ({dims_str(out_dims)}), filter_sizes "
                             f"{list(filter_sizes)} and strides {list(strides)} must have the same, nonzero length")
        self.in_dim, self.out_dims = in_dim, out_dims
        self.activation = activation
        self.in_channel_dim = Dim(1, name="channel")
        self.conv_layers = ModuleList()
        prev, feat = self.in_channel_dim, in_dim.size
        feat_dim = in_dim
        for c, k, s in zip(out_dims, filter_sizes, strides):
            self.conv_layers.append(Conv2d(prev, c, k, strides=s, padding=padding, dtype=dtype, device=device))
            prev = c
            s_f = s if isinstance(s, int) else s[1]
            k_f = k if isinstance(k, int) else k[1]
            feat = -(-feat // s_f) if padding == "same" else -(-(feat - (k_f - 1)) // s_f)
            # The convs' feature dims (dim math on in_dim, cached there), made once here: made first in a
            # compiled step, they would join in_dim's cache after its first graph, whose guards on that
            # cache would then compile a second one.
            feat_dim = out_spatial_dim(feat_dim, k_f, s_f, padding)
        self.out_feature_size = feat
        self.out_dim = Dim(feat * out_dims[-1].size, name="conv_subsample_out")
        self.padding = padding

    def forward(self, x: Tensor, *, in_spatial_dim: Dim) -> Tuple[Tensor, Dim]:
        if not isinstance(x, Tensor) or self.in_dim not in x.dims:
            check_in_dim(self, x, self.in_dim)
        if in_spatial_dim not in x.dims:
            raise ValueError(f"ConformerConvSubsample(): x lacks the in_spatial_dim {dim_str(in_spatial_dim)} "
                             f"(x dims: {dims_str(x.dims)})")
        lead = tuple(d for d in x.dims if d is not self.in_dim and d is not in_spatial_dim)
        h = Tensor(x.raw.unsqueeze(-1), x.dims + (self.in_channel_dim,))
        time, feat = in_spatial_dim, self.in_dim
        for conv in self.conv_layers:
            h, (time, feat) = conv(h, in_spatial_dims=(time, feat))
            h = self.activation(h)
        h = h.copy_transpose(lead + (time, feat, self.out_dims[-1]))
        h, _ = merge_dims(h, dims=(feat, self.out_dims[-1]), out_dim=self.out_dim)
        return h, time


class ConformerConvBlock(Module):
    """positionwise_conv1 (Linear in_dim -> 2*in_dim) -> GLU (first half * sigmoid(second half)) ->
    depthwise_conv over time (kernel_size, odd; 'same' padding; padding frames zeroed first) ->
    norm (default BatchNorm with masked statistics) -> swish -> positionwise_conv2 (Linear in_dim -> in_dim).
    `norm`: a class (built as norm(in_dim, **norm_opts), e.g. dt.nn.LayerNorm), a module (used as it
    is) or a callable of a Tensor (RETURNN's conv_norm). forward(x, spatial_dim=) -> Tensor with x's dims."""

    def __init__(self, in_dim: Dim, *, kernel_size: int = 31, norm=None, norm_opts: Optional[dict] = None,
                 dtype="float32", device=None):
        super().__init__()
        if not isinstance(kernel_size, int) or kernel_size % 2 != 1:
            raise ValueError(f"ConformerConvBlock(): kernel_size must be an odd int, got {kernel_size!r}")
        self.in_dim = in_dim
        self.glu_dim = Dim(2 * in_dim.size, name=f"{in_dim.name}_glu")
        self.positionwise_conv1 = Linear(in_dim, self.glu_dim, dtype=dtype, device=device)
        self.depthwise_conv = Conv1d(in_dim, in_dim, kernel_size, padding="same", groups=in_dim.size, dtype=dtype,
                                     device=device)
        if norm is None or isinstance(norm, type):
            cls = BatchNorm if norm is None else norm
            opts = {k: v for k, v in dict(dtype=dtype, device=device).items() if _takes_keyword(cls, k)}
            norm = cls(in_dim, **opts, **(norm_opts or {}))
        elif isinstance(norm, dict) or not callable(norm):
            raise TypeError(f"ConformerConvBlock(): norm must be a class, a module or a callable (RETURNN config "
                            f"dicts are not supported), got {type(norm).__name__}")
        self.norm = norm
        self.positionwise_conv2 = Linear(in_dim, in_dim, dtype=dtype, device=device)

    def forward(self, x: Tensor, *, spatial_dim: Dim) -> Tensor:
        if not isinstance(x, Tensor) or spatial_dim not in x.dims:
            check_in_dim(self, x, self.in_dim)
            raise ValueError(f"ConformerConvBlock(): x lacks the spatial_dim {dim_str(spatial_dim)} "
                             f"(x dims: {dims_str(x.dims)})")
        h = self.positionwise_conv1(x)
        glu_axis = h.dims.index(self.glu_dim)
        h = Tensor(F.glu(h.raw, dim=glu_axis), h.dims[:glu_axis] + (self.in_dim,) + h.dims[glu_axis + 1:],
                   feature_dim=self.in_dim)
        dims = h.dims
        h, _ = self.depthwise_conv(h, in_spatial_dim=spatial_dim)  # 'same', stride 1: spatial_dim again
        # dt.conv gives (..., in_dim, time): back to the input's order (a view), so that the norm, the
        # Linear and the residual add run on (..., time, in_dim) memory as in hand-written code (~1% of
        # a small training step, measured).
        if h.dims != dims:
            h = h.copy_transpose(dims)
        h = _C.silu(self.norm(h))
        return self.positionwise_conv2(h)


class ConformerEncoderLayer(Module):
    """Pre-norm Conformer layer (RETURNN's ConformerEncoderLayer):
    x + 1/2 FF1(LN(x)) -> + RelPosMHSA(LN(x)) -> + ConvBlock(LN(x)) -> + 1/2 FF2(LN(x)) -> LN.
    Dropout after each module (training only). forward(x, spatial_dim=) -> Tensor over x's dims.

    RETURNN's options: `ff` (a feed-forward class or module, dt.nn.make_ff; default
    ConformerPositionwiseFeedForward) with `ff_activation`; `conv_norm` (+ `conv_norm_opts`, see
    ConformerConvBlock's norm); `self_att` (a module, or a class built as cls(out_dim, out_dim,
    key_dim_total=out_dim, value_dim_total=out_dim, num_heads=, att_dropout=, **self_att_opts); default
    RelPosSelfAttention with pos_emb); `norm` (the five layer norms: a class, module or callable,
    dt.nn.make_norm). RETURNN config dicts are not taken."""

    def __init__(self, out_dim: Dim, *, ff_dim: Optional[Dim] = None, num_heads: int = 4, conv_kernel_size: int = 31,
                 dropout: float = 0.1, att_dropout: float = 0.1, pos_emb: str = "sinusoidal", ff=None,
                 ff_activation=None, conv_norm=None, conv_norm_opts: Optional[dict] = None, self_att=None,
                 self_att_opts: Optional[dict] = None, norm=None, dtype="float32", device=None):
        super().__init__()
        self.out_dim, self.dropout = out_dim, dropout
        self.ff_dim = ff_dim if ff_dim is not None else Dim(4 * out_dim.size, name="ff")
        kw = dict(dtype=dtype, device=device)
        if ff is None and ff_activation is None:
            self.ffn1 = ConformerPositionwiseFeedForward(out_dim, self.ff_dim, dropout=dropout, **kw)
            self.ffn2 = ConformerPositionwiseFeedForward(out_dim, self.ff_dim, dropout=dropout, **kw)
        else:
            self.ffn1 = make_ff(out_dim=out_dim, ff=ff, ff_dim=self.ff_dim, ff_activation=ff_activation, dropout=dropout)
            self.ffn2 = make_ff(out_dim=out_dim, ff=ff, ff_dim=self.ff_dim, ff_activation=ff_activation, dropout=dropout)
        self.conv_block = ConformerConvBlock(out_dim, kernel_size=conv_kernel_size, norm=conv_norm,
                                             norm_opts=conv_norm_opts, **kw)
        self.self_att = make_self_att(self_att, out_dim, num_heads=num_heads, att_dropout=att_dropout,
                                      default=RelPosSelfAttention, caller="ConformerEncoderLayer()",
                                      opts=self_att_opts, copy_module=False, pos_emb=pos_emb, **kw)
        # x's padding is zeroed once here (one where), so its sublayers see finite padding: the attention
        # skips its own zeroing, and NaN padding cannot reach valid gradients through layer norm's backward.
        # ConformerEncoder (V1, V2), whose input padding is finite already, turns this off.
        self.zero_padding = True
        for name in ("ffn1_layer_norm", "ffn2_layer_norm", "conv_layer_norm", "self_att_layer_norm",
                     "final_layer_norm"):
            setattr(self, name, LayerNorm(out_dim, **kw) if norm is None else make_norm(norm, out_dim))

    def _drop(self, h: Tensor) -> Tensor:
        return _dropout(h, self.dropout, training=self.training) if self.training and self.dropout else h

    def forward(self, x: Tensor, *, spatial_dim: Dim) -> Tensor:
        if type(x) is Tensor and spatial_dim in x.dims:  # (else the submodules' checks name the problem)
            x = narrow_to_longest(x, spatial_dim)
            if self.zero_padding and spatial_dim.lengths is not None:
                x = x.copy_masked(0.0)
        x = 0.5 * self._drop(self.ffn1(self.ffn1_layer_norm(x))) + x
        x = self._drop(self.self_att(self.self_att_layer_norm(x), axis=spatial_dim)) + x
        x = self._drop(self.conv_block(self.conv_layer_norm(x), spatial_dim=spatial_dim)) + x
        x = 0.5 * self._drop(self.ffn2(self.ffn2_layer_norm(x))) + x
        return self.final_layer_norm(x)


class ConformerEncoder(Module):
    """input_layer (ConformerConvSubsample, or None when in_dim is already the model input) ->
    input_projection (Linear, no bias, to out_dim) -> dropout -> num_layers ConformerEncoderLayers.
    forward(x, in_spatial_dim=) -> (encoded over (batch dims, out_spatial_dim, out_dim), out_spatial_dim).

    Parameter names and torch layouts are those of demo/reference_model.py's ConformerEncoder
    (RETURNN's names), except that norm layers call their scale `scale` (dt.nn.LayerNorm and
    BatchNorm) where torch says `weight`: see `torch_state_dict_to_dimtorch`."""

    def __init__(self, in_dim: Dim, out_dim: Dim, *, num_layers: int, ff_dim: Optional[Dim] = None,
                 num_heads: int = 4, conv_kernel_size: int = 31, input_layer: Union[str, Module, None] = "conv",
                 subsample_channels: Sequence[int] = (32, 32), dropout: float = 0.1, att_dropout: float = 0.1,
                 pos_emb: str = "sinusoidal", dtype="float32", device=None):
        super().__init__()
        self.in_dim, self.out_dim, self.dropout = in_dim, out_dim, dropout
        kw = dict(dtype=dtype, device=device)
        if input_layer == "conv":
            channels = tuple(Dim(c, name=f"conv_channel{i}") for i, c in enumerate(subsample_channels))
            input_layer = ConformerConvSubsample(in_dim, channels, filter_sizes=[(3, 3)] * len(channels),
                                                 strides=[(2, 2)] * len(channels), **kw)
        elif isinstance(input_layer, str):
            raise ValueError(f"ConformerEncoder(): input_layer must be 'conv', a module or None, got {input_layer!r}")
        self.input_layer = input_layer
        proj_in = getattr(input_layer, "out_dim", in_dim) if input_layer is not None else in_dim
        self.input_projection = Linear(proj_in, out_dim, with_bias=False, **kw)
        self.layers = ModuleList(
            ConformerEncoderLayer(out_dim, ff_dim=ff_dim, num_heads=num_heads, conv_kernel_size=conv_kernel_size,
                                  dropout=dropout, att_dropout=att_dropout, pos_emb=pos_emb, **kw)
            for _ in range(num_layers))
        # The layers see finite padding: ConformerConvSubsample zeroes it before each conv, any other
        # input goes through one copy_masked in forward, and every layer maps finite padding to finite
        # padding. So the attention need not zero its values' padding in every layer (one where per
        # layer, ~10% of a tiny attention's time).
        for layer in self.layers:
            layer.zero_padding = False

    def forward(self, x: Tensor, *, in_spatial_dim: Dim) -> Tuple[Tensor, Dim]:
        if self.input_layer is not None:
            x, spatial_dim = self.input_layer(x, in_spatial_dim=in_spatial_dim)
        else:
            spatial_dim = in_spatial_dim
        if not isinstance(self.input_layer, ConformerConvSubsample) and spatial_dim.lengths is not None:
            x = x.copy_masked(0.0)
        x = self.input_projection(x)
        if self.training and self.dropout:
            x = _dropout(x, self.dropout, training=True)
        for layer in self.layers:
            x = layer(x, spatial_dim=spatial_dim)
        return x, spatial_dim

    def extra_repr(self) -> str:
        return f"in_dim={dim_str(self.in_dim)}, out_dim={dim_str(self.out_dim)}, num_layers={len(self.layers)}"


def torch_state_dict_to_dimtorch(module: Module, state_dict: dict) -> dict:
    """A state dict in torch naming (norm layers' `weight`) renamed to `module`'s: for every key of
    `module.state_dict()` ending in `.scale` whose `.weight` twin is in `state_dict`, the twin is
    renamed. Other keys are kept as they are (load_state_dict then reports any mismatch)."""
    out = dict(state_dict)
    for key in module.state_dict():
        if key.endswith(".scale"):
            twin = key[: -len("scale")] + "weight"
            if twin in out and key not in out:
                out[key] = out.pop(twin)
    return out


__all__ += ["torch_state_dict_to_dimtorch"]
