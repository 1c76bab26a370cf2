"""pytest set-up: every test checks that it leaves no dimtorch Tensor/Dim objects alive; hypothesis profile;
threads per process and the order of the tests for parallel runs (pytest-xdist).

The leak check compares dimtorch._C._live_counts() before and after each test, both taken after
emptying dimtorch's caches (_clear_caches); when the count went up, a gc.collect() decides, so
objects held by caches or by reference cycles do not count. A test that keeps objects alive on purpose (a module-level cache, a
global dim that caches derived dims) opts out with `@pytest.mark.allow_leaks`. Each xdist worker is a
process of its own, so the check and hypothesis work per worker as in one process.

In a parallel run (scripts/test.sh: `-n auto`) each worker gets its share of the cores for torch's
threads, inductor compiles in the worker's own process, and the processes tests start (torchrun, the
benchmarks) inherit the same limits: N workers do not run N times the machine's threads. Tests marked
`slow` (the long compile and data-parallel runs; `scripts/test.sh --quick` skips them) run first, so
that the workers do not end on one of them alone.
"""
import gc
import os

import pytest
from hypothesis import HealthCheck, settings


def _share_cores_among_workers() -> None:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1:
        return
    threads = str(max(1, (os.cpu_count() or 1) // workers))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, threads)  # read by torch at import, and by the processes tests start
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # no pool of compile processes per worker


_share_cores_among_workers()  # before torch is imported (by dimtorch, below)

import dimtorch as dt  # noqa: E402

# The default run draws the same examples every time (derandomize): a test run's verdict does not depend on
# the run. New examples are hunted with random ones: DIMTORCH_HYPOTHESIS_PROFILE=thorough python -m pytest tests
settings.register_profile(
    "dimtorch",
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.load_profile(__import__("os").environ.get("DIMTORCH_HYPOTHESIS_PROFILE", "dimtorch"))


@pytest.hookimpl(trylast=True)  # after xdist's own, which names each item's group in its node id
def pytest_collection_modifyitems(config, items):
    """The slow tests first, in their order (every xdist worker collects the same order). Under
    `--dist loadgroup` a test of an xdist_group whose node id does not name it would run in any worker:
    the run stops instead (pytest 9.2 loses the grouping: pytest-dev/pytest-xdist#1386)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    if getattr(config.option, "loadgroup", False):
        lost = [item.nodeid for item in items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
        if lost:
            raise pytest.UsageError(f"--dist loadgroup: pytest-xdist did not group {lost[0]} (and {len(lost) - 1} "
                                    f"more); use a pytest that it supports (pyproject.toml's test extra)")


def pytest_collection_finish(session):
    """What the collection made (torch, the test modules, hypothesis' strategies: ~400k objects) lives to
    the end: frozen, the collector no longer walks it, so a full collection costs what the tests made,
    not ~0.3-1 s (the leak check's, the tests' own and Python's automatic ones)."""
    gc.collect()
    gc.freeze()


def _live_counts(generation=None):
    """(live Tensors, live Dims) after emptying dimtorch's caches and, if given, collecting `generation`."""
    dt._C._clear_caches()
    if generation is not None:
        gc.collect(generation)
    return dt._C._live_counts()


def _live_objects_summary(limit=8):
    objs = [o for o in gc.get_objects() if type(o) in (dt.Tensor, dt.Dim)]
    shown = ", ".join(repr(o) for o in objs[-limit:])
    return f"{len(objs)} live, the last ones: {shown}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.dimtorch_call_failed = report.failed
    return report


from dimtorch.ops.elementwise import set_operators_broadcast_all_sources as _set_operators_rule  # noqa: E402


@pytest.fixture(autouse=True)
def seeded_torch():
    """Each test starts from the same torch random state: what a test draws (RETURNN's random init of the
    weights a parity test copies, say) does not depend on which tests ran before it in its worker."""
    import torch
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def operators_rule(request):
    """dimtorch's own rule for operators (an outer broadcast refused) in the tests of dimtorch's API, RETURNN's
    (broadcast over all sources, what importing dimtorch.rf turns on) in those of dimtorch.rf: whichever was
    imported first in the session (collecting tests/rf imports dimtorch.rf)."""
    path = request.node.path
    rf_test = "rf" in path.parts or path.name.startswith("test_rf")
    previous = _set_operators_rule(rf_test)
    yield
    _set_operators_rule(previous)


@pytest.fixture(autouse=True)
def no_dimtorch_leaks(request):
    """Fails the test if it leaves more live Tensor or Dim objects than there were before it."""
    if request.node.get_closest_marker("allow_leaks"):
        yield
        return
    before = _live_counts()
    yield
    # This fixture is set up first, so it is torn down last: the test's other function-scoped
    # fixtures are finished, but pytest still holds their values in item.funcargs until the whole
    # test protocol ends. Drop them now (pytest drops them itself right after).
    if request.node.funcargs:
        request.node.funcargs.clear()
    if getattr(request.node, "dimtorch_call_failed", False):
        return  # the failure's traceback keeps the test's objects alive; the failure says enough
    # The collector runs only when the counts went up: then it decides whether the extra objects were
    # garbage in cycles (e.g. an error's traceback) or leaked; the young generations first (cheap: they
    # hold what the test made last), everything when that is not enough.
    # Objects of an earlier test may go away during this one: only an increase is a leak.
    after = _live_counts()
    for generation in (1, 2):
        if after[0] <= before[0] and after[1] <= before[1]:
            break
        after = _live_counts(generation)
    if after[0] > before[0] or after[1] > before[1]:
        pytest.fail(
            f"dimtorch objects leaked: (Tensors, Dims) live before {before}, after {after}; "
            f"{_live_objects_summary()}",
            pytrace=False,
        )
