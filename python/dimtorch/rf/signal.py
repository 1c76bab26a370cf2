"""rf.signal: stft, dimtorch's op itself."""
import dimtorch as _dt

__all__ = ["stft"]

stft = _dt.stft
