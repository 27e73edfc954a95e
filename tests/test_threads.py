"""One arena, many threads: allocations and frees from every thread at once (through the host
backend's NumPy handler, or the CuPy pool on fake device addresses), frees of arrays made by
another thread, and frees arriving from __del__ during an eviction that another thread started.
Afterwards the arena is consistent and every byte is back."""
import queue
import sys
import threading

import numpy as np
import pytest

import coop
from coop._core import CallbackOwner

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
