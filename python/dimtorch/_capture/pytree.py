"""Registers Tensor with torch's pytree utilities: the raw is the leaf, the dims are the context."""
import torch.utils._pytree as pytree

from .._C import Tensor


def _flatten(t: Tensor):
    return [t.raw], (t.dims, t.sparse_dim, t.feature_dim, t.name)


def _unflatten(children, context) -> Tensor:
    dims, sparse_dim, feature_dim, name = context
    return Tensor(children[0], dims, sparse_dim=sparse_dim, feature_dim=feature_dim, name=name)


pytree.register_pytree_node(Tensor, _flatten, _unflatten, serialized_type_name="dimtorch.Tensor")
