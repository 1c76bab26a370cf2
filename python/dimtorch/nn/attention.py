"""Multi-head attention: SelfAttention, CausalSelfAttention (step state), CrossAttention, RelPosSelfAttention, RoPE variants."""
from __future__ import annotations

import weakref
from typing import Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F

from .._core import dim_cache as _dim_cache, tracing as _tracing
from .._C import Dim, Tensor
from ..ops.positional import relative_positional_encoding_raw, rope_raw, sinusoidal_raw
from .._core.args import dim_str, dims_str
from . import init as _init
from .linear import Linear
from .module import Module, Parameter

__all__ = ["SelfAttention", "CausalSelfAttention", "CausalSelfAttentionState", "CrossAttention",
           "RelPosSelfAttention", "RotaryPosSelfAttention", "RotaryPosCausalSelfAttention", "rel_shift"]


def _heads_dim(num_heads: Union[int, Dim], caller: str) -> Dim:
    if isinstance(num_heads, Dim):
        if num_heads.size is None:
            raise ValueError(f"{caller}: num_heads {dim_str(num_heads)} must be static")
        return num_heads
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"{caller}: num_heads must be an int >= 1 or a static Dim, got {num_heads!r}")
    return Dim(num_heads, name="heads")


def _per_head(total: Dim, heads: Dim, what: str, caller: str) -> Dim:
    if not isinstance(total, Dim) or total.size is None:
        raise ValueError(f"{caller}: {what} must be a static Dim, got {total!r}")
    if total.size % heads.size:
        raise ValueError(f"{caller}: {what} {dim_str(total)} is not divisible by num_heads {heads.size}")
    return Dim(total.size // heads.size, name=f"{total.name}_per_head")


def _check_x(module: Module, x, in_dim: Dim, axis: Optional[Dim], what: str = "x") -> tuple:
    """x's dims other than in_dim and axis (the batch dims of the attention); the module's errors."""
    name = type(module).__name__
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): {what} must be a dimtorch.Tensor, got {type(x).__name__}")
    dims = x.dims
    if not any(d is in_dim for d in dims):
        raise ValueError(f"{name}(): {what} lacks the in_dim {dim_str(in_dim)} ({what} dims: {dims_str(dims)})")
    if axis is not None and not any(d is axis for d in dims):
        raise ValueError(f"{name}(): {what} lacks the axis {dim_str(axis)} ({what} dims: {dims_str(dims)})")
    return tuple(d for d in dims if d is not in_dim and d is not axis)


def _valid_frames(axis: Dim, lead: tuple, device) -> Optional[torch.Tensor]:
    """bool raw (*lead, T) (size 1 for lead dims the lengths do not depend on), True on the valid
    frames of `axis`; None when axis has no lengths. The dim's cached mask: no device read."""
    if axis.lengths is None:
        return None
    order = lead + (axis,)
    mask = axis.get_mask(dims_order=order, device=device)
    return mask.raw if mask.dims == order else mask.raw_aligned(order)


def _valid_frames_in_graph(axis: Dim, lead: tuple, device, size) -> Optional[torch.Tensor]:
    """While tracing, _valid_frames built in the graph from the lengths, with `size` frames (the
    raw size of axis in the tensor it masks)."""
    if axis.lengths is None:
        return None
    order = lead + (axis,)
    return _tracing.mask_raw(axis, order, (1,) * len(lead) + (size,), device)


class FrameMaskCache:
    """The last (axis, batch dims, device) -> valid-frames raw of one module: a module calls the same
    dim over and over within a batch (and each layer of a stack does), and looking up the dim's
    cached mask from Python costs more than the op it feeds on tiny shapes. Copies and pickles of
    the module start empty (the entry holds dims of the data, not of the module). While tracing,
    nothing is cached: the mask is built in the graph with the raw size of axis in the tensor it
    masks (eagerly, that is the dim's max length)."""

    __slots__ = ("key", "value", "__weakref__")
    # weak refs to every instance, for forget (a WeakSet's guarded iteration cost ~2 us a call, and each
    # batch's binds call forget ~11 times); a dead instance's ref removes itself
    _instances: "list[weakref.ref]" = []

    def __init__(self):
        self.key, self.value = None, None
        FrameMaskCache._instances.append(weakref.ref(self, FrameMaskCache._instances.remove))

    def get(self, axis: Dim, lead: tuple, device, like) -> Optional[torch.Tensor]:
        """The mask of axis's valid frames over (*lead, axis) for `like`, the tensor it masks: a
        Tensor over axis, or a raw with axis at its axis -2; it has like's raw size of axis (frames
        beyond the longest sequence, which a raw may have, are padding: False)."""
        size = like.raw.shape[like.dims.index(axis)] if isinstance(like, Tensor) else like.shape[-2]
        if _tracing.tracing():
            return _valid_frames_in_graph(axis, lead, device, size)
        key = self.key
        if key is not None and key[0] is axis and key[1] == lead and key[2] == device and key[3] == size:
            return self.value
        value = _valid_frames(axis, lead, device)
        if value is not None and value.shape[-1] < size:
            value = F.pad(value, (0, size - value.shape[-1]), value=False)
        self.key, self.value = (axis, lead, device, size), value
        return value

    @staticmethod
    def forget(dim: Dim) -> None:
        """Drops every module's mask over `dim` (new lengths bound to it)."""
        for ref in tuple(FrameMaskCache._instances):  # (a copy: a ref may remove itself meanwhile)
            cache = ref()
            if cache is not None and cache.key is not None and cache.key[0] is dim:
                cache.key = cache.value = None

    def __deepcopy__(self, memo):
        return FrameMaskCache()

    def __reduce__(self):
        return FrameMaskCache, ()


_dim_cache.on_forget(FrameMaskCache.forget)


def _zero_padding(raw: torch.Tensor, valid: Optional[torch.Tensor]) -> torch.Tensor:
    """raw (*lead, T, d) with the frames beyond each length set to 0: keys and values of padding may
    be NaN/inf garbage, and a masked attention weight of 0 times NaN would still be NaN."""
    return raw if valid is None else torch.where(valid[..., None], raw, 0.0)


def _heads_output(module: Module, out: torch.Tensor, lead: tuple, axis: Optional[Dim]) -> Tensor:
    """Attention output `out` (*lead, H, T, dv) -> Tensor over (*lead, axis, value_dim_total), through
    module.proj (called as a module: its hooks fire) when it has one. The output step of every attention
    module here (they share value_dim_total and proj)."""
    out = _merge_heads(out)
    if axis is None:
        out = out.squeeze(-2)
    y = Tensor(out, lead + ((axis,) if axis is not None else ()) + (module.value_dim_total,),
               feature_dim=module.value_dim_total)
    return module.proj(y) if module.proj is not None else y


def _split_heads(raw: torch.Tensor, heads: int, sizes: tuple):
    """(..., T, H*sum(sizes)) with per-head layout h*sum(sizes) + j -> one (..., H, T, size) per size."""
    raw = raw.reshape(raw.shape[:-1] + (heads, sum(sizes))).transpose(-3, -2)
    return raw.split_with_sizes(sizes, -1)


def _merge_heads(raw: torch.Tensor) -> torch.Tensor:
    """(..., H, T, d) -> (..., T, H*d), index h*d + j."""
    return raw.transpose(-3, -2).flatten(-2)


def _set_heads(m: Module, proj_dim: Optional[Dim], key_dim_total: Dim, value_dim_total: Dim, num_heads,
               att_dropout: float, caller: str) -> None:
    """The attention layers' dims of heads and their options (RETURNN frontend's attribute names)."""
    m.out_dim = proj_dim if proj_dim is not None else value_dim_total
    m.heads = m.num_heads = _heads_dim(num_heads, caller)
    m.key_dim_total, m.value_dim_total = key_dim_total, value_dim_total
    m.key_dim_per_head = _per_head(key_dim_total, m.heads, "key_dim_total", caller)
    m.value_dim_per_head = _per_head(value_dim_total, m.heads, "value_dim_total", caller)
    m.att_dropout, m.att_dropout_broadcast = att_dropout, False


class SelfAttention(Module):
    """Multi-head self-attention over `axis` via F.scaled_dot_product_attention.

    qkv: Linear(in_dim, 2 * key_dim_total + value_dim_total) whose output index is
    h * (2*dk + dv) + j (per head: query dk, key dk, value dv; RETURNN's layout); proj:
    Linear(value_dim_total, proj_dim), or none when proj_dim is None (output over value_dim_total).
    Keys beyond each sequence's length are masked (bool attn_mask from the dim's cached mask,
    broadcast over heads and query frames; no device read), and their q/k/v are zeroed first, so NaN
    or inf garbage in padding never reaches valid frames (`zero_padding = False` skips that where
    the caller guarantees finite padding). Attention dropout only in training.
    forward(x, axis=) -> Tensor over x's other dims, axis, proj_dim (x's order with in_dim last)."""

    def __init__(self, in_dim: Dim, proj_dim: Optional[Dim], *, key_dim_total: Dim, value_dim_total: Dim,
                 num_heads: Union[int, Dim], att_dropout: float = 0.1, with_bias: bool = True, dtype="float32",
                 device=None):
        super().__init__()
        caller = f"{type(self).__name__}()"
        self.in_dim, self.proj_dim = in_dim, proj_dim
        _set_heads(self, proj_dim, key_dim_total, value_dim_total, num_heads, att_dropout, caller)
        self.qkv_dim_total = Dim(2 * key_dim_total.size + value_dim_total.size, name="qkv")
        self.qkv_dim_per_head = Dim(2 * self.key_dim_per_head.size + self.value_dim_per_head.size, name="qkv_per_head")
        self.qkv = Linear(in_dim, self.qkv_dim_total, with_bias=with_bias, dtype=dtype, device=device)
        self.proj = (Linear(value_dim_total, proj_dim, with_bias=with_bias, dtype=dtype, device=device)
                     if proj_dim is not None else None)
        self._frame_mask_cache = FrameMaskCache()
        # Zero q/k/v at padded frames (see the class docstring); a container that guarantees finite
        # padding in x (ConformerEncoder) turns this off for its layers.
        self.zero_padding = True

    @property
    def _qkv_sizes(self) -> tuple:
        dk = self.key_dim_per_head.size
        return dk, dk, self.value_dim_per_head.size

    def _project_qkv(self, x: Tensor, lead: tuple, axis: Optional[Dim], valid: Optional[torch.Tensor] = None):
        """q, k, v raws (*lead, H, T, d) (T of size 1 when axis is None); padding zeroed by `valid`."""
        qkv = self.qkv(x)
        order = lead + ((axis,) if axis is not None else ()) + (self.qkv_dim_total,)
        raw = qkv.raw if qkv.dims == order else qkv.raw_aligned(order)
        if axis is None:
            raw = raw.unsqueeze(-2)
        raw = _zero_padding(raw, valid)
        return _split_heads(raw, self.heads.size, self._qkv_sizes)

    def _rotate(self, q: torch.Tensor, k: torch.Tensor, start: int):
        """q, k (..., T, dk) with positions start, start+1, ... encoded; none here (RoPE variants)."""
        return q, k

    def _output(self, out: torch.Tensor, lead: tuple, axis: Optional[Dim]) -> Tensor:
        return _heads_output(self, out, lead, axis)

    def forward(self, x: Tensor, *, axis: Dim) -> Tensor:
        lead = _check_x(self, x, self.in_dim, axis)
        valid = self._frame_mask_cache.get(axis, lead, x.raw.device, x)
        q, k, v = self._project_qkv(x, lead, axis, valid if self.zero_padding else None)
        q, k = self._rotate(q, k, 0)
        mask = valid[..., None, None, :] if valid is not None else None
        p = self.att_dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        return self._output(out, lead, axis)

    def extra_repr(self) -> str:
        return (f"in_dim={dim_str(self.in_dim)}, heads={self.heads.size}, key_dim_total={dim_str(self.key_dim_total)}, "
                f"value_dim_total={dim_str(self.value_dim_total)}, att_dropout={self.att_dropout}")


class CausalSelfAttentionState:
    """Keys and values of the frames seen so far: Tensors over (batch dims, heads, history, d), where
    `history` is a dim sized from data (one more frame per step). Reorder it (e.g. for beam search)
    with dt.gather on the batch dims."""

    __slots__ = ("k", "v")

    def __init__(self, k: Tensor, v: Tensor):
        self.k, self.v = k, v

    def __repr__(self):
        return f"CausalSelfAttentionState(k=({dims_str(self.k.dims)}), v=({dims_str(self.v.dims)}))"


def _history_dim(t: Tensor, lead: tuple, heads: Dim, per_head: Dim) -> Dim:
    """The history dim of a state tensor over (batch dims, heads, history, per_head) in any order (a
    state reordered by dt.gather may have another order)."""
    rest = [d for d in t.dims if d is not heads and d is not per_head and not any(d is e for e in lead)]
    if len(rest) != 1 or heads not in t.dims or per_head not in t.dims:
        raise ValueError(f"its dims ({dims_str(t.dims)}) are not (batch dims, heads, history, per-head dim)")
    return rest[0]


def _is_empty(state: CausalSelfAttentionState) -> bool:
    return isinstance(state, CausalSelfAttentionState) and isinstance(state.k, Tensor) and 0 in state.k.raw.shape


class CausalSelfAttention(SelfAttention):
    """SelfAttention where frame t sees frames <= t only (a decoder's self-attention).

    forward(x, axis=time, state=None) -> (y, None): the full sequence at once (SDPA's is_causal; no
    key mask is needed: a valid frame never sees a frame beyond its own position; padding is zeroed);
    `state` may be an empty initial state (default_initial_state).
    forward(x, axis=None, state=state) -> (y, new_state): one step; x has no time dim; `state` is
    the previous step's (None or default_initial_state() before the first step)."""

    def default_initial_state(self, *, batch_dims: Sequence[Dim], capacity: Optional[int] = None
                              ) -> CausalSelfAttentionState:
        """A state with no history: keys and values over (batch_dims, heads, history of size 0, d), on
        the device and in the dtype of the weights. Batch dims that take their size from data get
        size 1 (broadcast to x's at the first step). `capacity` (RETURNN's preallocated history
        buffers) is not supported: the history grows by one frame per step."""
        name = type(self).__name__
        if capacity is not None:
            raise ValueError(f"{name}.default_initial_state(): capacity (a preallocated history) is not "
                             f"supported; the history grows by one frame per step")
        batch_dims = tuple(batch_dims)
        if not all(isinstance(d, Dim) for d in batch_dims):
            raise TypeError(f"{name}.default_initial_state(): batch_dims must be Dims, got {batch_dims!r}")
        w = self.qkv.weight.raw
        history = Dim(0, name="history")
        sizes = tuple(d.get_max_size() or 1 for d in batch_dims) + (self.heads.size, 0)
        k = w.new_zeros(sizes + (self.key_dim_per_head.size,))
        v = w.new_zeros(sizes + (self.value_dim_per_head.size,))
        return CausalSelfAttentionState(Tensor(k, batch_dims + (self.heads, history, self.key_dim_per_head)),
                                        Tensor(v, batch_dims + (self.heads, history, self.value_dim_per_head)))

    def forward(self, x: Tensor, *, axis: Optional[Dim],
                state: Optional[CausalSelfAttentionState] = None) -> Tuple[Tensor, Optional[CausalSelfAttentionState]]:
        lead = _check_x(self, x, self.in_dim, axis)
        # Padding is zeroed even though causality hides it from valid frames: torch applies the
        # causal mask by adding -inf, and NaN garbage + -inf is still NaN.
        valid = self._frame_mask_cache.get(axis, lead, x.raw.device, x) if axis is not None else None
        q, k, v = self._project_qkv(x, lead, axis, valid)
        p = self.att_dropout if self.training else 0.0
        if axis is not None:
            if state is not None and not _is_empty(state):
                raise ValueError(f"{type(self).__name__}(): a state is only for step-by-step calls (axis=None) or an "
                                 f"empty initial state; got axis {dim_str(axis)} and a state with history")
            q, k = self._rotate(q, k, 0)
            return self._output(F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True), lead, axis), None
        if state is None:
            q, k = self._rotate(q, k, 0)
        else:
            k_prev, v_prev = self._state_raws(state, lead, x)
            q, k = self._rotate(q, k, k_prev.shape[-2])  # this step's position: the frames before it
            k = torch.cat((k_prev.expand(*k.shape[:-2], -1, -1), k), dim=-2)
            v = torch.cat((v_prev.expand(*v.shape[:-2], -1, -1), v), dim=-2)
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
        return self._output(out, lead, None), self._new_state(k, v, lead)

    def _state_raws(self, state: CausalSelfAttentionState, lead: tuple, x: Tensor):
        """The state's keys and values as raws (*lead, H, history, d); the module's error when they do not fit x."""
        try:
            kd, vd = self.key_dim_per_head, self.value_dim_per_head
            k_order = lead + (self.heads, _history_dim(state.k, lead, self.heads, kd), kd)
            v_order = lead + (self.heads, _history_dim(state.v, lead, self.heads, vd), vd)
            k_prev = state.k.raw if state.k.dims == k_order else state.k.raw_aligned(k_order)
            v_prev = state.v.raw if state.v.dims == v_order else state.v.raw_aligned(v_order)
        except (ValueError, TypeError, AttributeError) as e:
            got = dims_str(state.k.dims) if isinstance(getattr(state, "k", None), Tensor) else type(state).__name__
            raise ValueError(f"{type(self).__name__}(): the state (k dims: {got}) does not fit "
                             f"x (dims: {dims_str(x.dims)}): {e}") from None
        return k_prev, v_prev

    def _new_state(self, k: torch.Tensor, v: torch.Tensor, lead: tuple) -> CausalSelfAttentionState:
        history = Dim(None, name="history")
        return CausalSelfAttentionState(Tensor(k, lead + (self.heads, history, self.key_dim_per_head)),
                                        Tensor(v, lead + (self.heads, history, self.value_dim_per_head)))


class CrossAttention(Module):
    """Multi-head attention of x (queries) over an encoder output (keys and values) via
    F.scaled_dot_product_attention, encoder padding masked (bool attn_mask from enc_axis's cached mask).

    query: Linear(in_dim, key_dim_total); kv: Linear(encoder_dim, key_dim_total + value_dim_total),
    output index h * (dk + dv) + j (per head: key dk, value dv); proj: Linear(value_dim_total, proj_dim).
    forward(x, encoder, axis=, enc_axis=): axis None means x is one step (no time dim). The encoder
    may lack some of x's batch dims (e.g. a beam dim): it is broadcast."""

    def __init__(self, in_dim: Dim, encoder_dim: Dim, proj_dim: Optional[Dim], *, key_dim_total: Dim,
                 value_dim_total: Dim, num_heads: Union[int, Dim], att_dropout: float = 0.1, with_bias: bool = True,
                 dtype="float32", device=None):
        super().__init__()
        caller = f"{type(self).__name__}()"
        self.in_dim, self.encoder_dim, self.proj_dim = in_dim, encoder_dim, proj_dim
        self.query_in_dim = in_dim  # RETURNN frontend's name
        _set_heads(self, proj_dim, key_dim_total, value_dim_total, num_heads, att_dropout, caller)
        self.kv_dim_total = Dim(key_dim_total.size + value_dim_total.size, name="kv")
        self.kv_dim_per_head = Dim(self.key_dim_per_head.size + self.value_dim_per_head.size, name="kv_per_head")
        self.query = Linear(in_dim, key_dim_total, with_bias=with_bias, dtype=dtype, device=device)
        self.kv = Linear(encoder_dim, self.kv_dim_total, with_bias=with_bias, dtype=dtype, device=device)
        self.proj = (Linear(value_dim_total, proj_dim, with_bias=with_bias, dtype=dtype, device=device)
                     if proj_dim is not None else None)
        self._frame_mask_cache = FrameMaskCache()

    def forward(self, x: Tensor, encoder: Tensor, *, axis: Optional[Dim], enc_axis: Dim) -> Tensor:
        name = type(self).__name__
        lead = _check_x(self, x, self.in_dim, axis)
        enc_lead = _check_x(self, encoder, self.encoder_dim, enc_axis, what="encoder")
        extra = [d for d in enc_lead if not any(d is e for e in lead)]
        if extra:
            raise ValueError(f"{name}(): encoder has dims ({dims_str(extra)}) that x lacks "
                             f"(x dims: {dims_str(x.dims)}, "
                             f"encoder dims: {dims_str(encoder.dims)})")
        if axis is not None and axis is enc_axis:
            raise ValueError(f"{name}(): axis and enc_axis are the same dim {dim_str(axis)}; use SelfAttention")
        q = self.query(x)
        q_order = lead + ((axis,) if axis is not None else ()) + (self.key_dim_total,)
        q = q.raw if q.dims == q_order else q.raw_aligned(q_order)
        if axis is None:
            q = q.unsqueeze(-2)
        (q,) = _split_heads(q, self.heads.size, (self.key_dim_per_head.size,))
        kv = self.kv(encoder)
        kv_order = lead + (enc_axis, self.kv_dim_total)
        kv = kv.raw if kv.dims == kv_order else kv.raw_aligned(kv_order)
        valid = self._frame_mask_cache.get(enc_axis, lead, kv.device, kv)
        kv = _zero_padding(kv, valid)
        k, v = _split_heads(kv, self.heads.size, (self.key_dim_per_head.size, self.value_dim_per_head.size))
        if k.shape[:-2] != q.shape[:-2]:
            k, v = k.expand(*q.shape[:-2], -1, -1), v.expand(*q.shape[:-2], -1, -1)
        mask = valid[..., None, None, :] if valid is not None else None
        p = self.att_dropout if self.training else 0.0
        return _heads_output(self, F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p), lead, axis)

    def extra_repr(self) -> str:
        return (f"in_dim={dim_str(self.in_dim)}, encoder_dim={dim_str(self.encoder_dim)}, heads={self.heads.size}, "
                f"att_dropout={self.att_dropout}")


def rel_shift(x: torch.Tensor) -> torch.Tensor:
    """(..., T, 2T-1), last axis the relative position r = j - i + T - 1 -> (..., T, T) with
    out[..., i, j] = x[..., i, j - i + T - 1] (Transformer-XL's pad-and-reshape trick, no gather).
    While tracing a gather: the reshapes' size arithmetic would become guards that a symbolic T
    cannot prove (torch.export of a dynamic T refuses them), and inductor's CPU code generation of
    their index arithmetic runs for minutes (torch 2.13)."""
    *lead, t, r = x.shape
    if _tracing.tracing():
        positions = torch.arange(t, device=x.device)
        index = positions[None, :] - positions[:, None] + (t - 1)
        return x.gather(-1, index.expand(*lead, t, t))
    x = F.pad(x, (1, 0))
    x = x.reshape(*lead, 2 * t, t)[..., 1:, :]
    return x.reshape(*lead, t, r)[..., :t]


class RelPosSelfAttention(SelfAttention):
    """Conformer self-attention with relative positions (Transformer-XL): score(i, j) =
    ((q_i + u) . k_j + (q_i + v) . P[j - i]) / sqrt(dk), keys beyond each sequence's length masked.

    P = linear_pos(pe) split into heads (linear_pos: Linear(pos_emb_dim, key_dim_total), no bias);
    pe is sinusoidal (`pos_emb="sinusoidal"`, dt.relative_positional_encoding) or learned
    (`pos_emb="learned"`: a parameter `learned_pos_emb` over (2*clipping+1, pos_emb_dim), relative
    distances clipped to +-`clipping`). pos_bias_u, pos_bias_v: (heads, key_dim_per_head), Glorot.
    Same qkv layout as SelfAttention; the output projection likewise."""

    def __init__(self, in_dim: Dim, proj_dim: Optional[Dim], *, key_dim_total: Dim, value_dim_total: Dim,
                 num_heads: Union[int, Dim], att_dropout: float = 0.1, with_bias: bool = True,
                 pos_emb: str = "sinusoidal", pos_emb_dim: Optional[Dim] = None, clipping: int = 16,
                 dtype="float32", device=None):
        super().__init__(in_dim, proj_dim, key_dim_total=key_dim_total, value_dim_total=value_dim_total,
                         num_heads=num_heads, att_dropout=att_dropout, with_bias=with_bias, dtype=dtype,
                         device=device)
        if pos_emb not in ("sinusoidal", "learned"):
            raise ValueError(f"{type(self).__name__}(): pos_emb must be 'sinusoidal' or 'learned', got {pos_emb!r}")
        self.pos_emb_kind, self.clipping = pos_emb, clipping
        self.pos_emb_dim = in_dim if pos_emb_dim is None else pos_emb_dim
        self.linear_pos = Linear(self.pos_emb_dim, key_dim_total, with_bias=False, dtype=dtype, device=device)
        self.pos_bias_u = Parameter((self.heads, self.key_dim_per_head), dtype, init=_init.Glorot(), device=device,
                                    in_dims=(self.key_dim_per_head,), out_dims=(self.heads,))
        self.pos_bias_v = Parameter((self.heads, self.key_dim_per_head), dtype, init=_init.Glorot(), device=device,
                                    in_dims=(self.key_dim_per_head,), out_dims=(self.heads,))
        if pos_emb == "learned":
            self.learned_pos_dim = Dim(2 * clipping + 1, name="rel_pos")
            self.learned_pos_emb = Parameter((self.learned_pos_dim, self.pos_emb_dim), dtype,
                                             init=_init.Glorot(), device=device)
        self._index_cache: Dict[tuple, torch.Tensor] = {}

    def _pos_emb(self, time: int, like: torch.Tensor) -> torch.Tensor:
        """pe raw (2*time - 1, pos_emb_dim)."""
        if self.pos_emb_kind == "sinusoidal":
            return relative_positional_encoding_raw(time, time, self.pos_emb_dim.size, dtype=like.dtype,
                                                    device=like.device)
        if _tracing.tracing():  # in the graph, no cache (time may be symbolic there)
            index = torch.arange(-(time - 1), time, device=like.device).clamp(-self.clipping, self.clipping)
            return self.learned_pos_emb.raw[index + self.clipping]
        key = (time, like.device)
        index = self._index_cache.get(key)
        if index is None:
            index = (torch.arange(-(time - 1), time).clamp(-self.clipping, self.clipping) + self.clipping)
            index = index.to(like.device, non_blocking=True)
            if len(self._index_cache) > 64:
                self._index_cache.clear()
            self._index_cache[key] = index
        return self.learned_pos_emb.raw[index]

    def forward(self, x: Tensor, *, axis: Dim) -> Tensor:
        lead = _check_x(self, x, self.in_dim, axis)
        valid = self._frame_mask_cache.get(axis, lead, x.raw.device, x)
        # q, k and v with their padding zeroed: the scores of padded keys are replaced below, but their
        # backward multiplies by k (and by q's padded rows): 0 * NaN would reach the valid frames' gradients.
        q, k, v = self._project_qkv(x, lead, axis, valid if self.zero_padding else None)  # (*lead, H, T, d)
        t = q.shape[-2]
        h, dk = self.heads.size, self.key_dim_per_head.size
        pe = self._pos_emb(t, q)
        rel = Dim(None, name="rel_pos")  # size from pe: 2T - 1 relative positions
        pos = self.linear_pos(Tensor(pe, (rel, self.pos_emb_dim)))
        pos = pos.raw if pos.dims[0] is rel else pos.raw_aligned((rel, self.key_dim_total))
        pos = pos.view(pe.shape[0], h, dk).permute(1, 2, 0)  # (H, dk, 2T-1)
        u = self.pos_bias_u.raw[:, None, :]  # (H, 1, dk)
        w = self.pos_bias_v.raw[:, None, :]
        ac = torch.matmul(q + u, k.transpose(-2, -1))  # (*lead, H, T, T)
        bd = rel_shift(torch.matmul(q + w, pos))  # (*lead, H, T, 2T-1) -> (*lead, H, T, T)
        scores = (ac + bd) * (dk ** -0.5)
        if valid is not None:
            # A finite fill keeps a length-0 sequence finite (uniform weights over padding, no NaN).
            scores = torch.where(valid[..., None, None, :], scores, torch.finfo(scores.dtype).min)
        att = torch.softmax(scores, dim=-1)
        if self.training and self.att_dropout:
            att = F.dropout(att, self.att_dropout, True)
        return self._output(torch.matmul(att, v), lead, axis)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", pos_emb={self.pos_emb_kind!r}"


def _rope_base(per_head: Dim) -> float:
    """RETURNN frontend's RoPE base for sinusoidal_positional_encoding: with it, pair i turns by
    10000^(-2i / dk) per frame (the usual RoPE frequencies)."""
    return 10_000 ** (1 - 2 / per_head.size)


class _RotaryMixin:
    """RoPE on queries and keys (dt.apply_rope's rotation), positions from each call's start."""

    def _rotate(self, q: torch.Tensor, k: torch.Tensor, start: int):
        dk = self.key_dim_per_head
        if dk.size % 2 or dk.size < 4:
            raise ValueError(f"{type(self).__name__}(): RoPE needs an even key_dim_per_head >= 4, got {dim_str(dk)}")
        pe = sinusoidal_raw(q.shape[-2], dk.size, start, _rope_base(dk), dtype=q.dtype, device=q.device)
        sin, cos = pe.chunk(2, dim=-1)
        return rope_raw(q, sin, cos), rope_raw(k, sin, cos)


class RotaryPosSelfAttention(_RotaryMixin, SelfAttention):
    """SelfAttention with rotary position embeddings (RoPE) on queries and keys (RETURNN frontend's
    RotaryPosSelfAttention): pair (2i, 2i+1) of each head's query and key at frame t is turned by
    t * 10000^(-2i / dk). Same parameters and call as SelfAttention."""


class RotaryPosCausalSelfAttention(_RotaryMixin, CausalSelfAttention):
    """CausalSelfAttention with RoPE (RETURNN frontend's RotaryPosCausalSelfAttention): full sequence
    or step by step; a step's position is the number of frames in its state (keys are stored
    turned, so the history is not turned again)."""
