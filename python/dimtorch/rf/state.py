"""rf.State (RETURNN frontend's): the state of a recurrent module, a dict with attribute access.

A State (and every subclass, e.g. LstmState, CausalSelfAttentionState) is a torch pytree node (its
values the children, its keys the context, in sorted order as dm-tree has them: a body may fill a new
state in any order), so dimtorch's loops (rf.scan, rf.while_loop) mask and carry
it leaf by leaf, and torch.compile sees through it. As in RETURNN, `type(state)(pairs)` rebuilds one from
an iterable of (key, value) pairs (what dm-tree's map_structure does), so subclasses take `*args` first.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any, List

import torch.utils._pytree as pytree

from .._C import Tensor

__all__ = ["State"]


def _keys(state: "State") -> list:
    """The keys in sorted order (dm-tree's order, which RETURNN's loops compare structures by): two states
    with the same entries are the same structure whatever order they were filled in."""
    try:
        return sorted(state.keys())
    except TypeError:  # keys that do not sort: their order
        return list(state.keys())


def _flatten(state: "State"):
    keys = _keys(state)
    return [state[k] for k in keys], keys


def _unflatten_for(cls):
    def unflatten(values, keys):
        return cls(zip(keys, values))
    return unflatten


def _flatten_with_keys(state: "State"):
    keys = _keys(state)
    return [(pytree.MappingKey(k), state[k]) for k in keys], keys


class State(dict):
    """State(**kwargs), State(dict), State(iterable of (key, value)) or State(value) (one entry named
    "state"); `s.key` reads and assigns `s["key"]`."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _register(cls)

    def __init__(self, *args, **kwargs):
        if kwargs:
            if args:
                raise TypeError("dimtorch.rf.State(): give either keyword entries or one positional argument")
            super().__init__(**kwargs)
        elif args:
            if len(args) != 1:
                raise TypeError(f"dimtorch.rf.State(): at most one positional argument, got {len(args)}")
            arg = args[0]
            if isinstance(arg, dict):
                super().__init__(arg)
            elif isinstance(arg, Iterable) and not isinstance(arg, (Tensor, str)):
                super().__init__(arg)
            else:
                super().__init__(state=arg)
        else:
            super().__init__()

    # The order of its children, as its pytree node lists them: dimtorch's loops walk a State without pytree.
    _dt_tree_keys = staticmethod(_keys)

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.items())})"

    def __getattr__(self, item):
        if item in self:
            return self[item]
        raise AttributeError(f"{type(self).__name__} has no entry {item!r} (entries: {', '.join(map(str, self))})")

    def __setattr__(self, key, value):
        self[key] = value

    def __delattr__(self, key):
        try:
            del self[key]
        except KeyError:
            raise AttributeError(key) from None

    def __copy__(self):
        return type(self)(self.items())

    def __deepcopy__(self, memo):
        import copy
        return type(self)((k, copy.deepcopy(v, memo)) for k, v in self.items())

    def __reduce__(self):
        return type(self), (list(self.items()),)

    def flatten_tensors(self) -> List[Tensor]:
        """The Tensors in this state and its nested dicts, lists and tuples (each once)."""
        return self.cls_flatten_tensors(self)

    @classmethod
    def cls_flatten_tensors(cls, obj: Any) -> List[Tensor]:
        seen, out, queue = set(), [], [obj]
        while queue:
            x = queue.pop()
            if isinstance(x, Tensor):
                if id(x) not in seen:
                    seen.add(id(x))
                    out.append(x)
            elif isinstance(x, dict):
                queue.extend(x.values())
            elif isinstance(x, (list, tuple)):
                queue.extend(x)
            elif x is not None:
                raise TypeError(f"dimtorch.rf.State.cls_flatten_tensors(): unexpected {type(x).__name__}")
        return out


def _register(cls) -> None:
    pytree.register_pytree_node(cls, _flatten, _unflatten_for(cls), flatten_with_keys_fn=_flatten_with_keys,
                                serialized_type_name=f"{cls.__module__}.{cls.__qualname__}")


_register(State)
