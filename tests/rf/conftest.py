"""Every module of dimtorch.rf imported before the tests: their module-level dims (RETURNN's default model
dims, batch_dim, single_step_dim) are made once at import, and the leak check (tests/conftest.py) would
count them against whichever test imported the module first."""
import importlib
import pkgutil

import dimtorch.rf

for _info in pkgutil.walk_packages(dimtorch.rf.__path__, prefix="dimtorch.rf."):
    if not _info.name.endswith(".runner"):  # (the `python -m` entry; imported by its tests as they run it)
        importlib.import_module(_info.name)
