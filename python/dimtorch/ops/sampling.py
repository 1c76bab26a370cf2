"""Random choices of indices (RETURNN frontend's random_choice_with_replacement / _without_replacement), e.g. for
sampling in search or sampled softmax."""
from __future__ import annotations

import math
from typing import Sequence, Union

import torch

from .._C import Dim, Tensor
from .._core.args import axis_of, check_tensor, dim_str, dims_arg, dims_str
from .sort import top_k
from ._support import names_errors


@names_errors("dimtorch.random_choice_without_replacement()")
def random_choice_without_replacement(*, log_probs: Tensor, axis: Union[Dim, Sequence[Dim]], num_samples_dim: Dim,
                                      noise_scale: float = 1.0):
    """num_samples_dim.size distinct indices into `axis` per position of log_probs' other dims, drawn
    with probabilities exp(log_probs) (Gumbel top-k: top_k of log_probs + Gumbel noise; noise_scale 0
    gives top_k itself). Returns indices over (other dims, num_samples_dim) with sparse_dim axis, or
    one such Tensor per dim when `axis` is several dims (as top_k). Padding of a dynamic axis is never
    drawn while a slice has enough valid entries."""
    caller = "dimtorch.random_choice_without_replacement()"
    check_tensor(log_probs, caller, what="log_probs")
    if not isinstance(num_samples_dim, Dim) or num_samples_dim.size is None:
        raise TypeError(f"{caller}: num_samples_dim must be a static Dim")
    if isinstance(noise_scale, bool) or not isinstance(noise_scale, (int, float)):
        raise TypeError(f"{caller}: noise_scale must be a number, got {type(noise_scale).__name__}")
    scores = log_probs
    if noise_scale != 0.0:
        raw = log_probs.raw
        u = torch.rand_like(raw).clamp_(min=torch.finfo(raw.dtype).tiny)  # (0, 1): finite Gumbel noise
        gumbel = -torch.log(-torch.log(u))
        scores = Tensor(raw + (gumbel if noise_scale == 1.0 else gumbel * noise_scale), log_probs.dims)
    _, indices, _ = top_k(scores, axis=axis, k=num_samples_dim)
    return indices


@names_errors("dimtorch.random_choice_with_replacement()")
def random_choice_with_replacement(dims: Sequence[Dim], *, probs: Tensor, axis: Dim) -> Tensor:
    """Indices into `axis` drawn with replacement (torch.multinomial) with probabilities probs (over
    (common dims, axis), any order; they need not sum to 1): one draw per element of `dims`, whose dims
    shared with probs pick the distribution; the result is over `dims` with sparse_dim axis. A dynamic
    axis' padding is never drawn."""
    caller = "dimtorch.random_choice_with_replacement()"
    check_tensor(probs, caller, what="probs")
    dims = dims_arg(dims, caller, "dims")
    axis_of(probs, axis, caller, of="probs")
    if axis in dims:  # Dim equality is identity
        raise ValueError(f"{caller}: axis {dim_str(axis)} must not be among dims ({dims_str(dims)})")
    common = tuple(d for d in dims if d in probs.dims)
    extra = [d for d in probs.dims if d is not axis and d not in common]
    if extra:
        raise ValueError(f"{caller}: probs has dims ({dims_str(extra)}) that are neither axis nor in dims "
                         f"({dims_str(dims)})")
    new = tuple(d for d in dims if d not in common)
    if any(d.size is None for d in new):
        raise ValueError(f"{caller}: the dims of the draws not in probs must be static, got ({dims_str(new)})")
    p = probs.copy_masked(0.0).raw if axis.lengths is not None else probs.raw
    p = Tensor(p, probs.dims).raw_aligned(common + (axis,))
    n = math.prod([d.size for d in new])  # (a list: Dynamo traces no generator here)
    flat = p.reshape(-1, p.shape[-1])
    raw = torch.multinomial(flat, n, replacement=True).reshape(tuple(p.shape[:-1]) + tuple([d.size for d in new]))
    out = Tensor(raw, common + new, sparse_dim=axis)
    return Tensor(out.raw_aligned(dims), dims, sparse_dim=axis)


__all__ = ["random_choice_without_replacement", "random_choice_with_replacement"]
