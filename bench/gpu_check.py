"""The GPU check of issue 23, one command, one JSON, under 10 minutes: on a CUDA machine, the demo's training
step (Conformer + CTC) and the attention-decoder model (--decoder aed), each eager and compiled with
mode="reduce-overhead" (CUDA graphs), through demo/train.py; then bench/check_syncs.py (no op may
synchronize host and device).

Usage:
    python bench/gpu_check.py                       # CUDA: small config, writes bench/out/gpu_check.json
    python bench/gpu_check.py --device cpu --dry-run  # the same stages on the CPU, tiny config, 3 steps,
                                                      # backend aot_eager (tests/bench/test_gpu_check.py)

Each stage runs in its own process with its own time limit (a stage that fails or runs out of time is
recorded with its output's tail, and the others still run); the limits add up to less than 10 minutes.
Per run the JSON holds demo/train.py's summary figures: median step seconds (steps that compiled left out),
the compile seconds and the graphs compiled, steps, frames and sequences per second; and the ratio
compiled / eager of the median step per model. A dry run on the CPU (backend aot_eager: Dynamo and
AOTAutograd without inductor's code generation and without CUDA graphs) checks the script and the capture,
not the figures; check_syncs then runs with --cpu (unchecked: syncs exist only with a device).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUMMARY_KEYS = ("median_step_seconds", "compile", "steps_this_run", "train_seconds_this_run", "steps_per_s",
                "frames_per_s", "sequences_per_s", "final_train_loss", "params")


def stages(args) -> list:
    """(name, argv, seconds allowed): the demo and the AED model, eager then compiled; then check_syncs. The
    dry run checks the script, on a CPU that may be shared: its limits only catch a hang."""
    train = [sys.executable, str(ROOT / "demo" / "train.py"), "--task", args.task, "--config", args.config,
             "--steps", str(args.steps), "--device", args.device, "--no-progress", "--overwrite",
             "--eval-every", "100000"]
    compiled = ["--compile", "--compile-mode", args.compile_mode, "--compile-backend", args.compile_backend]
    out = []
    for model, extra in (("demo", []), ("aed", ["--decoder", "aed"])):
        if model not in args.models:
            continue
        out.append((f"{model} eager", train + extra, 180 if args.dry_run else 75))
        out.append((f"{model} compiled", train + extra + compiled, 600 if args.dry_run else 170))
    syncs = [sys.executable, str(ROOT / "bench" / "check_syncs.py")] + (["--cpu"] if args.device == "cpu" else [])
    out.append(("check_syncs", syncs, 90))
    return out


def run_stage(name: str, argv: list, limit_s: float, workdir: Path) -> dict:
    """Runs one stage; its result: status, seconds, and for a training run its summary's figures."""
    out_dir = workdir / name.replace(" ", "_")
    if argv[1].endswith("train.py"):
        argv = argv + ["--out", str(out_dir)]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=limit_s, cwd=ROOT, env=env)
        status, tail = ("ok" if proc.returncode == 0 else f"exit {proc.returncode}"), (proc.stdout + proc.stderr)
    except subprocess.TimeoutExpired as e:
        status = f"timed out after {limit_s:.0f} s"
        tail = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
    result = {"status": status, "seconds": round(time.monotonic() - t0, 1), "command": " ".join(argv[1:])}
    summary = out_dir / "summary.json"
    if summary.exists():
        data = json.loads(summary.read_text())
        result.update({k: data.get(k) for k in SUMMARY_KEYS})
    if status != "ok" or name == "check_syncs":
        result["output_tail"] = tail[-3000:]
    return result


def ratios(results: dict) -> dict:
    """compiled / eager median step seconds per model (None where a run gave no figure)."""
    out = {}
    for model in sorted({name.split()[0] for name in results} - {"check_syncs"}):
        e, c = (results.get(f"{model} {k}", {}).get("median_step_seconds") for k in ("eager", "compiled"))
        out[f"{model}: compiled / eager step"] = round(c / e, 3) if e and c else None
    return out


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--task", choices=("synthetic", "speech"), default="synthetic",
                   help="demo/train.py's --task (speech needs espeak-ng's voices: the demo's optional dependencies)")
    p.add_argument("--dry-run", action="store_true", help="tiny config and 3 steps per run: checks the script")
    p.add_argument("--config", default=None, help="demo/train.py's --config (default: small; tiny with --dry-run)")
    p.add_argument("--steps", type=int, default=None, help="training steps per run (default 30; 3 with --dry-run)")
    p.add_argument("--compile-mode", default="reduce-overhead", choices=("default", "reduce-overhead", "max-autotune"))
    p.add_argument("--compile-backend", default=None,
                   help="torch.compile's backend (default inductor; aot_eager with --dry-run: no code generation, "
                        "which takes minutes per model on a small CPU)")
    p.add_argument("--models", default="demo,aed",
                   help="comma-separated: demo (Conformer + CTC) and/or aed (with the attention decoder)")
    p.add_argument("--out", default=str(ROOT / "bench" / "out" / "gpu_check.json"))
    args = p.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not args.models or set(args.models) - {"demo", "aed"}:
        p.error(f"--models takes demo and/or aed, got {','.join(args.models) or 'none'}")
    args.config = args.config or ("tiny" if args.dry_run else "small")
    args.steps = args.steps or (3 if args.dry_run else 30)
    args.compile_backend = args.compile_backend or ("aot_eager" if args.dry_run else "inductor")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: --device cuda, but torch sees no CUDA device (use --device cpu --dry-run to test the "
              "script)", file=sys.stderr)
        return 2
    header = {"device": args.device + (f" ({torch.cuda.get_device_name()})" if args.device == "cuda" else ""),
              "torch": torch.__version__, "python": platform.python_version(), "task": args.task,
              "config": args.config,
              "steps": args.steps, "compile_mode": args.compile_mode,
              "compile_backend": args.compile_backend, "dry_run": args.dry_run, "models": args.models,
              "load": os.getloadavg() if hasattr(os, "getloadavg") else None}
    results, t0 = {}, time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp:
        for name, stage_argv, limit in stages(args):
            print(f"gpu_check: {name} (at most {limit} s) ...", file=sys.stderr, flush=True)
            results[name] = run_stage(name, stage_argv, limit, Path(tmp))
            print(f"gpu_check: {name}: {results[name]['status']} in {results[name]['seconds']} s", file=sys.stderr,
                  flush=True)
    header["seconds"] = round(time.monotonic() - t0, 1)
    report = {"header": header, "stages": results, "ratios": ratios(results)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps({"ratios": report["ratios"], "status": {k: v["status"] for k, v in results.items()}}, indent=1))
    print(f"gpu_check: wrote {out} in {header['seconds']:.0f} s", file=sys.stderr)
    return 0 if all(r["status"] == "ok" for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
