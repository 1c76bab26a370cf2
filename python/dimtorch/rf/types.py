"""rf.types: Tensor and Dim (dimtorch.rf.tensor's), RETURNN frontend's
typing names, and the raw tensor type (torch.Tensor)."""
from __future__ import annotations

from typing import Any, Protocol, Type, Union

import torch

from .tensor import Dim, Tensor

__all__ = ["RawTensorTypes", "ItemKeyType", "Tensor", "Dim", "get_raw_tensor_type", "GetModelFunc", "StepFunc"]

RawTensorTypes = Union[int, float, complex, bool, torch.Tensor]
ItemKeyType = Union[str, int]


def get_raw_tensor_type() -> Type:
    """The raw tensor type: torch.Tensor (dimtorch runs on torch only)."""
    return torch.Tensor


class GetModelFunc(Protocol):
    """get_model(*, epoch: int, step: int) -> the model (a Module)."""

    def __call__(self, *, epoch: int, step: int) -> Any: ...


class StepFunc(Protocol):
    """train_step / forward_step(*, model, extern_data: TensorDict)."""

    def __call__(self, *, model: Any, extern_data: Any) -> None: ...


