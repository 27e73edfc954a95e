"""Kernels: classes from the table or by cost density, the decorator, and the cost model."""
import numpy as np
import pytest

import coop
from coop import CHEAP, EXPENSIVE
from coop.engine.cost import DEVICES, DeviceSpec
from coop.kernel import EXPENSIVE_OPS, Kernel


def _add(a, b):
    return a + b


@pytest.mark.parametrize("name", sorted(EXPENSIVE_OPS))
def test_the_papers_expensive_ops_are_expensive(name):
    assert Kernel(_add, name=name).cls == EXPENSIVE


def test_other_ops_are_cheap_and_an_explicit_class_wins():
    assert Kernel(_add).cls == CHEAP and Kernel(_add).name == "_add"
    assert Kernel(_add, name="matmul", cls=CHEAP).cls == CHEAP
    assert Kernel(_add, name="tanh", cls=EXPENSIVE).cls == EXPENSIVE


def test_bad_kernels_are_refused():
    with pytest.raises(TypeError, match="must be callable"):
        Kernel(42)
    with pytest.raises(ValueError, match="EXPENSIVE or coop.CHEAP"):
        Kernel(_add, cls=7)
    with pytest.raises(TypeError, match="index of the mutated input"):
        Kernel(_add, inplace=True)


def test_roofline_cost_is_the_slower_of_compute_and_memory():
    spec = DeviceSpec("toy", flops_per_s=1e12, bytes_per_s=1e11, launch_ns=5.0)
    assert spec.cost_ns(2e6, 1e3) == 5.0 + 2000.0      # compute-bound: 2e6 / 1e12 s
    assert spec.cost_ns(1e3, 1e6) == 5.0 + 10000.0     # memory-bound: 1e6 / 1e11 s
    assert DEVICES["a100-80gb"].cost_ns(19.5e12, 0) == 1e9


def test_the_decorator_applies_through_the_inputs_runtime(make_rt):
    rt = make_rt()
    x = rt.tensor(np.arange(4.0))

    @coop.kernel
    def double(a):
        return a * 2

    @coop.kernel(name="matmul")
    def outer(a, b):
        return np.outer(a, b)

    y = double(x)
    assert isinstance(y, coop.Tensor) and y.numpy().tolist() == [0.0, 2.0, 4.0, 6.0]
    assert outer.cls == EXPENSIVE and outer(x, y).shape == (4, 4)


def test_apply_without_tensors_uses_the_entered_runtime(make_rt):
    ones = coop.Kernel(lambda: np.ones(3), name="ones")
    with pytest.raises(RuntimeError, match="no coop runtime is active"):
        coop.apply(ones)
    rt = make_rt()
    with rt:
        t = coop.apply(ones)
    assert t.runtime is rt and t.numpy().tolist() == [1.0, 1.0, 1.0]


def test_modelled_costs_drive_the_clock_and_the_counters(make_rt):
    rt = make_rt(cost="cpu")
    x = rt.tensor(np.ones((8, 8)))
    mm = coop.Kernel(lambda a, b: a @ b, name="matmul", flops=lambda a, b: 2.0 * 8 * 8 * 8)
    rt.apply(mm, x, x)
    expected = DEVICES["cpu"].cost_ns(2.0 * 8 * 8 * 8, 3 * 8 * 8 * 8)
    stats = rt.stats()
    assert stats["cost_first"] == stats["cost_total"] == expected == rt.clock


def test_host_kernels_are_timed_by_default():
    rt = coop.Runtime(coop.numpy_allocator("1MiB"))
    x = rt.tensor(np.ones(1000))
    y = rt.apply(coop.Kernel(lambda a: np.sin(a) ** 2, name="sin2"), x)
    assert rt.cost_model is None and 0 < rt._engine.op_cost(y.storage.op) == rt.stats()["cost_first"]
    rt.apply(coop.Kernel(lambda a: np.sin(a, out=a), name="sin_", inplace=0), y)
    assert 0 < rt._engine.op_cost(y.storage.op) < rt.stats()["cost_first"]   # in-place: timed too


def test_density_classifier_uses_cost_per_output_byte(make_rt):
    rt = make_rt(cost="cpu", classifier="density", density_threshold=1.0)
    x = rt.tensor(np.ones(64))                       # 512 bytes
    dense = coop.Kernel(lambda a: a + 1, name="dense", flops=lambda a: 1e9)    # 10 ms / 512 B
    sparse = coop.Kernel(lambda a: a + 1, name="sparse")                       # bytes only
    assert rt._engine.placement(rt.apply(dense, x).storage.op) == EXPENSIVE
    assert rt._engine.placement(rt.apply(sparse, x).storage.op) == CHEAP


@pytest.mark.parametrize("options, error, match", [
    ({"classifier": "size"}, ValueError, "classifier"),
    ({"cost": "tpu"}, ValueError, "unknown device"),
    ({"cost": 3.0}, TypeError, "cost must be"),
    ({"policy": "fifo"}, ValueError, "unknown policy"),
    ({"policy": "dtr-ideal"}, ValueError, "ideal arena"),
])
def test_bad_runtime_options(options, error, match):
    with pytest.raises(error, match=match):
        coop.Runtime(coop.numpy_allocator("1MiB"), **options)


def test_numpy_scalars_become_zero_d_tensors_in_the_arena(make_rt):
    rt = make_rt()
    x = rt.tensor(np.arange(4.0))
    total, peak = rt.apply(coop.Kernel(lambda a: (a.sum(), a.max()), name="stats"), x)
    assert total.shape == () and total.numpy() == 6.0 and peak.numpy() == 3.0
    assert rt.arena.storage_info(total.storage.sid)["resident"]
    with pytest.raises(TypeError, match="returned float"):
        rt.apply(coop.Kernel(lambda a: float(a.sum()), name="pyfloat"), x)
