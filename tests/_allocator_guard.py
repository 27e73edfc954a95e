"""A pytest plugin (``-p _allocator_guard``): after each test's teardown, CuPy's allocator must
be its default pool's malloc; the tests that leave another are printed and fail the run."""
import sys

import pytest

_offenders = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield   # the test's fixtures are finalized inside
    cupy = sys.modules.get("cupy")
    if cupy is not None and cupy.cuda.get_allocator() != cupy.get_default_memory_pool().malloc:
        _offenders.append(item.nodeid)


def pytest_sessionfinish(session, exitstatus):
    if _offenders:
        print("\nallocator left changed by: " + " ".join(_offenders))
        session.exitstatus = 1
