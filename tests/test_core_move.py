"""The coop window with moves against a brute force over every window and every evict/move
choice per piece (docs/core.md, "Moving"), on small random arenas; and moves carried out."""
import itertools
import math
import random

import pytest

import coop
from coop import CHEAP, EXPENSIVE, NO_STORAGE
from coop._core import LOG_MOVE
from reference_arena import ReferenceArena
from _arena import build, comparable_stats, evictor, per_byte, storages


def _matching(sizes, bins):
    """Whether every size gets its own bin at least as large (augmenting paths, not the sorted
    rule the arena uses)."""
    owner = [None] * len(bins)

    def place(i, seen):
        for b, room in enumerate(bins):
            if room >= sizes[i] and b not in seen:
                seen.add(b)
                if owner[b] is None or place(owner[b], seen):
                    owner[b] = i
                    return True
        return False

    return all(place(i, set()) for i in range(len(sizes)))


def move_way(arena, nbytes, info, now):
    """A move's way out on the one scale: its copy and the room it takes (the arena's
    room_price per byte), over its staleness, computed as the core computes it."""
    s = max(now - info["last_access"], 1.0)
    price = arena.room_price
    return (nbytes * arena.move_cost + (price * nbytes * s if price > 0.0 else 0.0)) / s


def brute_force_plan(arena, nbytes, now, offloads=None, moves=True):
    """The least (cost, start offset, pieces) over every window and every way out of it of each
    of its pieces (evict if a candidate, move if movable and moves); moved pieces need distinct
    free pieces outside the window. Costs are exact sums (math.fsum). Offloads count as a way
    out always (offloads True), never (False) or as the arena says (None: with offload_last,
    only when no plan exists without them). With the arena's excess_weight, over the windows
    that cover the request and would not without their last piece, each cost per byte freed
    (_arena.per_byte)."""
    if offloads is None:
        if not arena.offload_last:
            return brute_force_plan(arena, nbytes, now, True, moves)
        plan = brute_force_plan(arena, nbytes, now, False, moves)
        return plan if plan is not None else brute_force_plan(arena, nbytes, now, True, moves)
    pieces = arena.pieces()
    size = max(-(-nbytes // arena.alignment) * arena.alignment, arena.alignment)
    rate = arena.move_cost
    ways = []
    for _, nb, free, sid in pieces:
        if free:
            ways.append([0.0])
            continue
        info = arena.storage_info(sid) if sid != NO_STORAGE else None
        options = []
        if info is not None and not info["pins"]:
            if info["evictable"]:
                options.append(("evict", info["cprime"] / max(now - info["last_access"], 1.0)))
            if offloads and info["offload"] < math.inf:
                options.append(("offload", info["offload"] / max(now - info["last_access"], 1.0)))
            if info["movable"] and math.isfinite(rate) and moves:
                options.append(("move", move_way(arena, nb, info, now)))
        ways.append(options or None)
    best = None
    weight = arena.excess_weight
    for i, j in itertools.combinations_with_replacement(range(len(pieces)), 2):
        window = range(i, j + 1)
        covered = sum(pieces[k][1] for k in window)
        if any(ways[k] is None for k in window) or covered < size:
            continue
        if weight and covered - pieces[j][1] >= size:
            continue                    # not the smallest window from i
        bins = [pieces[k][1] for k in range(len(pieces))
                if pieces[k][2] and not i <= k <= j]
        used = [k for k in window if not pieces[k][2]]
        for choice in itertools.product(*(ways[k] for k in used)):
            moved = [pieces[k][1] for k, (how, _) in zip(used, choice) if how == "move"]
            if len(moved) > len(bins) or not _matching(moved, bins):
                continue
            key = (per_byte(math.fsum(c for _, c in choice), covered, size, weight),
                   pieces[i][0], j - i + 1)
            if best is None or key < best:
                best = key
    return best


def random_layout(seed, rate, offload=False, blocked=False, weight=0.0):
    """The same small random arena in core and reference; every cost is dyadic. offload: a
    third of the storages (unevictable ones too) may also leave by an offload. blocked: the
    arenas' moves_if_blocked (off, the default: every choice is the moving window, which the
    brute force checks)."""
    rng = random.Random(seed)
    k = rng.randint(4, 12)
    now = 100
    arenas = [coop.Arena(64 * k), ReferenceArena(64 * k)]
    for arena in arenas:
        arena.move_cost = rate
        arena.moves_if_blocked = blocked
        arena.excess_weight = weight
        r = random.Random(seed)
        r.randint(4, 12)
        o = random.Random(seed + 1000)
        sid = 0
        while True:
            arena.add_storage(sid, r.randint(0, 20), r.sample(range(sid), min(sid, r.randint(0, 2))),
                              evictable=r.random() < 0.6)
            if offload and o.random() < 0.35:
                arena.set_offload(sid, o.randint(0, 20))
            arena.offload_last = offload != "priced"
            arena.set_movable(sid, r.random() < 0.7)
            arena.touch(sid, now - r.choice([0, 1, 2, 4, 8]))
            anonymous = r.random() < 0.1
            offset = arena.allocate(64 * r.randint(1, 3), r.choice([EXPENSIVE, CHEAP]),
                                    NO_STORAGE if anonymous else sid)
            if offset < 0:
                break
            if r.random() < 0.35:
                arena.free(offset)
            if r.random() < 0.1:
                arena.pin(sid)
            sid += 1
    return arenas, now, rng


def check_plan(arena, plan, nbytes, now, offloads=False):
    """The plan empties its window: every used piece in it evicted or moved once, each move to
    a range of a free piece outside the window, no two moves' ranges overlapping; its cost is
    the sum of its parts."""
    pieces = arena.pieces()
    start = next(i for i, p in enumerate(pieces) if p[0] == plan["start"])
    window = pieces[start:start + plan["pieces"]]
    assert sum(p[1] for p in window) >= max(-(-nbytes // 64) * 64, 64)
    used = [p[3] for p in window if not p[2]]
    moved = [sid for sid, _ in plan["moves"]]
    assert sorted(used) == sorted(plan["victims"] + moved) and len(set(used)) == len(used)
    free_outside = [(p[0], p[0] + p[1]) for i, p in enumerate(pieces)
                    if p[2] and not start <= i < start + plan["pieces"]]
    taken = sorted((dst, dst + arena.storage_info(sid)["nbytes"]) for sid, dst in plan["moves"])
    assert all(a[1] <= b[0] for a, b in zip(taken, taken[1:]))
    parts = []
    for sid, dst in plan["moves"]:
        info = arena.storage_info(sid)
        assert info["movable"] and not info["pins"]
        assert any(lo <= dst and dst + info["nbytes"] <= hi for lo, hi in free_outside)
        parts.append(move_way(arena, info["nbytes"], info, now))
    for sid in plan["victims"]:
        info = arena.storage_info(sid)
        assert (info["evictable"] or (offloads and info["offload"] < math.inf)) \
            and not info["pins"]
        way = min(([info["cprime"]] if info["evictable"] else [])
                  + ([info["offload"]] if offloads else []))
        parts.append(way / max(now - info["last_access"], 1.0))
    assert plan["cost"] == math.fsum(parts)


@pytest.mark.parametrize("weight", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("price", [0.0, 1 / 512, 1 / 64])
@pytest.mark.parametrize("offload", [False, "last", "priced"])
@pytest.mark.parametrize("rate", [0.0, 1 / 64, 1 / 16, 1 / 4])
@pytest.mark.parametrize("seed", range(50))
def test_moving_window_is_the_brute_force_minimum(seed, rate, offload, price, weight):
    """The chosen window is the brute force's (one moved piece per free piece, each move priced
    with the room it takes; with an excess_weight, per byte freed); its plan, with the room its
    destinations leave used too, costs no more than the brute force's plan."""
    (core, reference), now, rng = random_layout(seed, rate, offload, weight=weight)
    assert core.pieces() == reference.pieces()
    core.room_price = reference.room_price = price
    for _ in range(4):
        nbytes = rng.randint(0, core.capacity // rng.choice([1, 2]))
        expected = brute_force_plan(reference, nbytes, now)
        assert brute_force_plan(core, nbytes, now) == expected
        plan = core.choose_plan(nbytes, "coop", now)
        assert reference.choose_plan(nbytes, "coop", now) == plan
        if expected is None:
            assert plan == {"victims": [], "moves": [], "cost": None, "start": None, "pieces": 0}
            continue
        assert (plan["start"], plan["pieces"]) == expected[1:]
        size = max(-(-nbytes // 64) * 64, 64)
        pieces = core.pieces()
        start = next(i for i, p in enumerate(pieces) if p[0] == plan["start"])
        covered = sum(p[1] for p in pieces[start:start + plan["pieces"]])
        assert per_byte(plan["cost"], covered, size, weight) <= expected[0]
        check_plan(core, plan, nbytes, now, offloads=not core.offload_last or
                   brute_force_plan(reference, nbytes, now, False) is None)
        assert core.choose_victims(nbytes, "coop", now) == plan["victims"]


def brute_force_choice(arena, nbytes, now, offloads=None):
    """moves_if_blocked's choice (docs/core.md, "Moving") as (plan, evict_only): the evict-only
    window when there is one (evict_only True), else the moving window; offloads as in
    brute_force_plan (None: with offload_last, the whole rule without offloads first)."""
    if offloads is None:
        if not arena.offload_last:
            return brute_force_choice(arena, nbytes, now, True)
        plan, evict_only = brute_force_choice(arena, nbytes, now, False)
        return (plan, evict_only) if plan is not None else \
            brute_force_choice(arena, nbytes, now, True)
    plan = brute_force_plan(arena, nbytes, now, offloads, moves=False)
    if plan is not None:
        return plan, True
    return brute_force_plan(arena, nbytes, now, offloads), False


@pytest.mark.parametrize("weight", [0.0, 1.0])
@pytest.mark.parametrize("offload", [False, "last", "priced"])
@pytest.mark.parametrize("rate", [0.0, 1 / 16])
@pytest.mark.parametrize("seed", range(50))
def test_moves_only_when_no_evict_only_window_exists(seed, rate, offload, weight):
    """moves_if_blocked: the choice is the evict-only window where one covers the request
    (and then nothing moves) and the moving window (the brute force's minimum) only where none
    does; with offload_last, the whole rule runs without offloads first, then with them."""
    (core, reference), now, rng = random_layout(seed, rate, offload, blocked=True,
                                                weight=weight)
    assert core.moves_if_blocked and reference.moves_if_blocked
    for _ in range(4):
        nbytes = rng.randint(0, core.capacity // rng.choice([1, 2]))
        expected, evict_only = brute_force_choice(reference, nbytes, now)
        plan = core.choose_plan(nbytes, "coop", now)
        assert reference.choose_plan(nbytes, "coop", now) == plan
        if expected is None:
            assert plan["cost"] is None
            continue
        assert (plan["start"], plan["pieces"]) == expected[1:]
        pieces = core.pieces()
        start = next(i for i, p in enumerate(pieces) if p[0] == plan["start"])
        cost = per_byte(plan["cost"], sum(p[1] for p in pieces[start:start + plan["pieces"]]),
                        max(-(-nbytes // 64) * 64, 64), weight)
        assert cost == expected[0] if evict_only else cost <= expected[0]
        if evict_only:
            assert plan["moves"] == []


def test_moves_if_blocked_changes_choices():
    """The rule above is not vacuous: in the random layouts it chooses an evict-only window
    where the moving window would have moved pieces, and it still moves pieces where no
    evict-only window exists (counts over 200 seeds: 12 changed choices, 7 with moves)."""
    differ = blocked_moves = 0
    for seed in range(200):
        (core, _), now, rng = random_layout(seed, 1 / 16, blocked=True)
        for _ in range(4):
            nbytes = rng.randint(0, core.capacity // rng.choice([1, 2]))
            with_rule = core.choose_plan(nbytes, "coop", now)
            core.moves_if_blocked = False
            without = core.choose_plan(nbytes, "coop", now)
            core.moves_if_blocked = True
            differ += with_rule != without
            blocked_moves += bool(with_rule["moves"])
    assert differ >= 10 and blocked_moves >= 5


@pytest.mark.parametrize("moving", [False, True])
def test_an_excess_weight_changes_choices(moving):
    """excess_weight is not vacuous: over 200 random layouts (moving: at 1/16 per byte, else
    evict-only), comparing windows per byte freed (weight 1.0) changes the window chosen for
    some requests (24 of 800 evict-only, 34 moving), each time to one that frees more bytes
    per unit of cost."""
    differ = 0
    for seed in range(200):
        (core, _), now, rng = random_layout(seed, 1 / 16 if moving else math.inf)
        for _ in range(4):
            nbytes = rng.randint(0, core.capacity // rng.choice([1, 2]))
            by_cost = core.choose_plan(nbytes, "coop", now)
            core.excess_weight = 1.0
            by_byte = core.choose_plan(nbytes, "coop", now)
            core.excess_weight = 0.0
            if (by_cost["start"], by_cost["pieces"]) != (by_byte["start"], by_byte["pieces"]):
                differ += 1
                pieces = core.pieces()

                def freed(plan):
                    i = next(k for k, p in enumerate(pieces) if p[0] == plan["start"])
                    return sum(p[1] for p in pieces[i:i + plan["pieces"]])
                assert by_byte["cost"] / freed(by_byte) <= by_cost["cost"] / freed(by_cost)
                assert freed(by_byte) > freed(by_cost)
    assert differ == (34 if moving else 24)


def larger_layout(seed, rate):
    """A random arena of about 60 pieces in core and reference: integer costs (so that c' is
    exact in both) over staleness up to 100 (so that h and the copies are not), many windows
    whose bounds are close (the first pass and the full pass both decide)."""
    arenas = [coop.Arena(64 * 120), ReferenceArena(64 * 120)]
    now = 1000
    for arena in arenas:
        arena.move_cost = rate
        r = random.Random(seed)
        sid = 0
        while True:
            arena.add_storage(sid, r.randint(0, 50), r.sample(range(sid), min(sid, r.randint(0, 2))),
                              evictable=r.random() < 0.8)
            arena.set_movable(sid, r.random() < 0.8)
            arena.touch(sid, now - r.randint(0, 100))
            offset = arena.allocate(64 * r.randint(1, 3), r.choice([EXPENSIVE, CHEAP]),
                                    NO_STORAGE if r.random() < 0.05 else sid)
            if offset < 0:
                break
            if r.random() < 0.25:
                arena.free(offset)
            sid += 1
    return arenas, now


@pytest.mark.parametrize("rate", [0.0, 0.01, 0.1, 1.0])
@pytest.mark.parametrize("seed", range(25))
def test_moving_window_agrees_with_the_reference_on_larger_arenas(seed, rate):
    (core, reference), now = larger_layout(seed, rate)
    assert core.pieces() == reference.pieces()
    for nbytes in (128, 300, 640, 1500, 4000):
        plan = core.choose_plan(nbytes, "coop", now)
        assert reference.choose_plan(nbytes, "coop", now) == plan


def test_both_first_passes_agree_with_the_reference():
    """The moving window's first pass is a quick one (every window's bound, no counts) while
    recent searches were mostly decided by it, and the counting one, which writes each start's
    bound for best-first, once they were not: a run of searches that the first pass leaves open
    (one free piece: the first plan cannot move what its bound counted) switches to it, a run
    that it decides switches back; every choice is the reference's, and the quick pass decides
    only in the second run."""
    def layout(holes):
        arenas = [coop.Arena(64 * 40), ReferenceArena(64 * 40)]
        for arena in arenas:
            arena.move_cost = 1 / 64
            r = random.Random(7)
            offsets = []
            for sid in range(40):
                arena.add_storage(sid, r.randint(1, 50), [], evictable=sid % 10 != 3)
                arena.touch(sid, 1000 - r.randint(0, 100))
                offsets.append(arena.allocate(64, EXPENSIVE, sid))
            for sid in holes:
                arena.free(offsets[sid])
        return arenas

    core, reference = layout([20])
    decided = []
    for _ in range(12):
        plan = core.choose_plan(256, "coop", 1000)
        assert reference.choose_plan(256, "coop", 1000) == plan
        decided.append(core.last_search()["quick_decided"])
    assert not any(decided)                 # left open: after a few, the counting pass runs
    for sid in (5, 15, 25, 35, 36, 37):
        for arena in (core, reference):
            arena.free(arena.storage_info(sid)["offset"])
    decided = []
    for _ in range(24):
        plan = core.choose_plan(256, "coop", 1000)
        assert reference.choose_plan(256, "coop", 1000) == plan
        decided.append(core.last_search()["quick_decided"])
    # the counting pass decides the first, then the quick pass comes back and decides
    assert not decided[0] and all(decided[-8:]), decided
    core.check()


def test_both_best_first_orders_agree_with_the_reference():
    """Best-first tightens each window's bound as it pops it (lazy) until recent searches
    popped most of what they ordered, then every bound before ordering (eager), with a lazy one
    every ninth time to measure again. Pieces whose move is far cheaper than their eviction and two
    free pieces: every window's first bound counts its four movers as moving, but two can, so
    best-first pops nearly every window it orders; searched again and again, both orders run,
    and every choice is the reference's."""
    kinds = []
    for seed in range(3):
        arenas = [coop.Arena(64 * 120), ReferenceArena(64 * 120)]
        for arena in arenas:
            arena.move_cost = 1 / 64
            r = random.Random(seed)
            for sid in range(120):
                arena.add_storage(sid, r.randint(50, 150), [])
                arena.touch(sid, 1000 - r.randint(1, 100))
                arena.allocate(64, EXPENSIVE, sid)
            for sid in r.sample(range(120), 2):
                arena.free(arena.storage_info(sid)["offset"])
        core, reference = arenas
        for _ in range(24):
            plan = core.choose_plan(256, "coop", 1000)
            assert reference.choose_plan(256, "coop", 1000) == plan
            kinds.append(core.last_search()["best_first"])
        core.check()
    assert kinds.count("eager") >= 36 and kinds.count("lazy") >= 12, kinds


def test_moving_window_agrees_with_the_reference_when_sums_overflow():
    """Costs near the largest double: running sums overflow to inf and their differences are
    not numbers, so the first pass's bounds say nothing and the full pass decides; the choice
    is the reference's (it was not, when plans went best-first from the first pass's bounds
    there: windows bounded by NaN were dropped, 6 of these 480 choices differed)."""
    huge = 0
    for seed in range(40):
        for rate in (0.01, 1.0, 1e300):
            arenas = [coop.Arena(64 * 60), ReferenceArena(64 * 60)]
            for arena in arenas:
                arena.move_cost = rate
                r = random.Random(seed)
                sid = 0
                while True:
                    arena.add_storage(sid, r.choice([0, 3, 1e308, 1.7e308]),
                                      r.sample(range(sid), min(sid, r.randint(0, 2))),
                                      evictable=r.random() < 0.8)
                    arena.set_movable(sid, r.random() < 0.8)
                    arena.touch(sid, 1000 - r.choice([0, 1, 50]))
                    offset = arena.allocate(64 * r.randint(1, 3), r.choice([EXPENSIVE, CHEAP]),
                                            sid)
                    if offset < 0:
                        break
                    if r.random() < 0.3:
                        arena.free(offset)
                    sid += 1
            core, reference = arenas
            for nbytes in (128, 300, 640, 1500):
                plan = core.choose_plan(nbytes, "coop", 1000)
                assert reference.choose_plan(nbytes, "coop", 1000) == plan
                huge += plan["cost"] is not None and plan["cost"] > 1e300
    assert huge >= 20


def test_moves_share_free_pieces_in_the_larger_layouts():
    """The reference comparison above is not vacuous for the room destinations leave: some of
    its plans move a piece to a range inside a free piece, beside another move."""
    packed = 0
    for rate in (0.0, 0.01, 0.1, 1.0):
        for seed in range(25):
            (core, _), now = larger_layout(seed, rate)
            starts = {offset for offset, _, free, _ in core.pieces() if free}
            for nbytes in (128, 300, 640, 1500, 4000):
                plan = core.choose_plan(nbytes, "coop", now)
                packed += any(dst not in starts for _, dst in plan["moves"])
    assert packed >= 5, packed


@pytest.mark.parametrize("rate", [0.01, 0.1])
@pytest.mark.parametrize("seed", range(25))
def test_room_price_agrees_with_the_reference_on_larger_arenas(seed, rate):
    """With a room price, the same choices as the reference's (prices on h's scale: a few
    units of h per KiB)."""
    (core, reference), now = larger_layout(seed, rate)
    for price in (1 / 4096, 1 / 256, 1 / 16):
        core.room_price = reference.room_price = price
        for nbytes in (128, 300, 640, 1500, 4000):
            plan = core.choose_plan(nbytes, "coop", now)
            assert reference.choose_plan(nbytes, "coop", now) == plan


def test_the_room_price_changes_choices_in_the_larger_layouts():
    """The comparison above is not vacuous: a price changes the window, its moves or its
    victims in many of those searches (70 of 750)."""
    differ = 0
    for rate in (0.01, 0.1):
        for seed in range(25):
            (core, _), now = larger_layout(seed, rate)
            for nbytes in (128, 300, 640, 1500, 4000):
                core.room_price = 0.0
                base = core.choose_plan(nbytes, "coop", now)
                for price in (1 / 4096, 1 / 256, 1 / 16):
                    core.room_price = price
                    plan = core.choose_plan(nbytes, "coop", now)
                    differ += (plan["start"], plan["moves"], plan["victims"]) != \
                        (base["start"], base["moves"], base["victims"])
    assert differ >= 50, differ


def test_moves_happen_in_the_random_layouts():
    """The brute-force test above is not vacuous: many of its plans move pieces."""
    moving = 0
    for rate in (0.0, 1 / 64):
        for seed in range(50):
            (core, _), now, rng = random_layout(seed, rate)
            for _ in range(4):
                nbytes = rng.randint(0, core.capacity // rng.choice([1, 2]))
                moving += bool(core.choose_plan(nbytes, "coop", now)["moves"])
    assert moving >= 20


def moving_request(arena, now):
    """The smallest request that does not fit as is and whose plan moves pieces, or None."""
    for nbytes in range(arena.alignment, arena.capacity + 1, arena.alignment):
        if arena.stats()["largest_free"] < nbytes and \
                arena.choose_plan(nbytes, "coop", now)["moves"]:
            return nbytes
    return None


def eviction_loops(arena, requests, now):
    """allocate_or_evict of each request under coop (a request that fails: "oom"), logged:
    the offsets, the moves, the pieces, the comparable counters and the log, after check()."""
    arena.start_log()
    moved = []
    out = []
    for nbytes in requests:
        try:
            out.append(arena.allocate_or_evict(nbytes, EXPENSIVE, "coop", now, evictor(arena),
                                               move=lambda *m: moved.append(m)))
        except MemoryError:
            out.append("oom")
    arena.check()
    return out, moved, arena.pieces(), comparable_stats(arena), arena.take_log()


@pytest.mark.parametrize("rate", [0.0, 1 / 64])
@pytest.mark.parametrize("seed", range(30))
def test_moving_eviction_loops_agree_with_the_reference(seed, rate):
    """allocate_or_evict with moves: same offsets, pieces, counters and logs in both."""
    (core, reference), now, rng = random_layout(seed, rate)
    requests = [rng.randint(1, core.capacity // 2) for _ in range(2)]
    first = moving_request(core, now)
    assert moving_request(reference, now) == first
    if first is not None:
        requests.insert(0, first)
    results = [eviction_loops(arena, requests, now) for arena in (core, reference)]
    assert results[0] == results[1]
    if first is not None:
        assert results[0][3]["window_moves"] > 0 and results[0][1]


def test_moving_eviction_loops_happen():
    """The loop test above is not vacuous: 10 of its 60 layouts have a request that moves."""
    found = sum(moving_request(random_layout(seed, rate)[0][0], 100) is not None
                for seed in range(30) for rate in (0.0, 1 / 64))
    assert found >= 8


WALL = [(64, "free"), (64, 0), (64, "free"), (64, None), (128, "free")]   # 384 bytes


def test_a_wall_that_moves_opens_the_window(Arena):
    """An unevictable piece splits the free space; moving it is the only way to fit."""
    arena = Arena(384)
    storages(arena, [5])
    arena.set_evictable(0, False)
    build(arena, WALL)
    with pytest.raises(MemoryError):
        arena.allocate_or_evict(192, EXPENSIVE, "coop", 0, evictor(arena))   # no moves: inf
    arena.move_cost = 1 / 64                                                  # 64 bytes: 1.0
    plan = arena.choose_plan(192, "coop", 0)
    assert plan == {"victims": [], "moves": [(0, 256)], "cost": 1.0, "start": 0, "pieces": 3}
    seen = []
    assert arena.allocate_or_evict(192, EXPENSIVE, "coop", 0, evictor(arena),
                                   move=lambda *m: seen.append(m)) == 0
    assert seen == [(0, 64, 256)]
    assert arena.storage_info(0)["offset"] == 256 and arena.storage_info(0)["class_cost"] is None
    stats = arena.stats()
    assert (stats["window_moves"], stats["bytes_moved"], stats["move_cost"],
            stats["evictions"]) == (1, 64, 1.0, 0)
    assert arena.pieces() == [(0, 192, False, -1), (192, 64, False, -1), (256, 64, False, 0),
                              (320, 64, True, -1)]
    arena.check()


def test_moving_is_chosen_by_cost_per_piece(Arena):
    """A candidate moves when that is cheaper than its h, else it is evicted."""
    arena = Arena(384)
    storages(arena, [1, 8])
    build(arena, [(64, 0), (64, 1), (64, None), (64, "free"), (64, None), (64, "free")])
    arena.move_cost = 4 / 64          # moving a 64-byte piece costs 4
    # moves_if_blocked: evictions alone make room (window {0, 1} costs 9), so nothing moves
    arena.moves_if_blocked = True
    assert arena.choose_plan(128, "coop", 0) == {
        "victims": [0, 1], "moves": [], "cost": 9.0, "start": 0, "pieces": 2}
    arena.moves_if_blocked = False    # the default: every choice weighs moves against evictions
    # window {0, 1}: evict 0 (h 1 < 4) and move 1 (4 < h 8) to the lowest 64 bytes outside
    assert arena.choose_plan(128, "coop", 0) == {
        "victims": [0], "moves": [(1, 192)], "cost": 5.0, "start": 0, "pieces": 2}
    arena.move_cost = 16 / 64         # now moving costs 16 > 8: evict both
    assert arena.choose_plan(128, "coop", 0) == {
        "victims": [0, 1], "moves": [], "cost": 9.0, "start": 0, "pieces": 2}


@pytest.mark.parametrize("policy, rate", [("coop", 4 / 64), ("coop", math.inf),
                                          ("dtr", 4 / 64)])
def test_search_phases_lie_inside_the_search_time(policy, rate):
    """Arena.stats splits coop's search time into its phases (sweep, scans, the moving window's
    plans) and counts the plans evaluated: the phases lie inside search_time; the evict-only
    window (no moves) plans nothing; a loop policy's one pass is search_time alone."""
    arena = coop.Arena(384)
    storages(arena, [1, 8])
    build(arena, [(64, 0), (64, 1), (64, None), (64, "free"), (64, None), (64, "free")])
    arena.move_cost = rate
    arena.allocate_or_evict(128, EXPENSIVE, policy, 0, evictor(arena), move=lambda *m: None)
    s = arena.stats()
    fill, scan, plan = s["search_fill_time"], s["search_scan_time"], s["search_plan_time"]
    assert s["searches"] >= 1 and min(fill, scan, plan) >= 0.0
    assert fill + scan + plan <= s["search_time"]
    if policy == "dtr":
        assert fill == scan == plan == 0.0 and s["plans_evaluated"] == s["moving_searches"] == 0
    elif rate == math.inf:
        assert fill > 0.0 and scan > 0.0 and plan == 0.0
        assert s["plans_evaluated"] == s["moving_searches"] == 0
    else:
        assert s["searches"] == s["moving_searches"] == 1 and s["plans_evaluated"] >= 1
        assert fill > 0.0 and scan > 0.0 and plan > 0.0
    arena.check()


def test_evicting_and_moving_compare_on_one_scale(Arena):
    """A move's cost is divided by the piece's staleness, as h is: per piece, moving wins
    exactly when the copy (bytes * move_cost) is below c', however stale the piece."""
    arena = Arena(384)
    storages(arena, [8, 8])
    build(arena, [(64, 0), (64, 1), (64, None), (64, "free"), (64, None), (64, "free")])
    arena.move_cost = 4 / 64          # copying a 64-byte piece costs 4 < c' = 8
    arena.touch(0, 0)
    arena.touch(1, 12)                # staleness 16 and 4 at now = 16: h = 0.5 and 2
    # both move (copies 4/16 and 4/4 on h's scale, below h); were a copy not divided by the
    # staleness, its 4 would exceed both h and both would be evicted (cost 2.5)
    assert arena.choose_plan(128, "coop", 16) == {
        "victims": [], "moves": [(0, 192), (1, 320)], "cost": 1.25, "start": 0, "pieces": 2}
    arena.move_cost = 16 / 64         # a copy of 16 > c' = 8: both are evicted, stale or not
    assert arena.choose_plan(128, "coop", 16) == {
        "victims": [0, 1], "moves": [], "cost": 2.5, "start": 0, "pieces": 2}


def test_the_full_pass_runs_when_the_least_bound_is_not_a_plan(Arena):
    """The window of least bound cannot have its moves (one destination, two movers), so its
    plan costs more than another window's bound: the full best-first pass finds the cheaper
    window further up, as the brute force does."""
    layout = [(64, 0), (64, 1), (64, None), (64, 2), (64, 3), (64, None), (64, "free")]
    arena = Arena(sum(nbytes for nbytes, _ in layout))
    storages(arena, [16, 16, 3, 3])
    build(arena, layout)
    arena.move_cost = 1 / 64          # every copy costs 1
    # window {0, 1}: bound 2 (both move), but one free piece: its plan costs 1 + 16 = 17;
    # window {2, 3}: bound 2 too, plan 1 + 3 = 4 (equal savings: the lower one moves)
    plan = arena.choose_plan(128, "coop", 0)
    assert plan == {"victims": [3], "moves": [(2, 384)], "cost": 4.0, "start": 192, "pieces": 2}
    expected = brute_force_plan(arena, 128, 0)
    assert (plan["cost"], plan["start"], plan["pieces"]) == expected


def test_moves_need_their_own_destination(Arena):
    """Two walls cannot share one free piece outside the window, even when it holds both."""
    layouts = {
        "one destination": [(64, "free"), (64, 0), (64, "free"), (64, 1), (64, "free"),
                            (64, None), (256, "free")],
        "two destinations": [(64, "free"), (64, 0), (64, "free"), (64, 1), (64, "free"),
                             (64, None), (128, "free"), (64, None), (64, "free")],
    }
    plans = {}
    for name, layout in layouts.items():
        arena = Arena(sum(nbytes for nbytes, _ in layout))
        storages(arena, [1, 1])
        arena.set_evictable(0, False)
        arena.set_evictable(1, False)
        build(arena, layout)
        arena.move_cost = 1 / 64
        plans[name] = arena.choose_plan(320, "coop", 0)
    assert plans["one destination"] == {"victims": [], "moves": [], "cost": None,
                                        "start": None, "pieces": 0}
    # equal sizes move in address order, each into the smallest destination that holds it
    # (ties: the lowest address): w0 takes the 64 bytes at 576, w1 the 128 at 384
    assert plans["two destinations"] == {"victims": [], "moves": [(0, 576), (1, 384)],
                                         "cost": 2.0, "start": 0, "pieces": 5}


def test_moves_pack_into_the_room_a_destination_leaves(Arena):
    """The window's one free piece outside holds both of its movers: the one of larger saving
    moves (one moved piece per free piece, as the choice counts it), then the other, whose
    eviction the choice counted, moves into the room left beside it instead; carried out, the
    moves take the free piece from its low end whatever their order in the plan, and the room
    is priced at what the choice paid per byte of its request from then on."""
    layout = [(64, 0), (128, 1), (64, "free"), (64, None), (192, "free")]
    arena = Arena(sum(nbytes for nbytes, _ in layout))
    storages(arena, [16, 32])
    build(arena, layout)
    arena.move_cost = 1 / 64          # a copy costs 1 per 64 bytes
    assert arena.room_price == 0.0
    # the only window covering 256 bytes is {0, 1, free}: the choice moves 1 (cost 2, saving
    # 30) to 320 and evicts 0 (16); the room left at 448 then takes 0 (cost 1)
    assert brute_force_plan(arena, 256, 0) == (18.0, 0, 3)
    plan = arena.choose_plan(256, "coop", 0)
    assert plan == {"victims": [], "moves": [(0, 448), (1, 320)], "cost": 3.0, "start": 0,
                    "pieces": 3}
    assert arena.room_price == 0.0            # a choice not carried out prices nothing
    moved = []
    offset = arena.allocate_or_evict(256, EXPENSIVE, "coop", 0, evictor(arena),
                                     move=lambda sid, src, dst: moved.append((sid, src, dst)))
    assert offset == 0 and moved == [(0, 0, 448), (1, 64, 320)]
    assert arena.storage_info(0)["offset"] == 448 and arena.storage_info(1)["offset"] == 320
    assert arena.pieces() == [(0, 256, False, -1), (256, 64, False, -1), (320, 128, False, 1),
                              (448, 64, False, 0)]
    assert arena.room_price == 3.0 / 256
    arena.check()


def test_the_room_price_makes_moves_dearer(Arena):
    """A move's way out is its copy plus the room it takes at room_price per byte: at 1/8 per
    byte piece 1 still moves (2 + 16 = 18 against its eviction's 32) and piece 0 (1 + 8 = 9
    against 16) still takes the room left beside it; at 1/2 per byte both copies cost more
    than their evictions (33 against 16, 66 against 32), and nothing moves."""
    layout = [(64, 0), (128, 1), (64, "free"), (64, None), (192, "free")]
    arena = Arena(sum(nbytes for nbytes, _ in layout))
    storages(arena, [16, 32])
    build(arena, layout)
    arena.move_cost = 1 / 64
    arena.room_price = 1 / 8
    assert brute_force_plan(arena, 256, 0) == (34.0, 0, 3)
    assert arena.choose_plan(256, "coop", 0) == {
        "victims": [], "moves": [(0, 448), (1, 320)], "cost": 27.0, "start": 0, "pieces": 3}
    arena.room_price = 1 / 2
    assert brute_force_plan(arena, 256, 0) == (48.0, 0, 3)
    assert arena.choose_plan(256, "coop", 0) == {
        "victims": [0, 1], "moves": [], "cost": 48.0, "start": 0, "pieces": 3}
    for bad in (-1.0, math.inf, math.nan, "x"):
        with pytest.raises(ValueError, match="room_price must be a finite number >= 0"):
            arena.room_price = bad
    assert arena.room_price == 1 / 2
    arena.check()


def test_the_log_has_each_move_where_it_happens(Arena):
    """The allocation log has each move of the window as (old offset, LOG_MOVE, new offset,
    size, storage id), in the plan's order, before the request's own allocation: not as the
    destination's allocation and the source's free. A refused move logs nothing."""
    layout = [(64, "free"), (64, 0), (64, "free"), (64, 1), (64, "free"), (64, None),
              (128, "free"), (64, None), (64, "free")]
    arena = Arena(sum(nbytes for nbytes, _ in layout))
    storages(arena, [1, 1])
    arena.set_evictable(0, False)
    arena.set_evictable(1, False)
    build(arena, layout)
    arena.move_cost = 1 / 64
    seen = []
    arena.start_log()
    assert arena.allocate_or_evict(300, EXPENSIVE, "coop", 0, evictor(arena),
                                   move=lambda *m: seen.append(m)) == 0
    assert seen == [(0, 64, 576), (1, 192, 384)]
    assert arena.take_log() == [64, LOG_MOVE, 576, 64, 0, 192, LOG_MOVE, 384, 64, 1, 0, 300]
    assert (arena.stats()["window_moves"], arena.stats()["bytes_moved"]) == (2, 128)
    arena.check()

    arena = Arena(384)
    storages(arena, [5])
    arena.set_evictable(0, False)
    build(arena, WALL)
    arena.move_cost = 1.0
    arena.start_log()
    with pytest.raises(MemoryError):
        arena.allocate_or_evict(192, EXPENSIVE, "coop", 0, evictor(arena),
                                move=lambda sid, src, dst: False)
    assert arena.take_log() == []
    arena.check()


def test_held_and_pinned_pieces_do_not_move(Arena):
    arena = Arena(384)
    storages(arena, [5])
    arena.set_evictable(0, False)
    build(arena, WALL)
    arena.move_cost = 0.0
    assert arena.choose_plan(192, "coop", 0)["moves"] == [(0, 256)]
    arena.set_movable(0, False)        # held by a user's array
    assert arena.choose_plan(192, "coop", 0)["cost"] is None
    arena.set_movable(0, True)
    arena.pin(0)                       # the running kernel's
    assert arena.choose_plan(192, "coop", 0)["cost"] is None
    arena.unpin(0)
    assert arena.choose_plan(192, "coop", 0)["moves"] == [(0, 256)]


def test_a_refused_move_makes_the_storage_unmovable(Arena):
    arena = Arena(384)
    storages(arena, [5])
    arena.set_evictable(0, False)
    build(arena, WALL)
    arena.move_cost = 1.0
    with pytest.raises(MemoryError):
        arena.allocate_or_evict(192, EXPENSIVE, "coop", 0, evictor(arena),
                                move=lambda sid, src, dst: False)
    assert not arena.storage_info(0)["movable"] and arena.storage_info(0)["offset"] == 64
    assert arena.stats()["window_moves"] == 0
    assert arena.pieces() == [(0, 64, True, -1), (64, 64, False, 0), (128, 64, True, -1),
                              (192, 64, False, -1), (256, 128, True, -1)]
    arena.check()


def test_move_cost_and_move_errors(Arena):
    arena = Arena(256)
    assert arena.move_cost == math.inf
    for bad in (-1.0, math.nan):
        with pytest.raises(ValueError, match="move_cost"):
            arena.move_cost = bad
    storages(arena, [1])
    build(arena, [(64, 0), (64, None), (128, "free")])
    with pytest.raises(ValueError, match="no free piece"):
        arena.move(0, 64)
    arena.check()
    arena.move(0, 128)
    assert arena.storage_info(0)["offset"] == 128
    arena.check()


def test_a_window_evicting_hundreds_of_its_movers(Arena):
    """Two blocks of 300 movers (a move costs 1, an eviction 8) and two free pieces: the full
    pass bounds windows that must evict 298 movers (a count past any narrow loop counter) and
    finds the reference's plan: the second block's last 299 pieces with the free piece above
    them, one moved into the other free piece, 298 evicted."""
    n = 300
    layout = ([(64, s) for s in range(n)] + [(64, None)] + [(64, s) for s in range(n, 2 * n)]
              + [(64, "free"), (64, None), (64, "free")])
    plans = []
    for A in (Arena, ReferenceArena):
        arena = A(sum(nbytes for nbytes, _ in layout))
        storages(arena, [8] * (2 * n))
        build(arena, layout)
        arena.move_cost = 1 / 64
        plans.append(arena.choose_plan(64 * n, "coop", 0))
    assert plans[0] == plans[1]
    assert plans[0]["moves"] == [(n + 1, 64 * (2 * n + 3))]
    assert plans[0]["victims"] == list(range(n + 2, 2 * n))
    assert (plans[0]["cost"], plans[0]["start"], plans[0]["pieces"]) == (1 + 8 * (n - 2),
                                                                         64 * (n + 2), n)


def constant_stretches(seed, rate, capacity_slack=0):
    """Core and reference holding long stretches of constants (movable, not evictable; a few
    pinned or unmovable: walls) around a mixed middle of candidates and constants, the arena
    full but for three small holes in the middle and capacity_slack free bytes at the end:
    several scan runs hold constants only. Returns the arenas, now and the hole bytes."""
    r = random.Random(seed)
    kinds = ["const"] * 260 + [r.choice(["cand", "cand", "const"]) for _ in range(200)] \
        + ["const"] * 200
    sizes = [64 * r.randint(1, 3) for _ in kinds]
    holes = sorted(r.sample(range(300, 420), 3))
    arenas = [coop.Arena(sum(sizes) + capacity_slack), ReferenceArena(sum(sizes) + capacity_slack)]
    now = 1000
    for arena in arenas:
        arena.move_cost = rate
        r2 = random.Random(seed + 1)
        offsets = []
        for sid, (kind, size) in enumerate(zip(kinds, sizes)):
            arena.add_storage(sid, r2.randint(1, 50), [], evictable=kind == "cand")
            arena.set_movable(sid, r2.random() < 0.97)
            arena.touch(sid, now - r2.randint(0, 100))
            offsets.append(arena.allocate(size, EXPENSIVE, sid))
        for sid in holes:
            arena.free(offsets[sid])
        for sid in (10, 500):
            arena.pin(sid)
    return arenas, now, sum(sizes[s] for s in holes)


@pytest.mark.parametrize("rate", [0.001, 0.1])
@pytest.mark.parametrize("seed", range(4))
def test_runs_no_window_reaches_are_skipped_and_choices_stay_the_references(seed, rate):
    """A request above the free bytes: the sweep skips the runs of constants more than the
    free pieces + 1 entries from any free or candidate entry (docs/core.md, "Moving"), writing
    fewer entries than there are pieces; every choice is still the reference's (brute force).
    A request the free bytes cover skips nothing."""
    (core, reference), now, free = constant_stretches(seed, rate)
    pieces = len(core.pieces())
    for nbytes in (free + 64, 900, 1500, 3000):
        plan = core.choose_plan(nbytes, "coop", now)
        assert reference.choose_plan(nbytes, "coop", now) == plan
        search = core.last_search()
        assert search["pieces"] == pieces and 0 < search["entries"] <= pieces // 2, search
    (core, reference), now, free = constant_stretches(seed, rate, capacity_slack=4096)
    pieces = len(core.pieces())
    for nbytes in (free + 64, 3000):
        plan = core.choose_plan(nbytes, "coop", now)
        assert reference.choose_plan(nbytes, "coop", now) == plan
        assert core.last_search()["entries"] == pieces
    core.check()


@pytest.mark.parametrize("Arena", [coop.Arena, ReferenceArena])
def test_a_window_of_movers_alone_deep_in_a_stretch_of_constants(Arena):
    """Where the free bytes cover the request (in pieces no larger than the constants), the
    best window may be one of constants alone, far from any free or candidate entry: each
    moves to a free piece of its own. Such windows are why the sweep skips nothing unless the
    request is above the free bytes."""
    arena = Arena(64 * 300)
    arena.move_cost = 0.001
    for sid in range(300):
        arena.add_storage(sid, 10, [], evictable=sid >= 290)
        arena.set_movable(sid, sid < 290)      # the candidates are evicted, never moved
        arena.touch(sid, 0)
        arena.allocate(64, EXPENSIVE, sid)
    for sid in (291, 293, 295, 297):          # four free pieces of 64 bytes, among candidates
        arena.free(arena.storage_info(sid)["offset"])
    plan = arena.choose_plan(128, "coop", 1000)
    # two neighboring constants move out; the first such window: the arena's start
    assert plan["victims"] == [] and [sid for sid, _ in plan["moves"]] == [0, 1]
    assert plan["start"] == 0 and plan["pieces"] == 2
    if Arena is coop.Arena:
        assert arena.last_search()["entries"] == 300
    arena.check()


@pytest.mark.parametrize("seed", range(3))
def test_eviction_loops_with_skipped_runs_agree_with_the_reference(seed):
    """allocate_or_evict on the stretches of constants above, requests above the free bytes
    (the sweep skips): same offsets, moves, pieces, counters and logs as the reference, and
    the core's searches wrote fewer entries than there were pieces."""
    (core, reference), now, free = constant_stretches(seed, 0.01)
    requests = [free + 64, 700, 1200]
    results = [eviction_loops(arena, requests, now) for arena in (core, reference)]
    assert results[0] == results[1]
    assert "oom" not in results[0][0][:2]
    stats = core.stats()
    assert stats["searches"] >= len(requests)
    assert 0 < stats["search_entries"] < stats["search_pieces"]
