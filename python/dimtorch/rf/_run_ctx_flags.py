"""What dropout and specaugment read from the run context: its train flag and its step.

The run context itself is dimtorch.rf.run_ctx's; these two come from the ground floor's
dimtorch._core.run_ctx (RETURNN frontend's RunCtx.is_train_flag_enabled: the train flag, or the one
set for `func`; and the global train step), which gives False and 0 before a context is installed, as
RETURNN frontend does before one is set."""
from __future__ import annotations

from .._core.run_ctx import get_step, is_train_flag_enabled, step_reached  # noqa: F401
