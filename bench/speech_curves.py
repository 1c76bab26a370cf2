"""Figure of two speech runs of demo/train.py (e.g. --impl dimtorch and --impl torch, same seed): dev WER and CER
on the held-out voices over training time and over steps, and each run's steps/s and frames/s.

    python demo/train.py --impl dimtorch --out runs/cmp-dimtorch --minutes 4 --threads 1
    python demo/train.py --impl torch --out runs/cmp-torch --minutes 4 --threads 1
    python bench/speech_curves.py runs/cmp-dimtorch runs/cmp-torch --out docs/figures/speech_curves.png

Prints a Markdown table of the runs (steps, steps/s, frames/s, dev WER and CER at the end and at equal steps).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def load(run: str) -> dict:
    path = Path(run) / "summary.json" if Path(run).is_dir() else Path(run)
    summary = json.loads(path.read_text())
    if summary.get("task") != "speech":
        raise SystemExit(f"speech_curves.py: {path} is not a --task speech run")
    return summary


def label(s: dict) -> str:
    return f"{s['impl']} ({s['params']} params)"


def plot(runs, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(17, 4.2), gridspec_kw={"width_ratios": [3, 3, 1.2, 1.2]})
    for i, s in enumerate(runs):
        dev = [d for d in s["dev"] if "wer" in d]
        style = dict(color=f"C{i}", marker="o" if i == 0 else "x", markersize=4)
        t = [d.get("seconds", 0.0) / 60 for d in dev]
        axes[0].plot(t, [100 * d["wer"] for d in dev], "-", label=f"WER {label(s)}", **style)
        axes[0].plot(t, [100 * d["cer"] for d in dev], ":", label=f"CER {label(s)}", **style)
        steps = [d["step"] for d in dev]
        axes[1].plot(steps, [100 * d["wer"] for d in dev], "-", label=f"WER {s['impl']}", **style)
        axes[1].plot(steps, [100 * d["cer"] for d in dev], ":", label=f"CER {s['impl']}", **style)
    axes[0].set(xlabel="training time (minutes)", ylabel="error rate (%)", title="dev WER / CER over time")
    axes[1].set(xlabel="step", ylabel="error rate (%)", title="dev WER / CER over steps (same seed)")
    names = [s["impl"] for s in runs]
    for ax, key, scale, what in ((axes[2], "steps_per_s", 1.0, "steps/s"),
                                 (axes[3], "frames_per_s", 1e-3, "thousand frames/s (10 ms)")):
        values = [(s[key] or 0.0) * scale for s in runs]
        ax.bar(names, values, color=[f"C{i}" for i in range(len(runs))])
        for x, v in enumerate(values):
            ax.text(x, v, f"{v:.2f}", ha="center", va="bottom")
        ax.set(title=what)
    for ax in axes[:2]:
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)


def table(runs) -> str:
    lines = ["| run | steps | steps/s | frames/s | audio s/s | dev WER / CER (greedy, end) | WER beam + lexicon |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for s in runs:
        beam = s.get("final_dev_beam") or {}
        lines.append(f"| {s['impl']} | {s['step']} | {s['steps_per_s']:.2f} | {s['frames_per_s']:.0f} | "
                     f"{s['audio_seconds_per_s']:.1f} | {100 * s['final_dev_wer']:.1f}% / {100 * s['final_dev_cer']:.1f}% | "
                     + (f"{100 * beam['wer_beam']:.1f}% |" if "wer_beam" in beam else "- |"))
    common = set.intersection(*({d["step"] for d in s["dev"]} for s in runs))
    if common:
        lines.append("")
        lines.append("| step | " + " | ".join(f"{s['impl']} WER / CER" for s in runs) + " |")
        lines.append("|---:|" + "---:|" * len(runs))
        for step in sorted(common):
            row = [next(d for d in s["dev"] if d["step"] == step) for s in runs]
            lines.append(f"| {step} | " + " | ".join(f"{100 * d['wer']:.1f}% / {100 * d['cer']:.2f}%" for d in row)
                         + " |")
    return "\n".join(lines)


def main(argv=None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="run folders (or their summary.json) of demo/train.py --task speech")
    p.add_argument("--out", default="bench/out/speech_curves.png", help="the figure (default: %(default)s)")
    args = p.parse_args(argv)
    runs = [load(r) for r in args.runs]
    plot(runs, Path(args.out))
    text = table(runs)
    print(text)
    print(f"wrote {args.out}")
    return text


if __name__ == "__main__":
    main()
