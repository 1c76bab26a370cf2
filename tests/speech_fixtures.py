"""Shared fixtures of the speech tests (tests/demo/test_speech_*.py; a helper module at tests/, as the
others): one tiny corpus per test session in a temporary cache folder, and one torch thread. The test
modules skip themselves where espeak-ng's wheel or soxr is missing; nothing here imports either, so the
other demo tests never skip for them."""
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from demo.speech.synthesis import SpeechConfig  # noqa: E402

# 24 train and 6 dev utterances, some of them empty (no words: noise only, or no samples at all).
TINY_CORPUS = SpeechConfig(train_utterances=24, dev_utterances=6, empty_fraction=0.15, max_edge_silence_s=0.05)


def require_synthesis() -> None:
    """Skips the calling test module without espeak-ng's wheel or soxr (pip install '.[demo]')."""
    pytest.importorskip("espeakng_loader")
    pytest.importorskip("soxr")


@pytest.fixture(scope="session")
def speech_cache(tmp_path_factory):
    """A cache root holding TINY_CORPUS's train and dev splits (synthesized once per session)."""
    from demo.speech.corpus import SpeechDataset
    root = tmp_path_factory.mktemp("speech-cache")
    SpeechDataset(TINY_CORPUS, "train", root=root)
    SpeechDataset(TINY_CORPUS, "dev", root=root)
    return root


@pytest.fixture
def one_torch_thread():
    """One intra-op thread: these tests' tensors are small, and on a busy 2-core machine two threads wait for
    each other (a 4 s training test took 95 s with two)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
