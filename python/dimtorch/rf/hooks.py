"""rf.hooks (RETURNN frontend's): setup_post_hook_on_method(obj, attr, hook, *, prepend=False) -> RemovableHandle.

After `obj.<attr>(*args, **kwargs)` returns `result`, each hook runs as `hook(obj, args, kwargs, result)`; a hook
that returns something other than None replaces the result. Per object: for a method the object gets an
instance attribute that wraps it; for "__call__" (looked up on the type by Python) the object's class becomes
a subclass of it made once per class, whose __call__ runs the hooks. Removing the last hook restores the
object. rf.Module.register_forward_hook uses this for rf-style modules (their own __call__, which torch's
module hooks never see)."""
from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any, Callable, Dict, Optional, Tuple

__all__ = ["setup_post_hook_on_method", "RemovableHandle"]

_HOOKS = "_rf_method_hooks"  # obj.__dict__ entry: attr -> OrderedDict of hooks
_hooked_classes: Dict[type, type] = {}
_ids = itertools.count()


def _run(obj, attr: str, original: Callable, args, kwargs):
    result = original(*args, **kwargs)
    for hook in list(obj.__dict__[_HOOKS][attr].values()):
        out = hook(obj, args, kwargs, result)
        if out is not None:
            result = out
    return result


def _hooked_class(cls: type) -> type:
    """cls's subclass whose __call__ runs the object's "__call__" hooks (made once per class)."""
    sub = _hooked_classes.get(cls)
    if sub is None:
        def __call__(self, *args, **kwargs):
            hooks = self.__dict__.get(_HOOKS, {}).get("__call__")
            original = cls.__call__.__get__(self, cls)
            if not hooks:
                return original(*args, **kwargs)
            return _run(self, "__call__", original, args, kwargs)
        sub = type(cls.__name__, (cls,), {"__call__": __call__, "__module__": cls.__module__,
                                           "__qualname__": cls.__qualname__, "_rf_hooked_base": cls})
        _hooked_classes[cls] = sub
    return sub


def setup_post_hook_on_method(obj: Any, attr: str, hook: Callable[[Any, Tuple[Any, ...], Dict[str, Any], Any],
                                                                  Optional[Any]], *, prepend: bool = False
                              ) -> "RemovableHandle":
    """Runs `hook(obj, args, kwargs, result)` after each call of obj.<attr>; see the module docstring."""
    if not callable(hook):
        raise TypeError(f"dimtorch.rf.setup_post_hook_on_method(): hook must be callable, got {type(hook).__name__}")
    hooks_by_attr = obj.__dict__.setdefault(_HOOKS, {})
    hooks = hooks_by_attr.get(attr)
    if hooks is None:
        hooks = hooks_by_attr[attr] = OrderedDict()
        if attr == "__call__":
            obj.__class__ = _hooked_class(type(obj))
        else:
            original = getattr(obj, attr)
            if not callable(original):
                raise TypeError(f"dimtorch.rf.setup_post_hook_on_method(): {type(obj).__name__}.{attr} is not a method")

            def wrapper(*args, **kwargs):
                return _run(obj, attr, original, args, kwargs)
            wrapper._rf_original = original
            obj.__dict__[attr] = wrapper  # an instance attribute (past a module's __setattr__), found before the method
    handle = RemovableHandle(obj, attr)
    hooks[handle.id] = hook
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    return handle


class RemovableHandle:
    """Removes its hook with `remove()` (or on leaving a `with` block)."""

    def __init__(self, obj, attr: str):
        self.obj, self.attr, self.id = obj, attr, next(_ids)

    def remove(self) -> None:
        d = self.obj.__dict__
        hooks = d.get(_HOOKS, {}).get(self.attr)
        if hooks is None or self.id not in hooks:
            return
        del hooks[self.id]
        if hooks:
            return
        del d[_HOOKS][self.attr]
        if self.attr == "__call__":
            base = getattr(type(self.obj), "_rf_hooked_base", None)
            if base is not None:
                self.obj.__class__ = base
        else:
            d.pop(self.attr, None)

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()
