"""Modules: dt.nn.Module (a torch.nn.Module with named parameters), initializers, layers, checkpoints, FSDP."""
from . import init  # noqa: F401
from .module import Buffer, Module, Parameter, StateDictError, check_state_dict  # noqa: F401
from .container import Functional, ModuleDict, ModuleList, Sequential, sequential  # noqa: F401
from .linear import Linear  # noqa: F401
from .embedding import Embedding  # noqa: F401
from .normalization import BatchNorm, GroupNorm, GroupNormSpatial, LayerNorm, Normalize, RMSNorm  # noqa: F401
from .sync_batch_norm import SyncBatchNorm  # noqa: F401
from .dropout import Dropout  # noqa: F401
from .feed_forward import FeedForward, FeedForwardGated  # noqa: F401
from .builders import make_ff, make_norm  # noqa: F401
from .recurrent import LSTM, LstmState  # noqa: F401
from .zoneout_lstm import ZoneoutLSTM  # noqa: F401
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
from .conformer_v2 import ConformerEncoderV2, ConformerFrontend  # noqa: F401
from .e_branchformer import EBranchformerLayer, FeedForwardConvGated, Merge  # noqa: F401
from .rel_pos_causal_attention import RelPosCausalSelfAttention  # noqa: F401
from .decoder import TransformerDecoder, TransformerDecoderLayer, TransformerDecoderState  # noqa: F401
from .transformer_encoder import TransformerEncoder, TransformerEncoderLayer  # noqa: F401
from .running_mean import RunningMean  # noqa: F401
from .parameter_list import ParameterList  # noqa: F401
from .parametrize import is_parametrized, register_parametrization, remove_parametrization  # noqa: F401
from .parametrizations import WeightDropout, WeightNoise, weight_dropout, weight_noise  # noqa: F401
from .fsdp import fully_shard  # noqa: F401
