"""The coop window scan against brute force (random layouts, long windows, ties)."""
import itertools
import math
import random

import pytest

import coop
from coop import CHEAP, EXPENSIVE, NO_STORAGE
from reference_arena import ReferenceArena
from _arena import build, evictor, per_byte, storages


def brute_force_window(arena, nbytes, now, offloads=None):
    """Cheapest window by itertools over all (start, end), each cost an exact math.fsum. A
    piece leaves by its cheaper way, evicted (c') or offloaded, where offloads count: always
    when offloads is True, never when False; None: as the arena says (offload_last: only when
    no window exists without them). With the arena's excess_weight, over the windows that
    cover the request and would not without their last piece, per byte freed (_arena.per_byte)."""
    if offloads is None:
        if not arena.offload_last:
            return brute_force_window(arena, nbytes, now, True)
        return brute_force_window(arena, nbytes, now, False) or \
            brute_force_window(arena, nbytes, now, True)
    weight = arena.excess_weight
    pieces = arena.pieces()
    size = max(-(-nbytes // arena.alignment) * arena.alignment, arena.alignment)
    h = []
    for _, _, free, sid in pieces:
        if free:
            h.append(0.0)
            continue
        info = arena.storage_info(sid) if sid != NO_STORAGE else None
        ways = [] if info is None or info["pins"] else (
            ([info["cprime"]] if info["evictable"] else [])
            + ([info["offload"]] if offloads and info["offload"] < math.inf else []))
        # a piece leaves by its cheaper way: evicted (c') or offloaded
        h.append(min(ways) / max(now - info["last_access"], 1.0) if ways else None)
    best, victims = None, []
    for i, j in itertools.combinations_with_replacement(range(len(pieces)), 2):
        window = range(i, j + 1)
        covered = sum(pieces[k][1] for k in window)
        if any(h[k] is None for k in window) or covered < size:
            continue
        if weight and covered - pieces[j][1] >= size:
            continue                    # not the smallest window from i
        key = (per_byte(math.fsum(h[k] for k in window), covered, size, weight), pieces[i][0],
               j - i + 1)
        if best is None or key < best:
            best = key
            victims = [pieces[k][3] for k in window if not pieces[k][2]]
    return victims


def random_layout(seed, offload=False, weight=0.0):
    """The same random arena in core and reference; costs and staleness keep every h dyadic.
    offload: a third of the storages (unevictable ones too) may also leave by an offload,
    counted only when nothing else fits ("last") or always ("priced")."""
    rng = random.Random(seed)
    k = rng.randint(4, 40)
    now = 100
    arenas = [coop.Arena(64 * k), ReferenceArena(64 * k)]
    for arena in arenas:
        arena.excess_weight = weight
        r = random.Random(seed)
        r.randint(4, 40)
        o = random.Random(seed + 1000)
        sid = 0
        while True:
            cost = r.randint(0, 20)
            neighbors = r.sample(range(sid), min(sid, r.randint(0, 2)))
            arena.add_storage(sid, cost, neighbors, evictable=r.random() < 0.9)
            if offload and o.random() < 0.35:
                arena.set_offload(sid, o.randint(0, 20))
            arena.offload_last = offload != "priced"
            arena.touch(sid, now - r.choice([0, 1, 2, 4, 8]))
            placement = r.choice([EXPENSIVE, CHEAP])
            anonymous = r.random() < 0.1
            offset = arena.allocate(64 * r.randint(1, 4), placement,
                                    NO_STORAGE if anonymous else sid)
            if offset < 0:
                break
            if r.random() < 0.3:
                arena.free(offset)
            if r.random() < 0.05:
                arena.pin(sid)
            sid += 1
    return arenas, now, rng


@pytest.mark.parametrize("weight", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("offload", [False, "last", "priced"])
@pytest.mark.parametrize("seed", range(60))
def test_coop_window_is_the_brute_force_minimum(seed, offload, weight):
    (core, reference), now, rng = random_layout(seed, offload, weight)
    assert core.excess_weight == reference.excess_weight == weight
    assert core.pieces() == reference.pieces()
    for _ in range(5):
        nbytes = rng.randint(0, core.capacity)
        expected = brute_force_window(reference, nbytes, now)
        assert brute_force_window(core, nbytes, now) == expected
        assert reference.choose_victims(nbytes, "coop", now) == expected
        assert core.choose_victims(nbytes, "coop", now) == expected


@pytest.mark.parametrize("seed", range(6))
def test_windows_of_hundreds_of_pieces(seed):
    """Windows far longer than a scan buffer would start with: core and reference agree."""
    rng = random.Random(seed)
    n = 320
    arenas = [coop.Arena(8 * n, 8), ReferenceArena(8 * n, 8)]
    costs = [rng.randint(0, 20) for _ in range(n)]
    walls = {rng.randrange(n // 5), rng.randrange(n - 10, n)}  # segments of >= 240 pieces
    holes = {i for i in range(n) if rng.random() < 0.1}
    for arena in arenas:
        for sid in range(n):
            arena.add_storage(sid, costs[sid], [sid - 1] if sid and sid % 7 else ())
            arena.allocate(8, EXPENSIVE, sid)
        for sid in sorted(walls):
            arena.pin(sid)
        for sid in sorted(holes):
            arena.free(8 * sid)
    core, reference = arenas
    assert core.pieces() == reference.pieces()
    for nbytes in [8 * rng.randint(65, 200) for _ in range(4)] + [8 * n // 2]:
        assert core.choose_victims(nbytes, "coop", 0) == reference.choose_victims(nbytes, "coop", 0)
    assert len(reference.choose_victims(8 * 150, "coop", 0)) > 64
    offsets = [arena.allocate_or_evict(8 * 150, CHEAP, "coop", 0, evictor(arena))
               for arena in arenas]
    assert offsets[0] == offsets[1]
    assert core.pieces() == reference.pieces()
    core.check()


def test_coop_window_ties_go_to_the_lowest_address(Arena):
    arena = Arena(512)
    storages(arena, [2, 3, 5, 3, 2, 5])
    build(arena, [(64, 0), (64, 1), (64, 2), (64, 3), (64, 4), (64, 5), (128, None)])
    # windows {0,1} and {3,4} both cost 5
    assert arena.choose_victims(128, "coop", 0) == [0, 1]
    arena.touch(0, -1)  # staleness 2 -> h = 1: {0,1} now costs 4
    arena.touch(4, -4)  # staleness 4 -> h = 0.5: {3,4} costs 3.5
    assert arena.choose_victims(128, "coop", 0) == [3, 4]


def test_an_excess_weight_compares_windows_per_byte_freed(Arena):
    """excess_weight w: a window's cost over request + w * (the bytes it frees beyond it);
    ties still go to the lowest address; the plan's cost stays its cost; a bad weight is an
    error that changes nothing."""
    arena = Arena(512)
    storages(arena, [2, 3])
    build(arena, [(64, 0), (64, None), (128, 1), (256, None)])
    # a 64-byte request: {0} costs 2 and frees 64 bytes, {1} costs 3 and frees 128
    assert arena.excess_weight == 0.0
    assert arena.choose_victims(64, "coop", 0) == [0]          # the least cost
    arena.excess_weight = 1.0
    assert arena.choose_victims(64, "coop", 0) == [1]          # 3 / 128 < 2 / 64
    assert arena.choose_plan(64, "coop", 0)["cost"] == 3.0
    arena.excess_weight = 0.5
    assert arena.choose_victims(64, "coop", 0) == [0]          # 3 / 96 == 2 / 64: a tie
    arena.excess_weight = 0.75
    assert arena.choose_victims(64, "coop", 0) == [1]          # 3 / 112 < 2 / 64
    for bad in (-0.5, 1.5, float("nan"), float("inf"), "half", None):
        with pytest.raises(ValueError, match=r"excess_weight must be a number in \[0, 1\]"):
            arena.excess_weight = bad
    assert arena.excess_weight == 0.75
    assert arena.allocate_or_evict(64, EXPENSIVE, "coop", 0, evictor(arena)) == 128
    assert [arena.storage_info(s)["resident"] for s in (0, 1)] == [True, False]
    arena.check()


def test_coop_window_ties_go_to_the_lowest_start_then_the_fewest_pieces(Arena):
    arena = Arena(512)
    storages(arena, [0, 4, 0])
    build(arena, [(64, 0), (128, 1), (64, 2), (256, None)])
    # from offset 0: {0} is too small, {0, 1} costs 4; from 64: {1} costs 4 as well
    assert arena.choose_victims(128, "coop", 0) == [0, 1]
    arena.set_cost(1, 0)
    # every window costs 0: the lowest start wins, then the fewest pieces
    assert arena.choose_victims(64, "coop", 0) == [0]
    assert arena.choose_victims(192, "coop", 0) == [0, 1]


def test_offloads_change_the_windows_chosen():
    """The offload layouts above are not vacuous: the third way out changes the choice."""
    changed = {"last": 0, "priced": 0}
    for seed in range(60):
        for mode in changed:
            (plain, _), now, rng = random_layout(seed, False)
            (tier, _), _, _ = random_layout(seed, mode)
            for _ in range(5):
                nbytes = rng.randint(0, plain.capacity)
                changed[mode] += plain.choose_victims(nbytes, "coop", now) != \
                    tier.choose_victims(nbytes, "coop", now)
    # offloads come last: they change only the choices that do not exist without them
    assert changed["priced"] >= 30 and changed["last"] >= 10
    assert changed["priced"] > changed["last"]


def offloading_evictor(arena):
    """Each victim leaves by its cheaper way, as an engine with a host tier takes it: unbound
    from its piece and then the piece freed (an offload), or its piece freed (evicted)."""
    def evict(victims):
        for sid in victims:
            offset = arena.storage_info(sid)["offset"]
            if arena.offload_wins(sid):
                arena.unbind(sid)
            arena.free(offset)
    return evict


def test_an_offload_frees_a_constant_in_the_way(Arena):
    """A constant (unevictable) splitting the free space is a wall, until it may be offloaded:
    then it leaves, counted as an offload, registered, not resident and in no class."""
    arena = Arena(256)
    arena.add_storage(0, 0.0, evictable=False)
    build(arena, [(64, "free"), (64, 0), (128, "free")])
    with pytest.raises(coop.OutOfMemoryError):
        arena.allocate_or_evict(256, EXPENSIVE, "coop", 0, offloading_evictor(arena))
    arena.set_offload(0, 5.0)
    assert arena.choose_victims(256, "coop", 0) == [0]
    assert arena.allocate_or_evict(256, EXPENSIVE, "coop", 0, offloading_evictor(arena)) == 0
    stats = arena.stats()
    assert (stats["offloads"], stats["bytes_offloaded"], stats["evictions"]) == (1, 64, 0)
    info = arena.storage_info(0)
    assert (info["resident"], info["class_cost"], info["offload"]) == (False, None, 5.0)
    arena.check()


def test_a_piece_leaves_by_its_cheaper_way(Arena):
    """With offloads priced in every choice (offload_last False), an evictable piece whose
    offload is cheaper than its c' costs the offload in the window (and so wins against a
    neighbor whose eviction costs more); at a tie it is evicted."""
    arena = Arena(128)
    arena.offload_last = False
    storages(arena, [10.0, 4.0])
    build(arena, [(64, 0), (64, 1)])
    assert arena.choose_victims(64, "coop", 0) == [1]
    arena.set_offload(0, 3.0)
    assert arena.choose_victims(64, "coop", 0) == [0]
    plan = arena.choose_plan(64, "coop", 0)
    assert plan["cost"] == 3.0
    arena.allocate_or_evict(64, EXPENSIVE, "coop", 0, offloading_evictor(arena))
    assert (arena.stats()["offloads"], arena.stats()["evictions"]) == (1, 0)
    arena.set_offload(1, 4.0)            # a tie with its c' of 4: evicted
    arena.allocate_or_evict(64, EXPENSIVE, "coop", 0, offloading_evictor(arena))
    assert (arena.stats()["offloads"], arena.stats()["evictions"]) == (1, 1)
    assert arena.storage_info(1)["class_cost"] == 4.0
    arena.check()


def test_offload_costs_are_checked(Arena):
    arena = Arena(128)
    arena.add_storage(0, 1.0)
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="offload cost"):
            arena.set_offload(0, bad)
    with pytest.raises(ValueError, match="not resident"):
        arena.unbind(0)
    arena.set_offload(0, float("inf"))
    assert arena.storage_info(0)["offload"] == float("inf")


def test_offloads_come_last_by_default(Arena):
    """offload_last (the default): a cheaper offload does not count while a window exists
    without offloads; once none does, the choice counts them, and only then do victims leave
    by an offload."""
    arena = Arena(192)
    storages(arena, [10.0, 4.0])
    arena.add_storage(2, 0.0, evictable=False)
    build(arena, [(64, 0), (64, 1), (64, 2)])
    arena.set_offload(0, 3.0)
    arena.set_offload(2, 1.0)
    assert arena.offload_last
    assert arena.choose_victims(64, "coop", 0) == [1]       # as without offloads
    assert arena.choose_plan(64, "coop", 0)["cost"] == 4.0
    assert arena.choose_victims(192, "coop", 0) == [0, 1, 2]   # only with offloads
    assert arena.choose_plan(192, "coop", 0)["cost"] == 3.0 + 4.0 + 1.0
    arena.free(arena.allocate_or_evict(64, EXPENSIVE, "coop", 0, offloading_evictor(arena)))
    assert (arena.stats()["offloads"], arena.stats()["evictions"]) == (0, 1)
    arena.allocate_or_evict(192, EXPENSIVE, "coop", 0, offloading_evictor(arena))
    assert (arena.stats()["offloads"], arena.stats()["evictions"]) == (2, 1)
    arena.check()
