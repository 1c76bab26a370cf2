"""build_from_dict, build_dict (RETURNN frontend's): modules (or functions) from config dicts {"class": name, **opts}.

A "class" name is "rf.<Name>" (a name of dimtorch.rf), a dotted import path, or a RETURNN path: a name under
`returnn.frontend.` is looked up under `dimtorch.rf.` (so config dicts written for RETURNN build dimtorch's
modules unchanged)."""
from __future__ import annotations

import functools
import importlib
import sys
from types import BuiltinFunctionType, FunctionType
from typing import Any, Callable, Dict, Type, Union

__all__ = ["build_from_dict", "build_dict"]

_RETURNN_PREFIX = "returnn.frontend"


def build_from_dict(d: Dict[str, Any], *args, **kwargs) -> Any:
    """cls(*args, **opts, **kwargs) for d = {"class": name, **opts}; a function with arguments gives a partial."""
    caller = "dimtorch.rf.build_from_dict()"
    if not isinstance(d, dict) or "class" not in d:
        raise ValueError(f"{caller}: expected a dict with a 'class' entry, got {d!r}")
    opts = dict(d)
    cls = _get_cls(opts.pop("class"), caller)
    if isinstance(cls, (FunctionType, BuiltinFunctionType)):
        return functools.partial(cls, *args, **opts, **kwargs) if (args or kwargs or opts) else cls
    if not isinstance(cls, type):
        raise ValueError(f"{caller}: {d['class']!r} is not a class or function, got {cls!r}")
    return cls(*args, **opts, **kwargs)


def build_dict(cls: Union[Type, Callable[..., Any]], **kwargs) -> Dict[str, Any]:
    """{"class": the name of cls, **kwargs}, for build_from_dict."""
    if not isinstance(cls, (type, FunctionType, BuiltinFunctionType)):
        raise TypeError(f"dimtorch.rf.build_dict(): expected a class or function, got {cls!r}")
    rf = sys.modules[__package__]  # (the package is imported before any of its modules)
    if getattr(rf, cls.__name__, None) is cls:
        return {"class": f"rf.{cls.__name__}", **kwargs}
    return {"class": f"{cls.__module__}.{cls.__qualname__}", **kwargs}


def _get_cls(name: str, caller: str):
    if not isinstance(name, str) or "." not in name:
        raise ValueError(f"{caller}: 'class' must be a dotted name (e.g. 'rf.LayerNorm'), got {name!r}")
    mod_name, attr = name.rsplit(".", 1)
    if mod_name == "rf":
        mod_name = "dimtorch.rf"
    elif mod_name == _RETURNN_PREFIX or mod_name.startswith(_RETURNN_PREFIX + "."):
        mod_name = "dimtorch.rf" + mod_name[len(_RETURNN_PREFIX):]
    mod = importlib.import_module(mod_name)
    try:
        return getattr(mod, attr)
    except AttributeError:
        raise ValueError(f"{caller}: {mod_name} has no {attr!r} (from 'class': {name!r})") from None
