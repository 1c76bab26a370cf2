"""Star-imports of dimtorch.rf modules that may not exist (yet) in a checkout: the modules of rf's Tensor
and Dim API, modules, run context and loops are written beside the functions' modules, and each lands on
its own. A module that is there is imported as usual (its errors propagate); one that is missing is
skipped."""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Optional


def import_optional(package: str, name: str) -> Optional[ModuleType]:
    """package.name, or None when that module does not exist (an import error inside it propagates)."""
    full = f"{package}.{name}"
    try:
        return importlib.import_module(full)
    except ModuleNotFoundError as e:
        if e.name != full:
            raise
        return None


def star_import_optional(package: str, name: str, namespace: dict) -> Optional[ModuleType]:
    """`from .name import *` into `namespace` when package.name exists; the module, or None."""
    module = import_optional(package, name)
    if module is not None:
        names = getattr(module, "__all__", None)
        if names is None:
            names = [n for n in vars(module) if not n.startswith("_")]
        namespace.update({n: getattr(module, n) for n in names})
    return module
