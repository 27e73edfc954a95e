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


@pytest.mark.parametrize("field, value", [
    ("flops_per_s", 0.0), ("flops_per_s", -1e12), ("bytes_per_s", 0), ("bytes_per_s", -5.0),
    ("flops_per_s", float("inf")), ("bytes_per_s", float("nan")), ("launch_ns", -1.0),
    ("flops_per_s", "1e12"), ("bytes_per_s", True)])
def test_a_device_spec_with_a_rate_that_is_not_positive_and_finite_is_refused(field, value):
    # zero flops/s was a ZeroDivisionError at the first apply, zero bandwidth one at Runtime(),
    # and negative flops/s was accepted and silently lost in the roofline's max
    rates = dict(flops_per_s=1e12, bytes_per_s=1e11, launch_ns=0.0)
    rates[field] = value
    with pytest.raises(ValueError, match=rf"DeviceSpec 'toy': {field} must be a finite number "
                                         rf"(> 0|>= 0), got {value!r}"):
        DeviceSpec("toy", **rates)
    assert DeviceSpec("toy", 1, 2.5, 0).cost_ns(1, 5) == 2e9 and \
        DeviceSpec("toy", np.float32(1e12), 1e11).bytes_per_s == 1e11


# the host link per device (coop/engine/cost.py cites each figure): (h2d, d2h) bytes/s
HOST_LINKS = {"a100-80gb": (25e9, 25e9), "a100-40gb": (25e9, 25e9), "h100": (35e9, 53e9),
              "h100-pcie": (35e9, 53e9), "h200": (54.5e9, 54.4e9), "cpu": (10e9, 10e9)}


def test_every_device_has_its_host_links_rates():
    assert {name: (d.h2d_bytes_per_s, d.d2h_bytes_per_s) for name, d in DEVICES.items()} \
        == HOST_LINKS
    h200 = DEVICES["h200"]
    assert (h200.h2d_ns_per_byte, h200.d2h_ns_per_byte) == (1e9 / 54.5e9, 1e9 / 54.4e9)
    assert DEVICES["a100-80gb"].h2d_ns_per_byte == DEVICES["a100-80gb"].d2h_ns_per_byte == 0.04
    # the host's "link" is a memcpy within its memory: the same rate as a copy on the device
    assert DEVICES["cpu"].h2d_ns_per_byte == DEVICES["cpu"].copy_ns_per_byte == 0.1


def test_a_copy_over_the_host_link_takes_its_bytes_at_the_links_rate_each_way():
    spec = DeviceSpec("toy", 1e12, 1e11, 5.0, h2d_bytes_per_s=1e9, d2h_bytes_per_s=4e9)
    assert (spec.h2d_ns_per_byte, spec.d2h_ns_per_byte) == (1.0, 0.25)
    assert (spec.h2d_ns(4096), spec.d2h_ns(4096), spec.h2d_ns(0)) == (4096.0, 1024.0, 0.0)
    assert spec.cost_ns(0, 1e3) == 5.0 + 10.0      # the roofline ignores the link (no launch)


def test_a_spec_made_without_a_host_link_keeps_its_costs_and_refuses_to_price_a_copy():
    slow = DeviceSpec("slow", 1e12, 1e11, 7.0)     # positional, as before the link existed
    assert (slow.h2d_bytes_per_s, slow.d2h_bytes_per_s) == (None, None)
    assert slow.cost_ns(1e3, 1e6) == 7.0 + 10000.0 and slow.copy_ns_per_byte == 0.02
    for field, price in (("h2d_bytes_per_s", lambda: slow.h2d_ns(1)),
                         ("d2h_bytes_per_s", lambda: slow.d2h_ns_per_byte)):
        with pytest.raises(ValueError, match=rf"DeviceSpec 'slow' models no host link: give "
                                             rf"{field}= \(bytes/s"):
            price()


@pytest.mark.parametrize("field", ["h2d_bytes_per_s", "d2h_bytes_per_s"])
@pytest.mark.parametrize("value", [0.0, -25e9, float("inf"), float("nan"), "25e9", True])
def test_a_host_link_rate_that_is_not_positive_and_finite_is_refused(field, value):
    with pytest.raises(ValueError, match=rf"DeviceSpec 'toy': {field} must be a finite number "
                                         rf"> 0 \(or None: no host link\), got {value!r}"):
        DeviceSpec("toy", 1e12, 1e11, **{field: value})


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
