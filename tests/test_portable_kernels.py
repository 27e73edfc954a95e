"""Kernel paths that differ between NumPy and CuPy, checked on the host: the convolution's
window view built from strides alone (CuPy's sliding_window_view waits for the device twice
per call), the device sort's out-of-memory raised as coop's (Thrust turns it into a plain
MemoryError), and integer ids checked on the host where they enter a model (CuPy wraps
out-of-range indices silently, NumPy raises inside the kernel)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import coop
from coop.models import GPT
from coop.nn.module import as_tensor
from coop.ops import _common
from coop.ops.conv import strided_windows


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 2), c=st.integers(1, 3), h=st.integers(1, 7), w=st.integers(1, 7),
       kh=st.integers(1, 3), kw=st.integers(1, 3), transpose=st.booleans())
def test_strided_windows_are_numpys_sliding_window_view(n, c, h, w, kh, kw, transpose):
    if kh > h or kw > w:
        return
    x = np.arange(n * c * h * w, dtype=np.float32).reshape(n, c, h, w)
    if transpose:                                   # a view with other strides
        x = np.ascontiguousarray(x.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
    expected = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))
    got = strided_windows(np, x, kh, kw)
    assert got.shape == expected.shape and got.strides == expected.strides
    np.testing.assert_array_equal(got, expected)


class _SortFails:
    """An array module whose argsort fails as CuPy's does when Thrust's scratch allocation
    fails (a plain MemoryError), or with coop's own error."""

    def __init__(self, error):
        self.error = error

    def argsort(self, flat):
        raise self.error


def test_a_device_sorts_out_of_memory_is_coops_with_a_request():
    flat = np.arange(1000, dtype=np.int64)
    with pytest.raises(coop.OutOfMemoryError, match=r"sorting 1,000 indices on the device ran "
                                                     r"out of memory") as info:
        _common._device_argsort(_SortFails(MemoryError("std::bad_alloc")), flat)
    assert info.value.request == 4 * flat.nbytes
    own = coop.OutOfMemoryError("coop: no room", 64)
    with pytest.raises(coop.OutOfMemoryError) as info:
        _common._device_argsort(_SortFails(own), flat)
    assert info.value is own


def test_ids_out_of_range_are_refused_on_the_host_naming_the_range():
    rt = coop.Runtime(coop.numpy_allocator("64MiB"), policy="coop", cost="cpu")
    with rt:
        model = GPT(rt, 32, 8, 1, 2, 16, rng=0)
        idx = np.zeros((2, 8), dtype=np.int64)
        with pytest.raises(ValueError, match=r"token ids index an axis of 32, so they must lie "
                                             r"in \[-32, 32\), but they run from 0 to 32"):
            model(np.where(np.arange(8) == 3, 32, idx))
        with pytest.raises(ValueError, match=r"targets index an axis of 32, .* from -33 to 0"):
            model.loss(idx, np.where(np.arange(8) == 5, -33, idx))
        assert np.isfinite(model.loss(idx, idx - 1).numpy())   # negative ids in range: as NumPy
    assert rt.stats()["evictions"] == 0


def test_a_device_array_enters_as_it_is():
    """An array of the runtime's own module (a CuPy array) goes to rt.tensor unconverted:
    numpy.asarray of a CuPy array raises TypeError."""
    cupy = pytest.importorskip("cupy")

    class DeviceRuntime:
        xp = cupy

        def tensor(self, value, dtype=None):
            return ("tensor", value, dtype)

    pool = coop.allocator("1MiB", base=0x7F0000000000)
    with pool:
        ids = cupy.empty((2, 3), dtype=cupy.int64)
    kind, value, dtype = as_tensor(DeviceRuntime(), ids, below=10)
    assert kind == "tensor" and value is ids and dtype == np.int64
    del value, ids
