"""rf.backend: dimtorch runs on torch, eagerly (or captured by torch.compile): selecting the torch backend
is a no-op, others are not available."""
from __future__ import annotations

from typing import Optional

__all__ = ["select_backend", "get_selected_backend", "select_backend_numpy", "select_backend_tf",
           "select_backend_returnn_layers_tf", "select_backend_torch", "is_executing_eagerly",
           "is_backend_raw_tensor_dim_tag_independent"]


def select_backend(name: str):
    """"torch" is dimtorch's one backend; other names raise."""
    if name != "torch":
        raise NotImplementedError(f"dimtorch.rf.select_backend(): dimtorch runs on torch only, not {name!r}")


def get_selected_backend() -> Optional[str]:
    """"torch"."""
    return "torch"


def select_backend_torch():
    """The torch backend: dimtorch's own (a no-op)."""


def _not_torch(name: str):
    def select():
        raise NotImplementedError(f"dimtorch.rf.select_backend_{name}(): dimtorch runs on torch only")
    select.__name__ = select.__qualname__ = f"select_backend_{name}"
    select.__doc__ = f"RETURNN's {name} backend: not available in dimtorch (raises)."
    return select


select_backend_numpy = _not_torch("numpy")
select_backend_tf = _not_torch("tf")
select_backend_returnn_layers_tf = _not_torch("returnn_layers_tf")


def is_executing_eagerly() -> bool:
    """True: dimtorch's ops run eagerly (torch.compile captures the same code)."""
    return True


def is_backend_raw_tensor_dim_tag_independent() -> bool:
    """False: dimtorch caches the raws it makes from a dim's lengths (masks, index tensors) per Dim
    object, so two dims with equal lengths (Dim.copy_from) get equal but separate raws; RETURNN's
    torch backend shares them across such copies, which is what True promises (its test_dim_mask)."""
    return False
