"""A benchmark row: one op written three ways (hand-written PyTorch, dimtorch, RETURNN frontend), and the
helpers every rows_*.py file shares (rows.py gathers them into the table)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import dimtorch as dt

Builder = Callable[[object], Callable[[], object]]


@dataclass(frozen=True)
class Row:
    """One op benchmarked three ways; `out` names the output dims in the order of the PyTorch result.
    reference="dimtorch": the `torch` builder gets the dimtorch side and its call is the reference (rows of
    dimtorch.rf against the dimtorch call each binds to: rows_rf_namespace.py)."""
    name: str
    what: str
    torch: Optional[Builder]
    dimtorch: Builder
    returnn: Builder
    requires: tuple = ()
    out: Optional[tuple] = None
    check: str = "close"
    valid_frames: Optional[str] = None
    meta: bool = True
    tolerance: float = 1e-4
    reference: str = "torch"


def missing_requirements(row: Row) -> list:
    """The names in row.requires that dimtorch does not have (yet); `Dim.__floordiv__` style names allowed."""
    missing = []
    for name in row.requires:
        obj = dt
        for part in name.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if obj is None:
            missing.append("dt." + name)
    return missing


def _same(builder: Builder) -> dict:
    """The same builder for all three sides (operators read alike on raw and named tensors)."""
    return {"torch": builder, "dimtorch": builder, "returnn": builder}


def _rf(side):
    return side.api.rf


BTF = ("batch", "time", "feature")
