"""rf.device: the default device of new tensors (dimtorch's creation ops take it when given no device)
and copy_to_device."""
from __future__ import annotations

from typing import Optional

import torch

from .._core import default_device as _default_device
from .. import Tensor

__all__ = ["copy_to_device", "get_default_device", "set_default_device", "set_default_device_ctx",
           "get_default_dim_size_device"]


def copy_to_device(x: Tensor, device: Optional[str] = None) -> Tensor:
    """x with its raw on `device` (None: the default device; none set: x itself); x itself when it is
    there already. The dims' lengths stay on the host."""
    if not device:
        device = _default_device.get()
    if not device or x.raw.device == torch.device(device):
        return x
    return Tensor(x.raw.to(device), x.dims, sparse_dim=x.sparse_dim, feature_dim=x.feature_dim)


def get_default_device() -> Optional[str]:
    """The device new tensors go to when a call gives none (None: torch's default)."""
    return _default_device.get()


def set_default_device(device: Optional[str]):
    """Sets the default device of new tensors (None: torch's default)."""
    _default_device.set(device)


def set_default_device_ctx(device: Optional[str]):
    """A context manager: the default device of new tensors within the block."""
    return _default_device.set_ctx(device)


def get_default_dim_size_device() -> Optional[str]:
    """Where the dims' lengths live: always the host (their device copies are cached per device)."""
    return "cpu"
