"""One arena, many threads: allocations and frees from every thread at once (through the host
backend's NumPy handler, or the CuPy pool on fake device addresses), frees of arrays made by
another thread, and frees arriving from __del__ during an eviction that another thread started.
Afterwards the arena is consistent and every byte is back."""
import collections
import queue
import sys
import threading

import numpy as np
import pytest

import coop
from coop._core import CallbackOwner
from _guarded import evictions_wait_for_the_runtime

THREADS = 4
ROUNDS = 6           # barrier-separated rounds; between two, the live arrays are checked
PER_ROUND = 150
BASE = 0x7F0000000000


class Host:
    name = "host"

    def __init__(self, budget):
        self.backend = coop.numpy_allocator(budget)

    def empty(self, n, tag):
        a = np.empty(n, np.uint8)
        a.fill(tag)
        return a

    def intact(self, a, tag):
        # bytes, not a NumPy temporary: the evict callback must not allocate from the arena
        return a.tobytes() == bytes([tag]) * a.nbytes


class Cupy:
    """Fake device memory: CuPy builds the arrays, nothing reads or writes them."""
    name = "cupy"

    def __init__(self, budget):
        self.cupy = pytest.importorskip("cupy")
        self.backend = coop.allocator(budget, base=BASE)

    def empty(self, n, tag):
        return self.cupy.empty(n, dtype=self.cupy.uint8)

    def intact(self, a, tag):
        return True


class Box:
    """Holds an evictable array; the array's free arrives from __del__ when the box dies."""
    __slots__ = ("array", "tag")

    def __init__(self, array, tag):
        self.array, self.tag = array, tag

    def __del__(self):
        self.array = None


def offset(backend, a):
    return backend.offset_of(a)


def ranges_are_disjoint(backend, arrays):
    spans = sorted((offset(backend, a), a.nbytes) for a in arrays)
    return all(start + size <= nxt for (start, size), (nxt, _) in zip(spans, spans[1:]))


@pytest.fixture
def busy_switching():
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


@pytest.mark.parametrize("kind", [Host, Cupy], ids=["host", "cupy"])
@pytest.mark.parametrize("evicting", [False, True], ids=["roomy", "evicting"])
def test_many_threads_share_one_arena(kind, evicting, busy_switching):
    """Workers allocate random sizes in their own `with backend:`, keep a few, hand some to a
    dropper thread, and (evicting) register others as storages that the evict callback drops
    (their frees come from Box.__del__, in whichever thread is evicting)."""
    space = kind(256 * 1024 if evicting else 16 * 1024 * 1024)
    backend, arena = space.backend, space.backend.arena
    baseline = arena.stats()["used_bytes"]
    boxes, lock, failures = {}, threading.Lock(), []
    evicted = []

    def evict(victims):
        with lock:                    # one callback at a time: a pop and its free stay together
            for sid in victims:
                box = boxes.pop(sid, None)
                if box is not None:
                    if not space.intact(box.array, box.tag):
                        failures.append(f"storage {sid} was overwritten before its eviction")
                    evicted.append(sid)
                    del box           # the piece is freed here, from Box.__del__

    if evicting:
        arena.attach(CallbackOwner(evict, "coop"))   # the arena evicts through the callback
    hand_off = queue.Queue(maxsize=32)
    barrier = threading.Barrier(THREADS + 1, timeout=60)
    live = [[] for _ in range(THREADS)]

    def worker(w):
        rng = np.random.default_rng(w)
        with backend:
            for r in range(ROUNDS):
                for i in range(PER_ROUND):
                    tag = (w * 61 + i) % 251 + 1
                    a = space.empty(int(rng.integers(1, 4096)), tag)
                    if evicting and i % 3 == 0:
                        sid = (w * ROUNDS + r) * PER_ROUND + i
                        where = offset(backend, a)
                        boxes[sid] = Box(a, tag)
                        del a                 # the box holds the only reference
                        arena.add_storage(sid, cost=float(rng.random()))
                        arena.bind(where, sid)
                    elif i % 5 == 0:
                        hand_off.put(a)       # another thread drops it
                    else:
                        live[w].append((a, tag))
                        if len(live[w]) > 6:
                            old, old_tag = live[w].pop(int(rng.integers(len(live[w]))))
                            if not space.intact(old, old_tag):
                                failures.append(f"worker {w}: an array was overwritten")
                    a = None
                barrier.wait()                # the main thread checks the live arrays
                barrier.wait()
            live[w].clear()

    def dropper():
        while hand_off.get() is not None:
            pass

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(THREADS)]
    drop = threading.Thread(target=dropper)
    for thread in threads + [drop]:
        thread.start()
    for _ in range(ROUNDS):
        barrier.wait()
        with lock:
            arrays = [a for held in live for a, _ in held] + [b.array for b in boxes.values()]
            assert ranges_are_disjoint(backend, arrays)
            arena.check()
            del arrays
        barrier.wait()
    for thread in threads:
        thread.join()
    hand_off.put(None)
    drop.join()
    assert failures == []
    if evicting:
        assert len(evicted) > 100 and arena.stats()["evictions"] > 100
        assert all(arena.storage_info(sid)["resident"] is False for sid in evicted)
    boxes.clear()
    arena.check()
    assert arena.stats()["used_bytes"] == baseline
    assert [free for _, _, free, _ in arena.pieces()] == [True]


# ---- one runtime, many threads (the runtime's lock) ----------------------------------------------

ADDC = coop.Kernel(lambda a, c: a + c, name="add_scalar")
MIX = coop.Kernel(lambda a, b: np.tanh(a) * 0.5 + b * 0.25, name="mix")
SCALE_ = coop.Kernel(lambda a, c: np.multiply(a, c, out=a), name="scale_", inplace=0)


def program(rt, w, dropped):
    """A deterministic chain with in-place ops, releases and reads; every few steps a tensor
    goes to the dropper thread, whose __del__ releases it while others run."""
    x = rt.tensor(np.linspace(-1.0, 1.0, 96) + w)
    live = [x, rt.apply(ADDC, x, c=0.5)]
    for i in range(24):
        a, b = live[-1], live[-2]
        if i % 5 == 4:
            y = rt.apply(SCALE_, rt.apply(ADDC, a, c=0.0), c=0.75)
        else:
            y = rt.apply(MIX, a, b)
        live.append(y)
        if len(live) > 5:
            old = live.pop(1)
            if i % 3 == 0:
                dropped.put(old)
            del old
        if i % 4 == 0:
            rt.evict(live[1])
            live[1].numpy()               # recomputed
    return [t.numpy() for t in live]


@pytest.mark.parametrize("policy", ["coop", "dtr"])
def test_threads_share_one_runtime(policy, busy_switching):
    """Four threads run programs on one runtime that must evict and recompute: every result is
    bit-identical to the program run alone, and nothing is left pinned or registered."""
    expected = [program(coop.Runtime(coop.numpy_allocator("1MiB"), policy=policy, cost="cpu"),
                        w, queue.Queue()) for w in range(THREADS)]
    evictions = 0
    for trial in range(6):
        rt = coop.Runtime(coop.numpy_allocator("16KiB"), policy=policy, cost="cpu")
        dropped, results, errors = queue.Queue(), [None] * THREADS, []

        def run(w):
            try:
                results[w] = program(rt, w, dropped)
            except BaseException as exc:       # noqa: B902 - reported below
                errors.append(repr(exc))

        def drop():
            while dropped.get() is not None:
                pass

        threads = [threading.Thread(target=run, args=(w,)) for w in range(THREADS)]
        dropper = threading.Thread(target=drop)
        for thread in threads + [dropper]:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        dropped.put(None)
        dropper.join(timeout=120)
        assert errors == []
        for got, want in zip(results, expected):
            assert all(np.array_equal(g, v) for g, v in zip(got, want))
        assert rt.stats()["recomputes"] > 0
        evictions += rt.stats()["evictions"]
        rt.arena.check()
        assert rt.pinned() == {} and rt._pending == collections.deque()
        assert rt.storages() == []              # the programs' tensors are all gone
        assert rt.arena.stats()["used_bytes"] == 0
    assert evictions > 0                        # the budget was too small for them all


def test_a_tensor_dropped_by_a_kernels_worker_thread_is_released_without_waiting():
    """A kernel waits on a worker thread that drops the last Tensor on a storage while the
    kernel's thread holds the runtime: the release is queued (no deadlock) and done when the
    op ends."""
    rt = coop.Runtime(coop.numpy_allocator("64KiB"), cost="cpu")
    held = [rt.apply(ADDC, rt.tensor(np.ones(8)), c=1.0)]
    sid = held[0].storage.sid

    def drop_in_a_worker(a):
        worker = threading.Thread(target=held.clear)
        worker.start()
        worker.join(timeout=30)
        assert not worker.is_alive()
        return a * 2.0

    out = rt.apply(coop.Kernel(drop_in_a_worker, name="drop_in_a_worker"), rt.tensor(np.ones(4)))
    assert np.array_equal(out.numpy(), np.full(4, 2.0))
    assert sid not in rt.storages() and not rt._pending
    rt.arena.check()


def test_another_threads_allocation_evicts_only_outside_the_runtimes_ops():
    """The host backend serves every context it is installed in: a thread with it installed
    (a data loader's) allocates from the runtime's arena too. While the runtime's thread is
    inside it (its lock held), such an allocation takes a piece that fits at once, and one that
    must evict waits until the runtime's thread leaves: evictions never run beside the
    runtime's own work."""
    backend = coop.numpy_allocator("1MiB")
    rt = coop.Runtime(backend, policy="coop", cost="cpu")
    quarter = coop.Kernel(lambda: np.zeros(256 * 1024 - 1024, np.uint8), name="quarter")
    kept = [rt.apply(quarter) for _ in range(3)]

    def allocate(nbytes):
        with backend:
            return np.empty(nbytes, np.uint8)
    evictions_wait_for_the_runtime(rt, kept, allocate)
