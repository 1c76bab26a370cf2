"""rf.const: tensors of one value, dimtorch's creation ops themselves (constant: full with the value first)."""
from __future__ import annotations

import dimtorch as _dt

__all__ = ["full", "fill", "constant", "zeros", "ones", "zeros_like", "ones_like"]

full = _dt.full
fill = _dt.full
zeros = _dt.zeros
ones = _dt.ones
zeros_like = _dt.zeros_like
ones_like = _dt.ones_like
constant = _dt.constant  # full with the value first
