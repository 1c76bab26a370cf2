"""rf.amp: a mixed-precision policy that rf code can read and cast by. dimtorch's layers do not consult
it (they are torch modules: torch.autocast applies to them); amp_cast_compute and amp_cast_float32
cast the float tensors given, as RETURNN frontend's do."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Optional, Union

import dimtorch as _dt

from .dtype import is_float_dtype

__all__ = ["AmpPolicy", "get_amp_policy", "set_amp_policy", "set_amp_policy_ctx", "amp_cast_compute",
           "amp_cast_float32"]


@dataclass(frozen=True)
class AmpPolicy:
    """The compute dtype of mixed precision (e.g. "bfloat16")."""

    compute_dtype: str

    def __post_init__(self):
        if not is_float_dtype(self.compute_dtype):
            raise ValueError(f"dimtorch.rf.AmpPolicy(): compute_dtype {self.compute_dtype!r} is not a float dtype")


_policy: Optional[AmpPolicy] = None


def get_amp_policy() -> Optional[AmpPolicy]:
    """The policy set, or None (full precision)."""
    return _policy


def set_amp_policy(policy: Optional[Union[AmpPolicy, str]]):
    """Sets the policy (a compute dtype name makes one; None: none)."""
    global _policy
    if isinstance(policy, str):
        policy = AmpPolicy(policy)
    if policy is not None and not isinstance(policy, AmpPolicy):
        raise TypeError(f"dimtorch.rf.set_amp_policy(): expected an AmpPolicy, a dtype name or None, got {policy!r}")
    _policy = policy


@contextlib.contextmanager
def set_amp_policy_ctx(policy: Optional[Union[AmpPolicy, str]]):
    """The policy for the block, then the one before."""
    global _policy
    old = _policy
    try:
        set_amp_policy(policy)
        yield
    finally:
        _policy = old


def _cast_floats(tensors: tuple, dtype: Optional[str]):
    if dtype is not None:
        tensors = tuple(t if t is None or t.dtype == dtype or not is_float_dtype(t.dtype) else _dt.cast(t, dtype)
                        for t in tensors)
    return tensors[0] if len(tensors) == 1 else tensors


def amp_cast_compute(*tensors):
    """The float tensors cast to the policy's compute dtype (as they are without a policy); one tensor
    given, one returned, else a tuple."""
    return _cast_floats(tensors, None if _policy is None else _policy.compute_dtype)


def amp_cast_float32(*tensors):
    """The float tensors cast to float32 under a policy (as they are without one)."""
    return _cast_floats(tensors, None if _policy is None else "float32")
