"""RETURNN checkpoints of rf models: load_returnn_checkpoint / save_returnn_checkpoint.

RETURNN's PyTorch engine saves `{"model": state_dict, "epoch", "step", "effective_learning_rate",
"returnn_version"}` (a `.pt` file), the state dict of its torch wrapper of the rf model: parameters under their
attribute paths, auxiliary ones (batch norm statistics) as buffers. dimtorch.rf's modules have RETURNN's names
and layouts (Linear weight (in, out), conv `filter`, BatchNorm gamma/beta/running_mean/running_variance, LSTM
ff_weight/rec_weight/bias, ...), so the state dict loads as it is: these functions check every key and shape
first (a mismatch raises listing all of them, nothing loaded), honour rf's non_critical_for_restore (such
parameters may be missing), and write RETURNN's format back."""
from __future__ import annotations

import os
from typing import Optional

import torch

from ..nn.checkpoint import CheckpointError
from ..nn.module import StateDictError, check_state_dict

__all__ = ["load_returnn_checkpoint", "save_returnn_checkpoint", "returnn_state_dict", "CheckpointError"]


def returnn_state_dict(checkpoint) -> dict:
    """The model's state dict of a RETURNN checkpoint (a loaded dict: its "model" entry, or the dict itself)."""
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("model"), dict):
        return checkpoint["model"]
    if isinstance(checkpoint, dict):
        return checkpoint
    raise CheckpointError(f"dimtorch.rf.returnn_state_dict(): expected a dict, got {type(checkpoint).__name__}")


def _non_critical(model: torch.nn.Module) -> set:
    return {name for name, p in list(model.named_parameters()) + list(model.named_buffers())
            if p.__dict__.get("_rf_non_critical_for_restore")}


def load_returnn_checkpoint(path_or_checkpoint, model: torch.nn.Module, *, strict: bool = True,
                            map_location="cpu") -> dict:
    """Loads a RETURNN checkpoint (a path, or a loaded dict) into `model` (a dimtorch.rf model of the same
    structure); returns the checkpoint's other entries (epoch, step, ...). Everything is checked before
    anything is loaded (CheckpointError listing every mismatch); with strict=False, missing and unexpected
    keys are allowed (shapes are still checked)."""
    caller = "dimtorch.rf.load_returnn_checkpoint()"
    if isinstance(path_or_checkpoint, (str, os.PathLike)):
        try:
            ckpt = torch.load(os.fspath(path_or_checkpoint), map_location=map_location, weights_only=True)
        except Exception as e:
            raise CheckpointError(f"{caller}: cannot read {os.fspath(path_or_checkpoint)!r}: {type(e).__name__}: "
                                  f"{str(e).splitlines()[0] if str(e) else ''}") from e
    else:
        ckpt = path_or_checkpoint
    state = returnn_state_dict(ckpt)
    optional = _non_critical(model)
    if strict and optional:
        state = dict(state)
        own = model.state_dict()
        for key in optional:
            if key not in state:
                state[key] = own[key]
    try:
        check_state_dict(model, state, strict=strict, caller=caller)
    except StateDictError as e:
        raise CheckpointError(str(e)) from None
    torch.nn.Module.load_state_dict(model, state, strict=strict)
    return {k: v for k, v in ckpt.items() if k != "model"} if isinstance(ckpt, dict) and "model" in ckpt else {}


def save_returnn_checkpoint(path, model: torch.nn.Module, *, epoch: int = 1, step: int = 0,
                            effective_learning_rate: Optional[float] = None) -> None:
    """Writes `model`'s state dict in RETURNN's checkpoint format (RETURNN's PyTorch engine loads it), into a
    temporary file first, then renamed over `path`."""
    path = os.fspath(path)
    tmp = path + ".tmp_write"
    torch.save({"model": model.state_dict(), "epoch": epoch, "step": step,
                "effective_learning_rate": effective_learning_rate, "returnn_version": None}, tmp)
    os.replace(tmp, path)
