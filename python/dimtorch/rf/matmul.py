"""rf.matmul: matmul and dot, dimtorch's ops themselves (reduce=[] is the product over all dims)."""
import dimtorch as _dt

__all__ = ["matmul", "dot"]

matmul = _dt.matmul
dot = _dt.dot
