"""The demo's training loop: Conformer + CTC (optionally + attention decoder) on speech synthesized by
espeak-ng (waveforms to characters; `--task speech`, the default) or on the in-process sequence task
(`--task synthetic`), with progress, evaluation (dev WER and CER on held-out voices), plot, JSON summary and
resumable checkpoints; one process, or data parallel (DDP or FSDP2) under torchrun.

    python demo/train.py                      # ~3 minutes on CPU, dimtorch model, writes runs/main/
    python demo/train.py --task synthetic     # the in-process sequence task (tests, bench/train_bench.py)
    python demo/train.py --steps 2000 --out runs/a --device cuda
    python demo/train.py --resume --out runs/a --steps 3000   # continues runs/a up to step 3000
    python demo/train.py --decoder aed --out runs/aed         # joint CTC + attention decoder
    python demo/train.py --impl torch --out runs/ref          # the hand-written PyTorch reference
    torchrun --nproc_per_node=2 demo/train.py --out runs/ddp  # 2 processes, DDP (gloo on CPU, nccl on CUDA)
    torchrun --nproc_per_node=2 demo/train.py --fsdp --out runs/fsdp   # FSDP2, sharded checkpoints

`--impl dimtorch` trains demo/dimtorch_model.py (named dims; needs dimtorch.nn.ConformerEncoder),
`--impl torch` the reference (demo/reference_model.py). Either model, made by `build_model`, offers
`loss(features, feature_lengths, targets, target_lengths, *, total_labels=None, total_seqs=None)
-> (loss, logits (B, T', V+1), out_lengths)` on raw tensors (lengths int64 on the host; for speech the
features are audio (B, S) and the lengths samples: the log-mel front end is inside the model) and
`blank_index`; with `--decoder aed` (a DecoderConfig) the loss is the joint CTC/attention loss and
`aed_greedy_decode(features, feature_lengths)` gives the attention decoder's greedy labels.

Data parallel (demo/distributed.py): each of N ranks takes every N-th length-bucketed batch
(demo.data.StepLoader); a step's loss is the mean over the labels of all ranks' batches (each rank
divides its sum by the whole step's label count, known on every host from the lengths), batch norm
statistics are those of all ranks' frames (synced), so N ranks step as one process would on the
combined batch. Evaluation is shared by the ranks; rank 0 writes the plot, summary and checkpoint.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import List, Optional

if __package__ in (None, ""):  # run as a script: make `demo` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
import torch.distributed as dist

from demo.checkpoint import CheckpointError, load_checkpoint, load_model_state, save_checkpoint
from demo.compiling import apply_compile_settings
from demo.ctc_decode import greedy_decode, label_errors
from demo.data import Batch, SequenceDataset, StepLoader, TaskConfig
from demo.reference_frontend import FrontendConfig
from demo.distributed import (HostLengths, ShardedCheckpointError, World, all_reduce_sum, barrier, close_world,
                              gather_objects, init_world, load_sharded, parallelize, remove_old_shards, save_sharded,
                              unsharded_for_evaluation)
from demo.reference_model import ConformerCTC, DecoderConfig, ModelConfig

CHECKPOINT, SUMMARY, PLOT = "checkpoint.pt", "summary.json", "training.png"
USAGE = "examples:\n" + __doc__.split("\n\n")[1]

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


# The speech task (the main job): 80 log-mel features from 16 kHz audio inside the model, 28 characters (a-z,
# space, apostrophe) + blank. batch_frames counts audio samples here (16 s of audio per batch).
SPEECH_PRESETS = {
    "small": dict(
        model=ModelConfig(in_dim=80, num_labels=28),
        frontend=FrontendConfig(),
        decoder=DecoderConfig(),
        batch_frames=16 * 16000, lr=2e-3, warmup=100, eval_every=100,
    ),
    "tiny": dict(
        model=ModelConfig(in_dim=16, num_labels=28, model_dim=16, num_layers=1, num_heads=2, ff_dim=32,
                          conv_kernel_size=3, subsample_channels=(2, 2)),
        frontend=FrontendConfig(num_mel=16, max_feature_mask=2),
        decoder=DecoderConfig(num_layers=1, ff_dim=32),
        batch_frames=8 * 16000, lr=3e-3, warmup=2, eval_every=2,
    ),
}


def speech_task_config(config: str):
    """The speech corpus of a preset (imported here: only the speech task loads espeak-ng's wrapper)."""
    from demo.speech.synthesis import SpeechConfig
    if config == "tiny":
        return SpeechConfig(train_utterances=48, dev_utterances=8, max_edge_silence_s=0.1)
    return SpeechConfig()


def preset_of(task: str, config: str) -> dict:
    """PRESETS[config] for the synthetic task, SPEECH_PRESETS[config] with its corpus for speech."""
    if task == "synthetic":
        return dict(PRESETS[config], frontend=None)
    return dict(SPEECH_PRESETS[config], task=speech_task_config(config))


def build_model(impl: str, cfg: ModelConfig, decoder: Optional[DecoderConfig] = None,
                frontend: Optional[FrontendConfig] = None) -> torch.nn.Module:
    """The model of `impl`: the reference, or demo/dimtorch_model.py's `DimtorchConformerCTC(cfg)` (the
    interface in this module's docstring; dims made at its door from the host lengths). With a FrontendConfig
    the model takes audio (log-mel features and SpecAugment inside)."""
    if impl == "torch":
        return ConformerCTC(cfg, decoder, frontend)
    if impl == "dimtorch":
        import dimtorch as dt
        if not hasattr(dt.nn, "ConformerEncoder"):
            raise SystemExit("train.py: --impl dimtorch needs dimtorch.nn.ConformerEncoder (issue 6), which this "
                             "build of dimtorch lacks. Use --impl torch.")
        from demo.dimtorch_model import DimtorchConformerCTC
        # The reference's initialization (same seed, same draws), so both impls start from the same
        # weights, and the random state after it, so later draws (dropout) start from the same state.
        reference = ConformerCTC(cfg, decoder, frontend).state_dict()
        rng = torch.get_rng_state()
        model = DimtorchConformerCTC(cfg, decoder, frontend)
        model.load_reference_state_dict(reference)
        torch.set_rng_state(rng)
        return model
    raise SystemExit(f"train.py: unknown --impl {impl!r} (torch or dimtorch)")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The description and examples as written, and each option's default in its help (flags, and
    options whose default depends on others, say so in their help text instead)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default not in (None, argparse.SUPPRESS) and action.default is not False and "default" not in text:
            text += " (default: %(default)s)"
        return text


def _preset_defaults(key: str) -> str:
    return "default: the config's, " + ", ".join(
        [f"speech {name} {preset[key]}" for name, preset in sorted(SPEECH_PRESETS.items())]
        + [f"synthetic {name} {preset[key]}" for name, preset in sorted(PRESETS.items())])


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=USAGE, formatter_class=_HelpFormatter)
    p.add_argument("--task", choices=("speech", "synthetic"), default="speech",
                   help="speech: espeak-ng utterances, waveforms to characters, dev WER on held-out voices; "
                        "synthetic: the in-process sequence task (demo/data.py)")
    p.add_argument("--impl", choices=("torch", "dimtorch"), default="dimtorch",
                   help="dimtorch: the model with named dims; torch: the hand-written PyTorch reference")
    p.add_argument("--config", choices=sorted(PRESETS), default="small", help="model and task sizes (tiny: tests)")
    p.add_argument("--decoder", choices=("none", "aed"), default="none",
                   help="aed: add an attention decoder, trained jointly with CTC (demo.reference_model.DecoderConfig)")
    p.add_argument("--steps", type=int, default=None,
                   help="train up to this global step (counts across --resume; default: no step limit)")
    p.add_argument("--minutes", type=float, default=None,
                   help="wall-clock budget of this run (default: 3 when --steps is not given, else none)")
    p.add_argument("--out", default="runs/main", help="folder for checkpoint.pt, summary.json, training.png")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    p.add_argument("--overwrite", action="store_true", help="start afresh even if OUT/checkpoint.pt exists")
    p.add_argument("--device", default="cpu", help="cpu or cuda (under torchrun: each rank its LOCAL_RANK's GPU)")
    p.add_argument("--seed", type=int, default=0, help="initialization, data order and dropout")
    p.add_argument("--lr", type=float, default=None, help=f"peak learning rate ({_preset_defaults('lr')})")
    p.add_argument("--batch-frames", type=int, default=None,
                   help=f"max padded input frames per batch, per rank; audio samples for speech "
                        f"({_preset_defaults('batch_frames')})")
    p.add_argument("--eval-every", type=int, default=None,
                   help=f"steps between evaluations on dev ({_preset_defaults('eval_every')})")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads per process (default: torch's; 1 under torchrun)")
    p.add_argument("--fsdp", action="store_true",
                   help="under torchrun: shard parameters, gradients and optimizer state with FSDP2 instead of DDP")
    p.add_argument("--dist-timeout", type=float, default=300.0,
                   help="under torchrun: seconds a collective waits for the other ranks (a rank that died or hangs) "
                        "before the job fails")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the training step's forward and loss (backward through AOTAutograd); "
                        "evaluation stays eager")
    p.add_argument("--compile-mode", choices=("default", "reduce-overhead", "max-autotune"), default="default",
                   help="torch.compile's mode (reduce-overhead: CUDA graphs, on a GPU)")
    p.add_argument("--compile-backend", default="inductor",
                   help="torch.compile's backend (aot_eager: Dynamo and AOTAutograd without code generation, a quick "
                        "check of the capture; --compile-mode is inductor's)")
    p.add_argument("--pad-to-multiple", type=int, default=1,
                   help="pad each batch's time axes (input frames, target labels) to a multiple of this: fewer "
                        "distinct shapes, e.g. for static graphs (1: no padding)")
    p.add_argument("--decode-examples", type=int, default=3,
                   help="speech: print this many dev reference/hypothesis pairs at the end")
    p.add_argument("--beam-size", type=int, default=8,
                   help="speech: beam of the final dev evaluation's CTC prefix beam search (1: greedy only)")
    p.add_argument("--no-progress", action="store_true", help="plain log lines instead of a progress bar")
    args = p.parse_args(argv)
    if args.pad_to_multiple < 1:
        p.error("--pad-to-multiple must be >= 1")
    if args.steps is not None and args.steps < 0:
        p.error("--steps must be >= 0")
    if args.minutes is None and args.steps is None:
        args.minutes = 3.0
    preset = SPEECH_PRESETS[args.config] if args.task == "speech" else PRESETS[args.config]
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
def evaluate(forward, model, loader: StepLoader, device, world: World, to_text=None, beam: int = 1,
             examples: Optional[list] = None) -> dict:
    """Dev loss per label and label error rate (greedy CTC decoding); with the attention decoder also
    `aed_ler`, its greedy label error rate (at most 2 labels per encoder frame, stops at EOS).
    `forward(batch) -> (loss, logits, out_lengths)`. Each rank evaluates its share of the dev batches
    (stand-ins included) and the sums are added over the ranks (the only collective here: with FSDP the
    caller holds the parameters gathered, see demo.distributed.unsharded_for_evaluation).

    With `to_text` (labels -> str: the speech task) also the word and character error rates `wer`, `cer`
    (`aed_wer`, `aed_cer` with the decoder), and with beam > 1 those of the CTC prefix beam search: over dims
    (demo/speech/beam_dims.py; `wer_prefix_beam`, `cer_prefix_beam`) and constrained to the task's lexicon
    (demo/speech/beam.py; `wer_beam`, `cer_beam`); `examples` (a list) receives (reference, hypothesis) pairs
    of this rank (the lexicon beam search's, else greedy CTC's)."""
    from demo.speech.wer import char_errors, word_errors
    was_training = model.training
    model.eval()
    with_aed = model.dec_cfg is not None
    # loss * labels, CTC errors, attention decoder errors, labels; then per decoder (greedy CTC, attention,
    # lexicon beam, beam over dims) word errors, character errors; then words, characters
    sums = [0.0] * 14
    for step in loader.steps(0):
        batch = step.batch
        b = batch.to(device)
        loss, logits, out_lengths = forward(b)
        if not step.has_data:
            continue
        hyps = greedy_decode(logits, out_lengths, model.blank_index)
        errors, labels = label_errors(batch.targets, batch.target_lengths, hyps)
        sums[0] += float(loss) * max(1, int(batch.target_lengths.sum()))
        sums[1] += errors
        sums[3] += labels
        aed_hyps = model.aed_greedy_decode(b.features, b.feature_lengths) if with_aed else None
        if with_aed:
            sums[2] += label_errors(batch.targets, batch.target_lengths, aed_hyps)[0]
        if to_text is None:
            continue
        refs = [to_text(batch.targets[i, :n].tolist()) for i, n in enumerate(batch.target_lengths.tolist())]
        beam_hyps = dims_hyps = None
        if beam > 1:
            from demo.speech.beam_dims import ctc_prefix_beam_search_dims
            dims_hyps = ctc_prefix_beam_search_dims(logits, out_lengths, model.blank_index, beam)
            from demo.speech.beam import Lexicon, ctc_prefix_beam_search
            from demo.speech.phrases import ALPHABET, VOCABULARY
            beam_hyps = ctc_prefix_beam_search(logits, out_lengths, model.blank_index, beam, alphabet=ALPHABET,
                                               lexicon=Lexicon(VOCABULARY))
        for k, decoded in enumerate((hyps, aed_hyps, beam_hyps, dims_hyps)):
            if decoded is None:
                continue
            for ref, hyp in zip(refs, decoded):
                text = to_text(hyp)
                sums[4 + 2 * k] += word_errors(ref, text)[0]
                sums[5 + 2 * k] += char_errors(ref, text)[0]
        for ref in refs:
            sums[12] += len(ref.split())
            sums[13] += len(" ".join(ref.split()))
        if examples is not None:
            examples.extend(zip(refs, [to_text(h) for h in (beam_hyps or hyps)]))
    sums = all_reduce_sum(torch.tensor(sums, dtype=torch.float64), world).tolist()
    loss_sum, errors, aed_errors, labels = sums[:4]
    words, chars = max(1.0, sums[12]), max(1.0, sums[13])
    model.train(was_training)
    out = {"loss": loss_sum / max(1, labels), "ler": errors / max(1, labels)}
    if with_aed:
        out["aed_ler"] = aed_errors / max(1, labels)
    if to_text is not None:
        out["wer"], out["cer"] = sums[4] / words, sums[5] / chars
        if with_aed:
            out["aed_wer"], out["aed_cer"] = sums[6] / words, sums[7] / chars
        if beam > 1:
            out["wer_beam"], out["cer_beam"] = sums[8] / words, sums[9] / chars
            out["wer_prefix_beam"], out["cer_prefix_beam"] = sums[10] / words, sums[11] / chars
    return out


def train_step(module, optimizer, params, batch: Batch, total_labels: int, total_seqs: int, lr: float,
               grad_scale: float) -> torch.Tensor:
    """One training step on this rank's batch: the loss (its sums divided by the whole step's labels
    and sequences, so that the ranks' losses add up to the step's), backward of loss * grad_scale
    (DDP and FSDP average the ranks' gradients: grad_scale = world size makes it their sum, 0 drops a
    stand-in batch), clipping at 5, AdamW. Returns this rank's loss, detached; reads no device value."""
    for g in optimizer.param_groups:
        g["lr"] = lr
    loss, _, _ = module(batch.features, batch.targets, HostLengths(batch.feature_lengths, batch.target_lengths),
                        total_labels, total_seqs)
    optimizer.zero_grad(set_to_none=True)
    (loss if grad_scale == 1.0 else loss * grad_scale).backward()
    torch.nn.utils.clip_grad_norm_(params, 5.0)
    optimizer.step()
    return loss.detach()


def pad_to_multiple(batch: Batch, multiple: int) -> Batch:
    """The batch with its time axes (features, targets) padded by zeros to a multiple of `multiple`:
    the lengths are unchanged, so the padding is masked like any other."""
    if multiple <= 1:
        return batch

    def padded(raw, axis):
        extra = -raw.shape[axis] % multiple
        if not extra:
            return raw
        shape = list(raw.shape)
        shape[axis] = extra
        return torch.cat([raw, raw.new_zeros(shape)], dim=axis)
    return Batch(padded(batch.features, 1), batch.feature_lengths, padded(batch.targets, 1), batch.target_lengths)


class CompileClock:
    """Splits wall time into compiling and stepping: a step during which Dynamo compiled a graph
    counts as compile time (it holds the tracing and the code generation), the others as steps."""

    def __init__(self, enabled: bool):
        self.enabled, self.seconds, self.graphs, self.steps = enabled, 0.0, 0, 0

    def _count(self) -> int:
        if not self.enabled:
            return 0
        from torch._dynamo.utils import counters
        return counters["stats"]["unique_graphs"]

    def start(self) -> None:
        self._before = self._count()

    def stop(self, seconds: float) -> bool:
        """Whether this step compiled (its seconds were added to the compile time)."""
        now = self._count()
        compiled = now > self._before
        if compiled:
            self.seconds += seconds
            self.graphs += now - self._before  # a restart of Dynamo's analysis counts too
            self.steps += 1
        return compiled


def dev_info(ev: dict) -> dict:
    """The progress bar's dev fields of an evaluation: WER and CER for speech, else the label error rate."""
    if "wer" in ev:
        info = {"dev WER": f"{100 * ev['wer']:.1f}%", "dev CER": f"{100 * ev['cer']:.1f}%"}
        if "aed_wer" in ev:
            info["dev AED WER"] = f"{100 * ev['aed_wer']:.1f}%"
        return info
    info = {"dev LER": f"{100 * ev['ler']:.1f}%"}
    if "aed_ler" in ev:
        info["dev AED LER"] = f"{100 * ev['aed_ler']:.1f}%"
    return info


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
    speech = any("wer" in d for d in dev)
    if dev:
        ax1.plot([d["step"] for d in dev], [d["loss"] for d in dev], "o-", color="C1", label="dev")
    if speech:  # word and character error rates of the held-out voices
        ax2.plot([d["step"] for d in dev], [100 * d["wer"] for d in dev], "o-", color="C2", label="WER, greedy CTC")
        ax2.plot([d["step"] for d in dev], [100 * d["cer"] for d in dev], "^--", color="C2", alpha=0.7,
                 label="CER, greedy CTC")
        aed = [d for d in dev if "aed_wer" in d]
        if aed:
            ax2.plot([d["step"] for d in aed], [100 * d["aed_wer"] for d in aed], "s-", color="C3",
                     label="WER, greedy attention decoder")
        ax2.legend()
    elif dev:
        ax2.plot([d["step"] for d in dev], [100 * d["ler"] for d in dev], "o-", color="C2", label="greedy CTC")
    if with_aed and not speech:
        aed = [d for d in dev if "aed_ler" in d]
        ax2.plot([d["step"] for d in aed], [100 * d["aed_ler"] for d in aed], "s-", color="C3",
                 label="greedy attention decoder")
        ax2.legend()
    ax1.set(xlabel="step", ylabel="joint CTC + CE loss" if with_aed else "CTC loss per label", title="loss")
    ax1.legend()
    if speech:
        ax2.set(xlabel="step", ylabel="error rate (%)", title="dev word and character error rates (held-out voices)")
    else:
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


def _lost_contact(e: RuntimeError) -> bool:
    """Whether `e` is a collective failing because another rank died or stopped answering (gloo
    raises a plain RuntimeError naming its transport, NCCL and timeouts a DistError)."""
    text = str(e)
    return isinstance(e, dist.DistError) or any(
        k in text for k in ("gloo", "NCCL", "Connection reset", "Connection closed", "imed out"))


def check_resumable(state: dict, args, model_cfg, task_cfg, dec_dict, ckpt_path: Path) -> None:
    """SystemExit naming every difference when the checkpoint is for another configuration or mode."""
    saved_task = state.get("task", "synthetic")  # absent in checkpoints from before --task: synthetic
    if saved_task != args.task:
        raise SystemExit(f"train.py --resume: checkpoint {str(ckpt_path)!r} is for --task {saved_task}, not --task "
                         f"{args.task}; pass --task {saved_task}. It was left untouched.")
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
    sharded = "sharded" in state
    if sharded != args.fsdp:
        how = "with --fsdp (sharded)" if sharded else "without --fsdp (one file: one process or DDP)"
        raise SystemExit(f"train.py --resume: checkpoint {str(ckpt_path)!r} was written {how}; resume it "
                         f"{'with' if sharded else 'without'} --fsdp (any number of processes). It was left untouched.")


def _stop_now(message: str) -> SystemExit:
    """Prints why this rank stops at once (stderr, flushed) and gives the SystemExit to raise: when a
    rank has died, torchrun SIGTERMs the others, which can end a process before the interpreter would
    print a SystemExit's message at exit (after the finally's close_world)."""
    print(message, file=sys.stderr, flush=True)
    return SystemExit(1)


def main(argv: Optional[List[str]] = None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    world = init_world(args.device, args.dist_timeout)
    previous = signal.getsignal(signal.SIGTERM)
    intact = f"The last good checkpoint {str(Path(args.out) / CHECKPOINT)!r} is intact; continue with --resume."
    if world.distributed:
        def stopped(signum, frame):
            # torchrun ends the other ranks with SIGTERM when one fails: say so, and let the checkpoint
            # writer remove its temporary file (the last good checkpoint is never touched before os.replace).
            raise _stop_now(f"train.py (rank {world.rank} of {world.world_size}): stopped by SIGTERM (torchrun "
                            f"stops every rank when one has failed; its report follows). {intact}")
        signal.signal(signal.SIGTERM, stopped)
    try:
        return run(args, world)
    except SystemExit as e:
        if world.is_main or not isinstance(e.code, str):
            raise
        raise SystemExit(1) from None  # rank 0 says what is wrong; the others end quietly
    except RuntimeError as e:
        if not (world.distributed and _lost_contact(e)):
            raise
        raise _stop_now(f"train.py (rank {world.rank} of {world.world_size}): a collective failed, another rank "
                        f"has died or stopped answering (a collective waits at most --dist-timeout "
                        f"{args.dist_timeout:g} s): {str(e).splitlines()[0] if str(e) else type(e).__name__}. "
                        f"{intact}") from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        close_world(world)


def run(args, world: World) -> dict:
    """Training as main() set it up; every rank runs it."""
    if args.fsdp and not world.distributed:
        raise SystemExit("train.py --fsdp: FSDP shards over processes; start with torchrun, e.g. "
                         "torchrun --nproc_per_node=2 demo/train.py --fsdp")
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("train.py: --device cuda, but torch sees no CUDA device")
        if world.distributed:
            device = torch.device("cuda", world.local_rank)
    main_rank = world.is_main
    out = Path(args.out)
    ckpt_path = out / CHECKPOINT
    preset = preset_of(args.task, args.config)
    task_cfg, model_cfg, frontend = preset["task"], preset["model"], preset["frontend"]
    dec_cfg = preset["decoder"] if args.decoder == "aed" else None
    dec_dict = dec_cfg.to_dict() if dec_cfg is not None else None

    state = None
    if args.resume:
        try:
            state = load_checkpoint(ckpt_path, args.impl)
        except CheckpointError as e:
            raise SystemExit(f"train.py --resume: {e}") from None
        check_resumable(state, args, model_cfg, task_cfg, dec_dict, ckpt_path)
        args.seed = state["args"].get("seed", args.seed)  # the data order goes on as it was
    elif ckpt_path.exists() and not args.overwrite:
        raise SystemExit(f"train.py: {str(ckpt_path)!r} exists; pass --resume to continue it or --overwrite to "
                         f"start afresh (which replaces it)")
    if main_rank:
        for stale in out.glob(CHECKPOINT + ".*.tmp"):  # left by a save that was killed
            stale.unlink()

    def log0(msg: str) -> None:
        print(msg, flush=True)

    torch.manual_seed(args.seed)
    model = build_model(args.impl, model_cfg, dec_cfg, frontend)
    if world.rank > 0:
        # Rank 0 goes on with the random state after initialization (as one process); the others draw
        # their dropout from their own seeds.
        torch.manual_seed(args.seed * 1_000_003 + world.rank)
    n_params = sum(p.numel() for p in model.parameters())
    step, epoch, batch_in_epoch = 0, 0, 0
    history = {"train": [], "dev": []}
    if state is not None:
        try:
            if not args.fsdp:
                load_model_state(model, state["model"], ckpt_path)
        except (CheckpointError, ValueError, KeyError) as e:
            raise SystemExit(f"train.py --resume: {e}") from None
        step, epoch, batch_in_epoch = state["step"], state["epoch"], state["batch_in_epoch"]
        history = state["history"]
        rngs = state.get("rng_cpu_ranks") or [state["rng_cpu"]]
        if world.rank < len(rngs):
            torch.set_rng_state(rngs[world.rank])
            cuda_rngs = state.get("rng_cuda_ranks")
            if device.type == "cuda" and cuda_rngs and world.rank < len(cuda_rngs):
                torch.cuda.set_rng_state(cuda_rngs[world.rank], device)
    model.to(device)
    compile_kwargs = None
    if args.compile:
        compile_kwargs = dict(dynamic=True, backend=args.compile_backend)
        if args.compile_backend == "inductor":
            compile_kwargs["mode"] = args.compile_mode
    if args.compile:
        # torch 2.13's inductor settings without which the step recompiles per batch shape or fails
        # (demo/compiling.py), the same for both models.
        apply_compile_settings()
    # With --fsdp --compile, parallelize compiles each sharded layer (FSDP2's hooks stay eager around it).
    module = parallelize(model, args.impl, world, args.fsdp, compile_kwargs=compile_kwargs if args.fsdp else None)
    params = list(module.parameters())
    if args.compile and not args.fsdp:
        # One graph for the forward and loss (its backward compiled with it), with dynamic sizes from the
        # first batch on: every later batch shape reuses it. Under DDP, Dynamo's DDP optimizer cuts the
        # graph at the gradient buckets (a graph per bucket), so fullgraph is left to the single process.
        module = torch.compile(module, fullgraph=not world.distributed, **compile_kwargs)
    clock = CompileClock(args.compile)
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    if state is not None:
        if args.fsdp:
            try:
                load_sharded(out / state["sharded"], module, optimizer)
            except (ShardedCheckpointError, ValueError, KeyError, RuntimeError) as e:
                raise SystemExit(f"train.py --resume: the sharded checkpoint {str(out / state['sharded'])!r} "
                                 f"named by {str(ckpt_path)!r} cannot be loaded ({str(e).splitlines()[0]}); it "
                                 f"was left untouched") from None
        else:
            try:
                optimizer.load_state_dict(state["optimizer"])  # moves the state to the parameters' device
            except (ValueError, KeyError, RuntimeError) as e:
                raise SystemExit(f"train.py --resume: the optimizer state in {str(ckpt_path)!r} does not fit "
                                 f"({type(e).__name__}: {str(e).splitlines()[0]}); it was left untouched") from None

    if args.task == "speech":
        from demo.speech.corpus import SpeechDataset
        from demo.speech.phrases import labels_to_text
        # Rank 0 synthesizes what the cache lacks first; the others then read it.
        if main_rank:
            SpeechDataset(task_cfg, "train", log=log0), SpeechDataset(task_cfg, "dev", log=log0)
        barrier(world)
        train_set, dev_set = SpeechDataset(task_cfg, "train"), SpeechDataset(task_cfg, "dev")
        to_text, frame_samples = labels_to_text, frontend.step
    else:
        train_set = SequenceDataset(task_cfg, "train", preset["train_seqs"])
        dev_set = SequenceDataset(task_cfg, "dev", preset["dev_seqs"])
        to_text, frame_samples = None, 1
    train_loader = StepLoader(train_set, max_frames=args.batch_frames, shuffle=True, seed=args.seed,
                              rank=world.rank, world_size=world.world_size)
    dev_loader = StepLoader(dev_set, max_frames=4 * args.batch_frames, shuffle=False, rank=world.rank,
                            world_size=world.world_size)
    if args.fsdp:
        def eval_forward(b):
            return module(b.features, b.targets, HostLengths(b.feature_lengths, b.target_lengths))
    else:
        def eval_forward(b):
            return model.loss(*b)

    def evaluate_dev(**kwargs) -> dict:
        """evaluate() on dev. With FSDP the parameters are gathered once for it (unsharded_for_evaluation): each
        rank then runs its own number of forward calls (the attention decoder's greedy decoding stops at EOS)
        without collectives. Evaluation stays eager with --compile (the layers compiled for training run their
        eager code)."""
        with unsharded_for_evaluation(module) if args.fsdp else contextlib.nullcontext(), \
                torch.compiler.set_stance("force_eager") if args.compile else contextlib.nullcontext():
            return evaluate(eval_forward, model, dev_loader, device, world, to_text, **kwargs)

    saved = [None]  # (step, dev evaluations) of the last save

    def save():
        """Every rank calls it: rank 0 writes the checkpoint file (atomically) with every rank's random
        state; with FSDP every rank first writes its shards to a new folder, which the file then names."""
        saved[0] = (step, len(history["dev"]))
        cuda_rng = torch.cuda.get_rng_state(device) if device.type == "cuda" else None  # dropout on the GPU
        rngs, cuda_rngs = zip(*gather_objects((torch.get_rng_state(), cuda_rng), world))
        meta = {"impl": args.impl, "task": args.task, "frontend_config": frontend.to_dict() if frontend else None,
                "step": step, "epoch": epoch, "batch_in_epoch": batch_in_epoch,
                "world_size": world.world_size, "model_config": model_cfg.to_dict(), "decoder_config": dec_dict,
                "task_config": task_cfg.to_dict(), "history": history, "rng_cpu": rngs[0], "rng_cpu_ranks": list(rngs),
                "args": vars(args)}
        if device.type == "cuda":
            meta["rng_cuda_ranks"] = list(cuda_rngs)
        if args.fsdp:
            # a new folder per save (rank 0's name): the one the current file names stays intact
            folder = gather_objects(f"sharded-step-{step:08d}-{time.time_ns()}", world)[0]
            save_sharded(out / folder, module, optimizer)
            if main_rank:
                save_checkpoint(ckpt_path, {**meta, "sharded": folder})
                remove_old_shards(out, keep=[folder])
            barrier(world)
        elif main_rank:
            save_checkpoint(ckpt_path, {**meta, "model": model.state_dict(), "optimizer": optimizer.state_dict()})

    budget_s = args.minutes * 60 if args.minutes is not None else math.inf
    progress = Progress(args.steps, budget_s, enabled=main_rank and not args.no_progress)
    log = progress.write if main_rank else (lambda msg: None)
    mode = f" ranks={world.world_size} ({'FSDP' if args.fsdp else 'DDP'}, {world.backend})" if world.distributed else ""
    log(f"demo: task={args.task} impl={args.impl} config={args.config} decoder={args.decoder} device={device}{mode} "
        f"params={n_params} threads={torch.get_num_threads()} start step={step}")
    if not history["dev"] and (args.steps is None or args.steps > step):
        history["dev"].append({"step": step, "seconds": 0.0,
                               **evaluate_dev()})
    module.train()
    start_step, t_start = step, time.monotonic()
    t_offset = history["dev"][-1].get("seconds", 0.0) if history["dev"] else 0.0  # training time before this run
    step_times, frames_done, seqs_done, ema = [], 0, 0, None
    info = {}
    done = args.steps is not None and step >= args.steps
    while not done:
        for s in train_loader.steps(epoch, batch_in_epoch):
            t0 = time.perf_counter()
            clock.start()
            model.set_train_step(step)  # SpecAugment's schedule (speech)
            weight = 1.0 if s.has_data else 0.0
            part = train_step(module, optimizer, params, pad_to_multiple(s.batch, args.pad_to_multiple).to(device),
                              s.labels, s.seqs, lr_at(step, args.lr, preset["warmup"]), world.world_size * weight)
            step += 1
            batch_in_epoch += s.batches
            elapsed = time.monotonic() - t_start
            over_time = elapsed >= budget_s
            if world.distributed:  # the step's loss, and whether any rank ran out of time (all stop together)
                total = all_reduce_sum(torch.stack([part.float() * weight, part.new_tensor(float(over_time))]), world)
                loss_value, over = total.tolist()  # one device read per step, for the log
                over_time = over > 0
            else:
                loss_value = float(part)
            if not clock.stop(time.perf_counter() - t0):
                step_times.append(time.perf_counter() - t0)
            frames_done += s.frames
            seqs_done += s.seqs
            history["train"].append([step, loss_value])
            ema = loss_value if ema is None else 0.9 * ema + 0.1 * loss_value
            info = {"loss": f"{ema:.3f}", "steps/s": f"{(step - start_step) / elapsed:.2f}",
                    "frames/s": f"{frames_done / frame_samples / elapsed:.0f}"}
            if args.compile:  # step time without compiling, and the compile time apart
                info["step"] = f"{1000 * statistics.median(step_times):.0f}ms" if step_times else "-"
                info["compile"] = f"{clock.seconds:.0f}s/{clock.graphs} graphs"
            if history["dev"]:
                info.update(dev_info(history["dev"][-1]))
            info["audio"] = f"{frames_done / 16000 / elapsed:.0f}x realtime" if to_text is not None else None
            if info["audio"] is None:
                del info["audio"]
            done = (args.steps is not None and step >= args.steps) or over_time
            if step % args.eval_every == 0 or done:
                ev = evaluate_dev()
                history["dev"].append({"step": step, "seconds": round(t_offset + elapsed, 2), **ev})
                info.update(dev_info(ev))
                log(f"step {step}: train loss {ema:.3f}  dev loss {ev['loss']:.3f}  "
                    + "  ".join(f"{k} {v}" for k, v in dev_info(ev).items()))
                save()
            if main_rank:
                progress.update(step, elapsed, info, start_step)
            if done:
                break
        else:
            epoch, batch_in_epoch = epoch + 1, 0
    progress.close()
    train_s = time.monotonic() - t_start
    if step > start_step and (not history["dev"] or history["dev"][-1]["step"] != step):
        history["dev"].append({"step": step, "seconds": round(t_offset + train_s, 2),
                               **evaluate_dev()})
    if saved[0] != (step, len(history["dev"])):
        save()
    dev = history["dev"]
    final_dev, examples = None, []
    if to_text is not None and (args.beam_size > 1 or args.decode_examples > 0):
        # The final model once more with the CTC prefix beam search (lexicon-constrained), and examples.
        final_dev = {"step": step, **evaluate_dev(beam=args.beam_size, examples=examples)}
    summary = {
        "impl": args.impl, "config": args.config, "device": str(device), "torch": torch.__version__,
        "threads": torch.get_num_threads(), "world_size": world.world_size,
        "parallel": None if not world.distributed else "fsdp" if args.fsdp else "ddp", "params": n_params,
        "model_config": model_cfg.to_dict(), "decoder": args.decoder, "decoder_config": dec_dict,
        "task_config": task_cfg.to_dict(),
        "step": step, "steps_this_run": step - start_step, "train_seconds_this_run": round(train_s, 2),
        "median_step_seconds": statistics.median(step_times) if step_times else None,
        "compile": {"mode": args.compile_mode, "backend": args.compile_backend, "graphs": clock.graphs, "steps_that_compiled": clock.steps,
                    "seconds": round(clock.seconds, 2)}
        if args.compile else None,
        "steps_per_s": (step - start_step) / train_s if train_s > 0 else None,
        "frames_per_s": frames_done / frame_samples / train_s if train_s > 0 else None,
        "frames_are": "feature frames (10 ms of audio)" if to_text is not None else "input frames",
        "audio_seconds_per_s": frames_done / 16000 / train_s if train_s > 0 and to_text is not None else None,
        "sequences_per_s": seqs_done / train_s if train_s > 0 else None,
        "final_train_loss": history["train"][-1][1] if history["train"] else None,
        "dev": dev, "final_dev_ler": dev[-1]["ler"] if dev else None,
        "best_dev_ler": min(d["ler"] for d in dev) if dev else None,
        "final_dev_aed_ler": dev[-1].get("aed_ler") if dev else None,
        "best_dev_aed_ler": min((d["aed_ler"] for d in dev if "aed_ler" in d), default=None),
        "task": args.task, "frontend_config": frontend.to_dict() if frontend is not None else None,
        "final_dev_wer": dev[-1].get("wer") if dev else None, "final_dev_cer": dev[-1].get("cer") if dev else None,
        "best_dev_wer": min((d["wer"] for d in dev if "wer" in d), default=None),
        "final_dev_beam": final_dev, "decode_examples": [list(e) for e in examples[:args.decode_examples]],
        "checkpoint": str(ckpt_path), "plot": str(out / PLOT),
    }
    if main_rank:
        write_json(out / SUMMARY, summary)
        what = "Conformer + CTC" + (" + attention decoder" if dec_cfg is not None else "")
        ranks = f", {world.world_size} ranks" if world.distributed else ""
        write_plot(out / PLOT, history, f"{what} ({args.impl}, {args.config}{ranks}, {n_params} params)")
        for ref, hyp in examples[:args.decode_examples]:
            print(f"  ref: {ref}\n  hyp: {hyp}" + ("" if ref == hyp else "   (wrong)"), flush=True)
        if to_text is not None and dev:
            final = f"dev WER {100 * dev[-1]['wer']:.1f}%, CER {100 * dev[-1]['cer']:.1f}% (greedy CTC)"
            if final_dev is not None and "wer_beam" in final_dev:
                final += (f", WER {100 * final_dev['wer_prefix_beam']:.1f}% (prefix beam search {args.beam_size}), "
                          f"{100 * final_dev['wer_beam']:.1f}% (with the lexicon)")
            if "aed_wer" in dev[-1]:
                final += f", attention decoder WER {100 * dev[-1]['aed_wer']:.1f}%"
        else:
            final = f"dev LER {100 * summary['final_dev_ler']:.1f}%" if dev else "dev LER n/a"
            if dev and summary["final_dev_aed_ler"] is not None:
                final += f", attention decoder {100 * summary['final_dev_aed_ler']:.1f}%"
        print(f"demo: step {step}, {final}; wrote {out / SUMMARY}, {out / PLOT}, {ckpt_path}", flush=True)
    return summary


if __name__ == "__main__":
    main()
