"""Shared test configuration: tests marked `cuda` run only where CuPy sees a CUDA device;
fixtures for the runtime tests (kernels and graph helpers live in tests/_graphs.py)."""
import gc
import sys

import pytest

import coop


def _cuda_available():
    try:
        import cupy
    except ImportError:
        return False
    return cupy.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    cuda_items = [item for item in items if item.get_closest_marker("cuda")]
    if cuda_items and not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA device (cupy.cuda.is_available() is false)")
        for item in cuda_items:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def cupy_allocator():
    """Every test leaves CuPy's allocator as it found it. ``set_allocator(None)`` would leave
    plain cudaMalloc (CuPy installs its default pool only at import), and a later test that
    counts the default pool's bytes would see none."""
    cupy = sys.modules.get("cupy")
    saved = cupy.cuda.get_allocator() if cupy is not None else None
    yield
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        cupy.cuda.set_allocator(saved if saved is not None
                                else cupy.get_default_memory_pool().malloc)


@pytest.fixture(params=["core", "reference"])
def Arena(request):
    """The core's unit tests run on coop.Arena and on the plain-Python model alike."""
    from reference_arena import ReferenceArena
    return coop.Arena if request.param == "core" else ReferenceArena


@pytest.fixture
def make_rt():
    """Factory of host runtimes with the deterministic cost model: make_rt(budget, policy)."""
    def make(budget="1MiB", policy="coop", **options):
        options.setdefault("cost", "cpu")
        return coop.Runtime(coop.numpy_allocator(budget), policy=policy, **options)
    return make


@pytest.fixture
def rt(make_rt):
    """A 1 MiB coop runtime: nothing in the runtime tests' small graphs evicts unless asked."""
    return make_rt()


@pytest.fixture
def no_gc():
    """Frees must follow from reference counts alone: no cyclic collection while the test runs."""
    enabled = gc.isenabled()
    gc.disable()
    yield
    if enabled:
        gc.enable()
