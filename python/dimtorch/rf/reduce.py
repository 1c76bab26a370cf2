"""rf.reduce: RETURNN frontend's reductions, dimtorch's ops themselves; rf.reduce(mode=) picks one."""
from __future__ import annotations

from typing import Sequence, Union

import dimtorch as _dt
from dimtorch import Dim, Tensor

__all__ = [
    "reduce", "reduce_sum", "reduce_max", "reduce_min", "reduce_mean", "reduce_logsumexp", "reduce_logmeanexp",
    "reduce_any", "reduce_all", "reduce_argmin", "reduce_argmax", "reduce_out", "RunningMean", "top_k",
]

reduce_sum = _dt.reduce_sum
reduce_max = _dt.reduce_max
reduce_min = _dt.reduce_min
reduce_mean = _dt.reduce_mean
reduce_logsumexp = _dt.reduce_logsumexp
reduce_logmeanexp = _dt.reduce_logmeanexp
reduce_any = _dt.reduce_any
reduce_all = _dt.reduce_all
reduce_argmin = _dt.reduce_argmin
reduce_argmax = _dt.reduce_argmax
reduce_out = _dt.reduce_out
top_k = _dt.top_k
RunningMean = _dt.nn.RunningMean

_BY_MODE = {"sum": _dt.reduce_sum, "max": _dt.reduce_max, "min": _dt.reduce_min, "mean": _dt.reduce_mean,
            "logsumexp": _dt.reduce_logsumexp, "logmeanexp": _dt.reduce_logmeanexp, "any": _dt.reduce_any,
            "all": _dt.reduce_all, "argmin": _dt.reduce_argmin, "argmax": _dt.reduce_argmax}


def reduce(source: Tensor, *, mode: str, axis: Union[Dim, Sequence[Dim]], use_mask: bool = True,
           distributed: bool = False) -> Tensor:
    """reduce_<mode>(source, axis=axis, use_mask=use_mask). distributed=True (a reduction across
    processes) is not supported."""
    if distributed:
        raise NotImplementedError("dimtorch.rf.reduce(): distributed=True is not supported")
    try:
        fn = _BY_MODE[mode]
    except (KeyError, TypeError):
        raise ValueError(f"dimtorch.rf.reduce(): unknown mode {mode!r} (known: {', '.join(_BY_MODE)})") from None
    return fn(source, axis, use_mask)
