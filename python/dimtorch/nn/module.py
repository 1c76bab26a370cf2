"""dt.nn.Module: a torch.nn.Module whose named parameters and buffers read as dimtorch Tensors; Parameter, Buffer, state-dict checks."""
from __future__ import annotations

import copy
import sys

import torch

from .._C import Dim, Tensor
from .._core.dtypes import to_torch_dtype
from .._core.args import dims_arg, dims_str
from .._core import tracing as _tracing
from .._core.tracing import dynamo_tracing

__all__ = ["Module", "Parameter", "Buffer", "StateDictError", "check_state_dict"]


class StateDictError(RuntimeError):
    """A state dict does not fit a module; the message lists every mismatch; nothing was loaded."""


def _parameter_dims(dims, caller: str) -> tuple:
    """dims as a tuple of Dims (as the creation functions take them), each static and given once."""
    dims = dims_arg(dims, caller, "dims")
    for i, d in enumerate(dims):
        if not d.is_static() or d.size is None:
            raise ValueError(f"{caller}: dim {d!r} has no static size; parameters need static dims")
        if any(e is d for e in dims[:i]):
            raise ValueError(f"{caller}: dim {d!r} is given twice (dims: {dims_str(dims)})")
    return dims


def _initial_raw(init, dims: tuple, dtype: torch.dtype, device, in_dims, out_dims, caller: str) -> torch.Tensor:
    """The initial raw (axes in `dims` order) from `init`: None (zeros), a number, an initializer
    (see dt.nn.init), a dimtorch Tensor over the same dims (any order) or a torch.Tensor of that shape."""
    shape = tuple(d.size for d in dims)
    if init is None:
        raw = torch.zeros(shape, dtype=dtype, device=device)
    elif isinstance(init, (bool, int, float)):
        raw = torch.full(shape, init, dtype=dtype, device=device)
    elif isinstance(init, Tensor):
        if len(init.dims) != len(dims) or not all(any(e is d for e in init.dims) for d in dims):
            raise ValueError(f"{caller}: init has dims ({dims_str(init.dims)}), the parameter ({dims_str(dims)})")
        raw = init.raw_aligned(dims).detach().to(dtype=dtype, device=device).clone()
    elif isinstance(init, torch.Tensor):
        raw = init.detach().to(dtype=dtype, device=device).clone()
    elif callable(init):
        raw = init(dims, dtype, device, in_dims=in_dims, out_dims=out_dims)
    else:
        raise TypeError(f"{caller}: init must be None, a number, an initializer, a dimtorch.Tensor or a "
                        f"torch.Tensor, got {type(init).__name__}")
    if tuple(raw.shape) != shape:
        raise ValueError(f"{caller}: init gave shape {tuple(raw.shape)}, the dims ({dims_str(dims)}) need {shape}")
    return raw


def _is_sharded(raw) -> bool:
    """Whether `raw` is a DTensor (e.g. a parameter that FSDP2's fully_shard holds sharded between
    forwards). Such a parameter reads as itself, not as a named view: FSDP2 reads it back with
    getattr(module, name) and needs the DTensor, and a view of a shard outside FSDP's forward would
    be a view of the wrong values anyway. (No DTensor exists before torch.distributed.tensor is imported.)"""
    mod = sys.modules.get("torch.distributed.tensor")
    return mod is not None and isinstance(raw, mod.DTensor)


class Parameter:
    """The named view of a torch.nn.Parameter: its dims and the registered torch Parameter (`raw`).

    Assigning one to an attribute of a dt.nn.Module registers `raw` as a torch parameter under that
    name (so parameters(), optimizers, state_dict, .to(), autocast, checkpointing and DDP see it) and
    records the dims; reading the attribute then gives `dt.Tensor(current torch parameter, dims)`.
    `init`: None (zeros), a number, an initializer from dt.nn.init (called with `in_dims`/`out_dims`
    for its fans), a dimtorch Tensor over the same dims or a torch.Tensor of the shape. Integer and
    bool parameters never require grad.
    """

    __slots__ = ("dims", "raw")

    def __init__(self, dims, dtype="float32", init=None, *, requires_grad: bool = True, device=None,
                 in_dims=None, out_dims=None):
        caller = "dimtorch.nn.Parameter()"
        self.dims = _parameter_dims(dims, caller)
        torch_dtype = to_torch_dtype(dtype, caller)
        raw = _initial_raw(init, self.dims, torch_dtype, device, in_dims, out_dims, caller)
        trainable = torch_dtype.is_floating_point or torch_dtype.is_complex
        self.raw = torch.nn.Parameter(raw, requires_grad=bool(requires_grad and trainable))

    @property
    def tensor(self) -> Tensor:
        return Tensor(self.raw, self.dims)

    def __repr__(self):
        return f"dimtorch.nn.Parameter(dims=({dims_str(self.dims)}), dtype={self.raw.dtype})"


class Buffer:
    """The named view of a module buffer (e.g. running statistics): like Parameter, registered with
    register_buffer (`persistent=False` keeps it out of the state dict); never requires grad."""

    __slots__ = ("dims", "raw", "persistent")

    def __init__(self, dims, dtype="float32", init=None, *, persistent: bool = True, device=None):
        caller = "dimtorch.nn.Buffer()"
        self.dims = _parameter_dims(dims, caller)
        self.raw = _initial_raw(init, self.dims, to_torch_dtype(dtype, caller), device, None, None, caller)
        self.persistent = persistent

    @property
    def tensor(self) -> Tensor:
        return Tensor(self.raw, self.dims)

    def __repr__(self):
        return f"dimtorch.nn.Buffer(dims=({dims_str(self.dims)}), dtype={self.raw.dtype})"


def _same_dim_set(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(any(e is d for e in b) for d in a)


class _NamedMember:
    """Class attribute that reads a named parameter/buffer of an instance from its cached view, or
    a submodule from _modules.

    /* Without it, `self.weight` reaches Module.__getattr__ only after Python's normal lookup has
       failed and raised an AttributeError internally (~0.5 µs, also what torch.nn.Linear pays per
       read of self.weight, and every module per read of a submodule); a non-data descriptor on the
       class is found first (~0.1 µs). It is installed on the
       module's class when a name is first registered there and the class has no attribute of that
       name; instance attributes of the same name still win (non-data descriptor), and instances
       whose attribute of that name is not a named parameter fall through to Module.__getattr__. */
    """

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        name = self.name
        if dynamo_tracing():  # no cache while Dynamo traces (see Module.__getattr__)
            return obj.__getattr__(name)
        d = obj.__dict__
        views = d.get("_dt_views")
        if views is not None:
            # A parametrized name has no cached view (_dt_member keeps none for it), so a hit needs
            # no parametrization check: that check runs on misses only.
            v = views.get(name)
            if v is not None and d[v[0]].get(name) is v[1]:
                return v[2]
        parametrized = d.get("_dt_parametrized")
        if parametrized and name in parametrized:
            return _read_parametrized(obj, name, parametrized[name])
        modules = d.get("_modules")
        if modules is not None:
            m = modules.get(name)
            if m is not None:
                return m
        return obj.__getattr__(name)


def _read_parametrized(module, name: str, entry: tuple):
    """The value of a parametrized name (dt.nn.register_parametrization): parametrization(the parameter)
    when the parameter was kept, else the parametrization module's value."""
    parametrization, keep = entry
    if keep:
        return parametrization(module._dt_member(name))
    return module._modules[name]()


def _install_member(cls: type, name: str) -> None:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return  # a class attribute (ours already, or the class's own) decides the lookup
    if name.isidentifier():
        setattr(cls, name, _NamedMember(name))


class Module(torch.nn.Module):
    """A torch.nn.Module whose dt.nn.Parameter/dt.nn.Buffer attributes read as dimtorch Tensors.

    `self.w = dt.nn.Parameter(dims, ...)` registers a torch.nn.Parameter named `w` and records its dims;
    `self.w` then gives `dt.Tensor(self._parameters["w"], dims)` (built from the current parameter, so
    .to() and load_state_dict are reflected; cached while the parameter object is the same and
    cleared by .to()/_apply). The torch Parameter itself is `self.w.raw`.
    Assigning a dimtorch Tensor to a name:
    - whose raw is a torch.nn.Parameter (e.g. another module's weight): ties the two (same Parameter),
      with that Tensor's dims (which must be the dims of the name if it has them);
    - else, to a named parameter or buffer: copies the values in (no grad), dims must match (any order).
    Assigning a torch value of another shape to a named parameter, or wrong dims, is an error.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        d = self.__dict__
        d.setdefault("_dt_dims", {})  # name -> dims of a named parameter or buffer
        # name -> (container key "_parameters"/"_buffers", raw, Tensor): the cached view. The key, not
        # the dict: replicas (DataParallel, copy.copy) share this dict but have their own containers.
        d.setdefault("_dt_views", {})

    # -- registration ------------------------------------------------------------------------
    def _dt_record(self, name: str, dims: tuple) -> None:
        d = self.__dict__
        if "_dt_dims" not in d:
            d["_dt_dims"], d["_dt_views"] = {}, {}
        d["_dt_dims"][name] = dims
        d["_dt_views"].pop(name, None)
        _install_member(type(self), name)

    def _dt_forget(self, name: str) -> None:
        d = self.__dict__
        if "_dt_dims" in d:
            d["_dt_dims"].pop(name, None)
            d["_dt_views"].pop(name, None)

    def __setattr__(self, name, value):
        d = self.__dict__
        dims_map = d.get("_dt_dims")
        known = dims_map.get(name) if dims_map else None
        if isinstance(value, Parameter):
            if name in d.get("_buffers", ()):
                del d["_buffers"][name]
            torch.nn.Module.__setattr__(self, name, value.raw)
            self._dt_record(name, value.dims)
            return
        if isinstance(value, Buffer):
            if name in d.get("_parameters", ()):
                del d["_parameters"][name]
            if name in d.get("_buffers", ()):
                del d["_buffers"][name]
            self.register_buffer(name, value.raw, persistent=value.persistent)
            self._dt_record(name, value.dims)
            return
        if isinstance(value, Tensor):
            caller = f"{type(self).__name__}.{name} = ..."
            if isinstance(value.raw, torch.nn.Parameter):
                if known is not None and not _same_dim_set(known, value.dims):
                    raise ValueError(f"{caller}: {name!r} has dims ({dims_str(known)}), the assigned parameter "
                                     f"({dims_str(value.dims)})")
                if name in d.get("_buffers", ()):
                    del d["_buffers"][name]
                torch.nn.Module.__setattr__(self, name, value.raw)
                self._dt_record(name, tuple(value.dims))
                return
            if known is not None:
                if not _same_dim_set(known, value.dims):
                    raise ValueError(f"{caller}: {name!r} has dims ({dims_str(known)}), the assigned value "
                                     f"({dims_str(value.dims)}); assign a dt.nn.Parameter to redefine it")
                target = d["_parameters"].get(name) if name in d["_parameters"] else d["_buffers"].get(name)
                with torch.no_grad():
                    target.copy_(value.raw_aligned(known))
                return
        elif known is not None:
            if value is None:
                self._dt_forget(name)
            elif isinstance(value, torch.Tensor):
                shape = tuple(x.size for x in known)
                if tuple(value.shape) != shape:
                    raise ValueError(f"{type(self).__name__}.{name} = ...: {name!r} has dims ({dims_str(known)}) "
                                     f"= shape {shape}, the assigned torch tensor has shape {tuple(value.shape)}")
                d["_dt_views"].pop(name, None)
            else:
                self._dt_forget(name)
        torch.nn.Module.__setattr__(self, name, value)
        if isinstance(value, torch.nn.Module):
            _install_member(type(self), name)

    def __getattr__(self, name):
        parametrized = self.__dict__.get("_dt_parametrized")
        if parametrized and name in parametrized:
            return _read_parametrized(self, name, parametrized[name])
        return self._dt_member(name)

    def _dt_member(self, name):
        """The named parameter or buffer `name` as a Tensor (its cached view), else torch's lookup."""
        d = self.__dict__
        views = d.get("_dt_views")
        if views is not None:
            # No cache while Dynamo traces (its guards would follow the cache's fill); none filled
            # while make_fx or torch.export trace (their parameters are stand-ins).
            v = views.get(name) if not dynamo_tracing() else None
            if v is not None:
                key, raw, tensor = v
                if d[key].get(name) is raw:
                    return tensor
            dims = d["_dt_dims"].get(name)
            if dims is not None:
                key = "_parameters" if name in d["_parameters"] else "_buffers"
                raw = d[key].get(name)
                if raw is None or _is_sharded(raw):
                    return raw
                try:
                    tensor = Tensor(raw, dims)
                except ValueError as e:
                    raise ValueError(f"{type(self).__name__}.{name}: the registered tensor of shape "
                                     f"{tuple(raw.shape)} does not fit its dims ({dims_str(dims)}): {e}") from None
                if name not in d.get("_dt_parametrized", ()) and not _tracing.tracing():
                    views[name] = (key, raw, tensor)  # (see _NamedMember.__get__: none for a parametrized name)
                return tensor
        return torch.nn.Module.__getattr__(self, name)

    def __delattr__(self, name):
        self._dt_forget(name)
        torch.nn.Module.__delattr__(self, name)

    def _apply(self, fn, *args, **kwargs):
        # .to()/.float()/.cuda() may change a parameter's data in place (same object, new dtype or
        # device): the cached views would describe the old one.
        views = self.__dict__.get("_dt_views")
        if views:
            views.clear()
        return super()._apply(fn, *args, **kwargs)

    def __deepcopy__(self, memo):
        # Dims are identities shared with the data and other modules: a copy of a module (e.g. an
        # EMA copy) must keep the same Dim objects, or it would not accept the original inputs.
        for m in self.modules():
            d = m.__dict__
            for dims in d.get("_dt_dims", {}).values():
                for dim in dims:
                    memo.setdefault(id(dim), dim)
            for v in d.values():
                if isinstance(v, Dim):
                    memo.setdefault(id(v), v)
                elif isinstance(v, (tuple, list)):
                    for e in v:
                        if isinstance(e, Dim):
                            memo.setdefault(id(e), e)
        cls = type(self)
        new = cls.__new__(cls)
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            new.__dict__[k] = {} if k == "_dt_views" else copy.deepcopy(v, memo)
        return new

    # -- introspection -------------------------------------------------------------------------
    def named_parameter_dims(self, prefix: str = "", recurse: bool = True):
        """(qualified name, dims) of every named (dimtorch) parameter and buffer; dims None for plain torch ones."""
        for mod_prefix, m in (self.named_modules(prefix=prefix) if recurse else [(prefix, self)]):
            dims_map = m.__dict__.get("_dt_dims", {})
            for name in list(m._parameters) + list(m._buffers):
                yield (f"{mod_prefix}.{name}" if mod_prefix else name), dims_map.get(name)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """torch's load_state_dict, after checking every key and shape first (check_state_dict):
        a mismatch raises StateDictError listing all of them, with dims, and loads nothing."""
        check_state_dict(self, state_dict, strict=strict, caller=f"{type(self).__name__}.load_state_dict()")
        return super().load_state_dict(state_dict, strict=strict, assign=assign)


def _expected_entries(module: torch.nn.Module, prefix: str, out: dict) -> None:
    """What module.state_dict() would hold: key -> (shape, dims or None), recursing as state_dict does."""
    dims_map = module.__dict__.get("_dt_dims", {})
    for name, p in module._parameters.items():
        if p is not None:
            out[prefix + name] = (tuple(p.shape), dims_map.get(name))
    for name, b in module._buffers.items():
        if b is not None and name not in module._non_persistent_buffers_set:
            out[prefix + name] = (tuple(b.shape), dims_map.get(name))
    if type(module).get_extra_state is not torch.nn.Module.get_extra_state:
        out[prefix + "_extra_state"] = (None, None)
    for name, child in module._modules.items():
        if child is not None:
            _expected_entries(child, prefix + name + ".", out)


def _describe_entry(shape, dims) -> str:
    if dims is not None:
        return f"({dims_str(dims)})"
    return f"shape {shape}"


def check_state_dict(module: torch.nn.Module, state_dict, *, strict: bool = True, state_dims=None,
                     caller: str = "dimtorch.nn.check_state_dict()") -> None:
    """Raises StateDictError listing every mismatch between `state_dict` and `module`: missing and
    unexpected keys (when strict), shapes, and, with `state_dims` (key -> tuple of dim names, as
    save_checkpoint stores them), dim names. Reads nothing from the device."""
    expected = {}
    _expected_entries(module, "", expected)
    problems = []
    if strict:
        for key in expected:
            if key not in state_dict:
                shape, dims = expected[key]
                problems.append(f"missing: {key} {_describe_entry(shape, dims)}")
        for key in state_dict:
            if key not in expected:
                v = state_dict[key]
                shape = tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
                problems.append(f"unexpected: {key} (shape {shape})")
    for key, (shape, dims) in expected.items():
        if shape is None or key not in state_dict:
            continue
        v = state_dict[key]
        if not isinstance(v, torch.Tensor):
            problems.append(f"not a tensor: {key} is a {type(v).__name__}, "
                            f"the module has {_describe_entry(shape, dims)}")
            continue
        if tuple(v.shape) != shape:
            want = f"({dims_str(dims)}) = {shape}" if dims is not None else f"{shape}"
            problems.append(f"shape: {key} is {want} in the module, {tuple(v.shape)} in the state dict")
            continue
        if state_dims is not None and dims is not None and key in state_dims:
            names = tuple(state_dims[key])
            have = tuple(d.name for d in dims)
            if names != have:
                problems.append(f"dims: {key} is ({', '.join(map(str, have))}) in the module, "
                                f"({', '.join(map(str, names))}) in the state dict")
    if problems:
        raise StateDictError(f"{caller}: the state dict does not fit {type(module).__name__} "
                             f"({len(problems)} problem{'s' if len(problems) > 1 else ''}; nothing was loaded):\n  "
                             + "\n  ".join(problems))
