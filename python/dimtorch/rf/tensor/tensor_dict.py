"""TensorDict: named tensors (RETURNN's extern data and outputs), usually templates filled per batch.

Each step binds the declared dims to the batch's lengths and gives every template its raw:

    extern_data = TensorDict({"data": Tensor("data", [batch_dim, time_dim, in_dim], dtype="float32")})
    for padded, lengths in batches:
        extern_data.assign_padded_({"data": padded}, lengths={time_dim: lengths})   # dimtorch's way
        # or RETURNN's: extern_data.assign_from_raw_tensor_dict_({"data": padded, "data:size1": lengths})
        loss = step(extern_data["data"])

Binding the same declared Dim objects each batch drops what was computed from the old lengths
(dimtorch.ops.rf_dim); the dims derived from them follow.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch

from ... import Dim, Tensor
from ..._capture.dynamic_axes import mark_dynamic_axes
from ...ops.rf_dim import bind_lengths

_ASSIGN = "dimtorch.rf.tensor.TensorDict.assign_from_raw_tensor_dict_()"
_PADDED = "dimtorch.rf.tensor.TensorDict.assign_padded_()"


class TensorDict:
    """A dict of Tensors by name (RETURNN's TensorDict). Adding a Tensor stores a copy of it (a
    template stays a template), so that filling the dict never changes the caller's Tensors."""

    def __init__(self, data=None):
        self.data: Dict[str, Tensor] = {}
        if data:
            self.update(data)

    def __repr__(self) -> str:
        return f"TensorDict({self.data})"

    def update(self, data, *, auto_convert: bool = False) -> None:
        """Adds copies of the Tensors of `data` (a TensorDict, a dict by name, or a sequence of named
        Tensors); with auto_convert, dicts of Tensor(...) keyword arguments too."""
        if isinstance(data, TensorDict):
            items = list(data.data.items())
        elif isinstance(data, dict):
            items = list(data.items())
        elif isinstance(data, (list, tuple)):
            items = [(None, v) for v in data]
        else:
            raise TypeError(f"dimtorch.rf.tensor.TensorDict.update(): expected a TensorDict, dict or sequence, "
                            f"got {type(data).__name__}")
        for key, value in items:
            if auto_convert and isinstance(value, dict):
                opts = dict(value)
                opts.setdefault("name", key)
                value = Tensor(**opts)
            if not isinstance(value, Tensor):
                raise TypeError(f"dimtorch.rf.tensor.TensorDict.update(): {key!r}: expected a dimtorch Tensor, got "
                                f"{type(value).__name__}")
            if key is None:
                key = value.name
                if key is None:
                    raise ValueError("dimtorch.rf.tensor.TensorDict.update(): a Tensor in a sequence needs a name")
            self.data[key] = value.copy()

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def __getitem__(self, key: str) -> Tensor:
        return self.data[key]

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self):
        return iter(self.data)

    def keys(self):
        return self.data.keys()

    def values(self):
        return self.data.values()

    def items(self):
        return self.data.items()

    def all_dims(self) -> List[Dim]:
        """The dims of all tensors, each once, in order."""
        out: List[Dim] = []
        for value in self.data.values():
            for d in value.dims:
                if d not in out:
                    out.append(d)
        return out

    def copy_template(self) -> "TensorDict":
        """A TensorDict of templates (no raws) of these tensors."""
        return TensorDict({k: v.copy_template() for k, v in self.data.items()})

    def reset_content(self) -> None:
        """Every tensor back to a template (raw_tensor None) and every dim of them unbound (its size
        comes from data again; what declares its lengths stays)."""
        for value in self.data.values():
            value.raw_tensor = None
        for d in self.all_dims():
            d.reset_raw()

    # ---- raw tensors by RETURNN's keys: "name" and "name:size<axis>" -------------------------------

    def as_raw_tensor_dict(self, *, include_const_sizes: bool = False, include_scalar_dyn_sizes: bool = True,
                           exclude_duplicate_dims: bool = False, expected_value_type=object) -> Dict[str, Any]:
        """{name: raw, "name:size<i>": the lengths raw of its dim i (a batch dim's size; a static
        dim's size with include_const_sizes)} of the filled tensors."""
        caller = "dimtorch.rf.tensor.TensorDict.as_raw_tensor_dict()"
        out: Dict[str, Any] = {}
        visited = []
        for key, value in self.data.items():
            raw = value.raw_tensor
            if not isinstance(raw, expected_value_type):
                raise TypeError(f"{caller}: {key!r}: the raw is {type(raw).__name__}, expected {expected_value_type}")
            out[key] = raw
            for i, d in enumerate(value.dims):
                if exclude_duplicate_dims and d in visited:
                    continue
                visited.append(d)
                size_key = f"{key}:size{i}"
                if d.size is not None:
                    if include_scalar_dyn_sizes and include_const_sizes:
                        out[size_key] = d.size
                    continue
                ext = d.dyn_size_ext
                if d.is_batch_dim() and (ext is None or ext.raw_tensor is None):
                    if include_scalar_dyn_sizes:
                        out[size_key] = d.get_dim_value() if d.get_max_size() is not None else raw.shape[i]
                    continue
                if ext is None or ext.raw_tensor is None:
                    raise ValueError(f"{caller}: {key!r}: dim {d!r} has no lengths bound")
                if include_scalar_dyn_sizes or ext.dims:
                    out[size_key] = ext.raw_tensor
        return out

    def assign_from_raw_tensor_dict_(self, raw_tensor_dict: Dict[str, Any], *, with_scalar_dyn_sizes: bool = True,
                                     duplicate_dims_are_excluded: bool = False) -> None:
        """Fills every tensor from {name: raw, "name:size<i>": lengths of its dim i}: the dims are bound
        first (batch dims to their size, declared dims to their lengths; derived and static dims
        follow), then the raws assigned (checked against the new lengths)."""
        visited = []
        for key, value in self.data.items():
            if key not in raw_tensor_dict:
                raise KeyError(f"{_ASSIGN}: {key!r} is not in the raw dict (keys: {sorted(raw_tensor_dict)})")
            raw = raw_tensor_dict[key]
            for i, d in enumerate(value.dims):
                if duplicate_dims_are_excluded and d in visited:
                    continue
                visited.append(d)
                size_key = f"{key}:size{i}"
                size = raw_tensor_dict.get(size_key)
                if d.size is not None:
                    if size is not None and int(size) != d.size:
                        raise ValueError(f"{_ASSIGN}: {size_key!r} is {int(size)}, but dim {d!r} has size {d.size}")
                    continue
                if d.derivation is not None:
                    continue  # follows its operands
                if d.is_batch_dim():
                    _bind_batch(d, size, raw, i, _ASSIGN)
                    continue
                if size is None:
                    if not with_scalar_dyn_sizes and _lengths_dims(d, value, _ASSIGN) == ():
                        continue
                    raise KeyError(f"{_ASSIGN}: {size_key!r} (the lengths of dim {d!r}) is not in the raw dict")
                lengths_dims = _lengths_dims(d, value, _ASSIGN)
                lengths = _as_raw(size, _ASSIGN)
                mark_dynamic_axes(lengths, lengths_dims)
                bind_lengths(d, Tensor(lengths, lengths_dims))
            raw = _as_raw(raw, _ASSIGN)
            mark_dynamic_axes(raw, value.dims)  # no duck sizing of its dynamic axes under torch.compile
            value.raw_tensor = raw

    def assign_padded_(self, data: Dict[str, torch.Tensor], *, lengths: Optional[Dict[Dim, Any]] = None) -> None:
        """dimtorch's way to fill the dict for a step: `data` maps names to padded raws (axes in the
        order of the tensor's dims), `lengths` maps declared dims to their lengths (raws over the
        dims their lengths are declared over, by default the tensor's batch dims) and batch dims to
        their size (an int; by default the raw's size). Every tensor of the dict gets its raw."""
        lengths = dict(lengths or {})
        for d, size in lengths.items():
            if not isinstance(d, Dim):
                raise TypeError(f"{_PADDED}: lengths must map Dims to lengths, got a key {d!r}")
            if d.is_batch_dim():
                _bind_batch(d, size, None, None, _PADDED)
        for key, value in self.data.items():
            if key not in data:
                raise KeyError(f"{_PADDED}: no raw for {key!r} (given: {sorted(data)})")
            raw = data[key]
            for i, d in enumerate(value.dims):
                if d.is_batch_dim() and d not in lengths:
                    _bind_batch(d, None, raw, i, _PADDED)
                    lengths[d] = None
                elif d in lengths and lengths[d] is not None and not d.is_batch_dim():
                    bind_lengths(d, Tensor(_as_raw(lengths[d], _PADDED), _lengths_dims(d, value, _PADDED)))
                    lengths[d] = None  # bound once
            value.raw_tensor = _as_raw(raw, _PADDED)


def _as_raw(x, caller: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, Tensor):
        return x.raw
    if isinstance(x, int) and not isinstance(x, bool):
        return torch.tensor(x, dtype=torch.int32)
    raise TypeError(f"{caller}: expected a torch.Tensor, got {type(x).__name__} (dimtorch runs on torch only: "
                    f"torch.from_numpy() a numpy array)")


def _bind_batch(d: Dim, size, raw, axis, caller: str) -> None:
    """Binds batch dim d's size: `size` (an int or 0-dim raw), else raw's size at `axis`."""
    if size is None:
        if raw is None:
            return
        size = raw.shape[axis]
    size = _as_raw(size, caller)
    if size.dim() != 0:
        raise ValueError(f"{caller}: the size of batch dim {d!r} must be a 0-dim int, got shape {tuple(size.shape)}")
    d.dyn_size_ext = Tensor(d.name or "batch", [], dtype=str(size.dtype).replace("torch.", ""), raw_tensor=size)


def _lengths_dims(d: Dim, value: Tensor, caller: str) -> tuple:
    """The dims d's lengths are over: as declared (Dim(Tensor(name, dims, ...))), else the batch dims
    of `value`."""
    template = d._lengths_template
    if template is not None:
        return template.dims
    bound = d.lengths
    if bound is not None:
        return bound.dims
    batch = tuple(b for b in value.dims if b.is_batch_dim())
    if not batch:
        raise ValueError(f"{caller}: the lengths of dim {d!r} are over no batch dim of {value!r}: declare them, "
                         f"Dim(Tensor({d.name!r}, dims=[batch_dim], dtype='int32'))")
    return batch
