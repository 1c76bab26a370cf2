"""dimtorch.rf: RETURNN frontend's module paths over dimtorch, so that porting rf code is an edit of its
import lines: `import returnn.frontend as rf` -> `import dimtorch.rf as rf`, `returnn.frontend.X` ->
`dimtorch.rf.X`, `returnn.tensor` -> `dimtorch.rf.tensor`.

Every function is dimtorch's op itself (the same object: its speed, its C++ fast path and its graph
capture) wherever the op takes RETURNN frontend's signature; where the conventions truly differ (an
argument order, a return shape, the run context's train flag) a thin function calls the op. The
names and differences: docs/rf_coverage.md and docs/porting_from_returnn.md.

The functions RETURNN keeps in the modules of its layers and loops (conv, pool, moments, dot_attention,
...) are defined once in _functional.py and re-exported by those modules."""

# RETURNN frontend's order of star imports (a later module's name wins, as there)
from .module import *  # noqa: E402,F401,F403
from .state import *  # noqa: E402,F401,F403
from .amp import *  # noqa: E402,F401,F403
from .array_ import *  # noqa: E402,F401,F403
from .assert_ import *  # noqa: E402,F401,F403
from ._functional import *  # noqa: E402,F401,F403  (conv, pool, moments, attention, loops: fallbacks)
from .attention import *  # noqa: E402,F401,F403
from .backend import *  # noqa: E402,F401,F403
from .cond import *  # noqa: E402,F401,F403
from .const import *  # noqa: E402,F401,F403
from .container import *  # noqa: E402,F401,F403
from .control_flow_ctx import *  # noqa: E402,F401,F403
from .conv import *  # noqa: E402,F401,F403
from .device import *  # noqa: E402,F401,F403
from .dims import *  # noqa: E402,F401,F403
from .dropout import *  # noqa: E402,F401,F403
from .dtype import *  # noqa: E402,F401,F403
from .gradient import *  # noqa: E402,F401,F403
from .label_smoothing import *  # noqa: E402,F401,F403
from .linear import *  # noqa: E402,F401,F403
from .loop import *  # noqa: E402,F401,F403
from .loss import *  # noqa: E402,F401,F403
from .math_ import *  # noqa: E402,F401,F403
from .matmul import *  # noqa: E402,F401,F403
from .normalization import *  # noqa: E402,F401,F403
from .parameter import *  # noqa: E402,F401,F403
from .parametrizations import *  # noqa: E402,F401,F403
from .parametrize import *  # noqa: E402,F401,F403
from .piecewise_linear import *  # noqa: E402,F401,F403
from .rand import *  # noqa: E402,F401,F403
from .rec import *  # noqa: E402,F401,F403
from .reduce import *  # noqa: E402,F401,F403
from .run_ctx import *  # noqa: E402,F401,F403
from .signal import *  # noqa: E402,F401,F403
from .tensor_array import *  # noqa: E402,F401,F403
from .types import *  # noqa: E402,F401,F403

from . import audio, nested  # noqa: E402,F401
from . import hooks, init, encoder, decoder, tensor  # noqa: E402,F401
from .build_from_dict import build_dict, build_from_dict  # noqa: E402,F401
from .checkpoint import load_returnn_checkpoint, save_returnn_checkpoint  # noqa: E402,F401


def set_operators_broadcast_all_sources(enabled: bool) -> bool:
    """Whether dimtorch.Tensor's operators (+, -, *, <, ...) and combine/compare without
    allow_broadcast_all_sources broadcast over all sources when no operand holds all dims, as
    RETURNN's do ((beam, batch) + (batch, vocab) -> (beam, batch, vocab)); returns the previous
    setting. Importing dimtorch.rf turns it on (RETURNN code relies on it); dimtorch's own rule,
    without dimtorch.rf, refuses such an outer broadcast. Two different Dims of one name stay an
    error either way. Process-wide; checked only when no operand holds all dims (no cost otherwise).
    docs/porting_from_returnn.md."""
    from ..ops.elementwise import set_operators_broadcast_all_sources as _set
    return _set(enabled)


set_operators_broadcast_all_sources(True)
