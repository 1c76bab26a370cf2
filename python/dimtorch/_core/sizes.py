"""Raw sizes of dims for new tensors: the padded size of a dynamic dim and the size of a dim sized from
data, eagerly and while tracing (torch.compile, torch.export, make_fx).

Eagerly a new tensor over a dynamic dim takes the dim's longest sequence (a host int the core keeps),
and a dim sized from data (the batch) the size it has in the lengths of a dim listed beside it.

While tracing there is no host value. Every dim that is not static gets a *bound size* in the trace,
kept for that trace only (never on the Dim beyond it, so that no Dim keeps a graph, a fake mode or a
SymInt alive), by the first rule that gives one:

1. the size of the first raw axis over the dim made into a Tensor in the trace (`Tensor()`'s definition
   binds it: the data's, the lengths', every op's output): a SymInt of the graph inputs' sizes, so
   later raws over the dim compare equal expressions (no guard);
2. for a dim made by dim math, the same math on its operands' sizes (T + 1 -> size(T) + 1);
3. for a dim sized from data, its size in the lengths of a dim listed beside it;
4. for a dynamic dim no raw gave a size (a dim made from lengths alone): the max of its lengths read in
   the graph, an unbacked SymInt (torch.compile needs fullgraph=True for it, as for any .item());
5. else an error naming the call and the ways out.

Where the bound sizes live: while Dynamo traces (torch.compile, strict export), as the Dim's attribute
`_padded_size`, which Dynamo keeps as the object's state in the trace (the C type's setter drops the
store Dynamo replays after the graph); while make_fx or non-strict export trace, in a weak table hung
on the trace's fake mode, which dies with the trace. `Dim(SymInt)` keeps its size in the same table.
"""
from __future__ import annotations

import contextlib
import weakref

import torch

from . import tracing as _tracing
from .._C import Dim
from .args import dim_str

_FAKE, _PROXY = torch._C._TorchDispatchModeKey.FAKE, torch._C._TorchDispatchModeKey.PROXY
_TABLE_ATTR = "_dimtorch_sizes"


def _table() -> "weakref.WeakKeyDictionary":
    """The bound sizes of this make_fx/export trace: a weak table (Dim -> size) on its fake mode (its
    proxy mode for tracing_mode="real")."""
    mode = torch._C._get_dispatch_mode(_FAKE) or torch._C._get_dispatch_mode(_PROXY)
    if mode is None:  # force_in_graph (tests run in-graph forms eagerly): its block's table
        table = _tracing.forced_sizes()
        return table if table is not None else weakref.WeakKeyDictionary()
    table = mode.__dict__.get(_TABLE_ATTR)
    if table is None:
        table = mode.__dict__[_TABLE_ATTR] = weakref.WeakKeyDictionary()
    return table


def bound(dim: Dim):
    """The size bound to `dim` in this trace, or None."""
    if _tracing.dynamo_tracing():
        return dim._padded_size
    return _table().get(dim)


_body_tables: list = []  # the tables of make_fx/export traces around the torch scan being traced (innermost last)


def outer_bound(dim: Dim):
    """Dim._padded_size as the core gives it: the size bound in the make_fx/export trace around a torch scan
    whose body Dynamo traces, else None. Read only by Dynamo (eagerly nothing reads it): there the dims
    bound in the trace around are bound in the body too, and the body stores nothing on them (Dynamo
    refuses a scan body that mutates an object from outside it)."""
    return _body_tables[-1].get(dim) if _body_tables else None


@contextlib.contextmanager
def scan_body_sizes():
    """Around a torch scan (dimtorch._core.in_graph.scan_frames): under make_fx/export, Dynamo traces its
    body, and sees this trace's sizes through Dim._padded_size (outer_bound)."""
    pushed = not _tracing.dynamo_tracing()
    if pushed:
        _body_tables.append(_table())
    try:
        yield
    finally:
        if pushed:
            _body_tables.pop()


def bind(dim: Dim, size) -> None:
    """Records `size` (an int or SymInt) as dim's size in this trace, unless it has one already. The
    one way to give a dim a size while tracing: a binding never writes a field of the Dim itself."""
    if _tracing.dynamo_tracing():
        if dim._padded_size is None:
            dim._padded_size = size
        return
    table = _table()
    if dim not in table:
        table[dim] = size


def bind_tensor_dims(raw, dims) -> None:
    """Tensor()'s definition while tracing: each dim without a static size gets raw's size (rule 1)."""
    for i, d in enumerate(dims):
        if d.size is None:
            bind(d, raw.shape[i])


def _math(op: str, x, k: int, y=None):
    """A dim-math result on sizes (ints or SymInts): what dim math does to lengths, on a padded size."""
    if op == "add":
        return x + k
    if op == "sub":
        return torch.sym_max(x - k, 0)
    if op == "mul":
        return x * k
    if op == "floordiv":
        return x // k
    if op == "ceildiv":
        return (x + (k - 1)) // k
    return x + y  # concat: the sum bounds every sequence's a + b


def _derived(dim: Dim, caller: str):
    """Rule 2: the padded size by dim math on the operands' padded sizes (None for a dim not derived)."""
    derivation = dim.derivation
    if derivation is None:
        return None
    op, a, b, k = derivation
    return _math(op, padded_size(a, caller), k, padded_size(b, caller) if op == "concat" else None)


def _from_lengths_beside(dim: Dim, beside):
    """Rule 3: dim's size in the lengths of a dynamic dim among `beside` (their lengths are over it)."""
    for e in beside:
        if e is dim:
            continue
        lengths = e.dyn_size
        if lengths is not None:
            for i, b in enumerate(lengths.dims):
                if b is dim:
                    return lengths.raw.shape[i]
    return None


def _unbacked_max(dim: Dim):
    """Rule 4: the max of dim's lengths, read in the graph: an unbacked SymInt (a data-dependent size)."""
    raw = dim.dyn_size.raw
    n = raw.max().item() if raw.numel() else 0
    torch._check(n >= 0)
    return n


def _no_size(dim: Dim, caller: str, what: str) -> ValueError:
    if _tracing.tracing():
        return ValueError(f"{caller}: {what} {dim_str(dim)} takes its size from data and no tensor in this trace gave "
                          f"it one; make a tensor over it first (e.g. the Tensor of lengths over it) or give it a size")
    return ValueError(f"{caller}: {what} {dim_str(dim)} takes its size from data, so a new tensor over it has no "
                      f"size; make it from an existing tensor (zeros_like), give the dim a size, or list a dim "
                      f"whose lengths are over it beside it")


def padded_size(dim: Dim, caller: str, beside=(), what: str = "dim"):
    """The raw size of a new tensor's axis over `dim` (`beside`: the other dims of that tensor): its
    static size; eagerly a dynamic dim's longest sequence (the core's host max), while tracing its
    size bound in the trace (see the module's rules). An error naming `caller` (and the argument,
    `what`) where there is none."""
    size = dim.size
    if size is not None:
        return size
    if not _tracing.tracing():
        n = dim.get_max_size()
        if n is None:
            n = _from_lengths_beside(dim, beside)
        if n is None:
            raise _no_size(dim, caller, what)
        return n
    n = bound(dim)
    if n is None:
        n = _derived(dim, caller)
        if n is None:
            n = _from_lengths_beside(dim, beside)
        if n is None and dim.dyn_size is not None:
            n = _unbacked_max(dim)
        if n is None:
            raise _no_size(dim, caller, what)
        bind(dim, n)
    return n


def padded_sizes(dims, caller: str) -> list:
    """padded_size of each of `dims` (a new tensor over them): each dim's others are `beside` it."""
    return [padded_size(d, caller, dims) for d in dims]


# ---- Dim(SymInt) while make_fx/export trace: the core keeps no SymInt (src/core/dim.cpp) ---------

def set_traced_size(dim: Dim, size) -> None:
    """Dim(SymInt)'s size, kept in this trace's table (the core calls this from Dim.size's setter)."""
    _table()[dim] = size


def traced_size(dim: Dim):
    """Dim.size of a dim made from a SymInt (or derived from one by dim math): from this trace's table;
    None once the trace is over."""
    n = _table().get(dim)
    if n is None and dim.derivation is not None:
        op, a, b, k = dim.derivation
        x = a.size
        y = b.size if op == "concat" else 0
        if x is not None and y is not None:
            n = x - k if op == "sub" else _math(op, x, k, y)  # (static dim math: no clamp at 0)
    return n
