"""rf.cond (RETURNN frontend's): true_fn() if pred else false_fn(); dimtorch's dt.cond (a Tensor pred is read
from the device: the branch taken depends on data)."""
from __future__ import annotations

from typing import Any, Callable, Union

from .._C import Tensor, cond as _cond  # (the C++ fast path; a Tensor pred goes to the definition)

__all__ = ["cond"]


def cond(pred: Union[bool, Tensor], true_fn: Callable[[], Any], false_fn: Callable[[], Any]) -> Any:
    """true_fn() if pred else false_fn(); `pred` a bool or a scalar bool Tensor."""
    return _cond(pred, true_fn, false_fn)
