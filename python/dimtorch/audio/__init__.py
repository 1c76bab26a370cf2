"""Speech front-end features (dt.audio, RETURNN frontend's rf.audio): mel filterbank and log-mel features
from raw audio (mel.py); SpecAugment: specaugment, random_mask, mask (specaugment.py)."""
from .mel import log_mel_filterbank_from_raw, mel_filterbank_matrix  # noqa: F401
from .._C import _mel_filterbank as mel_filterbank  # noqa: F401  (C++ fast path; definition: mel.mel_filterbank)
from .specaugment import mask, random_mask, specaugment  # noqa: F401

__all__ = ["mel_filterbank", "log_mel_filterbank_from_raw", "mel_filterbank_matrix", "specaugment", "random_mask",
           "mask"]
