"""One case = one row on one shape set: build the three implementations, check agreement, time them."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Optional

from . import agreement, timing
from .data import make_named_side, make_raw, make_torch_side
from .frameworks import DimtorchApi
from .row import Row, missing_requirements

IMPLEMENTATIONS = ("torch", "dimtorch", "returnn")


@dataclass
class ImplResult:
    """What happened to one implementation in one case; status: ok, differs, error, skipped or n/a."""
    status: str
    detail: str = ""
    us: Optional[float] = None
    us_quartiles: Optional[tuple] = None


@dataclass
class CaseResult:
    shape_set: str
    row: str
    what: str
    impls: dict = field(default_factory=dict)
    ratio: Optional[float] = None
    returnn_ratio: Optional[float] = None
    ratio_quartiles: Optional[tuple] = None
    returnn_ratio_quartiles: Optional[tuple] = None
    rounds: int = 0
    reference: str = "torch"  # "dimtorch": the torch column timed the dimtorch call (rows_rf_namespace.py)


def make_sides(shapes, returnn_setup) -> SimpleNamespace:
    """The three sides for one shape set; the RETURNN side is None (with a reason) when it cannot be made."""
    raw = make_raw(shapes)
    sides = SimpleNamespace(torch=make_torch_side(raw, shapes), dimtorch=make_named_side(raw, shapes, DimtorchApi),
                            returnn=None, returnn_problem=returnn_setup.problem)
    if returnn_setup.available:
        try:
            sides.returnn = make_named_side(raw, shapes, returnn_setup.api)
        except Exception as exc:
            sides.returnn_problem = f"{type(exc).__name__}: {exc}"
    return sides


def run_case(row: Row, shapes, sides, plan: timing.TimingPlan, overhead_s: float) -> Optional[CaseResult]:
    """Result of one row on one shape set; None when PyTorch itself cannot run the row there (meta)."""
    result = CaseResult(shapes.name, row.name, row.what, reference=row.reference)
    callables, outputs = {}, {}
    for impl in IMPLEMENTATIONS:
        status, fn, output = _build_and_call(row, impl, sides)
        result.impls[impl] = status
        if status.status == "ok":
            callables[impl], outputs[impl] = fn, output
    if shapes.on_meta and result.impls["torch"].status == "error":
        return None
    _check_agreement(row, result, outputs, sides.torch)
    timed = {impl: fn for impl, fn in callables.items()}
    samples = timing.measure(timed, plan, overhead_s) if timed else {}
    for impl, per_call in samples.items():
        result.impls[impl].us_quartiles = tuple(t * 1e6 for t in timing.quartiles(per_call))
        result.impls[impl].us = result.impls[impl].us_quartiles[1]
        result.rounds = len(per_call)
    if "torch" in samples:
        if "dimtorch" in samples:
            result.ratio_quartiles = timing.quartiles(timing.round_ratios(samples["dimtorch"], samples["torch"]))
            result.ratio = result.ratio_quartiles[1]
        if "returnn" in samples:
            result.returnn_ratio_quartiles = timing.quartiles(timing.round_ratios(samples["returnn"], samples["torch"]))
            result.returnn_ratio = result.returnn_ratio_quartiles[1]
    return result


def _build_and_call(row: Row, impl: str, sides):
    """(status, callable, first output) of one implementation; the callable is None unless it ran."""
    builder = getattr(row, impl)
    side = sides.dimtorch if impl == "torch" and row.reference == "dimtorch" else getattr(sides, impl)
    if builder is None:
        return ImplResult("n/a", "no counterpart"), None, None
    if side is None:
        return ImplResult("n/a", sides.returnn_problem), None, None
    if impl == "dimtorch":
        missing = missing_requirements(row)
        if missing:
            return ImplResult("skipped", "not implemented yet: " + ", ".join(missing)), None, None
    try:
        fn = builder(side)
        output = fn()
    except Exception as exc:
        return ImplResult("error", f"{type(exc).__name__}: {exc}"), None, None
    return ImplResult("ok"), fn, output


def _check_agreement(row: Row, result: CaseResult, outputs: dict, torch_side) -> None:
    """Marks implementations whose output differs from the reference (PyTorch's, else dimtorch's)."""
    if row.check == "none" or not outputs:
        return
    converted = {}
    for impl, output in outputs.items():
        try:
            converted[impl] = agreement.as_raw(output, row.out)
        except Exception as exc:
            result.impls[impl] = ImplResult("differs", f"output not comparable: {exc}")
    reference_impl = next((impl for impl in IMPLEMENTATIONS if impl in converted), None)
    for impl, candidate in converted.items():
        reference = candidate if row.check == "dropout" else converted[reference_impl]
        problem = agreement.disagreement(row, reference, candidate, torch_side)
        if problem:
            result.impls[impl] = ImplResult("differs", problem)
