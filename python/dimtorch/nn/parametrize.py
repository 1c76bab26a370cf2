"""register_parametrization, remove_parametrization, is_parametrized (RETURNN frontend's, after PyTorch's API): a
parameter read through a function of it, e.g. weight dropout or weight noise in training.

Per module instance: `module._dt_parametrized` maps a name to (parametrization, keep), and dt.nn.Module's
attribute read of that name computes parametrization(parameter) (keep_existing_param=True: the parameter
stays registered, so state dict, optimizer and checkpoints are unchanged) or the parametrization module's
value (keep_existing_param=False: it takes the parameter's place, with its own parameters). A
parametrization that is a module is registered under the module, so train()/eval() and .to() reach it
(e.g. weight dropout only in training) and copies of the module get their own.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from .module import Module, Parameter

__all__ = ["register_parametrization", "remove_parametrization", "is_parametrized"]

_KEPT = "dt_parametrizations"  # the ModuleDict of parametrizations that are modules (keep_existing_param=True)


def is_parametrized(module: torch.nn.Module, param_name: Optional[str] = None) -> bool:
    """Whether module has a parametrization (of param_name, when given)."""
    parametrized = module.__dict__.get("_dt_parametrized")
    return bool(parametrized) and (param_name is None or param_name in parametrized)


def register_parametrization(module: Module, param_name: str, parametrization: Callable, *,
                             keep_existing_param: bool = True) -> Module:
    """module.<param_name> reads as parametrization(the parameter's Tensor) from now on
    (keep_existing_param=True: the parameter stays registered; the parametrization must have no
    parameters of its own), or as parametrization() (keep_existing_param=False: the parametrization, a
    module, takes the parameter's place and gets its `assign(tensor)` called first if it has one)."""
    caller = "dimtorch.nn.register_parametrization()"
    if not isinstance(module, Module):
        raise TypeError(f"{caller}: module must be a dimtorch.nn.Module, got {type(module).__name__}")
    if not callable(parametrization):
        raise TypeError(f"{caller}: parametrization must be callable, got {type(parametrization).__name__}")
    if is_parametrized(module, param_name):
        raise ValueError(f"{caller}: {type(module).__name__}.{param_name} is parametrized already")
    dims = module.__dict__.get("_dt_dims", {})
    if param_name not in module._parameters or param_name not in dims:
        raise ValueError(f"{caller}: {type(module).__name__}.{param_name} is not a dimtorch.nn.Parameter "
                         f"(parameters: {', '.join(n for n in dims if n in module._parameters)})")
    if keep_existing_param:
        if isinstance(parametrization, torch.nn.Module):
            if any(True for _ in parametrization.parameters()):
                raise ValueError(f"{caller}: with keep_existing_param=True the parametrization must have no "
                                 f"parameters of its own")
            if _KEPT not in module._modules:
                module.add_module(_KEPT, torch.nn.ModuleDict())
            module._modules[_KEPT][param_name] = parametrization
    else:
        if not isinstance(parametrization, torch.nn.Module):
            raise TypeError(f"{caller}: with keep_existing_param=False the parametrization must be a module")
        original = module._dt_member(param_name)
        if hasattr(parametrization, "assign"):
            parametrization.assign(original)
        del module._parameters[param_name]
        module._dt_forget(param_name)
        module.add_module(param_name, parametrization)
    module.__dict__.setdefault("_dt_parametrized", {})[param_name] = (
        parametrization if keep_existing_param else None, keep_existing_param)
    # Reads of the name now miss the view cache; the view is parked, so that the parameter reads as the same
    # object again after remove_parametrization (RETURNN code compares it by identity).
    view = module.__dict__.get("_dt_views", {}).pop(param_name, None)
    if view is not None:
        module.__dict__.setdefault("_dt_parked_views", {})[param_name] = view
    return module


def remove_parametrization(module: Module, param_name: str) -> Module:
    """Undoes register_parametrization of param_name: the parameter reads as itself again
    (keep_existing_param=False: a new parameter holding the parametrization's current value)."""
    caller = "dimtorch.nn.remove_parametrization()"
    if not is_parametrized(module, param_name):
        raise ValueError(f"{caller}: {type(module).__name__}.{param_name} is not parametrized")
    d = module.__dict__
    _, keep = d["_dt_parametrized"].pop(param_name)
    view = d.get("_dt_parked_views", {}).pop(param_name, None)
    if keep and view is not None and d[view[0]].get(param_name) is view[1]:
        d["_dt_views"][param_name] = view  # (still that raw: the view read before the parametrization)
    if keep:
        kept = module._modules.get(_KEPT)
        if kept is not None and param_name in kept:
            del kept[param_name]
            if not len(kept):
                del module._modules[_KEPT]
    else:
        value = module._modules.pop(param_name)()
        setattr(module, param_name, Parameter(value.dims, value.dtype, init=value.raw.detach().clone(),
                                              device=value.raw.device))
    return module
