"""Counters, out-of-memory errors, evict callbacks and refused calls leave the arena intact."""
import math
import pickle
import re

import pytest

import coop
from coop import CHEAP, EXPENSIVE, NO_STORAGE, OutOfMemoryError
from coop.errors import InternalError
from reference_arena import ReferenceArena
from _arena import _noop, build, evictor, snapshot, storages


def oom_layout(Arena):
    arena = Arena(640)
    build(arena, [(64, None), (192, "free"), (64, None), (128, "free"), (64, None)])
    # free: 192 at 64, 128 at 320, 128 at 512: 448 bytes, largest 192
    return arena


def assert_names(message, *numbers):
    for number in numbers:
        assert re.search(rf"\b{number}\b", message), (number, message)


def test_out_of_memory_for_a_request_larger_than_the_arena(Arena):
    arena = oom_layout(Arena)
    before = snapshot(arena)
    with pytest.raises(OutOfMemoryError) as info:
        arena.allocate(1000)
    assert isinstance(info.value, MemoryError)
    assert_names(str(info.value), 1000, 640, 448, 192)
    assert (info.value.request, info.value.budget, info.value.free, info.value.largest_free) == (
        1000, 640, 448, 192)
    with pytest.raises(OutOfMemoryError):
        arena.allocate_or_evict(641, EXPENSIVE, "coop", 0, evictor(arena))
    assert snapshot(arena) == before
    arena.check()


@pytest.mark.parametrize("policy", ["none", "coop", "dtr"])
def test_out_of_memory_when_nothing_can_make_room(Arena, policy):
    arena = oom_layout(Arena)
    assert arena.allocate(256) == -1
    with pytest.raises(OutOfMemoryError) as info:
        arena.allocate_or_evict(256, CHEAP, policy, 0, evictor(arena))
    assert_names(str(info.value), 256, 640, 448, 192)
    assert (info.value.request, info.value.budget, info.value.free, info.value.largest_free) == (
        256, 640, 448, 192)
    stats = arena.stats()
    assert (stats["searches"], stats["failed_allocations"], stats["evictions"]) == (1, 1, 0)
    assert stats["fragmentation_rate"] == 448 / 640
    assert stats["largest_free_ratio"] == 192 / 448
    arena.check()


def test_out_of_memory_after_evicting_everything(Arena):
    arena = Arena(256)
    storages(arena, [1, 1])
    build(arena, [(64, 0), (64, None), (64, 1), (64, None)])
    log = []
    with pytest.raises(OutOfMemoryError):
        arena.allocate_or_evict(128, EXPENSIVE, "dtr", 0, evictor(arena, log))
    assert log == [[0], [1]]
    stats = arena.stats()
    assert (stats["searches"], stats["evictions"], stats["bytes_evicted"]) == (3, 2, 128)
    assert stats["fragmentation_rate"] == pytest.approx((0 + 64 + 128) / 3 / 256)
    assert (stats["failed_allocations"], stats["largest_free_ratio"]) == (1, 0.5)
    arena.check()


def test_out_of_memory_names_the_candidates_no_window_could_use():
    """coop.Arena's message: with candidates left that no window of coop's covers the request
    with, it says so and counts them; once nothing is left to evict, it says that."""
    arena = coop.Arena(256)
    storages(arena, [1, 1])
    build(arena, [(64, 0), (64, None), (64, 1), (64, None)])
    # 0 and 1 are candidates, each between anonymous pieces: no window covers 128 bytes
    with pytest.raises(OutOfMemoryError) as info:
        arena.allocate_or_evict(128, EXPENSIVE, "coop", 0, evictor(arena))
    message = str(info.value)
    assert ("and no window of evictions and moves covers it, though 2 evictable pieces (128 "
            "bytes) are left between what cannot leave (pinned or anonymous: 2 pieces, 128 "
            "bytes;") in message
    assert "nothing left to evict" not in message
    err = info.value
    assert err.figures() == (128, 256, 0, 0, 128, 0, 64, 0, 128)   # request ... evictable_bytes
    assert err.bytes_fit              # 128 pinned or anonymous + the 128 asked for: the budget
    copy = pickle.loads(pickle.dumps(err))
    assert str(copy) == message and copy.figures() == err.figures()
    assert arena.stats()["evictions"] == 0
    assert [arena.storage_info(s)["resident"] for s in (0, 1)] == [True, True]
    # dtr evicts both, one at a time, and then has nothing left
    with pytest.raises(OutOfMemoryError, match="and nothing left to evict [(]pinned or "
                                               "anonymous: 2 pieces, 128 bytes;"):
        arena.allocate_or_evict(128, EXPENSIVE, "dtr", 0, evictor(arena))
    assert arena.stats()["evictions"] == 2
    arena.check()


def test_evict_callback_that_frees_nothing(Arena):
    arena = Arena(256)
    storages(arena, [1, 1, 1, 1])
    build(arena, [(64, sid) for sid in range(4)])
    before = arena.pieces()
    with pytest.raises(InternalError, match="resident and evictable"):
        arena.allocate_or_evict(64, EXPENSIVE, "dtr", 0, lambda victims: None)
    arena.check()
    assert arena.pieces() == before
    assert arena.storage_info(0)["resident"]
    assert arena.stats()["evictions"] == 0


def test_evict_callback_that_frees_part_of_the_window(Arena):
    arena = Arena(256)
    storages(arena, [1, 1, 1, 1])
    build(arena, [(64, sid) for sid in range(4)])

    def evict_first(victims):
        arena.free(arena.storage_info(victims[0])["offset"])

    with pytest.raises(InternalError, match="resident and evictable"):
        arena.allocate_or_evict(128, EXPENSIVE, "coop", 0, evict_first)
    arena.check()
    assert arena.pieces() == [(0, 64, True, -1), (64, 64, False, 1), (128, 64, False, 2),
                              (192, 64, False, 3)]
    assert not arena.storage_info(0)["resident"]
    assert arena.storage_info(1)["resident"]
    assert (arena.stats()["evictions"], arena.stats()["bytes_evicted"]) == (1, 64)
    assert arena.allocate_or_evict(128, EXPENSIVE, "coop", 0, evictor(arena)) == 0
    arena.check()


def refusing_evictor(arena, log, refuse):
    """Frees every victim but storage 0, which it refuses by pinning it or marking it unevictable."""
    def evict(victims):
        log.append(list(victims))
        for sid in victims:
            if sid == 0:
                arena.pin(0) if refuse == "pin" else arena.set_evictable(0, False)
            else:
                arena.free(arena.storage_info(sid)["offset"])
    return evict


@pytest.mark.parametrize("refuse", ["pin", "unevictable"])
def test_evict_callback_may_refuse_a_victim(Arena, refuse):
    arena = Arena(256)
    storages(arena, [1, 2, 3, 4])
    build(arena, [(64, sid) for sid in range(4)])
    log = []
    evict = refusing_evictor(arena, log, refuse)
    assert arena.allocate_or_evict(64, EXPENSIVE, "dtr", 0, evict) == 64
    assert log == [[0], [1]]
    stats = arena.stats()
    assert (stats["evictions"], stats["bytes_evicted"], stats["searches"]) == (1, 64, 2)
    assert arena.storage_info(0)["resident"]
    arena.check()


def test_evict_callback_may_refuse_part_of_a_window(Arena):
    arena = Arena(256)
    storages(arena, [1, 2, 3, 4])
    build(arena, [(64, sid) for sid in range(4)])
    log = []
    evict = refusing_evictor(arena, log, "pin")
    assert arena.allocate_or_evict(128, EXPENSIVE, "coop", 0, evict) == 64
    # [0, 1] costs 3; with 0 pinned, [free, 2] costs 3 and [2, 3] costs 7
    assert log == [[0, 1], [2]]
    assert arena.stats()["evictions"] == 2
    assert arena.pieces() == [(0, 64, False, 0), (64, 128, False, -1), (192, 64, False, 3)]
    arena.check()


def test_an_exception_from_the_evict_callback_propagates(Arena):
    arena = Arena(128)
    storages(arena, [1, 1])
    build(arena, [(64, 0), (64, 1)])
    before = arena.pieces()

    def evict(victims):
        raise KeyError(victims[0])

    with pytest.raises(KeyError):
        arena.allocate_or_evict(64, EXPENSIVE, "lru", 0, evict)
    arena.check()
    assert arena.pieces() == before
    stats = arena.stats()
    assert (stats["evictions"], stats["bytes_evicted"], stats["searches"]) == (0, 0, 1)
    assert stats["failed_allocations"] == 0


def test_peak_used_bytes(Arena):
    arena = Arena(512)
    assert arena.stats()["peak_used_bytes"] == 0
    first = arena.allocate(128)
    arena.allocate(256)
    arena.free(first)
    arena.allocate(64)
    stats = arena.stats()
    assert (stats["used_bytes"], stats["peak_used_bytes"]) == (320, 384)


def test_evict_callback_may_reenter_the_arena(Arena):
    arena = Arena(256)
    storages(arena, [1, 5, 5, 5])
    build(arena, [(64, sid) for sid in range(4)])

    def evict(victims):
        for sid in victims:
            arena.free(arena.storage_info(sid)["offset"])
            arena.remove_storage(sid)

    assert arena.allocate_or_evict(64, CHEAP, "dtr", 0, evict) == 0
    assert not arena.has_storage(0)
    arena.check()


@pytest.mark.parametrize("args, error", [
    ((1.5,), TypeError), (("1024",), TypeError), ((None,), TypeError), ((-64,), ValueError),
    ((0,), ValueError), ((63,), ValueError), ((1024, 48), ValueError), ((1024, 0), ValueError),
    ((1024, -64), ValueError), ((1024, 64.0), TypeError),
])
def test_bad_arena_arguments(Arena, args, error):
    with pytest.raises(error):
        Arena(*args)



BAD_CALLS = [
    ("allocate", (1.5,), TypeError),
    ("allocate", ("64",), TypeError),
    ("allocate", (-1,), ValueError),
    ("allocate", (513,), OutOfMemoryError),
    ("allocate", (64, EXPENSIVE, 99), ValueError),
    ("allocate", (64, EXPENSIVE, 1), ValueError),
    ("allocate", (64, EXPENSIVE, 2.0), TypeError),
    ("free", (128,), ValueError),
    ("free", (32,), ValueError),
    ("free", (512,), ValueError),
    ("free", (-64,), ValueError),
    ("free", (64.0,), TypeError),
    ("bind", (128, 2), ValueError),
    ("bind", (32, 2), ValueError),
    ("bind", (0, 2), ValueError),
    ("bind", (64, 1), ValueError),
    ("bind", (64, 99), ValueError),
    ("bind", (64, NO_STORAGE), ValueError),
    ("bind", (64, 2.5), TypeError),
    ("bind", (64.0, 2), TypeError),
    ("add_storage", (1,), ValueError),
    ("add_storage", (3, -1.0), ValueError),
    ("add_storage", (3, math.inf), ValueError),
    ("add_storage", (3, math.nan), ValueError),
    ("add_storage", (3, 1.0, (99,)), ValueError),
    ("add_storage", (3, 1.0, (2, 99)), ValueError),
    ("add_storage", (3.0,), TypeError),
    ("remove_storage", (99,), ValueError),
    ("remove_storage", (1.5,), TypeError),
    ("set_cost", (99, 1.0), ValueError),
    ("set_cost", (1, -2.0), ValueError),
    ("set_cost", (1, math.inf), ValueError),
    ("set_evictable", (99, True), ValueError),
    ("pin", (99,), ValueError),
    ("unpin", (2,), ValueError),
    ("unpin", (99,), ValueError),
    ("touch", (99, 1.0), ValueError),
    ("storage_info", (99,), ValueError),
    ("choose_victims", (64, "bogus", 0), ValueError),
    ("choose_victims", (-1, "coop", 0), ValueError),
    ("choose_victims", (1.5, "coop", 0), TypeError),
    ("choose_victims", (513, "coop", 0), OutOfMemoryError),
    ("allocate_or_evict", (64, EXPENSIVE, "bogus", 0, _noop), ValueError),
    ("allocate_or_evict", (-1, EXPENSIVE, "coop", 0, _noop), ValueError),
    ("allocate_or_evict", (1.5, EXPENSIVE, "coop", 0, _noop), TypeError),
    ("allocate_or_evict", (513, EXPENSIVE, "coop", 0, _noop), OutOfMemoryError),
    ("allocate_or_evict", (64, EXPENSIVE, "coop", 0, _noop, 1), ValueError),
    ("allocate_or_evict", (64, EXPENSIVE, "coop", 0, _noop, 99), ValueError),
]


@pytest.mark.parametrize("method, args, error", BAD_CALLS,
                         ids=[f"{i}-{m}" for i, (m, _, _) in enumerate(BAD_CALLS)])
def test_refused_calls_change_nothing(Arena, method, args, error):
    arena = Arena(512)
    arena.add_storage(1, 3.0)
    arena.add_storage(2, 4.0, (1,))
    arena.add_storage(5, 1.0, (2,))
    build(arena, [(64, 1), (64, None), (64, 5)])
    arena.free(128)  # storage 5 evicted: a class of its own
    arena.pin(1)
    arena.allocate_or_evict(64, CHEAP, "coop", 0, _noop)  # one search-free allocation at 448
    before = snapshot(arena, (1, 2, 5))
    with pytest.raises(error):
        getattr(arena, method)(*args)
    arena.check()
    assert snapshot(arena, (1, 2, 5)) == before


@pytest.mark.parametrize("corrupt", [
    lambda ref: ref._pieces[0].__setitem__(1, 128),  # gap/overlap
    lambda ref: ref._pieces[2].__setitem__(3, True),  # two adjacent free pieces
    lambda ref: ref._pieces[0].__setitem__(2, 99),  # unknown storage
    lambda ref: ref._classes[ref._storages[1].eq_class].__setitem__(1, 5.0),  # class cost
    lambda ref: ref._storages[0].neighbors.discard(1),  # asymmetric neighbors
])
def test_reference_check_detects_corruption(corrupt):
    ref = ReferenceArena(512)
    ref.add_storage(0, 1.0)
    ref.add_storage(1, 2.0, (0,))
    build(ref, [(64, 0), (64, 1), (64, None)])
    ref.free(64)
    ref.check()
    corrupt(ref)
    with pytest.raises(InternalError, match="invariant broken"):
        ref.check()
