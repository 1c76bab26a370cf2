"""The waveform model: dimtorch's log-mel front end inside the model against the hand-written twin (frames per
sequence, features, SpecAugment's masks, loss, logits and gradients on the same weights and batch), and batch
independence with noise in the padding."""
import dataclasses

import pytest
import torch

from speech_fixtures import TINY_CORPUS, require_synthesis

require_synthesis()

from demo import train
from demo.speech.corpus import SpeechDataset, collate_audio
from demo.reference_frontend import FrontendConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PRESET = train.SPEECH_PRESETS["tiny"]


def models(decoder=None, dropout=True):
    cfg = PRESET["model"] if dropout else dataclasses.replace(PRESET["model"], dropout=0.0, att_dropout=0.0)
    torch.manual_seed(0)
    ours = train.build_model("dimtorch", cfg, decoder, PRESET["frontend"])
    torch.manual_seed(0)
    ref = train.build_model("torch", cfg, decoder, PRESET["frontend"])
    return ours, ref


@pytest.fixture(scope="module")
def batch(speech_cache):
    ds = SpeechDataset(TINY_CORPUS, "train", root=speech_cache)
    items = [ds[i] for i in range(4)] + [(torch.randn(399) * 0.1, torch.tensor([1])),
                                         (torch.zeros(0), torch.zeros(0, dtype=torch.int64))]
    return collate_audio(items)


def test_frames_per_sequence_by_dim_math_match_the_twin():
    ours, ref = models()
    cfg = PRESET["frontend"]
    samples = torch.tensor([0, 1, 399, 400, 401, 559, 560, 561, 16000, 12345])
    audio = torch.randn(len(samples), int(samples.max()))
    _, _, frames = ours.eval().features(audio, samples)
    _, ref_frames = ref.eval().frontend(audio, samples)
    expected = [max(0, (n - 400) // 160 + 1) for n in samples.tolist()]
    assert frames.lengths.raw.tolist() == ref_frames.tolist() == cfg.frames(samples).tolist() == expected


@pytest.mark.parametrize("training", [False, True])
def test_same_loss_logits_and_gradients_as_the_twin(batch, training):
    """Same weights, same batch (with a 399-sample and a 0-sample utterance): the same features, loss, logits
    and gradients (1e-5); in training too, where both draw the same dropout and SpecAugment masks."""
    ours, ref = models()
    ours.train(training), ref.train(training)
    for m in (ours, ref):
        m.set_train_step(2500)  # SpecAugment's last stage: the most masks
    results = []
    for m in (ours, ref):
        torch.manual_seed(7)
        loss, logits, lengths = m.loss(*batch)
        loss.backward()
        grads = {k: p.grad.clone() for k, p in m.named_parameters()}
        results.append((loss, logits, lengths, grads))
    (l1, g1, n1, d1), (l2, g2, n2, d2) = results
    assert n1.tolist() == n2.tolist()
    torch.testing.assert_close(l1, l2, rtol=1e-5, atol=1e-6)
    for b, n in enumerate(n1.tolist()):
        torch.testing.assert_close(g1[b, :n], g2[b, :n], rtol=1e-5, atol=1e-5)
    names = {k.replace("layer_norm.scale", "layer_norm.weight").replace("norm.scale", "norm.weight"): k for k in d1}
    assert set(names) == set(d2)
    for k, v in d2.items():
        torch.testing.assert_close(d1[names[k]], v, rtol=1e-5, atol=1e-5, msg=k)


def test_specaugment_masks_match_the_twin_in_every_stage(batch):
    ours, ref = models()
    ours.train(), ref.train()
    for step in (0, 1000, 2000):
        ours.set_train_step(step), ref.set_train_step(step)
        torch.manual_seed(3)
        x, b, frames = ours.features(batch.features, batch.feature_lengths)
        torch.manual_seed(3)
        y, n = ref.frontend(batch.features, batch.feature_lengths)
        x = x.raw_aligned((b, frames, ours.in_dim))
        for i, k in enumerate(n.tolist()):
            torch.testing.assert_close(x[i, :k], y[i, :k], rtol=1e-5, atol=1e-5)
        masked = sum(int((y[i, :k] == 0).sum()) for i, k in enumerate(n.tolist()))
        assert masked > 0


@pytest.mark.parametrize("impl", ["dimtorch", "torch"])
def test_batch_independence_with_noise_in_the_padding(batch, impl):
    """A sequence's logits are those it gets alone, whatever its batch holds beyond its length."""
    ours, ref = models()
    model = (ours if impl == "dimtorch" else ref).eval()
    noisy = batch.features.clone()
    g = torch.Generator().manual_seed(0)
    for b, n in enumerate(batch.feature_lengths.tolist()):
        noisy[b, n:] = 1e3 * torch.randn(noisy.shape[1] - n, generator=g)
    with torch.no_grad():
        logits, lengths = model(noisy, batch.feature_lengths)
        for b, n in enumerate(batch.feature_lengths.tolist()):
            alone, alone_len = model(batch.features[b:b + 1, :max(n, 1)], batch.feature_lengths[b:b + 1])
            assert alone_len.tolist() == [lengths[b].item()]
            k = lengths[b].item()
            torch.testing.assert_close(logits[b, :k], alone[0, :k], rtol=1e-4, atol=1e-4)
            assert bool(torch.isfinite(logits[b, :k]).all())


def test_frontend_config_round_trips():
    cfg = FrontendConfig(mask_steps=(0, 5, 9))
    assert FrontendConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.stage(4) == (1, 0, 0) and cfg.stage(9) == (1, 1, 1)


@pytest.mark.parametrize("impl", ["dimtorch", "torch"])
def test_stand_in_batch_of_one_empty_utterance(impl):
    """What a data-parallel rank without data runs (StepLoader's stand-in): finite loss and gradients."""
    batch = collate_audio([SpeechDataset.empty_item()])
    torch.manual_seed(0)
    model = train.build_model(impl, PRESET["model"], PRESET["decoder"], PRESET["frontend"])
    model.set_train_step(5000)
    loss, _, out_lengths = model.loss(*batch, total_labels=7, total_seqs=3)
    assert torch.isfinite(loss) and out_lengths.tolist() == [0]
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), (impl, name)
