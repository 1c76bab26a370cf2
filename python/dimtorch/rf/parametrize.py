"""rf.parametrize (RETURNN frontend's): register_parametrization, remove_parametrization, is_parametrized.

dimtorch.nn's implementation, which rf modules share: after register_parametrization(module, "weight", f),
`module.weight` reads as f(the parameter) (a plain Tensor, no longer the rf.Parameter); with
keep_existing_param=True (the default) the parameter stays registered (state dict, optimizer unchanged)."""
from ..nn.parametrize import is_parametrized, register_parametrization, remove_parametrization  # noqa: F401

__all__ = ["register_parametrization", "remove_parametrization", "is_parametrized"]
