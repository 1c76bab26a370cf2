"""The speech task: English phrases (phrases.py) spoken by espeak-ng (espeak.py) with held-out voices for dev,
cached on disk at 16 kHz (synthesis.py), as a Dataset with noise added on access (corpus.py); word and character
error rates (wer.py)."""
