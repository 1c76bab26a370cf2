"""The benchmark's outputs: Markdown tables, geometric means, the JSON file and the PNG bar chart of ratios."""
from __future__ import annotations

import json
import math
from dataclasses import asdict


def geometric_mean(values: list) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def geomeans(results: list) -> dict:
    """Per implementation, the geometric mean ratio to PyTorch over the rows it was timed on (and RETURNN's
    over the rows dimtorch has, so that the two are comparable); dimtorch.rf's rows (ratio to the dimtorch
    call) apart."""
    rf_ns = [r.ratio for r in results if r.reference == "dimtorch" and r.ratio is not None]
    results = [r for r in results if r.reference == "torch"]
    dimtorch = [r.ratio for r in results if r.ratio is not None]
    returnn = [r.returnn_ratio for r in results if r.returnn_ratio is not None]
    returnn_on_dimtorch_rows = [r.returnn_ratio for r in results if r.ratio is not None and r.returnn_ratio is not None]
    return {
        "dimtorch": {"geomean": geometric_mean(dimtorch), "rows": len(dimtorch)},
        "returnn": {"geomean": geometric_mean(returnn), "rows": len(returnn)},
        "returnn_on_dimtorch_rows": {"geomean": geometric_mean(returnn_on_dimtorch_rows),
                                     "rows": len(returnn_on_dimtorch_rows)},
        "dimtorch_rf_to_dimtorch": {"geomean": geometric_mean(rf_ns), "rows": len(rf_ns),
                                    "max": max(rf_ns) if rf_ns else None},
    }


def _us(value) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def _ratio(value) -> str:
    return "—" if value is None else f"{value:.2f}"


def _cell(impl_result) -> str:
    if impl_result.status == "skipped":
        return f"skipped ({impl_result.detail})"
    if impl_result.status == "error":
        return "ERROR"
    if impl_result.status == "differs":
        return _us(impl_result.us) + " DIFFERS"
    if impl_result.status == "n/a":
        return "n/a"
    return _us(impl_result.us)


def markdown_table(results: list) -> str:
    lines = ["| op | torch_us | dimtorch_us | ratio | returnn_us | returnn_ratio |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in results:
        if r.reference != "torch":
            continue
        lines.append(f"| {r.row} | {_cell(r.impls['torch'])} | {_cell(r.impls['dimtorch'])} | {_ratio(r.ratio)} "
                     f"| {_cell(r.impls['returnn'])} | {_ratio(r.returnn_ratio)} |")
    return "\n".join(lines)


def rf_namespace_table(results: list) -> str:
    """dimtorch.rf's rows: its call against the dimtorch call it binds to (ratio 1.00: no cost of its own)."""
    rows = [r for r in results if r.reference == "dimtorch"]
    if not rows:
        return ""
    lines = ["| rf call (vs the dimtorch call) | dimtorch_us | dimtorch.rf_us | ratio | returnn_us |",
             "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.row} | {_cell(r.impls['torch'])} | {_cell(r.impls['dimtorch'])} | {_ratio(r.ratio)} "
                     f"| {_cell(r.impls['returnn'])} |")
    return "\n".join(lines)


def rf_namespace_line(means: dict) -> str:
    entry = means["dimtorch_rf_to_dimtorch"]
    if entry["geomean"] is None:
        return ""
    return (f"dimtorch.rf / dimtorch: geometric mean {entry['geomean']:.3f}, largest {entry['max']:.3f}, over "
            f"{entry['rows']} rows.")


def geomean_line(means: dict) -> str:
    def fmt(entry):
        return "n/a" if entry["geomean"] is None else f"{entry['geomean']:.2f} over {entry['rows']} rows"
    return (f"Geometric mean ratio to PyTorch: dimtorch {fmt(means['dimtorch'])}; RETURNN {fmt(means['returnn'])} "
            f"(on the rows dimtorch has: {fmt(means['returnn_on_dimtorch_rows'])}).")


def problems(results: list) -> list:
    """One line per implementation that failed or disagreed."""
    lines = []
    for r in results:
        for impl, outcome in r.impls.items():
            if outcome.status in ("error", "differs"):
                lines.append(f"- {r.shape_set}/{r.row}: {impl} {outcome.status}: {outcome.detail}")
    return lines


def write_json(path, header: dict, sections: list) -> None:
    """sections: (shape set, results, geomeans) per shape set."""
    document = dict(header)
    document["shape_sets"] = [
        {"name": shapes.name, "description": shapes.description, "lengths": list(shapes.lengths),
         "feature": shapes.feature, "device": shapes.device, "geomean": means,
         "rows": [asdict(r) for r in results]}
        for shapes, results, means in sections]
    path.write_text(json.dumps(document, indent=2) + "\n")


def write_png(path, sections: list) -> None:
    """Horizontal bars of dimtorch and RETURNN ratios per row, one panel per shape set, log scale."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(shapes, [r for r in results if r.reference == "torch"]) for shapes, results, _ in sections]
    panels = [(shapes, results) for shapes, results in panels if results]
    rows = max((len(results) for _, results in panels), default=1)
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(5.5 * max(1, len(panels)), 1.2 + 0.28 * rows),
                             squeeze=False)
    for ax, (shapes, results) in zip(axes[0], panels):
        _draw_panel(ax, shapes, results)
    axes[0][0].legend(loc="lower right", fontsize=8)
    fig.suptitle("time / hand-written PyTorch time (median of per-round ratios; 1 = no overhead)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _draw_panel(ax, shapes, results) -> None:
    positions = list(range(len(results)))
    height = 0.4
    for offset, (label, key, color) in enumerate((("dimtorch", "ratio", "tab:blue"),
                                                  ("RETURNN", "returnn_ratio", "tab:orange"))):
        bars = [(p + (offset - 0.5) * height, getattr(r, key)) for p, r in zip(positions, results)
                if getattr(r, key) is not None]
        ax.barh([b[0] for b in bars], [b[1] for b in bars], height=height, label=label, color=color)
    for p, r in zip(positions, results):
        if r.impls["dimtorch"].status == "skipped":
            ax.text(1.0, p - 0.5 * height, " dimtorch: not yet", fontsize=6, va="center", color="gray")
    ax.set_yticks(positions)
    ax.set_yticklabels([r.row for r in results], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_title(f"{shapes.name}: {shapes.description.split(':')[0]}", fontsize=9)
