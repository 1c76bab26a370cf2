"""The demo's training loop: Conformer + CTC (optionally + attention decoder) on the in-process task,
with progress, evaluation, plot, JSON summary and resumable checkpoints.

    python demo/train.py                      # ~3 minutes on CPU, writes runs/demo/
    python demo/train.py --steps 2000 --out runs/a --device cuda
    python demo/train.py --resume --out runs/a --steps 3000   # continues runs/a up to step 3000
    python demo/train.py --decoder aed --out runs/aed         # joint CTC + attention decoder

`--impl torch` trains the hand-written PyTorch reference (demo/reference_model.py); `--impl dimtorch`
the same model with named dims (demo/dimtorch_model.py; needs dimtorch.nn.ConformerEncoder). Either
model, made by `build_model`, offers
`loss(features, feature_lengths, targets, target_lengths) -> (loss, logits (B, T', V+1), out_lengths)`
on raw tensors (lengths int64 on the host) and `blank_index`; with `--decoder aed` (a DecoderConfig)
the loss is the joint CTC/attention loss and `aed_greedy_decode(features, feature_lengths)` gives the
attention decoder's greedy labels.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import List, Optional

if __package__ in (None, ""):  # run as a script: make `demo` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from demo.checkpoint import CheckpointError, load_checkpoint, load_model_state, save_checkpoint
from demo.ctc_decode import greedy_decode, label_errors
from demo.data import Batch, SequenceDataset, TaskConfig, make_loader
from demo.reference_model import ConformerCTC, DecoderConfig, ModelConfig

CHECKPOINT, SUMMARY, PLOT = "checkpoint.pt", "summary.json", "training.png"

# Presets: "small" is the demo (learns in a few minutes on 2 CPU cores), "tiny" is for tests.
PRESETS = {
    "small": dict(
        task=TaskConfig(),
        model=ModelConfig(),
        decoder=DecoderConfig(),  # with --decoder aed
        train_seqs=20000, dev_seqs=200, batch_frames=2000, lr=2e-3, warmup=50, eval_every=50,
    ),
    "tiny": dict(
        task=TaskConfig(num_labels=5, feature_dim=8, max_labels=4, min_duration=4, max_duration=6, max_silence=2),
        model=ModelConfig(in_dim=8, num_labels=5, model_dim=16, num_layers=1, num_heads=2, ff_dim=32,
                          conv_kernel_size=3, subsample_channels=(2, 2)),
        decoder=DecoderConfig(num_layers=1, ff_dim=32),
        train_seqs=40, dev_seqs=8, batch_frames=300, lr=2e-3, warmup=2, eval_every=2,
    ),
}


def build_model(impl: str, cfg: ModelConfig, decoder: Optional[DecoderConfig] = None) -> torch.nn.Module:
    """The model of `impl`: the reference, or demo/dimtorch_model.py's `DimtorchConformerCTC(cfg)` (the
    interface in this module's docstring; dims made at its door from the host lengths)."""
    if impl == "torch":
        return ConformerCTC(cfg, decoder)
    if impl == "dimtorch":
        import dimtorch as dt
        if not hasattr(dt.nn, "ConformerEncoder"):
            raise SystemExit("train.py: --impl dimtorch needs dimtorch.nn.ConformerEncoder (issue 6), which this "
                             "build of dimtorch lacks. Use --impl torch.")
        from demo.dimtorch_model import DimtorchConformerCTC
        # The reference's initialization (same seed, same draws), so both impls start from the same
        # weights, and the random state after it, so later draws (dropout) start from the same state.
        reference = ConformerCTC(cfg, decoder).state_dict()
        rng = torch.get_rng_state()
        model = DimtorchConformerCTC(cfg, decoder)
        model.load_reference_state_dict(reference)
        torch.set_rng_state(rng)
        return model
    raise SystemExit(f"train.py: unknown --impl {impl!r} (torch or dimtorch)")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impl", choices=("torch", "dimtorch"), default="torch")
    p.add_argument("--config", choices=sorted(PRESETS), default="small")
    p.add_argument("--decoder", choices=("none", "aed"), default="none",
                   help="aed: add an attention decoder, trained jointly with CTC (demo.reference_model.DecoderConfig)")
    p.add_argument("--steps", type=int, default=None, help="train up to this global step (counts across --resume)")
    p.add_argument("--minutes", type=float, default=None,
                   help="wall-clock budget of this run (default 3 when --steps is not given, else none)")
    p.add_argument("--out", default="runs/demo", help="folder for checkpoint.pt, summary.json, training.png")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    p.add_argument("--overwrite", action="store_true", help="start afresh even if OUT/checkpoint.pt exists")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--batch-frames", type=int, default=None, help="max padded input frames per batch")
    p.add_argument("--eval-every", type=int, default=None, help="steps between evaluations on dev")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--no-progress", action="store_true", help="plain log lines instead of a progress bar")
    args = p.parse_args(argv)
    if args.steps is not None and args.steps < 0:
        p.error("--steps must be >= 0")
    if args.minutes is None and args.steps is None:
        args.minutes = 3.0
    preset = PRESETS[args.config]
    for k in ("lr", "batch_frames", "eval_every"):
        if getattr(args, k) is None:
            setattr(args, k, preset[k])
    return args


class Progress:
    """tqdm bar when tqdm is installed and wanted, else a log line every few seconds."""

    def __init__(self, total_steps, budget_s, enabled: bool):
        self.total_steps, self.budget_s, self.bar, self.last_print = total_steps, budget_s, None, 0.0
        if enabled:
            try:
                from tqdm import tqdm
                if total_steps is not None:
                    self.bar = tqdm(total=total_steps, unit="step", dynamic_ncols=True)
                else:
                    self.bar = tqdm(total=int(budget_s), unit="s", dynamic_ncols=True,
                                    bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt}s {postfix}")
            except ImportError:
                pass

    def update(self, step: int, elapsed: float, info: dict, start_step: int):
        if self.bar is not None:
            self.bar.n = step if self.total_steps is not None else min(int(elapsed), self.bar.total)
            self.bar.set_description(f"step {step}")
            self.bar.set_postfix(info, refresh=False)
            self.bar.refresh()
        elif time.monotonic() - self.last_print > 5.0:
            self.last_print = time.monotonic()
            print(f"step {step}  " + "  ".join(f"{k} {v}" for k, v in info.items()), flush=True)

    def write(self, msg: str):
        if self.bar is not None:
            self.bar.write(msg)
        else:
            print(msg, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


@torch.no_grad()
def evaluate(model, loader, device) -> dict:
    """Dev loss per label and label error rate (greedy CTC decoding); with the attention decoder also
    `aed_ler`, its greedy label error rate (at most 2 labels per encoder frame, stops at EOS)."""
    was_training = model.training
    model.eval()
    with_aed = model.dec_cfg is not None
    loss_sum = errors = aed_errors = labels = 0.0
    for batch in loader:
        b = batch.to(device)
        loss, logits, out_lengths = model.loss(*b)
        n = int(batch.target_lengths.sum())
        loss_sum += float(loss) * max(1, n)
        e, n_ref = label_errors(batch.targets, batch.target_lengths, greedy_decode(logits, out_lengths, model.blank_index))
        errors += e
        labels += n_ref
        if with_aed:
            hyps = model.aed_greedy_decode(b.features, b.feature_lengths)
            aed_errors += label_errors(batch.targets, batch.target_lengths, hyps)[0]
    model.train(was_training)
    out = {"loss": loss_sum / max(1, labels), "ler": errors / max(1, labels)}
    if with_aed:
        out["aed_ler"] = aed_errors / max(1, labels)
    return out


def lr_at(step: int, base_lr: float, warmup: int) -> float:
    """Linear warm-up over `warmup` steps, then constant."""
    return base_lr * min(1.0, (step + 1) / max(1, warmup))


def write_plot(path: Path, history: dict, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    train = history["train"]
    if train:
        steps, losses = zip(*train)
        ax1.plot(steps, losses, alpha=0.3, color="C0", label="train (per step)")
        k = max(1, len(losses) // 50)
        if k > 1:
            smooth = [statistics.fmean(losses[max(0, i - k + 1):i + 1]) for i in range(len(losses))]
            ax1.plot(steps, smooth, color="C0", label=f"train (mean of {k})")
    dev = history["dev"]
    with_aed = any("aed_ler" in d for d in dev)
    if dev:
        ax1.plot([d["step"] for d in dev], [d["loss"] for d in dev], "o-", color="C1", label="dev")
        ax2.plot([d["step"] for d in dev], [100 * d["ler"] for d in dev], "o-", color="C2", label="greedy CTC")
    if with_aed:
        aed = [d for d in dev if "aed_ler" in d]
        ax2.plot([d["step"] for d in aed], [100 * d["aed_ler"] for d in aed], "s-", color="C3",
                 label="greedy attention decoder")
        ax2.legend()
    ax1.set(xlabel="step", ylabel="joint CTC + CE loss" if with_aed else "CTC loss per label", title="loss")
    ax1.legend()
    ax2.set(xlabel="step", ylabel="label error rate (%)",
            title="dev label error rate" + ("" if with_aed else " (greedy CTC)"))
    ax2.set_ylim(bottom=0)
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)


def write_json(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, path)


def main(argv: Optional[List[str]] = None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("train.py: --device cuda, but torch sees no CUDA device")
    out = Path(args.out)
    ckpt_path = out / CHECKPOINT
    preset = PRESETS[args.config]
    task_cfg, model_cfg = preset["task"], preset["model"]
    dec_cfg = preset["decoder"] if args.decoder == "aed" else None
    dec_dict = dec_cfg.to_dict() if dec_cfg is not None else None

    state = None
    if args.resume:
        try:
            state = load_checkpoint(ckpt_path, args.impl)
        except CheckpointError as e:
            raise SystemExit(f"train.py --resume: {e}") from None
        saved_dec = state.get("decoder_config")  # absent in checkpoints from before --decoder: none
        if (state["model_config"] != model_cfg.to_dict() or state["task_config"] != task_cfg.to_dict()
                or saved_dec != dec_dict):
            diff = [f"{k}: {state['model_config'].get(k)!r} in the checkpoint, {v!r} here"
                    for k, v in model_cfg.to_dict().items() if state["model_config"].get(k) != v]
            diff += [f"task {k}: {state['task_config'].get(k)!r} in the checkpoint, {v!r} here"
                     for k, v in task_cfg.to_dict().items() if state["task_config"].get(k) != v]
            if (saved_dec is None) != (dec_dict is None):
                diff.append(f"--decoder {'none' if saved_dec is None else 'aed'} in the checkpoint, "
                            f"--decoder {args.decoder} here")
            elif saved_dec != dec_dict:
                diff += [f"decoder {k}: {saved_dec.get(k)!r} in the checkpoint, {v!r} here"
                         for k, v in dec_dict.items() if saved_dec.get(k) != v]
            raise SystemExit(f"train.py --resume: checkpoint {str(ckpt_path)!r} is for another configuration "
                             f"({'; '.join(diff) or 'unknown fields'}); pass its --config and --decoder. "
                             f"It was left untouched.")
    elif ckpt_path.exists() and not args.overwrite:
        raise SystemExit(f"train.py: {str(ckpt_path)!r} exists; pass --resume to continue it or --overwrite to "
                         f"start afresh (which replaces it)")

    torch.manual_seed(args.seed)
    model = build_model(args.impl, model_cfg, dec_cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    step, epoch, batch_in_epoch = 0, 0, 0
    history = {"train": [], "dev": []}
    if state is not None:
        try:
            load_model_state(model, state["model"], ckpt_path)
            optimizer.load_state_dict(state["optimizer"])
        except (CheckpointError, ValueError, KeyError) as e:
            raise SystemExit(f"train.py --resume: {e}") from None
        step, epoch, batch_in_epoch = state["step"], state["epoch"], state["batch_in_epoch"]
        history = state["history"]
        torch.set_rng_state(state["rng_cpu"])
        args.seed = state["args"].get("seed", args.seed)  # the data order goes on as it was
    model.to(device)
    for group in optimizer.state.values():  # optimizer state follows the parameters' device
        for k, v in group.items():
            if torch.is_tensor(v) and k != "step":
                group[k] = v.to(device)

    train_set = SequenceDataset(task_cfg, "train", preset["train_seqs"])
    dev_set = SequenceDataset(task_cfg, "dev", preset["dev_seqs"])
    train_loader = make_loader(train_set, max_frames=args.batch_frames, shuffle=True, seed=args.seed)
    dev_loader = make_loader(dev_set, max_frames=4 * args.batch_frames, shuffle=False)
    n_params = sum(p.numel() for p in model.parameters())

    def checkpoint_state():
        return {"impl": args.impl, "step": step, "epoch": epoch, "batch_in_epoch": batch_in_epoch,
                "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "model_config": model_cfg.to_dict(), "decoder_config": dec_dict, "task_config": task_cfg.to_dict(),
                "history": history,
                "rng_cpu": torch.get_rng_state(), "args": vars(args)}

    budget_s = args.minutes * 60 if args.minutes is not None else math.inf
    progress = Progress(args.steps, budget_s, enabled=not args.no_progress)
    progress.write(f"demo: impl={args.impl} config={args.config} decoder={args.decoder} device={device} "
                   f"params={n_params} threads={torch.get_num_threads()} start step={step}")
    if not history["dev"] and (args.steps is None or args.steps > step):
        history["dev"].append({"step": step, **evaluate(model, dev_loader, device)})
    model.train()
    start_step, t_start = step, time.monotonic()
    step_times, frames_done, ema = [], 0, None
    info = {}
    sampler = train_loader.batch_sampler
    while (args.steps is None or step < args.steps) and time.monotonic() - t_start < budget_s:
        sampler.set_epoch(epoch, batch_in_epoch)
        for batch in train_loader:
            t0 = time.perf_counter()
            b = batch.to(device)
            for g in optimizer.param_groups:
                g["lr"] = lr_at(step, args.lr, preset["warmup"])
            loss, _, _ = model.loss(*b)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            loss_value = float(loss.detach())  # one device read per step, for the log
            step_times.append(time.perf_counter() - t0)
            step += 1
            batch_in_epoch += 1
            frames_done += int(batch.feature_lengths.sum())
            history["train"].append([step, loss_value])
            ema = loss_value if ema is None else 0.9 * ema + 0.1 * loss_value
            elapsed = time.monotonic() - t_start
            info = {"loss": f"{ema:.3f}", "steps/s": f"{(step - start_step) / elapsed:.2f}",
                    "frames/s": f"{frames_done / elapsed:.0f}"}
            if history["dev"]:
                info["dev LER"] = f"{100 * history['dev'][-1]['ler']:.1f}%"
                if "aed_ler" in history["dev"][-1]:
                    info["dev AED LER"] = f"{100 * history['dev'][-1]['aed_ler']:.1f}%"
            done = (args.steps is not None and step >= args.steps) or elapsed >= budget_s
            if step % args.eval_every == 0 or done:
                ev = evaluate(model, dev_loader, device)
                history["dev"].append({"step": step, **ev})
                info["dev LER"] = f"{100 * ev['ler']:.1f}%"
                aed = ""
                if "aed_ler" in ev:
                    info["dev AED LER"] = aed = f"{100 * ev['aed_ler']:.1f}%"
                    aed = f"  dev AED LER {aed}"
                progress.write(f"step {step}: train loss {ema:.3f}  dev loss {ev['loss']:.3f}  "
                               f"dev LER {100 * ev['ler']:.1f}%{aed}")
                save_checkpoint(ckpt_path, checkpoint_state())
            progress.update(step, elapsed, info, start_step)
            if done:
                break
        else:
            epoch, batch_in_epoch = epoch + 1, 0
            continue
        break
    progress.close()
    train_s = time.monotonic() - t_start
    if step > start_step and (not history["dev"] or history["dev"][-1]["step"] != step):
        history["dev"].append({"step": step, **evaluate(model, dev_loader, device)})
    save_checkpoint(ckpt_path, checkpoint_state())
    dev = history["dev"]
    summary = {
        "impl": args.impl, "config": args.config, "device": str(device), "torch": torch.__version__,
        "threads": torch.get_num_threads(), "params": n_params,
        "model_config": model_cfg.to_dict(), "decoder": args.decoder, "decoder_config": dec_dict,
        "task_config": task_cfg.to_dict(),
        "step": step, "steps_this_run": step - start_step, "train_seconds_this_run": round(train_s, 2),
        "median_step_seconds": statistics.median(step_times) if step_times else None,
        "steps_per_s": (step - start_step) / train_s if train_s > 0 else None,
        "frames_per_s": frames_done / train_s if train_s > 0 else None,
        "final_train_loss": history["train"][-1][1] if history["train"] else None,
        "dev": dev, "final_dev_ler": dev[-1]["ler"] if dev else None,
        "best_dev_ler": min(d["ler"] for d in dev) if dev else None,
        "final_dev_aed_ler": dev[-1].get("aed_ler") if dev else None,
        "best_dev_aed_ler": min((d["aed_ler"] for d in dev if "aed_ler" in d), default=None),
        "checkpoint": str(ckpt_path), "plot": str(out / PLOT),
    }
    write_json(out / SUMMARY, summary)
    what = "Conformer + CTC" + (" + attention decoder" if dec_cfg is not None else "")
    write_plot(out / PLOT, history, f"{what} ({args.impl}, {args.config}, {n_params} params)")
    final = f"{100 * summary['final_dev_ler']:.1f}%" if dev else "n/a"
    if dev and summary["final_dev_aed_ler"] is not None:
        final += f", attention decoder {100 * summary['final_dev_aed_ler']:.1f}%"
    print(f"demo: step {step}, dev LER {final}; wrote {out / SUMMARY}, {out / PLOT}, {ckpt_path}", flush=True)
    return summary


if __name__ == "__main__":
    main()
