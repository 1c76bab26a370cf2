"""A small cache of raws derived from a dim's host lengths (index tensors), held weakly by the dim, and
forget(dim): what binding new lengths to a dim calls to drop every Python cache computed from the old
ones (this one, and those op modules register with on_forget)."""
from __future__ import annotations

import weakref

import torch

from .._C import Dim

# id(dim) -> (weak ref to dim, {key: value}). Keyed by id, not by a WeakKeyDictionary, so that a hit
# costs one dict lookup and no new weak ref; the ref's callback drops the entry when the dim dies
# (before its id can be reused).
_CACHE: dict = {}
_MAX_PER_DIM = 16
_PLAIN = (torch.Tensor, torch.nn.Parameter)  # layouts seen per dim are few; the oldest is dropped beyond this


def _forget(key: int, ref: weakref.ref) -> None:
    entry = _CACHE.get(key)
    if entry is not None and entry[0] is ref:
        _CACHE.pop(key, None)  # another thread may have replaced or dropped it meanwhile


def drop_oldest(d: dict) -> None:
    """Drops d's first key; another thread changing d meanwhile is no error (a cache only)."""
    try:
        d.pop(next(iter(d)), None)
    except (StopIteration, RuntimeError):
        pass


def lookup(dim: Dim, key):
    """The value stored for (dim, key), or None."""
    entry = _CACHE.get(id(dim))
    if entry is None:
        return None
    return entry[1].get(key)


def store(dim: Dim, key, value):
    """Stores value for (dim, key) until the dim dies; returns value. Values must not refer to
    Tensors or Dims (they would keep the dim alive). A raw of a trace (a FakeTensor, a tensor of
    symbolic sizes) is returned unstored: it must not outlive its trace nor reach an eager call."""
    if isinstance(value, torch.Tensor) and type(value) not in _PLAIN:
        return value
    i = id(dim)
    entry = _CACHE.get(i)
    if entry is None or entry[0]() is not dim:
        entry = _CACHE[i] = (weakref.ref(dim, lambda ref, i=i: _forget(i, ref)), {})
    per_dim = entry[1]
    if len(per_dim) >= _MAX_PER_DIM:
        drop_oldest(per_dim)
    per_dim[key] = value
    return value


def store_while_both_live(cache: dict, key, a: Dim, b: Dim, value) -> None:
    """cache[key] = (weak ref to a, weak ref to b, value) until a or b dies (its ref's callback drops the
    entry); a cache of a function's last calls by argument ids (key holds id(a), id(b)), so that a hit
    costs one dict lookup and no Dim is held. More than 64 entries: the cache starts afresh."""
    def forget(ref, key=key):
        entry = cache.get(key)
        if entry is not None and (entry[0] is ref or entry[1] is ref):
            del cache[key]

    if len(cache) >= 64:
        cache.clear()
    cache[key] = (weakref.ref(a, forget), weakref.ref(b, forget), value)


_FORGET_HOOKS: list = []


def on_forget(hook) -> None:
    """Registers hook(dim), called by forget(dim): an op module's cache keyed by a dim drops the
    entries computed from its lengths."""
    _FORGET_HOOKS.append(hook)


def forget(dim: Dim) -> None:
    """Drops everything cached for `dim` (its lengths changed: dimtorch.ops.dim binds new ones)."""
    entry = _CACHE.get(id(dim))
    if entry is not None and entry[0]() is dim:
        _CACHE.pop(id(dim), None)
    for hook in _FORGET_HOOKS:
        hook(dim)
