"""Fixtures of the speech tests (tests/demo/test_speech_*.py): the tiny corpus cache and one torch thread."""
from speech_fixtures import one_torch_thread, speech_cache  # noqa: F401  (fixtures of the speech tests)
