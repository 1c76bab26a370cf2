"""safe_log: the log of values clipped away from 0 (RETURNN frontend's), finite where x <= 0."""
from __future__ import annotations

from typing import Optional


from .._C import Tensor, log, maximum
from .._core.args import check_tensor
from ._support import names_errors

# The smallest positive value of each float dtype (RETURNN frontend's defaults).
_TINY = {"float16": 6e-08, "bfloat16": 9.1835e-41, "float32": 1.4013e-45, "float64": 4.9407e-324}


@names_errors("dimtorch.safe_log()")
def safe_log(x: Tensor, /, *, eps: Optional[float] = None) -> Tensor:
    """log(maximum(x, eps)): finite for x <= 0 (e.g. the log of a power spectrum). eps defaults to
    the smallest positive value of x's dtype; its gradient is 0 where x < eps."""
    caller = "dimtorch.safe_log()"
    check_tensor(x, caller)
    if eps is None:
        if x.dtype not in _TINY:
            raise TypeError(f"{caller}: x must be a float tensor, got {x.dtype}")
        eps = _TINY[x.dtype]
    elif isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
        raise ValueError(f"{caller}: eps must be a number > 0, got {eps!r}")
    return log(maximum(x, float(eps)))


__all__ = ["safe_log"]
