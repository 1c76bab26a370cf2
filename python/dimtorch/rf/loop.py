"""rf.while_loop and rf.scan (RETURNN frontend's signatures) on dimtorch's loops (dt.while_loop, dt.scan):
eager, one Python iteration per step, as rf's PyTorch backend.

rf.scan collects the body's outputs itself, per step, as TensorArrays: with return_tensor_arrays=True
they are returned as they are (a step's output may have other dims than the ys template, e.g. a beam dim
that changes every step), else stacked over the loop's dim. States are any pytree (dicts, tuples,
rf.State and its subclasses such as LstmState and CausalSelfAttentionState); a state Tensor that grows
(an attention history) is carried as it is, one over the sequences' dims is kept per sequence after its
end (dt.scan's rules).
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Tuple, Union

import torch.utils._pytree as pytree

from .. import _C
from .._C import Dim, Tensor
from .._core import tracing as _tracing
from ..ops import loop as _loop
from .tensor_array import TensorArray

__all__ = ["while_loop", "scan"]


def while_loop(cond: Callable[[Any], Union[bool, Tensor]], body: Callable[[Any], Any], initial: Any) -> Any:
    """`while cond(s): s = body(s)`, from `initial`; returns the final s. A Tensor cond is read from the
    device once per iteration. (Dict states may come back with their keys in another order.)"""
    def ordered_body(s):
        return _like(body(s), s)
    return _C.while_loop(cond, ordered_body, initial)  # (the C++ fast path: python/dimtorch/ops/loop.py's)


def _is_leaf(x) -> bool:
    return x is None or isinstance(x, (Tensor, Dim, TensorArray))


def scan(*, spatial_dim: Optional[Dim] = None, cond_dims: Optional[Sequence[Dim]] = None,
         cond_before_body: bool = True, initial: Any = None, xs: Any = None, ys: Any = None,
         cond: Optional[Callable[[Any, Any], Tensor]] = None, body: Callable[[Any, Any], Tuple[Any, Any]],
         max_seq_len: Optional[Union[int, Tensor]] = None, return_tensor_arrays: bool = False
         ) -> Tuple[Any, Any, Dim]:
    """A loop over the frames of `spatial_dim` (with `xs` unstacked along it), or, without spatial_dim,
    while `cond(None, s)` (a bool Tensor over `cond_dims`) holds for some entry (at most max_seq_len
    steps). `body(x, s) -> (y, new s)`; `ys` gives the outputs' structure as Tensor templates (dims of
    one step). Returns (outputs stacked over the loop's dim, or TensorArrays with return_tensor_arrays,
    final state, the loop's dim: spatial_dim, or a new dim whose lengths are each entry's step count).
    See dt.scan for the per-sequence rules (state kept after a sequence's end; the step whose new state
    turns cond false counts, its new state is dropped)."""
    caller = "dimtorch.rf.scan()"
    templates, spec = pytree.tree_flatten(ys, is_leaf=_is_leaf)
    for t in templates:
        if t is not None and not isinstance(t, Tensor):
            raise TypeError(f"{caller}: ys must hold Tensor templates (or None), got {type(t).__name__}")
    if (_tracing.tracing() and not return_tensor_arrays and spatial_dim is not None
            and (spatial_dim.lengths is not None or spatial_dim.size is not None)):
        # Traced, the loop is one torch scan whose body runs once: its outputs go through dt.scan's ys
        # (stacked in the graph), not into Python lists (a side effect the scan cannot hold).
        def ordered_body(x, s):
            y, new_s = body(x, s)
            return y, _like(new_s, s)
        return _loop.scan(spatial_dim=spatial_dim, initial=initial, xs=xs, ys=ys, body=ordered_body)
    arrays = [TensorArray(t) if t is not None else None for t in templates]
    steps = [[] for _ in templates]

    # ys a dict of templates (the common case): each step's outputs are checked without a pytree spec
    flat_keys = list(ys) if type(ys) is dict and all(_is_leaf(v) for v in ys.values()) else None

    def collecting_body(x, s):
        y, new_s = body(x, s)
        new_s = _like(new_s, s)
        if flat_keys is not None and type(y) is dict and list(y) == flat_keys and all(map(_is_leaf, y.values())):
            leaves, y_spec = list(y.values()), spec
        else:
            leaves, y_spec = pytree.tree_flatten(y, is_leaf=_is_leaf)
        if y_spec != spec:
            raise ValueError(f"{caller}: body's outputs have another structure than the ys templates: {y_spec} vs "
                             f"{spec}")
        for i, leaf in enumerate(leaves):
            if arrays[i] is not None:
                if not isinstance(leaf, Tensor):
                    raise TypeError(f"{caller}: output {i} of body must be a Tensor, got {type(leaf).__name__}")
                steps[i].append(leaf)
        return None, new_s

    bind_dim = None
    if spatial_dim is not None and spatial_dim.lengths is None and spatial_dim.size is None:
        # a declared dim without lengths: loop on cond, then the dim gets the step counts (RETURNN's way)
        bind_dim, spatial_dim = spatial_dim, None
    _, final, out_dim = _loop.scan(spatial_dim=spatial_dim, cond_dims=cond_dims, cond_before_body=cond_before_body,
                                   initial=initial, xs=xs, ys=None, cond=cond, body=collecting_body,
                                   max_seq_len=max_seq_len)
    if bind_dim is not None:
        _bind_lengths(bind_dim, out_dim, caller)
        out_dim = bind_dim
    arrays = [TensorArray(a.tensor_template, _items=s) if a is not None else None for a, s in zip(arrays, steps)]
    if not return_tensor_arrays:
        arrays = [a.stack(axis=out_dim) if a is not None else None for a in arrays]
    return pytree.tree_unflatten(arrays, spec), final, out_dim


def _like(new, old):
    """new with the dicts' keys in old's order (RETURNN compares loop states as dm-tree does, by sorted keys:
    a body may fill a new dict state in another order)."""
    if type(new) is dict and type(old) is dict and new.keys() == old.keys() and list(new) != list(old):
        return {k: _like(new[k], old[k]) for k in old}
    if isinstance(new, dict) and isinstance(old, dict) and new.keys() == old.keys():
        for k in new:
            v = _like(new[k], old[k])
            if v is not new[k]:
                new[k] = v
        return new
    if type(new) in (tuple, list) and type(old) is type(new) and len(new) == len(old):
        items = [_like(a, b) for a, b in zip(new, old)]
        return new if all(a is b for a, b in zip(items, new)) else type(new)(items)
    return new


def _bind_lengths(dim: Dim, source: Dim, caller: str) -> None:
    """Gives the declared `dim` the lengths of `source` (the loop's new dim), through the Dim API of
    dimtorch.rf.tensor (RETURNN's `dim.dyn_size_ext = lengths`)."""
    lengths = source.lengths
    try:
        dim.dyn_size_ext = lengths if lengths is not None else Tensor(
            __import__("torch").tensor(source.size), ())
    except AttributeError:
        raise NotImplementedError(f"{caller}: spatial_dim {dim!r} has no size; binding it to the loop's lengths "
                                  f"needs Dim.dyn_size_ext (dimtorch.rf.tensor); pass spatial_dim=None and use the "
                                  f"returned dim") from None
