"""dimtorch.rf.tensor: returnn.tensor's path. Tensor and Dim are dimtorch's own types (RETURNN's API is
on them: dimtorch.ops.rf_tensor, dimtorch.ops.rf_dim), batch_dim and single_step_dim its global dims,
TensorDict the dict of tensors (extern data, outputs)."""
from ... import Dim, Tensor
from ..._core.global_dims import batch_dim, single_step_dim
from ...ops.rf_tensor import VerifyOutShapeException
from .tensor_dict import TensorDict

__all__ = ["Tensor", "Dim", "TensorDict", "batch_dim", "single_step_dim", "VerifyOutShapeException"]
