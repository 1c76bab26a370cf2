"""Benchmark gate: run before landing a change to a hot path; says what moved against the recorded figures.

    python bench/gate.py             # ~40 s: the train step and the gate's rows, compared with bench/gate_figures.json
    python bench/gate.py --record    # the same run, written to bench/gate_figures.json as the new figures
    python bench/gate.py --quick     # a few rounds: checks that it runs (tests/bench/test_gate.py), numbers rough

One process, one interleaved run: the small-config training step of the demo model (bench/train_bench.py's
models and batches) and a fixed set of representative ops_bench rows on tiny shapes, each dimtorch against its
hand-written PyTorch. In every round each item runs both sides, in an order that alternates by round: a row
runs three batches of calls per side, the sides alternating, and the least time per call of each side
counts (other processes' preemptions and cache flushes only add time); the train step runs its round's batch
twice per side, the second timed (as train_bench does), two times alternating, and the lesser counts. Times are the thread's CPU time (time.thread_time),
so that time this process waits for a core (a shared machine) does not count. A figure is the median over rounds of the per-round ratio dimtorch / torch.
Rounds run until the time budget (--seconds) is spent.

Noise: each figure comes with a 95 % interval of its median (distribution-free, from the order statistics of
the per-round ratios); the recorded figures carry theirs. An item has moved when the two intervals do not
overlap and the medians differ by more than --min-change (default 5 %: rows a change does not touch move by up
to ~4 % from one run to the next, a process's memory layout and the load). The last lines are a short summary
(shared/hooks/before-stop prints them). It reports and never fails: exit status 0 unless --strict, which
exits 1 when an item is slower beyond noise. See bench/README.md, "Gate".
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

STARTED = time.perf_counter()
ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import torch  # noqa: E402

FIGURES = Path(__file__).resolve().parent / "gate_figures.json"
TRAIN = "train_step_small"
# Representative rows (tiny shapes, where overhead shows): C++-only ops, C++ fast paths, Python-only ops of
# the tail, the layer that the train step is made of.
# (No plain conv row: torch's own tiny conv1d moves between ~50 and ~110 us from one phase of a run to the next;
# conv's fast path is in the Conformer layer and the train step.)
ROWS = ("add_broadcast", "softmax_masked", "linear", "layer_norm", "merge_dims", "slice_time", "pool_max", "one_hot", "cumsum_masked", "scatter_max", "window3", "gating", "search_sorted",
        "top_k_mask", "dot_attention", "where_nested", "conformer_layer_fwd")
BATCH_S = 0.0005  # seconds of calls per row, side and batch
REPEATS = 3  # batches per row, side and round (the least counts)
TRAIN_REPEATS = 2  # timed train steps per side and round (the least counts)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40.0, help="time budget of the whole run (default 40)")
    parser.add_argument("--quick", action="store_true", help="3 rounds, a few seconds: checks that it runs")
    parser.add_argument("--record", action="store_true", help=f"write this run's figures to {FIGURES.name}")
    parser.add_argument("--figures", type=Path, default=FIGURES, help="the recorded figures (JSON)")
    parser.add_argument("--min-change", type=float, default=0.05, help="smallest change reported (default 0.05)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when an item is slower beyond noise")
    parser.add_argument("--json", type=Path, default=None, help="also write this run's figures here")
    return parser.parse_args(argv)


# ------------------------------------------------------------------------------------------------ items

def cpu_seconds(fn, calls: int) -> float:
    """Thread CPU time of `calls` calls of fn, per call (garbage collector off)."""
    gc.disable()
    try:
        start = time.thread_time()
        for _ in range(calls):
            fn()
        return (time.thread_time() - start) / calls
    finally:
        gc.enable()


class RowItem:
    """One ops_bench row on tiny shapes: both sides as a batch of calls (~BATCH_S each)."""

    def __init__(self, row, sides):
        self.name = row.name
        self.fns = {"torch": row.torch(sides.torch), "dimtorch": row.dimtorch(sides.dimtorch)}
        for fn in self.fns.values():
            for _ in range(20):
                fn()
        self.calls = {}
        for side, fn in self.fns.items():
            per_call = min(cpu_seconds(fn, 10) for _ in range(3))
            self.calls[side] = max(1, round(BATCH_S / max(per_call, 1e-7)))
        # One count for both sides: the same number of calls keeps their caches alike.
        self.calls = dict.fromkeys(self.fns, max(self.calls.values()))

    def measure(self, order) -> dict:
        """Per side, the least time per call of REPEATS batches, the sides alternating: a preemption or a
        cache flush by another process only ever adds time, so the least is the cost of the call."""
        best = dict.fromkeys(order, float("inf"))
        for _ in range(REPEATS):
            for side in order:
                best[side] = min(best[side], cpu_seconds(self.fns[side], self.calls[side]))
        return best


class TrainItem:
    """The small-config train step (bench/train_bench.py): the round's batch twice, the second timed."""

    name = TRAIN

    def __init__(self):
        import train_bench as tb
        cfg = tb.CONFIGS["small"]
        self.batches = tb.make_batches(cfg, 8)
        models = tb.make_models(cfg.model)
        self.steps = {name: tb.make_train_step(m, torch.device("cpu")) for name, m in models.items()}
        for i in range(4):
            for step in self.steps.values():
                step(self.batches[i])
        self.round = 0

    def measure(self, order) -> dict:
        """Per side, the least of TRAIN_REPEATS timed steps, the sides alternating (each timed step after an
        untimed one on the same batch, which re-warms the caches after the other side)."""
        batch = self.batches[(self.round // 2) % len(self.batches)]
        best = dict.fromkeys(order, float("inf"))
        for _ in range(TRAIN_REPEATS):
            for side in order:
                step = self.steps[side]
                step(batch)
                start = time.thread_time()
                step(batch)
                best[side] = min(best[side], time.thread_time() - start)
        return best


def make_items(quick: bool) -> list:
    from opsbench.cases import make_sides
    from opsbench.frameworks import ReturnnSetup
    from opsbench.rows import ROWS as ALL_ROWS
    from opsbench.shapes import SHAPE_SETS
    sides = make_sides(SHAPE_SETS["tiny"], ReturnnSetup(None, None, "n/a", False, "left out"))
    by_name = {row.name: row for row in ALL_ROWS}
    items = [TrainItem()]
    for name in ROWS:
        if name in by_name:
            items.append(RowItem(by_name[name], sides))
    return items


# ----------------------------------------------------------------------------------------------- timing

def run(items: list, deadline: float, min_rounds: int, max_rounds: int) -> dict:
    """Per item, the per-round ratios dimtorch / torch. Round r runs every item, torch first in even
    rounds and dimtorch first in odd ones; the train step's rounds 2k and 2k+1 share a batch and their
    ratios are combined by geometric mean (train_bench's `summarize`), cancelling a cost of going first."""
    ratios = {item.name: [] for item in items}
    times = {item.name: {"torch": [], "dimtorch": []} for item in items}
    r = 0
    while r < max_rounds and (r < min_rounds or time.perf_counter() < deadline):
        gc.collect()
        order = ("torch", "dimtorch") if r % 2 == 0 else ("dimtorch", "torch")
        for item in items:
            if isinstance(item, TrainItem):
                item.round = r
            got = item.measure(order)
            times[item.name]["torch"].append(got["torch"])
            times[item.name]["dimtorch"].append(got["dimtorch"])
            ratios[item.name].append(got["dimtorch"] / got["torch"])
        r += 1
    pairs = ratios[TRAIN]
    ratios[TRAIN] = [math.sqrt(a * b) for a, b in zip(pairs[0::2], pairs[1::2])] or pairs
    return {name: figure(values, times[name]) for name, values in ratios.items()}


def median_interval(values: list) -> tuple:
    """A ~95 % interval of the median from the order statistics (distribution-free): the values at ranks
    n/2 -+ 0.98 sqrt(n); the whole range for fewer than 6 values."""
    v = sorted(values)
    n = len(v)
    if n < 6:
        return v[0], v[-1]
    half = 0.98 * math.sqrt(n)
    lo = max(0, int(math.floor(n / 2 - half)))
    hi = min(n - 1, int(math.ceil(n / 2 + half)))
    return v[lo], v[hi]


def figure(values: list, times: dict) -> dict:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    lo, hi = median_interval(values)
    r = lambda v: round(v, 4)  # noqa: E731
    return {"ratio": r(statistics.median(values)), "iqr": [r(q[0]), r(q[2])], "interval": [r(lo), r(hi)],
            "rounds": len(values), "us": {side: round(statistics.median(t) * 1e6, 2) for side, t in times.items()}}


# ----------------------------------------------------------------------------------------------- report

def verdict(now: dict, old: dict, min_change: float) -> str:
    """'slower', 'faster' or '' (within noise) of an item against its recorded figure."""
    if old is None:
        return "new"
    change = now["ratio"] / old["ratio"] - 1
    apart = now["interval"][0] > old["interval"][1] or now["interval"][1] < old["interval"][0]
    if not apart or abs(change) < min_change:
        return ""
    return "slower" if change > 0 else "faster"


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def describe_run() -> dict:
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "?", ""
    return {"commit": commit + ("+changes" if dirty else ""), "date": time.strftime("%Y-%m-%d %H:%M"),
            "load": round(os.getloadavg()[0], 1), "torch": torch.__version__, "threads": torch.get_num_threads()}


def report(figures: dict, info: dict, recorded: dict, min_change: float) -> tuple:
    """(the text, the names slower beyond noise)."""
    old_items = recorded.get("items", {}) if recorded else {}
    old_info = recorded.get("run", {}) if recorded else {}
    lines = ["| item | dimtorch / torch now (IQR) | recorded | change | µs torch / dimtorch | moved |",
             "|---|---:|---:|---:|---:|---|"]
    slower, faster = [], []
    for name, now in figures.items():
        old = old_items.get(name)
        v = verdict(now, old, min_change)
        (slower if v == "slower" else faster if v == "faster" else []).append(name)
        was = f"{old['ratio']:.3f}" if old else "-"
        change = f"{now['ratio'] / old['ratio'] - 1:+.1%}" if old else "-"
        unit = 1e-3 if name == TRAIN else 1
        us = f"{now['us']['torch'] * unit:.1f} / {now['us']['dimtorch'] * unit:.1f}" + (" ms" if unit != 1 else "")
        lines.append(f"| {name} | {now['ratio']:.3f} ({now['iqr'][0]:.2f}-{now['iqr'][1]:.2f}) | {was} | {change} | "
                     f"{us} | {v or ('-' if old else 'new')} |")
    rows_now = [f["ratio"] for n, f in figures.items() if n != TRAIN]
    rows_old = [old_items[n]["ratio"] for n in figures if n != TRAIN and n in old_items]
    train = figures[TRAIN]
    old_train = old_items.get(TRAIN)
    verdict_line = ("gate: slower beyond noise: " + ", ".join(slower) if slower else
                    "gate: nothing slower beyond noise") + (" (no recorded figures)" if not recorded else "")
    summary = [
        f"gate: {info['commit']}, {train['rounds'] * 2} rounds, load {info['load']:.1f}; recorded: "
        + (f"{old_info.get('commit', '?')} {old_info.get('date', '?')}, load {old_info.get('load', 0):.1f}"
           if recorded else "none"),
        f"train step (small): {train['ratio']:.3f} (IQR {train['iqr'][0]:.3f}-{train['iqr'][1]:.3f})"
        + (f", recorded {old_train['ratio']:.3f}" if old_train else "") + "; target <= 1.02",
        f"rows: geometric mean {geomean(rows_now):.3f}" + (f", recorded {geomean(rows_old):.3f}" if rows_old else ""),
        "slower beyond noise: " + (", ".join(_moved(figures, old_items, slower)) or "none"),
        "faster beyond noise: " + (", ".join(_moved(figures, old_items, faster)) or "none"),
        verdict_line,
    ]
    return "\n".join(lines + [""] + summary), slower


def _moved(figures: dict, old_items: dict, names: list) -> list:
    return [f"{n} {old_items[n]['ratio']:.2f} -> {figures[n]['ratio']:.2f}" for n in names]


def dump(document: dict) -> str:
    """The figures as JSON, one line per item (diffs of a re-recording show what moved)."""
    items = ",\n".join(f"  {json.dumps(name)}: {json.dumps(f)}" for name, f in document["items"].items())
    return f'{{\n "run": {json.dumps(document["run"])},\n "items": {{\n{items}\n }}\n}}\n'


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    items = make_items(args.quick)
    if args.quick:
        min_rounds = max_rounds = 4
        deadline = 0.0
    else:
        min_rounds, max_rounds = 8, 100000
        deadline = STARTED + args.seconds
    figures = run(items, deadline, min_rounds, max_rounds)
    info = describe_run()
    recorded = json.loads(args.figures.read_text()) if args.figures.exists() else None
    text, slower = report(figures, info, recorded, args.min_change)
    print(text)
    document = dump({"run": info, "items": figures})
    if args.json:
        args.json.write_text(document)
    if args.record and not args.quick:
        args.figures.write_text(document)
        print(f"recorded as {args.figures}", file=sys.stderr)
    return 1 if args.strict and slower else 0


if __name__ == "__main__":
    sys.exit(main())
