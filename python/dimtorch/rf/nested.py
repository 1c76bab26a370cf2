"""rf.nested: ops on nested structures of Tensors and Dims (beam search states), dimtorch's ops themselves."""
import dimtorch as _dt

__all__ = ["mask_nested", "gather_nested", "masked_select_nested", "masked_scatter_nested", "where_nested"]

mask_nested = _dt.mask_nested
gather_nested = _dt.gather_nested
masked_select_nested = _dt.masked_select_nested
masked_scatter_nested = _dt.masked_scatter_nested
where_nested = _dt.where_nested
