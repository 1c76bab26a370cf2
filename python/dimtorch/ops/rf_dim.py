"""RETURNN's Dim API on dimtorch.Dim itself: RETURNN's constructor options, `dyn_size_ext` (binding a
declared dim to each batch's lengths), get_dim_value, copy, declare_same_as, div_left, ... .
dimtorch._capture.compile puts these into the type dict of the C++ type.

Dims declared once, bound per batch: `Dim(None, name="time")` or `Dim(Tensor("time", [batch_dim],
dtype="int32"))` declares a dim without lengths (its size comes from data until bound);
`dim.dyn_size_ext = Tensor("time", [batch_dim], dtype="int32", raw_tensor=lengths)` binds this batch's
lengths to the same Dim object (dimtorch._C._dim_bind), which drops everything computed from the old
ones: host max/min, device copies, masks, index raws, on the dim and on every dim derived from it by
dim math (T + 1, ceildiv(T, 4), A + T, ...: the same objects, with the new lengths), and the Python
caches keyed by those dims (dimtorch._core.dim_cache.forget). A dim of kind Batch (batch_dim) takes a
0-dim size instead: `batch_dim.dyn_size_ext = Tensor("batch", [], dtype="int32", raw_tensor=n)`.
Binding is per process, as in RETURNN: not while another thread runs ops on those dims.
"""
from __future__ import annotations

import weakref

import torch

from .. import _C
from .._C import Dim, Tensor, ceildiv
from .._core import dim_cache as _dim_cache
from .._core.args import dim_str
from .._core.global_dims import DimTypes
from .._core.raw_input import as_torch, is_numpy
from ._support import flag

_BIND = "dimtorch.Dim.dyn_size_ext = ..."
_RF_OPTIONS = ("kind", "description", "capacity", "vocab", "bounded_by", "match_priority", "auto_generated")


def _check_self(self, caller: str) -> None:
    """The methods here are plain functions in the type dict: called unbound, `self` may be anything."""
    if type(self) is not Dim:
        raise TypeError(f"{caller}: expected a dimtorch.Dim, got {type(self).__name__}")


def _attrs(dim: Dim) -> dict:
    attrs = dim._rf_attrs
    if attrs is None:
        attrs = dim._rf_attrs = {}
    return attrs


def _attr(dim: Dim, key: str):
    attrs = dim._rf_attrs
    return None if attrs is None else attrs.get(key)


# ---- construction ----------------------------------------------------------------------------

def _rf_new(dimension=None, name=None, *, size=None, kind=None, description=None, dyn_size_ext=None,
            capacity=None, vocab=None, bounded_by=None, match_priority=None, auto_generated=None, **unknown):
    """Dim(dimension, name=None, *, kind=, description=, dyn_size_ext=, capacity=, ...): RETURNN's
    constructor (the core sends a call here when it has RETURNN's options, or lengths declared as a
    template: Dim(Tensor("time", [batch_dim], dtype="int32"))). The dim itself is dimtorch's
    Dim(size, name); the options are kept as attributes; a template declares the lengths the dim is
    bound to later (dyn_size_ext)."""
    caller = "dimtorch.Dim()"
    for key in unknown:
        raise TypeError(f"{caller} got an unexpected keyword argument {key!r}")
    if size is not None:
        if dimension is not None:
            raise TypeError(f"{caller} got multiple values for argument 'size'")
        dimension = size
    if dyn_size_ext is not None:
        if dimension is not None:
            raise TypeError(f"{caller}: give the lengths as dimension or as dyn_size_ext, not both")
        dimension = dyn_size_ext
    template = None
    if isinstance(dimension, Tensor) and dimension.raw_tensor is None:
        template, dimension = dimension, None
    if name is None:
        name = description if description is not None else template.name if template is not None else None
    if kind is not None and kind not in (DimTypes.Batch, DimTypes.Spatial, DimTypes.Feature):
        raise TypeError(f"{caller}: kind must be one of Dim.Types (Batch, Spatial, Feature) or None, got {kind!r}")
    d = Dim(dimension, name)
    attrs = {k: v for k, v in (("kind", kind), ("description", description), ("capacity", capacity),
                                ("vocab", vocab), ("match_priority", match_priority)) if v is not None}
    if bounded_by is not None:
        attrs["bounded_by"] = weakref.ref(bounded_by)
    if attrs:
        d._rf_attrs = attrs
    if template is not None:
        if kind is DimTypes.Batch:
            raise ValueError(f"{caller}: a batch dim takes its size from data or a 0-dim size, not lengths")
        _declare_lengths(d, template)
    return d


# ---- binding ---------------------------------------------------------------------------------

def _forget(affected) -> None:
    for d in affected:
        _dim_cache.forget(d)


def bind_lengths(dim: Dim, lengths) -> None:
    """Binds `lengths` (a dimtorch Tensor of ints over batch dims, or None) to `dim`, resetting what
    was computed from its old lengths (see the module docstring)."""
    _forget(_C._dim_bind(dim, lengths))


# A declared dim's lengths template -> the dims declared with it (weakly), so that RETURNN's
# `dim.dyn_size_ext.raw_tensor = lengths` binds them (the template itself is frozen: it stays the
# declaration). Keyed by id; an entry counts only while that dim still has that template.
_TEMPLATE_OWNERS: dict[int, list] = {}


def _declare_lengths(dim: Dim, template: Tensor) -> None:
    dim._lengths_template = template
    owners = _TEMPLATE_OWNERS.setdefault(id(template), [])
    owners[:] = [r for r in owners if r() is not None and r()._lengths_template is template]
    owners.append(weakref.ref(dim))


def _template_owners(template: Tensor) -> list:
    refs = _TEMPLATE_OWNERS.get(id(template), ())
    dims = [d for d in (r() for r in refs) if d is not None and d._lengths_template is template]
    if not dims:
        _TEMPLATE_OWNERS.pop(id(template), None)
    return dims


def assign_raw_fallback(tensor: Tensor, value):
    """`tensor.raw_tensor = value` where dimtorch's setter refuses it (Tensor._assign_raw_fallback,
    called by the C setter on its failure paths only): a numpy raw is converted to torch once; the
    raw of a declared dim's lengths template binds that dim (RETURNN's in-place binding). Anything
    else: NotImplemented (the setter raises its own error)."""
    raw = torch.as_tensor(value) if is_numpy(value) else value
    if not isinstance(raw, torch.Tensor):
        return NotImplemented
    if tensor._frozen:
        owners = _template_owners(tensor) if tensor.raw_tensor is None else ()
        if not owners:
            return NotImplemented
        try:
            lengths = Tensor(tensor.name or "lengths", dims=tensor.dims, dtype=tensor.dtype, raw_tensor=raw)
        except (TypeError, ValueError) as e:
            raise type(e)(f"dimtorch.Tensor.raw_tensor = ... (the lengths of {dim_str(owners[0])}): {e}") from None
        for dim in owners:
            _set_dyn_size_ext(dim, lengths)
        return None
    if raw is value:
        return NotImplemented
    tensor.raw_tensor = raw
    return None


def _get_dyn_size_ext(self):
    """The lengths Tensor (given, bound or derived), the 0-dim size bound to a batch dim, the
    lengths declared without data (a template), or None (a static dim, or one without any)."""
    if self.size is not None:
        return None
    lengths = self.lengths
    if lengths is not None:
        return lengths
    bound = self._bound_size
    return bound if bound is not None else self._lengths_template


def _set_dyn_size_ext(self, value) -> None:
    """dim.dyn_size_ext = lengths: binds this batch's lengths (or a batch dim's 0-dim size); a
    template (no raw) declares them; None unbinds (the size then comes from data)."""
    if value is not None and not isinstance(value, Tensor):
        raise TypeError(f"{_BIND}: expected a dimtorch.Tensor or None, got {type(value).__name__}")
    batch = _attr(self, "kind") is DimTypes.Batch
    if value is None:
        if self._bound_size is not None:
            _C._dim_bind_size(self, None)
        self._lengths_template = None
        bind_lengths(self, None)
        return
    if value.raw_tensor is None:
        if batch and value.dims:
            raise ValueError(f"{_BIND}: batch dim {dim_str(self)} takes a 0-dim size, got a template over "
                             f"({', '.join(dim_str(d) for d in value.dims)})")
        if self._bound_size is not None:
            _C._dim_bind_size(self, None)
        if self.lengths is not None:
            bind_lengths(self, None)
        if not batch:
            _declare_lengths(self, value)
        return
    if batch:
        if value.dims:
            raise ValueError(f"{_BIND}: batch dim {dim_str(self)} takes a 0-dim size, got lengths over "
                             f"({', '.join(dim_str(d) for d in value.dims)})")
        _C._dim_bind_size(self, value)
        _forget((self,))
        return
    template = self._lengths_template
    if template is not None and template.dims != value.dims:
        raise ValueError(f"{_BIND}: dim {dim_str(self)} was declared with lengths over "
                         f"({', '.join(dim_str(d) for d in template.dims)}), got lengths over "
                         f"({', '.join(dim_str(d) for d in value.dims)})")
    bind_lengths(self, value)


def reset_raw(self, *, only_self: bool = False, include_parents: bool = False) -> None:
    """Unbinds the lengths (or the batch dim's size), keeping what declares them (a template with
    the lengths' dims and dtype), as RETURNN's reset_raw; the dims derived from this one follow."""
    _check_self(self, "dimtorch.Dim.reset_raw()")
    if self.size is not None or self.derivation is not None:
        return
    if self._bound_size is not None:
        _C._dim_bind_size(self, None)
        _forget((self,))
        return
    lengths = self.lengths
    if lengths is None:
        return
    if self._lengths_template is None:
        _declare_lengths(self, lengths.copy_template())
    bind_lengths(self, None)


def reset_eager(self) -> None:
    """reset_raw(): what RETURNN calls between eager steps."""
    _check_self(self, "dimtorch.Dim.reset_eager()")
    reset_raw(self)


def reset_batch_and_raw(self) -> None:
    """reset_raw() (dimtorch has no batch info to reset)."""
    _check_self(self, "dimtorch.Dim.reset_batch_and_raw()")
    reset_raw(self)


def transform_tensors(self, func) -> None:
    """Applies func (in place) to a copy of the bound lengths and binds the result."""
    _check_self(self, "dimtorch.Dim.transform_tensors()")
    lengths = _get_dyn_size_ext(self)
    if lengths is None:
        return
    lengths = lengths.copy()
    func(lengths)
    _set_dyn_size_ext(self, lengths)


# ---- sizes -----------------------------------------------------------------------------------

def get_dim_value(self) -> int:
    """The size an axis over this dim has: the static size, the declared capacity, the max of the
    lengths, or the size bound to a batch dim (host ints: no device read)."""
    _check_self(self, "dimtorch.Dim.get_dim_value()")
    if self.size is not None:
        return self.size
    capacity = _attr(self, "capacity")
    if capacity is not None:
        return capacity
    n = self.get_max_size()
    if n is None:
        raise ValueError(f"dimtorch.Dim.get_dim_value(): dim {dim_str(self)} takes its size from data and has "
                         f"no lengths or size bound (dim.dyn_size_ext = ...)")
    return n


def get_dim_value_tensor(self):
    """get_dim_value() as RETURNN gives it: an int for a static dim (or a declared capacity), else a
    0-dim Tensor on the host (the batch dim's bound size itself, or the max of the lengths)."""
    _check_self(self, "dimtorch.Dim.get_dim_value_tensor()")
    if self.size is not None:
        return self.size
    capacity = _attr(self, "capacity")
    if capacity is not None:
        return capacity
    bound = self._bound_size
    if bound is not None:
        return bound
    lengths = self.lengths
    n = get_dim_value(self)
    dtype = lengths.raw.dtype if lengths is not None else torch.int32
    return Tensor(torch.full((), n, dtype=dtype), ())


def get_dyn_size_ext_for_device(self, device) -> Tensor:
    """The lengths (or bound size) on `device` (copied once and cached)."""
    _check_self(self, "dimtorch.Dim.get_dyn_size_ext_for_device()")
    return self.get_size_tensor(device=device)


def is_batch_dim(self) -> bool:
    """Whether the dim is of kind Dim.Types.Batch (batch_dim is)."""
    _check_self(self, "dimtorch.Dim.is_batch_dim()")
    return _attr(self, "kind") is DimTypes.Batch


def is_spatial_dim(self) -> bool:
    """Whether the dim is of kind Dim.Types.Spatial."""
    _check_self(self, "dimtorch.Dim.is_spatial_dim()")
    return _attr(self, "kind") is DimTypes.Spatial


def is_feature_dim(self) -> bool:
    """Whether the dim is of kind Dim.Types.Feature."""
    _check_self(self, "dimtorch.Dim.is_feature_dim()")
    return _attr(self, "kind") is DimTypes.Feature


def _kind(self):
    return _attr(self, "kind")


def _set_kind(self, kind) -> None:
    if kind is not None and kind not in (DimTypes.Batch, DimTypes.Spatial, DimTypes.Feature):
        raise TypeError(f"dimtorch.Dim.kind = ...: expected one of Dim.Types or None, got {kind!r}")
    _attrs(self)["kind"] = kind


def _description(self):
    d = _attr(self, "description")
    return self.name if d is None else d


def _dyn_size(self):
    """RETURNN's dyn_size: the raw (torch) of dyn_size_ext, or None. dimtorch's own code reads the
    lengths as a Tensor: dim.lengths (dyn_size_ext, which also gives a bound batch size)."""
    lengths = _get_dyn_size_ext(self)
    return None if lengths is None else lengths.raw_tensor


def _set_dyn_size(self, raw) -> None:
    """dim.dyn_size = raw lengths (RETURNN): binds them over the dims the lengths were declared or
    last bound with (as dyn_size_ext = Tensor(..., raw_tensor=raw))."""
    template = _get_dyn_size_ext(self)
    if template is None:
        raise ValueError(f"dimtorch.Dim.dyn_size = ...: dim {dim_str(self)} has no lengths declared (no "
                         f"dyn_size_ext) to take the dims of the raw lengths from; bind dyn_size_ext instead")
    _set_dyn_size_ext(self, Tensor(as_torch(raw, "dimtorch.Dim.dyn_size = ..."), template.dims))


PROPERTIES = {
    "dyn_size_ext": property(_get_dyn_size_ext, _set_dyn_size_ext),
    "dyn_size": property(_dyn_size, _set_dyn_size),
    "kind": property(_kind, _set_kind),
    "description": property(_description, doc="RETURNN's description: the one given, else the name."),
    "capacity": property(lambda self: _attr(self, "capacity"), doc="The declared upper bound of the size, or None."),
    "vocab": property(lambda self: _attr(self, "vocab"), doc="The vocabulary given at construction, or None."),
    "Types": DimTypes,
}


# ---- copies and sameness ---------------------------------------------------------------------

def copy(self, same_as_self: bool = True, description=None, kind=None, match_priority=None) -> Dim:
    """The dim itself (dimtorch's dims are equal only to themselves, so a copy "same as self" is
    self), or, with same_as_self=False or a match_priority (RETURNN's way to have the same dim
    twice, e.g. a square matrix), a new Dim with the same size or lengths."""
    _check_self(self, "dimtorch.Dim.copy()")
    same_as_self = flag(same_as_self, "dimtorch.Dim.copy()", "same_as_self")
    if description is not None and not isinstance(description, str):
        raise TypeError(f"dimtorch.Dim.copy(): description must be a str or None, got {type(description).__name__}")
    if same_as_self and match_priority is None and description is None and kind is None:
        return self
    if not same_as_self and description is None:
        raise ValueError("dimtorch.Dim.copy(): a copy not same_as_self needs a new description")
    name = description if description is not None else self.name
    if self.size is not None:
        new = Dim(self.size, name)
    else:
        lengths = self.lengths
        new = Dim(lengths, name) if lengths is not None else Dim(None, name)
        if lengths is None:
            if self._lengths_template is not None:
                _declare_lengths(new, self._lengths_template)
            elif self._bound_size is not None:
                _C._dim_bind_size(new, self._bound_size)
    attrs = dict(self._rf_attrs or {})
    attrs.pop("description", None)
    for k, v in (("kind", kind), ("match_priority", match_priority)):
        if v is not None:
            attrs[k] = v
    if attrs:
        new._rf_attrs = attrs
    return new


def copy_from(self, other: Dim) -> None:
    """Makes this dim hold `other`'s size: its lengths bound (a snapshot: binding `other` later does
    not follow), its declared lengths, or the same static size (which must already be this dim's)."""
    _check_self(self, "dimtorch.Dim.copy_from()")
    caller = "dimtorch.Dim.copy_from()"
    if not isinstance(other, Dim):
        raise TypeError(f"{caller}: expected a Dim, got {type(other).__name__}")
    if other is self:
        return
    if other.size is not None or self.size is not None:
        if other.size != self.size:
            raise ValueError(f"{caller}: dim {dim_str(self)} cannot take the size of {dim_str(other, self)}: a "
                             f"dim's static size is fixed when it is made")
        return
    value = _get_dyn_size_ext(other)
    if value is not None and value.raw_tensor is not None and is_batch_dim(other) != is_batch_dim(self):
        raise ValueError(f"{caller}: dim {dim_str(self)} and {dim_str(other, self)}: one is a batch dim, the "
                         f"other not")
    _set_dyn_size_ext(self, value)


def declare_same_as(self, other: Dim) -> None:
    """RETURNN's declare_same_as, as far as dimtorch's identities allow: this dim takes `other`'s size
    or lengths (copy_from) and remembers `other` (dim.same_as). The two stay different Dims for the
    ops (a tensor over one does not align with a tensor over the other: dimtorch.replace_dim moves
    it)."""
    _check_self(self, "dimtorch.Dim.declare_same_as()")
    if not isinstance(other, Dim):
        raise TypeError(f"dimtorch.Dim.declare_same_as(): expected a Dim, got {type(other).__name__}")
    if other is self:
        return
    copy_from(self, other)
    _attrs(self)["same_as"] = weakref.ref(other)


def _same_as(self):
    ref = _attr(self, "same_as")
    return None if ref is None else ref()


PROPERTIES["same_as"] = property(_same_as, doc="The dim given to declare_same_as(), or None.")


# ---- dim math --------------------------------------------------------------------------------

def _factor(other, caller: str) -> int:
    """An int, or a static Dim's size."""
    if isinstance(other, Dim):
        if other.size is None:
            raise ValueError(f"{caller}: dividing by a dim works for static dims, got {dim_str(other)}")
        return other.size
    if isinstance(other, int) and not isinstance(other, bool):
        return other
    raise TypeError(f"{caller}: expected an int or a static Dim, got {type(other).__name__}")


def _mul_dims(a: Dim, b: Dim) -> Dim:
    """a * b for two dims (RETURNN's product of dims): static dims give their merged dim (cached on a:
    the same Dim each time, as merge_dims makes it); a static dim with a dynamic one, T * k."""
    caller = "dimtorch.Dim.__mul__()"
    if a.size is not None and b.size is not None:
        merged = _C._merged_dim((a, b))
        attrs = _attrs(merged)
        if "factors" not in attrs:
            attrs["factors"] = (weakref.ref(a), weakref.ref(b))
        return merged
    if b.size is not None:
        return a * b.size
    if a.size is not None:
        return b * a.size
    raise ValueError(f"{caller}: {dim_str(a)} * {dim_str(b, a)}: a product of dims needs one of them static")


def _factors(self):
    f = _attr(self, "factors")
    return (None, None) if f is None else (f[0](), f[1]())


def div_left(self, other) -> Dim:
    """The dim D with other * D == self: the right factor of a product of dims, else self // k (k: an
    int or a static dim's size, which must divide a static size)."""
    _check_self(self, "dimtorch.Dim.div_left()")
    caller = "dimtorch.Dim.div_left()"
    left, right = _factors(self)
    if isinstance(other, Dim) and left is other and right is not None:
        return right
    return _div(self, _factor(other, caller), caller)


def div_right(self, other) -> Dim:
    """The dim D with D * other == self: the left factor of a product of dims, else self // k."""
    _check_self(self, "dimtorch.Dim.div_right()")
    caller = "dimtorch.Dim.div_right()"
    left, right = _factors(self)
    if isinstance(other, Dim) and right is other and left is not None:
        return left
    return _div(self, _factor(other, caller), caller)


def _div(self, k: int, caller: str) -> Dim:
    if k <= 0:
        raise ValueError(f"{caller}: the factor must be positive, got {k}")
    if self.size is not None and self.size % k:
        raise ValueError(f"{caller}: {k} does not divide the size of {dim_str(self)}")
    return self // k


def ceildiv_right(self, other) -> Dim:
    """ceildiv(self, k) (k: an int or a static dim's size)."""
    _check_self(self, "dimtorch.Dim.ceildiv_right()")
    return ceildiv(self, _factor(other, "dimtorch.Dim.ceildiv_right()"))


def ceildiv_left(self, other) -> Dim:
    """ceildiv(self, k), as ceildiv_right: dimtorch's dim math does not tell the two apart."""
    _check_self(self, "dimtorch.Dim.ceildiv_left()")
    return ceildiv(self, _factor(other, "dimtorch.Dim.ceildiv_left()"))


METHODS = {
    "get_dim_value": get_dim_value, "get_dim_value_tensor": get_dim_value_tensor,
    "get_dyn_size_ext_for_device": get_dyn_size_ext_for_device, "is_batch_dim": is_batch_dim,
    "is_spatial_dim": is_spatial_dim, "is_feature_dim": is_feature_dim, "copy": copy, "copy_from": copy_from,
    "declare_same_as": declare_same_as, "div_left": div_left, "div_right": div_right,
    "ceildiv_left": ceildiv_left, "ceildiv_right": ceildiv_right, "reset_raw": reset_raw,
    "reset_eager": reset_eager, "reset_batch_and_raw": reset_batch_and_raw, "transform_tensors": transform_tensors,
}
