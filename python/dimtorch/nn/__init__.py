"""Modules: dt.nn.Module (a torch.nn.Module with named parameters), initializers, layers, checkpoints, FSDP."""
from . import init  # noqa: F401
from .module import Buffer, Module, Parameter, StateDictError, check_state_dict  # noqa: F401
from .container import Functional, ModuleDict, ModuleList, Sequential  # noqa: F401
from .linear import Linear  # noqa: F401
from .embedding import Embedding  # noqa: F401
from .normalization import BatchNorm, LayerNorm, RMSNorm  # noqa: F401
from .sync_batch_norm import SyncBatchNorm  # noqa: F401
from .dropout import Dropout  # noqa: F401
from .feed_forward import FeedForward  # noqa: F401
from .recurrent import LSTM, LstmState  # noqa: F401
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint  # noqa: F401
from .conv import Conv1d, Conv2d, Conv3d, TransposedConv1d, TransposedConv2d, TransposedConv3d  # noqa: F401
from .attention import (  # noqa: F401
    CausalSelfAttention, CausalSelfAttentionState, CrossAttention, RelPosSelfAttention, RotaryPosCausalSelfAttention,
    RotaryPosSelfAttention, SelfAttention,
)
from .conformer import (  # noqa: F401
    ConformerConvBlock, ConformerConvSubsample, ConformerEncoder, ConformerEncoderLayer,
    ConformerPositionwiseFeedForward, torch_state_dict_to_dimtorch,
)
from .decoder import TransformerDecoder, TransformerDecoderLayer, TransformerDecoderState  # noqa: F401
from .fsdp import fully_shard  # noqa: F401
