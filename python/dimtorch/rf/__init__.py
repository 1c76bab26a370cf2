"""dimtorch.rf: RETURNN frontend's module paths over dimtorch (`import returnn.frontend as rf` ->
`import dimtorch.rf as rf`).

This file binds the modules, parameters, run context and loops (issue 21 item 4); the rf function
namespace (array_, math_, reduce, loss, ...) binds the rest with guarded imports of these."""
from .run_ctx import (  # noqa: F401
    Loss, RunCtx, get_run_ctx, get_run_ctx_step, init_forward_step_run_ctx, init_train_step_run_ctx, reset_run_ctx,
)
from .parameter import Parameter, set_parameter_copy_behavior_ctx  # noqa: F401
from .module import Functional, Module  # noqa: F401
from .state import State  # noqa: F401
from .loop import scan, while_loop  # noqa: F401
from .cond import cond  # noqa: F401
from .tensor_array import TensorArray  # noqa: F401
from .container import ModuleList, ParameterList, Sequential, sequential  # noqa: F401
from . import init  # noqa: F401
from .init import Glorot, He, HeNormal, HeUniform, Normal, ParamInit, ParamInitType, VarianceScaling  # noqa: F401
from .linear import Embedding, Linear  # noqa: F401
from .conv import Conv1d, Conv2d, Conv3d, TransposedConv1d, TransposedConv2d, TransposedConv3d  # noqa: F401
from .normalization import BatchNorm, GroupNorm, GroupNormSpatial, LayerNorm, Normalize, RMSNorm  # noqa: F401
from .rec import LSTM, LstmState, ZoneoutLSTM  # noqa: F401
from .attention import (  # noqa: F401
    CausalSelfAttention, CausalSelfAttentionState, CrossAttention, LearnedRelativePositionalEncoding,
    RelPosCausalSelfAttention, RelPosSelfAttention, RotaryPosCausalSelfAttention, RotaryPosSelfAttention,
    SelfAttention, SelfAttentionBase,
)
from .build_from_dict import build_dict, build_from_dict  # noqa: F401
from . import encoder, decoder  # noqa: F401
from .encoder import base as _enc_base, conformer as _enc_conformer, conformer_v2 as _enc_v2  # noqa: F401
from .encoder import e_branchformer as _enc_eb, transformer as _enc_tr  # noqa: F401
from .decoder import transformer as _dec_tr  # noqa: F401
from . import hooks  # noqa: F401
from .hooks import RemovableHandle, setup_post_hook_on_method  # noqa: F401
from .parametrize import is_parametrized, register_parametrization, remove_parametrization  # noqa: F401
from .parametrizations import WeightDropout, WeightNoise, weight_dropout, weight_noise  # noqa: F401
from .checkpoint import load_returnn_checkpoint, save_returnn_checkpoint  # noqa: F401
