"""Training checkpoints of the demo: atomic save, safe validated load (plain data only) with clear messages.

A checkpoint holds plain data only: tensors (model and optimizer state, random states), numbers,
strings, lists, dicts. It is read with `torch.load(weights_only=True)`, which refuses anything else (a
pickled callable, a class): loading someone else's file runs no code of theirs. With FSDP the model and
optimizer state are shards in a folder next to it (torch.distributed.checkpoint), which the file names
under "sharded"."""
from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import Optional

import torch

FORMAT = "dimtorch-demo-checkpoint"
VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the file is left as it is."""


def save_checkpoint(path, state: dict) -> None:
    """Writes `state` (plus format and version) to a temporary file in the same folder, flushes it
    to disk, then renames it over `path`: a crash leaves either the old or the new file, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save({"format": FORMAT, "version": VERSION, **state}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_checkpoint(path, impl: Optional[str]) -> dict:
    """The state saved by save_checkpoint, checked for format, version and implementation (None: any); raises
    CheckpointError (with the path and what is wrong) otherwise. Never modifies the file."""
    path = Path(path)
    where = f"checkpoint {str(path)!r}"
    if not path.is_file():
        raise CheckpointError(f"{where} does not exist; drop --resume to start a new run")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:  # weights_only refused something that is not plain data
        lines = [ln for ln in str(e).splitlines() if "GLOBAL" in ln or "nsupported" in ln] or [type(e).__name__]
        raise CheckpointError(f"{where} holds more than plain data (tensors, numbers, strings, lists, dicts), "
                              f"which this loader refuses without running it ({lines[0].strip()}). It "
                              f"is not a demo checkpoint, or not from a source you should trust; it was left "
                              f"untouched") from None
    except Exception as e:  # torch raises many kinds for a torn or foreign file
        raise CheckpointError(f"{where} cannot be read ({type(e).__name__}: {e}); it is corrupt or not a "
                              f"checkpoint. It was left untouched; move it away or use another --out") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{where} is not a demo training checkpoint (no format {FORMAT!r}); it was left "
                              f"untouched")
    if state.get("version") != VERSION:
        raise CheckpointError(f"{where} has version {state.get('version')!r}, this code reads version {VERSION}")
    if impl is not None and state.get("impl") != impl:
        raise CheckpointError(f"{where} was written by --impl {state.get('impl')}, not --impl {impl}; "
                              f"resume with --impl {state.get('impl')}")
    weights = ("sharded",) if "sharded" in state else ("model", "optimizer")
    missing = [k for k in ("step", "epoch", "batch_in_epoch", *weights, "model_config", "task_config",
                           "history", "rng_cpu", "args") if k not in state]
    if missing:
        raise CheckpointError(f"{where} lacks {', '.join(missing)}; it was left untouched")
    return state


def load_model_state(model: torch.nn.Module, state_dict: dict, path) -> None:
    """load_state_dict that reports every missing, unexpected and mis-shaped entry at once and
    changes nothing when there is any."""
    own = model.state_dict()
    problems = []
    missing = sorted(set(own) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(own))
    if missing:
        problems.append(f"missing: {', '.join(missing)}")
    if unexpected:
        problems.append(f"unexpected: {', '.join(unexpected)}")
    for k in sorted(set(own) & set(state_dict)):
        if tuple(own[k].shape) != tuple(state_dict[k].shape):
            problems.append(f"{k}: shape {tuple(state_dict[k].shape)} in the checkpoint, {tuple(own[k].shape)} in the model")
    if problems:
        raise CheckpointError(f"checkpoint {str(path)!r} does not match the model ({'; '.join(problems)}); "
                              f"it was left untouched")
    model.load_state_dict(state_dict)
