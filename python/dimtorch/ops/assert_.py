"""assert_ (RETURNN frontend's): a check of a device value that does not wait for the device."""
from __future__ import annotations

import warnings
from typing import Union

import torch

from .._C import Tensor
from .._core.args import check_tensor
from .._core.data_dependent import to_host
from ._support import names_errors


@names_errors("dimtorch.assert_()")
def assert_(condition: Union[Tensor, bool], message: str, *, stop: bool = True) -> None:
    """Checks that `condition` (a bool, or a bool Tensor: all of its valid elements; padding counts as
    True) holds. stop=True: a failed bool raises AssertionError(message) at once; a failed Tensor fails
    asynchronously (torch._assert_async: on CUDA the error shows at a later synchronization, and the
    step does not wait for the device here; on CPU it raises RuntimeError at once). stop=False: only
    a warning, which reads the value on the host (one wait for the device)."""
    caller = "dimtorch.assert_()"
    if not isinstance(message, str):
        raise TypeError(f"{caller}: message must be a str, got {type(message).__name__}")
    if isinstance(condition, bool):
        if not condition:
            if stop:
                raise AssertionError(message)
            warnings.warn(f"dimtorch.assert_() failed: {message}", stacklevel=2)
        return
    check_tensor(condition, caller, what="condition")
    if condition.raw.dtype is not torch.bool:
        raise TypeError(f"{caller}: condition must be a bool Tensor, got {condition.dtype}")
    raw = condition.copy_masked(True).raw if condition.dims else condition.raw
    holds = raw.all()
    if stop:
        torch._assert_async(holds, message)
    elif not bool(to_host(holds)):
        warnings.warn(f"dimtorch.assert_() failed: {message}", stacklevel=2)


__all__ = ["assert_"]
