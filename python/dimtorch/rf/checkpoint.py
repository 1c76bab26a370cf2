"""RETURNN checkpoints of rf models: load_returnn_checkpoint / save_returnn_checkpoint.

RETURNN's PyTorch engine saves `{"model": state_dict, "epoch", "step", "effective_learning_rate",
"returnn_version"}` (a `.pt` file), the state dict of its torch wrapper of the rf model: parameters under their
attribute paths, auxiliary ones (batch norm statistics) as buffers. dimtorch.rf's modules have RETURNN's names
and layouts (Linear weight (in, out), conv `filter`, BatchNorm gamma/beta/running_mean/running_variance, LSTM
ff_weight/rec_weight/bias, ...), so the state dict loads as it is: these functions check every key and shape
first (a mismatch raises listing all of them, nothing loaded), honour rf's non_critical_for_restore (such
parameters may be missing), and write RETURNN's format back. RETURNN frontend's own rf.checkpoint functions
(save_params, load_params, load_torch_checkpoint, check_params_complete: .npz files by parameter name) too."""
from __future__ import annotations

import os
from typing import Optional

import torch

from ..nn.checkpoint import CheckpointError
from ..nn.module import StateDictError, check_state_dict

__all__ = ["load_returnn_checkpoint", "save_returnn_checkpoint", "returnn_state_dict", "CheckpointError",
           "save_params", "load_params", "load_torch_checkpoint", "check_params_complete"]


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


# -- RETURNN frontend's rf.checkpoint: backend-neutral .npz files of parameters by name ------------------------
def save_params(values, filename, *, step: Optional[int] = None, epoch: Optional[int] = None) -> None:
    """Writes {name: numpy array} (and step/epoch as "_step", "_epoch") to an .npz file."""
    import numpy
    meta = {}
    if step is not None:
        meta["_step"] = numpy.array(step)
    if epoch is not None:
        meta["_epoch"] = numpy.array(epoch)
    numpy.savez(filename, **values, **meta)


def load_params(filename) -> dict:
    """{name: numpy array} of an .npz file of save_params (without the "_" meta entries)."""
    import numpy
    with numpy.load(filename) as data:
        return {name: data[name] for name in data.files if not name.startswith("_")}


def load_torch_checkpoint(filename) -> dict:
    """{name: numpy array} of a RETURNN PyTorch checkpoint (its "model" state dict)."""
    state = returnn_state_dict(torch.load(os.fspath(filename), map_location="cpu", weights_only=True))
    return {name: value.detach().cpu().numpy() for name, value in state.items()}


def check_params_complete(model: torch.nn.Module, params: dict, *, allow_missing: bool = False) -> list:
    """The model's parameter names (parameters and auxiliary ones) found in params; ValueError on a name missing
    (unless allow_missing) or unknown, or a shape that differs."""
    names = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]
    shapes = {n: tuple(t.shape) for n, t in list(model.named_parameters()) + list(model.named_buffers())}
    missing = [n for n in names if n not in params]
    if missing and not allow_missing:
        raise ValueError(f"dimtorch.rf.check_params_complete(): the checkpoint lacks {missing}")
    unexpected = [n for n in params if n not in shapes]
    if unexpected:
        raise ValueError(f"dimtorch.rf.check_params_complete(): the checkpoint has parameters the model has not: "
                         f"{unexpected}")
    for n in names:
        if n in params and tuple(params[n].shape) != shapes[n]:
            raise ValueError(f"dimtorch.rf.check_params_complete(): {n} has shape {tuple(params[n].shape)} in the "
                             f"checkpoint, {shapes[n]} in the model")
    return [n for n in names if n in params]
