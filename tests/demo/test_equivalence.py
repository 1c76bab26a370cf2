"""The dimtorch demo model (demo/dimtorch_model.py) against the hand-written PyTorch reference
(demo/reference_model.py): same weights give the same loss, logits and gradients (fp32, 1e-5
relative), the same batch-norm running statistics, and the same losses over a few training steps."""
import sys
from pathlib import Path

import pytest
import torch

import dimtorch as dt

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from demo.data import SequenceDataset, collate  # noqa: E402
from demo.reference_model import ConformerCTC, ModelConfig  # noqa: E402

from demo_batches import TASK, dev_batch as _batch  # noqa: E402

CFG = ModelConfig(in_dim=12, num_labels=7, model_dim=32, num_layers=2, num_heads=4, ff_dim=64, conv_kernel_size=5,
                  subsample_channels=(4, 4), dropout=0.0, att_dropout=0.0)


def _pair(cfg=CFG):
    from demo.dimtorch_model import DimtorchConformerCTC
    torch.manual_seed(0)
    ref = ConformerCTC(cfg)
    ours = DimtorchConformerCTC(cfg)
    ours.load_reference_state_dict(ref.state_dict())
    return ref, ours


def test_state_dict_names_map_one_to_one():
    from demo.dimtorch_model import DimtorchConformerCTC
    from demo.reference_model import reference_state_dict_to_dimtorch
    ref_sd, ours_sd = ConformerCTC(CFG).state_dict(), DimtorchConformerCTC(CFG).state_dict()
    mapped = reference_state_dict_to_dimtorch(ref_sd)
    assert set(mapped) == set(ours_sd)
    assert all(tuple(mapped[k].shape) == tuple(ours_sd[k].shape) for k in mapped)


def _grads(model):
    return {k.replace(".scale", ".weight"): p.grad for k, p in model.named_parameters()}


@pytest.mark.parametrize("with_empty", [False, True])
def test_same_loss_logits_and_gradients(with_empty):
    ref, ours = _pair()
    batch = _batch(with_empty=with_empty)
    loss_r, logits_r, len_r = ref.loss(*batch)
    loss_o, logits_o, len_o = ours.loss(*batch)
    assert torch.equal(len_r, len_o)
    torch.testing.assert_close(loss_o, loss_r, rtol=1e-5, atol=0)
    for b, n in enumerate(len_r.tolist()):  # only valid frames are defined
        torch.testing.assert_close(logits_o[b, :n], logits_r[b, :n], rtol=1e-5, atol=1e-5)
    loss_r.backward()
    loss_o.backward()
    g_r, g_o = _grads(ref), _grads(ours)
    assert set(g_r) == set(g_o)
    scale = max(g.abs().max() for g in g_r.values())
    for k in g_r:
        # Relative to the largest gradient: some are 0 in exact arithmetic (a bias before batch norm).
        torch.testing.assert_close(g_o[k], g_r[k], rtol=1e-5, atol=1e-5 * float(scale), msg=k)
    for k, v in ref.state_dict().items():  # running statistics of the masked batch norm
        if "running" in k:
            torch.testing.assert_close(ours.state_dict()[k], v, rtol=1e-5, atol=1e-6)


def test_eval_mode_same_logits():
    ref, ours = _pair()
    ref.eval()
    ours.eval()
    batch = _batch()
    with torch.no_grad():
        logits_r, len_r = ref(batch.features, batch.feature_lengths)
        logits_o, len_o = ours(batch.features, batch.feature_lengths)
    for b, n in enumerate(len_r.tolist()):
        torch.testing.assert_close(logits_o[b, :n], logits_r[b, :n], rtol=1e-5, atol=1e-5)


def test_loss_curves_match_for_first_steps():
    ref, ours = _pair()
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (ref, ours)]
    ds = SequenceDataset(TASK, "train", 20)
    losses = [[], []]
    for step in range(4):
        batch = collate([ds[i] for i in range(5 * step, 5 * step + 5)])
        for i, (model, opt) in enumerate(zip((ref, ours), opts)):
            loss, _, _ = model.loss(*batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses[i].append(float(loss.detach()))
    torch.testing.assert_close(torch.tensor(losses[1]), torch.tensor(losses[0]), rtol=1e-4, atol=0)
