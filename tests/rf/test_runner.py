"""dimtorch.rf.runner: a RETURNN-style setup (get_model, train_step, forward_step, extern_data) trained on
random padded batches (the loss falls, the setup's per-parameter weight decay reaches the optimizer), run
forward, and the `python -m dimtorch.rf.runner` entry point (train, save a RETURNN checkpoint, forward)."""
import os
import subprocess
import sys

import pytest
import torch

import dimtorch as dt
from dimtorch.rf import runner
import rf_runner_setup as setup

# The setup's dims are module globals: the dims derived from them (an LSTM's gate dim) are cached on them.
pytestmark = pytest.mark.allow_leaks

SETUP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rf_runner_setup.py")


def test_train_loss_falls_and_forward():
    logged = []
    result = runner.train(setup, setup.train_batches, epochs=2, learning_rate=1e-2, log=logged.append)
    assert result.step == 60 and result.epoch == 2 and len(result.losses) == 60
    first = sum(l["ce"] for l in result.losses[:5]) / 5
    last = sum(l["ce"] for l in result.losses[-5:]) / 5
    assert last < 0.5 * first, (first, last)
    assert result.losses[-1]["fer"] < result.losses[0]["fer"]
    assert all(set(l) == {"ce", "fer", "total"} for l in result.losses)
    assert logged[0].startswith("dimtorch.rf.runner: epoch 1 step 0: ce ")
    assert {g["weight_decay"] for g in result.optimizer.param_groups} == {1e-5}
    outputs = list(runner.forward(setup, setup.forward_batches(), model=result.model))
    out = outputs[0]["output"]
    batch = setup.forward_batches()[0]
    lengths = batch["data:seq_len"]
    valid = torch.arange(out.raw.shape[1])[None, :] < lengths[:, None]
    correct = (out.raw == (batch["data"] + 1) % setup.VOCAB)[valid].float().mean()
    assert correct > 0.7, correct  # the tagger learned much of the mapping


def test_train_options():
    result = runner.train(setup, setup.train_batches(epoch=1), num_steps=3, optimizer="adamw", weight_decay=0.1,
                          gradient_clip=1.0, gradient_clip_global_norm=5.0, log=None, log_every=2)
    assert result.step == 3 and len(result.losses) == 3
    assert {g["weight_decay"] for g in result.optimizer.param_groups} == {0.1, 0.0}
    assert isinstance(result.optimizer, torch.optim.AdamW)


def test_batch_formats():
    """RETURNN's "name:size<i>" keys, "name:seq_len", and (padded, lengths) pairs bind alike."""
    ed = runner.make_extern_data(setup)
    data = torch.randint(0, 7, (2, 4))
    lengths = torch.tensor([4, 2])
    for batch in ({"data": data, "data:size1": lengths, "classes": data, "classes:size1": lengths},
                  {"data": data, "data:seq_len": lengths, "classes": (data, lengths)}):
        bound = runner.bind_batch(ed, batch)
        x = bound["data"]
        assert x.raw.shape == (2, 4) and x.sparse_dim is setup.vocab_dim
        assert x.dims[1].lengths.raw.tolist() == [4, 2]


def test_command_line(tmp_path):
    ckpt = tmp_path / "model.pt"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(SETUP)] + sys.path))
    proc = subprocess.run([sys.executable, "-m", "dimtorch.rf.runner", SETUP, "--steps", "4", "--lr", "0.01",
                           "--save", str(ckpt)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("dimtorch.rf.runner: epoch 1 step") == 4
    state = torch.load(ckpt, weights_only=True)
    assert state["step"] == 4 and "lstm.ff_weight" in state["model"]
    proc = subprocess.run([sys.executable, "-m", "dimtorch.rf.runner", SETUP, "--forward", "--load", str(ckpt)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "batch 0: output: (" in proc.stdout
