"""rf.audio: the speech front end (mel filterbank, log-mel features from raw audio, SpecAugment)."""
from . import mel, specaugment  # noqa: F401
from .mel import *  # noqa: F401,F403
from .specaugment import *  # noqa: F401,F403
