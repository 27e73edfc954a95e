"""On a CUDA device: a move racing with reuse under two streams, a gradient bucket made
without a pinned host copy, and communication timed on the device. Skipped without a GPU."""
import numpy as np
import pytest

import coop
from coop import distributed

cupy = pytest.importorskip("cupy")

pytestmark = pytest.mark.cuda

SPIN = r'''
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}
'''


def spin(cycles=200_000_000):
    """Keep the current stream busy for about 0.1 s (at ~2 GHz)."""
    kernel = cupy.RawKernel(SPIN, "spin")
    kernel((1,), (1,), (np.int64(cycles),))


def test_a_move_on_another_stream_reads_its_source_before_the_first_stream_reuses_it():
    pool = coop.allocator("64MiB")
    cupy.cuda.set_allocator(pool)
    n = 4 << 20                                  # bytes
    a_stream, b_stream = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    with a_stream:
        source = cupy.full(n // 4, 7.0, dtype=cupy.float32)
        a_stream.synchronize()
    spin(1000)                                   # compile outside the race
    address = source.data.ptr
    with b_stream:
        spin()                                   # B is busy: its copy starts ~0.1 s from now
        offset = pool.arena.request(n)
        moved = pool.bound().copy_to(source, offset)   # the executor's move: adopt, then copy
        del source                               # the executor drops the source after the move
    with a_stream:
        reuse = cupy.empty(n // 4, dtype=cupy.float32)
        assert reuse.data.ptr == address         # A reuses the source's piece
        reuse.fill(-1.0)                         # must wait for B's copy to read it
    cupy.cuda.runtime.deviceSynchronize()
    assert float(moved.min()) == 7.0 and float(moved.max()) == 7.0


def test_a_cupy_bucket_is_made_on_the_device_without_a_pinned_host_copy():
    requests = []
    default = cupy.get_default_pinned_memory_pool().malloc

    def recording(nbytes):
        requests.append(nbytes)
        return default(nbytes)

    rt = coop.Runtime(coop.allocator("64MiB"), cost="h100")
    grads = [rt.tensor(cupy.ones((1 << 18,), dtype=cupy.float32))]
    cupy.cuda.set_pinned_memory_allocator(recording)
    try:
        buckets, nbytes, seconds = distributed._through_buckets(
            rt, grads, 1 << 20, lambda memory: memory.__imul__(2), True)
    finally:
        cupy.cuda.set_pinned_memory_allocator(default)
    assert (buckets, nbytes) == (1, 1 << 20)
    assert all(r < 1 << 20 for r in requests), requests
    assert float(grads[0].numpy().min()) == 2.0


def test_communication_is_timed_on_the_device_not_at_the_enqueue():
    rt = coop.Runtime(coop.allocator("64MiB"), cost="h100")
    grads = [rt.tensor(cupy.ones((1024,), dtype=cupy.float32))]
    spin(1000)
    _, _, seconds = distributed._through_buckets(rt, grads, 1 << 20, lambda memory: spin(), False)
    assert seconds > 0.02      # the kernel's ~0.1 s, not its microseconds of launch
