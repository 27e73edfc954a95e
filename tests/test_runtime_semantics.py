"""The runtime's semantics on the host backend: aliases, recomputable in-place, random replay,
release, borrow, deep chains, host copies, and errors (bad kernels, inputs, policies, budgets,
out of memory) that must leave the runtime intact."""
import re
import sys
from contextlib import nullcontext

import numpy as np
import pytest

import coop
from _graphs import (ADDC, DROPOUT, MUL, RELU_, RESHAPE, SLICE, TANH_, TRANSPOSE, KiB, evict,
                     resident, used)

GRID = np.arange(24.0).reshape(4, 6)


def pins(rt, *tensors):
    return [rt.arena.storage_info(t.storage.sid)["pins"] for t in tensors]


def state(rt):
    """What a refused call must leave unchanged."""
    return used(rt), rt.arena.pieces(), len(rt.storages()), rt.stats()["ops"], rt.pinned()


# ---- aliases ------------------------------------------------------------------------------------

VIEWS = {
    "transpose": (TRANSPOSE, {}, lambda a: a.T),
    "reshape": (RESHAPE, {"shape": (3, 8)}, lambda a: a.reshape(3, 8)),
    "slice": (SLICE, {"index": (slice(1, 3), slice(None, None, 2))}, lambda a: a[1:3, ::2]),
}


@pytest.mark.parametrize("name", VIEWS)
def test_a_view_kernel_yields_a_tensor_on_its_inputs_storage(rt, name):
    kernel, attrs, expect = VIEWS[name]
    base = rt.apply(ADDC, rt.tensor(GRID), c=1.0)
    before = rt.arena.pieces()
    view = rt.apply(kernel, base, **attrs)
    assert view.storage == base.storage and rt.arena.pieces() == before
    assert view.shape == expect(GRID).shape
    assert np.array_equal(view.numpy(), expect(GRID + 1))
    evict(rt, base)                    # evicting the storage covers the view
    assert not resident(view)
    recomputes = rt.stats()["recomputes"]
    assert np.array_equal(view.numpy(), expect(GRID + 1))
    assert rt.stats()["recomputes"] == recomputes + 1   # the base's producer only
    assert resident(base) and np.array_equal(base.numpy(), GRID + 1)
    rt.arena.check()


def test_a_view_of_a_view_of_a_released_base_recomputes_the_base_under_pressure(make_rt):
    rt = make_rt(16 * KiB, policy="lru")
    x = rt.tensor(np.arange(512.0))                      # 4 KiB constant
    base = rt.apply(ADDC, x, c=0.5)
    view = rt.apply(TRANSPOSE, rt.apply(RESHAPE, base, shape=(16, 32)))
    del base                                             # the views keep the memory
    assert resident(view)
    others = [rt.apply(ADDC, x, c=float(k)) for k in range(3)]   # no room: the oldest goes
    assert not resident(view) and rt.stats()["evictions"] >= 1
    assert np.array_equal(view.numpy(), (np.arange(512.0) + 0.5).reshape(16, 32).T)
    assert [o.numpy()[1] for o in others] == [1.0, 2.0, 3.0]
    rt.arena.check()


# ---- recomputable in-place ----------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["coop", "coop-no-inplace", "dtr"])
def test_inplace_design_example(make_rt, policy):
    """docs/design.md#the-three-ideas: x2 = x1 + 1; x3 = x2 - 2; x2.relu_()."""
    rt = make_rt(policy=policy)
    x1 = rt.tensor(np.array([-3.0, -1.0, 0.5, 2.0]))
    x2 = rt.apply(ADDC, x1, c=1.0)
    x3 = rt.apply(ADDC, x2, c=-2.0)
    out = rt.apply(RELU_, x2)
    old, new = np.array([-2.0, 0.0, 1.5, 3.0]), np.array([0.0, 0.0, 1.5, 3.0])
    assert out.storage == x2.storage
    assert np.array_equal(x2.numpy(), new) and np.array_equal(x3.numpy(), old - 2)
    evict(rt, x3)
    assert np.array_equal(x3.numpy(), old - 2)             # from the OLD x2
    evict(rt, x2)
    assert np.array_equal(x2.numpy(), new)                 # the relu'd value
    evict(rt, x2, x3)
    assert np.array_equal(x3.numpy(), old - 2) and np.array_equal(x2.numpy(), new)
    x4 = rt.apply(ADDC, x2, c=10.0)                        # a later reader sees the new value
    evict(rt, x2, x4)
    assert np.array_equal(x4.numpy(), new + 10)
    assert pins(rt, x1, x2, x3, x4) == [0, 0, 0, 0]
    rt.arena.check()


def test_inplace_twice_then_evict_everything(rt):
    x = rt.apply(ADDC, rt.tensor(np.array([-2.0, -0.5, 1.0])), c=0.0)
    before = rt.apply(MUL, x, x)
    rt.apply(RELU_, x)
    middle = rt.apply(ADDC, x, c=0.0)
    rt.apply(TANH_, x)
    expected = {"x": np.tanh([0.0, 0.0, 1.0]), "before": np.array([4.0, 0.25, 1.0]),
                "middle": np.array([0.0, 0.0, 1.0])}
    for _ in range(2):
        evict(rt, x, before, middle)
        got = {"before": before.numpy(), "middle": middle.numpy(), "x": x.numpy()}
        assert all(np.array_equal(got[k], expected[k]) for k in expected), got
    rt.arena.check()


def test_inplace_on_a_constant_keeps_the_old_value_for_its_readers(rt):
    c = rt.tensor(np.array([-1.0, 2.0, -3.0]))
    reader = rt.apply(ADDC, c, c=10.0)
    alias = rt.apply(SLICE, c, index=slice(0, 2))          # a view sees the new value
    rt.apply(RELU_, c)
    assert np.array_equal(c.numpy(), [0.0, 2.0, 0.0]) and np.array_equal(alias.numpy(), [0, 2])
    evict(rt, reader)
    assert np.array_equal(reader.numpy(), [9.0, 12.0, 7.0])
    later = rt.apply(ADDC, c, c=10.0)
    evict(rt, later)
    assert np.array_equal(later.numpy(), [10.0, 12.0, 10.0])
    lonely = rt.tensor(np.array([-1.0, 1.0]))
    before = used(rt)
    rt.apply(RELU_, lonely)                                 # no readers: no copy is kept
    assert used(rt) == before and np.array_equal(lonely.numpy(), [0.0, 1.0])
    rt.arena.check()


def test_an_inplace_kernel_that_raises_changes_no_value(rt):
    def boom_(a):
        raise FloatingPointError("no")
    x2 = rt.apply(ADDC, rt.tensor(np.array([-1.0, 3.0])), c=0.0)
    x3 = rt.apply(ADDC, x2, c=1.0)
    with pytest.raises(FloatingPointError):
        rt.apply(coop.Kernel(boom_, inplace=0), x2)
    # the kernel may have written part of x2: x2 keeps what it holds, as a constant, and x3
    # recomputes from x2's old value (tests/test_robust.py: one that did write)
    assert x2.storage.op is None
    for _ in range(2):
        evict(rt, x3)
        assert np.array_equal(x2.numpy(), [-1.0, 3.0]) and np.array_equal(x3.numpy(), [0.0, 4.0])
    assert pins(rt, x2, x3) == [0, 0]
    rt.arena.check()


# ---- random replay ------------------------------------------------------------------------------

def test_random_kernels_replay_bit_exactly_with_their_own_streams(make_rt):
    def masks(rt):
        x = rt.tensor(np.ones(4000))
        y, z = rt.apply(DROPOUT, x), rt.apply(DROPOUT, x)
        first = y.numpy(), z.numpy()
        w = rt.apply(ADDC, y, c=1.0)
        del y                                                # released: recomputed for w
        evict(rt, z, w)
        assert np.array_equal(z.numpy(), first[1]) and np.array_equal(w.numpy(), first[0] + 1)
        return first

    y, z = masks(make_rt())
    assert set(np.unique(y)) == {0.0, 2.0} and 1800 < np.count_nonzero(y) < 2200
    assert not np.array_equal(y, z)                          # two ops, two streams
    assert all(np.array_equal(a, b) for a, b in zip((y, z), masks(make_rt())))
    assert not np.array_equal(y, masks(make_rt(seed=1))[0])


# ---- release ------------------------------------------------------------------------------------

def test_memory_is_freed_when_the_last_tensor_on_a_storage_goes(rt, no_gc):
    x = rt.tensor(np.zeros(1000))
    base = used(rt)
    y = rt.apply(ADDC, x, c=1.0)
    view = rt.apply(RESHAPE, y, shape=(10, 100))
    assert used(rt) == base + 8000
    del y
    assert used(rt) == base + 8000                           # the view still needs it
    del view
    assert used(rt) == base


def test_records_live_exactly_as_long_as_something_needs_them(rt, no_gc):
    x = rt.tensor(np.arange(4.0))
    y = rt.apply(ADDC, x, c=1.0)
    z = rt.apply(MUL, y, y)
    ys, zs = y.storage.sid, z.storage.sid
    before = used(rt)
    del y
    assert used(rt) == before - 64                           # freed at once ...
    assert set(rt.storages()) == {x.storage.sid, ys, zs}     # ... but z's producer needs it
    assert rt._engine.live_ops == 2 and not rt._engine.resident(ys)
    evict(rt, z)
    assert np.array_equal(z.numpy(), (np.arange(4.0) + 1) ** 2)
    stats = rt.stats()
    assert (stats["recomputes"], stats["eager_evictions"]) == (2, 1)
    assert not rt._engine.resident(ys)                       # the dependency was evicted again
    del z
    assert rt._engine.live_ops == 0
    assert rt.storages() == [x.storage.sid] and used(rt) == 64
    rt.arena.check()


# ---- borrow -------------------------------------------------------------------------------------

def three_kib(make_rt):
    """A 3.5 KiB LRU runtime holding x (constant), a, b (1 KiB each; a is the oldest)."""
    rt = make_rt(3584, policy="lru")
    x = rt.tensor(np.zeros(128))
    return rt, x, rt.apply(ADDC, x, c=1.0), rt.apply(ADDC, x, c=2.0)


def test_a_borrowed_storage_is_pinned_for_the_block(make_rt):
    rt, x, a, b = three_kib(make_rt)
    with a.borrow() as array:
        assert pins(rt, a) == [1] and np.array_equal(array, np.ones(128))
        c = rt.apply(ADDC, x, c=3.0)                         # evicts b, not the older a
        assert resident(a) and not resident(b)
        with c.borrow():
            with pytest.raises(coop.OutOfMemoryError, match="nothing left to evict"):
                rt.apply(ADDC, x, c=4.0)
    assert pins(rt, a, b, c) == [0, 0, 0] and rt.stats()["held"] == 0
    assert np.array_equal(rt.apply(ADDC, x, c=4.0).numpy(), np.full(128, 4.0))
    assert np.array_equal(b.numpy(), np.full(128, 2.0))
    rt.arena.check()


def test_out_of_memory_names_the_constants_that_can_only_move(make_rt):
    """A window free of pinned pieces may still hold constants: the error says how much, so
    a budget short by its constants is not read as one short by pinned data."""
    rt = make_rt(4096, policy="coop")
    x, y = rt.tensor(np.zeros(128)), rt.tensor(np.ones(128))    # 1 KiB constants
    a = rt.apply(ADDC, x, c=1.0)
    twice = coop.Kernel(lambda v: np.concatenate([v, v]), name="twice")
    with a.borrow():                                           # a pinned, y pinned as input
        with pytest.raises(coop.OutOfMemoryError) as info:
            rt.apply(twice, y)
    assert str(info.value) == (
        "coop: cannot allocate 2048 bytes under policy 'coop': budget 4096 bytes, 1024 bytes "
        "free, largest free range 960 bytes, and nothing left to evict (pinned or anonymous: 2 "
        "pieces, 2048 bytes; unevictable: 0 pieces, 0 bytes; the largest range free of them: "
        "1024 bytes; constants, which can only move, each to a free piece of its own: 1 pieces, "
        "1024 bytes); raise the budget, or free or unpin tensors")
    rt.arena.check()


def test_a_reference_kept_past_borrow_holds_the_storage_forever(make_rt):
    rt, x, a, b = three_kib(make_rt)
    with a.borrow() as array:
        kept = array
    rt.apply(ADDC, x, c=3.0)                                 # LRU picks a: refused, b goes
    assert rt.stats()["held"] == 1 and resident(a) and not resident(b)
    assert rt.arena.storage_info(a.storage.sid)["evictable"] is False
    rt.evict(a)
    assert resident(a) and rt.stats()["held"] == 1
    assert np.array_equal(kept, np.ones(128)) and np.array_equal(a.numpy(), np.ones(128))
    rt.arena.check()


# ---- deep chains --------------------------------------------------------------------------------

def test_a_10000_op_chain_recomputes_and_dies_without_recursion(rt, no_gc):
    x = rt.tensor(np.zeros(8))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        y = x
        for _ in range(10_000):
            y = rt.apply(ADDC, y, c=1.0)                     # each older tensor is released
        evict(rt, y)
        assert np.array_equal(y.numpy(), np.full(8, 10_000.0))
        stats = rt.stats()
        assert stats["recomputes"] == 10_000 and stats["eager_evictions"] == 9_999
        del y                                                # the whole record chain dies
    finally:
        sys.setrecursionlimit(limit)
    assert rt.storages() == [x.storage.sid] and used(rt) == 64
    rt.arena.check()


# ---- host copies --------------------------------------------------------------------------------

@pytest.mark.parametrize("installed", [False, True], ids=["plain", "inside-with-backend"])
def test_numpy_returns_a_host_copy_outside_the_arena(rt, installed):
    y = rt.apply(ADDC, rt.tensor(np.arange(16.0)), c=1.0)
    before = used(rt)
    with rt.backend if installed else nullcontext():
        host = y.numpy()
    assert rt.backend.offset_of(host) is None and used(rt) == before
    host[:] = -1
    assert np.array_equal(y.numpy(), np.arange(16.0) + 1)


# ---- errors -------------------------------------------------------------------------------------

def _raise(a):
    raise ZeroDivisionError("inside the kernel")


BAD_KERNELS = {
    "list": (lambda a: [a + 1], TypeError, "returned list as output 0"),
    "float": (lambda a: 1.5, TypeError, "returned float as output 0"),
    "none": (lambda a: None, TypeError, "returned NoneType"),
    "str": (lambda a: "a", TypeError, "returned str"),
    "second": (lambda a: (a + 1, 2.0), TypeError, "returned float as output 1"),
    "empty": (lambda a: (), TypeError, "returned no output"),
    "raises": (_raise, ZeroDivisionError, "inside the kernel"),
}


@pytest.mark.parametrize("name", BAD_KERNELS)
def test_a_bad_kernel_raises_and_corrupts_nothing(rt, name):
    fn, error, message = BAD_KERNELS[name]
    x = rt.tensor(np.arange(100.0))
    y = rt.apply(ADDC, x, c=1.0)
    before = state(rt)
    kernel = coop.Kernel(fn, name=f"bad_{name}")
    with pytest.raises(error, match=re.escape(message)) as info:
        rt.apply(kernel, y)
    if error is TypeError:
        assert "kernel 'bad_" + name + "'" in str(info.value)
    del info
    assert state(rt) == before and pins(rt, x, y) == [0, 0]
    rt.arena.check()
    evict(rt, y)                                            # still evictable, still recomputable
    assert np.array_equal(rt.apply(ADDC, y, c=1.0).numpy(), np.arange(100.0) + 2)
    assert rt.stats()["held"] == 0


def test_an_in_place_kernel_given_too_few_inputs_is_refused_and_the_runtime_goes_on(rt):
    x = rt.tensor(np.arange(8.0))
    before = state(rt)
    inc = coop.Kernel(lambda a, b=None: a.__iadd__(1), name="inc_", inplace=1)
    with pytest.raises(ValueError, match=r"kernel 'inc_' mutates its input 1 \(inplace=1\) but "
                                         r"was given 1 input; pass the array it writes as that "
                                         r"input, or fix inplace="):
        rt.apply(inc, x)
    assert state(rt) == before and pins(rt, x) == [0]
    # no op was left running: the next one runs
    assert np.array_equal(rt.apply(ADDC, x, c=1.0).numpy(), np.arange(8.0) + 1)
    rt.arena.check()
    with pytest.raises(ValueError, match="inplace must be the index of the mutated input, 0 or "
                                         "more, got -1"):
        coop.Kernel(lambda a: None, inplace=-1)


def _assign_view(a):
    a[...] = 7.0
    return a[...]          # a view over the very bytes it wrote: accepted


def test_an_in_place_kernel_must_return_nothing_or_its_input(rt):
    x = rt.apply(ADDC, rt.tensor(np.arange(8.0)), c=0.0)
    scaled = coop.Kernel(lambda a: a * 5, name="scale_", inplace=0)
    with pytest.raises(TypeError, match=r"kernel 'scale_' is in-place \(inplace=0\): it must "
                                        r"write its input 0 and return None or that input, but "
                                        r"returned a new array; write the result into input 0"):
        rt.apply(scaled, x)
    assert np.array_equal(x.numpy(), np.arange(8.0))        # it wrote nothing: x is intact
    with pytest.raises(TypeError, match=r"returned float; write the result into input 0"):
        rt.apply(coop.Kernel(lambda a: 2.0, name="two_", inplace=0), x)
    rt.arena.check()
    for fn in (lambda a: a.__imul__(2.0), lambda a: None, _assign_view):
        y = rt.apply(ADDC, rt.tensor(np.ones(4)), c=1.0)
        assert rt.apply(coop.Kernel(fn, name="ok_", inplace=0), y) is not None
    assert np.array_equal(y.numpy(), np.full(4, 7.0))
    evict(rt, y)                                # the recompute runs the same check and passes
    assert np.array_equal(y.numpy(), np.full(4, 7.0))
    rt.arena.check()


def test_evict_refuses_another_runtimes_tensor_and_a_non_integer_id(rt, make_rt):
    other = make_rt()
    mine = rt.apply(ADDC, rt.tensor(np.ones(3)), c=1.0)
    theirs = other.apply(ADDC, other.tensor(np.ones(3)), c=1.0)
    assert mine.storage.sid == theirs.storage.sid       # the same id in each runtime
    with pytest.raises(ValueError, match="evict: tensor 1 belongs to another coop.Runtime; "
                                         "evict it through its own runtime"):
        rt.evict(mine, theirs)
    with pytest.raises(TypeError, match="evict takes coop Tensors or storage ids \\(ints\\), "
                                        "got float at 0"):
        rt.evict(3.5)
    assert mine.storage.resident and theirs.storage.resident    # nothing evicted
    rt.evict(mine.storage.sid)
    assert not mine.storage.resident and theirs.storage.resident
    rt.arena.check()


def test_foreign_and_non_tensor_inputs_are_refused(rt, make_rt):
    other = make_rt()
    foreign = other.tensor(np.ones(3))
    with pytest.raises(ValueError, match="input 1 of kernel 'add_scalar' belongs to another"):
        rt.apply(ADDC, rt.tensor(np.ones(3)), foreign)
    for value in (np.ones(3), 2.0, [1.0]):
        with pytest.raises(TypeError, match=r"input 0 of kernel 'mul' is a \w+, not a coop.Tensor"):
            rt.apply(MUL, value, rt.tensor(np.ones(3)))
    with pytest.raises(RuntimeError, match="no coop runtime is active"):
        coop.apply(MUL, np.ones(3), np.ones(3))
    assert rt.pinned() == {} and rt.stats()["ops"] == 0
    rt.arena.check()


@pytest.mark.parametrize("options, message", [
    (dict(classifier="density", density_threshold="a"), r"density_threshold must be a finite "
                                                        r"number >= 0, got 'a'"),
    (dict(density_threshold=-1.0), r"density_threshold must be .* got -1.0"),
    (dict(density_threshold=float("nan")), r"density_threshold must be .* got nan"),
    (dict(seed="x"), r"seed must be an int >= 0, got 'x'"),
    (dict(seed=-1), r"seed must be an int >= 0, got -1"),
    (dict(seed=1.5), r"seed must be an int >= 0, got 1.5"),
    (dict(seed=None), r"seed must be an int >= 0, got None"),
    (dict(policy="coop-offload", lookahead=1.5), r"lookahead must be an int in "
                                                 r"\[0, 1073741824\], got 1.5"),
    (dict(policy="coop-offload", lookahead=-1), r"lookahead must be .* got -1"),
    (dict(policy="coop", lookahead=8), r"policy 'coop' has no host tier, so lookahead=8 would "
                                       r"go unused: use an offloading policy"),
])
def test_runtime_arguments_are_checked_when_it_is_made(options, message):
    with pytest.raises(ValueError, match=message):
        coop.Runtime(coop.numpy_allocator("1MiB"), **options)


def test_bad_policy_names_are_refused(make_rt):
    with pytest.raises(ValueError, match="unknown policy 'fifo'; choose one of coop, dtr"):
        make_rt(policy="fifo")
    with pytest.raises(TypeError, match="policy"):
        coop.numpy_allocator("1MiB", policy="fifo")      # backends hold memory, not policies
    with pytest.raises(ValueError, match="'dtr-ideal' needs an ideal arena"):
        make_rt(policy="dtr-ideal")
    for name, core in ((n, p.core) for n, p in coop.POLICIES.items()):
        if name != "dtr-ideal":
            assert make_rt(policy=name)._engine.policy.core == core


@pytest.mark.parametrize("budget", ["-3GB", "abc", 0, True, 1.5])
def test_bad_budgets_are_refused(budget):
    with pytest.raises((ValueError, TypeError), match=re.escape(repr(budget))):
        coop.numpy_allocator(budget)


def test_out_of_memory_is_coops_error_and_the_runtime_goes_on(make_rt):
    rt = make_rt(16 * KiB)
    big = rt.tensor(np.zeros(1536))                          # 12 KiB, never evicted
    y = rt.apply(ADDC, rt.tensor(np.zeros(128)), c=1.0)
    before = state(rt)
    with pytest.raises(coop.OutOfMemoryError,
                       match=r"coop: cannot allocate 12288 bytes .*budget 16384 bytes") as info:
        rt.apply(ADDC, big, c=1.0)
    assert isinstance(info.value, MemoryError) and info.value.request == 12288
    del info
    assert state(rt) == before and pins(rt, big, y) == [0, 0]
    rt.arena.check()
    assert np.array_equal(rt.apply(ADDC, y, c=1.0).numpy(), np.full(128, 2.0))


def test_out_of_memory_during_a_recompute_leaves_nothing_pinned(make_rt):
    tile_sum = coop.Kernel(lambda a: np.tile(a, 8).reshape(8, -1).sum(axis=0), name="tile_sum")
    rt = make_rt(32 * KiB)
    x = rt.tensor(np.ones(128))
    b = rt.apply(ADDC, x, c=1.0)
    c = rt.apply(tile_sum, b)                                # an 8 KiB temporary inside
    evict(rt, b, c)
    b_sid = b.storage.sid
    del b                                                    # a released dependency of c
    room = rt.arena.capacity - used(rt)
    filler = rt.tensor(np.zeros((room - 1024 - 4096) // 8))  # b fits again, the temporary not
    with pytest.raises(coop.OutOfMemoryError):
        c.numpy()
    assert pins(rt, x, c) == [0, 0] and rt.arena.storage_info(b_sid)["pins"] == 0
    assert rt.pinned() == {} and rt.stats()["held"] == 0        # the traceback's arrays: not "held"
    rt.arena.check()
    del filler
    assert np.array_equal(c.numpy(), np.full(128, 16.0))


def test_a_backend_serves_one_runtime_at_a_time(make_rt):
    first = make_rt()
    x = first.tensor(np.arange(3.0))
    y = first.apply(ADDC, x, c=1.0)
    with pytest.raises(ValueError, match="already serves another coop.Runtime"):
        coop.Runtime(first.backend, cost="cpu")
    assert first.arena.owner is first._engine and first.arena.has_storage(x.storage.sid)
    evict(first, y)
    assert np.array_equal(y.numpy(), [1.0, 2.0, 3.0])
    del x, y                                                # nothing of the first one is left
    second = coop.Runtime(first.backend, cost="cpu")
    assert first.arena.owner is second._engine            # the arena now evicts for the second
    assert np.array_equal(second.apply(ADDC, second.tensor(np.ones(2)), c=1.0).numpy(), [2, 2])
    first.arena.check()


def test_an_out_of_memory_constant_leaves_the_placement_as_it_was(make_rt):
    rt = make_rt()
    backend = rt.backend
    with pytest.raises(coop.OutOfMemoryError):
        rt.tensor(np.zeros(backend.arena.capacity))          # 8x the arena
    assert backend.placement == coop.EXPENSIVE               # not LOWEST for what follows
    x = rt.tensor(np.arange(3.0))
    y = rt.apply(ADDC, x, c=1.0)
    assert np.array_equal(y.numpy(), [1.0, 2.0, 3.0]) and rt.pinned() == {}
    rt.arena.check()
