"""rf.dropout: dropout as RETURNN frontend applies it, only in training (the run context's train flag)
unless on_forward, by dimtorch's op."""
from __future__ import annotations

from dimtorch import _C

__all__ = ["dropout", "dropout_broadcast_default"]


# RETURNN frontend's dropout(source, drop_prob, *, axis=None, on_forward=False): C++ (no Python frame: in a
# step outside training it is a flag read), the definition dimtorch.ops.dropout.train_flag_dropout.
dropout = _C._rf_dropout


def dropout_broadcast_default() -> bool:
    """Whether dropout masks are broadcast over the dims other than the feature dim: RETURNN frontend's
    default without a config (True, its historical behavior); dimtorch reads no config."""
    return True
