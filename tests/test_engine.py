"""The residency engine (coop.engine), tested directly: sizes only, with the engine placing
memory (coop.engine.SizeExecutor), exact counters, and the arena's check() after every step.
The executors are tested against it elsewhere: the array executor by the runtime's tests,
the sizes executor by tests/test_replay.py (replays equal to recorded runs)."""
import math

import pytest

import coop
from coop._core import CHEAP, EXPENSIVE
from coop.engine import Engine, SizeExecutor
from coop.errors import Thrash

KIB = 1024


def engine(budget=16 * KIB, policy="coop", thrash=0.0, copy_cost=None):
    arena = coop.Arena(budget, 512)
    return Engine(arena, policy, SizeExecutor(), thrash, copy_cost=copy_cost), arena


def call(e, inputs, nbytes, cost=10.0, placement=CHEAP):
    """A first run of an op reading inputs with one new output of nbytes; the program holds it."""
    o = e.begin(list(inputs), placement)
    (s,) = e.finish_call(o, cost, [(nbytes, -1)])
    e.retain(s)
    return s


def test_a_chain_recomputes_what_it_needs_and_keeps_no_pin():
    e, arena = engine()
    c = e.constant(KIB)
    e.retain(c)
    a = call(e, [c], KIB)
    b = call(e, [a], KIB)
    e.unref(a)                          # released: its memory goes, its record stays for b
    assert not e.resident(a) and a in e.storages()
    e.evict_now(b)
    assert not e.resident(b)
    e.pin(b)
    e.make_resident(b)                  # recomputes a, then b
    e.unpin(b)
    stats = e.stats()
    assert (stats["recomputes"], stats["eager_evictions"], stats["ops"]) == (2, 1, 2)
    assert e.resident(b) and not e.resident(a)   # a, held by nobody, was dropped after use
    assert stats["cost_total"] == 40.0 and stats["compute_overhead"] == 2.0
    assert e.pinned() == {} and e.clock == 40.0
    arena.check()
    e.evict_now(b)
    e.pin(b)
    e.make_resident(b)                  # a's second recompute since its release: a stays,
    e.unpin(b)                          # demoted, the first victim of every policy
    stats = e.stats()
    # a was demoted after each call's read of it; the first call then evicted it as it ended
    assert (stats["recomputes"], stats["eager_evictions"], stats["demotions"]) == (4, 1, 2)
    assert e.resident(a) and arena.storage_info(a)["last_access"] == -math.inf
    assert e.pinned() == {} and e.clock == 60.0
    arena.check()
    e.unref(b)                          # b's record dies, then a's (only b's producer read it)
    assert e.storages() == [c] and e.live_ops == 0 and arena.stats()["used_bytes"] == KIB
    arena.check()


@pytest.mark.parametrize("read", [False, True])
def test_a_storage_released_while_pinned_is_settled_at_its_last_unpin(read):
    # the release evicts at the last unpin, as it would have at once; with no reader the
    # record dies there too (and its memory with it)
    e, arena = engine()
    c = e.constant(KIB)
    e.retain(c)
    a = call(e, [c], KIB)
    b = call(e, [a], KIB) if read else None
    e.pin(a)
    e.pin(a)
    e.unref(a)
    e.unpin(a)
    assert e.resident(a) and a in e.storages()          # pinned still: nothing changes
    e.unpin(a)
    assert (a in e.storages()) == read and not (read and e.resident(a))
    assert e.stats()["eager_evictions"] == int(read)
    assert arena.stats()["used_bytes"] == (2 if read else 1) * KIB   # c, and b if made
    arena.check()


def diamonds(e, n):
    """A constant c, then x_0 = f(c) and n diamonds: l_i = f(x_i), r_i = f(x_i), x_{i+1} =
    f(l_i, r_i), 1 KiB each, every value released once read but x_n. Every one of the 2^n paths
    from x_n down to c passes through x_0."""
    c = e.constant(KIB)
    e.retain(c)
    x = call(e, [c], KIB)
    for _ in range(n):
        left, right = call(e, [x], KIB), call(e, [x], KIB)
        e.unref(x)
        x = call(e, [left, right], KIB)
        e.unref(left)
        e.unref(right)
    return c, x


@pytest.mark.parametrize("policy", [p for p in coop.POLICIES if p != "dtr-ideal"])
def test_a_shared_released_ancestor_is_recomputed_linearly_not_once_per_path(policy):
    # Bringing x_n back with everything else evicted (no memory pressure: 64 KiB, 32 needed).
    # Evicting every recomputed released dependency once its reader has run recomputes x_i
    # twice per recompute of x_{i+1} (for l_i, then again for r_i): T(0) = 1, T(i + 1) =
    # 3 + 2 T(i), T(n) = 2^(n + 2) - 3 = 4,093 for n = 10. Evicting it only after its first
    # recompute, once its reader has run, made x_i again for r_i after l_i: F(i) = F(i-1) +
    # S(i-1) + 3 with S = 3, 6n - 1 = 59. The rule evicts a released value recomputed for the
    # first time when the whole call ends: x_{i-1} is still resident for r_{i-1}, so each
    # value is made once, 3n + 1 = 31, and then the 3n = 30 released values are evicted,
    # leaving c and x_10.
    e, arena = engine(64 * KIB, policy)
    c, x = diamonds(e, 10)
    assert [e.resident(s) for s in e.storages()].count(True) == 2       # c and x_10

    def bring_back():
        e.evict_now(x)
        e.pin(x)
        e.make_resident(x)
        e.unpin(x)
        arena.check()
        stats = e.stats()
        return (stats["recomputes"], stats["eager_evictions"], stats["evictions"],
                stats["used_bytes"])

    assert bring_back() == (31, 30, 0, 2 * KIB)
    # again: each released value's second recompute since its release keeps it, demoted
    assert bring_back() == (62, 30, 0, 32 * KIB)
    kept = [s for s in e.storages() if s not in (c, x) and e.resident(s)]
    assert len(kept) == 30
    assert all(arena.storage_info(s)["last_access"] == -math.inf for s in kept)
    arena.check()
    e.unref(x)               # every record dies with x_10's: nothing the program released stays
    assert e.storages() == [c] and e.live_ops == 0 and arena.stats()["used_bytes"] == KIB
    arena.check()


@pytest.mark.parametrize("policy", [p for p in coop.POLICIES if p not in ("dtr-ideal", "none")])
def test_a_dependency_a_later_frame_reads_is_not_the_first_victim(policy):
    # A skip connection: t = g(y, z) with y = h(b), b = h(a) and z = h(a); a, b, y and z
    # released, so only t's record needs them. Bringing t back runs a, b, y for t's first
    # input, then z for its second, which reads a again. With 4 KiB and c and f resident,
    # y needs room once a and b are made. Counting a's readers over the frames pushed so far
    # (b's alone) demoted a once b had run, so y's room took a, the first victim, and z made
    # a again: 6 recomputes. Counted over the whole call, a still has z to come: it is
    # ranked as if untouched since time 0, no longer the first victim, so y's room takes f
    # (cheaper to recompute, and stale) and each value is made once. lru ranks by age alone,
    # and a, untouched since 0 by that rank, is older than f: it still takes a (and f
    # later, for t).
    e, arena = engine(4 * KIB, policy)
    c = e.constant(KIB)
    e.retain(c)
    a = call(e, [c], KIB, cost=100.0)
    b = call(e, [a], KIB)
    y = call(e, [b], KIB)
    e.unref(b)
    z = call(e, [a], KIB)
    e.unref(a)
    t = call(e, [y, z], KIB)
    e.unref(y)
    e.unref(z)
    assert [e.resident(s) for s in (c, a, b, y, z, t)] == [True] + [False] * 4 + [True]
    e.evict_now(t)
    f = call(e, [c], KIB, cost=1.0)
    e.pin(t)
    e.make_resident(t)
    e.unpin(t)
    arena.check()
    assert e.stats()["recomputes"] == (6 if policy == "lru" else 5)
    assert e.resident(t) and not e.resident(f)
    assert e.pinned() == {}


@pytest.mark.parametrize("policy", [p for p in coop.POLICIES if p not in ("dtr-ideal", "none")])
def test_a_demoted_dependency_is_every_policys_first_victim_and_is_freed(policy):
    # h: 2 KiB, cost 1, untouched since the start: what every policy would evict first (dtr's
    # and dte's lowest c' / (size x staleness), lru's oldest, size's largest, the cheapest
    # window). a: 1 KiB, cost 1,000, released, recomputed twice for b, kept and demoted. The
    # arena is full (5 KiB): the next KiB evicts a, and only a.
    e, arena = engine(5 * KIB, policy)
    c = e.constant(KIB)
    e.retain(c)
    h = call(e, [c], 2 * KIB, cost=1.0)
    a = call(e, [c], KIB, cost=1000.0)
    b = call(e, [a], KIB)
    e.unref(a)
    for _ in range(2):                  # a's second recompute since its release keeps it
        e.evict_now(b)
        e.pin(b)
        e.make_resident(b)
        e.unpin(b)
    assert e.resident(a) and arena.stats()["used_bytes"] == 5 * KIB    # c, h, a, b: full
    d = call(e, [c], KIB)
    assert not e.resident(a) and e.resident(h) and e.resident(b) and e.resident(d)
    # a leaves, and only a: evicted, or offloaded where that is cheaper (capuchin counts
    # offloads from the start: a's copy out and back costs less than its recompute)
    stats = e.stats()
    assert (stats["evictions"], stats["offloads"]) == \
        ((0, 1) if policy == "capuchin" else (1, 0))
    assert arena.stats()["used_bytes"] == 5 * KIB
    arena.check()


def test_in_place_gives_the_old_value_a_storage_and_redirects_its_readers():
    # copying 1 KiB costs 1024 here, more than recomputing the old value (10): recomputable
    e, arena = engine(copy_cost=1.0)
    c = e.constant(KIB)
    e.retain(c)
    x = call(e, [c], KIB)
    y = call(e, [x], KIB)               # reads the old x
    y_op, x_op = e.info(y)["producer"], e.info(x)["producer"]
    o = e.begin([x], CHEAP)
    e.prepare_inplace(o, [0])
    e.finish_inplace(o, 5.0)
    old = e.inputs(y_op)[0]
    assert old != x and e.info(old)["producer"] == x_op   # the old value: x's old producer
    assert e.info(x)["producer"] == o and e.inputs(o) == [old]
    assert not e.resident(old) and e.copies == 0   # recomputable in-place: no copy was made
    e.evict_now(x)
    e.evict_now(y)
    e.pin(y)
    e.make_resident(y)                  # y comes back from the old value, recomputed
    e.unpin(y)
    assert e.stats()["recomputes"] == 2 and e.pinned() == {}
    arena.check()


def test_without_recomputable_in_place_a_mutation_makes_a_new_version_as_dtr_did():
    # DTR's rule: the old value is copied, the name's storage holds the new version (produced
    # by the in-place op from the old one), and the old one, released, loses its memory now
    e, arena = engine(policy="coop-no-inplace")
    c = e.constant(KIB)
    e.retain(c)
    x = call(e, [c], KIB)
    y = call(e, [x], KIB)
    o = e.begin([x], CHEAP)
    e.prepare_inplace(o, [0])
    e.finish_inplace(o, 5.0)
    old = e.inputs(e.info(y)["producer"])[0]
    assert e.info(x)["producer"] == o and e.inputs(o) == [old]
    assert not e.resident(old) and arena.stats()["used_bytes"] == 3 * KIB
    stats = e.stats()
    assert (e.copies, stats["eager_evictions"], stats["recomputes"]) == (1, 1, 0)
    e.evict_now(x)
    e.pin(x)
    e.make_resident(x)                  # the old version, then the new one
    e.unpin(x)
    assert e.stats()["recomputes"] == 2 and e.pinned() == {}
    arena.check()


def test_without_recomputable_in_place_even_an_unread_value_gets_a_new_version():
    # a computed value nothing reads: still a copy, released at once
    e, arena = engine(policy="dtr")
    c = e.constant(KIB)
    e.retain(c)
    x = call(e, [c], KIB)
    o = e.begin([x], CHEAP)
    e.prepare_inplace(o, [0])
    e.finish_inplace(o, 5.0)
    (old,) = e.inputs(o)
    assert old != x and e.info(old)["producer"] is not None and not e.resident(old)
    assert (e.copies, e.stats()["eager_evictions"]) == (1, 1)
    assert arena.stats()["used_bytes"] == 2 * KIB
    arena.check()


@pytest.mark.parametrize("read", [False, True])
def test_without_recomputable_in_place_a_constant_gets_a_copy_that_lives_while_read(read):
    # the old version of a constant is kept (unevictable) while a recorded op reads it; the
    # constant stays a constant (its new version is not recomputed from the old one)
    e, arena = engine(policy="dtr")
    c = e.constant(KIB)
    e.retain(c)
    if read:
        y = call(e, [c], KIB)
    o = e.begin([c], CHEAP)
    e.prepare_inplace(o, [0])
    e.finish_inplace(o, 5.0)
    assert e.info(c)["producer"] is None and e.copies == 1
    assert e.stats()["eager_evictions"] == 0 and len(e.storages()) == (3 if read else 1)
    assert arena.stats()["used_bytes"] == (3 if read else 1) * KIB
    if read:
        old = e.inputs(e.info(y)["producer"])[0]
        assert e.resident(old) and e.info(old)["producer"] is None
        e.unref(y)                      # its last reader goes: so does the old version
        assert e.storages() == [c] and arena.stats()["used_bytes"] == KIB
    arena.check()


@pytest.mark.parametrize("copy_cost, copied", [(None, True), (0.0, True), (1.0, False)])
def test_coop_gives_a_pending_reader_a_new_version_only_when_the_copy_is_cheaper(
        copy_cost, copied):
    # x's producer costs 10; copying 1 KiB costs 2 * 1024 / 2.039e3 = 1.0 ns (read and write at
    # a100-80gb's bandwidth, the default), nothing (0.0) or 1024 (1.0). A new version: the old one was copied, then
    # released (DTR's rule); else overwritten, the old value recomputable: both end evicted
    e, arena = engine(copy_cost=copy_cost)
    c = e.constant(KIB)
    e.retain(c)
    x = call(e, [c], KIB)
    y = call(e, [x], KIB)               # a pending reader of the old x
    o = e.begin([x], CHEAP)
    e.prepare_inplace(o, [0])
    e.finish_inplace(o, 5.0)
    old = e.inputs(e.info(y)["producer"])[0]
    assert e.inputs(o) == [old] and e.info(x)["producer"] == o and not e.resident(old)
    assert (e.copies, e.stats()["eager_evictions"]) == (int(copied), int(copied))
    assert arena.stats()["used_bytes"] == 3 * KIB
    e.evict_now(y)
    e.pin(y)
    e.make_resident(y)                  # the old value recomputed, then y
    e.unpin(y)
    assert e.stats()["recomputes"] == 2
    arena.check()


def test_coop_overwrites_a_value_with_no_pending_reader():
    # nothing read x: its old value is only needed to recompute x itself, and starts evicted
    e, arena = engine()
    c = e.constant(KIB)
    e.retain(c)
    x = call(e, [c], KIB, cost=1e6)
    o = e.begin([x], CHEAP)
    e.prepare_inplace(o, [0])
    e.finish_inplace(o, 5.0)
    (old,) = e.inputs(o)
    assert old != x and not e.resident(old) and e.copies == 0
    assert arena.stats()["used_bytes"] == 2 * KIB
    arena.check()


@pytest.mark.parametrize("read", [False, True])
def test_coop_copies_a_read_constant_and_mutates_an_unread_one(read):
    e, arena = engine()
    c = e.constant(KIB)
    e.retain(c)
    if read:
        y = call(e, [c], KIB)
    o = e.begin([c], CHEAP)
    e.prepare_inplace(o, [0])
    e.finish_inplace(o, 5.0)
    assert e.info(c)["producer"] is None          # coop: a constant stays one
    assert e.copies == int(read) and e.live_ops == int(read)   # o leaves no record
    if read:
        old = e.inputs(e.info(y)["producer"])[0]
        assert old != c and e.resident(old) and e.info(old)["producer"] is None
    assert arena.stats()["used_bytes"] == (3 if read else 1) * KIB
    arena.check()


def test_materialize_makes_a_constant_that_settles_low_and_frees_the_graph():
    e, arena = engine()
    c = e.constant(KIB)
    e.retain(c)
    a = call(e, [c], KIB, placement=EXPENSIVE)
    b = call(e, [a], KIB)               # CHEAP: at the high end
    e.unref(a)
    high = e.info(b)["offset"]
    e.materialize(b)
    info = e.info(b)
    assert info["producer"] is None and info["offset"] < high   # moved down, a copy
    assert a not in e.storages() and e.live_ops == 0 and e.stats()["constants_placed"] == 1
    assert not arena.storage_info(b)["evictable"]
    arena.check()


@pytest.mark.parametrize("policy", ["coop", "dtr", "dte", "lru"])
def test_out_of_memory_while_rematerializing_leaves_nothing_pinned(policy):
    e, arena = engine(4 * KIB, policy)
    c = e.constant(KIB)
    e.retain(c)
    a = call(e, [c], KIB)
    b = call(e, [a], KIB)
    e.unref(a)
    e.evict_now(b)
    d = call(e, [c], 2 * KIB, placement=EXPENSIVE)   # fills the arena: c + d + a hole for one
    # b needs a and itself: one more KiB than is free. The call planned b's op and a's; a was
    # recomputed into the hole, and b's op, the one frame left, holds a pinned
    with pytest.raises(coop.OutOfMemoryError, match=r"a rematerialization is under way, 1 op "
                       r"deep of the 2 it planned: the inputs its pending ops read are 1 of "
                       r"the pinned pieces, 1,024 bytes"):
        call(e, [b, d], KIB)
    assert e.oom_recompute == (1, 2, 1, KIB)
    assert e.pinned() == {} and e.resident(d) and (e.remat_depth, e.remat_planned) == (0, 0)
    arena.check()
    with pytest.raises(coop.OutOfMemoryError) as err:   # outside a rematerialization:
        call(e, [c, d], 2 * KIB)                        # c and d pinned, 1 KiB left
    assert e.oom_recompute is None and "rematerialization" not in str(err.value)


@pytest.mark.parametrize("policy", ["coop", "dtr"])
def test_a_recompute_with_no_room_for_its_second_output_leaves_nothing_pinned(policy):
    # x makes a and a2; both evicted, then read with d: the recompute places a in the one
    # free KiB and finds no room for a2 (c, d and a pinned)
    e, arena = engine(4 * KIB, policy)
    c = e.constant(KIB)
    e.retain(c)
    o = e.begin([c], CHEAP)
    a, a2 = e.finish_call(o, 10.0, [(KIB, -1), (KIB, -1)])
    e.retain(a)
    e.retain(a2)
    e.evict_now(a)
    e.evict_now(a2)
    d = call(e, [c], 2 * KIB, placement=EXPENSIVE)
    with pytest.raises(coop.OutOfMemoryError):
        e.begin([a, a2, d], CHEAP)
    # the placed output was left pinned (a leak no later choice could take back) and
    # resident, as if the failed run had made it
    assert e.pinned() == {} and not e.resident(a) and not e.resident(a2)
    arena.check()
    e.unref(d)                          # the room comes back, and the same op then runs
    o = e.begin([a, a2], CHEAP)
    e.finish_call(o, 10.0, [(KIB, -1)])
    assert e.resident(a) and e.resident(a2)
    arena.check()


def test_the_thrash_limit_stops_a_run():
    e, arena = engine(thrash=25.0)
    c = e.constant(KIB)
    e.retain(c)
    call(e, [c], KIB)
    call(e, [c], KIB)
    with pytest.raises(Thrash):
        call(e, [c], KIB)               # 30 > 25
    arena.check()


def test_bad_input_is_refused_and_changes_nothing():
    e, arena = engine()
    c = e.constant(KIB)
    e.retain(c)
    with pytest.raises(ValueError, match="storage 7 does not exist"):
        e.begin([c, 7], CHEAP)
    with pytest.raises(ValueError, match="storage -1 does not exist"):
        e.retain(-1)
    with pytest.raises(ValueError, match="not pinned|has not pinned"):
        e.unpin(c)
    with pytest.raises(ValueError, match="op 3 is not the op running now"):
        e.finish_call(3, 1.0, [(KIB, -1)])
    o = e.begin([c], CHEAP)
    with pytest.raises(ValueError, match="finite number >= 0"):
        e.finish_call(o, math.nan, [(KIB, -1)])
    with pytest.raises(ValueError, match="view of input 4"):
        e.finish_call(e.begin([c], CHEAP), 1.0, [(KIB, -6)])
    assert e.pinned() == {} and e.storages() == [c] and e.live_ops == 0
    assert e.stats()["ops"] == 0
    with pytest.raises(ValueError, match="ideal arena"):
        Engine(coop.Arena(KIB, 512), "dtr-ideal", SizeExecutor())
    with pytest.raises(ValueError, match="unknown policy"):
        Engine(coop.Arena(KIB, 512), "fifo", SizeExecutor())
    arena.check()
