"""rf.dims: ranges over dims, replacing dims, and counts of a shape's elements; dimtorch's ops."""
from __future__ import annotations

from typing import Optional

import dimtorch as _dt
from dimtorch import Dim, Tensor

__all__ = [
    "range_over_dim", "range_over_dim_strided", "range_over_merged_dims", "linspace_over_dim", "replace_dim",
    "replace_dim_v2", "set_sparse_dim", "dim_match_priority_when_needed", "num_elements_of_shape",
    "masked_fraction_of_shape", "last_frame_position_of_dim", "use_mask_default",
]

range_over_dim = _dt.range_over_dim
range_over_dim_strided = _dt.range_over_dim_strided
range_over_merged_dims = _dt.range_over_merged_dims
linspace_over_dim = _dt.linspace_over_dim
_replace_dim = _dt.replace_dim
replace_dim_v2 = _dt.replace_dim_v2
num_elements_of_shape = _dt.num_elements_of_shape
masked_fraction_of_shape = _dt.masked_fraction_of_shape
last_frame_position_of_dim = _dt.last_frame_position_of_dim


def replace_dim(source: Tensor, *, in_dim: Dim, out_dim: Optional[Dim] = None):
    """dimtorch.replace_dim; as RETURNN frontend, an out_dim not known yet (declared `Dim(None)`: no size,
    no lengths) first takes in_dim's lengths (bound as `out_dim.dyn_size_ext = ...` binds them), so that
    ops over it mask the same padding (dimtorch's op would keep it a dim whose size comes from data)."""
    if (out_dim is not None and in_dim.lengths is not None and out_dim.size is None and out_dim.lengths is None
            and getattr(out_dim, "_bound_size", None) is None):
        out_dim.dyn_size_ext = in_dim.lengths
    return _replace_dim(source, in_dim=in_dim, out_dim=out_dim)


def set_sparse_dim(source: Tensor, sparse_dim: Dim) -> Tensor:
    """source with another sparse_dim (a new Tensor over the same raw)."""
    return Tensor(source.raw, source.dims, sparse_dim=sparse_dim, feature_dim=source.feature_dim)


def dim_match_priority_when_needed(dim: Dim, *other_dims: Dim) -> Dim:
    """RETURNN's way to use one dim twice in a tensor (e.g. a square filter) is a match priority; dimtorch
    dims are identities, so the answer is a distinct dim of dim's size (or lengths) whenever other_dims
    holds dim (dim itself otherwise)."""
    if not any(d is dim for d in other_dims):
        return dim
    return Dim(dim.lengths if dim.lengths is not None else dim.size, name=f"{dim.name}'")


def use_mask_default(*, default: Optional[bool] = None, default_false_for_behavior_version_up_to: Optional[int] = None,
                     func_name: Optional[str] = None) -> Optional[bool]:
    """Whether ops mask padding by default: True in dimtorch (RETURNN's newest behavior), whatever the
    arguments (dimtorch reads no config and has no behavior versions)."""
    return True
