"""Shared fixtures of the speech tests: one tiny corpus per test session, in a temporary cache folder."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

pytest.importorskip("espeakng_loader")
pytest.importorskip("soxr")

from demo.speech.synthesis import SpeechConfig  # noqa: E402

# 24 train and 6 dev utterances, a third of them empty (no words: noise only, or no samples at all).
TINY_CORPUS = SpeechConfig(train_utterances=24, dev_utterances=6, empty_fraction=0.15, max_edge_silence_s=0.05)


@pytest.fixture(scope="session")
def speech_cache(tmp_path_factory):
    """A cache root holding TINY_CORPUS's train and dev splits (synthesized once per session)."""
    from demo.speech.corpus import SpeechDataset
    root = tmp_path_factory.mktemp("speech-cache")
    SpeechDataset(TINY_CORPUS, "train", root=root)
    SpeechDataset(TINY_CORPUS, "dev", root=root)
    return root
