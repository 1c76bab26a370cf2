"""bench/check_syncs.py loaded as a module (it is a script): its CopyCounter counts the host-to-device
copies and device reads of a block (tests/reliability/test_*_syncs.py, tests/ops/test_shape.py)."""
import importlib.util
import pathlib

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "bench" / "check_syncs.py"


def copy_counter():
    spec = importlib.util.spec_from_file_location("check_syncs", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.CopyCounter()
