"""Raws given by RETURNN code: RETURNN's numpy-filled extern data and lengths (numpy arrays and
scalars) become torch tensors once, where a raw is assigned; everything else stays refused."""
from __future__ import annotations

import torch


def is_numpy(value) -> bool:
    """Whether value is a numpy array or scalar (checked by module name: numpy stays optional)."""
    return type(value).__module__ == "numpy" and hasattr(value, "dtype")


def as_torch(value, caller: str) -> torch.Tensor:
    """value as a torch.Tensor: itself, or a numpy array/scalar converted (sharing its memory where
    torch can); anything else is a TypeError naming `caller`."""
    if isinstance(value, torch.Tensor):
        return value
    if is_numpy(value):
        return torch.as_tensor(value)
    raise TypeError(f"{caller}: raw must be a torch.Tensor (or a numpy array), got {type(value).__name__}")
