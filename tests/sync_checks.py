"""bench/check_syncs.py loaded as a module (it is a script): its CopyCounter counts the host-to-device
copies and device reads of a block (tests/reliability/test_*_syncs.py, tests/ops/test_shape.py)."""
from repo_scripts import load_script


def check_syncs():
    return load_script("bench/check_syncs.py")


def copy_counter():
    return check_syncs().CopyCounter()
