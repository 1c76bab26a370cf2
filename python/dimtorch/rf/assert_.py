"""rf.assert_: dimtorch's op itself."""
import dimtorch as _dt

__all__ = ["assert_"]

assert_ = _dt.assert_
