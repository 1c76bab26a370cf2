"""Whether ops run eagerly on real data or are traced into a graph, and the in-graph forms of what
eager ops read from the host (lengths, masks and sizes of dynamic dims).

Eager ops may read a dynamic dim's host lengths (its max, an index built from them) and use the
per-dim caches of the C++ core: that is free of device syncs because lengths live on the host.
While torch.compile (Dynamo), torch.export or make_fx trace, none of that may happen: lengths are
graph inputs, masks are built in the graph from them, and sizes come from the raw tensors' shapes
(symbolic there). Op definitions branch on `tracing()` only where the two forms differ.
"""
from __future__ import annotations

import contextlib
import weakref

import torch

_forced = False
_forced_sizes = None  # the sizes bound under force_in_graph (dimtorch._core.sizes): a table per block
# Bound once: tracing() runs on eager calls of Python-composed ops (~0.1 us saved per call). Dynamo
# folds torch.compiler.is_compiling to True by the function object, so a bound name works there too.
_is_compiling = torch.compiler.is_compiling
_get_tracing_state = torch._C._get_tracing_state
_get_dispatch_mode = torch._C._get_dispatch_mode
_dispatch_stack_len = torch._C._len_torch_dispatch_stack  # counts the infra modes too; no argument to convert
_PROXY, _FAKE = torch._C._TorchDispatchModeKey.PROXY, torch._C._TorchDispatchModeKey.FAKE


def tracing() -> bool:
    """True while torch.compile/torch.export/make_fx/jit.trace trace (or under force_in_graph)."""
    if _forced or _is_compiling():
        return True
    if _get_tracing_state() is not None:  # torch.jit.trace
        return True
    # make_fx and non-strict export: a proxy or fake dispatch mode is active (none at all, eagerly).
    return _dispatch_stack_len() > 0 and (_get_dispatch_mode(_PROXY) is not None
                                          or _get_dispatch_mode(_FAKE) is not None)


def dynamo_tracing() -> bool:
    """True while Dynamo traces (torch.compile, strict export): a polyfill gives it there
    (dimtorch._capture.compile). In eager a plain call that returns False, ~3x cheaper than
    torch.compiler.is_compiling(), for the hot paths that skip a cache while Dynamo traces."""
    return False


@contextlib.contextmanager
def force_in_graph():
    """Runs op definitions' in-graph forms eagerly (tests compare them with the eager forms). Sizes bound
    to dims in the block (dimtorch._core.sizes) are forgotten after it, as after a trace."""
    global _forced, _forced_sizes
    old, _forced = _forced, True
    old_sizes, _forced_sizes = _forced_sizes, weakref.WeakKeyDictionary()
    try:
        yield
    finally:
        _forced, _forced_sizes = old, old_sizes


def forced_sizes():
    """The sizes table of the innermost force_in_graph block (None outside one)."""
    return _forced_sizes


def lengths_raw(dim, dims, device) -> torch.Tensor:
    """The lengths of dynamic `dim` as a raw int tensor on `device`, its axes aligned to `dims` (a
    tuple of Dims holding the lengths' batch dims; size 1 for the other dims of `dims`)."""
    raw = dim.lengths.raw_aligned(tuple(dims))
    return raw if raw.device == device else raw.to(device, non_blocking=True)


def mask_raw(dim, dims, shape, device) -> torch.Tensor:
    """Bool raw, True on the valid frames of dynamic `dim`, broadcastable to `shape` (the raw shape
    of a tensor over `dims`, which holds `dim` and its lengths' batch dims). Built in the graph:
    arange over the raw axis compared with the lengths; nothing is read on the host."""
    axis = dims.index(dim)
    view = [1] * len(dims)
    view[axis] = shape[axis]
    positions = torch.arange(shape[axis], device=device).reshape(view)
    return positions < lengths_raw(dim, dims, device)
