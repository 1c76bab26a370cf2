import pytest
import torch

from speech_fixtures import speech_cache  # noqa: F401  (shared by the speech tests)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """One intra-op thread: these tests' tensors are small, and on a busy 2-core machine two threads wait for
    each other (a 4 s run took 95 s)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
