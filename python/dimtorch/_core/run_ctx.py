"""Where Tensor.mark_as_loss / mark_as_output / mark_as_default_output hand their tensor: the run context
installed for the step (dimtorch.rf's, made by rf.init_train_step_run_ctx() or
rf.init_forward_step_run_ctx()). One per process, as RETURNN's: steps run one at a time.

The context object has the methods mark_as_loss(tensor, name, **options), mark_as_output(tensor, name,
*, shape=None), mark_as_default_output(tensor, *, shape=None) and is_train_flag_enabled(func=), and the
attribute step; is_train_flag_enabled() and get_step() here read them (False and 0 without a context).

dimtorch.rf.dropout reads its train flag in C++: install() publishes the context's flag for it to the core
(_C._set_train_flag), and a context whose flags change afterwards (RunCtx.train_flag_ctx) calls
train_flags_changed(). A context that does not say it does (the attribute publishes_train_flags) gets
None published: dropout then asks it on every call, as before."""
from __future__ import annotations

from .. import _C

_ctx = None
# Step thresholds that step code compares the global train step with (SpecAugment's schedule; RETURNN's
# default registered up front). install() records which of them the context's step has reached, and
# step_reached() answers from that record: a trace (torch.compile) then reads, and guards on, the phase of
# the schedule, not the step itself, so a compiled step is not recompiled at every training step, only
# when the step crosses a threshold.
_schedules = {(0, 1000, 2000)}
_reached: tuple = ()  # ((thresholds, reached per threshold), ...) for the installed context's step


# rf.dropout's key among a context's per-function train flags (train_flag_ctx(func=rf.dropout)): its name, as
# rf.dropout is a C function, which Dynamo cannot hash when a compiled step looks its flag up.
DROPOUT_KEY = "dimtorch.rf.dropout"


def flag_key(func):
    """The key of `func`'s own train flag in a context's flags (see DROPOUT_KEY)."""
    return DROPOUT_KEY if func is _C._rf_dropout else func


def current(caller: str):
    """The installed run context; a RuntimeError naming `caller` when there is none."""
    if _ctx is None:
        raise RuntimeError(f"{caller}: no run context: call dimtorch.rf.init_train_step_run_ctx() or "
                           f"init_forward_step_run_ctx() first")
    return _ctx


def install(ctx) -> None:
    """Installs `ctx` as the run context (None clears it)."""
    global _ctx, _reached
    _ctx = ctx
    step = get_step()
    _reached = tuple((thresholds, _reached_of(step, thresholds)) for thresholds in sorted(_schedules))
    _publish_train_flag()


def train_flags_changed(ctx) -> None:
    """Called by a context whose train flags changed: the core's copy follows when it is the installed one."""
    if ctx is _ctx:
        _publish_train_flag()


def _publish_train_flag() -> None:
    flag = False
    if _ctx is not None:
        flag = None
        if getattr(_ctx, "publishes_train_flags", False):
            flag = _ctx.is_train_flag_enabled(func=DROPOUT_KEY)
            flag = flag if type(flag) is bool else None  # a Tensor flag: dropout asks each time
    _C._set_train_flag(flag)


def is_train_flag_enabled(func=None) -> bool:
    """The installed context's train flag (for `func`, e.g. dimtorch.rf.dropout, when one was set for it);
    False without a context (RETURNN frontend's init stage). What dropout and SpecAugment read."""
    if _ctx is None:
        return False
    flag = _ctx.is_train_flag_enabled(func=func)
    return flag if type(flag) is bool else bool(getattr(flag, "raw", flag))


def get_step() -> int:
    """The installed context's global train step; 0 without a context."""
    if _ctx is None:
        return 0
    step = _ctx.step
    return step if type(step) is int else int(getattr(step, "raw", step))


def _reached_of(step: int, thresholds: tuple) -> tuple:
    return tuple(step >= t for t in thresholds)


def step_reached(thresholds: tuple) -> tuple:
    """Per threshold (ints), whether the installed context's global train step has reached it (step 0
    without a context). Recorded at install() for the schedules seen so far; a schedule first seen is
    registered (outside a trace) and answered from the step."""
    thresholds = tuple(thresholds)
    for known, reached in _reached:
        if known == thresholds:
            return reached
    if not _compiling():
        _schedules.add(thresholds)
    return _reached_of(get_step(), thresholds)


def _compiling() -> bool:
    import torch
    return torch.compiler.is_compiling()
