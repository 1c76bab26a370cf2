"""Rows of attention and positional-encoding ops: dot_attention, sinusoidal/relative encodings, RoPE.

As in rows_array.py, what the PyTorch user makes once (key masks, an encoding table for the longest
length) is made by the builder outside the timed region; dimtorch and RETURNN cache theirs. rows.py
appends these rows to its ROWS: import rows, not this module.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import dimtorch as dt

from .row import Row, _rf

ATT_OUT = ("batch", "heads", "time", "head_dim")


def _values(s):
    """v (batch, heads, key_time, head_dim): k's values reversed along head_dim (its own tensor)."""
    raw = getattr(s, "raw", s).k.flip(-1).contiguous()
    if not hasattr(s, "api"):
        return raw
    return s.api.tensor(raw, (s.batch, s.heads, s.key_time, s.head_dim))


def _torch_attention(s):
    """SDPA with the key mask; queries, keys and values zeroed at padding first (what makes NaN padding
    harmless, as dimtorch guarantees); the valid query frames go on the side as `att_valid`."""
    s.att_valid = s.mask3[:, None, :, :]
    q_valid, kv_valid, key_mask = s.mask3[:, None], s.mask3[:, None], ~s.key_padding4
    return lambda q=s.q, k=s.k, v=_values(s), mq=q_valid, mk=kv_valid, m=key_mask: F.scaled_dot_product_attention(
        torch.where(mq, q, 0.0), torch.where(mk, k, 0.0), torch.where(mk, v, 0.0), attn_mask=m)


def _pe_table(s, n, feat, base=1e4):
    """The sinusoidal table a PyTorch model precomputes once: (n, feat), sin half then cos half."""
    half = feat // 2
    freqs = torch.exp(torch.arange(half, dtype=torch.float64) * -(math.log(base) / (half - 1)))
    arg = torch.arange(n, dtype=torch.float64)[:, None] * freqs
    return torch.cat((arg.sin(), arg.cos()), -1).float().to(s.device)


def _rel_table(s, t, feat):
    half = feat // 2
    freqs = torch.exp(torch.arange(half, dtype=torch.float64) * -(2 * math.log(1e4) / feat))
    arg = torch.arange(-(t - 1), t, dtype=torch.float64)[:, None] * freqs
    return torch.cat((arg.sin(), arg.cos()), -1).float().to(s.device)


def _torch_rope(s):
    sin, cos = _pe_table(s, s.T, s.D, 10_000 ** (1 - 2 / s.D)).chunk(2, dim=-1)

    def rope(q=s.q, sin=sin, cos=cos):
        pairs = q.unflatten(-1, (-1, 2))
        a, b = pairs[..., 0], pairs[..., 1]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    return rope


def _rope_enc(s):
    """(time, head_dim) table of this side, as sinusoidal_positional_encoding gives it (RoPE's base)."""
    base = 10_000 ** (1 - 2 / s.shapes.head_dim)
    fn = s.api.rf.sinusoidal_positional_encoding if s.api.name == "returnn" else dt.sinusoidal_positional_encoding
    return fn(spatial_dim=s.time, feat_dim=s.head_dim, base=base, device=s.device)


def _rf_rope(s):
    from returnn.frontend.attention import _apply_rope  # rf's own RoPE (its PyTorch backend's kernel)
    return lambda q=s.q, pe=_rope_enc(s), d=s.head_dim: _apply_rope(q, pe, d)


ATTENTION_ROWS = (
    Row("dot_attention", "multi-head attention q (b, heads, time, d) over k, v (b, heads, key_time, d), keys "
        "masked; q, k, v zeroed at padding (PyTorch: the same wheres + SDPA)", out=ATT_OUT, valid_frames="att_valid",
        requires=("dot_attention",),
        torch=_torch_attention,
        dimtorch=lambda s: lambda q=s.q, k=s.k, v=_values(s), d=s.head_dim, t=s.key_time:
            dt.dot_attention(q, k, v, key_dim=d, axis=t),
        returnn=lambda s: lambda q=s.q, k=s.k, v=_values(s), d=s.head_dim, t=s.key_time, att=_rf(s).dot_attention:
            att(q, k, v, key_dim=d, axis=t)),
    Row("sinusoidal_pos_enc", "sinusoidal positional encoding over (time, feature); PyTorch: a slice of a table "
        "made once", out=("time", "feature"), requires=("sinusoidal_positional_encoding",),
        torch=lambda s: lambda pe=_pe_table(s, 2 * s.T, s.F), n=s.T: pe[:n],
        dimtorch=lambda s: lambda t=s.time, f=s.feature, dev=s.device:
            dt.sinusoidal_positional_encoding(spatial_dim=t, feat_dim=f, device=dev),
        returnn=lambda s: lambda t=s.time, f=s.feature, dev=s.device, pe=_rf(s).sinusoidal_positional_encoding:
            pe(spatial_dim=t, feat_dim=f, device=dev)),
    Row("add_sinusoidal_pos_enc", "x + sinusoidal positional encoding (the op in use)", out=("batch", "time", "feature"),
        requires=("sinusoidal_positional_encoding",),
        torch=lambda s: lambda x=s.x, pe=_pe_table(s, 2 * s.T, s.F), n=s.T: x + pe[:n],
        dimtorch=lambda s: lambda x=s.x, t=s.time, f=s.feature, dev=s.device:
            x + dt.sinusoidal_positional_encoding(spatial_dim=t, feat_dim=f, device=dev),
        returnn=lambda s: lambda x=s.x, t=s.time, f=s.feature, dev=s.device, pe=_rf(s).sinusoidal_positional_encoding:
            x + pe(spatial_dim=t, feat_dim=f, device=dev)),
    Row("relative_pos_enc", "relative positional encoding (2 time - 1, feature); PyTorch: a slice of a table made "
        "once for twice the length", out=("time2", "feature"), requires=("relative_positional_encoding",),
        torch=lambda s: lambda pe=_rel_table(s, 2 * s.T, s.F), a=s.T, b=3 * s.T - 1: pe[a:b],
        dimtorch=lambda s: lambda t=s.time, f=s.feature, dev=s.device:
            dt.relative_positional_encoding(query_spatial_dim=t, key_value_spatial_dim=t, feat_dim=f, device=dev)[0],
        returnn=lambda s: lambda t=s.time, f=s.feature, dev=s.device, pe=_rf(s).relative_positional_encoding:
            pe(query_spatial_dim=t, key_value_spatial_dim=t, feat_dim=f, device=dev)[0]),
    Row("apply_rope", "rotary position embedding of q (b, heads, time, d) by the (time, d) encoding", out=ATT_OUT,
        requires=("apply_rope",),
        torch=_torch_rope,
        dimtorch=lambda s: lambda q=s.q, pe=_rope_enc(s), d=s.head_dim: dt.apply_rope(q, pe, d),
        returnn=_rf_rope),
)
