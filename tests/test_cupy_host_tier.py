"""The CuPy backend's host tier: to_host, from_host and free_host of a runtime's bound pool.

Without a GPU: argument errors, the 0-byte round trip (no memory, stream or event), where
from_host's array lands for each placement (its copy only enqueued) and, on a fake driver, the
order of the events around a copy (each direction on its own copy stream, ordered across
them). A copy out ahead (to_host(..., ahead=True)) and a copy back ahead (from_host(...,
ahead=True), a prefetch) on the fake driver: the current stream is not held, the piece's free
orders its reuse after the copy, and a prefetch's reader waits for it (await_host); a plain
copy of a piece of another stream orders that stream's reuse; released pinned memory goes to
CuPy's watch list while its copy may run; a host out of pinned memory raises HostMemoryError.
On a CUDA device (`cuda`): bytes back exactly, a freed piece reused while the copy out of it
(plain, ahead, or from another stream) or into it (plain or ahead) could still run, a copy back
ahead running beside the stream's kernels, and the pinned memory released by free_host, kept
while a copy still runs."""
import weakref

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

import coop  # noqa: E402
from coop._core import CHEAP, EXPENSIVE  # noqa: E402
from coop.backends import streams  # noqa: E402
from coop.backends.cupy import HostCopy  # noqa: E402
from coop.backends._cupy_pool import PieceOwner  # noqa: E402
from coop.backends.base import AHEAD_CHUNK  # noqa: E402
from _cupy_driver import driver  # noqa: E402,F401  (the fixture)

MiB = 1 << 20
BASE = 0x7F0000000000


@pytest.fixture
def fake_pool():
    """A pool on caller-owned fake memory (base=): arrays with shapes and pointers, no driver."""
    pool = coop.allocator("1MiB", base=BASE)
    with pool:
        yield pool


# ---- without a GPU -----------------------------------------------------------------------------

def test_to_host_refuses_a_non_contiguous_array_and_names_the_fix(fake_pool):
    array = cupy.empty((4, 6), dtype=cupy.float32)
    with pytest.raises(ValueError, match=r"shape \(4, 3\), strides \(24, 8\), float32\) is not "
                                         r"C-contiguous.*cupy\.ascontiguousarray\(array\)"):
        fake_pool.bound().to_host(array[:, ::2])


def test_to_host_refuses_a_numpy_array_and_an_array_of_another_device(fake_pool):
    backend = fake_pool.bound()
    with pytest.raises(TypeError, match="to_host copies a cupy.ndarray, not ndarray"):
        backend.to_host(np.zeros(4))
    memory = cupy.cuda.memory.UnownedMemory(0x7E0000000000, 96, None, device_id=1)
    other = cupy.ndarray((4, 6), cupy.float32, cupy.cuda.MemoryPointer(memory, 0))
    with pytest.raises(ValueError, match="array on device 1, but this runtime is bound to "
                                         "device 0"):
        backend.to_host(other)


def test_from_host_and_free_host_take_only_host_copies(fake_pool):
    backend = fake_pool.bound()
    with pytest.raises(TypeError, match=r"from_host takes what to_host returned \(a HostCopy\), "
                                        r"not ndarray"):
        backend.from_host(np.zeros(4), EXPENSIVE)
    with pytest.raises(TypeError, match="free_host takes what to_host returned"):
        backend.free_host(None)
    stranger = HostCopy((4,), np.dtype(np.float32), 16, 1)
    with pytest.raises(ValueError, match="made on device 1, but this runtime is bound to "
                                         "device 0"):
        backend.from_host(stranger, EXPENSIVE)


def test_an_empty_array_goes_to_the_host_and_back_without_memory_or_driver(fake_pool):
    backend = fake_pool.bound()
    copy = backend.to_host(cupy.empty((0, 3), dtype=cupy.float16))
    assert (copy.nbytes, copy.shape, copy.dtype) == (0, (0, 3), np.dtype(np.float16))
    assert copy.memory is None and copy.done is None and not copy.freed
    host = copy.numpy()
    assert isinstance(host, np.ndarray) and (host.shape, host.dtype) == ((0, 3), np.float16)
    back = backend.from_host(copy, CHEAP)
    assert isinstance(back, cupy.ndarray) and back.flags.c_contiguous
    assert (back.shape, back.dtype, back.nbytes) == ((0, 3), cupy.float16, 0)
    # allocated within the pool's scope: one piece, as any runtime array has (no copy into it)
    assert fake_pool.offset_of(back) is not None and fake_pool.used_bytes() == 512
    del back
    assert fake_pool.used_bytes() == 0
    backend.free_host(copy)
    assert copy.freed and repr(copy) == "<coop HostCopy (0, 3) float16, 0 bytes released>"
    backend.free_host(copy)                  # twice: nothing
    assert (copy.nbytes, copy.shape) == (0, (0, 3))   # the bookkeeping stays readable
    with pytest.raises(ValueError, match=r"host copy \(0 bytes, shape \(0, 3\)\) was released "
                                         r"by free_host"):
        backend.from_host(copy, CHEAP)
    with pytest.raises(ValueError, match="released by free_host"):
        copy.numpy()
    fake_pool.arena.check()


@pytest.mark.parametrize("placement", [EXPENSIVE, CHEAP])
def test_from_host_allocates_in_the_arena_with_the_placement_then_enqueues_the_copy(
        fake_pool, monkeypatch, placement):
    """Where from_host's array lands (the copy itself, which needs a device, is only enqueued
    here: on_copy_stream is replaced by a recorder)."""
    enqueued = []
    monkeypatch.setattr(streams, "on_copy_stream",
                        lambda device_id, copy, hold=True, direction=streams.OUT, after=():
                        enqueued.append((device_id, hold, direction, after)) or "e1")
    backend = fake_pool.bound()
    copy = HostCopy((1000,), np.dtype(np.float32), 4000, 0)
    back = backend.from_host(copy, placement)
    capacity = fake_pool.arena.capacity
    assert fake_pool.offset_of(back) == (0 if placement == EXPENSIVE else capacity - 4096)
    assert (back.shape, back.dtype, back.flags.c_contiguous) == ((1000,), cupy.float32, True)
    # on the copy stream back, after the copy out that filled the host memory (none here)
    assert enqueued == [(0, True, streams.BACK, (None,))] and copy.done == "e1"
    del back
    assert fake_pool.used_bytes() == 0
    fake_pool.arena.check()


def test_a_copy_waits_for_the_current_stream_and_the_current_stream_for_the_copy(monkeypatch):
    """The driver calls around a copy, in order, on fake streams and events (the calls are
    streams' isolated driver functions): two copy streams per device, one per direction, each
    made at its first copy; a copy waits for the events in ``after`` that are not done."""
    log, made = [], []
    events = iter(range(1, 100))
    current = {"stream": "A"}
    finished = {"e0"}
    monkeypatch.setattr(streams, "_copy_streams", {})
    monkeypatch.setattr(streams, "current_stream", lambda device_id: (current["stream"],
                                                                      current["stream"]))
    monkeypatch.setattr(streams, "new_copy_stream", lambda device_id, direction: made.append(
        (device_id, direction)) or f"{'out' if direction == streams.OUT else 'back'}{device_id}")
    monkeypatch.setattr(streams, "new_event", lambda: f"e{next(events)}")
    monkeypatch.setattr(streams, "record", lambda event, stream: log.append(("record", event,
                                                                             stream)))
    monkeypatch.setattr(streams, "wait", lambda stream, event: log.append(("wait", stream,
                                                                           event)))
    monkeypatch.setattr(streams, "done", lambda event: event in finished)
    done = streams.on_copy_stream(0, lambda stream: log.append(("copy", stream)))
    assert done == "e2"
    assert log == [("record", "e1", "A"), ("wait", "out0", "e1"), ("copy", "out0"),
                   ("record", "e2", "out0"), ("wait", "A", "e2")]
    log.clear()
    current["stream"] = "B"
    # back on its own stream, after the copy out (e2, not done) but not after a done one
    streams.on_copy_stream(0, lambda stream: log.append(("copy", stream)),
                           direction=streams.BACK, after=("e2", "e0", None))
    streams.on_copy_stream(1, lambda stream: log.append(("copy", stream)), hold=False)
    assert made == [(0, streams.OUT), (0, streams.BACK), (1, streams.OUT)]
    assert log == [("record", "e3", "B"), ("wait", "back0", "e3"), ("wait", "back0", "e2"),
                   ("copy", "back0"), ("record", "e4", "back0"), ("wait", "B", "e4"),
                   ("record", "e5", "B"), ("wait", "out1", "e5"), ("copy", "out1"),
                   ("record", "e6", "out1")]


# ---- copies out ahead, on the fake driver -------------------------------------------------------

@pytest.fixture
def ahead(driver, monkeypatch, no_gc):
    """A 1 GiB pool on the fake driver (tests/_cupy_driver.py), whose copies to the host are
    logged instead of run (the copy itself needs a device): (pool, backend, driver)."""
    from coop.backends import cupy as backend_module
    monkeypatch.setattr(streams, "_copy_streams", {})
    monkeypatch.setattr(streams, "new_copy_stream", lambda device_id, direction: (
        f"{('out', 'back', 'ahead')[direction]}{device_id}"))
    monkeypatch.setattr(backend_module, "_pinned", bytearray)
    real = streams.on_copy_stream
    monkeypatch.setattr(streams, "on_copy_stream", lambda device_id, copy, **options: real(
        device_id, lambda stream: driver.log.append(("copy", stream)), **options))
    pool = coop.allocator("1GiB")
    with pool:
        yield pool, pool.bound(), driver
    pool.arena.check()


def test_a_copy_out_ahead_leaves_the_stream_running_and_the_free_waits_for_it(ahead):
    pool, backend, driver = ahead
    array = cupy.empty(1000, dtype=cupy.float32)
    assert isinstance(array.data.mem._owner, PieceOwner)   # (not held: it frees the piece)
    assert array.data.mem._owner.copying is None
    copy = backend.to_host(array, ahead=True)
    # the copy waits for the stream's work so far; the stream does not wait for the copy
    # (on the stream for copies ahead: a copy out for room, on out0, need not queue behind it)
    assert driver.take() == [("record", "e1", "A"), ("wait", "ahead0", "e1"),
                             ("copy", "ahead0"), ("record", "e2", "ahead0")]
    assert copy.done.name == "e2" and array.data.mem._owner.copying is copy.done
    reused = cupy.empty(1000, dtype=cupy.float32)       # another piece: nothing to order
    assert driver.take() == []
    address = array.data.ptr
    del array                                           # the copy may still read the piece
    assert driver.take() == [("wait", "A", "e2")]
    again = cupy.empty(1000, dtype=cupy.float32)        # handed out at once, after the wait
    assert again.data.ptr == address and driver.take() == []
    del again, reused
    assert driver.take() == []                          # their pieces were never read ahead


def test_a_copy_out_ahead_that_is_done_orders_nothing_at_the_free(ahead):
    pool, backend, driver = ahead
    array = cupy.empty(1000, dtype=cupy.float32)
    copy = backend.to_host(array, ahead=True)
    driver.take()
    driver.finished.add(copy.done.name)                 # the device passed the copy
    del array
    assert driver.take() == [] and driver.queries == 1
    assert pool.used_bytes() == 0


def test_a_copy_out_ahead_freed_on_another_stream_orders_the_pieces_own_stream(ahead):
    """The piece is reused on the stream it was allocated on (its free is ordered there): that
    stream waits, whichever stream is current at the free."""
    pool, backend, driver = ahead
    array = cupy.empty(1000, dtype=cupy.float32)        # on A
    copy = backend.to_host(array, ahead=True)
    driver.take()
    driver.stream = "B"
    del array
    assert driver.take() == [("wait", "A", copy.done.name)]


def test_a_copy_out_ahead_freed_from_another_threads_default_stream_waits_for_the_device(ahead):
    """A per-thread default stream can be reached only from its own thread: freed elsewhere
    while the copy may still run, the device is synchronized instead."""
    import threading
    pool, backend, driver = ahead
    driver.stream = "ptds"
    array = cupy.empty(1000, dtype=cupy.float32)
    backend.to_host(array, ahead=True)
    driver.take()
    held = [array]
    del array
    worker = threading.Thread(target=held.clear)
    worker.start()
    worker.join()
    assert driver.take() == [("sync", 0)]


def test_a_copy_out_ahead_freed_on_its_threads_default_stream_with_another_current(ahead):
    """The piece was allocated on this thread's per-thread default stream, and another stream
    is current at its free: this thread can reach its own per-thread stream, which waits (no
    device synchronize)."""
    import threading
    pool, backend, driver = ahead
    driver.stream = "ptds"
    array = cupy.empty(1000, dtype=cupy.float32)
    copy = backend.to_host(array, ahead=True)
    driver.take()
    driver.stream = "A"
    del array
    assert driver.take() == [("wait", f"ptds@{threading.get_ident()}", copy.done.name)]


def test_a_driver_failure_at_the_free_still_returns_the_piece(ahead, monkeypatch):
    """The wait for a copy out ahead fails (a driver error): the device is synchronized
    instead, the error is reported (a free in a destructor cannot raise), the piece goes back
    to the arena and the arena stays whole."""
    import sys
    pool, backend, driver = ahead
    array = cupy.empty(1000, dtype=cupy.float32)
    address = array.data.ptr
    backend.to_host(array, ahead=True)
    driver.take()

    def failing(stream, event):
        raise RuntimeError("cudaErrorLaunchFailure")
    monkeypatch.setattr(streams, "wait", failing)
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    del array
    assert [type(r.exc_value) for r in reported] == [RuntimeError]
    assert driver.take() == [("sync", 0)]     # the reuse is ordered all the same
    assert pool.used_bytes() == 0
    pool.arena.check()
    again = cupy.empty(1000, dtype=cupy.float32)        # the piece is handed out again
    assert again.data.ptr == address


def test_a_plain_copy_holds_the_stream_and_marks_nothing(ahead):
    pool, backend, driver = ahead
    array = cupy.empty(1000, dtype=cupy.float32)
    copy = backend.to_host(array)
    assert driver.take()[-1] == ("wait", "A", copy.done.name)
    assert array.data.mem._owner.copying is None
    del array
    assert driver.take() == []


def test_a_view_the_pool_did_not_allocate_is_copied_as_without_ahead(ahead):
    """array_at's views have no piece to remember the copy: it holds the stream."""
    pool, backend, driver = ahead
    array = cupy.empty(1024, dtype=cupy.float32)       # the reservation, with a piece at 0
    view = backend.array_at(0, 4096).view(cupy.float32)
    assert not isinstance(view.data.mem._owner, PieceOwner)
    copy = backend.to_host(view, ahead=True)
    assert driver.take()[-1] == ("wait", "A", copy.done.name)
    assert array.data.mem._owner.copying is None
    del view, array
    assert driver.take() == []



# ---- copies back ahead (prefetches), on the fake driver ----------------------------------------

def test_a_copy_back_ahead_leaves_the_stream_running_and_its_reader_waits_for_it(ahead):
    pool, backend, driver = ahead
    copy = backend.to_host(cupy.empty(1000, dtype=cupy.float32))
    driver.take()
    back = backend.from_host(copy, EXPENSIVE, ahead=True)
    # the copy waits for the stream's work so far; the stream does not wait for the copy
    # on the copy stream back, after the copy out that filled the host memory (e2)
    assert driver.take() == [("record", "e3", "A"), ("wait", "back0", "e3"),
                             ("wait", "back0", "e2"), ("copy", "back0"),
                             ("record", "e4", "back0")]
    assert copy.done.name == "e4" and back.data.mem._owner.copying is copy.done
    cupy.empty(16, dtype=cupy.float32)             # the work in between: nothing ordered
    assert driver.take() == []
    backend.await_host(copy)                       # its reader's work waits for the copy
    assert driver.take() == [("wait", "A", "e4")]
    driver.finished.add("e4")
    backend.await_host(copy)                       # the device passed it: nothing to wait for
    assert driver.take() == []
    del back                                       # a done copy orders nothing at the free
    assert driver.take() == []


def test_a_copy_back_ahead_dropped_unread_orders_the_pieces_reuse_after_it(ahead):
    """A prefetched array dropped before its reader (evicted, or offloaded again for free):
    the piece is handed out at once, so its stream waits for the copy writing it first."""
    pool, backend, driver = ahead
    copy = backend.to_host(cupy.empty(1000, dtype=cupy.float32))
    back = backend.from_host(copy, EXPENSIVE, ahead=True)
    driver.take()
    address = back.data.ptr
    del back
    assert driver.take() == [("wait", "A", copy.done.name)]
    again = cupy.empty(1000, dtype=cupy.float32)
    assert again.data.ptr == address and driver.take() == []


def test_a_plain_copy_back_holds_the_stream_and_marks_nothing(ahead):
    pool, backend, driver = ahead
    copy = backend.to_host(cupy.empty(1000, dtype=cupy.float32))
    back = backend.from_host(copy, EXPENSIVE)
    assert driver.take()[-1] == ("wait", "A", copy.done.name)
    assert back.data.mem._owner.copying is None
    del back
    assert driver.take() == []


def test_a_plain_copy_of_a_piece_of_another_stream_orders_that_streams_reuse(ahead):
    """A piece allocated on A, copied out while B is current: B waits for the copy, and A,
    on which the piece's free is ordered (A may hand it out again at once), waits too."""
    pool, backend, driver = ahead
    array = cupy.empty(1000, dtype=cupy.float32)        # on A
    driver.stream = "B"
    copy = backend.to_host(array)
    assert driver.take()[-3:] == [("copy", "out0"), ("record", copy.done.name, "out0"),
                                  ("wait", "B", copy.done.name)]
    assert array.data.mem._owner.copying is copy.done
    del array
    assert driver.take() == [("wait", "A", copy.done.name)]


def test_a_copy_out_of_a_prefetched_piece_follows_the_copy_back_into_it(ahead):
    """The two directions run on two streams: a copy out (here one ahead, on the stream for
    copies ahead) of a piece whose copy back ahead may still run waits for it on its copy
    stream, and the piece then remembers the copy out alone (which ends after both)."""
    pool, backend, driver = ahead
    first = backend.to_host(cupy.empty(1000, dtype=cupy.float32))
    driver.finished.add(first.done.name)
    back = backend.from_host(first, EXPENSIVE, ahead=True)
    coming = first.done.name
    driver.take()
    again = backend.to_host(back, ahead=True)
    assert driver.take() == [("record", "e5", "A"), ("wait", "ahead0", "e5"),
                             ("wait", "ahead0", coming), ("copy", "ahead0"),
                             ("record", "e6", "ahead0")]
    assert back.data.mem._owner.copying is again.done
    driver.finished.add(coming)
    plain = backend.to_host(back)        # on the same stream, after a done copy: held only
    assert ("wait", "out0", coming) not in driver.take()
    assert back.data.mem._owner.copying is None and plain.done is not None


def test_released_pinned_memory_waits_on_cupys_watch_list_not_the_host(ahead):
    """free_host while a copy may still read or write the pinned memory: CuPy's watch list
    keeps it until the copy's event is done, and the host does not block; a done copy hands
    nothing. A HostCopy dropped unreleased does the same."""
    pool, backend, driver = ahead
    array = cupy.empty(1000, dtype=cupy.float32)
    running = backend.to_host(array)
    memory = running.memory
    driver.take()
    backend.free_host(running)
    assert driver.take() == [("watch", running_event := "e2")] and driver.watched == [memory]
    assert running.freed and running.memory is None
    finished = backend.to_host(array)
    driver.finished.add(finished.done.name)
    driver.take()
    backend.free_host(finished)
    assert driver.take() == [] and len(driver.watched) == 1
    dropped = backend.to_host(array)
    name = dropped.done.name
    driver.take()
    del dropped
    assert driver.take() == [("watch", name)] and running_event == "e2"
    del array


def test_a_host_without_pinned_memory_raises_host_memory_error(ahead, monkeypatch):
    from cupy.cuda.runtime import CUDARuntimeError
    from coop.backends import cupy as backend_module
    pool, backend, driver = ahead
    array = cupy.empty(1000, dtype=cupy.float32)
    used = pool.used_bytes()

    def full(nbytes):
        raise CUDARuntimeError(2)      # cudaErrorMemoryAllocation
    monkeypatch.setattr(backend_module, "_pinned", full)
    with pytest.raises(coop.HostMemoryError, match=r"no pinned memory for a 4,000-byte host "
                                                   r"copy.*give the runtime a host_budget"):
        backend.to_host(array)
    assert driver.take() == [] and pool.used_bytes() == used   # nothing enqueued, nothing lost

    def broken(nbytes):
        raise CUDARuntimeError(1)      # another error is not a full host: it propagates
    monkeypatch.setattr(backend_module, "_pinned", broken)
    with pytest.raises(CUDARuntimeError):
        backend.to_host(array)


def test_a_free_on_another_device_waits_with_the_pieces_device_current(ahead):
    """A stream handle (the legacy or per-thread default stream's) resolves against the
    current device: the free's wait for a copy runs with the piece's device current."""
    pool, backend, driver = ahead
    array = cupy.empty(1000, dtype=cupy.float32)
    copy = backend.to_host(array, ahead=True)
    driver.take()
    driver.device = 1
    del array
    assert driver.take() == [("device", 0), ("wait", "A", copy.done.name)]
    driver.device = 0


def test_await_host_takes_only_host_copies(fake_pool):
    with pytest.raises(TypeError, match="await_host takes what to_host returned"):
        fake_pool.bound().await_host(np.zeros(3))
    fake_pool.bound().await_host(HostCopy((0,), np.dtype(np.float32), 0, 0))   # no copy: nothing


# ---- on a CUDA device --------------------------------------------------------------------------

SLOW_FILL = r'''
extern "C" __global__ void slow_fill(float* p, long long n, float v, long long spin) {
    long long t0 = clock64();
    while (clock64() - t0 < spin) {}
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        p[i] = v;
}
'''


def slow_fill(array, value, spin=4_000_000):
    """Fill a float32 array with value after keeping the current stream busy ~2 ms (~2 GHz)."""
    kernel = cupy.RawKernel(SLOW_FILL, "slow_fill")
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    kernel((sms,), (256,), (array, cupy.int64(array.size), cupy.float32(value),
                            cupy.int64(spin)))


@pytest.fixture
def pool():
    pool = coop.allocator("512MiB")
    with pool:
        yield pool
    cupy.cuda.runtime.deviceSynchronize()
    pool.arena.check()


SHAPES = [(0,), (1,), (7,), (3, 5, 7), (513,), (4097,), (1 << 20) + 3, ()]
DTYPES = [np.bool_, np.uint8, np.int16, np.int32, np.int64, np.float16, np.float32,
          np.float64, np.complex64, np.complex128]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_bytes_come_back_exactly(pool, dtype):
    backend = pool.bound()
    rng = np.random.default_rng(0)
    for shape in SHAPES:
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        raw = np.frombuffer(rng.bytes(n), np.uint8)
        if dtype is np.bool_:   # only 0 and 1 are booleans (cupy.asarray makes 0xbf a 1)
            raw = raw & 1
        source = raw.view(dtype).reshape(shape)
        device = cupy.asarray(source)
        copy = backend.to_host(device)
        del device                                  # its piece may be reused at once
        assert (copy.nbytes, copy.shape, copy.dtype) == (n, source.shape, np.dtype(dtype))
        assert copy.numpy().tobytes() == source.tobytes()
        back = backend.from_host(copy, CHEAP)
        backend.free_host(copy)                     # the copy into back may still run
        assert back.flags.c_contiguous and (back.shape, back.dtype) == (source.shape, dtype)
        assert (pool.offset_of(back) is not None) == (n > 0)
        assert back.get().tobytes() == source.tobytes(), (shape, dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("on", ["default stream", "non-blocking stream"])
def test_a_piece_freed_after_to_host_is_overwritten_only_after_the_copy(pool, on):
    """A slow kernel writes the array, to_host, drop it, a new array over the same piece is
    overwritten at once: the host copy must hold the slow kernel's values (the copy waits for
    the kernel, the overwrite for the copy)."""
    backend = pool.bound()
    n = 64 * MiB // 4
    stream = cupy.cuda.Stream(non_blocking=True) if on != "default stream" else \
        cupy.cuda.Stream.null
    slow_fill(cupy.empty(1, dtype=cupy.float32), 0.0, 1000)  # compiled outside the race
    with stream:
        for i in range(1, 9):
            array = cupy.empty(n, dtype=cupy.float32)
            address = array.data.ptr
            slow_fill(array, float(i))
            copy = backend.to_host(array)
            del array
            reuse = cupy.empty(n, dtype=cupy.float32)
            assert reuse.data.ptr == address       # the same piece, handed out at once
            reuse.fill(-1.0)
            stream.synchronize()
            host = copy.numpy()
            assert (float(host.min()), float(host.max())) == (i, i), i
            backend.free_host(copy)
            del reuse


@pytest.mark.cuda
def test_a_piece_of_another_stream_copied_out_is_overwritten_only_after_the_copy(pool):
    """A piece allocated on stream A, written by a slow kernel there, copied out while stream
    B is current (B waits for A's work first: the program's own order), dropped, and
    handed out again on A, which overwrites it at once: the host copy must hold the slow
    kernel's values (the piece's free made A wait for the copy, which only B waited for)."""
    backend = pool.bound()
    n = 64 * MiB // 4
    a = cupy.cuda.Stream(non_blocking=True)
    b = cupy.cuda.Stream(non_blocking=True)
    slow_fill(cupy.empty(1, dtype=cupy.float32), 0.0, 1000)  # compiled outside the race
    for i in range(1, 9):
        with a:
            array = cupy.empty(n, dtype=cupy.float32)
            address = array.data.ptr
            slow_fill(array, float(i))
            written = a.record()
        with b:
            b.wait_event(written)
            copy = backend.to_host(array)
            del array
        with a:
            reuse = cupy.empty(n, dtype=cupy.float32)
            assert reuse.data.ptr == address       # the same piece, handed out at once on A
            reuse.fill(-1.0)
        cupy.cuda.runtime.deviceSynchronize()
        host = copy.numpy()
        assert (float(host.min()), float(host.max())) == (i, i), i
        backend.free_host(copy)
        del reuse


@pytest.mark.cuda
def test_a_piece_copied_out_ahead_is_overwritten_only_after_the_copy(pool):
    """A copy out ahead of a large array, which stays in use; a small kernel after it on the
    current stream ends while the copy still runs (the stream is not held); then the array is
    dropped and a new array over the same piece is overwritten at once: the host copy must
    hold the array's values (the piece's free made the stream wait for the copy)."""
    backend = pool.bound()
    n = 256 * MiB // 4
    slow_fill(cupy.empty(1, dtype=cupy.float32), 0.0, 1000)  # compiled outside the race
    held = 0
    for i in range(1, 5):
        array = cupy.empty(n, dtype=cupy.float32)
        address = array.data.ptr
        slow_fill(array, float(i))
        copy = backend.to_host(array, ahead=True)
        small = cupy.zeros(16, dtype=cupy.float32)        # after the copy, on the stream
        after = cupy.cuda.Event(disable_timing=True)
        after.record()
        after.synchronize()
        held += copy.done.done                            # the copy ended first: held up?
        del array, small
        reuse = cupy.empty(n, dtype=cupy.float32)
        assert reuse.data.ptr == address                  # the same piece, handed out at once
        reuse.fill(-1.0)
        cupy.cuda.Stream.null.synchronize()
        host = copy.numpy()
        assert (float(host.min()), float(host.max())) == (i, i), i
        backend.free_host(copy)
        del reuse
    # a 256 MiB copy takes milliseconds over the host link; the small kernel microseconds
    assert held <= 1, f"the current stream waited for the copy out ahead {held} times in 4"


@pytest.mark.cuda
def test_from_host_copies_after_the_pieces_last_use_and_before_its_consumer(pool):
    """from_host over a piece a slow kernel still writes, then a kernel reading the result at
    once: the copy lands after the slow kernel, the consumer reads the copy."""
    backend = pool.bound()
    n = 64 * MiB // 4
    copy = backend.to_host(cupy.full(n, 5.0, dtype=cupy.float32))
    slow_fill(cupy.empty(1, dtype=cupy.float32), 0.0, 1000)
    for i in range(8):
        stale = cupy.empty(n, dtype=cupy.float32)
        address = stale.data.ptr
        slow_fill(stale, -1.0)                       # still writing when the copy is enqueued
        del stale
        back = backend.from_host(copy, EXPENSIVE)
        assert back.data.ptr == address
        doubled = back * 2                           # the consumer, enqueued at once
        cupy.cuda.Stream.null.synchronize()
        assert (float(doubled.min()), float(doubled.max())) == (10.0, 10.0), i
        assert (float(back.min()), float(back.max())) == (5.0, 5.0), i
        del back, doubled
    backend.free_host(copy)



@pytest.mark.cuda
def test_a_copy_back_ahead_runs_beside_the_stream_and_lands_before_its_reader(pool):
    """A prefetch of a large array while a slow kernel runs on the current stream, then that
    kernel's successor: the copy is not held up by it (it ran beside the kernel, which the
    plain copy back would have waited for); the reader, after await_host, reads the copy."""
    backend = pool.bound()
    n = 128 * MiB // 4
    copy = backend.to_host(cupy.full(n, 7.0, dtype=cupy.float32))
    busy = cupy.empty(1, dtype=cupy.float32)
    slow_fill(busy, 0.0, 1000)                       # compiled outside the race
    cupy.cuda.Stream.null.synchronize()
    beside = 0
    for i in range(4):
        back = backend.from_host(copy, EXPENSIVE, ahead=True)
        slow_fill(busy, float(i), 200_000_000)       # ~0.1 s on the current stream
        copy.done.synchronize()                      # the copy ends ...
        beside += not cupy.cuda.Stream.null.done     # ... while the slow kernel still runs
        backend.await_host(copy)
        doubled = back * 2                           # the reader
        cupy.cuda.Stream.null.synchronize()
        assert (float(doubled.min()), float(doubled.max())) == (14.0, 14.0), i
        del back, doubled
    backend.free_host(copy)
    assert beside >= 3, f"the copy back ahead waited for the stream's kernel {4 - beside} times in 4"


@pytest.mark.cuda
def test_a_piece_copied_back_ahead_and_dropped_unread_is_overwritten_only_after_the_copy(pool):
    """A prefetch into a piece, the array dropped unread and the piece handed out at once and
    filled: the fill must land after the copy (the piece's free made the stream wait for it)."""
    backend = pool.bound()
    n = 256 * MiB // 4
    copy = backend.to_host(cupy.full(n, 3.0, dtype=cupy.float32))
    for i in range(4):
        back = backend.from_host(copy, EXPENSIVE, ahead=True)
        address = back.data.ptr
        del back
        reuse = cupy.empty(n, dtype=cupy.float32)
        assert reuse.data.ptr == address
        reuse.fill(float(-i))
        cupy.cuda.Stream.null.synchronize()
        assert (float(reuse.min()), float(reuse.max())) == (-i, -i), i
        del reuse
    backend.free_host(copy)


@pytest.mark.cuda
def test_free_host_returns_the_pinned_block_to_cupys_pinned_pool(pool, no_gc):
    backend = pool.bound()
    pinned = cupy.get_default_pinned_memory_pool()
    pinned.free_all_blocks()
    array = cupy.arange(1000, dtype=cupy.float32)
    copy = backend.to_host(array)
    assert pinned.n_free_blocks() == 0
    copy.numpy()                                     # the copy is done: nothing to watch
    backend.free_host(copy)
    assert pinned.n_free_blocks() == 1 and copy.memory is None and copy.freed
    backend.free_host(copy)
    assert pinned.n_free_blocks() == 1
    again = backend.to_host(array)                   # the same size reuses the block
    assert pinned.n_free_blocks() == 0
    backend.free_host(again)
    pinned.free_all_blocks()
    assert pinned.n_free_blocks() == 0


@pytest.mark.cuda
def test_free_host_during_a_copy_keeps_the_pinned_block_until_it_ends(pool, no_gc):
    """free_host while a 256 MiB copy out still runs (behind a slow kernel): the host does not
    wait, the block is not back in CuPy's pinned pool (no new pinned allocation can take it
    while the copy writes it), and it comes back once the copy is done."""
    backend = pool.bound()
    pinned = cupy.get_default_pinned_memory_pool()
    pinned.free_all_blocks()
    array = cupy.empty(256 * MiB // 4, dtype=cupy.float32)
    slow_fill(array, 3.0, spin=200_000_000)          # ~100 ms on the current stream
    copy = backend.to_host(array)
    event = copy.done
    backend.free_host(copy)
    assert not event.done                            # the host did not wait for the copy
    assert pinned.n_free_blocks() == 0               # the watch list holds the block
    event.synchronize()
    cupy.cuda.alloc_pinned_memory(0)                 # the watch list drops what is done
    assert pinned.n_free_blocks() == 1
    pinned.free_all_blocks()


@pytest.mark.cuda
def test_free_host_frees_the_pinned_memory_without_a_pinned_pool(pool, no_gc):
    """With CuPy's plain pinned allocator (cudaHostAlloc), free_host drops the last reference
    to the PinnedMemory, whose destructor calls cudaFreeHost: no collector needed."""
    backend = pool.bound()
    default = cupy.get_default_pinned_memory_pool().malloc
    cupy.cuda.set_pinned_memory_allocator(None)
    try:
        copy = backend.to_host(cupy.arange(4096, dtype=cupy.int32))
        memory = weakref.ref(copy.memory.mem)
        back = backend.from_host(copy, CHEAP)
        backend.free_host(copy)                      # the copy into back may still run
        cupy.cuda.runtime.deviceSynchronize()
        cupy.cuda.alloc_pinned_memory(0)             # CuPy's watch list drops what is done
        assert memory() is None
        assert bool((back == cupy.arange(4096, dtype=cupy.int32)).all())
    finally:
        cupy.cuda.set_pinned_memory_allocator(default)


def test_copy_out_enqueues_chunks_in_order():
    """copy_out enqueues a copy as copies of at most chunk bytes, each from the source's
    offset to the host's, in order on the one stream; the last one is the remainder."""
    from coop.backends.cupy import copy_out

    class Source:
        def __init__(self, at, log):
            self.at, self.log = at, log

        def __add__(self, offset):
            return Source(self.at + offset, self.log)

        def copy_to_host_async(self, dst, size, stream):
            self.log.append((self.at, dst.value, size, stream))

    log = []
    copy_out(Source(0, log), 0x1000, 10, "s", 4)
    assert log == [(0, 0x1000, 4, "s"), (4, 0x1004, 4, "s"), (8, 0x1008, 2, "s")]
    log.clear()
    copy_out(Source(0, log), 0x1000, 8, "s", 8)
    assert log == [(0, 0x1000, 8, "s")]


def test_to_host_copies_ahead_in_chunks_and_for_room_in_one(ahead, monkeypatch):
    """A copy out ahead is enqueued in chunks of AHEAD_CHUNK bytes (what the engine's clock
    assumes: Engine.ahead_chunk), on the stream for copies ahead; a plain copy out in one."""
    from coop.backends import cupy as backend_module
    pool, backend, driver = ahead
    calls = []

    class Pinned(bytearray):
        ptr = 0x7F0000000000                    # (the fake driver copies nothing)

    monkeypatch.setattr(backend_module, "_pinned", Pinned)
    monkeypatch.setattr(backend_module, "copy_out", lambda source, host_ptr, nbytes, stream,
                        chunk: calls.append((stream, host_ptr, nbytes, chunk)))
    logged = streams.on_copy_stream            # the fixture's: logs instead of copying
    monkeypatch.setattr(streams, "on_copy_stream", lambda device_id, copy, **options: (
        copy(("stream", options["direction"])), logged(device_id, copy, **options))[1])
    array = cupy.empty(3 << 20, dtype=cupy.float32)                 # 12 MiB
    backend.to_host(array, ahead=True)
    backend.to_host(array)
    assert calls == [(("stream", streams.AHEAD), Pinned.ptr, 12 << 20, AHEAD_CHUNK),
                     (("stream", streams.OUT), Pinned.ptr, 12 << 20, 12 << 20)]
    assert AHEAD_CHUNK == 4 << 20
