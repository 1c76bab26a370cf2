"""The device new tensors go to when a creation op is given none: None (torch's default device) unless
set (RETURNN frontend's rf.set_default_device / set_default_device_ctx). Kept here for the Python
definitions and in the core for the C++ fast paths (zeros, ones, full); set only through `set`."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Optional, Union

import torch

from .. import _C

_device: Optional[Union[str, torch.device]] = None


def get() -> Optional[Union[str, torch.device]]:
    """The default device of new tensors, or None (torch's)."""
    return _device


def set(device: Optional[Union[str, torch.device]]) -> None:  # noqa: A001 (the module's verb)
    """Sets it (None: back to torch's default)."""
    global _device
    _C._set_default_device(device)
    _device = device


@contextmanager
def set_ctx(device: Optional[Union[str, torch.device]]):
    """Sets it for the block, then restores the one before."""
    old = _device
    set(device)
    try:
        yield
    finally:
        set(old)
