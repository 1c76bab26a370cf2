"""rf.control_flow_ctx: RETURNN's graph-mode loop and cond contexts. dimtorch runs loops and conds
eagerly, so there is never a current context."""
from __future__ import annotations

import contextlib

__all__ = ["control_flow_ctx", "get_current_control_flow_ctx"]


def control_flow_ctx(ctx=None):
    """A block within a control flow context: nothing to record here (eager)."""
    return contextlib.nullcontext(ctx)


def get_current_control_flow_ctx():
    """None: no graph-mode loop or cond is being built."""
    return None
