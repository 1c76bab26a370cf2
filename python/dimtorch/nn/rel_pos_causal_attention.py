"""RelPosCausalSelfAttention: causal self-attention with Transformer-XL relative positions (rf's), full sequence or step by step."""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F

from .._C import Dim, Tensor
from .._core.args import dim_str
from ..ops.positional import relative_positional_encoding_raw
from . import init as _init
from .attention import CausalSelfAttention, CausalSelfAttentionState, _check_x, _is_empty, rel_shift
from .linear import Linear
from .module import Module, Parameter

__all__ = ["RelPosCausalSelfAttention"]


class _LearnedRelPos(Module):
    """RETURNN's LearnedRelativePositionalEncoding as RelPosCausalSelfAttention uses it: a table `pos_emb` over
    (2 * clipping + 1, feat_dim); the distance d (key minus query position) reads row clip(d, ±clipping) + clipping.
    forward(distances) -> raw (len(distances), feat_dim) for an int raw of distances."""

    def __init__(self, feat_dim: Dim, *, clipping: int, dtype="float32", device=None):
        super().__init__()
        self.feat_dim, self.clipping = feat_dim, clipping
        self.clipped_spatial_dim = Dim(2 * clipping + 1, name="learned_rel_pos")
        self.pos_emb = Parameter((self.clipped_spatial_dim, feat_dim), dtype, init=_init.Glorot(), device=device)

    def forward(self, distances: torch.Tensor) -> torch.Tensor:
        return self.pos_emb.raw[distances.clamp(-self.clipping, self.clipping) + self.clipping]


class RelPosCausalSelfAttention(CausalSelfAttention):
    """Causal self-attention with relative positions (RETURNN frontend's RelPosCausalSelfAttention,
    Transformer-XL style by default): frame i attends to frames j <= i with
    score(i, j) = ((q_i + u) . k_j + (q_i + v) . P[j - i]) / sqrt(dk).

    Options as rf's: with_linear_pos (P = linear_pos(pe), Linear(in_dim, key_dim_total, or key_dim_per_head
    when not separate_pos_emb_per_head), no bias; else pe itself over key_dim_total / key_dim_per_head),
    with_pos_bias (pos_bias_u, pos_bias_v over (heads, key_dim_per_head), Glorot; else no u, v),
    learnable_pos_emb (pe from a learned table `learned_pos_emb.pos_emb`, distances clipped to
    ±learnable_pos_emb_clipping; else sinusoidal, dt.relative_positional_encoding), separate_pos_emb_per_head
    (P split into heads; else one P shared by all heads), pos_emb_dropout (on pe, training only).
    qkv and proj as SelfAttention's.

    forward(x, axis=time, state=None) -> (y, None): the full sequence with a causal mask (valid frames never
    see padding; x's padding is zeroed first, so NaN there reaches no gradient).
    forward(x, axis=None, state=) -> (y, new_state): one step (x without a time dim), the step's query at
    distance 0 from its own key and -n from the first of n frames of history; state None (or
    default_initial_state()) before the first step. Step by step gives, frame by frame, what the full
    sequence gives."""

    def __init__(self, in_dim: Dim, proj_dim: Optional[Dim], *, key_dim_total: Dim, value_dim_total: Dim,
                 num_heads: Union[int, Dim], with_bias: bool = True, with_linear_pos: bool = True,
                 with_pos_bias: bool = True, learnable_pos_emb: bool = False, learnable_pos_emb_clipping: int = 16,
                 separate_pos_emb_per_head: bool = True, pos_emb_dropout: float = 0.0, att_dropout: float = 0.1,
                 dtype="float32", device=None):
        super().__init__(in_dim, proj_dim, key_dim_total=key_dim_total, value_dim_total=value_dim_total,
                         num_heads=num_heads, att_dropout=att_dropout, with_bias=with_bias, dtype=dtype, device=device)
        caller = f"{type(self).__name__}()"
        clip = learnable_pos_emb_clipping
        if isinstance(clip, bool) or not isinstance(clip, int) or clip < 0:
            raise ValueError(f"{caller}: learnable_pos_emb_clipping must be an int >= 0, got {clip!r}")
        self.separate_pos_emb_per_head = bool(separate_pos_emb_per_head)
        pos_dim = self.key_dim_total if separate_pos_emb_per_head else self.key_dim_per_head
        self.pos_emb_feat_dim = in_dim if with_linear_pos else pos_dim
        kw = dict(dtype=dtype, device=device)
        self.linear_pos = Linear(in_dim, pos_dim, with_bias=False, **kw) if with_linear_pos else None
        self.learned_pos_emb = (_LearnedRelPos(self.pos_emb_feat_dim, clipping=clip, **kw) if learnable_pos_emb
                                else None)
        if with_pos_bias:
            shape = (self.heads, self.key_dim_per_head)
            self.pos_bias_u = Parameter(shape, dtype, init=_init.Glorot(), device=device,
                                        in_dims=(self.key_dim_per_head,), out_dims=(self.heads,))
            self.pos_bias_v = Parameter(shape, dtype, init=_init.Glorot(), device=device,
                                        in_dims=(self.key_dim_per_head,), out_dims=(self.heads,))
        else:
            self.pos_bias_u = self.pos_bias_v = None
        self.pos_emb_dropout = pos_emb_dropout

    def _pos(self, distances_from: int, count: int, like: torch.Tensor) -> torch.Tensor:
        """P for the distances distances_from, ..., distances_from + count - 1: raw (H or 1, dk, count)."""
        if self.learned_pos_emb is not None:
            distances = torch.arange(distances_from, distances_from + count, device=like.device)
            pe = self.learned_pos_emb(distances)
        else:
            # rows r encode r - (q - 1) - offset: q = 1 - distances_from, kv = count + distances_from
            q = 1 - distances_from
            pe = relative_positional_encoding_raw(q, count - q + 1, self.pos_emb_feat_dim.size, dtype=like.dtype,
                                                  device=like.device)
        if self.training and self.pos_emb_dropout:
            pe = F.dropout(pe, self.pos_emb_dropout, True)
        if self.linear_pos is not None:
            rel = Dim(None, name="rel_pos")  # size from pe
            pos = self.linear_pos(Tensor(pe, (rel, self.pos_emb_feat_dim)))
            pe = pos.raw if pos.dims[0] is rel else pos.raw_aligned((rel, self.linear_pos.out_dim))
        if self.separate_pos_emb_per_head:
            return pe.view(count, self.heads.size, self.key_dim_per_head.size).permute(1, 2, 0)
        return pe.t()[None]

    def _attend(self, q, k, v, pos, causal: bool) -> torch.Tensor:
        """q (*lead, H, Tq, dk), k and v (*lead, H, Tk, d), pos (H or 1, dk, R): the attention output."""
        u = self.pos_bias_u.raw[:, None, :] if self.pos_bias_u is not None else None
        w = self.pos_bias_v.raw[:, None, :] if self.pos_bias_v is not None else None
        ac = torch.matmul(q + u if u is not None else q, k.transpose(-2, -1))
        bd = torch.matmul(q + w if w is not None else q, pos)
        if causal:
            bd = rel_shift(bd)  # (.., T, 2T-1) -> (.., T, T): column j at distance j - i
        scores = (ac + bd) * (self.key_dim_per_head.size ** -0.5)
        if causal:
            t = scores.shape[-1]
            future = torch.ones(t, t, dtype=torch.bool, device=scores.device).triu(1)
            scores = scores.masked_fill(future, torch.finfo(scores.dtype).min)
        att = torch.softmax(scores, dim=-1)
        if self.training and self.att_dropout:
            att = F.dropout(att, self.att_dropout, True)
        return torch.matmul(att, v)

    def forward(self, x: Tensor, *, axis: Optional[Dim],
                state: Optional[CausalSelfAttentionState] = None) -> Tuple[Tensor, Optional[CausalSelfAttentionState]]:
        lead = _check_x(self, x, self.in_dim, axis)
        if axis is not None:
            if state is not None and not _is_empty(state):
                raise ValueError(f"{type(self).__name__}(): a state is only for step-by-step calls (axis=None) or an "
                                 f"empty initial state; got axis {dim_str(axis)} and a state with history")
            if axis.lengths is not None and self.zero_padding:
                # x's padding zeroed before the projection (not after, as SelfAttention does): no NaN * 0 in
                # the attention then, nor in the projection's weight gradient. (A container whose padding is
                # finite turns zero_padding off.)
                x = x.copy_masked(0.0)
            q, k, v = self._project_qkv(x, lead, axis)
            t = q.shape[-2]
            if t == 0:
                return self._output(v.new_zeros(v.shape), lead, axis), None
            return self._output(self._attend(q, k, v, self._pos(-(t - 1), 2 * t - 1, q), True), lead, axis), None
        q, k, v = self._project_qkv(x, lead, None)
        if state is not None:
            k_prev, v_prev = self._state_raws(state, lead, x)
            k = torch.cat((k_prev.expand(*k.shape[:-2], -1, -1), k), dim=-2)
            v = torch.cat((v_prev.expand(*v.shape[:-2], -1, -1), v), dim=-2)
        n = k.shape[-2]  # frames so far, this one included: distances -(n - 1) .. 0
        out = self._attend(q, k, v, self._pos(-(n - 1), n, q), False)
        return self._output(out, lead, None), self._new_state(k, v, lead)

    def extra_repr(self) -> str:
        kind = "learned" if self.learned_pos_emb is not None else "sinusoidal"
        return super().extra_repr() + f", pos_emb={kind!r}"
