"""rf.Module (RETURNN frontend's Module) as a dimtorch.nn.Module, i.e. a torch.nn.Module, and rf.Functional.

What an rf module does as in RETURNN:
- subclasses define `__call__` (rf's style; `forward` is an alias of it, for torch tooling that calls
  forward), or `forward` (torch's style; then torch's __call__ with its hooks runs it);
- parameters are `rf.Parameter`s assigned to attributes: reading the attribute gives the Parameter (a
  dimtorch Tensor) itself; auxiliary ones are registered as buffers, the others as torch parameters,
  under the attribute's name (so a RETURNN model's state dict has the same keys); a dimtorch.nn.Parameter
  assigned to an rf module becomes an rf.Parameter;
- the train flag (`module.training`) is the run context's while a step's context is set up
  (rf.init_train_step_run_ctx / init_forward_step_run_ctx; per class when train_flag_ctx(func=Cls.__call__)
  sets one), else torch's (train()/eval());
- a deep copy gets new parameters initialized by their `initial` again (RETURNN's copy_init; a layer
  copied per layer starts from its own random values), or the same parameters under
  set_parameter_copy_behavior_ctx("share");
- RETURNN's helpers: default_initial_state, get_default_name, get_deep/set_deep, modules(recurse=,
  include_self=), named_modules(recurse=, include_self=), has_parameters, to(device=, dtype="float32").
`parameters()` and `named_parameters()` are torch's (torch Parameters, what optimizers take); their
RETURNN attributes (weight_decay, ...) are on them (see rf.Parameter).
"""
from __future__ import annotations

import copy as _copy
import re
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

import torch

from .._C import Dim, Tensor
from .._core import tracing as _tracing
from .._core.dtypes import to_torch_dtype
from ..nn import module as _nn_module
from . import parameter as _parameter
from . import run_ctx as _run_ctx
from .parameter import Parameter

__all__ = ["Module", "Functional"]

_RF_ATTRS = ("_rf_initial", "_rf_trainable", "_rf_auxiliary", "_rf_non_critical_for_restore", "weight_decay")


class Module(_nn_module.Module):
    """RETURNN frontend's Module on torch (see the module docstring)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        call = cls.__dict__.get("__call__")
        # A class of rf's style (its own __call__, no forward anywhere above it): forward calls it, so torch
        # tooling that calls module.forward works. (Not when a forward is inherited: a __call__ that calls
        # super().__call__() would reach torch's __call__, and it that forward.)
        if call is not None and "forward" not in cls.__dict__ and cls.forward is torch.nn.Module.forward:
            cls.forward = call

    # -- train flag ----------------------------------------------------------------------------------
    @property
    def training(self) -> bool:
        ctx = _run_ctx._run_ctx
        if ctx is None:
            return self.__dict__.get("_rf_training", True)
        flags = ctx._train_flags_stack[-1]
        flag = flags[None] if len(flags) == 1 else flags.get(type(self).__call__, flags[None])
        return flag if type(flag) is bool else bool(flag.raw if hasattr(flag, "raw") else flag)

    @training.setter
    def training(self, mode: bool) -> None:
        self.__dict__["_rf_training"] = bool(mode)

    # -- parameters ----------------------------------------------------------------------------------
    def __setattr__(self, name, value):
        if isinstance(value, Parameter):
            self._rf_register(name, value)
            return
        if type(value) is _nn_module.Parameter:  # dimtorch.nn's: the same torch Parameter, read as an rf.Parameter
            p = Parameter._view(value.raw, value.dims)
            p.trainable = value.raw.requires_grad or None
            self._rf_register(name, p)
            return
        super().__setattr__(name, value)

    def _rf_register(self, name: str, p: Parameter) -> None:
        d = self.__dict__
        if "_parameters" not in d:
            raise AttributeError(f"{type(self).__name__}.{name} = ...: cannot assign a Parameter before Module.__init__()")
        raw = p.raw
        if not p.auxiliary and not isinstance(raw, torch.nn.Parameter):
            raise TypeError(f"{type(self).__name__}.{name} = ...: the raw of a (not auxiliary) rf.Parameter must be "
                            f"a torch.nn.Parameter, got {type(raw).__name__}")
        if "." in name or not name:
            raise KeyError(f"{type(self).__name__}.{name} = ...: a parameter name must be non-empty and without '.'")
        for key in ("_parameters", "_buffers", "_modules"):
            d[key].pop(name, None)
        d.pop(name, None)
        d["_non_persistent_buffers_set"].discard(name)
        # (written into torch's dicts directly: the class may hold a member descriptor of this name, which
        # register_parameter would take for an existing attribute)
        key = "_buffers" if p.auxiliary else "_parameters"
        d[key][name] = raw
        self._dt_record(name, tuple(p.dims))
        if name not in d.get("_dt_parametrized", ()) and not _tracing.tracing():
            d["_dt_views"][name] = (key, raw, p)

    def _dt_member(self, name):
        """A named parameter or buffer reads as an rf.Parameter (its cached view), else torch's lookup. While
        a graph is traced (torch.compile, make_fx, torch.export) it reads as a plain Tensor, as in dt.nn (the
        graph makes Tensors, not Parameter objects; rf's attributes are not needed inside a traced step)."""
        if _tracing.tracing():
            return super()._dt_member(name)
        d = self.__dict__
        views = d.get("_dt_views")
        if views is not None:
            v = views.get(name)
            if v is not None and d[v[0]].get(name) is v[1]:
                return v[2]
            dims = d["_dt_dims"].get(name)
            if dims is not None:
                key = "_parameters" if name in d["_parameters"] else "_buffers"
                raw = d[key].get(name)
                if raw is None or _nn_module._is_sharded(raw):
                    return raw
                if name in d.get("_dt_parametrized", ()):  # (no cached view for it: see dt.nn's
                    parked = d.get("_dt_parked_views", {}).get(name)  # _NamedMember.__get__; its own view
                    if parked is not None and parked[1] is raw:        # is parked, read as the same object)
                        return parked[2]
                    return Parameter._view(raw, dims)
                p = Parameter._view(raw, dims)
                views[name] = (key, raw, p)
                return p
        return torch.nn.Module.__getattr__(self, name)

    def _apply(self, fn, *args, **kwargs):
        # .to() may give a buffer (or, with torch's overwrite flag, a parameter) a new tensor object: the
        # RETURNN attributes (kept on the raw) go over to it.
        d = self.__dict__
        before = {(key, name): raw for key in ("_parameters", "_buffers") for name, raw in d[key].items()
                  if raw is not None}
        out = super()._apply(fn, *args, **kwargs)
        for (key, name), old in before.items():
            new = d[key].get(name)
            if new is not None and new is not old:
                for attr in _RF_ATTRS:
                    if attr in old.__dict__ and attr not in new.__dict__:
                        new.__dict__[attr] = old.__dict__[attr]
        return out

    def __deepcopy__(self, memo):
        new = super().__deepcopy__(memo)
        share = _parameter._copy_behavior == "share"
        for m_old, m_new in zip(self.modules(), new.modules()):
            d_old, d_new = m_old.__dict__, m_new.__dict__
            for key in ("_parameters", "_buffers"):
                for name, old in d_old[key].items():
                    raw = d_new[key].get(name)
                    if old is None or raw is None:
                        continue
                    if share:  # set_parameter_copy_behavior_ctx("share"): the copy uses the same parameters
                        d_new[key][name] = old
                        continue
                    for attr in _RF_ATTRS:  # (torch's Parameter.__deepcopy__ drops the instance dict)
                        if attr in old.__dict__ and attr not in raw.__dict__:
                            raw.__dict__[attr] = old.__dict__[attr]
                    init = raw.__dict__.get("_rf_initial")
                    dims = d_new.get("_dt_dims", {}).get(name)
                    if init is not None and callable(init) and not isinstance(init, Tensor) and dims is not None:
                        Parameter._view(raw, dims).initial = init  # a fresh draw, as RETURNN's copy_init
            d_new.get("_dt_views", {}).clear()
        return new

    # -- RETURNN's Module API ------------------------------------------------------------------------
    def default_initial_state(self, *, batch_dims: Sequence[Dim]):
        """The submodules' initial states as an rf.State of their names (None when none has one)."""
        from .state import State
        state = State()
        for name, child in self.named_children():
            f = getattr(child, "default_initial_state", None)
            if f is None:
                continue
            s = f(batch_dims=batch_dims)
            if s is not None:
                state[name] = s
        return state if state else None

    def get_default_name(self) -> str:
        """The class name in snake case (e.g. "self_attention")."""
        name = type(self).__name__
        if name.startswith("_"):
            name = name[1:]
        return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()

    def get_deep(self, target: str) -> Any:
        """The attribute at a dotted path ("layers.0.self_att")."""
        if not target:
            return self
        obj = self
        for atom in target.split("."):
            obj = getattr(obj, atom)
        return obj

    def set_deep(self, target: str, value: Any) -> None:
        """Sets the attribute at a dotted path."""
        if not target:
            raise AttributeError(f"{type(self).__name__}.set_deep(): cannot set the root module")
        prefix, _, name = target.rpartition(".")
        setattr(self.get_deep(prefix), name, value)

    def modules(self, *, recurse: bool = True, include_self: bool = True) -> Iterator[torch.nn.Module]:
        for _, m in self.named_modules(recurse=recurse, include_self=include_self):
            yield m

    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True, *, recurse: bool = True,
                      include_self: bool = True) -> Iterator[Tuple[str, torch.nn.Module]]:
        if recurse and include_self:
            yield from super().named_modules(memo, prefix, remove_duplicate)
            return
        if include_self:
            yield prefix, self
        for name, child in self._modules.items():
            if child is None:
                continue
            child_prefix = f"{prefix}.{name}" if prefix else name
            if recurse:
                yield from torch.nn.Module.named_modules(child, memo, child_prefix, remove_duplicate)
            else:
                yield child_prefix, child

    def register_forward_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False):
        """For a module of rf's style (its own __call__): RETURNN's hook, `hook(module, args, kwargs, result)`
        after each call (rf.hooks; a non-None return replaces the result). For a forward-style module:
        torch's register_forward_hook."""
        if type(self).__call__ is torch.nn.Module.__call__:
            return super().register_forward_hook(hook, prepend=prepend, with_kwargs=with_kwargs,
                                                 always_call=always_call)
        from .hooks import setup_post_hook_on_method
        return setup_post_hook_on_method(self, "__call__", hook, prepend=prepend)

    def has_parameters(self) -> bool:
        return any(True for _ in self.parameters())

    def to(self, *args, device=None, dtype=None, **kwargs):
        """torch's Module.to(); dtype may also be a dimtorch dtype name ("float32")."""
        if isinstance(dtype, str):
            dtype = to_torch_dtype(dtype, f"{type(self).__name__}.to()")
        if device is not None:
            kwargs["device"] = device
        if dtype is not None:
            kwargs["dtype"] = dtype
        return super().to(*args, **kwargs)


class Functional(Module):
    """A module calling `func(*args, **kwargs)` (e.g. a lambda in a Sequential); `attribs` become attributes."""

    def __init__(self, func: Callable, *, attribs: Optional[Dict[str, Any]] = None):
        super().__init__()
        if not callable(func):
            raise TypeError(f"dimtorch.rf.Functional(): func must be callable, got {type(func).__name__}")
        self.func = func
        for key, value in (attribs or {}).items():
            setattr(self, key, value)

    def __repr__(self):
        return f"{type(self).__name__}({getattr(self.func, '__qualname__', repr(self.func))})"

    def get_default_name(self) -> str:
        name = getattr(self.func, "__name__", "functional")
        return "functional" if name == "<lambda>" else name

    def __call__(self, *args, **kwargs):
        return self.func(*args, **kwargs)
