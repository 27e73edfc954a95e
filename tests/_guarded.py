"""The check that another thread's allocations evict only outside a runtime's ops (the
core's rule: an eviction for an allocation holds the owner's lock, Evictor.lock), shared by
the host backend's and the CuPy pool's tests."""
import threading


def evictions_wait_for_the_runtime(rt, kept, allocate):
    """kept: tensors of rt filling most of its arena; allocate(nbytes) makes an array through
    the backend on the calling thread. While rt's lock is held (its thread inside an op), a
    thread's 4 KiB allocation (it fits) completes at once and its 512 KiB one (it must evict)
    waits; once the lock is released it evicts at least two of kept and completes."""
    done = {}

    def run(name, nbytes):
        done[name] = allocate(nbytes)

    with rt._lock:                         # the runtime's thread is inside an op
        small = threading.Thread(target=run, args=("small", 4096))
        small.start()
        small.join(5)
        assert "small" in done             # it fit: no wait
        big = threading.Thread(target=run, args=("big", 512 * 1024))
        big.start()
        big.join(0.2)
        assert big.is_alive() and "big" not in done     # it must evict: it waits
        assert all(t.storage.array is not None for t in kept)
    big.join(5)
    assert "big" in done and sum(t.storage.array is None for t in kept) >= 2
    done.clear()
    rt.arena.check()
