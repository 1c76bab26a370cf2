"""Host lengths of dims made by dim math (T + k, T // k, A + B, ...), computed on first use."""
import torch

from ._C import Dim, Tensor, combine


def _operand_lengths(dim: Dim):
    """Lengths Tensor of a dynamic dim, or the static size as an int."""
    if dim.dyn_size is not None:
        return dim.dyn_size
    if dim.size is not None:
        return dim.size
    raise ValueError(f"dimtorch dim math: {dim!r} takes its size from data; derived lengths need "
                     f"lengths or a static size")


def derived_lengths(dim: Dim) -> Tensor:
    """Lengths of a derived dim from its operands' lengths (host int64; never below 0)."""
    op, a, b, k = dim.derivation
    la = _operand_lengths(a)
    if op == "concat":
        lb = _operand_lengths(b)
        if isinstance(la, Tensor) and isinstance(lb, Tensor):
            out = combine(la, lb, "add", allow_broadcast_all_sources=True)
        else:
            out = la + lb
    elif op == "add":
        out = la + k
    elif op == "sub":
        out = la - k
    elif op == "mul":
        out = la * k
    elif op == "floordiv":
        out = la // k
    elif op == "ceildiv":
        out = -((-la) // k)
    else:
        raise ValueError(f"dimtorch dim math: unknown op {op!r}")
    return Tensor(out.raw.clamp(min=0).to(torch.int64), out.dims)
