"""Decoding: the CTC prefix beam search over dims (demo/speech/beam_dims.py) finds what the per-hypothesis search
(demo/speech/beam.py, no lexicon, no pruning) finds, per sequence of a padded batch; the lexicon constraint;
WER and CER."""
import pytest
import torch

from speech_fixtures import ROOT  # noqa: F401  (puts the repository on sys.path)

from demo.ctc_decode import greedy_decode
from demo.speech.beam import Lexicon, ctc_prefix_beam_search
from demo.speech.beam_dims import ctc_prefix_beam_search_dims
from demo.speech.wer import error_rates

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("seed", range(6))
def test_beam_search_over_dims_equals_the_reference_search(seed):
    g = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(4, 14, 6, generator=g)
    logits[:, :, 2] += 1.5  # repeats of a likely label: merges of prefixes happen
    lengths = torch.randint(0, 15, (4,), generator=g)
    lengths[0] = 14
    for beam in (1, 3, 8):
        expected = ctc_prefix_beam_search(logits, lengths, 5, beam, prune=float("-inf"))
        assert ctc_prefix_beam_search_dims(logits, lengths, 5, beam) == expected, beam
    # beam 1 keeps the single best prefix per frame; with one dominant label per frame that is greedy's path
    peaked = torch.nn.functional.one_hot(torch.randint(0, 6, (4, 14), generator=g), 6).float() * 50
    assert ctc_prefix_beam_search_dims(peaked, lengths, 5, 1) == greedy_decode(peaked, lengths, 5)


def test_lexicon_keeps_hypotheses_to_its_words():
    lexicon = Lexicon({"ab", "b"})
    assert lexicon.allows("ab b") and lexicon.allows("a") and not lexicon.allows("ba")
    assert lexicon.complete("ab b") and not lexicon.complete("a")
    alphabet = "ab "
    # frames say "a", "a" (one a: a repeat without blank), then " " a little more than "b": greedy gives "a ",
    # whose word "a" the lexicon does not have
    logits = torch.tensor([[[5.0, 0, 0, 0], [5.0, 0, 0, 0], [0, 3.9, 4.0, 0]]])
    assert greedy_decode(logits, torch.tensor([3]), 3) == [[0, 2]]
    (hyp,) = ctc_prefix_beam_search(logits, torch.tensor([3]), 3, 4, alphabet=alphabet, lexicon=lexicon)
    assert "".join(alphabet[i] for i in hyp) == "ab"


def test_error_rates():
    r = error_rates([("seven forty two", "seven forty"), ("call", "call")])
    assert r["wer"] == pytest.approx(1 / 4) and r["words"] == 4
    assert r["cer"] == pytest.approx(4 / 19)
