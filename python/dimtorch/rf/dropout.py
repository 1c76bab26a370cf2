"""rf.dropout: dropout as RETURNN frontend applies it, only in training (the run context's train flag)
unless on_forward, by dimtorch's op."""
from __future__ import annotations

from typing import Optional, Sequence, Union

import dimtorch as _dt
from dimtorch import Dim, Tensor

from ._run_ctx_flags import is_train_flag_enabled

__all__ = ["dropout", "dropout_broadcast_default"]


def dropout(source: Tensor, drop_prob: Union[float, Tensor], *, axis: Optional[Union[Dim, Sequence[Dim], bool]] = None,
            on_forward: bool = False) -> Tensor:
    """source with entries zeroed with probability drop_prob and the rest scaled by 1 / (1 - drop_prob),
    when the run context's train flag is set (for this function) or on_forward; else source itself.
    axis: None (or False) a draw per entry; a Dim or Dims: the mask varies over those only (broadcast
    over the other dims). dimtorch.dropout's one torch call for the mask."""
    if axis is False:
        axis = None
    elif axis is True:
        raise ValueError("dimtorch.rf.dropout(): axis=True is not valid (a Dim, Dims, None or False)")
    if not on_forward and not is_train_flag_enabled(dropout):
        return source
    if isinstance(drop_prob, Tensor):
        return _dropout_tensor_prob(source, drop_prob, axis)
    if not 0.0 <= drop_prob < 1.0:
        raise ValueError(f"dimtorch.rf.dropout(): drop_prob must be in [0, 1), got {drop_prob}")
    return _dt.dropout(source, drop_prob, axis, True)


def _dropout_tensor_prob(source: Tensor, drop_prob: Tensor, axis) -> Tensor:
    """A drop probability given as a Tensor (e.g. a schedule on the device): the mask by a uniform draw."""
    dims = source.dims if axis is None else (axis,) if isinstance(axis, Dim) else tuple(axis)
    keep = 1.0 - drop_prob
    u = _dt.random_uniform(dims, dtype=source.dtype, device=source.raw.device)
    return source * (_dt.floor(keep + u) / keep)


def dropout_broadcast_default() -> bool:
    """Whether dropout masks are broadcast over the dims other than the feature dim: RETURNN frontend's
    default without a config (True, its historical behavior); dimtorch reads no config."""
    return True
