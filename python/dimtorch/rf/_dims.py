"""The global dims rf code names: `single_step_dim` (a loop's one frame: modules called with
spatial_dim=single_step_dim run one step) and `batch_dim`, from dimtorch.rf.tensor; stand-ins while that
package is not there (the same names, so code written against them does not change)."""
from __future__ import annotations

from .._C import Dim

try:
    from .tensor import batch_dim, single_step_dim  # noqa: F401
except ImportError:  # dimtorch.rf.tensor not installed yet
    single_step_dim = Dim(1, name="single-step")
    batch_dim = Dim(None, name="batch")

__all__ = ["single_step_dim", "batch_dim", "is_batch_dim"]


def is_batch_dim(d: Dim) -> bool:
    """Whether d is a batch dim (Dim.is_batch_dim() of dimtorch.rf.tensor's API; else the global batch_dim)."""
    f = getattr(d, "is_batch_dim", None)
    return bool(f()) if f is not None else d is batch_dim
