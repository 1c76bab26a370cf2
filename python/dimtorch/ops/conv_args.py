"""What conv, transposed_conv and pool share: argument checks (spatial dims, per-dim ints, padding, short
inputs) and the output dim math, public as make_conv_out_spatial_dims / make_transposed_conv_out_spatial_dims."""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from .._C import Dim, Tensor, ceildiv
from .._core.args import axis_of, dim_str, dims_arg, dims_str, repeats_a_dim
from ._support import names_errors


def is_dynamic(d: Dim) -> bool:
    return d.lengths is not None


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
    if len(dims) not in (1, 2, 3):
        raise ValueError(f"{caller}: {len(dims)} spatial dims ({dims_str(dims)}); only 1-D, 2-D and 3-D are supported")
    for d in dims:
        axis_of(x, d, caller, what="in_spatial_dims entry")
    if repeats_a_dim(dims):
        raise ValueError(f"{caller}: in_spatial_dims lists a dim twice ({dims_str(dims)})")
    return dims


def out_spatial_dim(d: Dim, k_eff: int, stride: int, padding) -> Dim:
    """valid: ceildiv(T - (k_eff - 1), s) = (T - k_eff) // s + 1 (0 when T < k_eff);
    same: ceildiv(T, s); an int p: valid over T + 2p. By dim math, so lengths follow on the host
    (and static sizes stay static)."""
    if d.size is None and d.lengths is None:
        return Dim(None, name=f"{d.name}:conv")  # size from data: the raw result decides
    if type(padding) is int:
        d, padding = (d + 2 * padding if padding else d), "valid"
    if padding == "valid":
        d = d - (k_eff - 1)
    return ceildiv(d, stride)


def conv_padding(caller: str, padding, n: int):
    """conv's and pool's padding: "valid", "same", or ints >= 0 (an int, or one per spatial dim)
    added on both sides of each spatial dim (torch's padding=); ints come back as a tuple of n."""
    if type(padding) is str and padding in ("valid", "same"):
        return padding
    if isinstance(padding, str):
        raise ValueError(f"{caller}: padding must be 'valid', 'same' or ints >= 0, got {padding!r}")
    try:
        return per_dim(caller, "padding", padding, n, minimum=0)
    except TypeError:
        raise TypeError(f"{caller}: padding must be 'valid', 'same', an int or a sequence of {n} ints, "
                        f"got {padding!r}") from None


def _lengths_str(d: Dim) -> str:
    return f"size {d.size}" if d.lengths is None else f"lengths {d.lengths.raw.tolist()}"


def given_out_spatial_dims(caller: str, given, computed: Sequence[Dim], other_dims: Sequence[Dim],
                           check_lengths: bool = True) -> tuple:
    """The user's out_spatial_dims, each checked against the dim computed by dim math: the same
    Dim, or one of the same kind with the same size (static) or the same lengths over the same
    dims (dynamic; host lengths, no device read), or one that takes its size from data where the
    computed one does. None: the computed dims.
    While tracing (check_lengths False) the lengths are not compared."""
    if given is None:
        return tuple(computed)
    dims = dims_arg(given, caller, "out_spatial_dims")
    if len(dims) != len(computed):
        raise ValueError(f"{caller}: out_spatial_dims has {len(dims)} dims ({dims_str(dims)}), one per spatial "
                         f"dim is needed ({len(computed)})")
    if repeats_a_dim(dims) or any(d is o for d in dims for o in other_dims):
        raise ValueError(f"{caller}: out_spatial_dims ({dims_str(dims)}) must be distinct dims that are not among "
                         f"the output's other dims ({dims_str(other_dims)})")
    for i, (g, c) in enumerate(zip(dims, computed)):
        if g is c:
            continue
        if c.lengths is None and c.size is None:
            fits = g.lengths is None and g.size is None
        elif c.lengths is None:
            fits = g.lengths is None and g.size == c.size
        else:
            fits = g.lengths is not None and g.lengths.dims == c.lengths.dims and (
                not check_lengths or torch.equal(g.lengths.raw, c.lengths.raw))
        if not fits:
            raise ValueError(f"{caller}: out_spatial_dims[{i}] {dim_str(g)} ({_lengths_str(g)}) does not match the "
                             f"output dim {dim_str(c)} ({_lengths_str(c)})")
    return dims


def transposed_extra(k_eff: int, s: int, padding: str, output_padding: Optional[int], remove_padding: int) -> tuple:
    """(extra, left) of a transposed conv along one dim: the output is the frames [left, left + T * s
    + extra) of the full result (see dt.transposed_conv for the rules)."""
    if output_padding is None:
        extra, left = max(k_eff - s, 0), 0
        if padding == "same":
            extra, left = 0, extra // 2
    else:
        half = k_eff // 2 if padding == "same" else 0
        extra, left = k_eff - s - 2 * half + output_padding, half
    return extra - 2 * remove_padding, left + remove_padding


def transposed_out_dim(d: Dim, s: int, extra: int) -> Dim:
    """T * s + extra by dim math (lengths on the host, never below 0)."""
    od = d * s
    return od + extra if extra >= 0 else od - (-extra)


def _per_dim_value(caller: str, what: str, value, n: int, kinds: tuple) -> tuple:
    if isinstance(value, kinds) and not isinstance(value, bool) or value is None:
        return (value,) * n
    try:
        values = tuple(value)
    except TypeError:
        values = ()
    if len(values) != n or not all((isinstance(v, kinds) and not isinstance(v, bool)) or v is None for v in values):
        raise TypeError(f"{caller}: {what} must be one value or a sequence of {n}, got {value!r}")
    return values


def _filter_sizes(caller: str, filter_size, n: int) -> tuple:
    sizes = _per_dim_value(caller, "filter_size", filter_size, n, (int, Dim))
    sizes = tuple(k.size if isinstance(k, Dim) else k for k in sizes)
    if not all(isinstance(k, int) and k >= 1 for k in sizes):
        raise ValueError(f"{caller}: filter_size must be ints >= 1 or static Dims, got {filter_size!r}")
    return sizes


@names_errors("dimtorch.make_conv_out_spatial_dims()")
def make_conv_out_spatial_dims(in_spatial_dims: Sequence[Dim], *, filter_size, padding, strides=1, dilation_rate=1,
                               description_prefix: Optional[str] = None) -> list:
    """The output spatial dims of a conv or pool over `in_spatial_dims` (RETURNN frontend's), by dim
    math, so they are the very dims dt.conv and dt.pool return and their lengths are per sequence:
    padding "valid" (or an int p: T + 2p first): ceildiv(T - (k_eff - 1), s), 0 when T < k_eff;
    "same": ceildiv(T, s) (T itself for stride 1); k_eff = dilation_rate * (k - 1) + 1. A dim that
    takes its size from data gives a new such dim. `description_prefix` is accepted for rf's
    signature (dims from dim math are shared and keep their derived names)."""
    caller = "dimtorch.make_conv_out_spatial_dims()"
    dims = dims_arg(in_spatial_dims, caller, "in_spatial_dims")
    n = len(dims)
    sizes = _filter_sizes(caller, filter_size, n)
    strides = per_dim(caller, "strides", strides, n)
    dilation = per_dim(caller, "dilation_rate", dilation_rate, n)
    pads = _per_dim_value(caller, "padding", padding, n, (str, int))
    out = []
    for d, k, s, dl, p in zip(dims, sizes, strides, dilation, pads):
        if isinstance(p, int):
            if p < 0:
                raise ValueError(f"{caller}: padding must be >= 0, got {padding!r}")
        else:
            p = check_padding(caller, p.lower() if isinstance(p, str) else p)
        out.append(out_spatial_dim(d, dl * (k - 1) + 1, s, p))
    return out


@names_errors("dimtorch.make_transposed_conv_out_spatial_dims()")
def make_transposed_conv_out_spatial_dims(in_spatial_dims: Sequence[Dim], *, filter_size, padding,
                                          output_padding=None, strides=None, dilation_rate=1,
                                          description_prefix: Optional[str] = None) -> list:
    """The output spatial dims of a transposed conv (dt.transposed_conv's rules, RETURNN frontend's
    signature), by dim math: strides default to the filter size; without output_padding "valid"
    gives T * s + max(k_eff - s, 0) and "same" T * s; with output_padding p, (T - 1) * s + k_eff + p
    less 2 * (k_eff // 2) for "same"."""
    caller = "dimtorch.make_transposed_conv_out_spatial_dims()"
    dims = dims_arg(in_spatial_dims, caller, "in_spatial_dims")
    n = len(dims)
    sizes = _filter_sizes(caller, filter_size, n)
    strides = sizes if strides is None else per_dim(caller, "strides", strides, n)
    dilation = per_dim(caller, "dilation_rate", dilation_rate, n)
    pads = _per_dim_value(caller, "padding", padding, n, (str,))
    output_padding = _per_dim_value(caller, "output_padding", output_padding, n, (int,))
    out = []
    for d, k, s, dl, p, op in zip(dims, sizes, strides, dilation, pads, output_padding):
        check_padding(caller, p)
        if d.size is None and d.lengths is None:
            out.append(Dim(None, name=f"{d.name}:transposed_conv"))
            continue
        extra, _ = transposed_extra(dl * (k - 1) + 1, s, p, op, 0)
        out.append(transposed_out_dim(d, s, extra))
    return out


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
