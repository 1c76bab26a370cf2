"""Checkpoints: save_checkpoint (temporary file + os.replace, never torn) and load_checkpoint (validates everything first)."""
from __future__ import annotations

import os
import pickle
import re
import tempfile

import torch

from .module import StateDictError, _expected_entries, check_state_dict

__all__ = ["save_checkpoint", "load_checkpoint", "CheckpointError"]

_FORMAT = "dimtorch-checkpoint"
_VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint file cannot be read, or does not fit the module/optimizer (nothing was loaded)."""


def save_checkpoint(path, module: torch.nn.Module, optimizer: torch.optim.Optimizer = None, extra=None) -> None:
    """Writes module.state_dict() (with the dim names of each named parameter), the optimizer's state
    and `extra` (plain data: tensors, numbers, strings, lists, dicts) to `path`: into a temporary
    file in the same folder, flushed to disk, then os.replace()d over `path`, so a crash leaves the
    old file or the new one, never a torn one."""
    path = os.fspath(path)
    entries = {}
    _expected_entries(module, "", entries)
    state = {
        "format": _FORMAT,
        "version": _VERSION,
        "model": module.state_dict(),
        "dims": {k: [d.name for d in dims] for k, (_, dims) in entries.items() if dims is not None},
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "extra": extra,
    }
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def _check_optimizer(optimizer, saved, path, caller) -> None:
    if saved is None:
        raise CheckpointError(f"{caller}: {path!r} holds no optimizer state, but an optimizer was given")
    groups, saved_groups = optimizer.param_groups, saved.get("param_groups", [])
    problems = []
    if len(groups) != len(saved_groups):
        problems.append(f"{len(saved_groups)} parameter groups in the file, {len(groups)} in the optimizer")
    else:
        for i, (g, s) in enumerate(zip(groups, saved_groups)):
            if len(g["params"]) != len(s["params"]):
                problems.append(f"group {i}: {len(s['params'])} parameters in the file, "
                                f"{len(g['params'])} in the optimizer")
    if problems:
        raise CheckpointError(f"{caller}: the optimizer state in {path!r} does not fit (nothing was loaded): "
                              + "; ".join(problems))


def load_checkpoint(path, module: torch.nn.Module, optimizer: torch.optim.Optimizer = None, *,
                    strict: bool = True, map_location="cpu"):
    """Loads a file of save_checkpoint into `module` (and `optimizer`) and returns its `extra`.

    Everything is checked before anything is loaded: keys (missing/unexpected, when strict), shapes
    and the dim names of named parameters (a transposed weight of the same shape is caught), and the
    optimizer's parameter groups; a mismatch raises CheckpointError listing all of them. A file that
    cannot be read (corrupt, truncated, not a checkpoint) raises CheckpointError naming the path.
    The file is loaded with weights_only=True: it is data, and a pickled callable or class in it
    (code from whoever made the file) raises CheckpointError and is never run.
    """
    caller = "dimtorch.nn.load_checkpoint()"
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{caller}: no checkpoint file at {path!r}")
    try:
        # weights_only: the file is data; a pickled callable or class in it is refused, never run.
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        if "Weights only load failed" not in str(e):
            raise CheckpointError(f"{caller}: cannot read {path!r}: the file is corrupt, truncated or not a torch "
                                  f"file (UnpicklingError: {str(e).splitlines()[0] if str(e) else ''})") from e
        refused = re.search(r"WeightsUnpickler error: (.*)", str(e))
        raise CheckpointError(
            f"{caller}: refused to load {path!r}: it holds code or objects other than data "
            f"({refused.group(1).split('. ')[0] if refused else 'not allowed by weights_only loading'}); nothing "
            f"in it was run. A checkpoint holds tensors, numbers, strings, lists, dicts, Dims and Tensors "
            f"only") from None
    except Exception as e:
        raise CheckpointError(f"{caller}: cannot read {path!r}: the file is corrupt, truncated or not a torch file "
                              f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from e
    if not isinstance(state, dict) or state.get("format") != _FORMAT or not isinstance(state.get("model"), dict):
        raise CheckpointError(f"{caller}: {path!r} is a torch file but not a dimtorch checkpoint "
                              f"(made by save_checkpoint)")
    try:
        check_state_dict(module, state["model"], strict=strict, state_dims=state.get("dims") or {},
                         caller=f"{caller} {path!r}")
    except StateDictError as e:
        raise CheckpointError(str(e)) from None
    if optimizer is not None:
        _check_optimizer(optimizer, state.get("optimizer"), path, caller)
    torch.nn.Module.load_state_dict(module, state["model"], strict=strict)
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    return state.get("extra")
