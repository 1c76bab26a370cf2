"""What dropout and specaugment read from the run context: its train flag and its step.

The run context itself is dimtorch.rf.run_ctx's; these two come from the ground floor's
dimtorch._core.run_ctx, whose contract is `is_train_flag_enabled(func=None) -> bool` (RETURNN
frontend's RunCtx.is_train_flag_enabled: the train flag, or the one set for `func`) and
`get_step() -> int` (the global train step). Where that module is missing there is no run context,
and as in RETURNN frontend before one is set, the train flag is False and the step 0."""
from __future__ import annotations

from ._optional import import_optional

_ctx = import_optional("dimtorch._core", "run_ctx")

if _ctx is None:
    def is_train_flag_enabled(func=None) -> bool:
        """No run context: False (RETURNN frontend's init stage)."""
        return False

    def get_step() -> int:
        """No run context: step 0."""
        return 0
else:
    is_train_flag_enabled = _ctx.is_train_flag_enabled
    get_step = _ctx.get_step
