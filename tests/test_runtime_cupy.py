"""The runtime on the device: the same semantics as on the host, through the CuPy pool.

These need a CUDA device (the `cuda` marker): without one CuPy cannot run kernels.
"""
import numpy as np
import pytest

import coop

cupy = pytest.importorskip("cupy")

KiB = 1 << 10


def _chain(budget, policy):
    """A chain of matmul/tanh/dropout ops summed at the end; returns (result, stats)."""
    pool = coop.allocator(budget)
    rt = coop.Runtime(pool, policy=policy, cost="a100-80gb")   # any device: a fixed model
    rng = np.random.default_rng(0)
    w = rt.tensor(rng.standard_normal((64, 64)) * 0.1)
    h = rt.tensor(rng.standard_normal((64, 64)))
    matmul = coop.Kernel(lambda a, b: a @ b, name="matmul")
    tanh = coop.Kernel(lambda a, xp: xp.tanh(a), name="tanh")
    dropout = coop.Kernel(lambda a, rng: a * (rng.random(a.shape) > 0.5), name="dropout",
                          random=True)
    acc = coop.Kernel(lambda s, a: s + a.sum(), name="acc")
    hs = [h]
    for _ in range(24):
        hs.append(rt.apply(dropout, rt.apply(tanh, rt.apply(matmul, hs[-1], w))))
    total = rt.tensor(np.zeros(1))
    for t in reversed(hs):
        total = rt.apply(acc, total, t)
        rt.arena.check()
    return total.numpy(), rt.stats()


@pytest.mark.cuda
@pytest.mark.parametrize("policy", ["coop", "dtr", "dte", "coop-no-move"])
def test_recompute_on_the_device_is_bit_exact(policy):
    """coop moves pieces device to device on the current stream; coop-no-move only evicts."""
    expected, unlimited = _chain("64MiB", "coop")
    budget = int(unlimited["peak_used_bytes"] * 0.5) // 512 * 512
    got, stats = _chain(budget, policy)
    np.testing.assert_array_equal(got, expected)
    assert stats["recomputes"] > 0 and stats["evictions"] > 0


@pytest.mark.cuda
def test_a_tensor_on_the_device_is_a_piece_of_the_pool():
    pool = coop.allocator("1MiB")
    rt = coop.Runtime(pool, policy="coop", cost="a100-80gb")
    x = rt.tensor(np.arange(256, dtype=np.float32))
    with x.borrow() as a:
        assert isinstance(a, cupy.ndarray) and pool.offset_of(a) is not None
    assert pool.used_bytes() == 1 * KiB
    np.testing.assert_array_equal(x.numpy(), np.arange(256, dtype=np.float32))


@pytest.mark.cuda
def test_timing_on_the_device_measures_kernels_with_cuda_events():
    rt = coop.Runtime(coop.allocator("64MiB"), cost="timing")
    a = rt.tensor(np.ones((512, 512), dtype=np.float32))
    matmul = coop.Kernel(lambda p, q: p @ q, name="matmul")
    rt.apply(matmul, a, a)
    before = rt.clock
    out = rt.apply(matmul, a, a)
    assert rt.clock > before and rt.cost_model is None
    np.testing.assert_array_equal(out.numpy()[:2, :2], np.full((2, 2), 512, dtype=np.float32))


@pytest.mark.cuda
def test_the_default_cost_model_is_the_devices_own():
    from coop.engine.cost import device_spec
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    spec = device_spec(name)
    if spec is None:
        with pytest.warns(RuntimeWarning, match="no cost model for device"):
            rt = coop.Runtime(coop.allocator("1MiB"))
        assert rt.cost_model is coop.DEVICES["a100-80gb"]
    else:
        assert coop.Runtime(coop.allocator("1MiB")).cost_model is spec


@pytest.mark.cuda
def test_memory_freed_on_one_stream_is_reused_on_another_after_its_work():
    pool = coop.allocator("64MiB")
    s1, s2 = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    with pool:
        with s1:
            x = cupy.full(1 << 20, 7.0, dtype=cupy.float32)
            ptr = x.data.ptr
            x *= 3
            del x
        with s2:
            y = cupy.zeros(1 << 20, dtype=cupy.float32)
            assert y.data.ptr == ptr   # the same piece, after s2 waited on s1's event
            y += 1
        cupy.cuda.Device().synchronize()
        assert float(y.min().get()) == float(y.max().get()) == 1.0


@pytest.mark.cuda
def test_the_host_tier_on_the_device_trains_bit_exactly():
    """coop-offload on the device: the chain at 0.3 of its peak, where the constant w and the
    inputs may also leave for pinned host memory, gives coop's unlimited result bit for bit
    (written against CuPy's source; the cuda marker runs it on a device)."""
    expected, unlimited = _chain("64MiB", "coop")
    budget = int(unlimited["peak_used_bytes"] * 0.3) // 512 * 512
    got, stats = _chain(budget, "coop-offload")
    np.testing.assert_array_equal(got, expected)
    assert stats["recomputes"] + stats["offloads"] > 0      # 0.3 of the peak needs a way out
