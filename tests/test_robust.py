"""Bad inputs and failures that must neither crash, corrupt nor silently change a value: kernels
whose outputs come from outside the arena, in-place kernels that fail half-way, runtimes refused
or replaced, copies of tensors and models, non-finite clocks, evict callbacks that undo the
placement they serve, and frees of memory a live array uses. After each, check() holds."""
import concurrent.futures
import copy
import sys

import numpy as np
import pytest

import coop
import coop.nn as nn
from coop._core import CallbackOwner
from _graphs import ADDC, KiB, evict, resident


class Boom(Exception):
    pass


def _scale_then_raise(a, exc):
    a *= 100.0            # half the op's work done, then it fails
    raise exc


SCALE_THEN_RAISE_ = coop.Kernel(_scale_then_raise, name="scale_then_raise_", inplace=0)


def assert_clean(rt):
    rt.arena.check()
    assert rt.pinned() == {}


# ---- kernel outputs from outside the arena ----------------------------------------------------

WORKERS = concurrent.futures.ThreadPoolExecutor(1)
CACHED = np.arange(8.0)     # made outside any arena


def doubled_in_a_worker(a):
    # a fresh thread has NumPy's default handler: the result lies outside the arena
    return WORKERS.submit(lambda: a * 2.0).result()


def cached_global(a):
    return CACHED[2:6]


@pytest.mark.parametrize("fn, expect", [(doubled_in_a_worker, np.full(4, 2.0)),
                                        (cached_global, np.arange(2.0, 6.0))],
                         ids=["worker-thread", "cached-global"])
def test_an_output_from_outside_the_arena_is_copied_in_on_first_run_and_on_recompute(make_rt, fn,
                                                                                      expect):
    rt = make_rt()
    y = rt.apply(coop.Kernel(fn, name=fn.__name__), rt.tensor(np.ones(4)))
    assert y.storage.op is not None and np.array_equal(y.numpy(), expect)
    for _ in range(2):
        evict(rt, y)
        assert np.array_equal(y.numpy(), expect)
        assert rt.arena.storage_info(y.storage.sid)["resident"]
        assert_clean(rt)
    with y.borrow() as a:
        a[:] = -1.0              # the storage's memory is its own copy
    assert np.array_equal(CACHED, np.arange(8.0))


def test_an_array_a_kernel_kept_from_an_earlier_call_is_not_shared_by_two_storages(make_rt):
    kept = {}

    def memo(a):
        if "value" not in kept:
            kept["value"] = a * 2.0          # inside the arena: it becomes the first output
        return kept["value"]

    rt = make_rt()
    kernel = coop.Kernel(memo, name="memo")
    x = rt.tensor(np.ones(4))
    first = rt.apply(kernel, x)
    second = rt.apply(kernel, x)             # the same array again: copied in
    assert first.storage != second.storage
    with second.borrow() as a:
        a[:] = 7.0
    del a
    assert np.array_equal(first.numpy(), np.full(4, 2.0))
    assert np.array_equal(kept["value"], np.full(4, 2.0))
    evict(rt, second)
    assert np.array_equal(second.numpy(), np.full(4, 2.0))   # recomputed from the record
    assert_clean(rt)


# ---- a failed in-place kernel -------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["coop", "coop-no-inplace", "dtr"])
@pytest.mark.parametrize("exc", [Boom("half-way"), KeyboardInterrupt()], ids=["error", "interrupt"])
@pytest.mark.parametrize("target", ["constant", "computed"])
def test_a_failed_in_place_kernel_leaves_earlier_values_as_they_were(make_rt, policy, exc, target):
    """y = s + 1 is computed, then an in-place kernel multiplies s by 100 and fails: y must
    still recompute to its value (not 100 * s + 1); s keeps what the kernel left and becomes a
    constant."""
    rt = make_rt(policy=policy)
    x = rt.tensor(np.ones(4))
    s = x if target == "constant" else rt.apply(ADDC, x, c=0.0)
    y = rt.apply(ADDC, s, c=1.0)                           # 2.0
    with pytest.raises(type(exc)):
        rt.apply(SCALE_THEN_RAISE_, s, exc=exc)
    exc.__traceback__ = None                               # its frames hold the inputs
    assert_clean(rt)
    evict(rt, y)
    assert np.array_equal(y.numpy(), np.full(4, 2.0))
    assert np.array_equal(s.numpy(), np.full(4, 100.0))    # what the kernel left
    assert s.storage.op is None
    evict(rt, y)
    assert np.array_equal(y.numpy(), np.full(4, 2.0))
    assert_clean(rt)
    del x, s, y
    assert rt.storages() == [] and rt.arena.stats()["used_bytes"] == 0


def test_a_failed_in_place_kernel_on_a_value_nothing_reads_changes_only_that_value(make_rt):
    rt = make_rt()
    s = rt.apply(ADDC, rt.tensor(np.ones(4)), c=1.0)
    with pytest.raises(Boom) as info:
        rt.apply(SCALE_THEN_RAISE_, s, exc=Boom())
    info.value.__traceback__ = None
    assert np.array_equal(s.numpy(), np.full(4, 200.0))
    assert_clean(rt)


# ---- runtimes refused, replaced -------------------------------------------------------------------

@pytest.mark.parametrize("bad", [dict(cost="gpu"), dict(policy="nope"), dict(classifier="x"),
                                 dict(cost=3), dict(policy="dtr-ideal")])
def test_a_refused_runtime_leaves_its_backend_to_the_previous_one(bad):
    backend = coop.numpy_allocator("64KiB")
    rt = coop.Runtime(backend, cost="cpu")
    with pytest.raises((ValueError, TypeError)):
        coop.Runtime(backend, **bad)
    assert backend.arena.owner is rt._engine
    assert np.array_equal(rt.apply(ADDC, rt.tensor(np.ones(2)), c=1.0).numpy(), [2.0, 2.0])
    del rt
    assert np.array_equal(coop.Runtime(backend, cost="cpu").tensor([3.0]).numpy(), [3.0])


def test_an_ideal_backend_refused_for_coop_then_serves_dtr_ideal():
    backend = coop.SimBackend("1MiB", ideal=True)
    with pytest.raises(ValueError, match="ideal"):
        coop.Runtime(backend)
    rt = coop.Runtime(backend, policy="dtr-ideal")
    assert rt.tensor(((4,), np.float32)).shape == (4,)


def test_a_backend_whose_arena_has_another_owner_is_refused_clearly():
    backend = coop.numpy_allocator("64KiB")
    backend.arena.attach(CallbackOwner(lambda victims: None, "lru"))
    with pytest.raises(ValueError, match="already has an owner"):
        coop.Runtime(backend)


def test_a_runtime_replaced_on_its_backend_refuses_to_run():
    backend = coop.numpy_allocator("64KiB")
    old = coop.Runtime(backend, cost="cpu")
    new = coop.Runtime(backend, cost="cpu")
    kept = new.tensor(np.ones(2))
    for call in (lambda: old.tensor([1.0]), lambda: old.apply(ADDC, c=1.0),
                 lambda: old.materialize(), lambda: old.evict()):
        with pytest.raises(RuntimeError, match="its backend serves a newer coop.Runtime"):
            call()
    assert np.array_equal(kept.numpy(), [1.0, 1.0])
    assert_clean(new)


# ---- copies ---------------------------------------------------------------------------------------

def test_copy_of_a_tensor_is_one_more_user_of_its_storage(make_rt):
    rt = make_rt()
    t = rt.apply(ADDC, rt.tensor(np.ones(4)), c=1.0)
    c = copy.copy(t)
    assert c.storage == t.storage and t.storage.users == 2
    del c
    assert t.storage.users == 1 and np.array_equal(t.numpy(), np.full(4, 2.0))
    assert_clean(rt)


def test_deepcopy_of_a_leaf_is_an_independent_constant(make_rt):
    rt = make_rt()
    w = rt.tensor(np.arange(4.0), requires_grad=True)
    w.grad = rt.tensor(np.ones(4))
    d = copy.deepcopy(w)
    assert d.storage != w.storage and d.storage.op is None and d.requires_grad
    assert d.grad.storage != w.grad.storage and np.array_equal(d.grad.numpy(), np.ones(4))
    with d.borrow() as a:
        a[:] = 9.0
    del a
    assert np.array_equal(w.numpy(), np.arange(4.0))
    assert_clean(rt)


def test_deepcopy_of_a_tensor_in_the_autograd_graph_is_refused(make_rt):
    rt = make_rt()
    w = rt.tensor(np.arange(4.0), requires_grad=True)
    y = w * 2.0
    with pytest.raises(RuntimeError, match="only leaf Tensors"):
        copy.deepcopy(y)
    assert np.array_equal(copy.deepcopy(y.detach()).numpy(), np.arange(4.0) * 2)


def test_deepcopy_of_a_model_copies_its_parameters_and_buffers_into_the_runtime(make_rt):
    rt = make_rt("4MiB")
    model = nn.Sequential(nn.Linear(rt, 4, 8), nn.ReLU(), nn.Linear(rt, 8, 2))
    norm = nn.BatchNorm2d(rt, 3)
    twin, norm_twin = copy.deepcopy(model), copy.deepcopy(norm)
    params, twins = list(model.parameters()), list(twin.parameters())
    assert [type(p) for p in twins] == [nn.Parameter] * 4
    assert not {p.storage for p in params} & {p.storage for p in twins}
    x = rt.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    assert np.array_equal(model(x).numpy(), twin(x).numpy())
    with twins[0].borrow() as a:
        a[...] = 0.0                           # the twin's weights are its own
    del a
    assert not np.array_equal(model(x).numpy(), twin(x).numpy())
    assert set(norm_twin._buffers) == set(norm._buffers)
    assert_clean(rt)


def test_a_failed_construction_reports_nothing_from_del(make_rt, monkeypatch):
    rt = make_rt()
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    with pytest.raises(coop.OutOfMemoryError):
        nn.Parameter(rt, np.ones(1 << 20))          # 8 MiB in a 1 MiB runtime
    with pytest.raises(ValueError, match="does not exist"):
        coop.Tensor(coop._executor.View(rt, 12345, (1,), np.dtype(np.float32), None, 0))
    import gc
    gc.collect()
    assert unraisable == []


# ---- clocks ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_clock_is_refused(bad):
    arena = coop.Arena(1024)
    arena.add_storage(1, cost=1.0)
    arena.bind(arena.allocate(64), 1)
    for call in (lambda: arena.touch(1, bad), lambda: arena.choose_victims(64, "coop", bad),
                 lambda: arena.allocate_or_evict(64, coop.EXPENSIVE, "dtr", bad, lambda v: None)):
        with pytest.raises(ValueError, match="finite"):
            call()
    owner = CallbackOwner(lambda victims: None, "coop")
    with pytest.raises(ValueError, match="finite"):
        owner.now = bad
    arena.check()


def test_an_infinite_clock_still_finds_victims(make_rt):
    """Costs near the largest double overflow the engine's clock to infinity (staleness
    inf - inf): the policy must still evict instead of failing with candidates left."""
    rt = make_rt(8 * KiB, cost=coop.DeviceSpec("slow", 1e12, 1e12, 1e308))
    x = rt.tensor(np.zeros(128))                    # 1 KiB
    chain = [x]
    for _ in range(12):                             # 12 KiB of results in 8 KiB
        chain.append(rt.apply(ADDC, chain[-1], c=1.0))
    assert rt.clock == float("inf") and rt.stats()["evictions"] > 0
    assert np.array_equal(chain[-1].numpy(), np.full(128, 12.0))
    assert np.array_equal(chain[1].numpy(), np.full(128, 1.0))
    assert_clean(rt)


# ---- the arena's callers ----------------------------------------------------------------------------

def test_an_evict_callback_that_re_adds_the_storage_being_placed_is_refused():
    arena = coop.Arena(256, 64)
    for sid in (1, 2):
        arena.add_storage(sid, cost=1.0)
    for sid in (1, 2):
        arena.bind(arena.allocate(128), sid)
    arena.add_storage(3, cost=1.0)

    def evict(victims):
        for v in victims:
            arena.free(arena.storage_info(v)["offset"])
        arena.remove_storage(3)
        arena.add_storage(3, cost=5.0)         # another storage under the same id

    with pytest.raises(ValueError, match="storage 3 was removed during its own allocation"):
        arena.allocate_or_evict(128, coop.EXPENSIVE, "lru", 10.0, evict, storage=3)
    arena.check()
    assert arena.storage_info(3)["resident"] is False


def test_freeing_a_piece_a_live_array_uses_is_refused():
    backend = coop.numpy_allocator("64KiB")
    with backend:
        a = np.full(16, 3.0)
    with pytest.raises(ValueError, match="drop the array"):
        backend.arena.free(backend.offset_of(a))
    backend.arena.check()
    with backend:
        b = np.full(16, 4.0)                    # does not land on a's bytes
    assert np.array_equal(a, np.full(16, 3.0)) and np.array_equal(b, np.full(16, 4.0))


def test_a_runtime_on_a_host_arena_evicts_as_before(make_rt):
    """The guard on Arena.free leaves the runtime's own frees alone."""
    rt = make_rt(4 * KiB, policy="lru")
    chain = [rt.tensor(np.zeros(64))]
    for _ in range(16):
        chain.append(rt.apply(ADDC, chain[-1], c=1.0))
    assert rt.stats()["evictions"] > 0 and not resident(chain[1])
    assert np.array_equal(chain[1].numpy(), np.ones(64))
    assert_clean(rt)
