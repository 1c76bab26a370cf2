"""The ground floor of the Python ops: argument checks and the dim/dims strings of error messages.

Every op module imports these; this module imports only dimtorch._C, so that it sits below all of
them (an op module importing another op module for a helper would tie the two together).
"""
from __future__ import annotations

from . import tracing as _tracing
from .._C import Dim, Tensor


def dim_str(dim: Dim, among=()) -> str:
    """`'name'(size)` or `'name'[batch]`: a dim as error messages show it; `#n` appended when
    another Dim object of its name is in `among` (Dims and sequences of Dims: the message's others)."""
    if _tracing.dynamo_tracing():
        return _traced_dim_str(dim)
    r = repr(dim)
    s = r[4:-1] if r.startswith("Dim{") and r.endswith("}") else r
    return s + dim._message_id if isinstance(dim, Dim) and has_namesake(dim, among) else s


def _traced_dim_str(dim) -> str:
    """dim_str while Dynamo traces, from the Dim's fields: Dynamo cannot trace the C type's repr (every
    message would read "untraceable user-defined __repr__" instead of dimtorch's). No `#n` there."""
    if not isinstance(dim, Dim):
        return str(dim)
    s = "'" + (dim.name if dim.name is not None else "<unnamed>") + "'"
    size = dim.size
    if size is not None:
        return s + ("(" + str(size) + ")" if type(size) is int else "(symbolic)")
    lengths = dim._lengths  # (not dyn_size: that would compute a derived dim's lengths in the graph)
    if lengths is not None:
        return s + "[" + ",".join(b.name if b.name is not None else "<unnamed>" for b in lengths.dims) + "]"
    return s + ("[derived]" if dim.derivation is not None else "(?)")


def dims_str(dims, among=()) -> str:
    """Dims of a tensor as error messages show them: `'batch'(?), 'time'[batch], 'f'(4)`."""
    return ", ".join(dim_str(d, (dims, among)) for d in dims) or "(none)"


def _flat_dims(groups) -> list:
    out = []
    for g in groups:
        if isinstance(g, Dim):
            out.append(g)
        elif isinstance(g, (tuple, list)):
            out.extend(_flat_dims(g))
    return out


def has_namesake(dim: Dim, among) -> bool:
    """Whether a Dim object other than `dim` in `among` (nested Dims and sequences) has its name."""
    return any(d is not dim and d.name == dim.name for d in _flat_dims((among,)))


def namesakes_note(*groups) -> str:
    """"; 'f'(80)#1 and 'f'(80)#2 are different Dim objects with the same name" for the first two
    different Dims of one name in `groups` (as src/core/message_dims.cpp says it), else ""."""
    dims = _flat_dims(groups)
    for i, a in enumerate(dims):
        for b in dims[i + 1:]:
            if a is not b and a.name == b.name:
                return (f"; {dim_str(a, groups)} and {dim_str(b, groups)} are different Dim objects "
                        f"with the same name")
    return ""


def check_tensor(x, caller: str, what: str = "x") -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{caller}: {what} must be a dimtorch.Tensor, got {type(x).__name__}")


def dims_arg(value, caller: str, what: str, type_name=None) -> tuple:
    """A Dim or a list or tuple of Dims as a tuple (as the core's dims_arg_to_tuple takes them); a
    TypeError naming the call for anything else, with the wrong type named by type_name(value) (default:
    its class's name)."""
    if isinstance(value, Dim):
        return (value,)
    if not isinstance(value, (list, tuple)):
        name = type_name(value) if type_name else type(value).__name__
        raise TypeError(f"{caller}: {what} must be a Dim or a sequence of Dims, got {name}")
    dims = tuple(value)
    for i, d in enumerate(dims):
        if not isinstance(d, Dim):
            name = type_name(d) if type_name else type(d).__name__
            raise TypeError(f"{caller}: {what}[{i}] must be a Dim, got {name}")
    return dims


def axis_of(x: Tensor, dim, caller: str, what: str = "axis", of: str = "x") -> int:
    """Raw axis of `dim` in `x`, or a clear error naming x's dims."""
    if not isinstance(dim, Dim):
        raise TypeError(f"{caller}: {what} must be a Dim, got {type(dim).__name__}")
    dims = x.dims
    if dim in dims:  # Dim equality is identity
        return dims.index(dim)
    raise ValueError(f"{caller}: {what} {dim_str(dim)} is not a dim of {of} (dims: {dims_str(x.dims)})")


def distinct_axes(x: Tensor, dims: tuple, caller: str, what: str, entry: str = "", empty: str = "") -> list:
    """Raw axes in x of `dims` (a tuple of Dims: dims_arg's), which must be non-empty and name no dim twice;
    errors name the call, `what` the argument ("<entry> <dim> is not a dim of x" for a dim x lacks, `empty`
    is added to the error for none)."""
    if not dims:
        raise ValueError(f"{caller}: {what} is empty{empty}")
    axes = [axis_of(x, d, caller, what=entry or what) for d in dims]
    if len(set(axes)) != len(axes):
        raise ValueError(f"{caller}: {what} lists a dim twice ({dims_str(dims)})")
    return axes


def repeats_a_dim(dims) -> bool:
    """Whether the tuple `dims` names a dim twice. By Dim equality (identity), not a set of id()s: under
    torch.compile an id() guards on the Dim object, so a layer compiled on its own (FSDP2's per-layer compile)
    would recompile for every batch's new Dim."""
    return any(d in dims[:i] for i, d in enumerate(dims))


def lengths_positions(dim: Dim, layout: tuple, caller: str, lacks: str) -> list:
    """The positions in `layout` of the dims the lengths of the dynamic `dim` vary over, in the lengths' order;
    a ValueError naming the call for one that layout lacks ("... which <lacks>"; "{dims}" in lacks stands
    for layout's dims)."""
    pos = []
    for b in dim.lengths.dims:
        if b not in layout:  # Dim equality is identity
            raise ValueError(f"{caller}: the lengths of {dim_str(dim)} vary over {dim_str(b)}, which "
                             f"{lacks.format(dims=dims_str(layout))}")
        pos.append(layout.index(b))
    return pos


def keep_markers(x: Tensor, raw, dims: tuple) -> Tensor:
    """Tensor over `dims` keeping x's sparse_dim, and its feature_dim where that is still in `dims`."""
    feature_dim = x.feature_dim
    if feature_dim is not None and feature_dim not in dims:  # Dim equality is identity
        feature_dim = None
    return Tensor(raw, dims, sparse_dim=x.sparse_dim, feature_dim=feature_dim)
