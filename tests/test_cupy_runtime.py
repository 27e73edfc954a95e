"""A coop.Runtime on the CuPy pool without a GPU (fake driver, tests/_cupy_driver.py): the
device it binds to, no reference cycle with the pool, the cost model chosen by the device's
name, and cost="timing" measured with CUDA events. Kernels here only allocate: CuPy cannot
run a kernel without a device."""
import warnings
import weakref

import pytest

cupy = pytest.importorskip("cupy")

import coop  # noqa: E402
from coop.backends import cupy as backend  # noqa: E402
from coop.engine.cost import device_spec  # noqa: E402
from _cupy_driver import driver  # noqa: E402,F401  (the fixture)

MAKE = coop.Kernel(lambda xp: xp.empty(1000, dtype=xp.uint8), name="make")
BASE = 0x7F0000000000


@pytest.fixture(autouse=True)
def reset_allocator():
    yield
    cupy.cuda.set_allocator(None)


def runtime(pool, **options):
    options.setdefault("cost", "h100")
    return coop.Runtime(pool, policy="coop", **options)


# ---- one device ----------------------------------------------------------------------------------

def test_a_runtime_is_bound_to_the_device_current_when_it_was_made(driver):
    pool = coop.allocator("1MiB")
    rt = runtime(pool)
    t = rt.apply(MAKE)
    assert t.shape == (1000,) and rt.arena is pool.arena
    driver.device = 1
    with pytest.raises(RuntimeError, match=r"this runtime is bound to device 0 \(current when it "
                                           r"was made\) but the current device is 1; run it "
                                           r"under cupy.cuda.Device\(0\)"):
        rt.apply(MAKE)
    assert rt.storages() == [t._view.sid]      # the failed op left nothing behind
    other = cupy.cuda.set_allocator(pool) or cupy.empty(10, dtype=cupy.uint8)
    assert other.data.device_id == 1 and driver.reserved == [(0, 1 << 20), (1, 1 << 20)]
    driver.device = 0                          # the pool serves each device; the runtime its own
    assert rt.apply(MAKE).shape == (1000,)
    rt.arena.check()


def test_a_dropped_runtime_and_pool_release_the_reservation_without_the_collector(driver, no_gc):
    pool = coop.allocator("1MiB")
    rt = runtime(pool)
    t = rt.apply(MAKE)
    assert driver.reserved == [(0, 1 << 20)]
    runtime_ref, pool_ref = weakref.ref(rt), weakref.ref(pool)
    del t, rt
    assert runtime_ref() is None
    del pool
    assert pool_ref() is None and driver.released == [0]


# ---- cost models -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name, spec", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H200", "h200"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("NVIDIA A100-SXM4-40GB", "a100-40gb")])
def test_the_default_cost_model_is_the_devices_own(driver, name, spec):
    driver.name = name
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rt = coop.Runtime(coop.allocator("1MiB"))
    assert rt.cost_model is coop.DEVICES[spec]


@pytest.mark.parametrize("name", ["NVIDIA GeForce RTX 4090", "NVIDIA H100 NVL",
                                  "NVIDIA A100 80GB PCIe"])
def test_an_unknown_device_gets_a_warning_naming_it(driver, name):
    driver.name = name
    with pytest.warns(RuntimeWarning, match=f"no cost model for device '{name}' .*modelling it as "
                                            f"an a100-80gb. Pass cost='timing'"):
        rt = coop.Runtime(coop.allocator("1MiB"))
    assert rt.cost_model is coop.DEVICES["a100-80gb"]


def test_h100_is_a_device_with_its_data_sheets_numbers():
    h100 = coop.DEVICES["h100"]
    assert (h100.flops_per_s, h100.bytes_per_s) == (67e12, 3.35e12)
    assert device_spec("NVIDIA H100 80GB HBM3") is h100


def test_other_backends_keep_their_defaults():
    assert coop.Runtime(coop.numpy_allocator("1MiB")).cost_model is None      # host timing
    assert coop.Runtime(coop.SimBackend("1MiB")).cost_model is coop.DEVICES["a100-80gb"]
    with pytest.raises(ValueError, match="simulation backend has none"):
        coop.Runtime(coop.SimBackend("1MiB"), cost="timing")
    rt = coop.Runtime(coop.numpy_allocator("1MiB"), cost="timing")
    assert rt.cost_model is None and rt._timed and rt._timer is None


class FakeTimingEvent:
    def __init__(self, log):
        self.log = log

    def record(self):
        self.log.append(("record", id(self)))


def test_timing_on_the_device_uses_cuda_events(driver, monkeypatch):
    log = []
    monkeypatch.setattr(backend, "_timing_event", lambda: FakeTimingEvent(log))
    monkeypatch.setattr(backend, "_elapsed_ms",
                        lambda start, end: log.append(("elapsed", id(start), id(end))) or 2.5)
    rt = coop.Runtime(coop.allocator("1MiB"), cost="timing")
    assert rt.cost_model is None and not rt._timed
    t = rt.apply(MAKE)
    start, end = log[0][1], log[1][1]
    assert log == [("record", start), ("record", end), ("elapsed", start, end)] and start != end
    assert rt.clock == 2.5e6 and t.shape == (1000,)   # 2.5 ms between the events, in ns
    assert rt.stats()["cost_first"] == 2.5e6
