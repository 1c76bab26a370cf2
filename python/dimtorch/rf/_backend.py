"""rf._backend: RETURNN frontend's backend interface, as far as RETURNN code names it.

RETURNN frontend dispatches every op through a Backend class (TorchBackend, TFBackend...); dimtorch has one
backend, torch, and its ops are the dimtorch ops themselves, so there is no dispatch. Code still names the
interface's members: RETURNN's attention and Conformer tests import `Backend` at module level and trace
`Backend.scaled_dot_product_attention` and `Backend.rel_pos_self_attention` (their trace hooks), and a
setup may read `Backend.name` or check `is_tensorflow`. This class gives those names their meaning on
dimtorch: scaled_dot_product_attention computes what RETURNN's backend method computes, with dimtorch's ops
(padded keys masked by the kv dim's lengths); rel_pos_self_attention says where the computation lives
(dimtorch.rf.RelPosSelfAttention works on raws in one pass and calls no backend hook).
"""
from __future__ import annotations

from typing import Optional

import torch

import dimtorch as _dt
from dimtorch import Dim, Tensor

__all__ = ["Backend"]


class Backend:
    """dimtorch's one backend: torch, eager (or captured by torch.compile). Static members only, as
    RETURNN's backend classes (they are never instantiated)."""

    name = "torch"
    RawTensorType = torch.Tensor
    is_tensorflow = False
    is_backend_raw_tensor_dim_tag_independent = True

    @staticmethod
    def executing_eagerly() -> bool:
        """True: dimtorch always runs eagerly (torch.compile traces the eager code)."""
        return True

    @staticmethod
    def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, *,
                                     attention_mask: Optional[Tensor] = None, att_dropout: float = 0.0,
                                     att_dropout_broadcast: bool, v_feat_dim: Dim, qk_feat_dim: Dim,
                                     kv_spatial_dim: Dim, query_spatial_dim: Dim, is_causal: bool = False,
                                     scale: Optional[float] = None) -> Tensor:
        """softmax(q.k * scale over kv_spatial_dim, padded keys excluded) . v: dims of the query without
        qk_feat_dim, then v_feat_dim. attention_mask (bool, True = attend) and is_causal (a query attends
        to keys at its own position or before) exclude more keys; att_dropout drops attention weights
        (with att_dropout_broadcast one mask along kv_spatial_dim, shared by the other dims, as RETURNN's
        dot_attention drops with axis=kv_spatial_dim)."""
        caller = "dimtorch.rf._backend.Backend.scaled_dot_product_attention()"
        if scale is None:
            if qk_feat_dim.size is None:
                raise ValueError(f"{caller}: qk_feat_dim must be static for the default scale, got {qk_feat_dim}")
            scale = qk_feat_dim.size ** -0.5
        energy = _dt.matmul(query, key, reduce=qk_feat_dim) * scale
        if is_causal:
            causal = _dt.compare(_dt.range_over_dim(query_spatial_dim), ">=", _dt.range_over_dim(kv_spatial_dim),
                                 allow_broadcast_all_sources=True)
            energy = _dt.where(causal, energy, float("-inf"), allow_broadcast_all_sources=True)
        if attention_mask is not None:
            energy = _dt.where(attention_mask, energy, float("-inf"), allow_broadcast_all_sources=True)
        weights = _dt.softmax(energy, axis=kv_spatial_dim)
        if att_dropout:
            weights = _dt.dropout(weights, att_dropout, axis=kv_spatial_dim if att_dropout_broadcast else None)
        return _dt.matmul(weights, value, reduce=kv_spatial_dim)

    @staticmethod
    def rel_pos_self_attention(query: Tensor, key: Tensor, value: Tensor, pos_emb: Tensor, **_kwargs) -> Tensor:
        """Not a hook on dimtorch: dimtorch.rf.RelPosSelfAttention computes relative-position attention
        itself (on raws, in one pass); call the module."""
        raise NotImplementedError("dimtorch.rf._backend.Backend.rel_pos_self_attention(): dimtorch computes "
                                  "relative-position attention in dimtorch.rf.RelPosSelfAttention (no backend "
                                  "hook); call the module")
