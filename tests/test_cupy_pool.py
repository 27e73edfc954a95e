"""The CuPy pool's CuPy-facing contract on a fake driver (tests/_cupy_driver.py): streams,
memory hooks, garbage collection before out-of-memory, stats and limits."""
import gc
import io
import threading

import pytest

cupy = pytest.importorskip("cupy")

import coop  # noqa: E402
from coop.backends import streams as streams  # noqa: E402
from _cupy_driver import driver  # noqa: E402,F401  (the fixture)

MiB = 1 << 20
BASE = 0x7F0000000000


def use(pool):
    cupy.cuda.set_allocator(pool)
    return pool


def empty(nbytes):
    return cupy.empty(nbytes, dtype=cupy.uint8)


# ---- streams ---------------------------------------------------------------------------------

def test_one_stream_needs_no_driver_call(driver, no_gc):
    use(coop.allocator("1MiB"))
    for _ in range(3):
        a = empty(1000)
        del a
    assert empty(10).data.ptr == BASE and driver.log == []


def test_a_second_stream_waits_for_the_firsts_frees(driver, no_gc):
    pool = use(coop.allocator("1MiB"))
    a = empty(1000)          # on A
    del a                    # freed on A; A may still be using it
    driver.stream = "B"
    b = empty(1000)          # reuses the piece: B waits on an event recorded on A now
    assert b.data.ptr == BASE
    assert driver.take() == [("record", "e1", "A"), ("wait", "B", "e1")]
    c = empty(1000)          # nothing freed on A since: no new wait
    assert driver.take() == [] and c.data.ptr == BASE + 1024
    driver.stream = "A"
    d = empty(512)           # nothing freed on B yet: A allocates without waiting
    assert driver.take() == []
    del b                    # freed on B, the stream it was allocated on
    driver.stream = "A"
    e = empty(512)
    assert driver.take() == [("record", "e2", "B"), ("wait", "A", "e2")]
    del d, e
    f = empty(512)           # frees on A itself: reused at once on A
    assert driver.take() == [] and f.data.ptr == BASE
    driver.stream = "B"
    g = empty(512)           # A freed d and e since B last waited: record A again, wait
    assert driver.take() == [("record", "e1", "A"), ("wait", "B", "e1")]
    del c, f, g
    pool.arena.check()


def test_a_free_is_counted_before_its_piece_goes_back(driver, no_gc, monkeypatch):
    """With several streams, a free is counted for stream ordering while its piece is still
    used: a stream another thread serves it to, the moment it is back, waits for it."""
    pool = use(coop.allocator("1MiB"))
    driver.stream = "B"
    b = empty(1000)
    driver.stream = "A"
    a = empty(1000)
    seen = []
    counted = streams.StreamOrder.on_free
    monkeypatch.setattr(streams.StreamOrder, "on_free", lambda self, key: (
        seen.append((key, pool.used_bytes())), counted(self, key)))
    del b
    assert seen == [("B", 2048)]             # counted while both pieces were still used
    assert pool.used_bytes() == 1024
    del a
    pool.arena.check()


def test_the_free_is_tagged_with_the_allocation_stream_not_the_current_one(driver, no_gc):
    use(coop.allocator("1MiB"))
    driver.stream = "B"
    b = empty(100)
    driver.stream = "A"
    a = empty(100)           # A's first allocation after B existed: B freed nothing yet
    driver.take()
    del b                    # freed while A is current: still B's piece
    c = empty(100)
    assert driver.take() == [("record", "e1", "B"), ("wait", "A", "e1")]
    del a, c


class Worker:
    """One thread that runs the functions it is given, one at a time (its own default stream)."""

    def __init__(self):
        import queue
        self.tasks, self.done = queue.Queue(), queue.Queue()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while (fn := self.tasks.get()) is not None:
            try:
                fn()
                self.done.put(None)
            except BaseException as err:  # noqa: B902 - handed to the caller
                self.done.put(err)

    def __call__(self, fn):
        self.tasks.put(fn)
        err = self.done.get(timeout=30)
        if err is not None:
            raise err

    def stop(self):
        self.tasks.put(None)
        self.thread.join()


def test_per_thread_default_streams_are_distinct_streams(driver, no_gc):
    use(coop.allocator("1MiB"))
    driver.stream = "ptds"   # every thread's own default stream, one shared handle
    held, worker, other = {}, Worker(), Worker()
    me = f"ptds@{threading.get_ident()}"
    worker(lambda: held.setdefault("x", empty(1000)))
    held["y"] = empty(1000)  # the main thread's stream is a second stream: what the worker
    # freed before the bookkeeping began cannot be recorded from here, so the device syncs
    assert driver.take() == [("sync", 0)] and held["y"].data.ptr == BASE + 1024
    worker(lambda: held.__delitem__("x"))   # freed in its own thread: recorded there
    assert driver.take() == [("record", "e1", f"ptds@{worker.thread.ident}")]
    z = empty(1000)          # the main thread reuses it after waiting on that event
    assert z.data.ptr == BASE and driver.take() == [("wait", me, "e1")]
    other(lambda: held.__delitem__("y"))    # the main thread's piece, freed elsewhere:
    assert driver.take() == []               # no handle to the main thread's stream there
    worker(lambda: held.setdefault("w", empty(1000)))
    assert driver.take() == [("sync", 0)] and held["w"].data.ptr == BASE + 1024
    worker(lambda: held.__delitem__("w"))
    worker.stop()
    other.stop()
    del z


def test_the_first_streams_liveness_is_judged_on_its_own_thread(driver, no_gc):
    """A thread's per-thread default stream allocates first; another stream's allocation on
    the main thread starts the bookkeeping: the first stream lives as long as its own thread,
    not the main one."""
    pool = use(coop.allocator("1MiB"))
    made = []

    def first():
        driver.stream = "ptds"
        made.append(empty(100))
        made.append(threading.current_thread())
    worker = threading.Thread(target=first)
    worker.start()
    worker.join()
    driver.stream = "A"
    b = empty(100)
    order = pool._homes[0].order
    first_key = pool._homes[0].stream_key
    assert order is not None and order.alive[first_key]() is made[1]
    del made, b
    pool.arena.check()


def test_threads_are_told_apart_by_numbers_never_reused():
    numbers = [streams.thread_number()]
    for _ in range(3):   # thread idents are reused once a thread ends; these numbers are not
        t = threading.Thread(target=lambda: numbers.append(streams.thread_number()))
        t.start()
        t.join()
    assert len(set(numbers)) == 4 and streams.thread_number() == numbers[0]


def test_free_all_blocks_after_several_streams_synchronizes_then_starts_afresh(driver, no_gc):
    pool = use(coop.allocator("1MiB"))
    a = empty(10)
    driver.stream = "B"
    b = empty(10)
    del a, b
    driver.take()
    pool.free_all_blocks()
    assert driver.take() == [("sync", 0)] and driver.released == [0]
    c = empty(10)            # reserved again, on B: one stream, no bookkeeping
    del c
    driver.stream = "A"
    empty(10)
    assert driver.take() == [("record", "e2", "B"), ("wait", "A", "e2")]  # e1: before the release


def test_stream_bookkeeping_does_not_reach_a_caller_owned_base(driver, no_gc):
    use(coop.allocator("1MiB", base=BASE))
    a = empty(10)
    driver.stream = "B"
    del a
    empty(10)
    assert driver.log == []


# ---- memory hooks ------------------------------------------------------------------------------

class Recorder(cupy.cuda.MemoryHook):
    name = "Recorder"

    def __init__(self):
        self.calls = []

    def _note(stage):
        def note(self, **kwargs):
            self.calls.append((stage, kwargs))
        return note

    alloc_preprocess = _note("alloc_pre")
    alloc_postprocess = _note("alloc_post")
    malloc_preprocess = _note("malloc_pre")
    malloc_postprocess = _note("malloc_post")
    free_preprocess = _note("free_pre")
    free_postprocess = _note("free_post")


def test_memory_hooks_are_called_as_cupys_pool_calls_them(driver, no_gc):
    use(coop.allocator("1MiB"))
    hook = Recorder()
    with hook:
        a = empty(1000)
        pmem = id(a.data.mem)
        del a
        zero = cupy.empty(0)
    assert zero.data.ptr == 0
    assert hook.calls == [
        ("malloc_pre", dict(device_id=0, size=1000, mem_size=1024)),
        ("alloc_pre", dict(device_id=0, mem_size=MiB)),
        ("alloc_post", dict(device_id=0, mem_size=MiB, mem_ptr=BASE)),
        ("malloc_post", dict(device_id=0, size=1000, mem_size=1024, mem_ptr=BASE, pmem_id=pmem)),
        ("free_pre", dict(device_id=0, mem_size=1024, mem_ptr=BASE, pmem_id=pmem)),
        ("free_post", dict(device_id=0, mem_size=1024, mem_ptr=BASE, pmem_id=pmem)),
        ("malloc_pre", dict(device_id=0, size=0, mem_size=0)),
        ("malloc_post", dict(device_id=0, size=0, mem_size=0, mem_ptr=0,
                             pmem_id=id(zero.data.mem))),
    ]


def test_cupys_own_debug_print_hook_runs(driver):
    use(coop.allocator("1MiB"))
    from cupy.cuda.memory_hooks import DebugPrintHook
    out = io.StringIO()
    with DebugPrintHook(file=out):
        a = empty(100)
        del a
    out = out.getvalue()
    assert '"hook":"malloc"' in out and '"hook":"free"' in out and f'"mem_ptr":{BASE}' in out


def test_a_failed_malloc_still_calls_the_post_hook(driver):
    use(coop.allocator(4096))
    hook = Recorder()
    gc.collect()   # the failure collects garbage: leave none of other tests' pieces to free
    with hook, pytest.raises(coop.OutOfMemoryError):
        empty(5000)
    assert [stage for stage, _ in hook.calls] == ["malloc_pre", "alloc_pre", "alloc_post",
                                                   "malloc_post"]
    assert hook.calls[-1][1]["mem_ptr"] == 0 and hook.calls[-1][1]["pmem_id"] == 0


# ---- garbage collection before out-of-memory -----------------------------------------------------

def test_an_unreachable_cycle_holding_memory_is_collected_before_out_of_memory(driver, no_gc):
    pool = use(coop.allocator(4096))
    cycle = [empty(3000)]
    cycle.append(cycle)
    del cycle                # unreachable, but only the collector can free it
    assert pool.used_bytes() == 3072
    b = empty(3000)          # fits only once the cycle is collected
    assert b.data.ptr == BASE and pool.used_bytes() == 3072
    pool.arena.check()


def test_inside_a_runtimes_op_a_failure_goes_back_without_collecting(driver, no_gc,
                                                                       monkeypatch):
    """Within placing() (a runtime's kernel runs there) the failure goes straight back to the
    runtime, which makes room and runs the kernel again: no collection at each."""
    from coop import EXPENSIVE
    pool = use(coop.allocator(4096))
    collected, real = [], gc.collect
    monkeypatch.setattr(gc, "collect", lambda *a: collected.append(1) or 0)
    cycle = [empty(3000)]
    cycle.append(cycle)
    del cycle
    with pool.placing(EXPENSIVE), pytest.raises(coop.OutOfMemoryError):
        empty(3000)
    assert collected == []
    with pytest.raises(coop.OutOfMemoryError):   # outside: collected once (nothing here)
        empty(3000)
    assert collected == [1]
    monkeypatch.setattr(gc, "collect", real)
    gc.collect()
    pool.arena.check()


# ---- stats and limits: CuPy's meanings, and where coop's differ ----------------------------------

def test_stats_follow_cupys_meanings(driver, no_gc):
    pool = use(coop.allocator("1MiB"))
    assert (pool.used_bytes(), pool.free_bytes(), pool.total_bytes(), pool.n_free_blocks()) == \
        (0, 0, 0, 0)      # CuPy's empty pool too
    a = empty(1000)
    # used: rounded to 512 as CuPy's; free = total - used; total: the whole budget at once
    # (CuPy's grows to what it has cudaMalloc'd)
    assert (pool.used_bytes(), pool.free_bytes(), pool.total_bytes()) == (1024, MiB - 1024, MiB)
    del a
    assert (pool.used_bytes(), pool.free_bytes(), pool.n_free_blocks()) == (0, MiB, 1)
    pool.free_all_blocks()   # as CuPy's: releases what no allocation uses
    assert (pool.total_bytes(), pool.free_bytes(), driver.released) == (0, 0, [0])


def test_get_limit_is_the_budget_never_cupys_zero(driver):
    pool = coop.allocator("1MiB")
    assert pool.get_limit() == MiB
    pool.set_limit(size=MiB)
    for kwargs in ({}, {"size": 0}, {"fraction": 0.5}, {"size": 2 * MiB}):
        with pytest.raises(ValueError, match="budget is fixed"):
            pool.set_limit(**kwargs)   # CuPy: {} and size=0 lift the limit; coop keeps one


@pytest.mark.parametrize("limit, budget, ok", [
    ("2000000", "1MiB", True), ("1000000", "1MiB", False), ("2%", "1GiB", True),
    ("1%", "1GiB", False), ("0", "1GiB", True)])
def test_cupy_gpu_memory_limit_caps_the_budget(driver, monkeypatch, limit, budget, ok):
    monkeypatch.setenv("CUPY_GPU_MEMORY_LIMIT", limit)   # "1%" of the fake 80 GiB: 0.8 GiB
    if ok:
        assert coop.allocator(budget).get_limit() == coop.budget.parse_budget(budget)
    else:
        with pytest.raises(ValueError, match=r"exceeds CUPY_GPU_MEMORY_LIMIT \('%s'" % limit):
            coop.allocator(budget)


def test_cupy_gpu_memory_limit_of_bad_form_is_named(driver, monkeypatch):
    monkeypatch.setenv("CUPY_GPU_MEMORY_LIMIT", "8 gigs")
    with pytest.raises(ValueError, match="CUPY_GPU_MEMORY_LIMIT='8 gigs' is neither"):
        coop.allocator("1MiB")
    monkeypatch.setenv("CUPY_GPU_MEMORY_LIMIT", "50%")
    with pytest.raises(ValueError, match="with base= unset it or give it in bytes"):
        coop.allocator("1MiB", base=BASE)


def test_a_moves_destination_calls_the_malloc_hooks_its_free_will_balance(driver, no_gc):
    # adopt (a move's destination) called no malloc hook, but its free called the free hooks:
    # a profiling hook saw frees of memory it never saw allocated
    pool = use(coop.allocator("1MiB"))
    empty(10)                                   # reserve
    offset = pool.arena.request(3000)           # the piece coop's window moves a storage to
    hook = Recorder()
    with hook:
        pointer = pool._adopt_on(0, offset, 3000)
        pmem = id(pointer.mem)
        del pointer
    info = dict(device_id=0, mem_size=3072, mem_ptr=BASE + offset, pmem_id=pmem)
    assert hook.calls == [
        ("malloc_pre", dict(device_id=0, size=3000, mem_size=3072)),
        ("malloc_post", dict(info, size=3000)),
        ("free_pre", info), ("free_post", info)]


def test_free_all_blocks_keeps_the_reservation_under_an_array_at_view(driver, no_gc):
    # array_at's view is no piece: free_all_blocks saw no piece in use and freed the memory
    pool = use(coop.allocator("1MiB"))
    empty(10)                                    # reserved, nothing in use
    view = pool.array_at(512, 1024)
    assert view.data.ptr == BASE + 512 and pool.used_bytes() == 0
    pool.free_all_blocks()
    assert driver.released == [] and pool.total_bytes() == MiB
    del view
    pool.free_all_blocks()
    assert driver.released == [0] and pool.total_bytes() == 0


def test_a_moves_source_is_freed_in_the_order_of_the_stream_that_copied_it(driver, no_gc):
    # the copy ran on the current stream B, the source's free was ordered on A (where it was
    # allocated), and A reused it at once: A could overwrite it before B's copy read it
    pool = use(coop.allocator("1MiB"))
    a = empty(1000)                              # on A, at the base
    driver.stream = "B"
    offset = pool.arena.request(1000)
    moved = pool._adopt_on(0, offset, 1000, a)   # B copies a there (the executor's move)
    assert driver.take() == [("record", "e1", "A"), ("wait", "B", "e1")]   # B's first piece
    del a                                        # the move is done: the source goes
    driver.stream = "A"
    reuse = empty(1000)
    assert reuse.data.ptr == BASE and moved.ptr == BASE + offset
    assert driver.take() == [("record", "e2", "B"), ("wait", "A", "e2")]


def test_streams_the_program_dropped_are_forgotten(driver, no_gc):
    # the stream order table kept every Stream and its event until free_all_blocks, and every
    # malloc looped over every stream ever seen
    import weakref
    from _cupy_driver import FakeStream
    pool = use(coop.allocator("1MiB"))
    keep = empty(10)                             # on A: a second stream makes the table
    gone = []
    for i in range(100):
        stream = driver.stream = FakeStream(f"s{i}")
        a = empty(1000)
        del a                                    # freed on s{i}
        gone.append(weakref.ref(stream))
        driver.stream = "A"
        empty(1000)                              # A waits for s{i}'s free: recorded now
        driver.finished.add(f"e{driver.events}")     # ... and the device passed it
        del stream
    order = pool._homes[0].order
    assert all(ref() is None for ref in gone)    # no stream object kept
    assert len(order.streams) <= 2 and len(order.freed) <= 2 and len(order.events) <= 2
    del keep


def test_a_stream_whose_frees_the_device_passed_is_not_waited_for(driver, no_gc):
    use(coop.allocator("1MiB"))
    a = empty(1000)
    del a                                        # freed on A
    driver.stream = "B"
    on_b = empty(1000)
    assert driver.take() == [("record", "e1", "A"), ("wait", "B", "e1")]
    driver.stream = "A"
    b = empty(1000)
    del b
    driver.stream = "C"
    on_c = empty(1000)                           # A's event: recorded for C now
    assert driver.take() == [("record", "e1", "A"), ("wait", "C", "e1")]
    driver.finished.add("e1")                    # the device passed A's frees
    driver.stream = "B"
    on_b2 = empty(1000)                          # B need not wait for them
    assert driver.take() == [] and driver.queries > 0
    del on_b, on_c, on_b2
