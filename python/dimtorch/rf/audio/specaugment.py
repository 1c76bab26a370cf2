"""rf.audio.specaugment: SpecAugment as RETURNN frontend applies it, in training only (the run context's
train flag) and by the run context's global train step, by dimtorch.audio's op."""
from __future__ import annotations

from typing import Optional, Tuple, Union

from ... import audio as _audio
from ... import Dim, Tensor
from .._run_ctx_flags import is_train_flag_enabled, step_reached

__all__ = ["specaugment", "random_mask", "mask"]

random_mask = _audio.random_mask
mask = _audio.mask


def specaugment(x: Tensor, *, spatial_dim: Dim, feature_dim: Optional[Dim] = None,
                global_train_step_dependent: bool = True, only_on_train: bool = True,
                max_consecutive_spatial_dims: Union[int, Tensor] = 20, max_consecutive_feature_dims: Optional[int] = None,
                num_spatial_mask_factor: int = 100, num_masks_per_seq: Optional[bool] = None,
                steps: Tuple[int, int, int] = (0, 1000, 2000)) -> Tensor:
    """dimtorch.audio.specaugment with training = the run context's train flag and step = its step
    (see there for the masks)."""
    training = bool(is_train_flag_enabled(specaugment))
    if only_on_train and not training:
        return x
    # the step as its phase in `steps` (the largest threshold reached): what the schedule reads, so a compiled
    # step guards on the phase, not on the step (no recompile per training step)
    step = _phase_step(tuple(steps)) if global_train_step_dependent else None
    return _audio.specaugment(
        x, spatial_dim=spatial_dim, feature_dim=feature_dim, global_train_step_dependent=global_train_step_dependent,
        only_on_train=only_on_train, max_consecutive_spatial_dims=max_consecutive_spatial_dims,
        max_consecutive_feature_dims=max_consecutive_feature_dims, num_spatial_mask_factor=num_spatial_mask_factor,
        num_masks_per_seq=num_masks_per_seq, steps=steps, step=None if step is None else int(step), training=training)


def _phase_step(steps: Tuple[int, ...]) -> int:
    """A step in the same phase of `steps` as the run context's step: the largest threshold it has reached
    (the thresholds reached are the smallest ones), else one below the smallest."""
    if len(steps) == 0 or not all(type(s) is int for s in steps):
        raise TypeError(f"dimtorch.rf.audio.specaugment(): steps must be ints, got {steps!r}")
    reached = [s for s, r in zip(steps, step_reached(steps)) if r]
    return max(reached) if reached else min(steps) - 1
