"""rf attention modules (RETURNN frontend's API, parameter names and layouts) on torch's fused attention.

SelfAttentionBase: `qkv` (rf.Linear in_dim -> 2 * key_dim_total + value_dim_total, per head [q, k, v] as
rf's split_dims + split gives them) and `proj` (value_dim_total -> proj_dim, or none). SelfAttention,
CausalSelfAttention (+ CausalSelfAttentionState, an rf.State: k_accum, v_accum over (batch dims..., heads,
accum_axis, per-head dim), accum_axis), RotaryPosSelfAttention, RotaryPosCausalSelfAttention,
RelPosSelfAttention and RelPosCausalSelfAttention (rf's flags: with_linear_pos -> `linear_pos`, with_pos_bias
-> `pos_bias_u`/`pos_bias_v` (heads, key_dim_per_head), learnable_pos_emb -> `learned_pos_emb.pos_emb`
(2 * clipping + 1, feat)), CrossAttention (`q`, `kv`, `proj`; transform_encoder + __call__(q, encoder)),
LearnedRelativePositionalEncoding.

The math runs on raws (*batch dims, heads, time, per-head dim): one projection, F.scaled_dot_product_attention
(or the Transformer-XL scores for the rel-pos ones), keys beyond each sequence's length masked, q/k/v of
padding frames zeroed first (NaN padding reaches no valid value or gradient). Attention dropout only in
training (the run context's train flag). forward_qkv / attention give rf's Tensor-level API for subclasses.

Causal modules return (output, state) as rf's: a full sequence from scratch (or from an empty state) is one
causal attention, its state the sequence's keys and values over `axis`; axis=single_step_dim is one step
appended to the state's history (a history with lengths, e.g. of a full-sequence prefix, gets the step after
each sequence's last frame); a full sequence after a static history sees all of it. Rotary and rel-pos
variants keep rotated keys in the state (the outputs are rf's; the state's contents are not compared).
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F

from .. import _C
from .._C import Dim, Tensor
from .._core import tracing as _tracing
from .._core.args import dim_str, dims_str
from ..nn.attention import FrameMaskCache, _merge_heads, _rope_base, _split_heads, rel_shift
from ..ops.positional import relative_positional_encoding_raw, rope_raw, sinusoidal_raw
from ._dims import single_step_dim
from . import init as _init
from .linear import Linear
from .module import Module
from .parameter import Parameter
from .state import State

__all__ = ["SelfAttentionBase", "SelfAttention", "CausalSelfAttention", "CausalSelfAttentionState",
           "RotaryPosSelfAttention", "RotaryPosCausalSelfAttention", "RelPosSelfAttention",
           "RelPosCausalSelfAttention", "CrossAttention", "LearnedRelativePositionalEncoding"]


def _heads(num_heads: Union[int, Dim], caller: str) -> Dim:
    if isinstance(num_heads, Dim):
        return num_heads
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"{caller}: num_heads must be an int >= 1 or a Dim, got {num_heads!r}")
    return Dim(num_heads, name="num_heads")


def _per_head(total: Dim, heads: Dim, what: str, caller: str) -> Dim:
    if not isinstance(total, Dim) or total.size is None or total.size % heads.size:
        raise ValueError(f"{caller}: {what} {total!r} must be a static Dim divisible by num_heads {heads.size}")
    return total // heads.size


def _is_step(axis) -> bool:
    return axis is None or axis is single_step_dim


def _lead(module, x, in_dim: Dim, axis: Optional[Dim], what: str = "source") -> tuple:
    name = type(module).__name__
    if not isinstance(x, Tensor):
        raise TypeError(f"dimtorch.rf.{name}(): {what} must be a dimtorch.Tensor, got {type(x).__name__}")
    if in_dim not in x.dims:
        raise ValueError(f"dimtorch.rf.{name}(): {what} lacks the in_dim {dim_str(in_dim)} ({what} dims: "
                         f"{dims_str(x.dims)})")
    if axis is not None and axis not in x.dims:
        raise ValueError(f"dimtorch.rf.{name}(): {what} lacks the axis {dim_str(axis)} ({what} dims: "
                         f"{dims_str(x.dims)})")
    return tuple(d for d in x.dims if d is not in_dim and d is not axis)


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.matmul of raws (*batch, m, k) and (*batch, k, n) or (1.., k, n) (one matrix for all, as relative
    positions shared by the heads): one bmm, or one mm over a's rows, on views of the operands where their
    strides allow. torch.matmul expands and reshapes each operand and its result first (~4 more ops and
    autograd nodes a product; three products a RelPos attention)."""
    if a.dim() >= 3 and 3 <= b.dim() <= a.dim():
        batch, m, k, n = a.shape[:-2], a.shape[-2], a.shape[-1], b.shape[-1]
        if all(s == 1 for s in b.shape[:-2]):
            return torch.mm(a.reshape(-1, k), b.reshape(k, n)).view(*batch, m, n)
        if b.dim() == a.dim() and b.shape[:-2] == batch:
            return torch.bmm(a.reshape(-1, m, k), b.reshape(-1, k, n)).view(*batch, m, n)
    return torch.matmul(a, b)


def _aligned(t: Tensor, order: tuple) -> torch.Tensor:
    return t.raw if t.dims == order else t.raw_aligned(order)


class SelfAttentionBase(Module):
    """SelfAttentionBase(in_dim, proj_dim, *, key_dim_total, value_dim_total, num_heads, with_bias=True,
    att_dropout=0.1, att_dropout_broadcast=None): the parameters and the Tensor-level helpers."""

    def __init__(self, in_dim: Dim, proj_dim: Optional[Dim], *, key_dim_total: Dim, value_dim_total: Dim,
                 num_heads: Union[int, Dim], with_bias: bool = True, att_dropout: float = 0.1,
                 att_dropout_broadcast: Optional[bool] = None):
        super().__init__()
        caller = f"dimtorch.rf.{type(self).__name__}()"
        self.in_dim = in_dim
        self.out_dim = proj_dim if proj_dim else value_dim_total
        self.num_heads = _heads(num_heads, caller)
        self.key_dim_total, self.value_dim_total = key_dim_total, value_dim_total
        self.key_dim_per_head = _per_head(key_dim_total, self.num_heads, "key_dim_total", caller)
        self.value_dim_per_head = _per_head(value_dim_total, self.num_heads, "value_dim_total", caller)
        self.qkv_dim_total = Dim(2 * key_dim_total.size + value_dim_total.size, name="qkv")
        self.qkv_dim_per_head = Dim(2 * self.key_dim_per_head.size + self.value_dim_per_head.size,
                                    name="qkv_per_head")
        self.qkv = Linear(in_dim, self.qkv_dim_total, with_bias=with_bias)
        self.proj = Linear(value_dim_total, proj_dim, with_bias=with_bias) if proj_dim else None
        self.att_dropout = att_dropout
        self.att_dropout_broadcast = bool(att_dropout_broadcast)
        self._frame_mask_cache = FrameMaskCache()
        # x's padding frames are zeroed before the projection (one where), so that NaN there reaches neither
        # the attention nor the projection's weight gradient; a container that keeps its padding finite
        # (the encoders here) turns this off for its layers.
        self.zero_padding = True

    # -- raw helpers ---------------------------------------------------------------------------------
    def _valid(self, axis: Optional[Dim], lead: tuple, x: Tensor) -> Optional[torch.Tensor]:
        return self._frame_mask_cache.get(axis, lead, x.raw.device, x) if axis is not None else None

    def _qkv_raws(self, x: Tensor, lead: tuple, axis: Optional[Dim], valid: Optional[torch.Tensor],
                  heads_contiguous: bool = False):
        """q, k, v raws (*lead, H, T, d) (T = 1 for a step); x's padding frames zeroed first (zero_padding).
        heads_contiguous: (*lead, H, T, 3d) made contiguous first, one copy, so that the products (_matmul) take
        q, k and v as views (strided rows) instead of copying each operand of each product."""
        if valid is not None and self.zero_padding:
            x = x.copy_masked(0.0, (axis,))
        qkv = self.qkv(x)
        raw = _aligned(qkv, lead + ((axis,) if axis is not None else ()) + (self.qkv_dim_total,))
        if axis is None:
            raw = raw.unsqueeze(-2)
        dk, dv = self.key_dim_per_head.size, self.value_dim_per_head.size
        if heads_contiguous:
            raw = raw.reshape(raw.shape[:-1] + (self.num_heads.size, 2 * dk + dv)).transpose(-3, -2).contiguous()
            return raw.split_with_sizes((dk, dk, dv), -1)
        return _split_heads(raw, self.num_heads.size, (dk, dk, dv))

    def _output(self, out: torch.Tensor, lead: tuple, axis: Optional[Dim]) -> Tensor:
        """(*lead, H, T, dv) -> Tensor over (*lead, axis, value_dim_total), then proj."""
        out = _merge_heads(out)
        if axis is None:
            out = out.squeeze(-2)
        y = Tensor(out, lead + ((axis,) if axis is not None else ()) + (self.value_dim_total,),
                   feature_dim=self.value_dim_total)
        return self.proj(y) if self.proj is not None else y

    def _dropout_p(self) -> float:
        return self.att_dropout if self.att_dropout and self.training else 0.0

    # -- rf's Tensor-level API -----------------------------------------------------------------------
    def forward_qkv(self, source: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """q, k, v as Tensors over source's dims with (num_heads, key/value_dim_per_head) for in_dim."""
        qkv = self.qkv(source)
        qkv = _C.split_dims(qkv, axis=self.qkv_dim_total, dims=(self.num_heads, self.qkv_dim_per_head))
        q, k, v = _C.split(qkv, axis=self.qkv_dim_per_head,
                           out_dims=(self.key_dim_per_head, self.key_dim_per_head, self.value_dim_per_head))
        return q, k, v

    def attention(self, q: Tensor, k: Tensor, v: Tensor, *, kv_axis: Dim) -> Tensor:
        """dot attention of q over k, v along kv_axis (keys beyond its lengths masked), heads merged, proj."""
        from ..ops.attention import dot_attention
        att = dot_attention(q, k, v, key_dim=self.key_dim_per_head, axis=kv_axis, att_dropout=self.att_dropout,
                            training=self.training)
        out, _ = _C.merge_dims(att, dims=(self.num_heads, self.value_dim_per_head), out_dim=self.value_dim_total)
        return self.proj(out) if self.proj is not None else out


class SelfAttention(SelfAttentionBase):
    """Self-attention over `axis`: __call__(source, *, axis) -> Tensor over source's dims with out_dim."""

    def __call__(self, source: Tensor, *, axis: Dim) -> Tensor:
        lead = _lead(self, source, self.in_dim, axis)
        valid = self._valid(axis, lead, source)
        q, k, v = self._qkv_raws(source, lead, axis, valid)
        q, k = self._rotate(q, k, 0)
        mask = valid[..., None, None, :] if valid is not None else None
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self._dropout_p())
        return self._output(out, lead, axis)

    def _rotate(self, q, k, start: int):
        return q, k


class CausalSelfAttentionState(State):
    """The history of a causal self-attention: k_accum, v_accum (Tensors over batch dims, num_heads,
    accum_axis, per-head dim) and accum_axis."""

    def __init__(self, *_args, k_accum: Tensor = None, v_accum: Tensor = None, accum_axis: Dim = None):
        super().__init__(*_args)
        if not _args:
            self.k_accum = k_accum
            self.v_accum = v_accum
            self.accum_axis = accum_axis


class CausalSelfAttention(SelfAttentionBase):
    """Causal self-attention: __call__(source, axis, *, state=None) -> (output, CausalSelfAttentionState);
    axis=single_step_dim for one step (see the module docstring)."""

    def default_initial_state(self, *, batch_dims: Sequence[Dim]) -> CausalSelfAttentionState:
        """An empty history (accum_axis of size 0). Batch dims without a size get size 1 (broadcast)."""
        batch_dims = tuple(batch_dims)
        w = self.qkv.weight.raw
        accum = Dim(0, name="self_att_expand_dim_init")
        sizes = tuple(d.get_max_size() or 1 for d in batch_dims) + (self.num_heads.size, 0)
        k = w.new_zeros(sizes + (self.key_dim_per_head.size,))
        v = w.new_zeros(sizes + (self.value_dim_per_head.size,))
        return CausalSelfAttentionState(
            k_accum=Tensor(k, batch_dims + (self.num_heads, accum, self.key_dim_per_head)),
            v_accum=Tensor(v, batch_dims + (self.num_heads, accum, self.value_dim_per_head)), accum_axis=accum)

    # -- hooks of the variants ---------------------------------------------------------------------
    def _attend_full(self, q, k, v):
        """From scratch: frame i sees frames <= i (raws (*lead, H, T, d))."""
        return F.scaled_dot_product_attention(q, k, v, dropout_p=self._dropout_p(), is_causal=True)

    def _attend_after(self, q, k, v, prev: int):
        """k, v: `prev` frames of history then the chunk's; chunk frame i sees the history and chunk frames <= i."""
        t = q.shape[-2]
        mask = torch.ones(t, prev + t, dtype=torch.bool, device=q.device)
        mask[:, prev:] = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self._dropout_p())

    def _attend_step(self, q, k, v, key_mask):
        """One query (*lead, H, 1, dk) over the history with this step (key_mask: None or (*lead, n) bool)."""
        mask = key_mask[..., None, None, :] if key_mask is not None else None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self._dropout_p())

    def _new_keys(self, k, start: int):
        """The keys to store for frames start, start + 1, ... (rotated ones for RoPE)."""
        return k

    # -- the call ------------------------------------------------------------------------------------
    def __call__(self, source: Tensor, axis: Dim, *, state: Optional[CausalSelfAttentionState] = None
                 ) -> Tuple[Tensor, CausalSelfAttentionState]:
        caller = f"dimtorch.rf.{type(self).__name__}()"
        step = _is_step(axis)
        lead = _lead(self, source, self.in_dim, None if step else axis)
        history = self._history(state, lead, source, caller)
        kd, vd, heads = self.key_dim_per_head, self.value_dim_per_head, self.num_heads
        if not step:
            valid = self._valid(axis, lead, source)
            q, k, v = self._qkv_raws(source, lead, axis, valid)
            if history is None:
                k = self._new_keys(k, 0)
                out = self._attend_full(q, k, v)
                accum = axis
            else:
                k_prev, v_prev, accum_prev = history
                if accum_prev.lengths is not None:
                    k, v, accum, mask = self._concat_per_sequence(q, k, v, history, lead, axis, caller)
                    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self._dropout_p())
                    new = CausalSelfAttentionState(k_accum=Tensor(k, lead + (heads, accum, kd)),
                                                   v_accum=Tensor(v, lead + (heads, accum, vd)), accum_axis=accum)
                    return self._output(out, lead, axis), new
                prev = k_prev.shape[-2]
                k = torch.cat((k_prev.expand(*k.shape[:-2], -1, -1), self._new_keys(k, prev)), dim=-2)
                v = torch.cat((v_prev.expand(*v.shape[:-2], -1, -1), v), dim=-2)
                out = self._attend_after(q, k, v, prev)
                accum = accum_prev + axis
            new = CausalSelfAttentionState(k_accum=Tensor(k, lead + (heads, accum, kd)),
                                           v_accum=Tensor(v, lead + (heads, accum, vd)), accum_axis=accum)
            return self._output(out, lead, axis), new
        q, k, v = self._qkv_raws(source, lead, None, None)
        key_mask = None
        if history is None:
            k = self._new_keys(k, 0)
            accum = Dim(1, name="self_att_accum")
        else:
            k_prev, v_prev, accum_prev = history
            if accum_prev.lengths is None:
                prev = k_prev.shape[-2]
                k = torch.cat((k_prev.expand(*k.shape[:-2], -1, -1), self._new_keys(k, prev)), dim=-2)
                v = torch.cat((v_prev.expand(*v.shape[:-2], -1, -1), v), dim=-2)
                accum = Dim(prev + 1, name="self_att_accum")
            else:
                q, k = self._step_after_lengths(q, k, accum_prev, lead, caller)
                k, v, accum, key_mask = self._append_per_sequence(k, v, history, lead, caller)
                out = CausalSelfAttention._attend_step(self, q, k, v, key_mask)
                new = CausalSelfAttentionState(k_accum=Tensor(k, lead + (heads, accum, kd)),
                                               v_accum=Tensor(v, lead + (heads, accum, vd)), accum_axis=accum)
                return self._output(out, lead, None), new
        out = self._attend_step(q, k, v, key_mask)
        new = CausalSelfAttentionState(k_accum=Tensor(k, lead + (heads, accum, kd)),
                                       v_accum=Tensor(v, lead + (heads, accum, vd)), accum_axis=accum)
        return self._output(out, lead, None), new

    def _history(self, state, lead: tuple, x: Tensor, caller: str):
        """(k raw, v raw (*lead or 1s, H, n, d), accum_axis) of the state, None when it is empty or None."""
        if state is None:
            return None
        accum = state.accum_axis
        if accum.lengths is None and accum.size == 0:
            return None
        try:
            k = self._state_raw(state.k_accum, accum, self.key_dim_per_head, lead)
            v = self._state_raw(state.v_accum, accum, self.value_dim_per_head, lead)
        except (ValueError, TypeError, AttributeError) as e:
            got = dims_str(state.k_accum.dims) if isinstance(getattr(state, "k_accum", None), Tensor) else repr(state)
            raise ValueError(f"{caller}: the state (k_accum dims: {got}) does not fit source (dims: "
                             f"{dims_str(x.dims)}): {e}") from None
        return k, v, accum

    def _state_raw(self, t: Tensor, accum: Dim, per_head: Dim, lead: tuple) -> torch.Tensor:
        """t's raw over (*lead, H, accum, d); lead dims the state lacks (a broadcast batch) as size 1."""
        extra = [d for d in t.dims if d not in lead and d is not self.num_heads and d is not accum and d is not per_head]
        if extra:
            raise ValueError(f"dims ({dims_str(extra)}) are not among the source's batch dims")
        return t.raw_aligned(lead + (self.num_heads, accum, per_head))

    def _concat_per_sequence(self, q, k, v, history, lead: tuple, axis: Dim, caller: str):
        """A chunk's k, v after each sequence's history of its own length (dt.concat: hist + axis, each
        sequence's frames right after its history), and the mask: chunk frame i of a sequence with a
        history of n frames sees keys 0..n+i (so never a padded key of a valid query)."""
        from ..ops.concat import concat
        if type(self)._new_keys is not CausalSelfAttention._new_keys or \
                type(self)._attend_after is not CausalSelfAttention._attend_after:
            raise NotImplementedError(f"{caller}: a full sequence after a history with lengths: not yet for "
                                      f"positional variants")
        k_prev, v_prev, hist = history
        heads, kd, vd = self.num_heads, self.key_dim_per_head, self.value_dim_per_head
        k_prev = k_prev.expand(*k.shape[:-2], -1, -1)
        v_prev = v_prev.expand(*v.shape[:-2], -1, -1)
        k_new, new_dim = concat((Tensor(k_prev, lead + (heads, hist, kd)), hist), (Tensor(k, lead + (heads, axis, kd)), axis))
        v_new, _ = concat((Tensor(v_prev, lead + (heads, hist, vd)), hist), (Tensor(v, lead + (heads, axis, vd)), axis),
                          out_dim=new_dim)
        k = k_new.raw_aligned(lead + (heads, new_dim, kd))
        v = v_new.raw_aligned(lead + (heads, new_dim, vd))
        n = hist.lengths.raw_aligned(lead).to(device=q.device, non_blocking=True)  # host lengths, sent once
        i = torch.arange(q.shape[-2], device=q.device)
        j = torch.arange(k.shape[-2], device=q.device)
        mask = j <= (n[..., None, None] + i[:, None])  # (*lead, T, hist + T)
        return k, v, new_dim, mask.unsqueeze(-3)

    def _step_after_lengths(self, q, k, hist: Dim, lead: tuple, caller: str):
        """q and the new key k (*lead, H, 1, d) of a step after a history with lengths, each sequence's
        frame at its own position (hist's length): the hook of positional variants; as they are here."""
        if type(self)._new_keys is not CausalSelfAttention._new_keys or \
                type(self)._attend_step is not CausalSelfAttention._attend_step:
            raise NotImplementedError(f"{caller}: a step after a history with lengths (a full-sequence prefix of "
                                      f"unequal lengths): not yet for this positional variant")
        return q, k

    def _append_per_sequence(self, k, v, history, lead: tuple, caller: str):
        """This step's k, v after each sequence's last frame of a history with lengths (dt.cum_concat_step)."""
        from ..ops.concat import cum_concat_step
        k_prev, v_prev, accum = history
        heads, kd, vd = self.num_heads, self.key_dim_per_head, self.value_dim_per_head
        k_prev = k_prev.expand(*k.shape[:-2], -1, -1)
        v_prev = v_prev.expand(*v.shape[:-2], -1, -1)
        k_new, new_dim = cum_concat_step(Tensor(k.squeeze(-2), lead + (heads, kd)),
                                         prev_accum=Tensor(k_prev, lead + (heads, accum, kd)), axis=accum)
        v_new, _ = cum_concat_step(Tensor(v.squeeze(-2), lead + (heads, vd)),
                                   prev_accum=Tensor(v_prev, lead + (heads, accum, vd)), axis=accum,
                                   out_spatial_dim=new_dim)
        k = k_new.raw_aligned(lead + (heads, new_dim, kd))
        v = v_new.raw_aligned(lead + (heads, new_dim, vd))
        order = lead + (new_dim,)
        mask = new_dim.get_mask(dims_order=order, device=k.device)
        mask = mask.raw_aligned(order).expand(*k.shape[:-3], k.shape[-2])
        return k, v, new_dim, mask


class _Rotary:
    """RoPE on queries and keys (rf's base 10000^(1 - 2 / dk)), positions from the history's length."""

    def _rope(self, x: torch.Tensor, start: int) -> torch.Tensor:
        dk = self.key_dim_per_head.size
        pe = sinusoidal_raw(x.shape[-2], dk, start, _rope_base(self.key_dim_per_head), dtype=x.dtype, device=x.device)
        sin, cos = pe.chunk(2, dim=-1)
        return rope_raw(x, sin, cos)

    def _rotate(self, q, k, start: int):
        return self._rope(q, start), self._rope(k, start)

    def _rope_at(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """RoPE of one frame per sequence, x (*lead, H, 1, dk), at host int `positions` (*lead, or 1s)."""
        dk = self.key_dim_per_head.size
        n = int(positions.max()) + 1 if positions.numel() else 1
        pe = sinusoidal_raw(n, dk, 0, _rope_base(self.key_dim_per_head), dtype=x.dtype, device=x.device)
        pe = pe[positions.to(device=x.device, dtype=torch.long, non_blocking=True)][..., None, None, :]
        sin, cos = pe.chunk(2, dim=-1)
        return rope_raw(x, sin, cos)

    def _step_after_lengths(self, q, k, hist: Dim, lead: tuple, caller: str):
        positions = hist.lengths.raw_aligned(lead)  # each sequence's new frame follows its own history
        return self._rope_at(q, positions), self._rope_at(k, positions)


class RotaryPosSelfAttention(_Rotary, SelfAttention):
    """SelfAttention with rotary position embeddings on queries and keys."""


class RotaryPosCausalSelfAttention(_Rotary, CausalSelfAttention):
    """CausalSelfAttention with rotary position embeddings (the state keeps rotated keys)."""

    def _attend_full(self, q, k, v):  # k is rotated by _new_keys
        return super()._attend_full(self._rope(q, 0), k, v)

    def _attend_after(self, q, k, v, prev: int):
        return super()._attend_after(self._rope(q, prev), k, v, prev)

    def _attend_step(self, q, k, v, key_mask):
        return super()._attend_step(self._rope(q, k.shape[-2] - 1), k, v, key_mask)

    def _new_keys(self, k, start: int):
        return self._rope(k, start)


# LearnedRelativePositionalEncoding.range_rows's row indices (int64, tiny) by (clipping, causal, first, count,
# device)
_RANGE_ROWS: dict = {}


class LearnedRelativePositionalEncoding(Module):
    """LearnedRelativePositionalEncoding(feat_dim, *, clipping=16, dtype=None, causal=False): a table `pos_emb`
    over (2 * clipping + 1 (clipping + 1 when causal), feat_dim), zeros initially (as rf's); the relative
    position d = key - query reads row clip(d) + clipping.
    __call__(*, query_spatial_dim, key_value_spatial_dim, query_offset=None) -> (encoding over (out dim,
    feat_dim), out dim): out dim of size q + kv - 1, row r the distance r - (q - 1) - query_offset (for
    query_spatial_dim=single_step_dim: the kv positions relative to the last one)."""

    def __init__(self, feat_dim: Dim, *, clipping: int = 16, dtype: Optional[str] = None, causal: bool = False):
        super().__init__()
        self.feat_dim, self.clipping, self.causal = feat_dim, clipping, causal
        self.clipped_spatial_dim = Dim((1 if causal else 2) * clipping + 1, name="learned-rel-pos")
        self.pos_emb = Parameter((self.clipped_spatial_dim, feat_dim), dtype=dtype)

    def rows(self, distances: torch.Tensor) -> torch.Tensor:
        """pos_emb's rows for an int raw of distances (key minus query position)."""
        return self.pos_emb.raw[self._row_index(distances)]

    def _row_index(self, distances: torch.Tensor) -> torch.Tensor:
        """pos_emb's row of each distance: clipped to [-clipping, clipping] (to 0 above when causal), shifted."""
        return distances.clamp(-self.clipping, 0 if self.causal else self.clipping) + self.clipping

    def range_rows(self, first: int, count: int) -> torch.Tensor:
        """rows() of the distances first .. first + count - 1 (a relative attention's, each call): one
        index_select by row indices kept per (clipping, causal, first, count, device), where making them costs
        five small ops a call (eagerly; while tracing they are made in the graph)."""
        raw = self.pos_emb.raw
        if type(first) is not int or type(count) is not int or _tracing.tracing():
            return self.rows(torch.arange(first, first + count, device=raw.device))
        key = (self.clipping, self.causal, first, count, raw.device)
        index = _RANGE_ROWS.get(key)
        if index is None:
            index = self._row_index(torch.arange(first, first + count, device=raw.device))
            if len(_RANGE_ROWS) >= 64:  # (a few sizes a run: the longest sequences of its batches)
                _RANGE_ROWS.clear()
            _RANGE_ROWS[key] = index
        return raw.index_select(0, index)

    def __call__(self, *, query_spatial_dim: Dim, key_value_spatial_dim: Dim,
                 query_offset: Optional[int] = None) -> Tuple[Tensor, Dim]:
        kv = key_value_spatial_dim.get_max_size()
        dev = self.pos_emb.raw.device
        if _is_step(query_spatial_dim):
            distances = torch.arange(kv, device=dev) - (kv - 1)
            out_dim = key_value_spatial_dim
        else:
            q = query_spatial_dim.get_max_size()
            distances = torch.arange(q - 1 + kv, device=dev) - (q - 1) - (query_offset or 0)
            out_dim = Dim(q - 1 + kv, name=f"{query_spatial_dim.name}+{key_value_spatial_dim.name}-1")
        return Tensor(self.rows(distances), (out_dim, self.feat_dim), feature_dim=self.feat_dim), out_dim

    def full_matrix(self, *, query_spatial_dim: Dim, key_value_spatial_dim: Dim,
                    query_offset: Optional[int] = None) -> Tensor:
        """The encoding of every (query, key) pair: over (query, key, feat_dim)."""
        kv = key_value_spatial_dim.get_max_size()
        dev = self.pos_emb.raw.device
        if _is_step(query_spatial_dim):
            d = torch.arange(kv, device=dev) - (kv - 1)
            return Tensor(self.rows(d), (key_value_spatial_dim, self.feat_dim))
        if query_spatial_dim is key_value_spatial_dim:
            raise ValueError("dimtorch.rf.LearnedRelativePositionalEncoding.full_matrix(): a Tensor cannot hold one dim "
                             "twice: give the keys another dim than the queries")
        q = query_spatial_dim.get_max_size()
        d = torch.arange(kv, device=dev)[None, :] - (torch.arange(q, device=dev)[:, None] + (query_offset or 0))
        return Tensor(self.rows(d), (query_spatial_dim, key_value_spatial_dim, self.feat_dim))


class _RelPos:
    """The Transformer-XL scores of rf's RelPosSelfAttention (flags as rf's, see the module docstring)."""

    def _init_rel_pos(self, *, with_linear_pos, with_pos_bias, learnable_pos_emb, learnable_pos_emb_clipping,
                      separate_pos_emb_per_head, pos_emb_dropout):
        self.separate_pos_emb_per_head = separate_pos_emb_per_head
        if with_linear_pos:
            self.pos_emb_feat_dim = self.in_dim
        elif separate_pos_emb_per_head:
            self.pos_emb_feat_dim = self.key_dim_total
        else:
            self.pos_emb_feat_dim = self.key_dim_per_head
        self.linear_pos = None
        if with_linear_pos:
            self.linear_pos = Linear(self.in_dim, self.key_dim_total if separate_pos_emb_per_head
                                     else self.key_dim_per_head, with_bias=False)
        self.learned_pos_emb = None
        if learnable_pos_emb:
            self.learned_pos_emb = LearnedRelativePositionalEncoding(self.pos_emb_feat_dim,
                                                                     clipping=learnable_pos_emb_clipping)
        self.pos_bias_u = self.pos_bias_v = None
        if with_pos_bias:
            self.pos_bias_u = Parameter((self.num_heads, self.key_dim_per_head))
            self.pos_bias_v = Parameter((self.num_heads, self.key_dim_per_head))
            self.pos_bias_u.initial = _init.Glorot()
            self.pos_bias_v.initial = _init.Glorot()
        self.pos_emb_dropout = pos_emb_dropout

    def _pos(self, first: int, count: int, like: torch.Tensor) -> torch.Tensor:
        """The position encodings of the distances first .. first + count - 1: raw (H or 1, dk, count)."""
        if self.learned_pos_emb is not None:
            pe = self.learned_pos_emb.range_rows(first, count)
        else:
            q = 1 - first  # rows of relative_positional_encoding_raw(q, kv) encode r - (q - 1)
            pe = relative_positional_encoding_raw(q, count - q + 1, self.pos_emb_feat_dim.size, dtype=like.dtype,
                                                  device=like.device)
        if self.pos_emb_dropout and self.training:
            pe = torch.dropout(pe, self.pos_emb_dropout, True)
        if self.linear_pos is not None:
            rel = Dim(None, name="rel_pos")
            pos = self.linear_pos(Tensor(pe, (rel, self.pos_emb_feat_dim)))
            pe = _aligned(pos, (rel, self.linear_pos.out_dim))
        if self.separate_pos_emb_per_head:
            return pe.reshape(count, self.num_heads.size, self.key_dim_per_head.size).permute(1, 2, 0)
        return pe.t()[None]

    def _scores(self, q, k, pos, shift: bool):
        u = self.pos_bias_u.raw[:, None, :] if self.pos_bias_u is not None else None
        w = self.pos_bias_v.raw[:, None, :] if self.pos_bias_v is not None else None
        ac = _matmul(q + u if u is not None else q, k.transpose(-2, -1))
        bd = _matmul(q + w if w is not None else q, pos)
        if shift:
            bd = rel_shift(bd)  # (.., T, 2T-1) -> (.., T, T): column j at distance j - i
        return (ac + bd) * (self.key_dim_per_head.size ** -0.5)

    def _softmax_values(self, scores, v):
        att = torch.softmax(scores, dim=-1)
        if self.att_dropout and self.training:
            att = torch.dropout(att, self.att_dropout, True)  # (F.dropout's kernel, no wrapper)
        return _matmul(att, v)


class RelPosSelfAttention(_RelPos, SelfAttentionBase):
    """Self-attention with relative positions (Shaw et al. or Transformer-XL, by rf's flags):
    __call__(source, *, axis) -> Tensor."""

    def __init__(self, in_dim: Dim, proj_dim: Optional[Dim], *, key_dim_total: Dim, value_dim_total: Dim,
                 num_heads: Union[int, Dim], with_bias: bool = True, with_linear_pos: bool = True,
                 with_pos_bias: bool = True, learnable_pos_emb: bool = False, learnable_pos_emb_clipping: int = 16,
                 separate_pos_emb_per_head: bool = True, pos_emb_dropout: float = 0.0, att_dropout: float = 0.1):
        super().__init__(in_dim, proj_dim, key_dim_total=key_dim_total, value_dim_total=value_dim_total,
                         num_heads=num_heads, with_bias=with_bias, att_dropout=att_dropout)
        self._init_rel_pos(with_linear_pos=with_linear_pos, with_pos_bias=with_pos_bias,
                           learnable_pos_emb=learnable_pos_emb, learnable_pos_emb_clipping=learnable_pos_emb_clipping,
                           separate_pos_emb_per_head=separate_pos_emb_per_head, pos_emb_dropout=pos_emb_dropout)

    def __call__(self, source: Tensor, *, axis: Dim, **_kwargs) -> Tensor:
        lead = _lead(self, source, self.in_dim, axis)
        valid = self._valid(axis, lead, source)
        q, k, v = self._qkv_raws(source, lead, axis, valid, heads_contiguous=True)  # (q is in two products)
        t = q.shape[-2]
        if t == 0:
            return self._output(v.new_zeros(v.shape), lead, axis)
        scores = self._scores(q, k, self._pos(-(t - 1), 2 * t - 1, q), True)
        if valid is not None:  # a finite fill: a length-0 sequence stays finite
            scores = torch.where(valid[..., None, None, :], scores, torch.finfo(scores.dtype).min)
        return self._output(self._softmax_values(scores, v), lead, axis)


class RelPosCausalSelfAttention(_RelPos, CausalSelfAttention):
    """Causal self-attention with relative positions (rf's flags): as CausalSelfAttention."""

    def __init__(self, in_dim: Dim, proj_dim: Optional[Dim], *, key_dim_total: Dim, value_dim_total: Dim,
                 num_heads: Union[int, Dim], with_bias: bool = True, with_linear_pos: bool = True,
                 with_pos_bias: bool = True, learnable_pos_emb: bool = False, learnable_pos_emb_clipping: int = 16,
                 separate_pos_emb_per_head: bool = True, pos_emb_dropout: float = 0.0, att_dropout: float = 0.1):
        super().__init__(in_dim, proj_dim, key_dim_total=key_dim_total, value_dim_total=value_dim_total,
                         num_heads=num_heads, with_bias=with_bias, att_dropout=att_dropout)
        self._init_rel_pos(with_linear_pos=with_linear_pos, with_pos_bias=with_pos_bias,
                           learnable_pos_emb=learnable_pos_emb, learnable_pos_emb_clipping=learnable_pos_emb_clipping,
                           separate_pos_emb_per_head=separate_pos_emb_per_head, pos_emb_dropout=pos_emb_dropout)

    def _attend_full(self, q, k, v):
        t = q.shape[-2]
        if t == 0:
            return v.new_zeros(v.shape)
        scores = self._scores(q, k, self._pos(-(t - 1), 2 * t - 1, q), True)
        future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
        return self._softmax_values(scores.masked_fill(future, torch.finfo(scores.dtype).min), v)

    def _attend_after(self, q, k, v, prev: int):
        raise NotImplementedError(f"dimtorch.rf.{type(self).__name__}(): a full sequence after a history: not yet")

    def _attend_step(self, q, k, v, key_mask):
        n = k.shape[-2]  # frames so far, this one included: distances -(n - 1) .. 0
        scores = self._scores(q, k, self._pos(-(n - 1), n, q), False)
        if key_mask is not None:
            scores = torch.where(key_mask[..., None, None, :], scores, torch.finfo(scores.dtype).min)
        return self._softmax_values(scores, v)


class CrossAttention(Module):
    """CrossAttention(encoder_dim, query_in_dim, proj_dim, *, key_dim_total, value_dim_total, num_heads,
    with_bias=True, att_dropout=0.1, att_dropout_broadcast=None): `q` (query_in_dim -> key_dim_total,
    Glorot scale 1/2), `kv` (encoder_dim -> key_dim_total + value_dim_total, per head [k, v], Glorot scale
    3/4), `proj`. `enc = att.transform_encoder(encoder, axis=enc_spatial)` once, then `att(q, enc)` per query
    (q with or without a time dim; the encoder may lack some of q's batch dims, e.g. a beam)."""

    def __init__(self, encoder_dim: Dim, query_in_dim: Dim, proj_dim: Optional[Dim], *, key_dim_total: Dim,
                 value_dim_total: Dim, num_heads: Union[int, Dim], with_bias: bool = True, att_dropout: float = 0.1,
                 att_dropout_broadcast: Optional[bool] = None):
        super().__init__()
        caller = "dimtorch.rf.CrossAttention()"
        self.encoder_dim, self.query_in_dim = encoder_dim, query_in_dim
        self.out_dim = proj_dim if proj_dim else value_dim_total
        self.num_heads = _heads(num_heads, caller)
        self.key_dim_total, self.value_dim_total = key_dim_total, value_dim_total
        self.key_dim_per_head = _per_head(key_dim_total, self.num_heads, "key_dim_total", caller)
        self.value_dim_per_head = _per_head(value_dim_total, self.num_heads, "value_dim_total", caller)
        self.kv_dim_total = Dim(key_dim_total.size + value_dim_total.size, name="kv")
        self.kv_dim_per_head = Dim(self.key_dim_per_head.size + self.value_dim_per_head.size, name="kv_per_head")
        self.kv = Linear(encoder_dim, self.kv_dim_total, with_bias=with_bias)
        self.q = Linear(query_in_dim, key_dim_total, with_bias=with_bias)
        self.kv.weight.initial = _init.Glorot(scale=3 / 4)
        self.q.weight.initial = _init.Glorot(scale=1 / 2)
        self.proj = Linear(value_dim_total, proj_dim, with_bias=with_bias) if proj_dim else None
        self.att_dropout, self.att_dropout_broadcast = att_dropout, bool(att_dropout_broadcast)
        self._frame_mask_cache = FrameMaskCache()

    def transform_encoder(self, encoder: Tensor, *, axis: Dim) -> State:
        """The keys and values of the encoder: State(k=, v=, kv_axis=axis), k and v over (encoder's batch dims,
        num_heads, axis, per-head dim)."""
        lead = _lead(self, encoder, self.encoder_dim, axis, what="encoder")
        if axis.lengths is not None:  # NaN padding would reach the kv weight's gradient (0 * NaN)
            encoder = encoder.copy_masked(0.0, (axis,))
        kv = _aligned(self.kv(encoder), lead + (axis, self.kv_dim_total))
        k, v = _split_heads(kv, self.num_heads.size, (self.key_dim_per_head.size, self.value_dim_per_head.size))
        return State(k=Tensor(k, lead + (self.num_heads, axis, self.key_dim_per_head)),
                     v=Tensor(v, lead + (self.num_heads, axis, self.value_dim_per_head)), kv_axis=axis)

    def forward_kv(self, source: Tensor) -> Tuple[Tensor, Tensor]:
        kv = _C.split_dims(self.kv(source), axis=self.kv_dim_total, dims=(self.num_heads, self.kv_dim_per_head))
        k, v = _C.split(kv, axis=self.kv_dim_per_head, out_dims=(self.key_dim_per_head, self.value_dim_per_head))
        return k, v

    def forward_query(self, source: Tensor) -> Tensor:
        return _C.split_dims(self.q(source), axis=self.key_dim_total, dims=(self.num_heads, self.key_dim_per_head))

    def __call__(self, q: Tensor, encoder: State) -> Tensor:
        k, v, kv_axis = encoder["k"], encoder["v"], encoder["kv_axis"]
        heads, kd, vd = self.num_heads, self.key_dim_per_head, self.value_dim_per_head
        lead = _lead(self, q, self.query_in_dim, None, what="q")
        enc_lead = tuple(d for d in k.dims if d is not heads and d is not kv_axis and d is not kd)
        q_lead = tuple(d for d in lead if d in enc_lead)  # the query's other dims (e.g. its time) are queries
        rest = tuple(d for d in lead if d not in enc_lead)
        qr = _aligned(self.q(q), q_lead + rest + (self.key_dim_total,))
        qr = qr.reshape(*qr.shape[:len(q_lead)], -1, heads.size, kd.size).transpose(-3, -2)  # (*q_lead, H, R, dk)
        kr = _aligned(k, q_lead + (heads, kv_axis, kd)) if set(map(id, enc_lead)) <= set(map(id, q_lead)) else None
        if kr is None:
            raise ValueError(f"dimtorch.rf.CrossAttention(): the encoder has dims ({dims_str(enc_lead)}) that q lacks "
                             f"(q dims: {dims_str(q.dims)})")
        vr = _aligned(v, q_lead + (heads, kv_axis, vd))
        valid = self._frame_mask_cache.get(kv_axis, q_lead, kr.device, kr) if kv_axis.lengths is not None else None
        mask = valid[..., None, None, :] if valid is not None else None
        p = self.att_dropout if self.att_dropout and self.training else 0.0
        out = F.scaled_dot_product_attention(qr, kr, vr, attn_mask=mask, dropout_p=p)  # (*q_lead, H, R, dv)
        out = out.transpose(-3, -2).flatten(-2)  # (*q_lead, R, H*dv)
        out = out.reshape(*out.shape[:len(q_lead)], *_sizes(q, rest), self.value_dim_total.size)
        y = Tensor(out, q_lead + rest + (self.value_dim_total,), feature_dim=self.value_dim_total)
        return self.proj(y) if self.proj is not None else y

    def attention(self, q: Tensor, k: Tensor, v: Tensor, *, kv_axis: Dim) -> Tensor:
        from ..ops.attention import dot_attention
        att = dot_attention(q, k, v, key_dim=self.key_dim_per_head, axis=kv_axis, att_dropout=self.att_dropout,
                            training=self.training)
        out, _ = _C.merge_dims(att, dims=(self.num_heads, self.value_dim_per_head), out_dim=self.value_dim_total)
        return self.proj(out) if self.proj is not None else out


def _sizes(x: Tensor, dims: tuple) -> list:
    return [x.raw.shape[x.dims.index(d)] for d in dims]
