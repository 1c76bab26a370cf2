"""returnn.tensor.utils' helper for tests: fill a TensorDict of templates with random data."""
from __future__ import annotations

from typing import Dict, Optional, Union

import numpy
import torch

from ... import Dim, Tensor
from ...ops.rf_dim import bind_lengths
from .tensor_dict import TensorDict


def tensor_dict_fill_random_numpy_(tensor_dict: TensorDict, *, rnd: Union[int, numpy.random.RandomState] = 42,
                                   dyn_dim_max_sizes: Optional[Dict[Dim, int]] = None,
                                   dyn_dim_min_sizes: Optional[Dict[Dim, int]] = None) -> None:
    """Fills every template of `tensor_dict` with random values (torch raws, drawn with numpy), binding
    its unbound dims first: a batch dim to a size of 2..19, a declared dim to lengths in [min, max]
    (dyn_dim_min_sizes / dyn_dim_max_sizes, else 2 and a random 5..19; with a max given, one sequence
    has it). Integer data is drawn below its sparse_dim's size, floats from N(0, 1) (padding too)."""
    if not isinstance(rnd, numpy.random.RandomState):
        rnd = numpy.random.RandomState(rnd)
    for value in tensor_dict.data.values():
        if value.raw_tensor is None:
            _fill(value, rnd, dyn_dim_max_sizes or {}, dyn_dim_min_sizes or {})


def _bind_dim(d: Dim, rnd, max_sizes, min_sizes, holder: Tensor) -> None:
    if d.size is not None or d.derivation is not None:
        return
    if d.is_batch_dim():
        if d.get_max_size() is None:
            size = int(max_sizes.get(d, rnd.randint(2, 20)))
            d.dyn_size_ext = Tensor(d.name or "batch", [], dtype="int32", raw_tensor=torch.tensor(size, dtype=torch.int32))
        return
    if d.lengths is not None:
        return
    template = d._lengths_template
    dims = template.dims if template is not None else tuple(b for b in holder.dims if b.is_batch_dim())
    for b in dims:
        _bind_dim(b, rnd, max_sizes, min_sizes, holder)
    shape = [b.get_dim_value() for b in dims]
    hi = int(max_sizes[d]) if d in max_sizes else int(rnd.randint(5, 20))
    lo = int(min_sizes.get(d, min(2, max_sizes.get(d, 2))))
    lengths = rnd.randint(lo, hi + 1, size=shape)
    if d in max_sizes and lengths.size:
        lengths.flat[rnd.randint(lengths.size)] = hi
        if d in min_sizes and lengths.size > 1:
            lengths.flat[rnd.randint(lengths.size)] = lo
    dtype = template.dtype if template is not None else "int32"
    bind_lengths(d, Tensor(torch.from_numpy(numpy.asarray(lengths, dtype=dtype)), dims))


def _fill(value: Tensor, rnd, max_sizes, min_sizes) -> None:
    for d in value.dims:
        _bind_dim(d, rnd, max_sizes, min_sizes, value)
    shape = [d.get_dim_value() for d in value.dims]
    dtype = value.dtype
    if dtype.startswith(("int", "uint")):
        high = value.sparse_dim.size if value.sparse_dim is not None and value.sparse_dim.size else rnd.randint(5, 20)
        raw = rnd.randint(0, high, size=shape).astype(dtype)
    elif dtype == "bool":
        raw = rnd.randint(0, 2, size=shape).astype(bool)
    elif dtype.startswith("complex"):
        raw = (rnd.normal(size=shape) + 1j * rnd.normal(size=shape)).astype(dtype)
    else:
        raw = rnd.normal(size=shape).astype("float32")
    raw = torch.from_numpy(numpy.asarray(raw))
    if dtype == "bfloat16" or str(raw.dtype).replace("torch.", "") != dtype:
        raw = raw.to(getattr(torch, dtype))
    value.raw_tensor = raw
