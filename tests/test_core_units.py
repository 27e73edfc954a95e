"""Hand-built layouts with exact expected answers, run on coop.Arena and on the reference model:
placement, policies, classes and c', ideal arenas."""

import numpy as np
import pytest

import coop
import reference_arena
from coop import CHEAP, EXPENSIVE, NO_STORAGE, OutOfMemoryError
from _arena import _noop, build, evictor, snapshot, storages


def test_constants_agree():
    assert (EXPENSIVE, CHEAP, NO_STORAGE) == (0, 1, -1)
    ref = reference_arena
    assert (ref.EXPENSIVE, ref.CHEAP, ref.NO_STORAGE) == (0, 1, -1)
    assert tuple(coop._core.POLICIES) == reference_arena.POLICIES


# ---- placement ----------------------------------------------------------------------------------

def test_capacity_is_rounded_down_to_the_alignment(Arena):
    assert (Arena(1000).capacity, Arena(1000).alignment) == (960, 64)
    assert Arena(1000, 8).capacity == 1000
    assert Arena(1000, 512).capacity == 512
    assert Arena(1000).pieces() == [(0, 960, True, NO_STORAGE)]


def test_request_sizes_round_up_and_are_never_empty(Arena):
    arena = Arena(1024)
    assert [arena.allocate(n) for n in (0, 1, 64, 65)] == [0, 64, 128, 192]
    assert arena.pieces() == [(0, 64, False, -1), (64, 64, False, -1), (128, 64, False, -1),
                              (192, 128, False, -1), (320, 704, True, -1)]
    small = Arena(100, 8)
    assert [small.allocate(0), small.allocate(9), small.allocate(8)] == [0, 8, 24]
    assert small.pieces() == [(0, 8, False, -1), (8, 16, False, -1), (24, 8, False, -1),
                              (32, 64, True, -1)]


def test_numpy_integers_are_integers(Arena):
    arena = Arena(np.int64(512), np.int32(64))
    arena.add_storage(np.int64(3), np.float32(2.0))
    assert arena.allocate(np.uint16(100), CHEAP, np.int64(3)) == 384
    arena.free(np.int64(384))
    assert arena.pieces() == [(0, 512, True, -1)]


def test_best_fit_takes_the_smallest_piece_that_fits(Arena):
    arena = Arena(1280)
    build(arena, [(192, "free"), (64, None), (128, "free"), (64, None), (256, "free"), (64, None)])
    assert [p for p in arena.pieces() if p[2]] == [
        (0, 192, True, -1), (256, 128, True, -1), (448, 256, True, -1), (768, 512, True, -1)]
    assert arena.allocate(100) == 256
    assert arena.allocate(129) == 0
    assert arena.allocate(200) == 448
    assert arena.allocate(300) == 768
    assert arena.allocate(64, CHEAP) == 1216
    assert arena.pieces()[-2:] == [(1088, 128, True, -1), (1216, 64, False, -1)]
    arena.check()


def test_best_fit_breaks_ties_toward_the_placement_end(Arena):
    # among equally small free pieces, EXPENSIVE takes the lowest, CHEAP the highest: each
    # class gathers at its end of the arena, as at its end of a piece
    arena = Arena(512)
    build(arena, [(128, "free"), (64, None), (128, "free"), (64, None)])
    assert arena.allocate(64, CHEAP) == 448      # the pieces at 0, 192, 384 tie: 384's high end
    assert arena.allocate(128) == 0              # 0 and 192 tie: the lowest
    assert arena.allocate(64) == 384             # the smallest that holds it, not the lowest
    assert arena.allocate(64, CHEAP) == 256      # only 192 is left: its high end
    assert arena.pieces() == [(0, 128, False, -1), (128, 64, False, -1), (192, 64, True, -1),
                              (256, 64, False, -1), (320, 64, False, -1), (384, 64, False, -1),
                              (448, 64, False, -1)]
    arena.check()


def test_cheap_ties_take_the_highest_piece_of_the_smallest_size(Arena):
    arena = Arena(1024)
    build(arena, [(64, None), (128, "free"), (64, None), (256, "free"), (64, None),
                  (128, "free"), (64, None)])
    # free: 128 at 64, 256 at 256, 128 at 576, 256 at 768 (the rest); 100 bytes take 128
    assert arena.allocate(100, CHEAP) == 576     # the 128s tie: the higher one
    assert arena.allocate(100, CHEAP) == 64      # the other 128, though 256s lie higher
    assert arena.allocate(100, CHEAP) == 896     # the 256s tie: the higher one, its high end
    assert arena.allocate(100) == 768            # the 128 left below 896: smaller than 256's
    arena.check()


def test_expensive_at_the_low_end_cheap_at_the_high_end(Arena):
    arena = Arena(1024)
    assert arena.allocate(64, CHEAP) == 960
    assert arena.allocate(128, EXPENSIVE) == 0
    assert arena.allocate(64, CHEAP) == 896
    assert arena.pieces() == [(0, 128, False, -1), (128, 768, True, -1),
                              (896, 64, False, -1), (960, 64, False, -1)]
    arena.check()


def test_exact_fit_and_no_fit(Arena):
    arena = Arena(256)
    build(arena, [(64, None), (128, "free"), (64, None)])
    assert arena.allocate(129) == -1
    assert arena.pieces() == [(0, 64, False, -1), (64, 128, True, -1), (192, 64, False, -1)]
    assert arena.allocate(128, CHEAP) == 64
    assert arena.allocate(0) == -1
    assert arena.stats()["free_bytes"] == 0
    arena.check()


def test_free_merges_with_free_neighbors(Arena):
    arena = Arena(512)
    a, b, c = (arena.allocate(64) for _ in range(3))
    arena.free(a)
    assert arena.pieces() == [(0, 64, True, -1), (64, 64, False, -1), (128, 64, False, -1),
                              (192, 320, True, -1)]
    arena.free(c)
    assert arena.pieces() == [(0, 64, True, -1), (64, 64, False, -1), (128, 384, True, -1)]
    arena.free(b)
    assert arena.pieces() == [(0, 512, True, -1)]
    stats = arena.stats()
    assert (stats["pieces"], stats["free_pieces"], stats["largest_free"]) == (1, 1, 512)
    arena.check()


def test_pieces_and_storage_info_of_a_bound_storage(Arena):
    arena = Arena(512)
    arena.add_storage(7, 2.0, evictable=False)
    arena.touch(7, 5.0)
    arena.pin(7)
    assert arena.allocate(100, CHEAP, 7) == 384
    anonymous = arena.allocate(64)
    assert arena.pieces() == [(0, 64, False, -1), (64, 320, True, -1), (384, 128, False, 7)]
    info = arena.storage_info(7)
    assert info["resident"] is True
    assert (info["offset"], info["nbytes"], info["cost"], info["cprime"]) == (384, 128, 2.0, 2.0)
    assert (info["last_access"], info["pins"], info["evictable"]) == (5.0, 1, False)
    arena.add_storage(8)
    arena.bind(anonymous, 8)
    assert arena.pieces()[0] == (0, 64, False, 8)
    assert arena.has_storage(8) and not arena.has_storage(9)
    arena.remove_storage(8)
    assert arena.pieces()[0] == (0, 64, False, -1)
    assert not arena.has_storage(8)
    arena.free(384)
    assert arena.storage_info(7)["resident"] is False
    assert arena.stats()["used_bytes"] == 64
    arena.check()


# ---- policies -----------------------------------------------------------------------------------

def test_coop_takes_the_cheap_window_beside_an_expensive_tensor(Arena):
    arena = Arena(512)
    storages(arena, [20, 1])
    build(arena, [(128, 0), (64, "free"), (64, 1), (256, None)])
    assert arena.choose_victims(128, "coop", 0) == [1]
    log = []
    assert arena.allocate_or_evict(128, EXPENSIVE, "coop", 0, evictor(arena, log)) == 128
    assert log == [[1]]
    assert arena.pieces() == [(0, 128, False, 0), (128, 128, False, -1), (256, 256, False, -1)]
    arena.check()


EIGHT_COSTS = [1, 20, 1, 20, 3, 3, 20, 20]


@pytest.mark.parametrize("policy, victims, offset", [
    ("coop", [[4, 5]], 256),
    ("dtr", [[0], [2], [4], [5]], 256),
    ("dte", [[0], [2], [4], [5]], 256),
    ("lru", [[0], [1]], 0),
    ("size", [[0], [1]], 0),
])
def test_eviction_loop_per_policy(Arena, policy, victims, offset):
    arena = Arena(512)
    storages(arena, EIGHT_COSTS)
    build(arena, [(64, sid) for sid in range(8)])
    log = []
    assert arena.allocate_or_evict(128, EXPENSIVE, policy, 0, evictor(arena, log)) == offset
    assert log == victims
    stats = arena.stats()
    assert stats["evictions"] == sum(map(len, victims))
    assert stats["bytes_evicted"] == 64 * sum(map(len, victims))
    assert stats["searches"] == len(victims)
    assert stats["search_time"] >= 0.0
    assert stats["failed_allocations"] == 0
    arena.check()


def test_fragmentation_rate_of_the_dtr_loop(Arena):
    arena = Arena(512)
    storages(arena, EIGHT_COSTS)
    build(arena, [(64, sid) for sid in range(8)])
    arena.allocate_or_evict(128, EXPENSIVE, "dtr", 0, evictor(arena))
    # searches saw 0, 64, 128 and 192 free bytes of 512
    assert arena.stats()["fragmentation_rate"] == pytest.approx((0 + 64 + 128 + 192) / 4 / 512)
    assert arena.stats()["fragmentation_rate"] == 0.1875


def test_a_pinned_piece_splits_the_arena(Arena):
    arena = Arena(256)
    storages(arena, [1, 1, 5, 5])
    build(arena, [(64, sid) for sid in range(4)])
    assert arena.choose_victims(128, "coop", 0) == [0, 1]
    arena.pin(1)
    assert arena.choose_victims(128, "coop", 0) == [2, 3]
    assert arena.choose_victims(64, "dtr", 0) == [0]
    arena.pin(0)
    assert arena.choose_victims(64, "dtr", 0) == [2]
    arena.unpin(0)
    arena.unpin(1)
    arena.set_evictable(1, False)
    assert arena.choose_victims(128, "coop", 0) == [2, 3]
    arena.set_evictable(1, True)
    arena.remove_storage(1)  # its piece stays used and anonymous: a wall as well
    assert arena.choose_victims(128, "coop", 0) == [2, 3]
    arena.pin(2)
    assert arena.choose_victims(128, "coop", 0) == []
    with pytest.raises(OutOfMemoryError):
        arena.allocate_or_evict(128, EXPENSIVE, "coop", 0, evictor(arena))
    assert arena.pieces()[:2] == [(0, 64, False, 0), (64, 64, False, -1)]


def test_dte_prefers_a_tensor_next_to_free_space(Arena):
    arena = Arena(256)
    storages(arena, [2, 2])
    build(arena, [(64, 0), (64, 1), (64, "free"), (64, None)])
    assert arena.choose_victims(64, "dtr", 0) == [0]
    assert arena.choose_victims(64, "dte", 0) == [1]


def test_dte_counts_free_bytes_on_both_sides(Arena):
    arena = Arena(512)
    storages(arena, [1, 3])
    build(arena, [(64, 0), (64, None), (64, "free"), (64, 1), (128, "free"), (128, None)])
    # storage 0: 1 / 64;  storage 1: 3 / (64 + 64 + 128), below 1/64 only with both sides counted
    assert arena.choose_victims(64, "dte", 0) == [1]
    assert arena.choose_victims(64, "dtr", 0) == [0]


def test_dtr_divides_by_bytes_and_staleness(Arena):
    arena = Arena(512)
    storages(arena, [4, 1])
    build(arena, [(128, 0), (64, 1), (320, None)])
    arena.touch(0, 0)
    arena.touch(1, 6)
    # score 0 = 4 / (128 s0), score 1 = 1 / (64 s1): storage 0 goes first iff s0 > 2 s1
    assert arena.choose_victims(64, "dtr", 0) == [1]  # both staleness 1
    assert arena.choose_victims(64, "dtr", 8) == [0]  # s0 = 8, s1 = 2
    arena.touch(0, 5)
    # s0 = 1.5; storage 1's staleness 0.5 is raised to 1 (unraised, storage 0 would go)
    assert arena.choose_victims(64, "dtr", 6.5) == [1]


def test_dtr_uses_cprime(Arena):
    arena = Arena(512)
    storages(arena, [10, 1, 2], neighbors={1: [0]})
    build(arena, [(64, 0), (64, 1), (64, 2), (320, None)])
    assert arena.choose_victims(64, "dtr", 0) == [1]
    arena.free(0)  # storage 1 now drags back storage 0: c' = 11
    assert arena.storage_info(1)["cprime"] == 11.0
    assert arena.choose_victims(64, "dtr", 0) == [2]


def test_lru_and_size(Arena):
    arena = Arena(512)
    storages(arena, [1, 1, 1, 1])
    build(arena, [(128, 0), (64, 1), (128, 2), (64, 3)])
    for sid, now in enumerate([5, 3, 3, 4]):
        arena.touch(sid, now)
    assert arena.choose_victims(64, "lru", 10) == [1]
    assert arena.choose_victims(64, "size", 10) == [0]
    arena.pin(0)
    assert arena.choose_victims(64, "size", 10) == [2]
    arena.pin(1)
    assert arena.choose_victims(64, "lru", 10) == [2]
    assert arena.choose_victims(64, "none", 10) == []


# ---- classes and c' -----------------------------------------------------------------------------

def test_cprime_counts_each_evicted_neighbor_class_once(Arena):
    arena = Arena(1024)
    n1, n2, n3, x = 0, 1, 2, 3
    storages(arena, [2, 3, 7, 1], neighbors={n2: [n1], x: [n1, n2, n3]})
    offsets = build(arena, [(64, sid) for sid in range(4)])
    assert arena.storage_info(x)["cprime"] == 1.0
    arena.free(offsets[n1])
    assert arena.storage_info(x)["cprime"] == 3.0
    assert arena.storage_info(n2)["cprime"] == 5.0
    arena.free(offsets[n2])
    assert arena.storage_info(n1)["class_cost"] == arena.storage_info(n2)["class_cost"] == 5.0
    assert arena.storage_info(x)["cprime"] == 6.0
    arena.free(offsets[n3])
    assert arena.storage_info(n3)["class_cost"] == 7.0
    assert arena.storage_info(x)["cprime"] == 13.0
    # rematerializing n1 takes it out of its class
    assert arena.allocate(64, EXPENSIVE, n1) == 0
    assert arena.storage_info(n2)["class_cost"] == 3.0
    assert arena.storage_info(x)["cprime"] == 11.0
    assert arena.storage_info(n1)["cprime"] == 5.0
    arena.set_cost(n2, 10)
    assert arena.storage_info(n2)["class_cost"] == 10.0
    assert arena.storage_info(x)["cprime"] == 18.0
    assert arena.storage_info(n1)["cprime"] == 12.0
    arena.remove_storage(n3)
    assert arena.storage_info(x)["cprime"] == 11.0
    arena.set_cost(x, 4)
    assert arena.storage_info(x)["cprime"] == 14.0
    arena.check()


def test_classes_never_split(Arena):
    arena = Arena(1024)
    a, m, b, x, y = range(5)
    storages(arena, [1, 2, 4, 10, 8], neighbors={m: [a], b: [m], x: [a, b], y: [a]})
    offsets = build(arena, [(64, sid) for sid in range(5)])
    for sid in (a, m, b):
        arena.free(offsets[sid])
    assert arena.storage_info(b)["class_cost"] == 7.0
    assert arena.storage_info(x)["cprime"] == 17.0
    arena.allocate(64, EXPENSIVE, m)  # m leaves; a and b stay one class
    assert arena.storage_info(a)["class_cost"] == arena.storage_info(b)["class_cost"] == 5.0
    assert arena.storage_info(x)["cprime"] == 15.0
    assert arena.storage_info(m)["cprime"] == 7.0
    assert arena.storage_info(m)["class_cost"] is None
    arena.free(offsets[y])  # y joins a's class, which is b's class too
    assert arena.storage_info(b)["class_cost"] == 13.0
    assert arena.storage_info(x)["cprime"] == 23.0
    arena.remove_storage(a)
    assert arena.storage_info(b)["class_cost"] == 12.0
    assert arena.storage_info(x)["cprime"] == 22.0
    arena.check()


# ---- ideal arenas (memory as a plain sum of sizes) ----------------------------------------------

def test_ideal_arena_counts_bytes_only(Arena):
    arena = Arena(512, ideal=True)
    assert (arena.ideal, arena.capacity, arena.used_bytes) == (True, 512, 0)
    assert arena.pieces() == [(0, 2**62, True, -1)]
    top = arena.allocate(64, CHEAP)
    assert top == 2**62 - 64
    arena.free(top)
    a, b, c, d = (arena.allocate(128) for _ in range(4))
    assert (a, b, c, d) == (0, 128, 256, 384)
    assert arena.allocate(0) == -1
    arena.free(a)
    arena.free(c)
    stats = arena.stats()
    assert (stats["free_bytes"], stats["largest_free"], stats["ideal"]) == (256, 256, True)
    # 256 bytes free in two ranges: enough in an ideal arena, placed at the best fit
    assert arena.allocate(256) == 512
    assert arena.allocate(64, CHEAP) == -1
    arena.free(b)  # 0..384 is one free piece now
    assert arena.allocate(64, CHEAP) == 320
    assert arena.used_bytes == 448
    arena.check()


def test_real_arena_is_not_ideal(Arena):
    arena = Arena(512)
    assert (arena.ideal, arena.stats()["ideal"]) == (False, False)
    build(arena, [(128, "free"), (128, None), (128, "free"), (128, None)])
    assert arena.allocate(256) == -1


def test_dtr_in_an_ideal_arena_stops_when_the_sum_fits(Arena):
    arena = Arena(512, ideal=True)
    storages(arena, [1, 5, 2, 5])
    build(arena, [(128, sid) for sid in range(4)])
    log = []
    assert arena.allocate_or_evict(256, EXPENSIVE, "dtr", 0, evictor(arena, log)) == 512
    assert log == [[0], [2]]
    stats = arena.stats()
    assert (stats["searches"], stats["evictions"], stats["bytes_evicted"]) == (2, 2, 256)
    assert stats["fragmentation_rate"] == (0 + 128 / 512) / 2
    real = Arena(512)
    storages(real, [1, 5, 2, 5])
    build(real, [(128, sid) for sid in range(4)])
    log = []
    assert real.allocate_or_evict(256, EXPENSIVE, "dtr", 0, evictor(real, log)) == 0
    assert log == [[0], [2], [1]]


def test_ideal_arena_refuses_the_coop_policy(Arena):
    arena = Arena(512, ideal=True)
    storages(arena, [1, 1])
    build(arena, [(256, 0), (256, 1)])
    before = snapshot(arena, (0, 1))
    with pytest.raises(ValueError):
        arena.choose_victims(64, "coop", 0)
    with pytest.raises(ValueError):
        arena.allocate_or_evict(64, EXPENSIVE, "coop", 0, _noop)
    with pytest.raises(OutOfMemoryError):
        arena.allocate(513)
    assert snapshot(arena, (0, 1)) == before
    assert arena.choose_victims(64, "lru", 0) == [0]
    arena.check()


def test_dte_in_an_ideal_arena_counts_no_neighbors(Arena):
    # storage 1 sits next to the (2^62-byte) free tail of the address space: counted, it would
    # make 1 the cheapest under dte although 0 costs half as much; an ideal arena scores as dtr
    arena = Arena(512, ideal=True)
    storages(arena, [1, 2])
    build(arena, [(128, 0), (128, 1)])
    assert arena.choose_victims(64, "dte", 0) == arena.choose_victims(64, "dtr", 0) == [0]
    real = Arena(512)
    storages(real, [1, 2])
    build(real, [(128, 0), (128, 1)])
    assert real.choose_victims(64, "dte", 0) == [1]


def test_lowest_takes_the_first_fit_from_the_low_end(Arena):
    """LOWEST (where constants go) takes the lowest free range that holds the request, at its
    low end, where best fit takes the smallest; lowest_fit says where, changing nothing."""
    arena = Arena(1024)
    _, b, _, d = (arena.allocate(n) for n in (64, 256, 64, 128))   # 0, 64, 320, 384
    arena.free(b)
    arena.free(d)                        # free: [64, 320) of 256 and [384, 1024) of 640
    assert arena.lowest_fit(128) == 64 and arena.lowest_fit(512) == 384
    assert arena.lowest_fit(1024) == -1
    assert arena.pieces() == [(0, 64, False, -1), (64, 256, True, -1), (320, 64, False, -1),
                              (384, 640, True, -1)]
    arena.check()


def test_lowest_fit_past_many_used_pieces(Arena):
    """Hundreds of pieces (the core keeps their scan entries in runs of 64): the lowest fit is
    the first free range from the bottom that holds the request, however many used pieces lie
    below it, and LOWEST allocates there."""
    arena = Arena(64 * 400)
    offsets = [arena.allocate(64, coop.LOWEST) for _ in range(400)]
    assert offsets == [64 * k for k in range(400)] and arena.lowest_fit(64) == -1
    for k in (399, 398, 250, 251, 252, 130, 7):       # holes of 64, 192 and 128 bytes
        arena.free(offsets[k])
    free = [(off, n) for off, n, is_free, _ in arena.pieces() if is_free]
    for nbytes in (64, 128, 192, 256):
        expect = next((off for off, n in free if n >= nbytes), -1)
        assert arena.lowest_fit(nbytes) == expect, nbytes
    assert [arena.lowest_fit(n) for n in (64, 128, 192, 256)] == [448, 64 * 250, 64 * 250, -1]
    assert arena.allocate(128, coop.LOWEST) == 64 * 250
    assert arena.lowest_fit(128) == 64 * 398 and arena.lowest_fit(64) == 448
    arena.check()


def test_lowest_placement_differs_from_best_fit(Arena):
    arena = Arena(1024)
    _, b, _ = (arena.allocate(n) for n in (64, 256, 64))               # 0, 64, 320
    arena.free(b)                        # free: [64, 320) of 256 and [384, 1024) of 640
    assert arena.allocate(192, coop.EXPENSIVE) == 64                   # best fit: the 256 hole
    arena.free(64)
    assert arena.allocate(128, coop.CHEAP) == 192                      # its high end
    arena.free(192)
    assert arena.allocate(320, coop.LOWEST) == 384                     # 256 too small: next
    assert arena.allocate(64, coop.LOWEST) == 64                       # lowest hole, low end
    assert arena.lowest_fit(64) == 128
    arena.check()


@pytest.mark.parametrize("placement, error", [(3, ValueError), (-1, ValueError), (1.0, TypeError),
                                              (True, TypeError), ("cheap", TypeError)])
def test_a_bad_placement_is_refused_and_changes_nothing(Arena, placement, error):
    arena = Arena(512)
    storages(arena, [1])
    build(arena, [(128, 0)])
    before = snapshot(arena, (0,))
    with pytest.raises(error):
        arena.allocate(64, placement)
    with pytest.raises(error):
        arena.allocate_or_evict(64, placement, "coop", 0, evictor(arena))
    assert snapshot(arena, (0,)) == before
    arena.check()
