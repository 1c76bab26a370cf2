"""rf.const: tensors of one value, dimtorch's creation ops (rf.constant is the value-first spelling)."""
from __future__ import annotations

from typing import Optional, Sequence

import dimtorch as _dt
from dimtorch import Dim, Tensor

__all__ = ["full", "fill", "constant", "zeros", "ones", "zeros_like", "ones_like"]

full = _dt.full
fill = _dt.full
zeros = _dt.zeros
ones = _dt.ones
zeros_like = _dt.zeros_like
ones_like = _dt.ones_like


def constant(fill_value, *, dims: Sequence[Dim], dtype: Optional[str] = None, device: Optional[str] = None,
             sparse_dim: Optional[Dim] = None, feature_dim: Optional[Dim] = None) -> Tensor:
    """dimtorch.full(dims, fill_value, ...): dtype None as torch infers it from the value (an int:
    int64, RETURNN frontend's int32)."""
    return _dt.full(dims, fill_value, dtype=dtype, device=device, sparse_dim=sparse_dim, feature_dim=feature_dim)
