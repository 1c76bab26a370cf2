"""The run context slot: the object that Tensor.mark_as_loss / mark_as_output / mark_as_default_output
report to (dimtorch.rf's RunCtx, installed by rf.init_train_step_run_ctx / init_forward_step_run_ctx).
Kept on the ground floor so that Tensor methods reach it without importing dimtorch.rf."""
from __future__ import annotations

_ctx = None


def install(ctx) -> None:
    """Makes `ctx` the current run context (None: none)."""
    global _ctx
    _ctx = ctx


def current(caller: str):
    """The current run context; RuntimeError naming `caller` when there is none."""
    if _ctx is None:
        raise RuntimeError(f"{caller}: no run context: call dimtorch.rf.init_train_step_run_ctx() or "
                           f"init_forward_step_run_ctx() first")
    return _ctx
