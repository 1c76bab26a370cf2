"""Data-parallel scaling of the training step (train_bench.py --nproc N): samples/s with 1 and N processes
(torch.distributed, gloo on CPU, one thread each; DDP, batch norm synced), dimtorch vs the hand-written
reference under the same set-up.

Each process count is one spawned group of processes. Every process builds both models (the reference's
weights loaded into dimtorch's), wraps each as demo/train.py does (demo.distributed.parallelize: DDP
around LossModule, synced batch norms; also with one process, so both counts pay the same machinery) and
runs demo.train.train_step on its rank's share of the same length-bucketed batches (demo.data.StepLoader:
rank r takes every N-th batch of `max_frames` padded frames). Per round each implementation, in an order
that rotates per round, runs one untimed and one timed step (as bench/train_bench.py's `interleaved`);
a timed step starts after a barrier and ends when rank 0's optimizer step is done (the gradients'
all-reduce waits for the slowest rank), so it is the step time of the whole group. samples/s = the
step's sequences over all ranks / the median step time; the ratio is the median of per-round
dimtorch / reference step-time ratios.
"""
from __future__ import annotations

import itertools
import os
import socket
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import torch  # noqa: E402

IMPLS = ("torch", "dimtorch")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, spec: dict, out_file: str) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    import torch.distributed as dist

    from demo.data import SequenceDataset, StepLoader, TaskConfig
    from demo.distributed import World, parallelize
    from demo.reference_model import ModelConfig
    from demo.train import train_step
    from twin_models import make_models
    from opsbench.timing import round_ratios

    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        world = World(rank, world_size, rank, "gloo")
        cfg = ModelConfig.from_dict(spec["model"])
        models = make_models(cfg)
        torch.manual_seed(1000 + rank)  # dropout differs per rank, as in demo/train.py
        steps = {}
        for name in IMPLS:
            module = parallelize(models[name], name, world, fsdp=False)
            params = list(module.parameters())
            opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
            steps[name] = (module, opt, params)
        task = TaskConfig(num_labels=cfg.num_labels, feature_dim=cfg.in_dim)
        ds = SequenceDataset(task, "train", num_seqs=spec["num_seqs"])
        loader = StepLoader(ds, max_frames=spec["max_frames"], max_seqs=spec["max_seqs"], seed=0, rank=rank,
                            world_size=world_size)
        # The same first bucket batches whatever the process count: a step of n processes takes n of them.
        shares = list(itertools.islice(loader.steps(0), spec["batches"] // world_size))

        def run(name, s):
            module, opt, params = steps[name]
            train_step(module, opt, params, s.batch, s.labels, s.seqs, 1e-3, float(world_size))

        import time
        for i in range(spec["warmup"]):
            for name in IMPLS:
                run(name, shares[i % len(shares)])
        times = {name: [] for name in IMPLS}
        seqs = {name: [] for name in IMPLS}
        for r in range(spec["rounds"]):
            s = shares[(r // len(IMPLS)) % len(shares)]
            shift = r % len(IMPLS)
            for name in IMPLS[shift:] + IMPLS[:shift]:
                run(name, s)  # re-warms the caches after the other implementation
                dist.barrier()
                t0 = time.perf_counter()
                run(name, s)
                times[name].append(time.perf_counter() - t0)
                seqs[name].append(s.seqs)
        if rank == 0:
            ratios = round_ratios(times["dimtorch"], times["torch"])
            torch.save({"times": times, "seqs": seqs, "ratio": statistics.median(ratios),
                        "mean_seqs": statistics.fmean(s.seqs for s in shares),
                        "mean_seqs_per_rank": statistics.fmean(s.seqs for s in shares) / world_size}, out_file)
    finally:
        dist.destroy_process_group()


def measure(model_cfg, max_frames: int, max_seqs: int, nproc: int, rounds: int, warmup: int, log,
            steps: int = 4) -> dict:
    """{'nproc', 'processes': {n: per-impl samples/s, median step ms, ratio}, 'speedup': per impl}. Both
    process counts run the same `steps * nproc` bucket batches (a round's step: batch (r // 2) mod the
    steps), so each rank's work per step is the same on average; rounds a multiple of 2 * steps * nproc
    see each batch equally often."""
    import torch.multiprocessing as mp
    batches = steps * nproc
    spec = {"model": model_cfg.to_dict(), "max_frames": max_frames, "max_seqs": max_seqs, "rounds": rounds,
            "warmup": warmup, "batches": batches, "num_seqs": max(64, 4 * batches * max_seqs)}
    out = {"nproc": nproc, "rounds": rounds, "warmup": warmup, "threads_per_process": 1,
           "backend": "gloo", "wrapper": "DDP (demo.distributed.parallelize)", "processes": {}}
    for n in sorted({1, nproc}):
        log(f"[scaling] {n} process(es): {rounds} rounds after {warmup} warm-up steps per impl ...")
        with tempfile.TemporaryDirectory() as tmp:
            result_file = os.path.join(tmp, "scaling.pt")
            mp.spawn(_worker, args=(n, _free_port(), spec, result_file), nprocs=n, join=True)
            res = torch.load(result_file)
        row = {"ratio": res["ratio"], "mean_seqs_per_step": res["mean_seqs"],
               "mean_seqs_per_rank": res["mean_seqs_per_rank"]}
        for name in IMPLS:
            per_round = [q / t for q, t in zip(res["seqs"][name], res["times"][name])]
            row[name] = {"median_step_ms": statistics.median(res["times"][name]) * 1e3,
                         "samples_per_s": statistics.median(per_round)}
        out["processes"][n] = row
    one, many = out["processes"][1], out["processes"][nproc]
    out["speedup"] = {name: many[name]["samples_per_s"] / one[name]["samples_per_s"] for name in IMPLS}
    return out


def markdown(scaling: Optional[dict], config_name: str) -> list:
    """Lines of the scaling table for train_bench.md."""
    if not scaling:
        return []
    lines = ["", f"## Data parallel: samples/s with 1 and {scaling['nproc']} processes ({config_name} config, "
             f"CPU, gloo, {scaling['threads_per_process']} thread per process, DDP)", "",
             "| processes | seqs per step | torch step | dimtorch step | torch samples/s | dimtorch samples/s | "
             "ratio (dimtorch / torch step time) |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for n, row in sorted(scaling["processes"].items()):
        lines.append(f"| {n} | {row['mean_seqs_per_step']:.1f} | {row['torch']['median_step_ms']:.1f} ms | "
                     f"{row['dimtorch']['median_step_ms']:.1f} ms | {row['torch']['samples_per_s']:.1f} | "
                     f"{row['dimtorch']['samples_per_s']:.1f} | {row['ratio']:.3f} |")
    sp = scaling["speedup"]
    lines.append(f"| speed-up 1 → {scaling['nproc']} | | | | {sp['torch']:.2f}× | {sp['dimtorch']:.2f}× | |")
    lines.append("")
    lines.append(f"- each rank steps on its own batch (every {scaling['nproc']}-th of the same length-bucketed "
                 f"batches), so a step of n processes holds n batches; the step time is the group's (barrier "
                 f"before, rank 0's optimizer step after); {scaling['rounds']} rounds after {scaling['warmup']} "
                 f"warm-up steps per implementation")
    return lines


def plot(ax, scaling: dict) -> None:
    """Samples/s by process count, one line per implementation, on `ax`."""
    counts = sorted(scaling["processes"])
    for i, name in enumerate(IMPLS):
        values = [scaling["processes"][n][name]["samples_per_s"] for n in counts]
        ax.plot(counts, values, "o-", color=f"C{i}", label=name)
        for n, v in zip(counts, values):
            ax.annotate(f"{v:.0f}", (n, v), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=8)
    ideal = [scaling["processes"][counts[0]]["torch"]["samples_per_s"] * n / counts[0] for n in counts]
    ax.plot(counts, ideal, ":", color="gray", label="linear (torch)")
    ax.set_xticks(counts)
    ax.set(xlabel="processes (gloo, 1 thread each)", ylabel="samples/s", title="data-parallel scaling")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


__all__ = ["measure", "markdown", "plot"]
