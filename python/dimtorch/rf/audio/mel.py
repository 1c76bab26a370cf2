"""rf.audio.mel: dimtorch.audio's ops themselves."""
from ... import audio as _audio

__all__ = ["mel_filterbank", "log_mel_filterbank_from_raw"]

mel_filterbank = _audio.mel_filterbank
log_mel_filterbank_from_raw = _audio.log_mel_filterbank_from_raw
