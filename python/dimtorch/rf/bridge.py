"""Between rf modules and plain torch modules: RETURNN's `returnn.torch.frontend.bridge` (the import
edit maps `returnn.torch.frontend` to `dimtorch.rf`, RETURNN's torch frontend being dimtorch.rf here).

In RETURNN an rf.Module is no torch module, so the bridge wraps one in the other. Here an rf.Module is
a torch.nn.Module already (its parameters torch Parameters under the attribute names, auxiliary ones
buffers, as RETURNN's bridge registers them by default), so `rf_module_to_pt_module` gives the module
itself: state_dict keys, parameters, .to() and optimizers are the same as through RETURNN's wrapper.
A plain torch module becomes an rf module by a wrapper (PTModuleAsRFModule) that holds its
parameters and buffers as rf.Parameters under the same names and calls it.
"""
from __future__ import annotations

from typing import Optional

import torch

from .._C import Dim
from .module import Module
from .parameter import Parameter

__all__ = ["rf_module_to_pt_module", "pt_module_to_rf_module", "wrapped_pt_module_to_rf_module",
           "PTModuleAsRFModule"]


def rf_module_to_pt_module(rf_module: Module, *, aux_params_as_buffers: bool = True) -> torch.nn.Module:
    """The torch module of an rf module: the module itself (or the torch module a PTModuleAsRFModule
    wraps). Auxiliary parameters are buffers (aux_params_as_buffers=False, RETURNN's old default that
    lists them among the parameters, is not supported: an rf module registers them once, as buffers)."""
    caller = "dimtorch.rf.bridge.rf_module_to_pt_module()"
    if not isinstance(rf_module, Module):
        raise TypeError(f"{caller}: expected a dimtorch.rf.Module, got {type(rf_module).__name__}")
    if not aux_params_as_buffers:
        raise NotImplementedError(f"{caller}: aux_params_as_buffers=False: a dimtorch.rf module is a torch module "
                                  f"whose auxiliary parameters are buffers (as with RETURNN's default True)")
    if isinstance(rf_module, PTModuleAsRFModule):
        return rf_module.pt_module
    return rf_module


def pt_module_to_rf_module(pt_module: torch.nn.Module) -> Module:
    """The rf module of a torch module: an rf module itself, else a PTModuleAsRFModule around it."""
    if not isinstance(pt_module, torch.nn.Module):
        raise TypeError(f"dimtorch.rf.bridge.pt_module_to_rf_module(): expected a torch.nn.Module, "
                        f"got {type(pt_module).__name__}")
    if isinstance(pt_module, Module):
        return pt_module
    return PTModuleAsRFModule(pt_module)


def wrapped_pt_module_to_rf_module(pt_module: torch.nn.Module) -> Optional[Module]:
    """The rf module that `pt_module` is (an rf module is its own torch module), else None."""
    if not isinstance(pt_module, torch.nn.Module):
        raise TypeError(f"dimtorch.rf.bridge.wrapped_pt_module_to_rf_module(): expected a torch.nn.Module, "
                        f"got {type(pt_module).__name__}")
    return pt_module if isinstance(pt_module, Module) else None


def _dims_of(raw: torch.Tensor) -> list:
    return [Dim(n) for n in raw.shape]


class PTModuleAsRFModule(Module):
    """A torch module as an rf module: its own parameters (rf.Parameters over new static dims, one
    per axis), buffers (auxiliary rf.Parameters) and children (wrapped in turn) under the same names,
    so the state dict has the torch module's keys; calling it calls the torch module."""

    def __init__(self, pt_module: torch.nn.Module):
        super().__init__()
        # (kept out of torch's registry: the parameters are registered below under their own names)
        self.__dict__["_pt_module"] = pt_module
        for name, p in pt_module.named_parameters(recurse=False):
            setattr(self, name, Parameter(dims=_dims_of(p), raw_tensor=p, trainable=p.requires_grad))
        for name, b in pt_module.named_buffers(recurse=False):
            setattr(self, name, Parameter(dims=_dims_of(b), raw_tensor=b, auxiliary=True))
        for name, child in pt_module.named_children():
            setattr(self, name, pt_module_to_rf_module(child))

    @property
    def pt_module(self) -> torch.nn.Module:
        """The torch module this wraps."""
        return self.__dict__["_pt_module"]

    def __call__(self, *args, **kwargs):
        return self.pt_module(*args, **kwargs)
