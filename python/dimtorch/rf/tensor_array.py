"""TensorArray (RETURNN frontend's): a list of Tensors of one template's dims, for loops (rf.scan's outputs
with return_tensor_arrays=True, a beam search's per-step choices). Functional: push_back returns a new
array; the old one is unchanged."""
from __future__ import annotations

from typing import List, Optional, Union

import torch

from .._C import Dim, Tensor
from .._core.args import dim_str, dims_str
from .._core.data_dependent import read_int

__all__ = ["TensorArray"]


class TensorArray:
    """TensorArray(tensor_template): an empty array of Tensors with the template's dims (the template's
    values are not used). `ta.push_back(t)` -> new array with t appended; `ta[i]` (an int, negative
    too, or a scalar int Tensor); `len(ta)`; `ta.stack(axis=dim)` -> Tensor over (axis, template dims);
    `TensorArray.unstack(x, axis=dim)` -> the array of x's frames along axis."""

    __slots__ = ("tensor_template", "_items")

    def __init__(self, tensor_template: Tensor, *, _items: Optional[List[Tensor]] = None, **_backend_kwargs):
        if not isinstance(tensor_template, Tensor):
            raise TypeError(f"dimtorch.rf.TensorArray(): tensor_template must be a Tensor, got "
                            f"{type(tensor_template).__name__}")
        self.tensor_template = tensor_template
        self._items = list(_items) if _items is not None else []

    @classmethod
    def unstack(cls, tensor: Tensor, *, axis: Dim) -> "TensorArray":
        """The frames of `tensor` along `axis` (views; up to the longest sequence of a dynamic axis)."""
        from ..ops.stack import unstack
        frames = unstack(tensor, axis=axis)
        a = tensor.dims.index(axis)
        dims = tensor.dims[:a] + tensor.dims[a + 1:]
        if frames:
            template = frames[0]
        else:
            shape = [s for i, s in enumerate(tensor.raw.shape) if i != a]
            template = Tensor(tensor.raw.new_empty(shape), dims, sparse_dim=tensor.sparse_dim)
        return cls(template, _items=frames)

    def push_back(self, tensor: Tensor) -> "TensorArray":
        """A new array with `tensor` appended (its dims may differ from the template's: e.g. a beam dim
        that changes per step)."""
        if not isinstance(tensor, Tensor):
            raise TypeError(f"dimtorch.rf.TensorArray.push_back(): expected a Tensor, got {type(tensor).__name__}")
        return TensorArray(self.tensor_template, _items=self._items + [tensor])

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self):
        return iter(self._items)

    def __getitem__(self, index: Union[int, Tensor]) -> Tensor:
        if isinstance(index, Tensor):
            if index.dims:
                raise ValueError(f"dimtorch.rf.TensorArray[]: a Tensor index must be a scalar, got dims "
                                 f"({dims_str(index.dims)})")
            index = read_int(index.raw)
        return self._items[index]

    def stack(self, *, axis: Dim) -> Tensor:
        """The items stacked along a new first dim `axis`: static with one entry per item, or a dim with
        lengths (e.g. of each hypothesis) whose longest is at most the number of items (the rest of each
        sequence is padding). Items are aligned to the first item's dims (same dims, any order)."""
        caller = "dimtorch.rf.TensorArray.stack()"
        if not isinstance(axis, Dim):
            raise TypeError(f"{caller}: axis must be a Dim, got {type(axis).__name__}")
        items = self._items
        n = len(items)
        first = items[0] if items else self.tensor_template
        dims = first.dims
        if axis.lengths is None and axis.size is not None and axis.size != n:
            raise ValueError(f"{caller}: axis {dim_str(axis)} has size {axis.size}, the array has {n} items")
        if axis.lengths is not None and axis.get_max_size() > n:
            raise ValueError(f"{caller}: axis {dim_str(axis)} has sequences of up to {axis.get_max_size()} frames, "
                             f"the array has {n} items")
        raws = []
        for i, t in enumerate(items):
            if t.dims != dims:
                if len(t.dims) != len(dims) or not all(d in t.dims for d in dims):
                    raise ValueError(f"{caller}: item {i} has dims ({dims_str(t.dims)}), item 0 ({dims_str(dims)})")
                raws.append(t.raw_aligned(dims))
            else:
                raws.append(t.raw)
        raw = torch.stack(raws) if raws else first.raw.new_empty((0,) + tuple(first.raw.shape))
        # the markers: the template's (as rf's stack of its template), else the first item's
        template = self.tensor_template
        feature = next((f for f in (template.feature_dim, first.feature_dim) if f is not None and f in dims), None)
        sparse = template.sparse_dim if template.sparse_dim is not None else first.sparse_dim
        return Tensor(raw, (axis,) + tuple(dims), sparse_dim=sparse, feature_dim=feature)

    def __repr__(self):
        return f"TensorArray(template dims=({dims_str(self.tensor_template.dims)}), {len(self._items)} items)"
