"""The `rf` fixture of the RETURNN-frontend parity tests: returnn.frontend set up once for the session
(its PyTorch backend, the newest behavior version); the tests skip where it is not installed or usable."""
import pytest

from rf_parity import setup_rf


@pytest.fixture(scope="session")
def rf():
    pytest.importorskip("returnn")
    module, problem = setup_rf()
    if module is None:
        pytest.skip(f"RETURNN frontend is not usable here: {problem}")
    return module
