"""The demo's Conformer + CTC (optionally + attention decoder), in pure PyTorch: positional axes, hand-written masks.

This is the reference that dimtorch's model (dimtorch.nn.ConformerEncoder + a Linear) must match:
same parameters (names and torch layouts below), same loss and gradients on the same batch. The
structure follows RETURNN frontend's ConformerEncoder (pre-norm macaron layers, Transformer-XL style
relative-position self-attention, conv block with batch norm), with two deliberate choices where
RETURNN's defaults would make a sequence's output depend on the rest of its batch:

- the conv front end pads explicitly (1 frame each side, kernel 3, stride 2), not "same" padding
  computed from the padded batch length, so the output length is exactly ceil(T / 2) per conv
  (ceil(T / 4) for the two), a function of the sequence's own length;
- every convolution (front end and depthwise) sees zeros at padded frames, and the batch norm's
  statistics count valid frames only (dimtorch's `batch_norm` with `use_mask=True`).

Parameter names and layouts (a state_dict of `ConformerCTC`; torch layouts, Linear weight (out, in)):

  encoder.input_layer.conv_layers.{0,1}.weight   (C_i, C_{i-1}, 3, 3)  Conv2d over (time, feature),
  encoder.input_layer.conv_layers.{0,1}.bias     (C_i,)                 C_{-1} = 1, stride 2 in both
  encoder.input_projection.weight                (D, F'' * C_1)        no bias; input feature index
                                                                         f * C_1 + c (feature-major,
                                                                         channel-minor, as RETURNN's
                                                                         merge_dims of (F'', C_1))
  encoder.layers.{i}.ffn1_layer_norm.{weight,bias}          (D,)
  encoder.layers.{i}.ffn1.linear_ff.{weight (FF, D), bias (FF,)}
  encoder.layers.{i}.ffn1.linear_out.{weight (D, FF), bias (D,)}
  encoder.layers.{i}.self_att_layer_norm.{weight,bias}      (D,)
  encoder.layers.{i}.self_att.qkv.{weight (H*(2*Dh+Dh), D), bias}   output index h*(3*Dh) + j:
                                                            j < Dh query, < 2*Dh key, else value
  encoder.layers.{i}.self_att.linear_pos.weight             (D, D), no bias; output index h*Dh + j
  encoder.layers.{i}.self_att.pos_bias_u, pos_bias_v        (H, Dh)
  encoder.layers.{i}.self_att.proj.{weight (D, D), bias (D,)}
  encoder.layers.{i}.conv_layer_norm.{weight,bias}          (D,)
  encoder.layers.{i}.conv_block.positionwise_conv1.{weight (2*D, D), bias}  GLU: first half * sigmoid(second)
  encoder.layers.{i}.conv_block.depthwise_conv.{weight (D, 1, K), bias (D,)}  padding (K-1)/2 each side
  encoder.layers.{i}.conv_block.norm.{weight, bias, running_mean, running_var}  (D,)  masked batch norm
  encoder.layers.{i}.conv_block.positionwise_conv2.{weight (D, D), bias}
  encoder.layers.{i}.ffn2_layer_norm, ffn2.linear_ff, ffn2.linear_out       as ffn1
  encoder.layers.{i}.final_layer_norm.{weight,bias}         (D,)
  output.{weight (V+1, D), bias (V+1,)}                     CTC logits; blank = index V (the last)
  decoder.*                                                 only with a DecoderConfig: the attention
                                                            decoder (names in demo/reference_decoder.py)

dimtorch's model (demo/dimtorch_model.py) has the same names, except `scale` for the norms' `weight`
(`reference_state_dict_to_dimtorch`).

Semantics of the attention: score(i, j) = ((q_i + u) . k_j + (q_i + v) . P[j - i]) / sqrt(Dh), keys
j beyond the sequence's length masked, softmax over j; P[d] = linear_pos(pe(d)) split into heads,
pe(d) = concat(sin(d * w), cos(d * w)), w_k = 10000^(-2k / D), k < D/2, for d = -(T-1) .. T-1
(RETURNN's `relative_positional_encoding`). Activations: ReLU in the front end, swish elsewhere.
The CTC loss is summed over the batch and divided by the number of target labels (at least 1).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from demo.reference_decoder import IGNORE_INDEX, FeedForward, TransformerDecoder, aed_targets, greedy_decode
from demo.reference_frontend import FrontendConfig, LogMelFrontend


@dataclass(frozen=True)
class ModelConfig:
    in_dim: int = 16  # input features per frame (demo.data.TaskConfig.feature_dim)
    num_labels: int = 24  # labels without blank; the CTC head has num_labels + 1 outputs
    model_dim: int = 64
    num_layers: int = 3
    num_heads: int = 4
    ff_dim: int = 256
    conv_kernel_size: int = 15  # odd
    subsample_channels: Tuple[int, int] = (8, 8)
    dropout: float = 0.1
    att_dropout: float = 0.1

    def to_dict(self) -> dict:
        d = asdict(self)
        d["subsample_channels"] = list(self.subsample_channels)
        return d

    @staticmethod
    def from_dict(d: dict) -> "ModelConfig":
        d = dict(d)
        d["subsample_channels"] = tuple(d["subsample_channels"])
        return ModelConfig(**d)


def sequence_mask(lengths: torch.Tensor, max_len: int, device) -> torch.Tensor:
    """(B, max_len) bool, True at valid frames; `lengths` int64 on the host. Made on the host, then
    copied (non-blocking): no device read."""
    mask = torch.arange(max_len).unsqueeze(0) < lengths.unsqueeze(1)
    return mask.to(device, non_blocking=True)


def subsampled_length(lengths: torch.Tensor) -> torch.Tensor:
    """Output length of one front-end conv (kernel 3, stride 2, 1 frame padding): ceil(T / 2)."""
    return (lengths + 1) // 2


class ConformerConvSubsample(nn.Module):
    """Two Conv2d (kernel 3x3, stride 2x2, padding 1) + ReLU over (time, feature), padded frames zeroed
    before each conv; out (B, ceil(ceil(T/2)/2), F'' * C) with F'' = ceil(ceil(F/2)/2)."""

    def __init__(self, in_dim: int, channels: Tuple[int, ...]):
        super().__init__()
        self.conv_layers = nn.ModuleList()
        prev = 1
        feat = in_dim
        for c in channels:
            self.conv_layers.append(nn.Conv2d(prev, c, kernel_size=3, stride=2, padding=1))
            prev = c
            feat = (feat + 1) // 2
        self.out_dim = feat * prev

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        h = x.unsqueeze(1)  # (B, 1, T, F)
        for conv in self.conv_layers:
            mask = sequence_mask(lengths, h.shape[2], h.device)
            h = torch.where(mask[:, None, :, None], h, 0.0)
            h = F.relu(conv(h))
            lengths = subsampled_length(lengths)
        b, c, t, f = h.shape
        return h.permute(0, 2, 3, 1).reshape(b, t, f * c), lengths


class ConformerPositionwiseFeedForward(FeedForward):
    def __init__(self, dim: int, ff_dim: int, dropout: float):
        super().__init__(dim, ff_dim, dropout, F.silu)


_pos_cache: Dict[tuple, torch.Tensor] = {}


def relative_positional_encoding(time: int, dim: int, device, dtype) -> torch.Tensor:
    """(2*time - 1, dim): row r is pe(r - (time - 1)) (see the module docstring); cached (not while
    compiling: made in the graph, since a cache keyed by the length would make guards on it)."""
    compiling = torch.compiler.is_compiling()
    key = (time, dim, torch.device(device), dtype)
    pe = None if compiling else _pos_cache.get(key)
    if pe is None:
        pos = torch.arange(-(time - 1), time, dtype=torch.float32)
        div = torch.exp(torch.arange(dim // 2, dtype=torch.float32) * -(2.0 * math.log(1e4) / dim))
        arg = pos[:, None] * div[None, :]
        pe = torch.cat([torch.sin(arg), torch.cos(arg)], dim=1).to(device=device, dtype=dtype)
        if compiling:
            return pe
        if len(_pos_cache) > 256:
            _pos_cache.clear()
        _pos_cache[key] = pe
    return pe


def rel_shift(x: torch.Tensor) -> torch.Tensor:
    """(..., T, 2T-1) indexed by relative position r = d + T - 1 -> (..., T, T) with
    out[..., i, j] = x[..., i, j - i + T - 1] (Transformer-XL's pad-and-reshape trick). Compiled, a
    gather: inductor's CPU code generation of the reshapes' index arithmetic over a dynamic T runs for
    over 10 minutes in torch 2.13 (sympy simplification); dimtorch's rel_shift does the same."""
    *lead, t, r = x.shape
    if torch.compiler.is_compiling():
        positions = torch.arange(t, device=x.device)
        index = positions[None, :] - positions[:, None] + (t - 1)
        return x.gather(-1, index.expand(*lead, t, t))
    x = F.pad(x, (1, 0))  # (..., T, 2T)
    x = x.reshape(*lead, 2 * t, t)[..., 1:, :]  # (..., 2T-1, T)
    return x.reshape(*lead, t, r)[..., :t]


class RelPosSelfAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int, att_dropout: float):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"RelPosSelfAttention: model_dim {dim} is not divisible by num_heads {num_heads}")
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.linear_pos = nn.Linear(dim, dim, bias=False)
        self.pos_bias_u = nn.Parameter(torch.empty(num_heads, self.head_dim))
        self.pos_bias_v = nn.Parameter(torch.empty(num_heads, self.head_dim))
        nn.init.xavier_uniform_(self.pos_bias_u)
        nn.init.xavier_uniform_(self.pos_bias_v)
        self.proj = nn.Linear(dim, dim)
        self.att_dropout = att_dropout

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        """x (B, T, D), key_mask (B, T) bool (True = valid)."""
        b, t, d = x.shape
        h, dh = self.num_heads, self.head_dim
        qkv = self.qkv(x).view(b, t, h, 3 * dh)
        q, k, v = qkv.split(dh, dim=-1)  # (B, T, H, Dh)
        pos = self.linear_pos(relative_positional_encoding(t, d, x.device, x.dtype)).view(2 * t - 1, h, dh)
        q_u = (q + self.pos_bias_u).transpose(1, 2)  # (B, H, T, Dh)
        q_v = (q + self.pos_bias_v).transpose(1, 2)
        ac = torch.matmul(q_u, k.permute(0, 2, 3, 1))  # (B, H, T, T)
        bd = rel_shift(torch.matmul(q_v, pos.permute(1, 2, 0)))  # (B, H, T, 2T-1) -> (B, H, T, T)
        scores = (ac + bd) * (dh ** -0.5)
        # A finite fill keeps a length-0 sequence (no valid key) finite: uniform weights, no NaN.
        scores = scores.masked_fill(~key_mask[:, None, None, :], torch.finfo(scores.dtype).min)
        att = F.dropout(torch.softmax(scores, dim=-1), self.att_dropout, self.training)
        out = torch.matmul(att, v.transpose(1, 2))  # (B, H, T, Dh)
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class MaskedBatchNorm(nn.Module):
    """Batch norm over (B, T, D) with statistics over valid frames only (biased variance for the
    output, unbiased n/(n-1) for the running variance, n clamped to >= 1) — dimtorch.batch_norm.
    With `sync` set (sync_batch_norm) and several processes, the statistics in training are those of
    all processes' batches together (dimtorch.nn.SyncBatchNorm)."""

    def __init__(self, dim: int, momentum: float = 0.1, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.register_buffer("running_mean", torch.zeros(dim))
        self.register_buffer("running_var", torch.ones(dim))
        self.momentum, self.eps = momentum, eps
        self.sync, self.process_group = False, None

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return F.batch_norm(x.transpose(1, 2), self.running_mean, self.running_var, self.weight, self.bias,
                                False, 0.0, self.eps).transpose(1, 2)
        if self.sync and torch.distributed.is_initialized() and \
                torch.distributed.get_world_size(self.process_group) > 1:
            return self._synced(x, mask)
        m = mask[:, :, None]
        count = m.sum((0, 1), keepdim=True).clamp(min=1)  # (1, 1, 1), on the device: no sync
        xm = torch.where(m, x, 0.0)
        mean = xm.sum((0, 1), keepdim=True) / count
        diff = xm - mean
        var = torch.where(m, diff * diff, 0.0).sum((0, 1), keepdim=True) / count
        with torch.no_grad():
            unbiased = var * (count / (count - 1).clamp(min=1))
            self.running_mean.mul_(1 - self.momentum).add_(mean.reshape(-1), alpha=self.momentum)
            self.running_var.mul_(1 - self.momentum).add_(unbiased.reshape(-1), alpha=self.momentum)
        return diff * torch.rsqrt(var + self.eps) * self.weight + self.bias

    def _synced(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Training statistics over the valid frames of all processes: sums and the count all-reduced
        (in autograd, so gradients flow across processes as for one combined batch)."""
        from torch.distributed._functional_collectives import all_reduce  # differentiable
        group = self.process_group or torch.distributed.group.WORLD
        m = mask[:, :, None]
        xm = torch.where(m, x, 0.0)
        local = torch.cat([xm.sum((0, 1)), m.sum().reshape(1).to(x.dtype)])
        total = all_reduce(local, "sum", group)
        count = total[-1:]
        mean = total[:-1] / count.clamp(min=1)
        diff = xm - mean
        var = all_reduce(torch.where(m, diff * diff, 0.0).sum((0, 1)), "sum", group) / count.clamp(min=1)
        with torch.no_grad():
            unbiased = var * (count / (count - 1).clamp(min=1))
            self.running_mean.mul_(1 - self.momentum).add_(mean, alpha=self.momentum)
            self.running_var.mul_(1 - self.momentum).add_(unbiased, alpha=self.momentum)
        return diff * torch.rsqrt(var + self.eps) * self.weight + self.bias


def sync_batch_norm(model: nn.Module, process_group=None) -> nn.Module:
    """Makes every MaskedBatchNorm of `model` compute its training statistics over all processes of
    `process_group` (default: all); returns `model`."""
    for m in model.modules():
        if isinstance(m, MaskedBatchNorm):
            m.sync, m.process_group = True, process_group
    return model


class ConformerConvBlock(nn.Module):
    def __init__(self, dim: int, kernel_size: int):
        super().__init__()
        if kernel_size % 2 != 1:
            raise ValueError(f"ConformerConvBlock: conv_kernel_size must be odd, got {kernel_size}")
        self.positionwise_conv1 = nn.Linear(dim, 2 * dim)
        self.depthwise_conv = nn.Conv1d(dim, dim, kernel_size, groups=dim, padding=(kernel_size - 1) // 2)
        self.norm = MaskedBatchNorm(dim)
        self.positionwise_conv2 = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = F.glu(self.positionwise_conv1(x), dim=-1)
        h = torch.where(mask[:, :, None], h, 0.0)  # the conv must see zeros beyond each sequence
        h = self.depthwise_conv(h.transpose(1, 2)).transpose(1, 2)
        h = F.silu(self.norm(h, mask))
        return self.positionwise_conv2(h)


class ConformerEncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d = cfg.model_dim
        self.dropout = cfg.dropout
        self.ffn1 = ConformerPositionwiseFeedForward(d, cfg.ff_dim, cfg.dropout)
        self.ffn1_layer_norm = nn.LayerNorm(d)
        self.ffn2 = ConformerPositionwiseFeedForward(d, cfg.ff_dim, cfg.dropout)
        self.ffn2_layer_norm = nn.LayerNorm(d)
        self.conv_block = ConformerConvBlock(d, cfg.conv_kernel_size)
        self.conv_layer_norm = nn.LayerNorm(d)
        self.self_att = RelPosSelfAttention(d, cfg.num_heads, cfg.att_dropout)
        self.self_att_layer_norm = nn.LayerNorm(d)
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        drop = lambda h: F.dropout(h, self.dropout, self.training)  # noqa: E731
        x = 0.5 * drop(self.ffn1(self.ffn1_layer_norm(x))) + x
        x = drop(self.self_att(self.self_att_layer_norm(x), mask)) + x
        x = drop(self.conv_block(self.conv_layer_norm(x), mask)) + x
        x = 0.5 * drop(self.ffn2(self.ffn2_layer_norm(x))) + x
        return self.final_layer_norm(x)


class ConformerEncoder(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_layer = ConformerConvSubsample(cfg.in_dim, cfg.subsample_channels)
        self.input_projection = nn.Linear(self.input_layer.out_dim, cfg.model_dim, bias=False)
        self.input_dropout = cfg.dropout
        self.layers = nn.ModuleList(ConformerEncoderLayer(cfg) for _ in range(cfg.num_layers))

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, F) (padding: anything), lengths (B,) int64 on the host -> (B, T', D), lengths'."""
        x, lengths = self.input_layer(x, lengths)
        x = F.dropout(self.input_projection(x), self.input_dropout, self.training)
        mask = sequence_mask(lengths, x.shape[1], x.device)
        for layer in self.layers:
            x = layer(x, mask)
        return x, lengths


@dataclass(frozen=True)
class DecoderConfig:
    """The optional attention decoder (demo/reference_decoder.py) and the joint loss
    ctc_scale * CTC + aed_scale * CE (RETURNN-style joint CTC/attention training). The decoder shares
    the encoder's model_dim, num_heads and dropouts."""
    num_layers: int = 2
    ff_dim: int = 256
    ctc_scale: float = 0.3
    aed_scale: float = 0.7
    label_smoothing: float = 0.1

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict) -> "DecoderConfig":
        return DecoderConfig(**d)


class ConformerCTC(nn.Module):
    """ConformerEncoder + Linear to num_labels + 1 (blank last); `loss` gives the CTC loss. With a
    DecoderConfig also an attention decoder (`decoder`, over num_labels + 1 classes, EOS = BOS last)
    trained jointly: loss = ctc_scale * CTC + aed_scale * label-smoothed CE, the CE summed over each
    sequence's labels and its EOS and divided by their number (sum of target_lengths + 1)."""

    def __init__(self, cfg: ModelConfig = ModelConfig(), decoder: Optional[DecoderConfig] = None,
                 frontend: Optional[FrontendConfig] = None):
        super().__init__()
        self.cfg, self.dec_cfg, self.frontend_cfg = cfg, decoder, frontend
        if frontend is not None:  # waveforms in: log-mel features + SpecAugment (no parameters)
            if frontend.num_mel != cfg.in_dim:
                raise ValueError(f"ConformerCTC: frontend num_mel {frontend.num_mel} != model in_dim {cfg.in_dim}")
            self.frontend = LogMelFrontend(frontend)
        self.encoder = ConformerEncoder(cfg)
        self.output = nn.Linear(cfg.model_dim, cfg.num_labels + 1)
        if decoder is not None:
            self.decoder = TransformerDecoder(cfg.model_dim, cfg.num_labels + 1, cfg.model_dim,
                                              num_layers=decoder.num_layers, ff_dim=decoder.ff_dim,
                                              num_heads=cfg.num_heads, dropout=cfg.dropout, att_dropout=cfg.att_dropout)

    @property
    def blank_index(self) -> int:
        return self.cfg.num_labels

    @property
    def eos_index(self) -> int:
        return self.cfg.num_labels

    def set_train_step(self, step: int) -> None:
        """The global training step (SpecAugment's schedule); no effect without a front end."""
        if self.frontend_cfg is not None:
            self.frontend.stage = self.frontend_cfg.stage(step)

    def encode(self, features: torch.Tensor, feature_lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """(B, T', D), lengths' on the host; features are feature frames (B, T, F), or with a front end
        audio (B, S) with feature_lengths in samples."""
        if self.frontend_cfg is not None:
            features, feature_lengths = self.frontend(features, feature_lengths)
        return self.encoder(features, feature_lengths)

    def forward(self, features: torch.Tensor, feature_lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """-> logits (B, T', V+1), out lengths (B,) int64 on the host."""
        h, lengths = self.encode(features, feature_lengths)
        return self.output(h), lengths

    def loss(self, features, feature_lengths, targets, target_lengths, *, total_labels: Optional[int] = None,
             total_seqs: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(loss, CTC logits, out lengths); the loss is the CTC loss per target label, or with the
        decoder the joint loss. zero_infinity: a sequence too short for its target (impossible with the
        demo data) adds 0 instead of inf. `total_labels`/`total_seqs` (default: this batch's target labels
        and sequences) are what the sums are divided by: with data parallelism, those of the whole step
        over all ranks, so that the ranks' losses add up to the step's loss."""
        h, out_lengths = self.encode(features, feature_lengths)
        logits = self.output(h)
        log_probs = F.log_softmax(logits.float(), dim=-1).transpose(0, 1)  # (T', B, V+1)
        if torch.compiler.is_compiling():
            # torch 2.13's CTC op cannot be compiled (its log_alpha output has a size read from the
            # lengths): the traceable op a PyTorch user writes for that (torch.library.custom_op
            # around torch.ctc_loss, log_alpha recomputed in the backward), here dimtorch's own, so
            # that both compiled models run the same CTC.
            from dimtorch.ops.ctc_op import ctc_loss as traceable_ctc_loss
            loss = traceable_ctc_loss(log_probs, targets, out_lengths.to(log_probs.device),
                                      target_lengths.to(log_probs.device), self.blank_index, True).sum()
        else:
            loss = F.ctc_loss(log_probs, targets, out_lengths, target_lengths, blank=self.blank_index,
                              reduction="sum", zero_infinity=True)
        labels = int(target_lengths.sum()) if total_labels is None else total_labels
        loss = loss / max(1, labels)
        if self.dec_cfg is None:
            return loss, logits, out_lengths
        dec_in, dec_out = aed_targets(targets, target_lengths, self.eos_index)
        dec_logits = self.decoder(dec_in, h, sequence_mask(out_lengths, h.shape[1], h.device))
        ce = F.cross_entropy(dec_logits.flatten(0, 1).float(), dec_out.flatten(), ignore_index=IGNORE_INDEX,
                             reduction="sum", label_smoothing=self.dec_cfg.label_smoothing)
        ce = ce / (labels + (target_lengths.numel() if total_seqs is None else total_seqs))
        return self.dec_cfg.ctc_scale * loss + self.dec_cfg.aed_scale * ce, logits, out_lengths

    @torch.no_grad()
    def aed_greedy_decode(self, features, feature_lengths, max_len_factor: int = 2) -> List[List[int]]:
        """Greedy attention decoding (see demo.reference_decoder.greedy_decode)."""
        if self.dec_cfg is None:
            raise ValueError("ConformerCTC.aed_greedy_decode(): this model has no attention decoder (made without "
                             "a DecoderConfig; train.py --decoder aed makes one)")
        h, out_lengths = self.encode(features, feature_lengths)
        return greedy_decode(self.decoder, h, out_lengths, self.eos_index, max_len_factor)


def reference_state_dict_to_dimtorch(state_dict: dict) -> dict:
    """The reference's state_dict in dimtorch's naming: the same names and torch layouts (see the
    module docstring), except that dt.nn's LayerNorm and BatchNorm call their scale `scale` where
    torch says `weight`. (dt.nn.torch_state_dict_to_dimtorch(module, sd) does the same, led by a module.)"""
    out = {}
    for k, v in state_dict.items():
        if k.endswith("layer_norm.weight") or k.endswith("conv_block.norm.weight"):
            k = k[: -len("weight")] + "scale"
        out[k] = v
    return out


__all__ = ["ModelConfig", "DecoderConfig", "ConformerCTC", "ConformerEncoder", "ConformerEncoderLayer",
           "RelPosSelfAttention", "ConformerConvBlock", "ConformerConvSubsample", "MaskedBatchNorm",
           "relative_positional_encoding", "rel_shift", "sequence_mask", "subsampled_length",
           "reference_state_dict_to_dimtorch", "sync_batch_norm"]
