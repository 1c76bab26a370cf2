"""Compiled training steps for bench/train_bench.py --compile: the demo's Conformer + CTC step under
torch.compile, dimtorch against the hand-written PyTorch reference, both compiled the same way
(fullgraph=True, dynamic=True: one graph for every batch shape, lengths are graph inputs), and both
against their eager steps in the same interleaved run.

Measured per implementation: the step time compiled and eager (medians of interleaved rounds,
bench/train_bench.py's `interleaved`), the time of the first compiled step (tracing and code generation),
graphs compiled for the batches after the first (new lengths, batch and padded sizes: 0 when the dynamic
graph is reused), and the peak memory of a compiled step.
"""
from __future__ import annotations

import copy
import time
from typing import Callable, Dict, List

import torch

from demo.compiling import apply_compile_settings
from demo.distributed import HostLengths, LossModule

VARIANTS = ("torch", "dimtorch", "torch compiled", "dimtorch compiled")
# (numerator, denominator, what the ratio says)
RATIOS = (
    ("dimtorch compiled", "torch compiled", "compiled step: dimtorch / reference"),
    ("torch compiled", "torch", "reference: compiled / eager"),
    ("dimtorch compiled", "dimtorch", "dimtorch: compiled / eager"),
    ("dimtorch compiled", "torch", "dimtorch compiled / reference eager"),
)


def _unique_graphs() -> int:
    from torch._dynamo.utils import counters
    return counters["stats"]["unique_graphs"]


def make_step(model: torch.nn.Module, device: torch.device, compiled: bool, mode: str) -> Callable:
    """step(batch): zero_grad, loss (forward + CTC, compiled or not), backward, clip at 5, AdamW, as
    demo/train.py --compile runs it: the optimizer stays eager, the host lengths are graph inputs."""
    module = LossModule(model)
    if compiled:
        module = torch.compile(module, fullgraph=True, dynamic=True, mode=mode)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    params = list(model.parameters())

    def step(batch):
        opt.zero_grad(set_to_none=True)
        lengths = HostLengths(batch.feature_lengths, batch.target_lengths)
        loss = module(batch.features, batch.targets, lengths, int(batch.target_lengths.sum()),
                      batch.features.shape[0])[0]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 5.0)
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return step


def first_steps(step: Callable, batches: list) -> List[dict]:
    """One step on each batch in turn: its seconds and how many graphs it compiled."""
    out = []
    for i, batch in enumerate(batches):
        before, t0 = _unique_graphs(), time.perf_counter()
        step(batch)
        out.append({"batch": i, "shape": list(batch.features.shape), "seconds": time.perf_counter() - t0,
                    "graphs": _unique_graphs() - before})
    return out


def measure(models: Dict[str, torch.nn.Module], batches: list, device: torch.device, rounds: int, warmup: int,
            mode: str, interleaved: Callable, summarize: Callable, peak_memory: Callable, log) -> dict:
    """models: {'torch': ..., 'dimtorch': ...} with the same weights (copied here, four models in all)."""
    restore = apply_compile_settings()  # demo/compiling.py: one dynamic graph for both models
    torch._dynamo.reset()
    steps = {}
    for name in ("torch", "dimtorch"):
        steps[name] = make_step(copy.deepcopy(models[name]), device, False, mode)
        steps[f"{name} compiled"] = make_step(copy.deepcopy(models[name]), device, True, mode)
    compiling = {}
    for name in ("torch", "dimtorch"):
        log(f"  compiling {name} ...")
        compiling[name] = first_steps(steps[f"{name} compiled"], batches)
        log(f"  {name}: first step {compiling[name][0]['seconds']:.1f} s, "
            f"{sum(s['graphs'] for s in compiling[name])} graph(s) for {len(batches)} batches")
    samples = interleaved(steps, batches, rounds, warmup)
    out = {"mode": mode, "dynamic": True, "fullgraph": True, "compiling": compiling,
           "steps": {name: summarize(samples, num=name, den="torch")[name] for name in VARIANTS},
           "ratios": {}}
    for num, den, what in RATIOS:
        s = summarize(samples, num=num, den=den)
        out["ratios"][what] = {"ratio": s["ratio"], "quartiles": s["ratio_quartiles"]}
    out["memory"] = peak_memory({"torch": steps["torch compiled"], "dimtorch": steps["dimtorch compiled"]},
                                batches, device)
    torch._dynamo.reset()
    restore()
    return out


def markdown_rows(name: str, res: dict, ms: Callable, mib: Callable) -> List[str]:
    """Rows of train_bench's table for one config."""
    s = res["steps"]
    r = res["ratios"]
    main = r["compiled step: dimtorch / reference"]
    rows = [f"| {name} | | | train step compiled ({res['mode']}, dynamic) | {ms(s['torch compiled']['median_ms'])} | "
            f"{ms(s['dimtorch compiled']['median_ms'])} | {main['ratio']:.3f} "
            f"({main['quartiles'][0]:.3f}–{main['quartiles'][2]:.3f}) |",
            f"| {name} | | | compiled / eager (same run) | {r['reference: compiled / eager']['ratio']:.3f} | "
            f"{r['dimtorch: compiled / eager']['ratio']:.3f} | |",
            f"| {name} | | | dimtorch compiled / reference eager | | | "
            f"{r['dimtorch compiled / reference eager']['ratio']:.3f} |"]
    c = res["compiling"]
    first = {k: v[0]["seconds"] for k, v in c.items()}
    rows.append(f"| {name} | | | first compiled step (compiles) | {first['torch']:.1f} s | {first['dimtorch']:.1f} s | "
                f"{first['dimtorch'] / first['torch']:.2f} |")
    later = {k: sum(x["graphs"] for x in v[1:]) for k, v in c.items()}
    rows.append(f"| {name} | | | graphs for {len(c['torch']) - 1} more batch shapes | {later['torch']} | "
                f"{later['dimtorch']} | |")
    m = res["memory"]
    rows.append(f"| {name} | | | peak memory of a compiled step | {mib(m['torch'])} | {mib(m['dimtorch'])} | "
                f"{'n/a' if m['ratio'] is None else format(m['ratio'], '.3f')} |")
    return rows
