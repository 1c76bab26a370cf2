"""Interleaved timing: warm-up, then rounds in which each implementation runs one batch of calls in turn.

Per round each implementation gets a time per call (batch time / calls, minus the harness's own cost of
calling an empty function); ratios are taken per round and their median reported, so slow drifts of the
machine hit both sides of a ratio alike. The garbage collector is off inside a batch and run between rounds.
"""
from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass
from itertools import repeat


@dataclass(frozen=True)
class TimingPlan:
    """How to time one case: seconds of warm-up per implementation, seconds per batch of calls, rounds
    wanted, and a time budget for the rounds that cuts slow rows down to `min_rounds`."""
    warmup_s: float
    batch_s: float
    rounds: int
    min_rounds: int
    budget_s: float


QUICK = TimingPlan(warmup_s=0.01, batch_s=0.0002, rounds=25, min_rounds=3, budget_s=0.12)
DEFAULT = TimingPlan(warmup_s=0.05, batch_s=0.0002, rounds=201, min_rounds=9, budget_s=2.0)


def seconds_per_call(fn, calls: int) -> float:
    """Wall time of `calls` calls of fn, per call, with the garbage collector off."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in repeat(None, calls):
            fn()
        return (time.perf_counter() - start) / calls
    finally:
        if gc_was_enabled:
            gc.enable()


def harness_overhead_s() -> float:
    """The cost of calling an empty function in the timing loop; subtracted from every measurement."""
    def empty():
        return None
    seconds_per_call(empty, 10000)
    return min(seconds_per_call(empty, 20000) for _ in range(7))


def _warm_up(fn, seconds: float) -> None:
    deadline = time.perf_counter() + seconds
    calls = 0
    while calls < 3 or time.perf_counter() < deadline:
        fn()
        calls += 1


def _calls_per_batch(fn, batch_s: float) -> int:
    calls = 1
    while True:
        elapsed = seconds_per_call(fn, calls) * calls
        if elapsed >= batch_s / 4 or calls >= 1 << 20:
            return max(1, round(calls * batch_s / max(elapsed, 1e-9)))
        calls *= 4


def measure(impls: dict, plan: TimingPlan, overhead_s: float) -> dict:
    """Per implementation, the list of per-round seconds per call (harness overhead subtracted)."""
    names = list(impls)
    for name in names:
        _warm_up(impls[name], plan.warmup_s)
    calls = {name: _calls_per_batch(impls[name], plan.batch_s) for name in names}
    samples = {name: [] for name in names}
    for round_index in range(_rounds(impls, calls, plan)):
        gc.collect()
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            per_call = seconds_per_call(impls[name], calls[name]) - overhead_s
            samples[name].append(max(per_call, 1e-10))
    return samples


def _rounds(impls: dict, calls: dict, plan: TimingPlan) -> int:
    """plan.rounds, fewer when one round (a batch of every implementation) would overrun the budget."""
    round_s = sum(seconds_per_call(impls[name], calls[name]) * calls[name] for name in impls)
    affordable = int(plan.budget_s / max(round_s, 1e-9))
    return max(plan.min_rounds, min(plan.rounds, affordable))


def round_ratios(numerator: list, denominator: list) -> list:
    """Per round, numerator / denominator (both measured in that round)."""
    return [n / d for n, d in zip(numerator, denominator)]


def quartiles(values: list) -> tuple:
    """(25th percentile, median, 75th percentile); a spread wider than a few percent means a noisy machine."""
    if len(values) < 2:
        return (values[0],) * 3
    q1, q2, q3 = statistics.quantiles(values, n=4)
    return (q1, statistics.median(values), q3)
