"""rf containers (RETURNN frontend's): ModuleList (list- and dict-like), Sequential (a ModuleList called in
order, kwargs to every module, collected_outputs=), sequential(), ParameterList. Functions given as
modules become rf.Functional."""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch

from .._C import Tensor
from ..nn import container as _nn_container
from ..nn import parameter_list as _nn_parameter_list
from .module import Functional, Module

__all__ = ["ModuleList", "Sequential", "sequential", "ParameterList"]


def _as_rf_module(obj, caller: str) -> torch.nn.Module:
    if isinstance(obj, torch.nn.Module):
        return obj
    if callable(obj):
        return Functional(obj)
    raise TypeError(f"{caller}: expected a module or a callable, got {type(obj).__name__}")


class ModuleList(Module, _nn_container.ModuleList):
    """ModuleList(m1, m2), ModuleList([m1, m2]) (any iterable) or ModuleList({"name": m}): `ml[i]`,
    `ml["name"]`, slices, items()/keys()/values(), append/extend/insert; state-dict keys by the names."""

    def _rebuild(self, items: list, caller: str) -> None:
        super()._rebuild([(key, _as_rf_module(m, caller)) for key, m in items], caller)

    def append(self, module) -> "ModuleList":
        return super().append(_as_rf_module(module, f"dimtorch.rf.{type(self).__name__}.append()"))

    def __setitem__(self, idx, module) -> None:
        caller = f"dimtorch.rf.{type(self).__name__}[]"
        if isinstance(idx, slice):
            module = [_as_rf_module(m, caller) for m in module]
        else:
            module = _as_rf_module(module, caller)
        super().__setitem__(idx, module)


class Sequential(ModuleList):
    """A ModuleList whose call runs its modules in order: `seq(x, **kwargs)` calls `module(x, **kwargs)` for
    each; `collected_outputs=` (a dict) gets each module's output under its name."""

    def __call__(self, inp, *, collected_outputs: Optional[Dict[str, Tensor]] = None, **kwargs) -> Any:
        for name, module in self._modules.items():
            inp = module(inp, **kwargs)
            if collected_outputs is not None:
                collected_outputs[name] = inp
        return inp


def sequential(source: Tensor, *modules) -> Any:
    """Sequential(*modules)(source)."""
    return Sequential(*modules)(source)


class ParameterList(Module, _nn_parameter_list.ParameterList):
    """ParameterList(p1, p2), ParameterList([p1, p2]) or ParameterList({"a": p1}) of rf.Parameters: `pl[i]`,
    `pl["name"]`, iteration (the Parameters), len, append, extend."""
