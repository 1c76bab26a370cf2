"""Definitions of matmul and dot (src/ops/matmul.cpp) and linear (src/ops_nn.cpp): contraction of named dims."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .._C import Tensor
from .._core import tracing as _tracing
from .._core.args import dim_str, namesakes_note
from ._support import (
    describe_dims, dims_tuple, flag, has_lengths, index_of, masked_raw, names_errors, need_tensor, product,
)



def _masked_for_reduce(t: Tensor, reduce_axes: list, caller: str) -> torch.Tensor:
    """t's raw with the padding of its reduced dims zeroed, for those whose lengths' dims t holds
    (an operand without them cannot hold that padding: left as it is)."""
    axes = [i for i in reduce_axes
            if has_lengths(t.dims[i]) and all(index_of(t.dims, b) >= 0 for b in t.dims[i].lengths.dims)]
    return masked_raw(t, axes, 0, caller)[0]


def _product(a: Tensor, b: Tensor) -> Tensor:
    """matmul without contraction: the product over the union of the dims (common dims, then a's
    rest, then b's rest, as matmul orders them): an outer product, or a scaling by a tensor of
    common dims. One broadcast multiply of aligned views."""
    out_dims = tuple([d for d in a.dims if index_of(b.dims, d) >= 0] + [d for d in a.dims if index_of(b.dims, d) < 0]
                     + [d for d in b.dims if index_of(a.dims, d) < 0])
    out = a.raw_aligned(out_dims) * b.raw_aligned(out_dims)
    features = [f for f in (a.feature_dim, b.feature_dim) if f is not None]
    return Tensor(out, out_dims, feature_dim=features[0] if features else None)


def _matmul(a, b, reduce, use_mask, caller: str) -> Tensor:
    need_tensor(a, caller, "a")
    need_tensor(b, caller, "b")
    reduce = dims_tuple(reduce, caller, "reduce")
    use_mask = flag(use_mask, caller, "use_mask")
    if not reduce:
        return _product(a, b)
    ra, rb = [], []
    for d in reduce:
        ia, ib = index_of(a.dims, d), index_of(b.dims, d)
        if ia < 0 or ib < 0:
            other = a if ia < 0 else b
            raise ValueError(f"{caller}: dim {dim_str(d, other.dims)} is in {'b' if ia < 0 else 'a'} but not in "
                             f"{'a' if ia < 0 else 'b'} (dims: {describe_dims(other.dims, other.raw.shape, d)})"
                             f"{namesakes_note(d, other.dims)}")
        if ia in ra:
            raise ValueError(f"{caller}: dim {dim_str(d)} is given twice in reduce")
        ra.append(ia)
        rb.append(ib)
    ca, cb, a_rest, b_rest = [], [], [], []
    for i, d in enumerate(a.dims):
        if index_of(reduce, d) >= 0:
            continue
        j = index_of(b.dims, d)
        if j >= 0:
            ca.append(i)
            cb.append(j)
        else:
            a_rest.append(i)
    b_rest = [j for j, d in enumerate(b.dims) if index_of(reduce, d) < 0 and index_of(a.dims, d) < 0]
    sa, sb = a.raw.shape, b.raw.shape
    for i, j in list(zip(ca, cb)) + list(zip(ra, rb)):
        if a.dims[i].size is None and sa[i] != sb[j]:
            raise ValueError(f"{caller}: dim {dim_str(a.dims[i])} has raw size {sa[i]} in a but {sb[j]} in b "
                             f"(a dims: {describe_dims(a.dims, sa)}; b dims: {describe_dims(b.dims, sb)})")
    raw_a, raw_b = a.raw, b.raw
    if use_mask:
        raw_a = _masked_for_reduce(a, ra, caller)
        raw_b = _masked_for_reduce(b, rb, caller)
    # Common dims lead as batch dims; a's and b's other dims and the reduced dims are each merged
    # into one axis: one torch.matmul. Without common dims, a's other dims stay leading dims and b
    # is a weight matrix: F.linear with b as (out, in), or torch.matmul where b's raw is (in, out)
    # already (the layouts of the C++ plan, so that both round alike).
    n_reduce = product(sa[i] for i in ra)
    n_b = product(sb[j] for j in b_rest)
    if not ca:
        xa = raw_a.permute(a_rest + ra).reshape([sa[i] for i in a_rest] + [n_reduce])
        b_out = [n_b] if b_rest else []
        identity = list(range(len(b.dims)))
        if b_rest + rb == identity or rb + b_rest != identity:
            out = F.linear(xa, raw_b.permute(b_rest + rb).reshape(b_out + [n_reduce]))
        else:
            out = torch.matmul(xa, raw_b.reshape([n_reduce] + b_out))
    else:
        common = [sa[i] for i in ca]
        xa = raw_a.permute(ca + a_rest + ra).reshape(common + [product(sa[i] for i in a_rest), n_reduce])
        xb = raw_b.permute(cb + rb + b_rest).reshape(common + [n_reduce, n_b])
        out = torch.matmul(xa, xb)
    out_dims = tuple([a.dims[i] for i in ca + a_rest] + [b.dims[j] for j in b_rest])
    out = out.reshape([sa[i] for i in ca + a_rest] + [sb[j] for j in b_rest])
    features = [f for f in (a.feature_dim, b.feature_dim) if f is not None and index_of(out_dims, f) >= 0]
    feature = features[0] if features else None
    return Tensor(out, out_dims, feature_dim=feature)


@names_errors("dimtorch.matmul()")
def matmul(a, b, reduce, use_mask=True) -> Tensor:
    """Contracts the dim(s) `reduce`; dims in both and not reduced are batch dims. Result dims:
    common, then a's rest, then b's rest. use_mask zeroes the padding of dynamic reduced dims first
    (nothing to do for static ones). reduce=[]: no contraction, the product over all dims (an outer
    product of a and b's own dims, batched over the common ones)."""
    return _matmul(a, b, reduce, use_mask, "dimtorch.matmul()")


@names_errors("dimtorch.dot()")
def dot(a, b, reduce, use_mask=True) -> Tensor:
    """The same as matmul."""
    return _matmul(a, b, reduce, use_mask, "dimtorch.dot()")


@names_errors("dimtorch.linear()")
def linear(x, weight, bias=None) -> Tensor:
    """x contracted with weight over their shared (input) dim, plus bias over the output dim, which
    takes the input dim's place at the end of x's dims; F.linear when weight is (out, in)."""
    caller = "dimtorch.linear()"
    need_tensor(x, caller, "x")
    need_tensor(weight, caller, "weight")
    if bias is not None:
        need_tensor(bias, caller, "bias")
    w = weight
    if len(w.dims) != 2:
        raise ValueError(f"{caller}: weight must have 2 dims (in, out), got ({describe_dims(w.dims, w.raw.shape)})")
    in_x0, in_x1 = index_of(x.dims, w.dims[0]), index_of(x.dims, w.dims[1])
    if (in_x0 >= 0) == (in_x1 >= 0):
        raise ValueError(f"{caller}: exactly one dim of weight ({describe_dims(w.dims, w.raw.shape, x.dims)}) must be "
                         f"in x (dims: {describe_dims(x.dims, x.raw.shape, w.dims)}): it is the input dim"
                         f"{namesakes_note(w.dims, x.dims)}")
    w_in = 0 if in_x0 >= 0 else 1
    in_x = in_x0 if in_x0 >= 0 else in_x1
    if x.raw.shape[in_x] != w.raw.shape[w_in]:
        raise ValueError(f"{caller}: dim {dim_str(x.dims[in_x])} has raw size {x.raw.shape[in_x]} in x but "
                         f"{w.raw.shape[w_in]} in weight (x dims: {describe_dims(x.dims, x.raw.shape)}; weight dims: "
                         f"{describe_dims(w.dims, w.raw.shape)})")
    in_dim, out_dim = w.dims[w_in], w.dims[1 - w_in]
    if bias is not None and (len(bias.dims) != 1 or bias.dims[0] is not out_dim):
        raise ValueError(f"{caller}: bias must have the dims ({dim_str(out_dim)}) of the output, got "
                         f"({describe_dims(bias.dims, bias.raw.shape)})")
    others = [i for i in range(len(x.dims)) if i != in_x]
    moved = in_x != len(x.dims) - 1
    xr = x.raw.permute(others + [in_x]) if moved else x.raw
    if moved and xr.dim() > 2 and _tracing.tracing():
        # torch folds x's other axes into one (a view when the strides allow); over a permuted raw, whether
        # they allow depends on which axes have size 1, so a trace guards on it (e.g. the encoder's 1 frame
        # vs more: a second graph). A contiguous copy folds without guards; a raw with its feature axis last
        # (the common case) is folded as it is, without the copy.
        xr = xr.clone(memory_format=torch.contiguous_format)
    b_raw = bias.raw if bias is not None else None
    if w_in == 1:  # weight (out, in): torch's own layout
        out = F.linear(xr, w.raw, b_raw)
    else:  # weight (in, out): x @ w (+ bias)
        out = torch.matmul(xr, w.raw)
        if b_raw is not None:
            out = out + b_raw
    feature = out_dim if x.feature_dim is in_dim else x.feature_dim
    return Tensor(out, tuple(x.dims[i] for i in others) + (out_dim,), feature_dim=feature)
