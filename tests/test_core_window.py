"""The coop window scan against brute force (random layouts, long windows, ties)."""
import itertools
import math
import random

import pytest

import coop
from coop import CHEAP, EXPENSIVE, NO_STORAGE
from reference_arena import ReferenceArena
from _arena import build, evictor, storages


def brute_force_window(arena, nbytes, now):
    """Cheapest window by itertools over all (start, end), each cost an exact math.fsum."""
    pieces = arena.pieces()
    size = max(-(-nbytes // arena.alignment) * arena.alignment, arena.alignment)
    h = []
    for _, _, free, sid in pieces:
        if free:
            h.append(0.0)
            continue
        info = arena.storage_info(sid) if sid != NO_STORAGE else None
        if info is None or info["pins"] or not info["evictable"]:
            h.append(None)
        else:
            h.append(info["cprime"] / max(now - info["last_access"], 1.0))
    best, victims = None, []
    for i, j in itertools.combinations_with_replacement(range(len(pieces)), 2):
        window = range(i, j + 1)
        if any(h[k] is None for k in window) or sum(pieces[k][1] for k in window) < size:
            continue
        key = (math.fsum(h[k] for k in window), pieces[i][0], j - i + 1)
        if best is None or key < best:
            best = key
            victims = [pieces[k][3] for k in window if not pieces[k][2]]
    return victims


def random_layout(seed):
    """The same random arena in core and reference; costs and staleness keep every h dyadic."""
    rng = random.Random(seed)
    k = rng.randint(4, 40)
    now = 100
    arenas = [coop.Arena(64 * k), ReferenceArena(64 * k)]
    for arena in arenas:
        r = random.Random(seed)
        r.randint(4, 40)
        sid = 0
        while True:
            cost = r.randint(0, 20)
            neighbors = r.sample(range(sid), min(sid, r.randint(0, 2)))
            arena.add_storage(sid, cost, neighbors, evictable=r.random() < 0.9)
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


@pytest.mark.parametrize("seed", range(60))
def test_coop_window_is_the_brute_force_minimum(seed):
    (core, reference), now, rng = random_layout(seed)
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
