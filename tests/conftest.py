"""pytest set-up: every test checks that it leaves no dimtorch Tensor/Dim objects alive; hypothesis profile.

The leak check compares dimtorch._C._live_counts() before and after each test, both taken after
emptying dimtorch's caches (_clear_caches); when the count went up, a gc.collect() decides, so
objects held by caches or by reference cycles do not count. A test that keeps objects alive on purpose (a module-level cache, a
global dim that caches derived dims) opts out with `@pytest.mark.allow_leaks`.
"""
import gc

import pytest
from hypothesis import HealthCheck, settings

import dimtorch as dt

settings.register_profile(
    "dimtorch",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# A longer hunt: DIMTORCH_HYPOTHESIS_PROFILE=thorough python -m pytest tests
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.load_profile(__import__("os").environ.get("DIMTORCH_HYPOTHESIS_PROFILE", "dimtorch"))


def pytest_configure(config):
    config.addinivalue_line("markers", "allow_leaks: the test may leave dimtorch Tensor/Dim objects alive")


def _live_counts(collect: bool):
    dt._C._clear_caches()
    if collect:
        gc.collect()
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


@pytest.fixture(autouse=True)
def no_dimtorch_leaks(request):
    """Fails the test if it leaves more live Tensor or Dim objects than there were before it."""
    if request.node.get_closest_marker("allow_leaks"):
        yield
        return
    before = _live_counts(collect=False)
    yield
    # This fixture is set up first, so it is torn down last: the test's other function-scoped
    # fixtures are finished, but pytest still holds their values in item.funcargs until the whole
    # test protocol ends. Drop them now (pytest drops them itself right after).
    if request.node.funcargs:
        request.node.funcargs.clear()
    if getattr(request.node, "dimtorch_call_failed", False):
        return  # the failure's traceback keeps the test's objects alive; the failure says enough
    # A full gc.collect() costs ~0.1 s with torch loaded, so it runs only when the counts went up:
    # then it decides whether the extra objects were garbage in cycles or leaked.
    # Objects of an earlier test may go away during this one: only an increase is a leak.
    after = _live_counts(collect=False)
    if after[0] > before[0] or after[1] > before[1]:
        after = _live_counts(collect=True)
    if after[0] > before[0] or after[1] > before[1]:
        pytest.fail(
            f"dimtorch objects leaked: (Tensors, Dims) live before {before}, after {after}; "
            f"{_live_objects_summary()}",
            pytrace=False,
        )
