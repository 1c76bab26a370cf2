"""Module containers: ModuleList (list- and dict-like, as RETURNN frontend's), ModuleDict, Sequential, Functional."""
from __future__ import annotations

import operator
from collections import OrderedDict
from typing import Any, Callable, Dict, Iterable, Optional

import torch

from .module import Module

__all__ = ["Functional", "ModuleList", "ModuleDict", "Sequential", "sequential"]


class Functional(Module):
    """A module that calls `func(*args, **kwargs)` (a function or lambda kept in a ModuleList);
    `attribs` are set as attributes (e.g. out_dim), as RETURNN frontend's Functional."""

    def __init__(self, func: Callable, *, attribs: Optional[Dict[str, Any]] = None):
        super().__init__()
        if not callable(func):
            raise TypeError(f"dimtorch.nn.Functional(): func must be callable, got {type(func).__name__}")
        self.func = func
        for key, value in (attribs or {}).items():
            setattr(self, key, value)

    def forward(self, *args, **kwargs):
        return self.func(*args, **kwargs)

    def extra_repr(self) -> str:
        return getattr(self.func, "__qualname__", repr(self.func))


def _as_module(obj, caller: str) -> torch.nn.Module:
    if isinstance(obj, torch.nn.Module):
        return obj
    if callable(obj):
        return Functional(obj)
    raise TypeError(f"{caller}: expected a module or a callable, got {type(obj).__name__}")


def _is_int_str(key: str) -> bool:
    try:
        int(key)
        return True
    except ValueError:
        return False


class ModuleList(Module, torch.nn.ModuleList):
    """torch.nn.ModuleList with dt.nn.Module semantics, list- and dict-like as RETURNN frontend's:
    ModuleList(m1, m2), ModuleList([m1, m2]) or ModuleList({"enc": m1, "dec": m2}) (names kept;
    number names are renumbered by position); functions become Functional modules.

    `ml[i]` (int, negative too), `ml["name"]`, `ml[a:b]` (a ModuleList keeping the names), `items()`,
    `keys()`, `values()`; assignment and `del` by int, name or slice (number names renumbered);
    `append`, `extend`, `insert`. Iterating gives the modules in order; state-dict keys use the names."""

    def __init__(self, *modules):
        super().__init__()
        caller = f"dimtorch.nn.{type(self).__name__}()"
        if len(modules) == 1 and isinstance(modules[0], dict):
            items = list(modules[0].items())
        elif len(modules) == 1 and isinstance(modules[0], ModuleList):
            items = list(modules[0].items())
        elif len(modules) == 1 and not isinstance(modules[0], torch.nn.Module) and _iterable(modules[0]):
            items = [(None, m) for m in modules[0]]
        else:
            items = [(None, m) for m in modules]
        self._rebuild(items, caller)

    def _rebuild(self, items: list, caller: str) -> None:
        """The modules replaced by `items` ((name or None, module) pairs), in order; a None or a
        number name becomes the position."""
        new = {}
        for i, (key, module) in enumerate(items):
            if key is None or _is_int_str(key):
                key = str(i)
            if not isinstance(key, str):
                raise TypeError(f"{caller}: module names must be str, got {type(key).__name__}")
            if key in new:
                raise ValueError(f"{caller}: the name {key!r} is given twice")
            new[key] = _as_module(module, caller)
        self._modules.clear()
        for key, module in new.items():
            self.add_module(key, module)

    def _index(self, idx, caller: str) -> int:
        n = len(self._modules)
        i = operator.index(idx)
        if not -n <= i < n:
            raise IndexError(f"{caller}: index {i} is out of range for {n} modules")
        return i % n

    def items(self):
        return self._modules.items()

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def __getitem__(self, idx):
        caller = f"dimtorch.nn.{type(self).__name__}[]"
        if isinstance(idx, slice):
            return type(self)(dict(list(self._modules.items())[idx]))
        if isinstance(idx, str):
            if idx not in self._modules:
                raise KeyError(f"{caller}: no module named {idx!r} (names: {', '.join(self._modules)})")
            return self._modules[idx]
        if isinstance(idx, bool) or not hasattr(idx, "__index__"):
            raise TypeError(f"{caller}: index must be an int, a name or a slice, got {type(idx).__name__}")
        return list(self._modules.values())[self._index(idx, caller)]

    def __setitem__(self, idx, module) -> None:
        caller = f"dimtorch.nn.{type(self).__name__}[]"
        items = list(self._modules.items())
        if isinstance(idx, slice):
            if idx.step not in (None, 1):
                raise ValueError(f"{caller}: slice assignment needs step 1, got {idx.step}")
            start, stop, _ = idx.indices(len(items))
            self._rebuild(items[:start] + [(None, m) for m in module] + items[max(start, stop):], caller)
        elif isinstance(idx, str):
            self.add_module(idx, _as_module(module, caller))
        elif isinstance(idx, bool) or not hasattr(idx, "__index__"):
            raise TypeError(f"{caller}: index must be an int, a name or a slice, got {type(idx).__name__}")
        else:
            key = items[self._index(idx, caller)][0]
            self._modules[key] = _as_module(module, caller)

    def __delitem__(self, idx) -> None:
        caller = f"dimtorch.nn.{type(self).__name__}[]"
        if isinstance(idx, str):
            if idx not in self._modules:
                raise KeyError(f"{caller}: no module named {idx!r} (names: {', '.join(self._modules)})")
            del self._modules[idx]
            return
        items = list(self._modules.items())
        if isinstance(idx, slice):
            drop = set(range(len(items))[idx])
        elif isinstance(idx, bool) or not hasattr(idx, "__index__"):
            raise TypeError(f"{caller}: index must be an int, a name or a slice, got {type(idx).__name__}")
        else:
            drop = {self._index(idx, caller)}
        self._rebuild([item for i, item in enumerate(items) if i not in drop], caller)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module) -> "ModuleList":
        caller = f"dimtorch.nn.{type(self).__name__}.append()"
        key = str(len(self._modules))
        if key in self._modules:
            raise ValueError(f"{caller}: a module is already named {key!r}")
        self.add_module(key, _as_module(module, caller))
        return self

    def extend(self, modules: Iterable) -> "ModuleList":
        for module in modules:
            self.append(module)
        return self

    def insert(self, index: int, module) -> None:
        caller = f"dimtorch.nn.{type(self).__name__}.insert()"
        items = list(self._modules.items())
        i = operator.index(index)
        i = max(0, min(len(items), i + len(items) if i < 0 else i))
        self._rebuild(items[:i] + [(None, module)] + items[i:], caller)


def _iterable(obj) -> bool:
    try:
        iter(obj)
        return True
    except TypeError:
        return False


class ModuleDict(Module, torch.nn.ModuleDict):
    """torch.nn.ModuleDict with dt.nn.Module semantics; `md[i]` with an int gives the i-th module
    (list-like, as ModuleList's)."""

    def __getitem__(self, key):
        if isinstance(key, int) and not isinstance(key, bool):
            modules = list(self._modules.values())
            if not -len(modules) <= key < len(modules):
                raise IndexError(f"dimtorch.nn.ModuleDict[]: index {key} is out of range for {len(modules)} modules")
            return modules[key]
        return torch.nn.ModuleDict.__getitem__(self, key)


class Sequential(Module, torch.nn.Sequential):
    """torch.nn.Sequential with dt.nn.Module semantics, called as RETURNN frontend's Sequential:
    `Sequential(m1, m2)`, `Sequential([m1, m2])` (any iterable, e.g. a generator of layers) or
    `Sequential({"a": m1, "b": m2})`; functions become Functional modules. `seq(x, **kwargs)` calls
    each module as `module(x, **kwargs)` in order (e.g. spatial_dim= for every encoder layer);
    `collected_outputs=` (a dict) gets each module's output under its name."""

    def __init__(self, *modules):
        caller = "dimtorch.nn.Sequential()"
        if len(modules) == 1 and isinstance(modules[0], dict):
            modules = (OrderedDict((key, _as_module(m, caller)) for key, m in modules[0].items()),)
        else:
            if len(modules) == 1 and not isinstance(modules[0], torch.nn.Module) and _iterable(modules[0]):
                modules = tuple(modules[0])
            modules = tuple(_as_module(m, caller) for m in modules)
        super().__init__(*modules)

    def forward(self, inp, *, collected_outputs: Optional[Dict[str, Any]] = None, **kwargs):
        for name, module in self._modules.items():
            inp = module(inp, **kwargs)
            if collected_outputs is not None:
                collected_outputs[name] = inp
        return inp


def sequential(source, *modules):
    """modules applied in order to source (RETURNN frontend's rf.sequential, Sequential(*modules)(source));
    each module is called as a module (its hooks fire); a plain function is called as it is."""
    for m in modules:
        if not callable(m):
            raise TypeError(f"dimtorch.nn.sequential(): expected modules or callables, got {type(m).__name__}")
        source = m(source)
    return source
