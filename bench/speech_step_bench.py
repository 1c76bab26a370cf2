"""Training-step time of the speech demo's model (waveforms in: log-mel front end, SpecAugment, Conformer, CTC),
dimtorch vs the hand-written PyTorch twin, interleaved on the same corpus batches (bench/train_bench.py's
`interleaved` and `summarize`: the ratio is the median of paired per-round ratios), and the front end alone
(log-mel features with and without SpecAugment, forward only) the same way.

    python bench/speech_step_bench.py              # the main job's batches (16 s of audio), CPU, 1 thread
    python bench/speech_step_bench.py --rounds 20 --batches 6

Prints a Markdown table: median ms per step, steps/s, 10 ms frames/s and the ratio with its quartiles.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import torch  # noqa: E402

from demo import train  # noqa: E402
from demo.data import StepLoader  # noqa: E402
from demo.speech.corpus import SpeechDataset  # noqa: E402
from train_bench import interleaved, make_train_step, summarize  # noqa: E402


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=16, help="timed rounds (each: one step per implementation)")
    p.add_argument("--batches", type=int, default=8, help="distinct training batches cycled through")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    preset = train.preset_of("speech", "small")
    data = SpeechDataset(preset["task"], "train")
    loader = StepLoader(data, max_frames=preset["batch_frames"], shuffle=True, seed=0)
    batches = [s.batch for _, s in zip(range(args.batches), loader.steps(0))]
    torch.manual_seed(0)
    models = {"torch": train.build_model("torch", preset["model"], None, preset["frontend"]),
              "dimtorch": train.build_model("dimtorch", preset["model"], None, preset["frontend"])}
    models["dimtorch"].load_reference_state_dict(models["torch"].state_dict())
    for m in models.values():
        m.set_train_step(0)
    steps = {k: make_train_step(m, torch.device("cpu")) for k, m in models.items()}
    step = summarize(interleaved(steps, batches, args.rounds, warmup=2))

    def frontend(name):
        m = models[name]
        if name == "torch":
            return lambda b: m.frontend(b.features, b.feature_lengths)
        return lambda b: m.features(b.features, b.feature_lengths)
    with torch.no_grad():  # the front end with SpecAugment (training), and without (log-mel only)
        fe_train = summarize(interleaved({k: frontend(k) for k in models}, batches, args.rounds, warmup=2))
        for m in models.values():
            m.eval()
        fe = summarize(interleaved({k: frontend(k) for k in models}, batches, args.rounds, warmup=2))
    frames = sum(int(train.FrontendConfig().frames(b.feature_lengths).sum()) for b in batches) / len(batches)
    audio = sum(int(b.feature_lengths.sum()) for b in batches) / len(batches) / 16000
    lines = [f"batches: {len(batches)} of {audio:.1f} s of audio ({frames:.0f} frames) on average, "
             f"{args.rounds} rounds, {torch.get_num_threads()} thread(s)", "",
             "| what | torch ms | dimtorch ms | dimtorch / torch (quartiles) | steps/s torch / dimtorch | "
             "frames/s torch / dimtorch |", "|---|---:|---:|---:|---:|---:|"]
    for what, r in (("training step", step), ("front end + SpecAugment (forward)", fe_train),
                    ("front end, log-mel only (forward)", fe)):
        t, d = r["torch"]["median_ms"], r["dimtorch"]["median_ms"]
        q = r["ratio_quartiles"]
        lines.append(f"| {what} | {t:.1f} | {d:.1f} | {r['ratio']:.3f} ({q[0]:.3f}-{q[2]:.3f}) | "
                     f"{1e3 / t:.2f} / {1e3 / d:.2f} | {frames * 1e3 / t:.0f} / {frames * 1e3 / d:.0f} |")
    print("\n".join(lines))
    return {"step": step, "frontend_train": fe_train, "frontend": fe}


if __name__ == "__main__":
    main()
