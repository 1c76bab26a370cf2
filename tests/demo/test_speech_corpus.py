"""The speech corpus (demo/speech/): phrases, determinism per (seed, split, index), voices and texts held out
from train, lengths, empty and very short utterances, and a cache that a second run reuses."""
import numpy as np
import pytest
import torch

from speech_fixtures import TINY_CORPUS, require_synthesis

require_synthesis()

from demo.speech import synthesis
from demo.speech.corpus import SpeechDataset, collate_audio
from demo.speech.phrases import ALPHABET, VOCABULARY, draw_phrase, labels_to_text, number_words, text_to_labels
from demo.speech.synthesis import DEV_VARIANTS, TEST_VARIANTS, TRAIN_VARIANTS, make_specs

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_phrases_use_the_vocabulary_and_alphabet():
    assert len(VOCABULARY) >= 30
    rng = np.random.default_rng(1)
    words = set()
    for _ in range(2000):
        text = draw_phrase(rng)
        assert text and text == " ".join(text.split())
        assert labels_to_text(text_to_labels(text)) == text
        words |= set(text.split())
    assert words == VOCABULARY  # every word is reachable, and none beyond it
    assert number_words(4012) == ["four", "thousand", "twelve"]
    with pytest.raises(ValueError, match="not in the alphabet"):
        text_to_labels("Seven 42")
    assert len(ALPHABET) == 28


def test_specs_are_deterministic_and_hold_out_voices_and_texts():
    cfg = TINY_CORPUS
    assert make_specs(cfg, "train") == make_specs(cfg, "train")
    assert not set(TRAIN_VARIANTS) & set(DEV_VARIANTS) and not set(TRAIN_VARIANTS) & set(TEST_VARIANTS)
    assert not set(DEV_VARIANTS) & set(TEST_VARIANTS)
    big = synthesis.SpeechConfig(train_utterances=3000, dev_utterances=300)
    train, dev = make_specs(big, "train"), make_specs(big, "dev")
    variant = lambda v: v.split("+")[1] if "+" in v else ""  # noqa: E731
    assert {variant(s.voice) for s in dev} <= set(DEV_VARIANTS)
    assert not {variant(s.voice) for s in train} & {variant(s.voice) for s in dev}
    assert not {s.text for s in train} & {s.text for s in dev}  # no dev utterance said in train
    assert len({s.voice for s in train}) > 200  # accents x variants
    other_seed = make_specs(synthesis.SpeechConfig(seed=1, train_utterances=24, dev_utterances=6), "dev")
    assert other_seed != make_specs(cfg, "dev")


def test_items_are_deterministic_16khz_float_with_the_lengths_said(speech_cache):
    a = SpeechDataset(TINY_CORPUS, "train", root=speech_cache)
    b = SpeechDataset(TINY_CORPUS, "train", root=speech_cache)
    for i in range(len(a)):
        audio, labels = a[i]
        again, labels_again = b[i]
        assert audio.dtype == torch.float32 and audio.dim() == 1 and labels.dtype == torch.int64
        assert torch.equal(audio, again) and torch.equal(labels, labels_again)
        assert audio.shape[0] == a.input_lengths[i] and labels.shape[0] == a.target_lengths[i]
        assert labels_to_text(labels.tolist()) == a.texts[i]
        assert audio.shape[0] < 8 * 16000 and bool(torch.isfinite(audio).all())
        if a.texts[i]:  # speech lasts at least ~0.3 s at 16 kHz
            assert a.clean(i).shape[0] > 0.3 * 16000
    assert not torch.equal(a[0][0][:100], a[1][0][:100])


def test_empty_and_very_short_utterances_batch(speech_cache):
    ds = SpeechDataset(TINY_CORPUS, "train", root=speech_cache)
    empty = [i for i, t in enumerate(ds.texts) if not t]
    assert empty, "the tiny corpus should hold empty utterances"
    for i in empty:
        audio, labels = ds[i]
        assert labels.numel() == 0 and ds.clean(i).size == 0  # only the padding's noise, if any
    items = [ds[empty[0]], (torch.zeros(0), torch.zeros(0, dtype=torch.int64)), (torch.randn(100) * 0.1,
             torch.tensor([3]))]
    batch = collate_audio(items)
    assert batch.features.shape == (3, max(1, items[0][0].shape[0], 100))
    assert batch.feature_lengths.tolist() == [items[0][0].shape[0], 0, 100]


def test_second_run_synthesizes_nothing(speech_cache, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("synthesized again")
    monkeypatch.setattr(synthesis, "_synthesize_all", fail)
    SpeechDataset(TINY_CORPUS, "dev", root=speech_cache)
    folder = synthesis.cache_dir(TINY_CORPUS, speech_cache)
    assert sorted(p.name for p in folder.iterdir()) == ["dev.json", "dev.npy", "dev.offsets.npy", "train.json",
                                                         "train.npy", "train.offsets.npy"]
