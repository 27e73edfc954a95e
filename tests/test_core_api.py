"""The arena's owner (attach / detach / request), its allocation log, and the C enums' independence
from the Python constants; run on coop.Arena and, where the model has it, on the reference."""
import threading

import pytest

import coop
import coop._core
import reference_arena
from coop import CHEAP, EXPENSIVE, LOWEST, OutOfMemoryError
from coop._core import CallbackOwner
from coop.errors import InternalError
from _arena import build, evictor, snapshot, storages


def owner_for(Arena, arena, policy, log=None):
    """An owner evicting through evictor(arena): coop's CallbackOwner, or the model's."""
    make = CallbackOwner if Arena is coop.Arena else reference_arena.CallbackOwner
    return make(evictor(arena, log), policy)


# ---- placements: C enums, not Python globals ----------------------------------------------------

def test_rebinding_the_python_constants_changes_no_placement(monkeypatch):
    """The core compares placements with C enums: the module's names are only the public API."""
    monkeypatch.setattr(coop._core, "CHEAP", 7)
    monkeypatch.setattr(coop._core, "LOWEST", 8)
    monkeypatch.setattr(coop._core, "EXPENSIVE", 9)
    arena = coop.Arena(1024)
    assert arena.allocate(64, 1) == 960          # CHEAP: the high end
    assert arena.allocate(64, 0) == 0            # EXPENSIVE: the low end
    arena.free(0)
    assert arena.allocate(64, 2) == 0            # LOWEST: the lowest hole
    with pytest.raises(ValueError, match="placement must be"):
        arena.allocate(64, 7)
    assert (EXPENSIVE, CHEAP, LOWEST) == (0, 1, 2)


def test_placement_is_the_keyword(Arena):
    arena = Arena(1024)
    assert arena.allocate(64, placement=CHEAP) == 960
    arena.add_storage(1)
    assert arena.allocate_or_evict(64, placement=CHEAP, policy="dtr", now=0, evict=None,
                                   storage=1) == 896
    with pytest.raises(TypeError):
        arena.allocate(64, cls=CHEAP)


# ---- the allocation log -------------------------------------------------------------------------

def test_the_log_records_allocations_and_frees_with_the_requested_bytes(Arena):
    arena = Arena(1024)
    arena.allocate(10)                            # before start_log: not recorded
    arena.start_log()
    a = arena.allocate(100, CHEAP)                # 128 bytes at the high end
    b = arena.allocate(0)
    arena.free(a)
    arena.add_storage(3, 1.0)
    c = arena.allocate_or_evict(65, EXPENSIVE, "dtr", 0, evictor(arena), storage=3)
    assert arena.take_log() == [896, 100, b, 0, 896, -1, c, 65]
    arena.allocate(64)                            # after take_log: not recorded
    assert arena.take_log() == []


def test_start_log_restarts_and_take_log_without_start_is_empty(Arena):
    arena = Arena(1024)
    assert arena.take_log() == []
    arena.start_log()
    arena.allocate(64)
    arena.start_log()                             # restart: the earlier entries are dropped
    arena.free(0)
    assert arena.take_log() == [0, -1]


def test_the_log_shows_evictions_between_the_attempts(Arena):
    """An eviction loop logs the victims' frees (the owner frees them) before the allocation; a
    failed allocate logs nothing."""
    arena = Arena(256)
    storages(arena, [1.0, 2.0])
    build(arena, [(128, 0), (128, 1)])
    arena.start_log()
    assert arena.allocate(64) == -1
    assert arena.allocate_or_evict(200, EXPENSIVE, "dtr", 10, evictor(arena)) == 0
    assert arena.take_log() == [0, -1, 128, -1, 0, 200]


def test_request_is_logged_with_its_own_byte_count(Arena):
    arena = Arena(512)
    arena.start_log()
    assert arena.request(1) == 0
    assert arena.request(65, CHEAP) == 384
    assert arena.take_log() == [0, 1, 384, 65]


# ---- request without an owner -------------------------------------------------------------------

def test_request_without_an_owner_places_or_fails_like_policy_none(Arena):
    arena, twin = Arena(256), Arena(256)
    for a in (arena, twin):
        storages(a, [1.0])
        build(a, [(128, 0), (64, None)])
    assert arena.owner is None
    assert arena.request(64, CHEAP) == 192
    twin.allocate(64, CHEAP)
    with pytest.raises(OutOfMemoryError, match="cannot allocate 64 bytes") as info:
        arena.request(64)
    with pytest.raises(OutOfMemoryError) as twin_info:
        twin.allocate_or_evict(64, EXPENSIVE, "none", 0, evictor(twin))
    assert info.value.args[1:] == twin_info.value.args[1:]
    assert snapshot(arena, (0,)) == snapshot(twin, (0,))
    assert arena.stats()["failed_allocations"] == arena.stats()["searches"] == 1


def test_request_refuses_bad_arguments_and_changes_nothing(Arena):
    arena = Arena(512)
    arena.allocate(64)
    before = snapshot(arena)
    for args, error in [((513,), OutOfMemoryError), ((-1,), ValueError), ((1.5,), TypeError),
                        ((64, 3), ValueError), ((64, 1.0), TypeError), (("64",), TypeError)]:
        with pytest.raises(error):
            arena.request(*args)
    assert snapshot(arena) == before
    assert arena.stats()["failed_allocations"] == 0


# ---- request with an owner ----------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["coop", "dtr", "dte", "lru", "size"])
def test_request_evicts_like_allocate_or_evict_under_the_owners_policy(Arena, policy):
    layouts = []
    logs = ([], [])
    for log in logs:
        arena = Arena(512)
        storages(arena, [3.0, 1.0, 2.0, 5.0], {1: [0], 3: [2]})
        build(arena, [(128, 0), (64, None), (128, 1), (64, 2), (128, 3)])
        for sid, t in enumerate((4, 1, 2, 3)):
            arena.touch(sid, t)
        layouts.append(arena)
    arena, twin = layouts
    owner = owner_for(Arena, arena, policy, logs[0])
    owner.now = 6
    arena.attach(owner)
    assert arena.owner is owner
    assert arena.request(192, CHEAP) == twin.allocate_or_evict(192, CHEAP, policy, 6,
                                                               evictor(twin, logs[1]))
    assert logs[0] == logs[1] and logs[0]
    assert snapshot(arena, range(4)) == snapshot(twin, range(4))
    arena.check()


def test_the_owners_clock_decides(Arena):
    """dtr's staleness is measured at the owner's now, read at each request."""
    victims = []
    for now, expected in [(10, [0]), (1000, [1])]:
        arena = Arena(128)
        storages(arena, [2.0, 1.0])
        build(arena, [(64, 0), (64, 1)])
        arena.touch(0, 0)
        arena.touch(1, 10)
        log = []
        owner = owner_for(Arena, arena, "dtr", log)
        arena.attach(owner)
        owner.now = now
        arena.request(64)
        victims.append(log)
        assert log == [expected]
    assert victims == [[[0]], [[1]]]


def test_a_request_that_must_evict_holds_the_owners_lock(Arena):
    """With an owner's lock (a runtime's, held while its thread runs an op), another thread's
    request that fits is placed at once, and one that must evict waits for the lock; the
    holder's own requests evict without waiting (a re-entrant lock)."""
    arena = Arena(512)
    storages(arena, [1.0, 2.0])
    build(arena, [(128, 0), (128, 1), (128, None)])
    log = []
    owner = owner_for(Arena, arena, "dtr", log)
    owner.lock = threading.RLock()
    arena.attach(owner)
    done = {}

    def request(name, nbytes):
        done[name] = arena.request(nbytes)

    with owner.lock:
        small = threading.Thread(target=request, args=("small", 128))
        small.start()
        small.join(5)
        assert done.get("small") == 384 and log == []           # it fit: no wait
        big = threading.Thread(target=request, args=("big", 128))
        big.start()
        big.join(0.2)
        assert big.is_alive() and "big" not in done and log == []   # it must evict: it waits
    big.join(5)
    assert done["big"] in (0, 128) and log == [[0]]
    arena.check()
    with owner.lock:                    # the holder's own request evicts at once
        assert arena.request(128) in (0, 128) and log == [[0], [1]]
    arena.check()


def test_attach_and_detach(Arena):
    arena = Arena(256)
    first = owner_for(Arena, arena, "dtr")
    second = owner_for(Arena, arena, "lru")
    arena.detach(first)                           # nothing attached: nothing to do
    arena.attach(first)
    arena.attach(first)                           # the same owner again: nothing to do
    with pytest.raises(ValueError, match="owner"):
        arena.attach(second)
    with pytest.raises(ValueError):
        arena.detach(second)
    assert arena.owner is first
    arena.detach(first)
    assert arena.owner is None
    arena.attach(second)
    assert arena.owner is second


def test_only_evictors_can_own_an_arena():
    arena = coop.Arena(256)
    with pytest.raises(TypeError):
        arena.attach(lambda victims: None)
    with pytest.raises(TypeError):
        arena.attach(None)
    with pytest.raises(ValueError, match="unknown policy 'fifo'"):
        CallbackOwner(lambda victims: None, "fifo")
    with pytest.raises(ValueError, match="unknown policy"):
        CallbackOwner(lambda victims: None, 3)
    with pytest.raises(TypeError, match="callable"):
        CallbackOwner(None, "dtr")
    owner = CallbackOwner(lambda victims: None, "size")
    assert (owner.policy, owner.now) == ("size", 0.0)
    owner.now = 3
    assert owner.now == 3.0 and "size" in repr(owner)


def test_an_owner_with_policy_none_evicts_nothing(Arena):
    arena = Arena(128)
    storages(arena, [1.0])
    build(arena, [(128, 0)])
    arena.attach(owner_for(Arena, arena, "none"))
    with pytest.raises(OutOfMemoryError, match="cannot allocate 64 bytes"):
        arena.request(64)
    assert arena.storage_info(0)["resident"]


def test_an_owner_that_keeps_its_victim_is_an_error(Arena):
    arena = Arena(128)
    storages(arena, [1.0])
    build(arena, [(128, 0)])
    make = CallbackOwner if Arena is coop.Arena else reference_arena.CallbackOwner
    arena.attach(make(lambda victims: None, "lru"))
    with pytest.raises(InternalError, match=r"left storages \[0\] resident and evictable"):
        arena.request(64)


def test_an_ideal_arena_refuses_a_coop_owner_when_it_must_evict(Arena):
    arena = Arena(256, ideal=True)
    storages(arena, [1.0])
    build(arena, [(128, 0)])
    arena.attach(owner_for(Arena, arena, "coop"))
    assert arena.request(128) >= 0                # fits: no policy needed
    before = snapshot(arena, (0,))
    with pytest.raises(ValueError, match="ideal arena"):
        arena.request(64)
    assert snapshot(arena, (0,)) == before
    arena.detach(arena.owner)
    arena.attach(owner_for(Arena, arena, "dtr"))
    assert arena.request(64) >= 0
    assert not arena.storage_info(0)["resident"]


# ---- accessors seen through the Python methods --------------------------------------------------

def test_storage_metadata_round_trips(Arena):
    arena = Arena(512)
    arena.add_storage(4, 2.5, evictable=False)
    info = arena.storage_info(4)
    assert (info["offset"], info["cost"], info["pins"], info["evictable"]) == (None, 2.5, 0, False)
    offset = arena.allocate(100, CHEAP)
    arena.bind(offset, 4)
    arena.set_evictable(4, True)
    arena.pin(4)
    arena.pin(4)
    arena.unpin(4)
    info = arena.storage_info(4)
    assert (info["offset"], info["nbytes"], info["pins"], info["evictable"]) == (384, 128, 1, True)
    with pytest.raises(ValueError, match="already holds"):
        arena.bind(offset, 4)
    arena.check()
