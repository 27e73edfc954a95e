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
from _guarded import evictions_wait_for_the_runtime  # noqa: E402

MAKE = coop.Kernel(lambda xp: xp.empty(1000, dtype=xp.uint8), name="make")
BASE = 0x7F0000000000


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


# ---- arrays a user keeps ---------------------------------------------------------------------------

@pytest.mark.parametrize("keep", ["slice", "shared pointer"])
def test_an_array_a_user_keeps_holds_its_storage(driver, keep):
    """A user's array over a storage's memory, kept past borrow's block (a slice: a new
    pointer to the same memory; as_strided: the very same MemoryPointer in another array):
    the storage cannot be evicted, moved or offloaded (its memory would be freed under the
    user's array), so evicting it keeps it, and the arena stays whole."""
    from cupy.lib.stride_tricks import as_strided
    pool = coop.allocator("1MiB")
    rt = runtime(pool)
    t = rt.apply(MAKE)
    sid = t.storage.sid
    with t.borrow() as array:
        kept = array[1:] if keep == "slice" else as_strided(array, (10,), (1,))
    del array                           # only kept holds the memory now
    rt.evict(t)
    assert rt.arena.storage_info(sid)["resident"] and t.storage.array is not None
    rt.arena.check()
    del kept, t                         # the storage dies: its piece is freed once
    assert pool.used_bytes() == 0 and sid not in rt.storages()
    rt.arena.check()


def test_an_empty_output_is_a_tensor_on_cupy_too(driver):
    """A kernel's 0-byte output is a tensor with an address in the arena (a piece of 512
    bytes), as on the host backend, freed with it. (A 0-byte constant takes the same path
    from the pool, but CuPy's copy into it needs a device.)"""
    pool = coop.allocator("1MiB")
    rt = runtime(pool)
    t = rt.apply(coop.Kernel(lambda xp: xp.empty((0, 4), dtype=xp.float32), name="none"))
    assert t.shape == (0, 4) and pool.used_bytes() == 512
    rt.arena.check()
    del t
    assert pool.used_bytes() == 0
    rt.arena.check()


def test_another_threads_allocation_evicts_only_outside_the_runtimes_ops(driver):
    """set_allocator is global: a thread outside the runtime (a data loader) allocates from its
    arena too. While the runtime's thread is inside it (its lock held), such an allocation
    takes a piece that fits at once, and one that must evict waits until the runtime's thread
    leaves: evictions never run beside the runtime's own work."""
    pool = coop.allocator("1MiB")
    rt = runtime(pool)
    quarter = coop.Kernel(lambda xp: xp.empty(256 * 1024 - 1024, dtype=xp.uint8), name="q")
    kept = [rt.apply(quarter) for _ in range(3)]
    cupy.cuda.set_allocator(pool)
    try:
        evictions_wait_for_the_runtime(rt, kept, lambda n: cupy.empty(n, dtype=cupy.uint8))
    finally:
        cupy.cuda.set_allocator(None)


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


def test_the_pools_host_budget_bounds_an_offloading_runtimes_host_tier(driver):
    from coop.budget import host_memory_bytes
    pool = coop.allocator("1MiB", host_budget="2MiB")
    assert pool.host_budget == 2 << 20 and coop.allocator("1MiB").host_budget is None
    rt = coop.Runtime(pool, policy="coop-offload", cost="h100")
    assert rt._engine.offloading and rt._engine.host_budget == 2 << 20
    assert coop.allocator("1MiB", base=BASE, host_budget="25%").host_budget == \
        host_memory_bytes() // 4
    with pytest.raises(ValueError, match=r"policy 'coop' has no host tier, so it would go "
                                         r"unused: use an offloading policy"):
        coop.Runtime(coop.allocator("1MiB", host_budget="2MiB"), policy="coop", cost="h100")
    with pytest.raises(ValueError, match=r"host_budget '-3GB': must be more than 0"):
        coop.allocator("1MiB", host_budget="-3GB")
    with pytest.raises(ValueError, match=r"host_budget '200%': [\d,]+ bytes is more than this "
                                         r"host's memory"):
        coop.allocator("1MiB", base=BASE, host_budget="200%")


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


class FakeEvents:
    """CUDA timing events on a fake device: an event is done once ``lag`` more events were
    recorded after it; each pair's time is 1 ms per run so far (so a test sees which run a
    time came from). Counts live events, queries, waits and reads."""

    def __init__(self, lag):
        self.lag, self.recorded, self.live, self.waits, self.queries = lag, 0, 0, 0, 0

    def install(self, monkeypatch):
        monkeypatch.setattr(backend, "_timing_event", lambda: FakeEvent(self))
        monkeypatch.setattr(backend, "_event_done", self.done)
        monkeypatch.setattr(backend, "_wait_event", self.wait)
        # run r records its end event as the 2r-th event: r ms
        monkeypatch.setattr(backend, "_elapsed_ms", lambda start, end: float(end.at // 2))

    def done(self, event):
        self.queries += 1
        return event.forced or self.recorded - event.at >= self.lag

    def wait(self, event):
        self.waits += 1
        event.forced = True


class FakeEvent:
    def __init__(self, events):
        self.events, self.at, self.forced = events, None, False
        events.live += 1

    def record(self):
        self.events.recorded += 1
        self.at, self.forced = self.events.recorded, False

    def __del__(self):
        self.events.live -= 1


def test_timing_on_the_device_uses_cuda_events(driver, monkeypatch):
    events = FakeEvents(lag=0)
    events.install(monkeypatch)
    rt = coop.Runtime(coop.allocator("1MiB"), cost="timing")
    assert rt.cost_model is None and not rt._timed
    t = rt.apply(MAKE)
    assert events.recorded == 2 and events.live == 2 and events.waits == 0
    assert rt.clock == 1e6 and t.shape == (1000,)   # 1 ms between the events, in ns
    assert rt.stats()["cost_first"] == 1e6


def test_timing_reads_events_without_a_synchronize_per_op_and_stays_bounded(driver, monkeypatch):
    # EventTimer kept a wrapper per Kernel forever (apply of a plain function makes a new one
    # each call) and waited for every op's end event
    events = FakeEvents(lag=6)             # the device runs 3 ops behind the host
    events.install(monkeypatch)
    rt = coop.Runtime(coop.allocator("1MiB"), cost="timing")
    timer = rt._timer

    def make(xp):
        return xp.empty(1000, dtype=xp.uint8)

    counts = []
    for i in range(10_000):
        rt.apply(make)                     # a plain function: a new Kernel each apply
        if i % 1000 == 999:
            counts.append((events.live, len(timer._timed), len(timer._times),
                           len(timer._pending)))
    assert events.waits == 2               # the key's first two runs only, never again
    assert counts == [counts[0]] * 10 and counts[0][0] <= 2 * (timer.BATCH + 1)
    assert counts[0][1:] == (1, 1, 3)
    # an op's cost is the latest time read: the run 3 ops earlier's (run r takes r ms here)
    before = rt.clock
    rt.apply(make)
    assert rt.clock - before == (10_001 - 3) * 1e6


def test_a_first_runs_cold_time_stands_in_for_no_other_run(driver, monkeypatch):
    # on an H200 the first 2048^3 matmul took 66 ms (cuBLAS making its handle) and its time
    # was charged to the second run too, whose events were still in flight
    events = FakeEvents(lag=6)             # run r takes r ms
    events.install(monkeypatch)
    rt = coop.Runtime(coop.allocator("1MiB"), cost="timing")
    costs = []
    for _ in range(5):
        before = rt.clock
        rt.apply(MAKE)
        costs.append(rt.clock - before)
    # runs 1 and 2 wait for their own times; then the latest read (run 2's) stands in
    assert costs == [1e6, 2e6, 2e6, 2e6, 2e6] and events.waits == 2
    other = coop.Kernel(lambda xp: xp.empty(10, dtype=xp.uint8), name="other")
    for run in (6, 7):                     # a new key: its first two runs' own times
        before = rt.clock
        rt.apply(other)
        assert rt.clock - before == run * 1e6
    before = rt.clock
    rt.apply(other)
    assert rt.clock - before == 7e6 and not rt._timer._cold


def test_timing_waits_in_batches_when_the_device_falls_behind(driver, monkeypatch):
    events = FakeEvents(lag=10 ** 9)       # nothing completes unless waited for
    events.install(monkeypatch)
    rt = coop.Runtime(coop.allocator("1MiB"), cost="timing")
    timer = rt._timer
    for _ in range(1000):
        rt.apply(MAKE)
    assert len(timer._pending) == timer.BATCH
    assert events.waits == 1 + (999 - timer.BATCH)    # first run, then the oldest past BATCH
    assert events.live <= 2 * (timer.BATCH + 1)
