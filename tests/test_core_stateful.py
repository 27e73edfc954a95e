"""coop.Arena and the plain-Python ReferenceArena, driven by the same random calls, must agree.

After every step both pass check(), and pieces, every storage's info and the counters are equal.
Costs and clock values are integers, so every sum the two compute in different orders is exact.
"""
import math

import hypothesis.strategies as st
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import coop
from coop import CHEAP, EXPENSIVE, LOWEST, NO_STORAGE, OutOfMemoryError
from coop._core import POLICIES
from coop._core import CallbackOwner
from coop.errors import InternalError
from _arena import SEARCH_INTERNALS, comparable_stats
from reference_arena import CallbackOwner as RefOwner
from reference_arena import ReferenceArena

COUNTERS = ("capacity", "used_bytes", "peak_used_bytes", "free_bytes", "largest_free", "pieces",
            "free_pieces", "evictions", "bytes_evicted", "searches", "failed_allocations",
            "window_moves", "bytes_moved", "move_cost", "offloads", "bytes_offloaded")
MEANS = ("fragmentation_rate", "largest_free_ratio")
PLACEMENTS = st.sampled_from([EXPENSIVE, CHEAP, LOWEST])


def outcome(call):
    """("ok", result), or ("error", exception type[, the numbers an OutOfMemoryError carries])."""
    try:
        return "ok", call()
    except OutOfMemoryError as error:
        numbers = (error.request, error.budget, error.free, error.largest_free)
        return "error", OutOfMemoryError, numbers
    except (TypeError, ValueError, RuntimeError) as error:
        return "error", type(error)


class ArenaComparison(RuleBasedStateMachine):
    """Random calls on both arenas; the subclasses change ALIGNMENT and IDEAL."""

    ALIGNMENT = 64
    IDEAL = False

    def __init__(self):
        super().__init__()
        self.core = None
        self.ref = None
        self.sids = []  # registered storage ids
        self.removed = []  # ids registered once and removed since: reusable
        self.next_sid = 0
        self.clock = 0
        self.owners = None  # (core owner, reference owner) while attached
        self.owner_logs = ([], [])
        self.logging = False

    @initialize(k=st.integers(4, 16) | st.integers(4, 64), extra=st.integers(0, 63),
                rate=st.sampled_from([math.inf, 0.0, 1 / 64, 1 / 16]))
    def create(self, k, extra, rate):
        self.core = coop.Arena(64 * k + extra, self.ALIGNMENT, ideal=self.IDEAL)
        self.ref = ReferenceArena(64 * k + extra, self.ALIGNMENT, ideal=self.IDEAL)
        self.core.move_cost = self.ref.move_cost = rate    # coop's window moves unless inf
        assert (self.core.capacity, self.core.ideal) == (self.ref.capacity, self.IDEAL)

    # ---- helpers --------------------------------------------------------------------------------

    def both(self, method, *args):
        """Call method on both arenas; the outcomes must be identical."""
        core = outcome(lambda: getattr(self.core, method)(*args))
        ref = outcome(lambda: getattr(self.ref, method)(*args))
        assert core == ref, (method, args, core, ref)
        return core

    def refused(self, method, *args):
        """A call that both must refuse with the same exception and no change."""
        before = self.state()
        result = self.both(method, *args)
        assert result[0] == "error", (method, args, result)
        assert self.state() == before

    def state(self):
        return (self.core.pieces(), [self.core.storage_info(s) for s in self.sids],
                comparable_stats(self.core))

    def info(self, sid):
        return self.ref.storage_info(sid)

    def nonresident(self):
        return [s for s in self.sids if not self.info(s)["resident"]]

    def resident(self):
        return [s for s in self.sids if self.info(s)["resident"]]

    def used_offsets(self, anonymous_only=False):
        return [off for off, _, free, sid in self.ref.pieces()
                if not free and (sid == NO_STORAGE or not anonymous_only)]

    def request(self, data):
        """Mostly up to a quarter of the arena, sometimes anything up to all of it."""
        capacity = self.ref.capacity
        small = st.integers(0, capacity // 4)
        return data.draw(st.one_of(small, small, st.integers(0, capacity)), label="nbytes")

    def storage(self, data):
        """A non-resident storage to bind, or NO_STORAGE."""
        nonresident = self.nonresident()
        if nonresident and data.draw(st.booleans(), label="bind"):
            return data.draw(st.sampled_from(nonresident), label="storage")
        return NO_STORAGE

    def now(self, data):
        return self.clock + data.draw(st.integers(0, 3), label="ahead")

    # ---- storages -------------------------------------------------------------------------------

    def register(self, data, cost, evictable):
        if self.removed and data.draw(st.booleans(), label="reuse id"):
            sid = self.removed.pop(data.draw(st.integers(0, len(self.removed) - 1)))
        else:
            sid = self.next_sid
            self.next_sid += 1
        neighbors = data.draw(st.lists(st.sampled_from(self.sids), max_size=4), label="neighbors") \
            if self.sids else []
        assert self.both("add_storage", sid, cost, neighbors, evictable) == ("ok", None)
        self.sids.append(sid)
        return sid

    @rule(data=st.data(), cost=st.integers(0, 20), evictable=st.booleans())
    def add_storage(self, data, cost, evictable):
        self.register(data, cost, evictable)

    @rule(data=st.data(), outputs=st.integers(1, 3), placement=PLACEMENTS,
          policy=st.sampled_from(POLICIES))
    def compute(self, data, outputs, placement, policy):
        """What the runtime does for an op's outputs: register, touch, place each (evicting)."""
        for _ in range(outputs):
            cost = data.draw(st.integers(0, 20), label="cost")
            sid = self.register(data, cost, data.draw(st.integers(0, 9), label="evictable") > 0)
            assert self.both("touch", sid, float(self.clock)) == ("ok", None)
            self.evict_and_compare(self.request(data), placement, policy, float(self.clock), sid)

    @precondition(lambda self: self.sids)
    @rule(data=st.data())
    def remove_storage(self, data):
        sid = data.draw(st.sampled_from(self.sids), label="sid")
        assert self.both("remove_storage", sid) == ("ok", None)
        self.sids.remove(sid)
        self.removed.append(sid)

    @precondition(lambda self: self.sids)
    @rule(data=st.data(),
          method=st.sampled_from(["set_cost", "set_evictable", "set_movable", "set_offload",
                                  "pin", "unpin", "touch"]))
    def metadata(self, data, method):
        sid = data.draw(st.sampled_from(self.sids), label="sid")
        if method == "set_cost":
            args = (data.draw(st.integers(0, 20), label="cost"),)
        elif method in ("set_evictable", "set_movable"):
            args = (data.draw(st.booleans(), label="flag"),)
        elif method == "set_offload":
            args = (data.draw(st.sampled_from([math.inf, 0, 1, 3, 7, 20]), label="offload"),)
        elif method == "touch":
            args = (float(self.clock),)
        else:
            args = ()
        if method == "unpin" and not self.info(sid)["pins"]:
            self.refused("unpin", sid)
        else:
            assert self.both(method, sid, *args) == ("ok", None)

    @rule(rate=st.sampled_from([math.inf, 0.0, 1 / 64, 1 / 16, 1 / 4, 1.0]))
    def move_cost(self, rate):
        """coop's window moves pieces at this cost per byte (inf: never)."""
        self.core.move_cost = rate
        self.ref.move_cost = rate
        assert self.core.move_cost == self.ref.move_cost == rate

    @rule(flag=st.booleans())
    def moves_if_blocked(self, flag):
        """coop's window moves pieces only where no evict-only window exists (True), or
        weighs moves against evictions in every choice (False, the default)."""
        self.core.moves_if_blocked = self.ref.moves_if_blocked = flag
        assert self.core.moves_if_blocked == self.ref.moves_if_blocked == flag
        event(f"moves_if_blocked {flag}")

    @rule(weight=st.sampled_from([0.0, 0.5, 1.0]))
    def excess_weight(self, weight):
        """coop's windows compared per byte freed, those beyond the request at this weight
        (0.0, the default: by cost alone)."""
        self.core.excess_weight = self.ref.excess_weight = weight
        assert self.core.excess_weight == self.ref.excess_weight == weight
        event(f"excess_weight {weight}")

    @rule(data=st.data())
    def choose_plan(self, data):
        args = (self.request(data), "dtr" if self.IDEAL else "coop", self.now(data))
        kind, plan = self.both("choose_plan", *args)
        assert kind == "ok"
        event(f"choose_plan: {'moves' if plan['moves'] else 'no moves'}")

    @rule(dt=st.integers(0, 10))
    def advance_clock(self, dt):
        self.clock += dt

    # ---- pieces ---------------------------------------------------------------------------------

    @rule(data=st.data(), placement=PLACEMENTS)
    def allocate(self, data, placement):
        kind, _ = self.both("allocate", self.request(data), placement, self.storage(data))
        assert kind == "ok"

    @rule(data=st.data())
    def lowest_fit(self, data):
        self.both("lowest_fit", self.request(data))

    @precondition(lambda self: self.used_offsets())
    @rule(data=st.data())
    def free(self, data):
        offset = data.draw(st.sampled_from(self.used_offsets()), label="offset")
        assert self.both("free", offset) == ("ok", None)

    @precondition(lambda self: self.used_offsets(anonymous_only=True) and self.nonresident())
    @rule(data=st.data())
    def bind(self, data):
        offset = data.draw(st.sampled_from(self.used_offsets(anonymous_only=True)), label="offset")
        sid = data.draw(st.sampled_from(self.nonresident()), label="sid")
        assert self.both("bind", offset, sid) == ("ok", None)

    # ---- eviction -------------------------------------------------------------------------------

    @rule(data=st.data(), policy=st.sampled_from(POLICIES))
    def choose_victims(self, data, policy):
        args = (self.request(data), policy, self.now(data))
        if self.IDEAL and policy == "coop":
            self.refused("choose_victims", *args)  # no addresses to scan
        else:
            assert self.both("choose_victims", *args)[0] == "ok"

    @rule(data=st.data(), placement=PLACEMENTS, policy=st.sampled_from(POLICIES),
          owner=st.sampled_from(["frees"] * 4 + ["offloads"] * 2
                                + ["leaves", "pins", "unevictable"]))
    def allocate_or_evict(self, data, placement, policy, owner):
        self.evict_and_compare(self.request(data), placement, policy, self.now(data),
                               self.storage(data), owner)

    def evict_and_compare(self, nbytes, placement, policy, now, storage, owner="frees"):
        """owner: what the callback does with the last victim: frees it like the others, leaves it
        resident (a RuntimeError in both), or refuses it by pinning it or making it unevictable;
        "offloads" takes each victim's way out as an engine with a host tier does: unbound and
        then freed (an offload) where its offload is the cheaper, else freed (evicted)."""
        if self.IDEAL and policy == "coop":
            self.refused("allocate_or_evict", nbytes, placement, policy, now, _never_called,
                         storage)
            return
        logs = []
        results = []
        moves = self.core.stats()["window_moves"]
        offloads = self.core.stats()["offloads"]
        for arena in (self.core, self.ref):
            log = []

            def evict(victims, arena=arena, log=log):
                log.append(list(victims))
                if owner == "offloads":
                    for sid in victims:
                        offset = arena.storage_info(sid)["offset"]
                        if arena.offload_wins(sid):
                            arena.unbind(sid)
                        arena.free(offset)
                    return
                for sid in victims[:-1]:
                    arena.free(arena.storage_info(sid)["offset"])
                if owner == "frees":
                    arena.free(arena.storage_info(victims[-1])["offset"])
                elif owner == "pins":
                    arena.pin(victims[-1])
                elif owner == "unevictable":
                    # no way out at all: not evictable, and no offload
                    arena.set_evictable(victims[-1], False)
                    arena.set_offload(victims[-1], math.inf)

            results.append(outcome(lambda: arena.allocate_or_evict(nbytes, placement, policy, now,
                                                                    evict, storage)))
            logs.append(log)
        assert results[0] == results[1], (results, logs)
        assert logs[0] == logs[1]
        if self.core.stats()["window_moves"] > moves:
            event("allocate_or_evict: moved pieces")
        if self.core.stats()["offloads"] > offloads:
            event("allocate_or_evict: offloaded pieces")
        if results[0][0] == "error":
            assert results[0][1] in ((OutOfMemoryError, InternalError) if owner == "leaves"
                                     else (OutOfMemoryError,))

    # ---- the owner (request) and the allocation log ----------------------------------------

    @rule(policy=st.sampled_from(POLICIES))
    def attach(self, policy):
        """A fresh owner pair (one per arena, each freeing its victims on its own arena); while
        another is attached, both arenas refuse it."""
        def frees(arena, log):
            def evict(victims):
                log.append(list(victims))
                for sid in victims:
                    arena.free(arena.storage_info(sid)["offset"])
            return evict
        logs = ([], [])
        owners = (CallbackOwner(frees(self.core, logs[0]), policy),
                  RefOwner(frees(self.ref, logs[1]), policy))
        if self.owners is not None:
            before = self.state()
            outcomes = [outcome(lambda: arena.attach(owner))
                        for arena, owner in zip((self.core, self.ref), owners)]
            assert outcomes == [("error", ValueError)] * 2, outcomes
            assert self.core.owner is self.owners[0] and self.state() == before
            return
        self.core.attach(owners[0])
        self.ref.attach(owners[1])
        assert self.core.owner is owners[0] and self.ref.owner is owners[1]
        self.owners, self.owner_logs = owners, logs

    @precondition(lambda self: self.owners is not None)
    @rule()
    def detach(self):
        self.core.detach(self.owners[0])
        self.ref.detach(self.owners[1])
        assert self.core.owner is None and self.ref.owner is None
        self.owners = None

    @rule(data=st.data(), placement=PLACEMENTS)
    def request_anonymous(self, data, placement):
        """An anonymous allocation through the attached owner (or none): it evicts like
        allocate_or_evict under the owner's policy and clock."""
        nbytes, now = self.request(data), self.now(data)
        if self.owners is not None:
            for owner, log in zip(self.owners, self.owner_logs):
                owner.now = now
                log.clear()
        result = self.both("request", nbytes, placement)
        if self.owners is not None:
            assert self.owner_logs[0] == self.owner_logs[1]
        event(f"request: {result[0]}{', evicted' if self.owner_logs[0] else ''}"
              f"{', owner' if self.owners is not None else ''}")

    @rule()
    def start_log(self):
        assert self.both("start_log") == ("ok", None)
        self.logging = True

    @rule()
    def take_log(self):
        kind, log = self.both("take_log")
        assert kind == "ok"
        event(f"take_log: {'empty' if not log else 'entries'}")
        if not self.logging:
            assert log == []
        self.logging = False

    # ---- refused calls --------------------------------------------------------------------------

    @rule(data=st.data())
    def refused_call(self, data):
        capacity = self.ref.capacity
        pieces = self.ref.pieces()
        free_offsets = [off for off, _, free, _ in pieces if free]
        starts = {off for off, _, _, _ in pieces}
        unknown = next(off for off in range(1, capacity + 1) if off not in starts)
        calls = [
            ("allocate", -1), ("allocate", capacity + 1), ("allocate", 1.5),
            ("allocate", 64, EXPENSIVE, self.next_sid),
            ("free", unknown), ("free", -self.ALIGNMENT), ("free", float(self.ALIGNMENT)),
            ("bind", unknown, NO_STORAGE), ("add_storage", self.next_sid, -1.0),
            ("add_storage", self.next_sid, math.nan), ("add_storage", self.next_sid, 1.0, [-5]),
            ("remove_storage", self.next_sid), ("unpin", self.next_sid),
            ("storage_info", self.next_sid), ("set_cost", self.next_sid, 1.0),
            ("choose_victims", 64, "best", self.clock), ("choose_victims", -1, "coop", self.clock),
            ("choose_victims", capacity + 1, "dtr", self.clock),
            ("allocate_or_evict", capacity + 1, EXPENSIVE, "coop", self.clock, _never_called),
            ("allocate_or_evict", 64, EXPENSIVE, "lifo", self.clock, _never_called),
            ("request", capacity + 1), ("request", -1), ("request", 1.5), ("request", 64, 3),
            ("request", 64, 1.0),
        ]
        calls += [("free", off) for off in free_offsets]
        calls += [("bind", off, s) for off in free_offsets for s in self.nonresident()[:1]]
        if self.sids:
            sid = self.sids[0]
            calls += [("add_storage", sid), ("set_cost", sid, -1.0), ("touch", self.next_sid, 0.0)]
            if not self.info(sid)["pins"]:
                calls.append(("unpin", sid))
        for sid in self.resident():
            calls += [("allocate", 0, CHEAP, sid), ("bind", self.info(sid)["offset"], sid),
                      ("allocate_or_evict", 0, CHEAP, "coop", self.clock, _never_called, sid)]
        for off in self.used_offsets(anonymous_only=True)[:1]:
            calls += [("bind", off, self.next_sid)]
            calls += [("bind", off, s) for s in self.resident()[:1]]
        for off, _, free, sid in pieces:
            if sid != NO_STORAGE and self.nonresident():
                calls.append(("bind", off, self.nonresident()[0]))
                break
        method, *args = data.draw(st.sampled_from(calls), label="call")
        self.refused(method, *args)

    # ---- after every step ----------------------------------------------------------------------

    @invariant()
    def agree(self):
        if self.core is None:
            return
        self.core.check()
        self.ref.check()
        assert self.core.pieces() == self.ref.pieces()
        for sid in self.sids:
            assert self.core.storage_info(sid) == self.ref.storage_info(sid), sid
        for sid in self.removed:
            assert not self.core.has_storage(sid) and not self.ref.has_storage(sid)
        core, ref = self.core.stats(), self.ref.stats()
        assert core.keys() == ref.keys() | SEARCH_INTERNALS
        for key in COUNTERS:
            assert core[key] == ref[key], key
        for key in MEANS:
            assert math.isclose(core[key], ref[key], rel_tol=1e-12, abs_tol=1e-15), key


def _never_called(victims):
    raise AssertionError("a refused call must not reach the evict callback")


class ArenaComparisonAlign8(ArenaComparison):
    ALIGNMENT = 8


class ArenaComparisonIdeal(ArenaComparison):
    IDEAL = True


SETTINGS = settings(max_examples=200, stateful_step_count=50, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
ArenaComparison.TestCase.settings = SETTINGS
ArenaComparisonAlign8.TestCase.settings = SETTINGS
ArenaComparisonIdeal.TestCase.settings = SETTINGS
TestArena = ArenaComparison.TestCase
TestArenaAlign8 = ArenaComparisonAlign8.TestCase
TestIdealArena = ArenaComparisonIdeal.TestCase
