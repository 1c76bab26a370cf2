"""fully_shard: torch's FSDP2 for dimtorch modules, whose forward takes and returns dimtorch Tensors."""
from __future__ import annotations

from typing import Any, NamedTuple

import torch

from .._C import Tensor

__all__ = ["fully_shard"]


class _Raw(NamedTuple):
    """A dimtorch Tensor shown to FSDP's hooks as its raw (a NamedTuple field, which they traverse)."""
    raw: torch.Tensor
    tensor: Tensor


def _map(obj: Any, leaf) -> Any:
    """obj with leaf(v) in place of each v in it that is not a plain tuple, list or dict (a NamedTuple is one)."""
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_map(v, leaf) for v in obj)
    if isinstance(obj, list):
        return [_map(v, leaf) for v in obj]
    if isinstance(obj, dict):
        return {k: _map(v, leaf) for k, v in obj.items()}
    return leaf(obj)


def _expose_one(obj: Any) -> Any:
    return _Raw(obj.raw, obj) if isinstance(obj, Tensor) else obj


def _restore_one(obj: Any) -> Any:
    if not isinstance(obj, _Raw):
        return obj
    t = obj.tensor
    if obj.raw is t.raw:
        return t
    return Tensor(obj.raw, t.dims, sparse_dim=t.sparse_dim, feature_dim=t.feature_dim, name=t.name)


def _expose(obj: Any) -> Any:
    """obj with every dimtorch Tensor (in tuples, lists, dicts) replaced by a _Raw."""
    return _map(obj, _expose_one)


def _restore(obj: Any) -> Any:
    """Undoes _expose; a raw that FSDP replaced (its backward hook, a dtype cast) gets a new Tensor
    with the same dims and markers."""
    return _map(obj, _restore_one)


def _expose_inputs(module, args, kwargs):
    return _expose(args), _expose(kwargs)


def _restore_inputs(module, args, kwargs):
    return _restore(args), _restore(kwargs)


def _expose_output(module, args, output):
    return _expose(output)


def _restore_output(module, args, output):
    return _restore(output)


def fully_shard(module, **kwargs):
    """torch.distributed.fsdp.fully_shard(module, **kwargs) for a module whose forward takes or returns
    dimtorch Tensors (every dt.nn layer); returns the module, as torch's does. `module` may also be a
    list of modules (one group), as torch allows.

    /* FSDP2 finds the tensors of a forward's inputs and outputs by walking tuples, lists, dicts,
       NamedTuples and dataclasses: it hooks the outputs to all-gather the parameters again before
       their backward (after resharding them at the end of the forward) and the inputs to reduce the
       gradients after it. A dimtorch Tensor is none of those, so torch's fully_shard alone loses the
       pre-backward all-gather of every layer that returns one (the backward then reads freed
       parameters). Around FSDP's own hooks (its pre-forward hook is first, its forward hook last),
       this shows each dimtorch Tensor as a NamedTuple holding its raw, and turns it back after. */

    Register your own forward hooks on `module` after calling this: hooks registered before it see
    the NamedTuples. Parameters held sharded read as DTensors outside the forward (dt.nn.Module).
    """
    from torch.distributed.fsdp import fully_shard as torch_fully_shard

    torch_fully_shard(module, **kwargs)
    for m in module if isinstance(module, (list, tuple)) else (module,):
        m.register_forward_pre_hook(_expose_inputs, prepend=True, with_kwargs=True)
        m.register_forward_pre_hook(_restore_inputs, with_kwargs=True)
        m.register_forward_hook(_expose_output, prepend=True)
        m.register_forward_hook(_restore_output)
    return module
