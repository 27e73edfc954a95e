"""The CuPy backend on fake device pointers (no GPU needed), plus `cuda` tests on a real device."""
import gc
import os
import pickle
import re
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

import coop  # noqa: E402
from coop._core import CallbackOwner  # noqa: E402
from coop.backends import cupy as backend  # noqa: E402
from _cupy_driver import driver  # noqa: E402,F401  (the fixture)

BASE = 0x7F0000000000  # fake device address; nothing ever reads or writes it
MiB = 1 << 20


@contextmanager
def no_gc():
    """Frees must follow from reference counts alone, not from a collection."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def use(pool):
    cupy.cuda.set_allocator(pool)
    return pool


def layout(pool):
    return [(offset, size, free) for offset, size, free, _ in pool.arena.pieces()]


# ---- placement and stats -----------------------------------------------------------------------

def test_arrays_land_at_base_plus_offset_with_exact_stats():
    pool = use(coop.allocator("1MiB", base=BASE))
    assert (pool.used_bytes(), pool.free_bytes(), pool.total_bytes(), pool.n_free_blocks()) == \
        (0, 0, 0, 0)
    assert pool.get_limit() == MiB
    a = cupy.empty(1000, dtype=cupy.uint8)
    b = cupy.empty((10, 10), dtype=cupy.float32)
    assert a.data.ptr == BASE and b.data.ptr == BASE + 1024
    assert a.data.device_id == 0 and b.data.mem.size == 400
    assert (pool.offset_of(a), pool.offset_of(b)) == (0, 1024)
    assert pool.offset_of(np.empty(10)) is None and pool.offset_of(object()) is None
    assert (pool.used_bytes(), pool.free_bytes(), pool.total_bytes(), pool.n_free_blocks()) == \
        (1536, MiB - 1536, MiB, 1)
    with no_gc():
        del a
        assert (pool.used_bytes(), pool.free_bytes(), pool.n_free_blocks()) == (512, MiB - 512, 2)
        assert layout(pool) == [(0, 1024, True), (1024, 512, False), (1536, MiB - 1536, True)]
        del b
    assert (pool.used_bytes(), pool.free_bytes(), pool.n_free_blocks()) == (0, MiB, 1)
    pool.arena.check()


def test_pool_works_as_set_allocator_argument_and_through_malloc():
    pool = coop.allocator(4096, base=BASE)
    assert isinstance(pool, cupy.cuda.MemoryPool) and isinstance(pool, coop.CoopMemoryPool)
    assert coop.allocator is backend.allocator and coop.CoopMemoryPool is backend.CoopMemoryPool
    pointer = pool(100)
    assert isinstance(pointer, cupy.cuda.MemoryPointer) and pointer.ptr == BASE
    cupy.cuda.set_allocator(pool.malloc)
    assert cupy.empty(8, dtype=cupy.uint8).data.ptr == BASE + 512
    assert pool.used_bytes() == 512  # the 8 bytes died with the temporary array


def test_with_pool_routes_this_threads_allocations_and_nests():
    pool = coop.allocator(4096, base=BASE)
    outer = cupy.cuda.get_allocator()
    with pool as entered:
        assert entered is pool and cupy.cuda.get_allocator() is pool
        a = cupy.empty(10, dtype=cupy.uint8)
        with pytest.raises(KeyError):
            with pool:
                assert cupy.empty(10, dtype=cupy.uint8).data.ptr == BASE + 512
                raise KeyError("inside")
        assert cupy.cuda.get_allocator() is pool
    assert cupy.cuda.get_allocator() == outer
    assert a.data.ptr == BASE and pool.used_bytes() == 512


def test_budget_not_a_multiple_of_512_is_rounded_down():
    pool = use(coop.allocator(1_000_000, base=BASE))
    cupy.empty(1, dtype=cupy.uint8)
    assert pool.get_limit() == 1_000_000
    assert pool.total_bytes() == 999_936 == pool.arena.capacity
    assert pool.free_bytes() == 999_936


def test_every_pointer_is_512_aligned_and_pieces_are_distinct():
    use(coop.allocator("1MiB", base=BASE))
    sizes = [1, 7, 511, 512, 513, 1000, 4095, 33, 2]
    arrays = [cupy.empty(n, dtype=cupy.uint8) for n in sizes]
    pointers = [a.data.ptr for a in arrays]
    assert all((p - BASE) % 512 == 0 and p % 512 == 0 for p in pointers)
    expected, offset = [], 0
    for n in sizes:
        expected.append(BASE + offset)
        offset += max(-(-n // 512) * 512, 512)
    assert pointers == expected


def test_cheap_class_takes_the_high_end():
    pool = coop.allocator("1MiB", base=BASE)
    outer = cupy.cuda.get_allocator()
    for name in ("cls", "policy", "now", "evict", "log"):
        assert not hasattr(pool, name), name
    with pool.placing(coop.CHEAP) as entered:
        assert entered is pool and cupy.cuda.get_allocator() is pool
        assert pool._scopes.placement == coop.CHEAP
        a = cupy.empty(1000, dtype=cupy.uint8)
    assert cupy.cuda.get_allocator() == outer and pool._scopes.placement == coop.EXPENSIVE
    assert a.data.ptr == BASE + MiB - 1024 and pool.offset_of(a) == MiB - 1024
    with pool:  # EXPENSIVE: the low end
        b = cupy.empty(600, dtype=cupy.uint8)
        assert b.data.ptr == BASE
    with pool.placing(coop.LOWEST):  # the lowest free offset that fits
        assert cupy.empty(600, dtype=cupy.uint8).data.ptr == BASE + 1024
    assert pool.used_bytes() == 1024 + 1024  # the LOWEST temporary died


def test_placing_restores_the_placement_after_an_exception():
    pool = coop.allocator(4096, base=BASE)
    outer = cupy.cuda.get_allocator()
    with pytest.raises(KeyError, match="inside"):
        with pool.placing(coop.LOWEST):
            with pool.placing(coop.CHEAP):
                assert pool._scopes.placement == coop.CHEAP
                raise KeyError("inside")
    assert pool._scopes.placement == coop.EXPENSIVE and cupy.cuda.get_allocator() == outer
    # an out-of-memory error inside placing() restores it too
    with pytest.raises(coop.OutOfMemoryError, match="larger than the whole arena"):
        with pool.placing(coop.CHEAP):
            cupy.empty(5000, dtype=cupy.uint8)
    assert pool._scopes.placement == coop.EXPENSIVE and cupy.cuda.get_allocator() == outer
    with pool:
        assert cupy.empty(10, dtype=cupy.uint8).data.ptr == BASE  # EXPENSIVE again
    assert pool.used_bytes() == 0


def test_array_at_points_at_base_plus_offset():
    pool = use(coop.allocator("1MiB", base=BASE))
    with pytest.raises(ValueError, match="of the reservation"):
        pool.array_at(0, 16)  # nothing reserved yet
    a = cupy.empty(1000, dtype=cupy.uint8)
    view = pool.array_at(1024, 100)
    assert (view.dtype, view.shape, view.data.ptr) == (cupy.uint8, (100,), BASE + 1024)
    assert view.data.device_id == 0 and pool.offset_of(view) == 1024
    assert pool.array_at(pool.offset_of(a), 1000).data.ptr == a.data.ptr
    assert pool.array_at(MiB - 512, 512).data.ptr == BASE + MiB - 512
    for offset, nbytes in ((MiB - 512, 513), (-512, 16)):
        with pytest.raises(ValueError, match=f"no {nbytes} bytes at offset {offset}"):
            pool.array_at(offset, nbytes)
    assert pool.used_bytes() == 1024  # a view takes no piece


# ---- lifetime ------------------------------------------------------------------------------------

def test_views_keep_the_piece_until_the_last_one_dies():
    pool = use(coop.allocator("1MiB", base=BASE))
    with no_gc():
        a = cupy.empty(4096, dtype=cupy.uint8)
        tail = a[1024:]
        square = a.reshape(64, 64)
        column = square[:, 3]
        del a
        assert pool.used_bytes() == 4096
        assert tail.data.ptr == BASE + 1024 and column.data.ptr == BASE + 3
        assert pool.offset_of(tail) == pool.offset_of(column) == 0
        del tail, square
        assert pool.used_bytes() == 4096
        del column
        assert pool.used_bytes() == 0 and layout(pool) == [(0, MiB, True)]
        assert cupy.empty(100, dtype=cupy.uint8).data.ptr == BASE  # the piece is reused


def test_size_zero_is_a_null_pointer_without_a_piece():
    pool = use(coop.allocator("1MiB", base=BASE, device=2))
    pointer = pool.malloc(0)
    assert (pointer.ptr, pointer.device_id, pointer.mem.size) == (0, 2, 0)
    empty = cupy.empty((0, 5), dtype=cupy.float64)
    assert empty.data.ptr == 0 and empty.size == 0
    assert pool.used_bytes() == 0 and pool.total_bytes() == 0  # nothing reserved either
    assert cupy.empty(3, dtype=cupy.uint8).data.device_id == 2


def test_size_zero_within_the_pools_scope_takes_one_piece():
    """Within `with pool:` (where a runtime's ops run) an empty array takes a 512-byte piece,
    so that it has an address in the arena, as np.empty(0) has one on the host."""
    pool = coop.allocator("1MiB", base=BASE)
    with pool:
        empty = cupy.empty((0, 5), dtype=cupy.float64)
        assert empty.size == 0 and pool.offset_of(empty) is not None
        assert pool.used_bytes() == 512
    del empty
    assert pool.used_bytes() == 0
    pool.arena.check()


# ---- out of memory and eviction -----------------------------------------------------------------

def test_out_of_memory_is_both_errors_with_coops_message():
    pool = use(coop.allocator(4096, base=BASE))
    a = cupy.empty(3000, dtype=cupy.uint8)
    with pytest.raises(coop.OutOfMemoryError) as info:
        cupy.empty(2000, dtype=cupy.uint8)
    err = info.value
    assert isinstance(err, cupy.cuda.memory.OutOfMemoryError) and isinstance(err, MemoryError)
    assert str(err) == ("coop: cannot allocate 2048 bytes under policy 'none': budget 4096 bytes, "
                        "1024 bytes free, largest free range 1024 bytes, and nothing left to "
                        "evict (pinned or anonymous: 1 pieces, 3072 bytes; unevictable: 0 "
                        "pieces, 0 bytes; the largest range free of them: 1024 bytes; "
                        "constants, which can only move, each to a free piece of its own: 0 "
                        "pieces, 0 bytes); raise the budget, or free or unpin tensors")
    assert (err.request, err.budget, err.free, err.largest_free) == (2048, 4096, 1024, 1024)
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is type(err) and str(copy) == str(err) and copy.free == 1024
    pool.arena.check()
    assert layout(pool) == [(0, 3072, False), (3072, 1024, True)]
    with pytest.raises(cupy.cuda.memory.OutOfMemoryError, match="larger than the whole arena"):
        cupy.empty(5000, dtype=cupy.uint8)
    pool.arena.check()
    assert pool.used_bytes() == 3072 and a.data.ptr == BASE


def test_anonymous_pieces_are_never_evicted():
    pool = use(coop.allocator(4096, base=BASE))
    pool.arena.attach(CallbackOwner(lambda victims: pytest.fail(f"evicted {victims}"), "lru"))
    a = cupy.empty(4096, dtype=cupy.uint8)
    with pytest.raises(coop.OutOfMemoryError):
        cupy.empty(1, dtype=cupy.uint8)
    assert pool.offset_of(a) == 0 and pool.arena.stats()["evictions"] == 0


def test_eviction_through_the_pools_callback():
    pool = use(coop.allocator(4096, base=BASE))
    held = {}

    def evict(victims):
        calls.append(list(victims))
        for sid in victims:
            del held[sid]  # the last reference: the piece is freed right here

    calls = []
    with no_gc():
        held[7] = cupy.empty(2048, dtype=cupy.uint8)
        pinned = cupy.empty(1024, dtype=cupy.uint8)
        pool.arena.add_storage(7, cost=1.0)
        pool.arena.bind(pool.offset_of(held[7]), 7)
        with pytest.raises(coop.OutOfMemoryError, match="the policy evicts nothing, though 1 "
                                                   "evictable pieces [(]2048 bytes[)] are left"):
            cupy.empty(1500, dtype=cupy.uint8)  # no owner yet: 7 stays
        assert calls == [] and pool.arena.storage_info(7)["resident"]
        pool.arena.attach(CallbackOwner(evict, "lru"))
        b = cupy.empty(1500, dtype=cupy.uint8)
    assert calls == [[7]] and held == {}
    assert b.data.ptr == BASE and pinned.data.ptr == BASE + 2048
    assert pool.arena.storage_info(7)["resident"] is False
    stats = pool.arena.stats()
    assert (stats["evictions"], stats["bytes_evicted"], stats["used_bytes"]) == (1, 2048, 2560)
    pool.arena.check()


# ---- arguments -----------------------------------------------------------------------------------

@pytest.mark.parametrize("budget", ["-3GB", "abc", 0, True])
def test_bad_budgets_raise_clear_errors(budget):
    with pytest.raises((ValueError, TypeError), match=re.escape(repr(budget))):
        coop.allocator(budget, base=BASE)


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="below one 512-byte piece"):
        coop.allocator(100, base=BASE)
    with pytest.raises(TypeError, match="policy"):
        coop.allocator("1MiB", policy="lru", base=BASE)
    with pytest.raises(TypeError, match="policy"):
        backend.CoopMemoryPool("1MiB", policy="lru", base=BASE)
    with pytest.raises(ValueError, match="multiple of 512"):
        coop.allocator("1MiB", base=BASE + 64)
    with pytest.raises(TypeError, match="base must be an int"):
        coop.allocator("1MiB", base=True)
    with pytest.raises(ValueError, match="device must be >= 0"):
        coop.allocator("1MiB", device=-1, base=BASE)
    with pytest.raises(ValueError, match="with base= give it in bytes"):
        coop.allocator("50%", base=BASE)


def test_set_limit_accepts_only_the_budget():
    pool = coop.allocator("1MiB", base=BASE)
    pool.set_limit(size=MiB)
    for kwargs in ({"size": 2 * MiB}, {"size": 0}, {}, {"fraction": 0.5}):
        with pytest.raises(ValueError, match=r"budget is fixed .*\(1048576 bytes\)"):
            pool.set_limit(**kwargs)
    assert pool.get_limit() == MiB


def test_free_all_blocks_with_base_forgets_the_reservation_only_when_idle():
    pool = use(coop.allocator("1MiB", base=BASE))
    a = cupy.empty(10, dtype=cupy.uint8)
    pool.free_all_blocks()
    assert pool.total_bytes() == MiB and a.data.ptr == BASE
    del a
    pool.free_all_blocks()
    assert (pool.total_bytes(), pool.free_bytes(), pool.n_free_blocks()) == (0, 0, 0)
    assert cupy.empty(10, dtype=cupy.uint8).data.ptr == BASE


def test_import_coop_needs_no_cupy(tmp_path):
    code = ("import sys; sys.modules['cupy'] = None; import coop; coop.Arena(512)\n"
            "assert 'coop.backends.cupy' not in sys.modules\n"
            "try: coop.allocator\n"
            "except ModuleNotFoundError as err: print(err)\n")
    # the coop this test imported (installed, or built in place), not the bare source tree
    env = dict(os.environ, PYTHONPATH=str(Path(coop.__file__).parent.parent))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env=env, check=True)
    assert out.stdout == "coop.allocator needs CuPy: pip install cupy-cuda12x\n"


# ---- the driver path, with a fake driver (tests/_cupy_driver.py) ------------------------------

def test_one_lazy_reservation_per_device(driver):
    pool = use(coop.allocator("1MiB"))
    assert driver.reserved == [] and pool.total_bytes() == 0
    a = cupy.empty(10, dtype=cupy.uint8)
    b = cupy.empty(10, dtype=cupy.uint8)
    driver.device = 1
    c = cupy.empty(10, dtype=cupy.uint8)
    assert driver.reserved == [(0, MiB), (1, MiB)]
    assert (a.data.ptr, b.data.ptr, c.data.ptr) == (BASE, BASE + 512, 0x7E0000000000)
    assert c.data.device_id == 1 and pool.used_bytes() == 512
    assert pool.offset_of(c) == 0 and pool.offset_of(b) is None  # b is on another device
    driver.device = 0
    assert pool.used_bytes() == 1024 and pool.offset_of(b) == 512


def test_device_restriction(driver):
    pool = use(coop.allocator("1MiB", device=0))
    cupy.empty(10, dtype=cupy.uint8)
    driver.device = 1
    for nbytes in (10, 0):
        with pytest.raises(RuntimeError, match="serves device 0 only, but the current device is 1"):
            pool.malloc(nbytes)
    with pytest.raises(RuntimeError, match="serves device 0 only"):
        pool.arena
    assert pool.used_bytes() == 0 and driver.reserved == [(0, MiB)]


def test_percentage_budget_is_of_the_memory_the_device_has_free(driver):
    driver.free, driver.total = 40_000_000_000, 80_000_000_000
    pool = use(coop.allocator("1%"))
    assert pool.get_limit() == 400_000_000
    cupy.empty(10, dtype=cupy.uint8)
    assert driver.reserved == [(0, 400_000_000)] and pool.total_bytes() == 400_000_000
    driver.free = 1_000_000   # the budget was fixed at the first use of the device
    assert pool.get_limit() == 400_000_000


def test_a_budget_the_device_cannot_hold_is_coops_out_of_memory(monkeypatch):
    from _cupy_driver import install
    driver = install(monkeypatch, backend, reserve=False)
    driver.free, driver.total = 3 * MiB, 80 * MiB
    calls = []

    def cuda_malloc(nbytes):  # what cupy.cuda.Memory raises when cudaMalloc fails
        calls.append(nbytes)
        raise cupy.cuda.runtime.CUDARuntimeError(2)

    monkeypatch.setattr(backend, "_cuda_malloc", cuda_malloc)
    pool = use(coop.allocator("4MiB"))
    with pytest.raises(backend.CupyOutOfMemoryError) as info:
        cupy.empty(10, dtype=cupy.uint8)
    err = info.value
    assert isinstance(err, cupy.cuda.memory.OutOfMemoryError) and isinstance(err, coop.OutOfMemoryError)
    assert calls == [4 * MiB, 4 * MiB]  # one retry after a garbage collection
    assert str(err).startswith(f"coop: cannot reserve the budget of {4 * MiB} bytes on device 0: "
                               f"the device has {3 * MiB} bytes free of {80 * MiB} (")
    assert f"give a budget below {3 * MiB} bytes" in str(err)
    assert (err.request, err.budget, err.free) == (4 * MiB, 4 * MiB, 3 * MiB)
    assert pool.total_bytes() == 0 and pool.used_bytes() == 0
    monkeypatch.setattr(backend, "_cuda_malloc", lambda n: (_ for _ in ()).throw(
        cupy.cuda.runtime.CUDARuntimeError(1)))  # any other driver error passes unchanged
    with pytest.raises(cupy.cuda.runtime.CUDARuntimeError) as other:
        cupy.empty(10, dtype=cupy.uint8)
    assert not isinstance(other.value, MemoryError)
    monkeypatch.setattr(backend, "_cuda_malloc", lambda nbytes: driver.reserve(0, nbytes))
    assert cupy.empty(10, dtype=cupy.uint8).data.ptr == BASE  # a later reservation can succeed


# ---- a real device -------------------------------------------------------------------------------

@pytest.mark.cuda
def test_real_device_arithmetic_under_the_coop_allocator():
    pool = use(coop.allocator("64MiB"))
    x = cupy.arange(1000, dtype=cupy.float32)
    y = x * 2 + 1
    assert float(y.sum().get()) == 1_000_000.0
    np.testing.assert_array_equal(y[:3].get(), np.array([1, 3, 5], dtype=np.float32))
    assert pool.total_bytes() == 64 * MiB and pool.used_bytes() >= 8192
    base = x.data.ptr - pool.offset_of(x)
    assert base % 512 == 0 and x.data.ptr % 512 == 0 and y.data.ptr % 512 == 0
    assert base <= y.data.ptr < base + 64 * MiB
    with cupy.cuda.Stream():
        z = cupy.zeros(10, dtype=cupy.uint8)  # any stream may allocate
        assert int(z.sum().get()) == 0
    del z
    del x, y
    gc.collect()
    cupy.cuda.Device().synchronize()
    pool.free_all_blocks()
    assert pool.total_bytes() == 0 and pool.used_bytes() == 0


@pytest.mark.cuda
def test_real_device_budget_larger_than_the_device():
    total = cupy.cuda.runtime.memGetInfo()[1]
    pool = use(coop.allocator("100TiB"))
    with pytest.raises(backend.CupyOutOfMemoryError, match="cannot reserve the budget") as info:
        cupy.empty(10)   # cudaMalloc's CUDARuntimeError, turned into coop's (and CuPy's) error
    assert isinstance(info.value, cupy.cuda.memory.OutOfMemoryError)
    assert 0 < info.value.free <= total and f"free of {total}" in str(info.value)
    assert pool.total_bytes() == 0


@pytest.mark.skipif(cupy.cuda.is_available(), reason="a CUDA device is visible here")
def test_without_a_device_the_pool_says_what_needs_one_and_the_fix():
    """On a machine without a usable device (here, as in CI: no driver), a budget that is a
    share of the device's memory, a runtime on the pool and an allocation through it raise one
    CoopError naming the missing device and the host's allocator, not CuPy's runtime error."""
    message = (r"coop: coop.allocator needs a CUDA device, and .*; on the host use "
               r"coop.numpy_allocator, or give coop.allocator base= for memory the caller owns")
    with pytest.raises(coop.CoopError, match=message):
        coop.allocator("50%")
    with pytest.raises(coop.CoopError, match=message):
        coop.Runtime(coop.allocator("6GiB"))
    with pytest.raises(coop.CoopError, match=message):
        with coop.allocator("6GiB"):
            cupy.empty(10)
