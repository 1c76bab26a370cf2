"""The demo's optional attention decoder (--decoder aed): dimtorch's model (dt.nn.TransformerDecoder,
dt.cross_entropy, dt.ctc_loss) against the hand-written PyTorch reference (demo/reference_decoder.py):
same joint loss and gradients (fp32, 1e-5 relative), length-0 targets and inputs included, the same
greedy labels (dimtorch step by step with state, the reference re-running the prefix), targets with
EOS at each sequence's own end, and batch independence of the reference."""
import sys
from pathlib import Path

import pytest
import torch

import dimtorch as dt

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from demo.aed_decode import GreedyHypotheses  # noqa: E402
from demo.data import SequenceDataset, collate  # noqa: E402
from demo.reference_decoder import IGNORE_INDEX, aed_targets  # noqa: E402
from demo.reference_model import ConformerCTC, DecoderConfig, ModelConfig, sequence_mask  # noqa: E402

from demo_batches import TASK, dev_batch as _batch  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(dt.nn, "TransformerDecoder"),
                                reason="dimtorch.nn.TransformerDecoder missing")

CFG = ModelConfig(in_dim=12, num_labels=7, model_dim=32, num_layers=1, num_heads=4, ff_dim=64, conv_kernel_size=5,
                  subsample_channels=(4, 4), dropout=0.0, att_dropout=0.0)
DEC = DecoderConfig(num_layers=2, ff_dim=48)


def _pair(decoder_steps=0):
    """(reference, dimtorch model) with the same weights; the reference's decoder first trained for a few
    steps (an untrained one says EOS at once or never: greedy decoding would only see one case)."""
    from demo.dimtorch_model import DimtorchConformerCTC
    torch.manual_seed(0)
    ref = ConformerCTC(CFG, DEC)
    if decoder_steps:
        ds = SequenceDataset(TASK, "train", 8)
        batch = collate([ds[i] for i in range(8)])
        opt = torch.optim.AdamW(ref.decoder.parameters(), lr=1e-2)
        for _ in range(decoder_steps):
            loss, _, _ = ref.loss(*batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
        ref.zero_grad(set_to_none=True)
    ours = DimtorchConformerCTC(CFG, DEC)
    ours.load_reference_state_dict(ref.state_dict())
    return ref, ours


def _grads(model):
    return {k.replace(".scale", ".weight"): p.grad for k, p in model.named_parameters()}


def test_decoder_state_dict_names_map_one_to_one():
    from demo.dimtorch_model import DimtorchConformerCTC
    ref_sd = ConformerCTC(CFG, DEC).state_dict()
    ours_sd = DimtorchConformerCTC(CFG, DEC).state_dict()
    mapped = dt.nn.torch_state_dict_to_dimtorch(DimtorchConformerCTC(CFG, DEC), ref_sd)
    assert set(mapped) == set(ours_sd) and any(k.startswith("decoder.layers.1.cross_att.kv") for k in mapped)
    assert all(tuple(mapped[k].shape) == tuple(ours_sd[k].shape) for k in mapped)
    assert set(ConformerCTC(CFG).state_dict()) == {k for k in ref_sd if not k.startswith("decoder.")}


@pytest.mark.parametrize("with_empty", [False, True])
def test_same_joint_loss_and_gradients(with_empty):
    ref, ours = _pair()
    batch = _batch(with_empty=with_empty)
    loss_r, _, _ = ref.loss(*batch)
    loss_o, _, _ = ours.loss(*batch)
    torch.testing.assert_close(loss_o, loss_r, rtol=1e-5, atol=0)
    loss_r.backward()
    loss_o.backward()
    g_r, g_o = _grads(ref), _grads(ours)
    assert set(g_r) == set(g_o)
    assert all(torch.isfinite(g).all() for g in g_r.values())
    scale = max(g.abs().max() for g in g_r.values())
    for k in g_r:
        # Relative to the largest gradient: some are 0 in exact arithmetic (a bias before batch norm).
        torch.testing.assert_close(g_o[k], g_r[k], rtol=1e-5, atol=1e-5 * float(scale), msg=k)
    assert float(g_r["decoder.layers.0.cross_att.kv.weight"].abs().max()) > 0


def test_joint_loss_is_scaled_ctc_plus_ce():
    ref, _ = _pair()
    batch = _batch()
    ctc_only = ConformerCTC(CFG)
    ctc_only.load_state_dict({k: v for k, v in ref.state_dict().items() if not k.startswith("decoder.")})
    ctc, _, _ = ctc_only.loss(*batch)
    joint, _, _ = ref.loss(*batch)
    dec_in, dec_out = aed_targets(batch.targets, batch.target_lengths, ref.eos_index)
    h, out_lengths = ref.encoder(batch.features, batch.feature_lengths)
    logits = ref.decoder(dec_in, h, sequence_mask(out_lengths, h.shape[1], "cpu"))
    per_pos = torch.nn.functional.cross_entropy(logits.transpose(1, 2), dec_out, reduction="none",
                                                ignore_index=IGNORE_INDEX, label_smoothing=DEC.label_smoothing)
    ce = sum(per_pos[b, :n + 1].sum() for b, n in enumerate(batch.target_lengths.tolist()))
    ce = ce / int((batch.target_lengths + 1).sum())
    torch.testing.assert_close(joint, DEC.ctc_scale * ctc + DEC.aed_scale * ce, rtol=1e-5, atol=0)


def test_aed_targets_put_eos_at_each_sequences_end():
    targets = torch.tensor([[3, 1, 2], [0, 0, 0], [4, 5, 0]])
    dec_in, dec_out = aed_targets(targets, torch.tensor([3, 0, 2]), eos=7)
    assert dec_in[0].tolist() == [7, 3, 1, 2] and dec_in[1, 0] == 7 and dec_in[2, :3].tolist() == [7, 4, 5]
    assert dec_out.tolist() == [[3, 1, 2, 7], [7, -100, -100, -100], [4, 5, 7, -100]]


def test_greedy_decoding_gives_the_same_labels():
    ref, ours = _pair(decoder_steps=5)
    ref.eval()
    ours.eval()
    batch = _batch(n=6, with_empty=True)
    hyps_r = ref.aed_greedy_decode(batch.features, batch.feature_lengths)
    hyps_o = ours.aed_greedy_decode(batch.features, batch.feature_lengths)
    assert hyps_o == hyps_r
    limits = [2 * n for n in ((batch.feature_lengths + 3) // 4).tolist()]
    assert hyps_r[2] == [] and limits[2] == 0  # no encoder frames: no labels
    assert all(len(h) <= m for h, m in zip(hyps_r, limits))
    assert any(0 < len(h) < m for h, m in zip(hyps_r, limits))  # some end at EOS after labels
    assert all(ref.eos_index not in h for h in hyps_r)


def test_greedy_decoding_without_decoder_is_a_clear_error():
    from demo.dimtorch_model import DimtorchConformerCTC
    batch = _batch(n=2)
    for model in (ConformerCTC(CFG), DimtorchConformerCTC(CFG)):
        with pytest.raises(ValueError, match=r"ConformerCTC.aed_greedy_decode\(\): this model has no attention"):
            model.aed_greedy_decode(batch.features, batch.feature_lengths)


def test_reference_decoder_is_batch_independent_and_ignores_padding():
    ref, _ = _pair()
    ref.eval()
    ds = SequenceDataset(TASK, "dev", 4)
    items = [ds[i] for i in range(4)]
    batch = collate(items)
    features = batch.features.clone()
    features[~sequence_mask(batch.feature_lengths, features.shape[1], "cpu")] = 1e30
    targets = batch.targets.clone()
    targets[~sequence_mask(batch.target_lengths, targets.shape[1], "cpu")] = 5  # any label in padding

    def logits_of(f, fl, t, tl):
        h, hl = ref.encoder(f, fl)
        dec_in, _ = aed_targets(t, tl, ref.eos_index)
        return ref.decoder(dec_in, h, sequence_mask(hl, h.shape[1], "cpu"))

    with torch.no_grad():
        full = logits_of(features, batch.feature_lengths, targets, batch.target_lengths)
        for i, item in enumerate(items):
            alone = logits_of(*collate([item]))
            n = int(batch.target_lengths[i]) + 1
            torch.testing.assert_close(full[i, :n], alone[0, :n], rtol=1e-5, atol=1e-5)


def test_greedy_hypotheses_stop_at_eos_or_limit():
    hyps = GreedyHypotheses(torch.tensor([2, 0, 1]), eos=9, max_len_factor=1)
    assert hyps.max_steps == 2
    assert hyps.add(torch.tensor([4, 4, 9]))
    assert not hyps.add(torch.tensor([5, 4, 3]))
    assert hyps.hyps == [[4, 5], [], []]
