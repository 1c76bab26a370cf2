"""Overhead benchmark: each op timed as dimtorch, hand-written PyTorch and RETURNN frontend; ratios to PyTorch.

Run `python bench/ops_bench.py [--quick] [--filter REGEX] [--shapes tiny,small,meta] [--out DIR]`.
Prints Markdown tables to stdout (progress to stderr) and writes ops_bench.json, ops_bench.md and
ops_bench.png to the output dir. Exits 1 when a PyTorch or dimtorch implementation fails or disagrees.
See bench/README.md for what is timed and how to read the numbers.
"""
from __future__ import annotations

import argparse
import gc
import platform
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import dimtorch as dt  # noqa: E402
from opsbench import report, timing  # noqa: E402
from opsbench.cases import make_sides, run_case  # noqa: E402
from opsbench.frameworks import ReturnnSetup, setup_returnn  # noqa: E402
from opsbench.row import missing_requirements  # noqa: E402
from opsbench.rows import ROWS  # noqa: E402
from opsbench.shapes import SHAPE_SETS  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "out"


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few short rounds (under 30 s); numbers are rough")
    parser.add_argument("--filter", default="", help="regex searched in row names (e.g. 'add|softmax')")
    parser.add_argument("--shapes", default="tiny,small,meta",
                        help=f"comma-separated shape sets from {', '.join(SHAPE_SETS)}")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output dir for JSON, Markdown and PNG")
    parser.add_argument("--no-returnn", action="store_true", help="leave out the RETURNN column")
    parser.add_argument("--list", action="store_true", help="list the rows and whether dimtorch has them")
    args = parser.parse_args(argv)
    args.shape_sets = [_shape_set(name) for name in args.shapes.split(",") if name.strip()]
    return args


def _shape_set(name: str):
    try:
        return SHAPE_SETS[name.strip()]
    except KeyError:
        raise SystemExit(f"ops_bench.py: unknown shape set {name!r}; choose from {', '.join(SHAPE_SETS)}") from None


def selected_rows(pattern: str) -> list:
    regex = re.compile(pattern, re.IGNORECASE)
    return [row for row in ROWS if regex.search(row.name)]


def list_rows() -> None:
    for row in ROWS:
        missing = missing_requirements(row)
        state = "skipped, needs " + ", ".join(missing) if missing else "ready"
        print(f"{row.name:26s} {state:40s} {row.what}")


def header(args, returnn_setup: ReturnnSetup, plan, overhead_s: float) -> dict:
    return {
        "dimtorch": dt.__version__, "torch": torch.__version__, "returnn": returnn_setup.describe(),
        "python": platform.python_version(), "machine": f"{platform.machine()} {platform.processor()}".strip(),
        "threads": torch.get_num_threads(), "mode": "quick" if args.quick else "default",
        "plan": {"warmup_s": plan.warmup_s, "batch_s": plan.batch_s, "rounds": plan.rounds,
                 "min_rounds": plan.min_rounds, "budget_s": plan.budget_s},
        "harness_overhead_ns": round(overhead_s * 1e9, 1), "filter": args.filter,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def header_markdown(info: dict) -> str:
    plan = info["plan"]
    return "\n".join([
        "# dimtorch overhead benchmark",
        "",
        f"dimtorch {info['dimtorch']} · torch {info['torch']} · {info['returnn']} · Python {info['python']} · "
        f"{info['threads']} thread · CPU {info['machine']}",
        f"Mode {info['mode']}: {plan['rounds']} interleaved rounds (at least {plan['min_rounds']}, fewer when a "
        f"case would take over {plan['budget_s']:g} s) of ~{plan['batch_s'] * 1e3:g} ms batches per "
        f"implementation after {plan['warmup_s'] * 1e3:g} ms warm-up; µs = median time per call; "
        f"ratio = median over rounds of (dimtorch / torch), returnn_ratio likewise; harness overhead "
        f"{info['harness_overhead_ns']} ns per call subtracted.",
    ])


def run_shape_set(shapes, rows, returnn_setup, plan, overhead_s) -> list:
    sides = make_sides(shapes, returnn_setup)
    _freeze_heap()
    results = []
    for row in rows:
        if shapes.on_meta and not row.meta:
            continue
        started = time.perf_counter()
        result = run_case(row, shapes, sides, plan, overhead_s)
        status = "not on meta" if result is None else f"{time.perf_counter() - started:.1f} s"
        print(f"  {shapes.name}/{row.name}: {status}", file=sys.stderr, flush=True)
        if result is not None:
            results.append(result)
    return results


def _freeze_heap() -> None:
    """Moves everything alive now out of the garbage collector's sight, so the collections between timing
    rounds only scan what the benchmark itself allocates (a full collection costs ~65 ms here)."""
    gc.collect()
    gc.freeze()


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.list:
        list_rows()
        return 0
    torch.set_num_threads(1)
    plan = timing.QUICK if args.quick else timing.DEFAULT
    returnn_setup = ReturnnSetup(None, None, "n/a", False, "left out (--no-returnn)") if args.no_returnn \
        else setup_returnn()
    overhead_s = timing.harness_overhead_s()
    info = header(args, returnn_setup, plan, overhead_s)
    rows = selected_rows(args.filter)
    if not rows:
        raise SystemExit(f"ops_bench.py: no row matches --filter {args.filter!r}")
    sections, document = [], [header_markdown(info)]
    for shapes in args.shape_sets:
        results = run_shape_set(shapes, rows, returnn_setup, plan, overhead_s)
        means = report.geomeans(results)
        sections.append((shapes, results, means))
        document += ["", f"## {shapes.name}: {shapes.description}", "", report.markdown_table(results), "",
                     report.geomean_line(means)]
        rf_table = report.rf_namespace_table(results)
        if rf_table:
            document += ["", f"### {shapes.name}: dimtorch.rf against the dimtorch call it binds to", "", rf_table, "",
                         report.rf_namespace_line(means)]
    failures = [line for _, results, _ in sections for line in report.problems(results)]
    if failures:
        document += ["", "## Problems (implementations that failed or disagree)", ""] + failures
    markdown = "\n".join(document) + "\n"
    print(markdown)
    _write_outputs(args.out, info, sections, markdown)
    return 1 if _ours_failed(sections) else 0


def _ours_failed(sections: list) -> bool:
    """Whether a PyTorch or dimtorch implementation raised or disagreed (RETURNN's problems only report)."""
    return any(r.impls[impl].status in ("error", "differs")
               for _, results, _ in sections for r in results for impl in ("torch", "dimtorch"))


def _write_outputs(out_dir: Path, info: dict, sections: list, markdown: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "ops_bench.md").write_text(markdown)
    report.write_json(out_dir / "ops_bench.json", info, sections)
    report.write_png(out_dir / "ops_bench.png", sections)
    print(f"wrote {out_dir / 'ops_bench.json'}, {out_dir / 'ops_bench.md'}, {out_dir / 'ops_bench.png'}",
          file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
