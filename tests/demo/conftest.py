from speech_fixtures import one_torch_thread, speech_cache  # noqa: F401  (fixtures of the speech tests)
