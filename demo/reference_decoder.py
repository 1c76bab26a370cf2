"""The demo's optional attention decoder in pure PyTorch: a pre-norm Transformer decoder with hand-written masks.

It mirrors dimtorch.nn.TransformerDecoder (names, layouts, order of operations and of dropout draws),
so that dimtorch's model loads its weights unchanged. Parameter names (under `decoder.` in the joint
model; torch layouts, Linear weight (out, in); D the model dim, H heads, Dh = D / H, V' = labels + 1):

  input_embedding.weight                       (V', D)   scaled by sqrt(D), plus sinusoidal positions
  layers.{i}.self_att_layer_norm.{weight,bias} (D,)
  layers.{i}.self_att.qkv.{weight (3*D, D), bias}   output index h*(3*Dh) + j: query, key, value
  layers.{i}.self_att.proj.{weight (D, D), bias}
  layers.{i}.cross_att_layer_norm.{weight,bias}
  layers.{i}.cross_att.query.{weight (D, D), bias}  output index h*Dh + j
  layers.{i}.cross_att.kv.{weight (2*D, E), bias}   output index h*(2*Dh) + j: key, value
  layers.{i}.cross_att.proj.{weight (D, D), bias}
  layers.{i}.ff_layer_norm.{weight,bias}
  layers.{i}.ff.linear_ff.{weight (FF, D), bias}, ff.linear_out.{weight (D, FF), bias}   ReLU
  final_layer_norm.{weight,bias}
  logits.{weight (V', D), bias (V',)}          index V' - 1 is EOS, also fed as BOS

Layer: x + SelfAtt(LN(x)) (causal) -> + CrossAtt(LN(x), encoder; encoder padding masked) -> + FF(LN(x)),
dropout on each branch and on the input. Positions: row p is [sin(p w), cos(p w)], w_k = 10000^(-2k / D).
"""
from __future__ import annotations

import math
from typing import Dict, List, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from demo.aed_decode import GreedyHypotheses

IGNORE_INDEX = -100  # F.cross_entropy's ignore_index


_pos_cache: Dict[tuple, torch.Tensor] = {}


def absolute_positional_encoding(time: int, dim: int, device, dtype) -> torch.Tensor:
    """(time, dim) sinusoidal positions 0 .. time-1 (see the module docstring); cached."""
    key = (time, dim, torch.device(device), dtype)
    pe = _pos_cache.get(key)
    if pe is None:
        pos = torch.arange(time, dtype=torch.float32)
        div = torch.exp(torch.arange(dim // 2, dtype=torch.float32) * -(2.0 * math.log(1e4) / dim))
        arg = pos[:, None] * div[None, :]
        pe = torch.cat([torch.sin(arg), torch.cos(arg)], dim=1).to(device=device, dtype=dtype)
        if len(_pos_cache) > 256:
            _pos_cache.clear()
        _pos_cache[key] = pe
    return pe


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int, att_dropout: float):
        super().__init__()
        self.num_heads, self.head_dim, self.att_dropout = num_heads, dim // num_heads, att_dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, D): frame t sees frames <= t (valid frames never see padding)."""
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, self.num_heads, 3 * self.head_dim).transpose(1, 2).split(self.head_dim, -1)
        p = self.att_dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)  # (B, H, T, Dh)
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class CrossAttention(nn.Module):
    def __init__(self, dim: int, encoder_dim: int, num_heads: int, att_dropout: float):
        super().__init__()
        self.num_heads, self.head_dim, self.att_dropout = num_heads, dim // num_heads, att_dropout
        self.query = nn.Linear(dim, dim)
        self.kv = nn.Linear(encoder_dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, encoder: torch.Tensor, enc_mask: torch.Tensor) -> torch.Tensor:
        """x (B, T, D) over encoder (B, S, E) with enc_mask (B, S) bool (True = valid frame). A
        sequence without valid frames gets 0 (SDPA's result for a row with every key masked)."""
        b, t, d = x.shape
        h, dh = self.num_heads, self.head_dim
        q = self.query(x).view(b, t, h, dh).transpose(1, 2)
        k, v = self.kv(encoder).view(b, encoder.shape[1], h, 2 * dh).transpose(1, 2).split(dh, -1)
        p = self.att_dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=enc_mask[:, None, None, :], dropout_p=p)
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class FeedForward(nn.Module):
    """linear_out(dropout(activation(linear_ff(x)))): the decoder's (ReLU) and the Conformer's (SiLU)."""

    def __init__(self, dim: int, ff_dim: int, dropout: float, activation=F.relu):
        super().__init__()
        self.linear_ff = nn.Linear(dim, ff_dim)
        self.linear_out = nn.Linear(ff_dim, dim)
        self.dropout = dropout
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_out(F.dropout(self.activation(self.linear_ff(x)), self.dropout, self.training))


class TransformerDecoderLayer(nn.Module):
    def __init__(self, dim: int, encoder_dim: int, ff_dim: int, num_heads: int, dropout: float, att_dropout: float):
        super().__init__()
        self.dropout = dropout
        self.self_att_layer_norm = nn.LayerNorm(dim)
        self.self_att = CausalSelfAttention(dim, num_heads, att_dropout)
        self.cross_att_layer_norm = nn.LayerNorm(dim)
        self.cross_att = CrossAttention(dim, encoder_dim, num_heads, att_dropout)
        self.ff_layer_norm = nn.LayerNorm(dim)
        self.ff = FeedForward(dim, ff_dim, dropout)

    def forward(self, x: torch.Tensor, encoder: torch.Tensor, enc_mask: torch.Tensor) -> torch.Tensor:
        drop = lambda h: F.dropout(h, self.dropout, self.training)  # noqa: E731
        x = drop(self.self_att(self.self_att_layer_norm(x))) + x
        x = drop(self.cross_att(self.cross_att_layer_norm(x), encoder, enc_mask)) + x
        return drop(self.ff(self.ff_layer_norm(x))) + x


class TransformerDecoder(nn.Module):
    def __init__(self, encoder_dim: int, vocab_size: int, dim: int, *, num_layers: int, ff_dim: int, num_heads: int,
                 dropout: float, att_dropout: float):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"TransformerDecoder: model_dim {dim} is not divisible by num_heads {num_heads}")
        self.dim, self.dropout = dim, dropout
        self.input_embedding = nn.Embedding(vocab_size, dim)
        self.layers = nn.ModuleList(TransformerDecoderLayer(dim, encoder_dim, ff_dim, num_heads, dropout, att_dropout)
                                    for _ in range(num_layers))
        self.final_layer_norm = nn.LayerNorm(dim)
        self.logits = nn.Linear(dim, vocab_size)

    def forward(self, labels: torch.Tensor, encoder: torch.Tensor, enc_mask: torch.Tensor) -> torch.Tensor:
        """labels (B, T) int64 (BOS first) -> logits (B, T, V'); position t sees labels <= t only."""
        x = self.input_embedding(labels) * math.sqrt(self.dim)
        x = x + absolute_positional_encoding(labels.shape[1], self.dim, x.device, x.dtype)
        x = F.dropout(x, self.dropout, self.training)
        for layer in self.layers:
            x = layer(x, encoder, enc_mask)
        return self.logits(self.final_layer_norm(x))


def aed_targets(targets: torch.Tensor, target_lengths: torch.Tensor, eos: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Decoder input and output, both (B, L+1): input = BOS (= eos) then the labels; output = the labels
    then EOS at each sequence's own end (position target_lengths[b]), ignore_index beyond it. Masks
    from the host lengths (copied without waiting): no device read."""
    n = targets.shape[1]
    pos = torch.arange(n + 1)[None, :]
    lengths = target_lengths[:, None]
    dec_in = F.pad(targets, (1, 0), value=eos)
    labels = F.pad(targets, (0, 1))
    dec_out = torch.where((pos < lengths).to(targets.device, non_blocking=True), labels,
                          torch.where((pos == lengths).to(targets.device, non_blocking=True), eos, IGNORE_INDEX))
    return dec_in, dec_out


def greedy_decode(decoder: TransformerDecoder, encoder: torch.Tensor, enc_lengths: torch.Tensor, eos: int,
                  max_len_factor: int = 2) -> List[List[int]]:
    """Greedy labels per sequence, at most max_len_factor * encoder frames each, EOS dropped. The simple
    loop: the whole prefix is run again at every step (no state), the last position's argmax appended."""
    hyps = GreedyHypotheses(enc_lengths, eos, max_len_factor)
    enc_mask = (torch.arange(encoder.shape[1])[None, :] < enc_lengths[:, None]).to(encoder.device, non_blocking=True)
    prefix = torch.full((encoder.shape[0], 1), eos, dtype=torch.int64, device=encoder.device)
    for _ in range(hyps.max_steps):
        best = decoder(prefix, encoder, enc_mask)[:, -1].argmax(-1)
        if not hyps.add(best):
            break
        prefix = torch.cat([prefix, best[:, None]], dim=1)
    return hyps.hyps
