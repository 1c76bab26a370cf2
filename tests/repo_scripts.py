"""The repository's scripts as the tests reach them: a script file loaded as a module (bench/check_syncs.py,
bench/callgrind_overhead.py, scripts/rf_coverage.py), the benchmark's opsbench package imported from bench/,
a free local port, a file-store gloo group for the process groups of the data-parallel tests and the end of
their spawned workers."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"


def load_script(path: str):
    """The script at `path` (relative to the repository) as a new module, run afresh on each call."""
    file = ROOT / path
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def bench_on_path():
    """bench/ on sys.path while the block imports from it (opsbench is a package of bench/, not installed)."""
    sys.path.insert(0, str(BENCH))
    try:
        yield
    finally:
        sys.path.remove(str(BENCH))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_gloo_group(rank: int, world_size: int, folder: str) -> None:
    """A gloo process group for processes a test spawned, meeting through a file store in the test's `folder`:
    no TCP store thread in rank 0, no port to race the other worker's jobs for."""
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="file://" + os.path.join(folder, "store"), rank=rank,
                            world_size=world_size)


def leave_spawned_worker() -> None:
    """Ends a spawned data-parallel test worker whose work is done (results written, process group destroyed)
    without interpreter finalization. torch keeps the process group and its gloo worker threads alive after
    destroy_process_group() (DTensor's sharding caches hold FSDP's device mesh, and so the group): a worker
    thread that drops a finished collective's last tensors during finalization takes the GIL, Python 3.11
    ends such a thread with pthread_exit, and that forced unwind through a C++ destructor aborts the process
    ("terminate called without an active exception", SIGABRT: test_fsdp failed so once in CI)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
