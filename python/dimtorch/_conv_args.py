"""Argument checks that conv, transposed_conv and pool share: spatial dims, per-dim ints, padding, short inputs."""
from __future__ import annotations

from typing import Optional, Sequence

from ._C import Dim, Tensor, ceildiv
from ._shape_ops import axis_of, dim_str, dims_arg, dims_str


def is_dynamic(d: Dim) -> bool:
    return d.dyn_size is not None


def per_dim(caller: str, what: str, value, n: int, minimum: int = 1) -> tuple:
    """One int >= minimum per spatial dim, from an int or a sequence of n ints."""
    if type(value) is int and value >= minimum:
        return (value,) * n
    if isinstance(value, int) and not isinstance(value, bool):
        values = (value,) * n
    else:
        try:
            values = tuple(value)
        except TypeError:
            raise TypeError(f"{caller}: {what} must be an int or a sequence of {n} ints, got {value!r}") from None
    if len(values) != n or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise TypeError(f"{caller}: {what} must be an int or a sequence of {n} ints, got {value!r}")
    if any(v < minimum for v in values):
        raise ValueError(f"{caller}: {what} must be >= {minimum}, got {value!r}")
    return values


def spatial_dims(caller: str, x: Tensor, in_spatial_dims) -> tuple:
    if isinstance(in_spatial_dims, Dim):
        in_spatial_dims = (in_spatial_dims,)
    if in_spatial_dims is None:
        raise TypeError(f"{caller}: in_spatial_dims is required (dims of x: {dims_str(x.dims)})")
    dims = dims_arg(in_spatial_dims, caller, "in_spatial_dims")
    if len(dims) not in (1, 2):
        raise ValueError(f"{caller}: {len(dims)} spatial dims ({dims_str(dims)}); only 1-D and 2-D are supported")
    for d in dims:
        axis_of(x, d, caller, what="in_spatial_dims entry")
    if len(dims) == 2 and dims[0] is dims[1]:
        raise ValueError(f"{caller}: in_spatial_dims lists a dim twice ({dims_str(dims)})")
    return dims


def out_spatial_dim(d: Dim, k_eff: int, stride: int, padding: str) -> Dim:
    """valid: ceildiv(T - (k_eff - 1), s) = (T - k_eff) // s + 1 (0 when T < k_eff);
    same: ceildiv(T, s). By dim math, so lengths follow on the host (and static sizes stay static)."""
    if d.size is None and d.dyn_size is None:
        return Dim(None, name=f"{d.name}:conv")  # size from data: the raw result decides
    if padding == "valid":
        d = d - (k_eff - 1)
    return ceildiv(d, stride)


def check_padding(caller: str, padding) -> str:
    if padding not in ("valid", "same"):
        raise ValueError(f"{caller}: padding must be 'valid' or 'same', got {padding!r}")
    return padding


def same_pads(k_effs: Sequence[int]) -> list:
    """(left, right) per spatial dim for 'same': total k_eff - 1 whatever the length, left =
    total // 2, right = the rest (RETURNN's consistent 'same' padding)."""
    return [((k - 1) // 2, (k - 1) - (k - 1) // 2) for k in k_effs]


def short_pads(caller: str, sizes: Sequence[int], spatial: Sequence[Dim], need: Sequence[int]) -> Optional[list]:
    """F.pad's list that right-pads the spatial axes (raw `sizes`) shorter than one window `need`,
    or None when none is: a dynamic axis that short holds sequences that give 0 frames (its result
    is narrowed to 0); a static axis that short is an error."""
    if all(size >= k for size, k in zip(sizes, need)):
        return None
    pad = []
    for d, size, k in reversed(tuple(zip(spatial, sizes, need))):
        if size < k and not is_dynamic(d):
            raise ValueError(f"{caller}: spatial dim {dim_str(d)} has size {size}, smaller than the window ({k})")
        pad += [0, max(0, k - size)]
    return pad


MT = "mT"  # a plan's perm: swap the last two axes


def plan_perm(order) -> object:
    """A layout plan's permutation of x's axes into `order`: None when they are in order, MT for a
    swap of the last two (e.g. (batch, time, feature) -> (batch, feature, time): the cheapest view
    call), else the order as a tuple."""
    order = tuple(order)
    nd = len(order)
    if order == tuple(range(nd)):
        return None
    if nd >= 2 and order == tuple(range(nd - 2)) + (nd - 1, nd - 2):
        return MT
    return order


def permuted(raw: torch.Tensor, perm) -> torch.Tensor:
    """raw with a plan_perm applied (a view)."""
    if perm is None:
        return raw
    return raw.mT if perm is MT else raw.permute(perm)
