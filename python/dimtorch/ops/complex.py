"""Complex tensors as real pairs and back (RETURNN frontend's real_as_complex, complex_as_real, make_complex)."""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from .._C import Dim, Tensor
from .._core.args import axis_of, check_tensor, dim_str, keep_markers
from ._support import names_errors

_REAL = {torch.float32, torch.float64}
_COMPLEX = {torch.complex64, torch.complex128}


@names_errors("dimtorch.real_as_complex()")
def real_as_complex(x: Tensor, *, pair_dim: Dim) -> Tensor:
    """The complex tensor whose real and imaginary parts are x at index 0 and 1 of `pair_dim` (static,
    size 2); pair_dim is gone from the result (float32 -> complex64, float64 -> complex128)."""
    caller = "dimtorch.real_as_complex()"
    check_tensor(x, caller)
    a = axis_of(x, pair_dim, caller, what="pair_dim")
    if pair_dim.size != 2:
        raise ValueError(f"{caller}: pair_dim {dim_str(pair_dim)} must be static of size 2")
    if x.raw.dtype not in _REAL:
        raise TypeError(f"{caller}: x must be float32 or float64, got {x.dtype}")
    raw = x.raw.movedim(a, -1).contiguous()  # view_as_complex needs the pair innermost and contiguous
    dims = x.dims[:a] + x.dims[a + 1:]
    return keep_markers(x, torch.view_as_complex(raw), dims)


@names_errors("dimtorch.complex_as_real()")
def complex_as_real(x: Tensor, *, out_dim: Optional[Dim] = None) -> Tuple[Tensor, Dim]:
    """x (complex64/128) as a real tensor with a new last dim of size 2 (real, imaginary); returns
    (tensor, pair dim) (out_dim, or a new Dim of size 2)."""
    caller = "dimtorch.complex_as_real()"
    check_tensor(x, caller)
    if x.raw.dtype not in _COMPLEX:
        raise TypeError(f"{caller}: x must be complex64 or complex128, got {x.dtype}")
    if out_dim is None:
        out_dim = Dim(2, name="complex")
    elif not isinstance(out_dim, Dim) or out_dim.size != 2 or out_dim in x.dims:
        got = dim_str(out_dim) if isinstance(out_dim, Dim) else type(out_dim).__name__
        raise ValueError(f"{caller}: out_dim must be a new static Dim of size 2, got {got}")
    return keep_markers(x, torch.view_as_real(x.raw), x.dims + (out_dim,)), out_dim


@names_errors("dimtorch.make_complex()")
def make_complex(real: Tensor, imag: Tensor) -> Tensor:
    """real + i * imag, the two aligned by dims (float32 -> complex64, float64 -> complex128)."""
    caller = "dimtorch.make_complex()"
    check_tensor(real, caller, what="real")
    check_tensor(imag, caller, what="imag")
    for name, t in (("real", real), ("imag", imag)):
        if t.raw.dtype not in _REAL:
            raise TypeError(f"{caller}: {name} must be float32 or float64, got {t.dtype}")
    extra = tuple(d for d in imag.dims if d not in real.dims)  # Dim equality is identity
    dims = real.dims + extra
    re = real.raw.reshape(tuple(real.raw.shape) + (1,) * len(extra))
    shape = [imag.raw.shape[imag.dims.index(d)] if d in imag.dims else 1 for d in dims]
    im = imag.raw_aligned(tuple(d for d in dims if d in imag.dims)).reshape(shape)
    dtype = torch.promote_types(re.dtype, im.dtype)
    re, im = torch.broadcast_tensors(re.to(dtype), im.to(dtype))  # (a size mismatch of a shared dim fails here)
    return Tensor(torch.complex(re, im), dims)


__all__ = ["real_as_complex", "complex_as_real", "make_complex"]
