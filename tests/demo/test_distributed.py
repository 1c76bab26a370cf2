"""Data-parallel training of the demo (demo/train.py, demo/distributed.py), on CPU with gloo: 2 ranks step
as one process on the combined batch (DDP and FSDP2, both models), torchrun runs write and resume
(another number of ranks, sharded checkpoints), and a rank that dies ends the job with a message and
an intact checkpoint."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from demo import train  # noqa: E402
from demo.checkpoint import load_checkpoint  # noqa: E402
from demo.data import SequenceDataset, StepLoader, collate  # noqa: E402
from demo.distributed import LossModule, World, parallelize  # noqa: E402
from demo.reference_model import ModelConfig  # noqa: E402

from repo_scripts import free_port, init_gloo_group  # noqa: E402

pytestmark = [pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available"),
              pytest.mark.slow]  # process groups and torchrun jobs

WORLD = 2
SEQS, FRAMES = 13, 50  # 7 bucket batches: the last of 4 steps gives rank 1 a stand-in
COMBOS = [("dimtorch", False), ("torch", False), ("dimtorch", True), ("torch", True)]  # (impl, fsdp)


def _setup(impl):
    preset = train.PRESETS["tiny"]
    cfg = ModelConfig(**{**preset["model"].to_dict(), "subsample_channels": preset["model"].subsample_channels,
                         "dropout": 0.0, "att_dropout": 0.0})
    torch.manual_seed(0)
    # float64: batch norm cancels the depthwise conv's bias, whose gradient is then rounding noise, which
    # AdamW's normalization turns into +-lr steps; in float64 that noise is far below AdamW's eps.
    model = train.build_model(impl, cfg).double()
    ds = SequenceDataset(preset["task"], "train", SEQS)
    return model, ds


def _double(batch):
    return type(batch)(batch.features.double(), *batch[1:])


def _run_ranks(rank, out_dir):
    torch.set_num_threads(1)
    init_gloo_group(rank, WORLD, out_dir)
    try:
        world = World(rank, WORLD, rank, "gloo")
        results = {}
        for impl, fsdp in COMBOS:
            model, ds = _setup(impl)
            module = parallelize(model, impl, world, fsdp)
            params = list(module.parameters())
            opt = torch.optim.AdamW(params, lr=1e-2)
            losses, stand_ins = [], 0
            for step in StepLoader(ds, max_frames=FRAMES, seed=1, rank=rank, world_size=WORLD).steps(0):
                weight = 1.0 if step.has_data else 0.0
                stand_ins += not step.has_data
                part = train.train_step(module, opt, params, _double(step.batch), step.labels, step.seqs, 1e-2,
                                        WORLD * weight)
                total = part * weight
                dist.all_reduce(total)
                losses.append(total)
            full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in params]
            results[(impl, fsdp)] = {"losses": torch.stack(losses), "params": [p.detach().clone() for p in full],
                                     "buffers": [b.clone() for b in model.buffers()], "stand_ins": stand_ins}
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _one_process(impl):
    """One process on each step's combined batch (rank 0's sequences, then rank 1's)."""
    model, ds = _setup(impl)
    module = LossModule(model)
    params = list(module.parameters())
    opt = torch.optim.AdamW(params, lr=1e-2)
    ranks = [StepLoader(ds, max_frames=FRAMES, seed=1, rank=r, world_size=WORLD) for r in range(WORLD)]
    losses = []
    for shares in zip(*(loader.shares(0) for loader in ranks)):
        everyone = [i for mine, _, _ in shares for i in mine]
        batch = _double(collate([ds[i] for i in everyone]))
        labels = sum(ds.target_lengths[i] for i in everyone)
        losses.append(train.train_step(module, opt, params, batch, labels, len(everyone), 1e-2, 1.0))
    return torch.stack(losses), list(params), list(model.buffers())


def test_two_ranks_step_as_one_process_on_the_combined_batch(tmp_path):
    """DDP and FSDP2, both models, 4 AdamW steps (the last with a stand-in on rank 1): the step's loss
    (the mean over all labels of both ranks' batches) and the parameters and batch-norm statistics
    after it equal one process on the combined batches, 1e-5."""
    mp.spawn(_run_ranks, args=(str(tmp_path),), nprocs=WORLD, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    for impl in ("dimtorch", "torch"):
        losses, params, buffers = _one_process(impl)
        assert len(losses) == 4
        for fsdp in (False, True):
            got = ranks[0][(impl, fsdp)]
            assert ranks[1][(impl, fsdp)]["stand_ins"] == 1 and got["stand_ins"] == 0
            torch.testing.assert_close(got["losses"], losses.detach(), rtol=1e-5, atol=0)
            for r in ranks:
                for a, b in zip(r[(impl, fsdp)]["params"], params):
                    torch.testing.assert_close(a, b.detach(), rtol=1e-5, atol=1e-8)
                for a, b in zip(r[(impl, fsdp)]["buffers"], buffers):
                    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-8)


def _torchrun(nproc, *args, timeout=240):
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--master_port",
           str(free_port()), str(ROOT / "demo" / "train.py"), "--task", "synthetic", "--config", "tiny", "--no-progress", *args]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run


def _children(pid):
    kids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(p.name))
            except (OSError, IndexError, ValueError):
                pass
    return kids


def _rank_of(pid):
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(int(e.split(b"=", 1)[1]) for e in env if e.startswith(b"RANK="))


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the ranks' processes in /proc")
def test_a_rank_dying_ends_the_job_with_a_message_and_an_intact_checkpoint(tmp_path):
    out = tmp_path / "dying"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port", str(free_port()),
           str(ROOT / "demo" / "train.py"), "--task", "synthetic", "--config", "tiny", "--no-progress", "--steps", "100000",
           "--eval-every", "1", "--out", str(out)]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        deadline = time.monotonic() + 180
        while not (out / "checkpoint.pt").exists() or load_checkpoint(out / "checkpoint.pt", "dimtorch")["step"] < 2:
            assert job.poll() is None and time.monotonic() < deadline, "no checkpoint of step 2 in time"
            time.sleep(0.2)
        victim = next(pid for pid in _children(job.pid) if _rank_of(pid) == 1)
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        output, _ = job.communicate(timeout=60)
        took = time.monotonic() - killed
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode != 0
    assert took < 30, f"the job took {took:.1f} s to end after a rank died"
    assert "Signal 9 (SIGKILL) received by PID" in output  # torchrun's report names the dead rank
    assert "The last good checkpoint" in output and "is intact; continue with --resume" in output  # rank 0
    state = load_checkpoint(out / "checkpoint.pt", "dimtorch")
    assert state["step"] >= 2 and not list(out.glob("*.tmp"))


def _aed_run(tmp_path, name, *args, timeout=240):
    out = tmp_path / name
    run = _torchrun(2, "--decoder", "aed", "--steps", "2", "--out", str(out), *args, timeout=timeout)
    return json.loads((out / "summary.json").read_text()), run


def test_torchrun_ddp_and_fsdp_train_alike_and_resume_with_another_number_of_ranks(tmp_path):
    """--decoder aed, 2 ranks, 2 steps (the tiny config evaluates at steps 0 and 2), with FSDP2 and with DDP
    compiled. The dev evaluation gathers the parameters once (demo.distributed.unsharded_for_evaluation), so each
    rank's greedy attention decoding runs its own number of decoder steps without desynchronizing FSDP's
    collectives; its figures equal DDP's (the same weights at step 0, the same steps up to float32 rounding at
    step 2). DDP runs with --compile: the whole step compiles, Dynamo's DDP optimizer splitting the graph at the
    gradient buckets (so not fullgraph), and trains as FSDP2's eager step does. Backend eager: Dynamo's capture,
    the part that meets DDP (AOTAutograd and inductor compile this step on one process: test_compile.py; each
    would cost every rank its own ~8 and ~60 CPU-s here). (FSDP2 compiles each sharded layer instead:
    test_torchrun_fsdp_compiled_trains_the_attention_decoder.) Both resume with one rank: FSDP's sharded
    checkpoint under torchrun, DDP's full one in this process."""
    fsdp, run = _aed_run(tmp_path, "fsdp", "--fsdp")
    assert "ranks=2 (FSDP, gloo)" in run.stdout
    ddp, run = _aed_run(tmp_path, "ddp", "--compile", "--compile-backend", "eager", timeout=900)
    assert fsdp["parallel"] == "fsdp" and fsdp["decoder"] == "aed" and fsdp["step"] == 2
    assert ddp["parallel"] == "ddp" and ddp["world_size"] == 2 and ddp["step"] == 2
    assert ddp["compile"]["backend"] == "eager" and ddp["compile"]["graphs"] >= 1, run.stdout
    assert fsdp["final_dev_aed_ler"] is not None and torch.isfinite(torch.tensor(fsdp["final_train_loss"]))
    assert [d["step"] for d in fsdp["dev"]] == [d["step"] for d in ddp["dev"]] == [0, 2]
    for a, b in zip(fsdp["dev"], ddp["dev"]):
        assert a["ler"] == b["ler"] and a["aed_ler"] == b["aed_ler"], (a, b)
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)
    assert fsdp["final_train_loss"] == pytest.approx(ddp["final_train_loss"], rel=1e-4)

    # FSDP: the sharded checkpoint of 2 ranks resumes on 1; the old shards go
    out = tmp_path / "fsdp"
    first = load_checkpoint(out / "checkpoint.pt", "dimtorch")["sharded"]
    assert (out / first / ".metadata").is_file()
    _torchrun(1, "--decoder", "aed", "--fsdp", "--steps", "3", "--out", str(out), "--resume")
    state = load_checkpoint(out / "checkpoint.pt", "dimtorch")
    assert state["step"] == 3 and state["world_size"] == 1
    assert [p.name for p in out.glob("sharded-step-*")] == [state["sharded"]]
    with pytest.raises(SystemExit, match="was written with --fsdp"):
        train.main(["--task", "synthetic", "--config", "tiny", "--no-progress", "--decoder", "aed", "--out", str(out),
                    "--steps", "4", "--resume"])

    # DDP: what the 2 ranks wrote, then one process goes on where they stopped (the epoch position counts
    # bucket batches)
    out = tmp_path / "ddp"
    assert (out / "training.png").read_bytes()[:4] == b"\x89PNG" and not list(out.glob("*.tmp*"))
    state = load_checkpoint(out / "checkpoint.pt", "dimtorch")  # weights_only=True inside
    assert state["world_size"] == 2 and len(state["rng_cpu_ranks"]) == 2
    resumed = train.main(["--task", "synthetic", "--config", "tiny", "--no-progress", "--decoder", "aed", "--out",
                          str(out), "--steps", "3", "--resume"])
    assert resumed["step"] == 3 and resumed["world_size"] == 1 and resumed["final_dev_aed_ler"] is not None
    state = load_checkpoint(out / "checkpoint.pt", "dimtorch")
    assert state["batch_in_epoch"] == 2 * 2 + 1 or state["epoch"] > 0


@pytest.mark.slow
def test_torchrun_fsdp_compiled_trains_the_attention_decoder(tmp_path):
    """--fsdp --compile --decoder aed: the encoder's and decoder's sharded layers compile (fullgraph) for the
    training step, each once for all batch shapes (6 steps of new batches: a graph per layer kind and at most a
    bounded recompile, not one per batch: a layer compiled on its own gets each batch's new Dims as inputs); the
    dev evaluation runs them eagerly, parameters gathered once. Backend eager: Dynamo's capture, which decides
    the graphs, around FSDP2's hooks (which run outside the compiled forward); AOTAutograd of the same layers is
    tested on one process (tests/capture/test_compile.py, test_compile.py's inductor step)."""
    summary, _ = _aed_run(tmp_path, "fsdp_compiled", "--fsdp", "--compile", "--compile-backend", "eager",
                          "--steps", "6", "--eval-every", "3", timeout=900)
    assert summary["step"] == 6 and summary["final_dev_aed_ler"] is not None
    assert 2 <= summary["compile"]["graphs"] <= 4, summary["compile"]  # measured: 3 (a stride guard recompiles)
    assert torch.isfinite(torch.tensor(summary["final_train_loss"]))
