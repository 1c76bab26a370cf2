"""Layer benchmark: dt.nn Linear, LayerNorm, SelfAttention, ConformerEncoderLayer, FeedForwardGated,
TransformerEncoderLayer, RelPosCausalSelfAttention, ZoneoutLSTM, EBranchformerLayer vs hand-written PyTorch
and RETURNN.

Each row times one layer call (`fwd`) or a layer call, a loss and the gradients of the input and all weights
(`fwd+bwd`, torch.autograd.grad), three ways on the same data and, where the layouts allow, the same weights:
hand-written PyTorch (torch.nn.Linear / LayerNorm, a SelfAttention module on F.scaled_dot_product_attention,
demo/reference_model.py's ConformerEncoderLayer), dimtorch's dt.nn layers and RETURNN frontend's rf layers
(PyTorch backend, native helpers on). Outputs and input gradients are compared on valid frames first.
Ratios are medians of interleaved per-round ratios against PyTorch (bench/opsbench/timing.py), one thread.
Run: `python bench/nn_layers_bench.py [--quick] [--shapes tiny,small] [--filter REGEX] [--no-returnn]`.
Writes nn_layers_bench.md (also on stdout) and nn_layers_bench.json to --out (default bench/out/).
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import pathlib
import platform
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

import torch
import torch.nn.functional as F

import dimtorch as dt

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from demo.reference_model import ConformerEncoderLayer as RefLayer, ModelConfig, sequence_mask  # noqa: E402
from demo.reference_model import RelPosSelfAttention as RefRelPos, rel_shift, relative_positional_encoding  # noqa: E402
from opsbench import timing  # noqa: E402
from opsbench.frameworks import setup_returnn  # noqa: E402

PAD = 30.0  # padding frames of the input: large enough that a leak into valid frames fails the check
EPS = 1e-5


@dataclass(frozen=True)
class Shapes:
    batch: int
    time: int  # the longest sequence; lengths time, time - 3, time - 6, ... (at least 1)
    model: int
    heads: int
    ff: int
    kernel: int

    @property
    def lengths(self) -> list:
        return [max(1, self.time - 3 * i) for i in range(self.batch)]


SHAPES = {"tiny": Shapes(batch=3, time=20, model=16, heads=4, ff=32, kernel=5),
          "small": Shapes(batch=8, time=50, model=96, heads=4, ff=384, kernel=15)}


@dataclass
class Impl:
    """One side of a row: `forward()` (timed for fwd) -> the framework's output, `raw_of` its raw (own layout),
    `to_torch_layout` / `from_torch_layout` between that and (batch, time, model), `leaves` (input first)."""
    forward: Callable
    leaves: list
    raw_of: Callable = lambda y: y  # noqa: E731
    to_torch_layout: Callable = lambda raw: raw  # noqa: E731
    from_torch_layout: Callable = lambda raw: raw  # noqa: E731


@dataclass
class ImplResult:
    status: str  # ok, differs, error, n/a
    us: Optional[float] = None
    quartiles_us: Optional[list] = None
    detail: str = ""


@dataclass
class RowResult:
    row: str
    weights: str
    impls: dict
    ratio: Optional[float] = None
    ratio_quartiles: Optional[list] = None
    returnn_ratio: Optional[float] = None
    returnn_ratio_quartiles: Optional[list] = None


@dataclass
class Data:
    """The shared input: raw x (padding = PAD), lengths, masks, and each framework's dims over them."""
    shapes: Shapes
    x: torch.Tensor
    lengths: torch.Tensor
    mask: torch.Tensor  # (B, T) bool
    dt_dims: dict = field(default_factory=dict)
    rf_dims: dict = field(default_factory=dict)


def make_data(shapes: Shapes, rf) -> Data:
    torch.manual_seed(0)
    lengths = torch.tensor(shapes.lengths)
    mask = sequence_mask(lengths, shapes.time, "cpu")
    x = torch.randn(shapes.batch, shapes.time, shapes.model).masked_fill(~mask[:, :, None], PAD)
    data = Data(shapes, x, lengths, mask)
    batch = dt.Dim(None, name="batch")
    data.dt_dims = {"batch": batch, "time": dt.Dim(dt.Tensor(lengths, (batch,)), name="time"),
                    "model": dt.Dim(shapes.model, name="model")}
    if rf is not None:
        from returnn.tensor import Dim
        rbatch = Dim(shapes.batch, name="batch")
        data.rf_dims = {"batch": rbatch, "time": Dim(rf.convert_to_tensor(lengths, dims=[rbatch]), name="time"),
                        "model": Dim(shapes.model, name="model")}
    return data


def _leaf(x: torch.Tensor) -> torch.Tensor:
    return x.detach().clone().requires_grad_(True)


def _dt_impl(data: Data, module, make_forward: Callable) -> Impl:
    """make_forward(x) -> the zero-argument call of the layer on the dimtorch input x."""
    d = data.dt_dims
    x = _leaf(data.x)
    forward = make_forward(dt.Tensor(x, (d["batch"], d["time"], d["model"])))
    y = forward()
    assert y.dims[:2] == (d["batch"], d["time"]) and len(y.dims) == 3, y.dims  # raw in the torch layout
    return Impl(forward, [x] + list(module.parameters()), raw_of=lambda y: y.raw)


def _rf_impl(data: Data, rf, module, make_forward: Callable) -> Impl:
    from returnn.torch.frontend.bridge import rf_module_to_pt_module
    d = data.rf_dims
    x = _leaf(data.x)
    forward = make_forward(rf.convert_to_tensor(x, dims=[d["batch"], d["time"], d["model"]], feature_dim=d["model"]))
    dims = forward().dims  # RETURNN may return any order: permute to (batch, time, out) by name
    order = [next(i for i, dim in enumerate(dims) if dim.name == name) for name in ("batch", "time")]
    perm = order + [i for i in range(3) if i not in order]
    inverse = [perm.index(i) for i in range(3)]
    return Impl(forward, [x] + list(rf_module_to_pt_module(module).parameters()), raw_of=lambda y: y.raw_tensor,
                to_torch_layout=lambda raw: raw.permute(perm), from_torch_layout=lambda raw: raw.permute(inverse))


def _copy_rf_weights(rf_module, source: dict) -> str:
    """Copies dimtorch/torch-layout weights (`source`: state-dict name -> raw) into a RETURNN module: its linear
    weights are (in, out), its conv filter and batch norm scale are called `filter` and `gamma`/`beta`."""
    from returnn.torch.frontend.bridge import rf_module_to_pt_module
    pt = rf_module_to_pt_module(rf_module)
    with torch.no_grad():
        for name, p in list(pt.named_parameters()) + list(pt.named_buffers()):
            key = re.sub(r"\.filter$", ".weight", name)
            key = re.sub(r"\.gamma$", ".scale", re.sub(r"\.beta$", ".bias", key))
            key = re.sub(r"\.running_variance$", ".running_var", key)
            value = source[key]
            if name.endswith(".weight") or name == "weight":
                value = value.t()
            p.copy_(value)
    return "same"


# ------------------------------------------------------------------------------------------------ rows

def build_linear(data: Data, rf) -> tuple:
    s = data.shapes
    torch.manual_seed(1)
    ref = torch.nn.Linear(s.model, s.model)
    ours = dt.nn.Linear(data.dt_dims["model"], dt.Dim(s.model, name="out"))
    with torch.no_grad():
        ours.weight.raw.copy_(ref.weight)
        ours.bias.raw.copy_(ref.bias)
    x = _leaf(data.x)
    impls = {"torch": Impl(lambda: ref(x), [x] + list(ref.parameters())),
             "dimtorch": _dt_impl(data, ours, lambda x: lambda: ours(x))}
    if rf is not None:
        theirs = rf.Linear(data.rf_dims["model"], _rf_dim(s.model, "out"))
        _copy_rf_weights(theirs, {"weight": ref.weight, "bias": ref.bias})
        impls["returnn"] = _rf_impl(data, rf, theirs, lambda x: lambda: theirs(x))
    return impls, "same"


def build_layer_norm(data: Data, rf) -> tuple:
    s = data.shapes
    torch.manual_seed(1)
    ref = torch.nn.LayerNorm(s.model, eps=EPS)
    with torch.no_grad():
        ref.weight.normal_()
        ref.bias.normal_()
    ours = dt.nn.LayerNorm(data.dt_dims["model"], eps=EPS)
    with torch.no_grad():
        ours.scale.raw.copy_(ref.weight)
        ours.bias.raw.copy_(ref.bias)
    x = _leaf(data.x)
    impls = {"torch": Impl(lambda: ref(x), [x] + list(ref.parameters())),
             "dimtorch": _dt_impl(data, ours, lambda x: lambda: ours(x))}
    if rf is not None:
        theirs = rf.LayerNorm(data.rf_dims["model"], eps=EPS)
        _copy_rf_weights(theirs, {"scale": ref.weight, "bias": ref.bias})
        impls["returnn"] = _rf_impl(data, rf, theirs, lambda x: lambda: theirs(x))
    return impls, "same"


class TorchSelfAttention(torch.nn.Module):
    """Multi-head self-attention as a PyTorch user writes it: one qkv projection (per head q, k, v), SDPA with
    the key padding mask (B, 1, 1, T) made per call from the lengths, output projection."""

    def __init__(self, model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(model, 3 * model)
        self.proj = torch.nn.Linear(model, model)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        mask = sequence_mask(lengths, t, x.device)
        qkv = self.qkv(x).view(b, t, self.heads, 3 * d // self.heads).transpose(1, 2)
        q, k, v = qkv.split(d // self.heads, dim=-1)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
        return self.proj(o.transpose(1, 2).reshape(b, t, d))


def build_self_attention(data: Data, rf) -> tuple:
    s = data.shapes
    torch.manual_seed(1)
    ref = TorchSelfAttention(s.model, s.heads)
    model = data.dt_dims["model"]
    ours = dt.nn.SelfAttention(model, model, key_dim_total=dt.Dim(s.model, name="key"),
                               value_dim_total=dt.Dim(s.model, name="value"), num_heads=s.heads, att_dropout=0.0)
    state = {k: v for k, v in ref.state_dict().items()}
    ours.load_state_dict(state)
    x, lengths = _leaf(data.x), data.lengths
    time_dim = data.dt_dims["time"]
    impls = {"torch": Impl(lambda: ref(x, lengths), [x] + list(ref.parameters())),
             "dimtorch": _dt_impl(data, ours, lambda x: lambda: ours(x, axis=time_dim))}
    if rf is not None:
        rmodel = data.rf_dims["model"]
        theirs = rf.SelfAttention(rmodel, rmodel, key_dim_total=_rf_dim(s.model, "key"),
                                  value_dim_total=_rf_dim(s.model, "value"), num_heads=s.heads, att_dropout=0.0)
        _copy_rf_weights(theirs, state)
        rtime = data.rf_dims["time"]
        impls["returnn"] = _rf_impl(data, rf, theirs, lambda x: lambda: theirs(x, axis=rtime))
    return impls, "same"


def build_conformer_layer(data: Data, rf) -> tuple:
    s = data.shapes
    cfg = ModelConfig(model_dim=s.model, num_heads=s.heads, ff_dim=s.ff, conv_kernel_size=s.kernel, dropout=0.0,
                      att_dropout=0.0)
    torch.manual_seed(1)
    ref = RefLayer(cfg)
    ours = dt.nn.ConformerEncoderLayer(data.dt_dims["model"], ff_dim=dt.Dim(s.ff, name="ff"), num_heads=s.heads,
                                       conv_kernel_size=s.kernel, dropout=0.0, att_dropout=0.0)
    ours.load_state_dict(dt.nn.torch_state_dict_to_dimtorch(ours, ref.state_dict()))
    x, lengths = _leaf(data.x), data.lengths
    time_dim = data.dt_dims["time"]

    def torch_forward():  # the key mask made per call, as the reference's training step does
        return ref(x, sequence_mask(lengths, s.time, x.device))
    impls = {"torch": Impl(torch_forward, [x] + list(ref.parameters())),
             "dimtorch": _dt_impl(data, ours, lambda x: lambda: ours(x, spatial_dim=time_dim))}
    weights = "same"
    if rf is not None:
        from returnn.frontend.encoder.conformer import ConformerEncoderLayer
        # Batch norm as the reference's: masked statistics, eps 1e-5 (RETURNN's default eps is 1e-3).
        theirs = ConformerEncoderLayer(data.rf_dims["model"], ff_dim=_rf_dim(s.ff, "ff"), num_heads=s.heads,
                                       conv_kernel_size=s.kernel, dropout=0.0, att_dropout=0.0,
                                       conv_norm_opts={"use_mask": True, "eps": EPS})
        weights = _copy_rf_weights(theirs, {k: v.detach() for k, v in ours.state_dict().items()})
        rtime = data.rf_dims["time"]
        impls["returnn"] = _rf_impl(data, rf, theirs, lambda x: lambda: theirs(x, spatial_dim=rtime))
    return impls, weights


def _rf_dim(size: int, name: str):
    from returnn.tensor import Dim
    return Dim(size, name=name)


def _copy_from_dt(rf_module, ours) -> None:
    """Copies our parameters into the same-named ones of a RETURNN module (rf's Linear weights are (in, out))."""
    import returnn.frontend as rf_
    linear = {f"{name}.weight" if name else "weight" for name, m in rf_module.named_modules()
              if isinstance(m, rf_.Linear)}
    mine = dict(ours.named_parameters())
    with torch.no_grad():
        for name, p in rf_module.named_parameters():
            p.raw_tensor.copy_(mine[name].t() if name in linear else mine[name])


class TorchGatedFF(torch.nn.Module):
    """SwiGLU feed-forward as a PyTorch user writes it: one projection to both halves, silu(a) * b, projection back."""

    def __init__(self, model: int, ff: int):
        super().__init__()
        self.linear_ff = torch.nn.Linear(model, 2 * ff, bias=False)
        self.linear_out = torch.nn.Linear(ff, model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.linear_ff(x).chunk(2, dim=-1)
        return self.linear_out(F.silu(a) * b)


def build_feed_forward_gated(data: Data, rf) -> tuple:
    s = data.shapes
    torch.manual_seed(1)
    ref = TorchGatedFF(s.model, s.ff)
    ours = dt.nn.FeedForwardGated(data.dt_dims["model"], ff_dim=s.ff, dropout=0.0)
    ours.load_state_dict(ref.state_dict())
    x = _leaf(data.x)
    impls = {"torch": Impl(lambda: ref(x), [x] + list(ref.parameters())),
             "dimtorch": _dt_impl(data, ours, lambda x: lambda: ours(x))}
    if rf is not None:
        from returnn.frontend.decoder.transformer import FeedForwardGated
        theirs = FeedForwardGated(data.rf_dims["model"], ff_dim=s.ff, dropout=0.0)
        _copy_from_dt(theirs, ours)
        impls["returnn"] = _rf_impl(data, rf, theirs, lambda x: lambda: theirs(x))
    return impls, "same"


class TorchTransformerEncoderLayer(torch.nn.Module):
    """Pre-norm Transformer encoder layer: x + SelfAttention(LN(x)), + FF(LN(x)) (relu), names as dt.nn's."""

    def __init__(self, model: int, heads: int, ff: int):
        super().__init__()
        self.self_att_layer_norm = torch.nn.LayerNorm(model, eps=EPS)
        self.self_att = TorchSelfAttention(model, heads)
        self.ff_layer_norm = torch.nn.LayerNorm(model, eps=EPS)
        self.ff = torch.nn.ModuleDict({"linear_ff": torch.nn.Linear(model, ff), "linear_out": torch.nn.Linear(ff, model)})

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        x = x + self.self_att(self.self_att_layer_norm(x), lengths)
        return x + self.ff["linear_out"](F.relu(self.ff["linear_ff"](self.ff_layer_norm(x))))


def build_transformer_encoder_layer(data: Data, rf) -> tuple:
    s = data.shapes
    torch.manual_seed(1)
    ref = TorchTransformerEncoderLayer(s.model, s.heads, 4 * s.model)
    ours = dt.nn.TransformerEncoderLayer(data.dt_dims["model"], num_heads=s.heads, dropout=0.0, att_dropout=0.0)
    ours.load_state_dict(dt.nn.torch_state_dict_to_dimtorch(ours, ref.state_dict()))
    x, lengths, time_dim = _leaf(data.x), data.lengths, data.dt_dims["time"]
    impls = {"torch": Impl(lambda: ref(x, lengths), [x] + list(ref.parameters())),
             "dimtorch": _dt_impl(data, ours, lambda x: lambda: ours(x, spatial_dim=time_dim))}
    if rf is not None:
        from returnn.frontend.encoder.transformer import TransformerEncoderLayer
        theirs = TransformerEncoderLayer(data.rf_dims["model"], num_heads=s.heads, dropout=0.0, att_dropout=0.0)
        _copy_from_dt(theirs, ours)
        rtime = data.rf_dims["time"]
        impls["returnn"] = _rf_impl(data, rf, theirs, lambda x: lambda: theirs(x, spatial_dim=rtime))
    return impls, "same"


class TorchRelPosCausalSelfAttention(RefRelPos):
    """demo/reference_model.py's Transformer-XL attention with a causal mask instead of the key mask (valid
    queries never see padding)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h, dh = self.num_heads, self.head_dim
        q, k, v = self.qkv(x).view(b, t, h, 3 * dh).split(dh, dim=-1)
        pos = self.linear_pos(relative_positional_encoding(t, d, x.device, x.dtype)).view(2 * t - 1, h, dh)
        ac = torch.matmul((q + self.pos_bias_u).transpose(1, 2), k.permute(0, 2, 3, 1))
        bd = rel_shift(torch.matmul((q + self.pos_bias_v).transpose(1, 2), pos.permute(1, 2, 0)))
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        scores = ((ac + bd) * (dh ** -0.5)).masked_fill(future, torch.finfo(x.dtype).min)
        out = torch.matmul(torch.softmax(scores, dim=-1), v.transpose(1, 2))
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


def build_rel_pos_causal_self_attention(data: Data, rf) -> tuple:
    s = data.shapes
    torch.manual_seed(1)
    ref = TorchRelPosCausalSelfAttention(s.model, s.heads, 0.0)
    model = data.dt_dims["model"]
    ours = dt.nn.RelPosCausalSelfAttention(model, model, key_dim_total=model, value_dim_total=model,
                                           num_heads=s.heads, att_dropout=0.0)
    ours.load_state_dict(ref.state_dict())
    x, time_dim = _leaf(data.x), data.dt_dims["time"]
    impls = {"torch": Impl(lambda: ref(x), [x] + list(ref.parameters())),
             "dimtorch": _dt_impl(data, ours, lambda x: lambda: ours(x, axis=time_dim)[0])}
    if rf is not None:
        rmodel, rtime = data.rf_dims["model"], data.rf_dims["time"]
        theirs = rf.RelPosCausalSelfAttention(rmodel, rmodel, key_dim_total=rmodel, value_dim_total=rmodel,
                                              num_heads=s.heads, att_dropout=0.0)
        _copy_from_dt(theirs, ours)
        impls["returnn"] = _rf_impl(data, rf, theirs, lambda x: lambda: theirs(x, axis=rtime)[0])
    return impls, "same"


def _depthwise_same(conv: torch.nn.Conv1d, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """conv over T of x (B, T, C) with its padding frames zeroed first ('same': odd kernels)."""
    return conv(x.masked_fill(~keep[..., None], 0.0).transpose(1, 2)).transpose(1, 2)


class TorchEBranchformerLayer(torch.nn.Module):
    """The E-Branchformer layer as a PyTorch user writes it (names as dt.nn's): macaron feed-forwards around
    rel-pos attention (demo/reference_model.py's) beside a cgMLP (gelu, split, norm + depthwise conv of the first
    half, times the second), merged by concat + depthwise conv + projection; padding zeroed first."""

    def __init__(self, model: int, heads: int, ff: int, cgmlp_ff: int, kernel: int, merge_kernel: int = 3):
        super().__init__()
        from demo.reference_model import ConformerPositionwiseFeedForward
        nn = torch.nn
        for name in ("ffn1", "ffn2"):
            setattr(self, name, ConformerPositionwiseFeedForward(model, ff, 0.0))
        for name in ("ffn1_layer_norm", "ffn2_layer_norm", "self_att_layer_norm", "cgmlp_layer_norm",
                     "final_layer_norm"):
            setattr(self, name, nn.LayerNorm(model, eps=EPS))
        self.self_att = RefRelPos(model, heads, 0.0)
        self.cgmlp = nn.ModuleDict({"linear_ff": nn.Linear(model, 2 * cgmlp_ff),
                                    "norm": nn.LayerNorm(cgmlp_ff, eps=EPS),
                                    "conv": nn.Conv1d(cgmlp_ff, cgmlp_ff, kernel, padding=kernel // 2, groups=cgmlp_ff),
                                    "linear_out": nn.Linear(cgmlp_ff, model)})
        self.merge = nn.ModuleDict({
            "depthwise_conv_fusion": nn.Conv1d(2 * model, 2 * model, merge_kernel, padding=merge_kernel // 2,
                                               groups=2 * model),
            "merge_proj": nn.Linear(2 * model, model)})

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        keep = sequence_mask(lengths, x.shape[1], x.device)
        x = x.masked_fill(~keep[..., None], 0.0)
        x = x + 0.5 * self.ffn1(self.ffn1_layer_norm(x))
        att = self.self_att(self.self_att_layer_norm(x), keep)
        cg = self.cgmlp
        gate, rest = F.gelu(cg["linear_ff"](self.cgmlp_layer_norm(x))).chunk(2, dim=-1)
        local = cg["linear_out"](_depthwise_same(cg["conv"], cg["norm"](gate), keep) * rest)
        both = torch.cat([att, local], dim=-1)
        x = x + self.merge["merge_proj"](both + _depthwise_same(self.merge["depthwise_conv_fusion"], both, keep))
        x = x + 0.5 * self.ffn2(self.ffn2_layer_norm(x))
        return self.final_layer_norm(x)


def build_e_branchformer_layer(data: Data, rf) -> tuple:
    s = data.shapes
    cgmlp_ff = 3 * s.model  # rf's default
    torch.manual_seed(1)
    ref = TorchEBranchformerLayer(s.model, s.heads, s.ff, cgmlp_ff, s.kernel)
    opts = dict(num_heads=s.heads, cgmlp_ff_dim=cgmlp_ff, cgmlp_conv_kernel=s.kernel, dropout=0.0, att_dropout=0.0)
    ours = dt.nn.EBranchformerLayer(data.dt_dims["model"], ff_dim=s.ff, **opts)
    ours.load_state_dict(dt.nn.torch_state_dict_to_dimtorch(ours, ref.state_dict()))
    x, lengths, time_dim = _leaf(data.x), data.lengths, data.dt_dims["time"]
    impls = {"torch": Impl(lambda: ref(x, lengths), [x] + list(ref.parameters())),
             "dimtorch": _dt_impl(data, ours, lambda x: lambda: ours(x, spatial_dim=time_dim))}
    weights = "same"
    if rf is not None:
        from returnn.frontend.encoder.e_branchformer import EBranchformerLayer
        theirs = EBranchformerLayer(data.rf_dims["model"], ff_dim=_rf_dim(s.ff, "ff"), **opts)
        for module in theirs.modules():  # layer norm eps as ours (RETURNN's default is 1e-6)
            if isinstance(module, rf.LayerNorm):
                module.eps = EPS
        weights = _copy_rf_weights(theirs, {k: v.detach() for k, v in ours.state_dict().items()})
        rtime = data.rf_dims["time"]
        impls["returnn"] = _rf_impl(data, rf, theirs, lambda x: lambda: theirs(x, spatial_dim=rtime))
    return impls, weights


ZONEOUT = dict(zoneout_factor_cell=0.15, zoneout_factor_output=0.05)


class TorchZoneoutLSTM(torch.nn.Module):
    """A zoneout LSTM as a PyTorch user writes it (eval mode: the mix (1 - f) * new + f * prev): the input
    projection of all frames at once, then a loop over frames; past each length the state stays, y is 0."""

    def __init__(self, model: int, out: int):
        super().__init__()
        self.ff_weight = torch.nn.Parameter(torch.randn(4 * out, model) * model ** -0.5)
        self.rec_weight = torch.nn.Parameter(torch.randn(4 * out, out) * out ** -0.5)
        self.bias = torch.nn.Parameter(torch.randn(4 * out) * 0.1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        fc, fo = ZONEOUT["zoneout_factor_cell"], ZONEOUT["zoneout_factor_output"]
        z = F.linear(x, self.ff_weight, self.bias)
        h = c = x.new_zeros(x.shape[0], self.rec_weight.shape[1])
        ys, rec_t = [], self.rec_weight.t()
        for t in range(x.shape[1]):
            i, f, g, o = torch.addmm(z[:, t], h, rec_t).chunk(4, dim=-1)
            new_c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            new_h = torch.sigmoid(o) * torch.tanh(new_c)
            keep = mask[:, t, None]
            c = torch.where(keep, (1 - fc) * new_c + fc * c, c)
            h_new = (1 - fo) * new_h + fo * h
            ys.append(torch.where(keep, h_new, 0.0))
            h = torch.where(keep, h_new, h)
        return torch.stack(ys, dim=1)


def build_zoneout_lstm(data: Data, rf) -> tuple:
    """Eval mode on all sides (zoneout's deterministic mix); RETURNN's run context is switched to eval per call."""
    s = data.shapes
    torch.manual_seed(1)
    ref = TorchZoneoutLSTM(s.model, s.model)
    ours = dt.nn.ZoneoutLSTM(data.dt_dims["model"], dt.Dim(s.model, name="out"), **ZONEOUT).eval()
    ours.load_state_dict(ref.state_dict())
    x, mask, time_dim = _leaf(data.x), data.mask, data.dt_dims["time"]
    impls = {"torch": Impl(lambda: ref(x, mask), [x] + list(ref.parameters())),
             "dimtorch": _dt_impl(data, ours, lambda x: lambda: ours(x, spatial_dim=time_dim)[0])}
    if rf is not None:
        theirs = rf.ZoneoutLSTM(data.rf_dims["model"], _rf_dim(s.model, "out"), **ZONEOUT)
        _copy_from_dt(theirs, ours)
        rtime, rbatch, run_ctx = data.rf_dims["time"], data.rf_dims["batch"], rf.get_run_ctx()

        def make_forward(x):
            def forward():
                with run_ctx.train_flag_ctx(False):
                    return theirs(x, state=theirs.default_initial_state(batch_dims=[rbatch]), spatial_dim=rtime)[0]
            return forward
        impls["returnn"] = _rf_impl(data, rf, theirs, make_forward)
    return impls, "same"


ROWS = {"Linear": build_linear, "LayerNorm": build_layer_norm, "SelfAttention": build_self_attention,
        "ConformerEncoderLayer": build_conformer_layer, "FeedForwardGated": build_feed_forward_gated,
        "TransformerEncoderLayer": build_transformer_encoder_layer,
        "RelPosCausalSelfAttention": build_rel_pos_causal_self_attention, "ZoneoutLSTM": build_zoneout_lstm,
        "EBranchformerLayer": build_e_branchformer_layer}


# ---------------------------------------------------------------------------------------------- checking

def _fwd_bwd(impl: Impl, grad_out: torch.Tensor) -> Callable:
    """The timed forward+backward: loss = sum(y * grad_out) (grad_out in the implementation's own output
    layout, zero on padding), gradients of the input and all weights."""
    leaves, forward, raw_of = impl.leaves, impl.forward, impl.raw_of

    def fwd_bwd():
        return torch.autograd.grad((raw_of(forward()) * grad_out).sum(), leaves)
    return fwd_bwd


def check(impls: dict, data: Data, tolerance: float) -> tuple:
    """Agreement with PyTorch on valid frames (output, input gradient): (problems by impl, grad_out by impl)."""
    mask = data.mask
    torch.manual_seed(2)
    g = torch.randn(data.x.shape).masked_fill(~mask[:, :, None], 0.0)
    ref = impls["torch"]
    y_ref = ref.forward().detach()
    gx_ref = torch.autograd.grad((ref.forward() * g).sum(), ref.leaves[0])[0]
    scale = float(y_ref[mask].abs().max())
    gscale = float(gx_ref[mask].abs().max())
    problems, grads = {}, {"torch": g}
    for name, impl in impls.items():
        if name == "torch":
            continue
        try:
            y = impl.to_torch_layout(impl.raw_of(impl.forward()).detach())
            g_own = impl.from_torch_layout(g).contiguous()
            gx = torch.autograd.grad((impl.raw_of(impl.forward()) * g_own).sum(), impl.leaves[0])[0]
        except Exception as exc:  # noqa: BLE001 - reported per implementation
            problems[name] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            continue
        grads[name] = g_own
        dy = float((y[mask] - y_ref[mask]).abs().max())
        dg = float((gx[mask] - gx_ref[mask]).abs().max())
        if not (dy <= tolerance * max(scale, 1.0)) or not (dg <= tolerance * max(gscale, 1.0)):
            problems[name] = f"differs: max |dy| {dy:.2e} (|y| up to {scale:.2e}), max |dx grad| {dg:.2e}"
    return problems, grads


# ----------------------------------------------------------------------------------------------- timing

def time_row(label: str, impls: dict, fns: dict, problems: dict, plan, overhead: float, weights: str) -> RowResult:
    names = [n for n in ("torch", "dimtorch", "returnn") if n in fns and not problems.get(n, "").startswith("error")]
    samples = timing.measure({n: fns[n] for n in names}, plan, overhead)
    results = {}
    for name in ("torch", "dimtorch", "returnn"):
        if name not in impls:
            results[name] = ImplResult("n/a", detail="RETURNN not available")
        elif name not in samples:
            results[name] = ImplResult("error", detail=problems[name])
        else:
            q = [v * 1e6 for v in timing.quartiles(samples[name])]
            status = "differs" if name in problems else "ok"
            results[name] = ImplResult(status, q[1], q, problems.get(name, ""))
    row = RowResult(label, weights, results)
    if "dimtorch" in samples:
        q = timing.quartiles(timing.round_ratios(samples["dimtorch"], samples["torch"]))
        row.ratio, row.ratio_quartiles = q[1], list(q)
    if "returnn" in samples:
        q = timing.quartiles(timing.round_ratios(samples["returnn"], samples["torch"]))
        row.returnn_ratio, row.returnn_ratio_quartiles = q[1], list(q)
    return row


# ----------------------------------------------------------------------------------------------- report

def _us(v) -> str:
    if v is None:
        return "n/a"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 1000 else f"{v:.0f}"


def _cell(r: ImplResult) -> str:
    if r.status in ("n/a", "error"):
        return r.status.upper() if r.status == "error" else "n/a"
    return _us(r.us) + (" DIFFERS" if r.status == "differs" else "")


def _ratio(v) -> str:
    return "—" if v is None else f"{v:.2f}"


def _geomean(values: list) -> Optional[float]:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def markdown(sets: list, header: list) -> str:
    lines = ["# dimtorch layer benchmark", ""] + header + [""]
    for name, shapes, rows in sets:
        lines += [f"## {name}: batch {shapes.batch}, lengths {', '.join(map(str, shapes.lengths))}, model "
                  f"{shapes.model}, heads {shapes.heads}, ff {shapes.ff}, conv kernel {shapes.kernel}", "",
                  "| layer | torch_us | dimtorch_us | ratio | returnn_us | returnn_ratio | weights |",
                  "|---|---:|---:|---:|---:|---:|---|"]
        for r in rows:
            lines.append(f"| {r.row} | {_cell(r.impls['torch'])} | {_cell(r.impls['dimtorch'])} | {_ratio(r.ratio)} "
                         f"| {_cell(r.impls['returnn'])} | {_ratio(r.returnn_ratio)} | {r.weights} |")
        gd = _geomean([r.ratio for r in rows if r.ratio is not None])
        gr = _geomean([r.returnn_ratio for r in rows if r.returnn_ratio is not None])
        lines += ["", f"Geometric mean ratio: dimtorch {_ratio(gd)}, RETURNN {_ratio(gr)}", ""]
        problems = [(r.row, n, i.detail) for r in rows for n, i in r.impls.items() if i.status in ("error", "differs")]
        if problems:
            lines += ["Problems:", ""] + [f"- {row} / {n}: {d}" for row, n, d in problems] + [""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="rough numbers in well under a minute")
    parser.add_argument("--shapes", default="tiny,small", help="comma-separated: " + ", ".join(SHAPES))
    parser.add_argument("--filter", default="", help="regex searched in the row names (e.g. 'Linear|fwd\\+bwd')")
    parser.add_argument("--rounds", type=int, default=None, help="at most this many rounds per row")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"))
    parser.add_argument("--no-returnn", action="store_true", help="skip RETURNN frontend")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    plan = timing.QUICK if args.quick else timing.TimingPlan(warmup_s=0.1, batch_s=0.002, rounds=101, min_rounds=9,
                                                             budget_s=2.0)
    if args.rounds:
        plan = timing.TimingPlan(plan.warmup_s, plan.batch_s, args.rounds, min(plan.min_rounds, args.rounds),
                                 plan.budget_s)
    rf, rf_line = None, "RETURNN frontend: skipped (--no-returnn)"
    if not args.no_returnn:
        setup = setup_returnn()
        rf_line = setup.describe()
        if setup.available:
            rf = setup.rf  # at its newest behavior version (setup_returnn)
            with contextlib.redirect_stdout(sys.stderr):
                rf.init_train_step_run_ctx(train_flag=True, step=0, epoch=1)  # batch norm: batch statistics
    pattern = re.compile(args.filter, re.IGNORECASE)
    overhead = timing.harness_overhead_s()
    started = time.time()
    sets, document = [], {"versions": {"torch": torch.__version__, "dimtorch": dt.__version__,
                                       "python": platform.python_version()},
                          "returnn": rf_line, "plan": asdict(plan), "threads": 1, "shape_sets": []}
    failed = False
    for set_name in [s.strip() for s in args.shapes.split(",") if s.strip()]:
        shapes = SHAPES[set_name]
        data = make_data(shapes, rf)
        rows = []
        for layer, build in ROWS.items():
            labels = [(f"{layer} {mode}", mode) for mode in ("fwd", "fwd+bwd")]
            labels = [(label, mode) for label, mode in labels if pattern.search(label)]
            if not labels:
                continue
            print(f"[{set_name}] {layer} ...", file=sys.stderr)
            with contextlib.redirect_stdout(sys.stderr):  # RETURNN's warnings stay out of the report
                impls, weights = build(data, rf)
                problems, grads = check(impls, data, tolerance=1e-3 if layer == "ConformerEncoderLayer" else 1e-4)
            failed |= any(n != "returnn" for n in problems)
            for label, mode in labels:
                if mode == "fwd":
                    fns = {n: i.forward for n, i in impls.items()}
                else:
                    fns = {n: _fwd_bwd(i, grads[n]) for n, i in impls.items() if n in grads}
                gc.collect()
                with contextlib.redirect_stdout(sys.stderr):
                    rows.append(time_row(label, impls, fns, problems, plan, overhead, weights))
        sets.append((set_name, shapes, rows))
        document["shape_sets"].append({"name": set_name, "shapes": asdict(shapes), "lengths": shapes.lengths,
                                       "rows": [asdict(r) for r in rows]})
    header = [f"torch {torch.__version__}, dimtorch {dt.__version__}, CPU, 1 thread; {rf_line}.",
              "Ratios: median over interleaved rounds of (time / hand-written PyTorch time in the same round); "
              "`fwd+bwd` = the call, sum(y * g) and the gradients of the input and all weights. `weights`: "
              "`same` = the three sides run the same weights and agree on valid frames (outputs and input "
              "gradients); see bench/README.md for what each side is.",
              f"Run took {time.time() - started:.0f} s{' (--quick: rough numbers)' if args.quick else ''}."]
    report = markdown(sets, header)
    print(report)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "nn_layers_bench.md").write_text(report + "\n")
    (out / "nn_layers_bench.json").write_text(json.dumps(document, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
