"""Shared test configuration: tests marked `cuda` run only where CuPy sees a CUDA device."""
import pytest


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
