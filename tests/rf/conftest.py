"""Every module of dimtorch.rf imported before the tests: their module-level dims (RETURNN's default model
dims, batch_dim, single_step_dim) are made once at import, and the leak check (tests/conftest.py) would
count them against whichever test imported the module first. The `rf` fixture of the tests that run
RETURNN frontend beside dimtorch.rf: returnn.frontend set up once for the session (its PyTorch backend, the
newest behavior version); they skip where it is not installed or usable. After each test no run context
is left installed (it holds a step's losses and outputs, and with them their dims), ours or RETURNN's (its
train flag left on would turn on its dropout in the next test)."""
import importlib
import pkgutil
import sys

import pytest

import dimtorch.rf
from rf_parity import setup_rf

for _info in pkgutil.walk_packages(dimtorch.rf.__path__, prefix="dimtorch.rf."):
    if not _info.name.endswith(".runner"):  # (the `python -m` entry; imported by its tests as they run it)
        importlib.import_module(_info.name)


@pytest.fixture(scope="session")
def rf():
    pytest.importorskip("returnn")
    module, problem = setup_rf()
    if module is None:
        pytest.skip(f"RETURNN frontend is not usable here: {problem}")
    return module


@pytest.fixture(autouse=True)
def no_run_ctx_left():
    yield
    dimtorch.rf.reset_run_ctx()
    theirs = sys.modules.get("returnn.frontend.run_ctx")
    if theirs is not None:
        theirs.reset_run_ctx()
