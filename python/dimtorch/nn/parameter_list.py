"""ParameterList (RETURNN frontend's): named parameters held as a list (names "0", "1", ... or a dict's keys)."""
from __future__ import annotations

from typing import Iterable, Iterator, Union

import torch

from .._C import Tensor
from .module import Module, Parameter

__all__ = ["ParameterList"]


def _is_parameter(p) -> bool:
    return isinstance(p, Parameter) or (isinstance(p, Tensor) and isinstance(p.raw, torch.nn.Parameter))


class ParameterList(Module):
    """ParameterList(p1, p2), ParameterList([p1, p2]) or ParameterList({"a": p1, "b": p2}) of
    dt.nn.Parameter (or the Tensor a module gives for one); number names are renumbered by position.
    `pl[i]` (int, negative too) or `pl["name"]` gives the parameter's Tensor; len, iteration (Tensors in
    order), append, extend. state_dict keys use the names."""

    def __init__(self, *parameters):
        super().__init__()
        if len(parameters) == 1 and isinstance(parameters[0], dict):
            items = list(parameters[0].items())
        elif len(parameters) == 1 and isinstance(parameters[0], ParameterList):
            items = [(key, parameters[0][key]) for key in parameters[0].keys()]
        elif len(parameters) == 1 and not _is_parameter(parameters[0]) and isinstance(parameters[0], Iterable):
            items = [(None, p) for p in parameters[0]]
        else:
            items = [(None, p) for p in parameters]
        for i, (key, p) in enumerate(items):
            self._add(str(i) if key is None or str(key).isdigit() else key, p)

    def _add(self, key: str, p) -> None:
        if not _is_parameter(p):
            raise TypeError(f"dimtorch.nn.ParameterList(): expected a dimtorch.nn.Parameter (or a module's parameter "
                            f"Tensor), got {type(p).__name__}")
        if not isinstance(key, str):
            raise TypeError(f"dimtorch.nn.ParameterList(): names must be str, got {type(key).__name__}")
        setattr(self, key, p)

    def keys(self) -> list:
        return list(self._parameters)

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[Tensor]:
        return (getattr(self, key) for key in self._parameters)

    def __getitem__(self, idx: Union[int, str]) -> Tensor:
        keys = self.keys()
        if isinstance(idx, str):
            if idx not in self._parameters:
                raise KeyError(f"dimtorch.nn.ParameterList[]: no parameter named {idx!r} (names: {', '.join(keys)})")
            return getattr(self, idx)
        if isinstance(idx, bool) or not isinstance(idx, int):
            raise TypeError(f"dimtorch.nn.ParameterList[]: index must be an int or a name, got {type(idx).__name__}")
        if not -len(keys) <= idx < len(keys):
            raise IndexError(f"dimtorch.nn.ParameterList[]: index {idx} is out of range for {len(keys)} parameters")
        return getattr(self, keys[idx])

    def append(self, parameter) -> "ParameterList":
        self._add(str(len(self)), parameter)
        return self

    def extend(self, parameters: Iterable) -> "ParameterList":
        for p in parameters:
            self.append(p)
        return self
