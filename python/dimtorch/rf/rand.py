"""rf.rand: random tensors (dimtorch's ops themselves) and the seed, which is torch's generator's."""
from __future__ import annotations

from typing import Dict, Optional, Sequence

import numpy
import torch

import dimtorch as _dt
from dimtorch import Dim, Tensor

__all__ = [
    "set_random_seed", "get_random_state", "set_random_state", "reset_step_random_state",
    "get_static_step_based_seed", "random", "random_uniform", "random_normal", "random_truncated_normal",
    "random_choice_without_replacement", "random_choice_with_replacement",
]

random_uniform = _dt.random_uniform
random_normal = _dt.random_normal
random_truncated_normal = _dt.random_truncated_normal
random_choice_without_replacement = _dt.random_choice_without_replacement
random_choice_with_replacement = _dt.random_choice_with_replacement


def set_random_seed(seed: int):
    """Seeds torch's generators (torch.manual_seed: CPU and every device)."""
    torch.manual_seed(seed)


def get_random_state() -> Dict[str, bytes]:
    """torch's CPU generator state (and CUDA's where there is one), as bytes."""
    state = {"torch": torch.get_rng_state().numpy().tobytes()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["torch_cuda"] = torch.cuda.get_rng_state().numpy().tobytes()
    return state


def set_random_state(state: Dict[str, bytes]):
    """Restores a state from get_random_state."""
    torch.set_rng_state(torch.from_numpy(numpy.frombuffer(state["torch"], dtype=numpy.uint8).copy()))
    if "torch_cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(torch.from_numpy(numpy.frombuffer(state["torch_cuda"], dtype=numpy.uint8).copy()))


def reset_step_random_state():
    """RETURNN's per-step random state of its static-tracing regime: dimtorch has none (torch's
    generator runs on)."""
    raise NotImplementedError("dimtorch.rf.reset_step_random_state(): RETURNN's per-step random state of static "
                              "tracing; dimtorch draws from torch's generator")


def get_static_step_based_seed(size=None):
    """RETURNN's per-step seed of its static-tracing regime: not in dimtorch."""
    raise NotImplementedError("dimtorch.rf.get_static_step_based_seed(): RETURNN's static-tracing seeds; dimtorch "
                              "draws from torch's generator")


def random(dims: Sequence[Dim], *, dtype: Optional[str] = None, device: Optional[str] = None,
           sparse_dim: Optional[Dim] = None, feature_dim: Optional[Dim] = None, distribution: str, mean=None,
           stddev=None, bound=None, minval=None, maxval=None, seed=None, algorithm: Optional[str] = None,
           explicit_state: Optional[Tensor] = None, auto_update_state: Optional[bool] = None,
           static: Optional[bool] = None, out: Optional[Tensor] = None, like=None) -> Tensor:
    """random_uniform ("uniform"; `bound` b means [-b, b)), random_normal ("normal") or
    random_truncated_normal ("truncated_normal"). RETURNN's explicit random states, static draws,
    `out` and `like` are not supported."""
    for name, v in (("algorithm", algorithm), ("explicit_state", explicit_state),
                    ("auto_update_state", auto_update_state), ("static", static), ("out", out), ("like", like)):
        if v is not None and v is not False:
            raise NotImplementedError(f"dimtorch.rf.random(): {name}= is not supported (dimtorch draws from torch's "
                                      f"generator)")
    common = dict(dtype=dtype, device=device, sparse_dim=sparse_dim, feature_dim=feature_dim, seed=seed)
    if distribution == "uniform":
        if bound is not None:
            minval, maxval = -bound, bound
        return _dt.random_uniform(dims, minval=minval, maxval=maxval, **common)
    kw = {k: v for k, v in (("mean", mean), ("stddev", stddev)) if v is not None}
    if distribution == "normal":
        return _dt.random_normal(dims, **kw, **common)
    if distribution == "truncated_normal":
        return _dt.random_truncated_normal(dims, minval=minval, maxval=maxval, **kw, **common)
    raise ValueError(f"dimtorch.rf.random(): unknown distribution {distribution!r} (uniform, normal, "
                     f"truncated_normal)")
