"""The NumPy host backend: a NEP 49 handler that serves NumPy's data allocations from an arena."""
import gc
import threading

import numpy as np
import pytest
from numpy._core.multiarray import get_handler_name

import coop
from coop import CHEAP, EXPENSIVE, LOWEST, OutOfMemoryError
from coop._core import CallbackOwner
from coop.backends._host import HostBackend
from coop.backends.host import numpy_allocator
from coop.budget import host_memory_bytes

MiB = 1 << 20


@pytest.fixture(autouse=True)
def default_handler_after_each_test():
    """Every test leaves NumPy's default handler current, whatever it did."""
    assert get_handler_name() == "default_allocator"
    yield
    assert get_handler_name() == "default_allocator"


def used(backend):
    return backend.arena.stats()["used_bytes"]


def test_protocol_attributes():
    backend = numpy_allocator("1 MiB")
    assert backend.arena.capacity == MiB
    assert (backend.xp, backend.alignment, backend.name) == (np, 64, "coop_host")
    assert backend.placement == EXPENSIVE and backend.arena.owner is None
    assert backend.base % 64 == 0
    assert isinstance(backend, coop.backends.base.Backend)
    assert numpy_allocator("1 MiB", 256).alignment == 256
    assert coop.numpy_allocator is numpy_allocator
    assert numpy_allocator("1%").arena.capacity == host_memory_bytes() // 100 // 64 * 64
    # memory only: no policy, clock, callback or log on the backend
    for name in ("cls", "policy", "now", "evict", "log"):
        assert not hasattr(backend, name), name
    with pytest.raises(TypeError):
        numpy_allocator("1 MiB", policy="lru")
    with pytest.raises(TypeError):
        HostBackend(MiB, policy="fifo")


def test_every_data_allocation_lands_in_the_arena():
    backend = HostBackend(MiB)
    with backend:
        a = np.empty(1000)                 # 8000 bytes, a multiple of 64
        b = np.empty(10)                   # 80 bytes take 128
        scalar = np.empty(())              # 8 bytes take 64
        assert get_handler_name() == "coop_host"
    for array in (a, b, scalar):
        assert get_handler_name(array) == "coop_host"
    assert [backend.offset_of(x) for x in (a, b, scalar)] == [0, 8000, 8128]
    assert a.ctypes.data == backend.base and b.ctypes.data == backend.base + 8000
    assert used(backend) == 8000 + 128 + 64
    # views name the piece's start, wherever they point
    assert backend.offset_of(a[500:]) == 0 and backend.offset_of(a.reshape(10, 100)[3]) == 0
    assert backend.offset_of(np.empty(4)) is None and backend.offset_of([1.0]) is None
    assert backend.calls()["malloc"] == 3
    a.fill(1.0)   # np.empty's bytes are whatever was there: a + a could overflow and warn
    with backend:
        c = a + a                          # ufunc outputs too
    assert get_handler_name(c) == "coop_host" and backend.offset_of(c) == 8192
    assert backend.arena.pieces()[:4] == [(0, 8000, False, -1), (8000, 128, False, -1),
                                          (8128, 64, False, -1), (8192, 8000, False, -1)]
    del a, b, scalar, c, array
    assert used(backend) == 0
    backend.arena.check()


def test_cheap_allocations_take_the_high_end():
    backend = HostBackend(MiB)
    backend.arena.start_log()
    with backend.placing(CHEAP) as entered:
        assert entered is backend and get_handler_name() == "coop_host"
        assert backend.placement == CHEAP
        a = np.empty(100)                              # 800 bytes take 832, at the top
    assert backend.placement == EXPENSIVE
    assert backend.offset_of(a) == MiB - 832
    with backend:
        b = np.empty(100)                              # EXPENSIVE again: the low end
    assert backend.offset_of(b) == 0
    del a
    assert backend.arena.take_log() == [MiB - 832, 800, 0, 800, MiB - 832, -1]
    assert backend.arena.take_log() == []
    with backend.placing(LOWEST):                      # the lowest free offset that fits
        c = np.empty(100)
    assert backend.offset_of(c) == 832
    del b, c
    assert used(backend) == 0
    backend.arena.check()


def test_placing_restores_the_placement_after_an_exception():
    backend = HostBackend(MiB)
    backend.placement = LOWEST
    with pytest.raises(KeyError, match="inside"):
        with backend.placing(CHEAP):
            with backend.placing(EXPENSIVE):
                assert backend.placement == EXPENSIVE
                raise KeyError("inside")
    assert backend.placement == LOWEST                 # restored through both levels
    assert get_handler_name() == "default_allocator"   # and uninstalled
    # a failed allocation inside placing() restores it too, raising coop's error
    with pytest.raises(OutOfMemoryError, match="larger than the whole arena"):
        with backend.placing(CHEAP):
            np.empty(200000)
    assert backend.placement == LOWEST
    assert used(backend) == 0
    backend.arena.check()


def test_array_at_shares_the_bytes_of_the_array_at_that_offset():
    backend = HostBackend(MiB)
    with backend:
        pad = np.empty(10)                             # offset 0, 128 bytes
        a = np.arange(16, dtype=np.uint8)              # offset 128
    offset = backend.offset_of(a)
    assert offset == 128
    view = backend.array_at(offset, 16)
    assert (view.dtype, view.shape, view.ctypes.data) == (np.uint8, (16,), backend.base + 128)
    assert np.array_equal(view, np.arange(16, dtype=np.uint8))    # reads the array's bytes
    view[3] = 200                                                 # writes them
    assert a[3] == 200
    a[15] = 99
    assert view[15] == 99
    assert backend.offset_of(view) is None             # a view over the arena, not a piece
    assert backend.array_at(MiB - 8, 8).shape == (8,) and backend.array_at(MiB, 0).size == 0
    for offset, nbytes in ((MiB - 8, 9), (-1, 4), (0, -1)):
        with pytest.raises(ValueError, match="of the host arena"):
            backend.array_at(offset, nbytes)
    del pad, a, view
    assert used(backend) == 0
    backend.arena.check()


def test_arrays_made_before_keep_their_own_handler():
    backend = HostBackend(MiB)
    before = np.empty(1000)
    with backend:
        inside = np.empty(1000)
        del before                         # freed by the default handler, not into the arena
        assert backend.calls()["free"] == 0 and used(backend) == 8000
    assert get_handler_name(inside) == "coop_host"
    del inside                             # after uninstall: still freed into the arena
    assert backend.calls()["free"] == 1 and used(backend) == 0
    assert backend.calls()["foreign"] == 0
    backend.arena.check()


def test_calloc_zeroes_reused_memory():
    backend = HostBackend(MiB)
    with backend:
        junk = np.full(1000, 7.0)
        del junk
        zeros = np.zeros(1000)
    assert backend.offset_of(zeros) == 0   # the very bytes that held 7.0
    assert backend.calls()["calloc"] == 1
    assert np.array_equal(zeros, np.zeros(1000)) and not np.signbit(zeros).any()
    del zeros
    backend.arena.check()


def test_realloc_keeps_contents():
    backend = HostBackend(MiB)
    with backend:
        grown = np.arange(100.0)                       # 800 bytes take 832 at offset 0
        grown.resize(5000, refcheck=False)              # realloc: a new piece, contents copied
        assert backend.calls()["realloc"] == 1 and backend.offset_of(grown) == 832
        assert np.array_equal(grown[:100], np.arange(100.0)) and not grown[100:].any()
        assert used(backend) == 40000
        grown.resize(10, refcheck=False)                # shrinks into the free piece at 0
        assert backend.offset_of(grown) == 0 and used(backend) == 128
        grown.resize(12, refcheck=False)                # 96 bytes still take 128: kept in place
        assert backend.offset_of(grown) == 0 and backend.calls()["realloc"] == 3
        assert np.array_equal(grown[:10], np.arange(10.0))
        # a growing buffer of unknown length reallocates as it fills
        counted = np.fromiter((float(i) for i in range(5000)), dtype=np.float64)
    assert backend.calls()["realloc"] > 3
    assert np.array_equal(counted, np.arange(5000.0)) and get_handler_name(counted) == "coop_host"
    del grown, counted
    assert used(backend) == 0
    backend.arena.check()


def test_realloc_of_a_bound_piece_is_refused():
    backend = HostBackend(MiB)
    with backend:
        a = np.arange(10.0)
        backend.arena.add_storage(1)
        backend.arena.bind(backend.offset_of(a), 1)
        with pytest.raises(MemoryError):
            a.resize(1000, refcheck=False)
        assert "the runtime tracks" in str(backend.last_error)
        backend.last_error = None
    assert np.array_equal(a, np.arange(10.0)) and backend.arena.storage_info(1)["resident"]
    del a
    assert used(backend) == 0 and not backend.arena.storage_info(1)["resident"]
    backend.arena.check()


def test_freeing_returns_every_byte():
    backend = HostBackend(8 * MiB)
    rng = np.random.default_rng(0)
    sizes, order = rng.integers(1, 5000, size=200).tolist(), rng.permutation(200).tolist()
    with backend:
        arrays = [np.empty(n) for n in sizes]
        assert used(backend) == sum(-(-8 * n // 64) * 64 for n in sizes)
        for i in order:                    # frees in random order merge back into one piece
            arrays[i] = None
    assert used(backend) == 0
    assert backend.arena.pieces() == [(0, 8 * MiB, True, -1)]
    assert backend.calls()["malloc"] == backend.calls()["free"] == 200
    backend.arena.check()


def test_out_of_memory_raises_coops_error():
    backend = HostBackend(MiB)
    with pytest.raises(OutOfMemoryError, match="budget 1048576 bytes") as info:
        with backend:
            keep = np.empty(75000)                     # 600000 bytes
            np.empty(75000)                            # does not fit beside it
    assert "cannot allocate 600000 bytes" in str(info.value)
    assert isinstance(info.value.__cause__, MemoryError)   # NumPy's own error, kept as the cause
    assert "Unable to allocate" in str(info.value.__cause__)
    assert (info.value.request, info.value.free) == (600000, 448576)
    assert backend.last_error is None
    stats = backend.arena.stats()
    assert (stats["used_bytes"], stats["failed_allocations"]) == (600000, 1)
    backend.arena.check()
    # inside the block NumPy's MemoryError arrives, and last_error says why
    with backend:
        with pytest.raises(MemoryError, match="Unable to allocate"):
            np.zeros(200000)                           # more than the whole arena
        assert isinstance(backend.last_error, OutOfMemoryError)
        assert "larger than the whole arena" in str(backend.last_error)
        backend.last_error = None
        survivor = np.ones(10)
    assert used(backend) == 600000 + 128
    del keep, survivor
    assert used(backend) == 0
    backend.arena.check()


def test_nested_installs_restore_in_order():
    outer, inner = HostBackend(MiB), HostBackend(MiB)
    with outer:
        with inner:
            a = np.empty(10)
            with outer:                                # the same backend twice is fine
                b = np.empty(10)
            c = np.empty(10)
        d = np.empty(10)
    e = np.empty(10)
    assert [x.offset_of(y) is not None for x, y in
            [(inner, a), (outer, b), (inner, c), (outer, d)]] == [True] * 4
    assert get_handler_name(e) == "default_allocator" and outer.offset_of(e) is None
    outer.install()
    inner.install()
    with pytest.raises(RuntimeError, match="reverse order"):
        outer.uninstall()
    inner.uninstall()
    outer.uninstall()
    with pytest.raises(RuntimeError, match="not NumPy's current memory handler"):
        outer.uninstall()
    del a, b, c, d
    assert used(outer) == used(inner) == 0


def test_a_new_thread_starts_with_the_default_handler():
    backend = HostBackend(MiB)
    seen = []
    with backend:
        shared = np.empty(100)

        def worker():
            seen.append(get_handler_name())
            seen.append(get_handler_name(np.empty(3)))
            seen.append(backend.offset_of(shared))

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
    assert seen == ["default_allocator", "default_allocator", 0]
    assert backend.calls()["malloc"] == 1


def test_a_thread_can_free_arena_arrays():
    backend = HostBackend(MiB)
    with backend:
        box = [np.empty(1000)]
    thread = threading.Thread(target=box.clear)
    thread.start()
    thread.join()
    assert used(backend) == 0 and backend.calls()["free"] == 1
    backend.arena.check()


def test_a_moves_piece_goes_to_the_moving_thread_only(monkeypatch):
    """A move (copy_to) takes its destination piece with the next allocation of its own
    thread: another thread with the backend installed that allocates in between (numpy's
    empty_like runs Python code first, where threads switch) gets a piece of its own."""
    backend = HostBackend(MiB)
    with backend:
        source = np.arange(512, dtype=np.float64)          # 4096 bytes
    destination = backend.arena.request(4096)              # the window's: used, anonymous
    got = {}

    def other():
        with backend:
            got["array"] = np.ones(16, dtype=np.uint8)

    real = np.empty_like

    def switching(*args, **kwargs):                         # a thread switch, made certain
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        return real(*args, **kwargs)
    monkeypatch.setattr(np, "empty_like", switching)
    moved = backend.copy_to(source, destination)
    assert backend.offset_of(moved) == destination and np.array_equal(moved, source)
    assert backend.offset_of(got["array"]) not in (None, destination)
    del moved, got, source
    assert used(backend) == 0
    backend.arena.check()


def test_alignment_below_16_bytes_is_refused():
    with pytest.raises(ValueError, match=r"alignment must be at least 16 bytes .*got 8"):
        numpy_allocator("1 MiB", 8)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reductions_are_bit_exact(dtype):
    rng = np.random.default_rng(42)
    plain = rng.standard_normal(100003).astype(dtype)
    weights = rng.standard_normal((257, 129)).astype(dtype)
    backend = HostBackend(8 * MiB)
    with backend:
        pad = np.empty(3)                              # moves the next piece off offset 0
        arena = plain.copy()
        arena_w = weights.copy()
        results = [arena.sum(), arena.mean(), np.add.reduce(arena[7:]), arena_w.sum(axis=0),
                   arena_w.T @ arena_w]
    assert backend.offset_of(arena) == 64 and arena.ctypes.data % 64 == 0
    expected = [plain.sum(), plain.mean(), np.add.reduce(plain[7:]), weights.sum(axis=0),
                weights.T @ weights]
    for got, want in zip(results, expected):
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
    del pad, arena, arena_w, results, got
    assert used(backend) == 0
    backend.arena.check()


def test_eviction_makes_room_through_the_callback():
    backend = HostBackend(MiB)
    held, evicted = {}, []

    def evict(victims):                                # what the runtime does: drop the arrays
        evicted.extend(victims)
        for sid in victims:
            del held[sid]

    owner = CallbackOwner(evict, "lru")
    owner.now = 5.0
    backend.arena.attach(owner)
    assert (backend.arena.owner, owner.policy, owner.now) == (owner, "lru", 5.0)
    with backend:
        small = np.empty(10)                           # anonymous (never evicted), at offset 0
        held[7] = np.empty(60000)                      # 480000 bytes at offset 128
        backend.arena.add_storage(7, cost=1.0)
        backend.arena.bind(backend.offset_of(held[7]), 7)
        big = np.empty(80000)                          # 640000 bytes: needs 7's room
    assert evicted == [7] and held == {}
    info = backend.arena.storage_info(7)
    assert (info["resident"], info["offset"]) == (False, None)
    assert (backend.offset_of(small), backend.offset_of(big)) == (0, 128)
    stats = backend.arena.stats()
    assert (stats["evictions"], stats["bytes_evicted"], stats["searches"]) == (1, 480000, 1)
    assert backend.calls()["slow"] == 1
    del small, big
    assert used(backend) == 0
    backend.arena.check()


def test_an_error_in_the_evict_callback_reaches_the_caller():
    backend = HostBackend(MiB)

    def evict(victims):
        raise KeyError(f"no tensor for storages {victims}")

    backend.arena.attach(CallbackOwner(evict, "coop"))
    with pytest.raises(KeyError, match=r"no tensor for storages \[3\]") as info:
        with backend:
            held = np.empty(100000)                    # 800000 bytes
            backend.arena.add_storage(3)
            backend.arena.bind(0, 3)
            np.empty(100000)
    assert isinstance(info.value.__cause__, MemoryError)
    assert backend.arena.storage_info(3)["resident"] and backend.arena.stats()["evictions"] == 0
    del held
    backend.arena.check()


def test_no_owner_means_nothing_is_evicted():
    backend = HostBackend(MiB)
    owner = CallbackOwner(lambda victims: pytest.fail(f"evicted {victims}"), "lru")
    backend.arena.attach(owner)
    backend.arena.detach(owner)                        # detached: no owner evicts
    assert backend.arena.owner is None
    with pytest.raises(OutOfMemoryError, match="policy 'none'.*the policy evicts nothing, "
                                               "though 1 evictable pieces [(]800000 bytes[)]"):
        with backend:
            keep = np.ones(100000)
            backend.arena.add_storage(1)
            backend.arena.bind(0, 1)                   # evictable, but no owner to evict it
            np.ones(100000)
    assert backend.arena.stats()["evictions"] == 0 and backend.arena.storage_info(1)["resident"]
    del keep
    backend.arena.check()


def test_backend_outlives_its_arrays_and_frees_its_buffer():
    backend = HostBackend(MiB)
    with backend:
        a = np.ones(100)
    del backend                                        # the array's handler keeps it alive
    gc.collect()
    assert a.sum() == 100.0
    del a                                              # last reference: buffer freed, no warning


def test_each_threads_failure_keeps_its_own_reason():
    """last_error is the calling thread's: the backend serves every thread it is installed in,
    and another thread's block (entering it clears that thread's reason, leaving it takes it)
    and failure neither clear nor replace this thread's, so each block re-raises its own
    reason (before, the other thread's entry cleared it and this block's NumPy MemoryError
    came out alone)."""
    backend = HostBackend(MiB)
    seen = {}

    def elsewhere():
        try:
            with backend:
                np.empty(300000)                       # 2,400,000 bytes
        except OutOfMemoryError as err:
            seen["error"] = err
        seen["after"] = backend.last_error

    with pytest.raises(OutOfMemoryError, match="larger than the whole arena") as info:
        with backend:
            try:
                np.empty(200000)                       # 1,600,000 bytes
            except MemoryError as numpy_error:
                thread = threading.Thread(target=elsewhere)
                thread.start()
                thread.join()
                assert backend.last_error.request == 1600000
                raise numpy_error
    assert info.value.request == 1600000
    assert "Unable to allocate" in str(info.value.__cause__)    # NumPy's, kept as the cause
    assert seen["error"].request == 2400000 and seen["after"] is None
    assert backend.last_error is None
    backend.arena.check()


def test_pieces_still_used_at_teardown_leak_with_a_warning():
    backend = HostBackend(MiB)
    backend.arena.allocate(64)                         # a piece no array will ever free
    with pytest.warns(ResourceWarning, match="64 bytes in use"):
        del backend
        gc.collect()


@pytest.mark.parametrize("error", [MemoryError("the program's own"), MemoryError(),
                                   type("Custom", (MemoryError,), {})("a subclass")])
def test_a_handled_failure_never_replaces_a_later_memory_error(error):
    # the handler's error of a failure the program caught stayed in last_error, and leaving
    # the block replaced any later MemoryError with it
    backend = HostBackend(MiB)
    for block in (lambda: backend, lambda: backend.placing(coop.EXPENSIVE)):
        with pytest.raises(MemoryError) as info:
            with block():
                with pytest.raises(MemoryError, match="Unable to allocate"):
                    np.empty(200000)                   # more than the whole arena: handled
                try:
                    raise KeyError("the program's error")
                except KeyError:                       # chained to it: still the program's own
                    raise error
        assert info.value is error and backend.last_error is None
    # NumPy's own replacement is still unwrapped into coop's error
    with pytest.raises(OutOfMemoryError, match="larger than the whole arena"):
        with backend:
            np.empty(200000)
