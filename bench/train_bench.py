"""Training-step benchmark: the demo's Conformer + CTC in dimtorch vs the hand-written PyTorch reference.

    python bench/train_bench.py                  # small + larger config, CPU, 1 thread: a few minutes
    python bench/train_bench.py --quick          # rough numbers in under a minute
    python bench/train_bench.py --device cuda --configs larger
    python bench/train_bench.py --configs small --compile   # also compiled: dimtorch vs reference vs eager

Both models start from the same weights (the reference's initialization loaded into dimtorch's model),
each has its own AdamW, and both see the same batches in the same order. Per round each implementation
runs one training step (zero_grad, forward, CTC loss, backward, clip at 5, AdamW step) on that round's
batch, in an order that rotates per round; the ratio is the median of the per-round ratios
(bench/opsbench/timing.py's helpers; shared/DESIGN.md §5). Also measured: the peak memory of one step,
the framework-only forward+backward time on torch's `meta` device, and RETURNN frontend's
ConformerEncoder (forward+backward) when `returnn` is importable. Writes train_bench.{md,json,png} to --out.

    python bench/train_bench.py --configs small --nproc 2   # also: samples/s with 1 and 2 processes (DDP)

`--nproc N` adds data-parallel scaling (bench/train_scaling.py): samples/s with 1 and N processes (gloo, one
thread each, DDP as demo/train.py runs it under torchrun), dimtorch vs the reference, on the first config.
"""
from __future__ import annotations

import argparse
import copy
import gc
import json
import math
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import torch  # noqa: E402

import dimtorch as dt  # noqa: E402
from demo.data import BucketBatchSampler, SequenceDataset, TaskConfig, collate  # noqa: E402
from demo.reference_model import ModelConfig  # noqa: E402
from opsbench.timing import quartiles, round_ratios, seconds_per_call  # noqa: E402
import train_compile  # noqa: E402
import train_scaling  # noqa: E402
from twin_models import make_models  # noqa: E402

IMPLS = ("torch", "dimtorch")


@dataclass(frozen=True)
class BenchConfig:
    """A model config and the batches it is timed on (`max_frames` padded input frames, `max_seqs` sequences)."""
    name: str
    model: ModelConfig
    max_frames: int
    max_seqs: int
    rounds: int  # timed rounds (two steps per implementation per round)
    warmup: int  # untimed steps per implementation first
    meta_rounds: int = 15


CONFIGS = {
    # The demo's model with tiny batches: a step is mostly framework and dispatch cost.
    "small": BenchConfig("small", ModelConfig(), max_frames=300, max_seqs=4, rounds=80, warmup=10),
    # Model dim 256, 6 layers, FF 1024, demo-sized batches: a step is mostly compute.
    "larger": BenchConfig("larger", ModelConfig(model_dim=256, num_layers=6, num_heads=4, ff_dim=1024,
                                                conv_kernel_size=31, subsample_channels=(16, 16)),
                          max_frames=2000, max_seqs=64, rounds=20, warmup=2, meta_rounds=6),
}
QUICK_ROUNDS = {"small": (6, 2), "larger": (1, 1)}  # (rounds, warmup) under --quick
SCALING_ROUNDS = {"quick": (4, 1), "full": (48, 4)}  # (rounds, warm-up steps) of --nproc


# ----------------------------------------------------------------------------------------------- set-up

def make_batches(cfg: BenchConfig, count: int, seed: int = 0) -> list:
    """`count` length-bucketed batches of the demo task (train split), made once and shared by both impls."""
    task = TaskConfig(num_labels=cfg.model.num_labels, feature_dim=cfg.model.in_dim)
    ds = SequenceDataset(task, "train", num_seqs=max(64, count * cfg.max_seqs * 2))
    sampler = BucketBatchSampler(ds.input_lengths, max_frames=cfg.max_frames, max_seqs=cfg.max_seqs, shuffle=True,
                                 seed=seed)
    batches = []
    for idx in sampler.batches(0):
        batches.append(collate([ds[i] for i in idx]))
        if len(batches) == count:
            break
    return batches


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_train_step(model, device: torch.device) -> Callable:
    """step(batch) -> loss tensor: one full training step as demo/train.py does it."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    params = list(model.parameters())

    def step(batch):
        opt.zero_grad(set_to_none=True)
        loss, _, _ = model.loss(*batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 5.0)
        opt.step()
        _sync(device)
        return loss
    return step


def make_fwd_bwd(model, device: torch.device, ctc: bool = True) -> Callable:
    """step(batch): forward, loss, backward, no optimizer. Without `ctc` the loss is the sum of the logits
    (torch's CTC loss has no meta kernel)."""
    def step(batch):
        for p in model.parameters():
            p.grad = None
        if ctc:
            loss, _, _ = model.loss(*batch)
        else:
            loss = model(batch.features, batch.feature_lengths)[0].sum()
        loss.backward()
        _sync(device)
    return step


# ------------------------------------------------------------------------------------------------ timing

def interleaved(steps: Dict[str, Callable], batches: list, rounds: int, warmup: int) -> Dict[str, List[float]]:
    """Per implementation, seconds of one step in each round. In round r every implementation, in an order
    rotating per round, runs batches[(r // 2) % len] twice in a row and the second step is timed: the first
    re-warms the caches after the other implementation (and after the between-round garbage collection),
    as in training where one model steps repeatedly. Measured on the small config: without it the side that
    runs right after the collection or the other side is 5-9% slower, which biased the ratio by the order.
    Each batch is seen in both orders (rounds 2k, 2k+1; `summarize` pairs them). Warm-up steps first."""
    names = list(steps)
    for i in range(warmup):
        for name in names:
            steps[name](batches[i % len(batches)])
    samples = {name: [] for name in names}
    for r in range(rounds):
        gc.collect()
        batch = batches[(r // len(names)) % len(batches)]  # each batch in every order
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            fn = steps[name]
            fn(batch)
            samples[name].append(seconds_per_call(lambda: fn(batch), 1))
    return samples


def summarize(samples: Dict[str, List[float]], num: str = "dimtorch", den: str = "torch") -> dict:
    out = {name: {"median_ms": statistics.median(v) * 1e3, "quartiles_ms": [q * 1e3 for q in quartiles(v)],
                  "rounds": len(v)} for name, v in samples.items()}
    ratios = round_ratios(samples[num], samples[den])
    # Rounds 2k and 2k+1 run the same batch in both orders; their geometric mean cancels a cost of going
    # first (we measured 3-5% on the small config even after the re-warming step).
    pairs = [math.sqrt(a * b) for a, b in zip(ratios[0::2], ratios[1::2])] or ratios
    out["ratio"] = statistics.median(pairs)
    out["ratio_quartiles"] = list(quartiles(pairs))
    out["ratio_by_order"] = {f"{den} first": statistics.median(ratios[0::2]),
                             f"{num} first": statistics.median(ratios[1::2]) if len(ratios) > 1 else None}
    return out


# ------------------------------------------------------------------------------------------------ memory

def _cpu_peak_bytes(step: Callable, batch) -> int:
    """Peak of torch's CPU allocations during one step, above what was alive when it started: the running
    sum of the profiler's per-op net allocations (an op's positive self-allocation counted at its start,
    a negative one at its end, standalone frees at their time)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step(batch)
    deltas = []
    for e in prof.events():
        m = e.cpu_memory_usage if e.name == "[memory]" else e.self_cpu_memory_usage
        if m:
            deltas.append((e.time_range.start if m > 0 else e.time_range.end, m))
    deltas.sort(key=lambda t: t[0])
    cur = peak = 0
    for _, m in deltas:
        cur += m
        peak = max(peak, cur)
    return peak


def _cuda_peak_bytes(step: Callable, batch, device) -> int:
    """torch.cuda.max_memory_allocated during one step, minus what was allocated when it started."""
    torch.cuda.synchronize(device)
    gc.collect()
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    step(batch)
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - base


def peak_memory(steps: Dict[str, Callable], batches: list, device: torch.device) -> dict:
    """Per implementation, the peak bytes of one step on the largest batch (after the timing's warm-up)."""
    batch = max(batches, key=lambda b: b.features.numel())
    out = {}
    for name, step in steps.items():
        out[name] = (_cuda_peak_bytes(step, batch, device) if device.type == "cuda"
                     else _cpu_peak_bytes(step, batch))
    out["ratio"] = out["dimtorch"] / out["torch"] if out["torch"] else None
    out["method"] = ("torch.cuda.max_memory_allocated above the step's start" if device.type == "cuda" else
                     "torch.profiler(profile_memory=True): running peak of per-op net CPU allocations above the "
                     "step's start")
    return out


# -------------------------------------------------------------------------------------------------- meta

def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    text = text[0].split(": attempted to run")[0] if text else ""
    return f"{type(exc).__name__}: {text}"[:160]


def meta_timing(models: dict, batches: list, rounds: int, warmup: int) -> dict:
    """Forward+backward of copies of both models on torch's meta device (no compute): framework cost only.
    Lengths stay on the host. The CTC loss is left out when it cannot run on meta (torch has no meta kernel
    for aten::_ctc_loss): the logits' sum is backpropagated instead. An implementation that raises otherwise
    is reported and skipped."""
    meta = torch.device("meta")
    steps, problems = {}, {}
    meta_batches = [type(b)(b.features.to(meta), b.feature_lengths, b.targets.to(meta), b.target_lengths)
                    for b in batches]
    copies = {name: copy.deepcopy(model).to(meta) for name, model in models.items()}
    ctc_note = None
    try:
        torch.nn.functional.ctc_loss(torch.zeros(2, 1, 3, device=meta), torch.ones(1, 1, dtype=torch.long, device=meta),
                                     torch.tensor([2]), torch.tensor([1]))
        ctc = True
    except Exception as exc:  # noqa: BLE001
        ctc = False
        ctc_note = f"CTC loss left out (loss = sum of logits): {_first_line(exc)}"
    for name, m in copies.items():
        try:
            step = make_fwd_bwd(m, meta, ctc=ctc)
            step(meta_batches[0])
            steps[name] = step
        except Exception as exc:  # noqa: BLE001 - reported, not fatal
            problems[name] = _first_line(exc)
    if problems:
        return {"status": "skipped", "problems": problems, "note": ctc_note}
    out = summarize(interleaved(steps, meta_batches, rounds, warmup))
    out["status"] = "ok"
    out["note"] = ctc_note
    return out


# ----------------------------------------------------------------------------------------------- RETURNN

def returnn_timing(cfg: BenchConfig, batches: list, device: torch.device, rounds: int, warmup: int,
                   torch_step: Callable) -> dict:
    """RETURNN frontend's ConformerEncoder (PyTorch backend), forward+backward, against the reference's
    forward+backward on the same batches. n/a with the reason when it cannot be run."""
    try:
        import returnn.frontend as rf  # noqa: F401
        from returnn.frontend.encoder.conformer import ConformerEncoder  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return {"status": "n/a", "reason": f"returnn not importable ({_first_line(exc)})"}
    try:
        return _returnn_timing(cfg, batches, device, rounds, warmup, torch_step)
    except Exception as exc:  # noqa: BLE001
        return {"status": "n/a", "reason": f"RETURNN ConformerEncoder failed: {_first_line(exc)}"}


def _returnn_timing(cfg, batches, device, rounds, warmup, torch_step) -> dict:
    import returnn.frontend as rf
    from returnn.frontend.encoder.conformer import ConformerConvSubsample, ConformerEncoder
    from returnn.tensor import Dim
    rf.select_backend_torch()
    mc = cfg.model
    in_dim = Dim(mc.in_dim, name="in")
    model_dim = Dim(mc.model_dim, name="model")
    vocab_dim = Dim(mc.num_labels + 1, name="vocab")
    rf.init_forward_step_run_ctx(epoch=1, step=0)
    enc = ConformerEncoder(
        in_dim, model_dim, ff_dim=Dim(mc.ff_dim, name="ff"), num_layers=mc.num_layers, num_heads=mc.num_heads,
        input_layer=ConformerConvSubsample(in_dim, out_dims=[Dim(c, name=f"conv{i}") for i, c in
                                                              enumerate(mc.subsample_channels)],
                                           filter_sizes=[(3, 3)] * len(mc.subsample_channels),
                                           pool_sizes=None, strides=[(2, 2)] * len(mc.subsample_channels)),
        conv_kernel_size=mc.conv_kernel_size, dropout=mc.dropout, att_dropout=mc.att_dropout)
    out = rf.Linear(model_dim, vocab_dim)
    mods = torch.nn.ModuleList([rf.get_module_by_frontend(enc), rf.get_module_by_frontend(out)]) \
        if hasattr(rf, "get_module_by_frontend") else None
    if mods is None:
        from returnn.torch.frontend.bridge import rf_module_to_pt_module
        mods = torch.nn.ModuleList([rf_module_to_pt_module(enc), rf_module_to_pt_module(out)])
    mods.to(device)

    def rf_step(batch):
        with rf.set_default_device_ctx(str(device)):  # as RETURNN's engine runs a step: what rf makes, there
            _rf_step(batch)

    def _rf_step(batch):
        for p in mods.parameters():
            p.grad = None
        batch_dim = Dim(batch.features.shape[0], name="batch")
        time_dim = Dim(rf.convert_to_tensor(batch.feature_lengths, dims=[batch_dim]), name="time")
        x = rf.convert_to_tensor(batch.features, dims=[batch_dim, time_dim, in_dim], feature_dim=in_dim)
        h, out_time = enc(x, in_spatial_dim=time_dim)
        logits = out(h)
        tgt_time = Dim(rf.convert_to_tensor(batch.target_lengths, dims=[batch_dim]), name="tgt_time")
        tgt = rf.convert_to_tensor(batch.targets, dims=[batch_dim, tgt_time], sparse_dim=vocab_dim)
        loss = rf.ctc_loss(logits=logits, targets=tgt, input_spatial_dim=out_time, targets_spatial_dim=tgt_time,
                           blank_index=mc.num_labels)
        (loss.raw_tensor.sum() / max(1, int(batch.target_lengths.sum()))).backward()
        _sync(device)

    rf_step(batches[0])
    out_ = summarize(interleaved({"torch": torch_step, "returnn": rf_step}, batches, rounds, warmup), num="returnn")
    out_["status"] = "ok"
    out_["note"] = ("forward+backward only (no optimizer), against the reference's forward+backward; RETURNN's "
                    "own defaults for what the demo fixes (front-end padding, masking), so similar, not identical")
    return out_


# ------------------------------------------------------------------------------------------------- a run

@dataclass
class ConfigResult:
    name: str
    params: int
    batches: dict
    loss_step0: dict
    step: dict
    memory: dict
    meta: dict
    returnn: dict
    extra: dict = field(default_factory=dict)


def loss_at_step0(models: dict, batch) -> dict:
    """Both models' loss on the first batch in eval mode (no dropout; batch norm with the initial running
    statistics), before any training step."""
    out = {}
    for name, m in models.items():
        m.eval()
        with torch.no_grad():
            out[name] = float(m.loss(*batch)[0])
        m.train()
    out["rel_diff"] = abs(out["dimtorch"] - out["torch"]) / max(abs(out["torch"]), 1e-12)
    return out


def run_config(cfg: BenchConfig, device: torch.device, quick: bool, rounds: Optional[int], meta: bool,
               use_returnn: bool, log, compile_mode: Optional[str] = None) -> ConfigResult:
    r_rounds, r_warmup = QUICK_ROUNDS.get(cfg.name, (3, 1)) if quick else (cfg.rounds, cfg.warmup)
    if rounds is not None:
        r_rounds = rounds
    r_warmup = min(r_warmup, max(1, r_rounds))
    batches = make_batches(cfg, count=8)
    models = make_models(cfg.model)
    loss0 = loss_at_step0(models, batches[0])
    dev_batches = [b.to(device) for b in batches]
    for m in models.values():
        m.to(device)
    steps = {name: make_train_step(models[name], device) for name in IMPLS}
    log(f"[{cfg.name}] timing {r_rounds} rounds after {r_warmup} warm-up steps per impl ...")
    step_res = summarize(interleaved(steps, dev_batches, r_rounds, r_warmup))
    log(f"[{cfg.name}] peak memory ...")
    mem = peak_memory(steps, dev_batches, device)
    meta_res = {"status": "not run"}
    if meta:
        log(f"[{cfg.name}] meta device ...")
        m_rounds = min(cfg.meta_rounds, 3) if quick else cfg.meta_rounds
        if rounds is not None:
            m_rounds = min(m_rounds, rounds)
        meta_res = meta_timing({n: models[n] for n in IMPLS}, batches, m_rounds, 1)
    rf_res = {"status": "not run"}
    if use_returnn:
        log(f"[{cfg.name}] RETURNN frontend ...")
        fwd_bwd = make_fwd_bwd(models["torch"], device)
        rf_res = returnn_timing(cfg, dev_batches, device, r_rounds, r_warmup, fwd_bwd)
    compiled = {"status": "not run"}
    if compile_mode:
        log(f"[{cfg.name}] torch.compile ({compile_mode}) ...")
        compiled = train_compile.measure(make_models(cfg.model), dev_batches, device, r_rounds, r_warmup,
                                         compile_mode, interleaved, summarize, peak_memory, log)
        compiled["status"] = "ok"
    frames = [int(b.feature_lengths.sum()) for b in batches]
    padded = [b.features.shape[0] * b.features.shape[1] for b in batches]
    return ConfigResult(
        name=cfg.name, params=sum(p.numel() for p in models["torch"].parameters()),
        batches={"count": len(batches), "max_frames": cfg.max_frames, "max_seqs": cfg.max_seqs,
                 "mean_seqs": statistics.fmean(b.features.shape[0] for b in batches),
                 "mean_frames": statistics.fmean(frames), "mean_padded_frames": statistics.fmean(padded)},
        loss_step0=loss0, step=step_res, memory=mem, meta=meta_res, returnn=rf_res,
        extra={"model": cfg.model.to_dict(), "rounds": r_rounds, "warmup": r_warmup, "compile": compiled})


# ------------------------------------------------------------------------------------------------ output

def _ms(v: Optional[float]) -> str:
    if v is None:
        return "n/a"
    return f"{v * 1e3:.0f} µs" if v < 1 else f"{v:.1f} ms" if v < 1000 else f"{v / 1e3:.2f} s"


def _mib(b: Optional[int]) -> str:
    return "n/a" if b is None else f"{b / 2**20:.1f} MiB"


def markdown(results: List[ConfigResult], header: dict) -> str:
    lines = [f"# Training step: dimtorch vs PyTorch reference ({header['device']}, {header['threads']} thread(s))", "",
             "| config | params | batch (seqs × padded frames) | what | torch | dimtorch | ratio (IQR) |",
             "|---|---:|---|---|---:|---:|---:|"]
    for r in results:
        b = f"{r.batches['mean_seqs']:.1f} × {r.batches['mean_padded_frames'] / r.batches['mean_seqs']:.0f}"
        s = r.step
        lines.append(f"| {r.name} | {r.params / 1e6:.2f} M | {b} | train step (fwd+bwd+AdamW) | "
                     f"{_ms(s['torch']['median_ms'])} | {_ms(s['dimtorch']['median_ms'])} | "
                     f"{s['ratio']:.3f} ({s['ratio_quartiles'][0]:.3f}–{s['ratio_quartiles'][2]:.3f}) |")
        m = r.memory
        lines.append(f"| {r.name} | | | peak memory of a step | {_mib(m['torch'])} | {_mib(m['dimtorch'])} | "
                     f"{'n/a' if m['ratio'] is None else format(m['ratio'], '.3f')} |")
        mt = r.meta
        if mt["status"] == "ok":
            what = "meta device fwd+bwd (no compute" + (", no CTC)" if mt.get("note") else ")")
            lines.append(f"| {r.name} | | | {what} | {_ms(mt['torch']['median_ms'])} | "
                         f"{_ms(mt['dimtorch']['median_ms'])} | {mt['ratio']:.3f} |")
        elif mt["status"] == "skipped":
            why = "; ".join(f"{k}: {v}" for k, v in mt["problems"].items())
            lines.append(f"| {r.name} | | | meta device | skipped | skipped | n/a ({why}) |")
        rf = r.returnn
        if rf["status"] == "ok":
            lines.append(f"| {r.name} | | | RETURNN fwd+bwd vs torch fwd+bwd | {_ms(rf['torch']['median_ms'])} | "
                         f"returnn {_ms(rf['returnn']['median_ms'])} | {rf['ratio']:.3f} |")
        elif rf["status"] == "n/a":
            lines.append(f"| {r.name} | | | RETURNN frontend | | | n/a ({rf['reason']}) |")
        if r.extra.get("compile", {}).get("status") == "ok":
            lines += train_compile.markdown_rows(r.name, r.extra["compile"], _ms, _mib)
    lines.append("")
    for r in results:
        l0 = r.loss_step0
        lines.append(f"- {r.name}: loss at step 0 (eval mode) torch {l0['torch']:.6f}, dimtorch {l0['dimtorch']:.6f} "
                     f"(rel. diff {l0['rel_diff']:.1e}); {r.extra['rounds']} rounds after {r.extra['warmup']} "
                     f"warm-up steps per impl")
    if results:
        lines.append(f"- memory: {results[0].memory['method']}")
        if results[0].meta.get("note"):
            lines.append(f"- meta: {results[0].meta['note']}")
        if results[0].returnn.get("note"):
            lines.append(f"- RETURNN: {results[0].returnn['note']}")
    lines.append("- ratio = median over batches of dimtorch / torch, each the geometric mean of the two rounds that ran "
                 "the batch in both orders (IQR in parentheses); the µs/ms columns are medians per step")
    return "\n".join(lines) + "\n"


def write_png(path: Path, results: List[ConfigResult], scaling: Optional[dict] = None) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels, values = [], []
    for r in results:
        labels.append(f"{r.name}\nstep time")
        values.append(r.step["ratio"])
        if r.memory["ratio"] is not None:
            labels.append(f"{r.name}\npeak memory")
            values.append(r.memory["ratio"])
        if r.meta["status"] == "ok":
            labels.append(f"{r.name}\nmeta fwd+bwd")
            values.append(r.meta["ratio"])
        if r.returnn["status"] == "ok":
            labels.append(f"{r.name}\nRETURNN fwd+bwd")
            values.append(r.returnn["ratio"])
        if r.extra.get("compile", {}).get("status") == "ok":
            labels.append(f"{r.name}\ncompiled step")
            values.append(r.extra["compile"]["ratios"]["compiled step: dimtorch / reference"]["ratio"])
            if r.extra["compile"]["memory"]["ratio"] is not None:
                labels.append(f"{r.name}\ncompiled memory")
                values.append(r.extra["compile"]["memory"]["ratio"])
    if scaling:
        fig, (ax, ax_scaling) = plt.subplots(1, 2, figsize=(max(6, 1.3 * len(labels)) + 5, 4),
                                             gridspec_kw={"width_ratios": [max(6, 1.3 * len(labels)), 5]})
        train_scaling.plot(ax_scaling, scaling)
    else:
        fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(labels)), 4))
    colors = ["C4" if "compiled" in lbl else "C0" if "step" in lbl else "C1" if "memory" in lbl else "C2" if "meta" in lbl else "C3" for lbl in labels]
    ax.bar(range(len(values)), values, color=colors)
    ax.axhline(1.0, color="k", linewidth=0.8)
    for i, v in enumerate(values):
        ax.text(i, v, f"{v:.3f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(values)), labels, fontsize=8)
    ax.set_ylabel("ratio to PyTorch reference (1 = same)")
    ax.set_title("dimtorch Conformer+CTC training vs hand-written PyTorch")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="few rounds: rough numbers in under a minute")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--configs", default="small,larger", help=f"comma-separated, of {', '.join(CONFIGS)}")
    p.add_argument("--rounds", type=int, default=None, help="timed rounds per config (two steps per impl each; overrides the presets)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--out", default=str(ROOT / "bench" / "out"), help="folder for train_bench.{md,json,png}")
    p.add_argument("--no-meta", action="store_true", help="skip the meta-device timing")
    p.add_argument("--no-returnn", action="store_true", help="skip RETURNN frontend")
    p.add_argument("--compile", action="store_true",
                   help="also time the step under torch.compile (fullgraph, dynamic shapes), both implementations "
                        "compiled and eager in one interleaved run (bench/train_compile.py)")
    p.add_argument("--compile-mode", choices=("default", "reduce-overhead", "max-autotune"), default="default",
                   help="torch.compile's mode with --compile (reduce-overhead: CUDA graphs, for --device cuda)")
    p.add_argument("--nproc", type=int, default=None,
                   help="also measure data-parallel samples/s with 1 and NPROC processes (CPU, gloo, DDP) on the "
                        "first config")
    args = p.parse_args(argv)
    args.config_list = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in args.config_list if c not in CONFIGS]
    if unknown or not args.config_list:
        p.error(f"--configs: unknown {unknown or '(none given)'}; choose from {', '.join(CONFIGS)}")
    if args.rounds is not None and args.rounds < 1:
        p.error("--rounds must be >= 1")
    if args.nproc is not None and args.nproc < 2:
        p.error("--nproc must be >= 2 (it compares 1 and NPROC processes)")
    if args.nproc is not None and args.device != "cpu":
        p.error("--nproc measures CPU processes (gloo); run it with --device cpu")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch.cuda.is_available() is False")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if not hasattr(dt.nn, "ConformerEncoder"):
        print("train_bench: dimtorch.nn.ConformerEncoder is missing in this build", file=sys.stderr)
        return 2

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    start = time.perf_counter()
    gc.freeze()
    results = [run_config(CONFIGS[name], device, args.quick, args.rounds, not args.no_meta, not args.no_returnn, log,
                          args.compile_mode if args.compile else None)
               for name in args.config_list]
    scaling = None
    if args.nproc:
        cfg = CONFIGS[args.config_list[0]]
        s_rounds, s_warmup = SCALING_ROUNDS["quick" if args.quick else "full"]
        scaling = train_scaling.measure(cfg.model, cfg.max_frames, cfg.max_seqs, args.nproc,
                                        args.rounds if args.rounds is not None else s_rounds, s_warmup, log)
        scaling["config"] = cfg.name
    header = {"device": str(device) + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""),
              "threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version(),
              "quick": args.quick, "seconds": None}
    report = markdown(results, header)
    if scaling:
        report += "\n".join(train_scaling.markdown(scaling, scaling["config"])) + "\n"
    header["seconds"] = time.perf_counter() - start
    print(report)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "train_bench.md").write_text(report)
    (out / "train_bench.json").write_text(json.dumps(
        {"header": header, "configs": [r.__dict__ for r in results], "scaling": scaling}, indent=1, default=str))
    write_png(out / "train_bench.png", results, scaling)
    log(f"wrote {out / 'train_bench.md'}, .json, .png in {header['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
