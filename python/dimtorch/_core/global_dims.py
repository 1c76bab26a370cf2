"""The dims RETURNN code names globally: `batch_dim` (the batch of every step, its size bound per step
or taken from data) and `single_step_dim` (the spatial dim of a loop body's one step), and the kinds
of dims (`Dim.Types`). Defined once here; dimtorch.rf.tensor exports them (returnn.tensor's path)."""
from __future__ import annotations

from .._C import Dim


class DimKind:
    """A kind of dim (Dim.Types.Batch, Spatial, Feature): compared by identity, printed by name."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self):
        return getattr, (DimTypes, self.name.capitalize())


class DimTypes:
    """RETURNN's Dim.Types. Unspecified is None (a dim made without kind)."""

    Unspecified = None
    Batch = DimKind("batch")
    Spatial = DimKind("spatial")
    Time = Spatial  # RETURNN's alias
    Feature = DimKind("feature")


def _dim(size, name: str, kind: DimKind) -> Dim:
    d = Dim(size, name=name)
    d._rf_attrs = {"kind": kind}
    return d


batch_dim = _dim(None, "batch", DimTypes.Batch)
"""The global batch dim: its size comes from data, or from what a step binds
(`batch_dim.dyn_size_ext = Tensor("batch", [], dtype="int32", raw_tensor=...)`)."""

single_step_dim = _dim(1, "single-step", DimTypes.Spatial)
"""The spatial dim of one step of a loop body (RETURNN's single_step_dim): ops that take a spatial
dim run a single step over it."""
