"""Tests of bench/check_syncs.py where there is no GPU: it skips cleanly, and its ops run on the CPU."""
import torch

from sync_checks import check_syncs as load


def test_skips_without_cuda(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert load().main([]) == 0
    assert capsys.readouterr().out.strip() == "skipped: no CUDA"


def test_every_op_runs_on_cpu(capsys):
    mod = load()
    assert mod.main(["--cpu"]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "0 failures" in out and "batch_norm masked (train)" in out


def test_copy_counter_sees_blocking_copies():
    mod = load()
    src = torch.ones(3)
    before = {n: torch.Tensor.__dict__.get(n) for n in ("to", "copy_", "cuda")}
    with mod.CopyCounter() as c:
        src.to("meta")  # not a CUDA device, but a host-to-device copy all the same
        src.to("meta", non_blocking=True)
        torch.empty(3, device="meta").copy_(src, True)
    assert (c.copies, c.blocking) == (3, 1)
    assert {n: torch.Tensor.__dict__.get(n) for n in before} == before  # torch.Tensor restored


def test_every_op_passes_the_meta_check(capsys):
    """The check that needs no GPU: on the meta device a read of device values raises, and the copy
    counter applies as on CUDA (lengths copied once per dim, non_blocking)."""
    assert load().main(["--meta"]) == 0, capsys.readouterr().out
    assert "37 ops, 0 failures" in capsys.readouterr().out


def test_meta_check_catches_device_reads_and_blocking_copies(capsys, monkeypatch):
    mod = load()
    bad = [
        ("reads a device value", lambda s: [s.x * float(s.x.raw.detach().sum())]),
        ("data-dependent shape", lambda s: [s.x * s.x.raw.nonzero().shape[0]]),
        ("blocking copy", lambda s: [s.x * s.bias.raw.new_tensor([2.0]).cpu().to(s.device)[0]]),
    ]
    monkeypatch.setattr(mod, "_ops", lambda: bad)
    assert mod.main(["--meta"]) == 1
    out = capsys.readouterr().out
    for name, _ in bad:
        assert f"FAIL {name} [steady]" in out, out
