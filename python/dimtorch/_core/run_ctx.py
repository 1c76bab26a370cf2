"""Where Tensor.mark_as_loss / mark_as_output / mark_as_default_output hand their tensor: the run context
installed for the step (dimtorch.rf's, made by rf.init_train_step_run_ctx() or
rf.init_forward_step_run_ctx()). One per process, as RETURNN's: steps run one at a time.

The context object has the methods mark_as_loss(tensor, name, **options), mark_as_output(tensor, name,
*, shape=None) and mark_as_default_output(tensor, *, shape=None)."""
from __future__ import annotations

_ctx = None


def current(caller: str):
    """The installed run context; a RuntimeError naming `caller` when there is none."""
    if _ctx is None:
        raise RuntimeError(f"{caller}: no run context: call dimtorch.rf.init_train_step_run_ctx() or "
                           f"init_forward_step_run_ctx() first")
    return _ctx


def install(ctx) -> None:
    """Installs `ctx` as the run context (None clears it)."""
    global _ctx
    _ctx = ctx
