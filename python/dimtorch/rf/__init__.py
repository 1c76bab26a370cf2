"""dimtorch.rf: RETURNN frontend's module paths over dimtorch, so that porting rf code is an edit of its
import lines: `import returnn.frontend as rf` -> `import dimtorch.rf as rf`, `returnn.frontend.X` ->
`dimtorch.rf.X`, `returnn.tensor` -> `dimtorch.rf.tensor`.

Every function is dimtorch's op itself (the same object: its speed, its C++ fast path and its graph
capture) wherever the op takes RETURNN frontend's signature; where the conventions truly differ (an
argument order, a return shape, the run context's train flag) a thin function calls the op. The
names and differences: docs/rf_coverage.md and docs/porting_from_returnn.md.

The modules of rf's Tensor and Dim API, modules, parameters, run context and loops are imported where
they exist (see _optional.py); the functions RETURNN keeps in some of them come from _functional.py
unless those modules give their own."""
from ._optional import import_optional as _import_optional, star_import_optional as _star_import_optional

# RETURNN frontend's order of star imports (a later module's name wins, as there)
_star_import_optional(__name__, "module", globals())
_star_import_optional(__name__, "state", globals())
from .amp import *  # noqa: E402,F401,F403
from .array_ import *  # noqa: E402,F401,F403
from .assert_ import *  # noqa: E402,F401,F403
from ._functional import *  # noqa: E402,F401,F403  (conv, pool, moments, attention, loops: fallbacks)
_star_import_optional(__name__, "attention", globals())
from .backend import *  # noqa: E402,F401,F403
_star_import_optional(__name__, "cond", globals())
from .const import *  # noqa: E402,F401,F403
_star_import_optional(__name__, "container", globals())
from .control_flow_ctx import *  # noqa: E402,F401,F403
_star_import_optional(__name__, "conv", globals())
from .device import *  # noqa: E402,F401,F403
from .dims import *  # noqa: E402,F401,F403
from .dropout import *  # noqa: E402,F401,F403
from .dtype import *  # noqa: E402,F401,F403
from .gradient import *  # noqa: E402,F401,F403
from .label_smoothing import *  # noqa: E402,F401,F403
_star_import_optional(__name__, "linear", globals())
_star_import_optional(__name__, "loop", globals())
from .loss import *  # noqa: E402,F401,F403
from .math_ import *  # noqa: E402,F401,F403
from .matmul import *  # noqa: E402,F401,F403
_star_import_optional(__name__, "normalization", globals())
_star_import_optional(__name__, "parameter", globals())
_star_import_optional(__name__, "parametrizations", globals())
_star_import_optional(__name__, "parametrize", globals())
from .rand import *  # noqa: E402,F401,F403
_star_import_optional(__name__, "rec", globals())
from .reduce import *  # noqa: E402,F401,F403
_star_import_optional(__name__, "run_ctx", globals())
from .signal import *  # noqa: E402,F401,F403
_star_import_optional(__name__, "tensor_array", globals())
from .types import *  # noqa: E402,F401,F403

from . import audio, nested  # noqa: E402,F401
for _name in ("hooks", "init", "encoder", "decoder", "tensor"):
    _import_optional(__name__, _name)  # sub-packages: dimtorch.rf.<name> where they exist
del _name
