"""Helpers shared by the core's unit tests: build hand-made layouts on coop.Arena or the model."""
from coop import EXPENSIVE, NO_STORAGE


def build(arena, layout):
    """Allocate layout's pieces from offset 0 up, then free those marked "free".

    layout: (nbytes, what) pairs; what is None (anonymous), "free", or a registered storage id.
    Returns the offsets.
    """
    offsets = [arena.allocate(nbytes, EXPENSIVE, what if isinstance(what, int) else NO_STORAGE)
               for nbytes, what in layout]
    for (_, what), offset in zip(layout, offsets):
        if what == "free":
            arena.free(offset)
    return offsets


def per_byte(cost, covered, size, weight):
    """A window's cost as coop's choice compares it (docs/core.md, "The bytes beyond the
    request"): per byte it frees, those beyond the request counted at weight; with weight 0.0,
    the cost itself."""
    return cost if weight == 0.0 else cost / (size + weight * (covered - size))


def storages(arena, costs, neighbors=None):
    """Register storages 0..n-1 with the given costs and neighbor lists."""
    for sid, cost in enumerate(costs):
        arena.add_storage(sid, cost, (neighbors or {}).get(sid, ()))


def evictor(arena, log=None):
    """An evict callback that frees each victim's piece (and records the victim lists)."""
    def evict(victims):
        if log is not None:
            log.append(list(victims))
        for sid in victims:
            arena.free(arena.storage_info(sid)["offset"])
    return evict


#: Arena.stats (and replay) keys that are wall times of the search: they differ from run to run
SEARCH_TIMES = ("search_time", "search_fill_time", "search_scan_time", "search_plan_time")
#: Arena.stats keys that time the search's phases or count how the core's search works inside:
#: the plain-Python model (tests/reference_arena.py) chooses by brute force and has none of
#: them (its stats have search_time alone, its own)
SEARCH_INTERNALS = frozenset(("search_fill_time", "search_scan_time", "search_plan_time",
                              "plans_evaluated", "moving_searches", "quick_decided",
                              "search_entries", "search_pieces"))


def comparable_stats(arena):
    """arena.stats() without what differs between the core and the model by construction (the
    search's times and the core's search internals)."""
    stats = arena.stats()
    for key in SEARCH_INTERNALS | set(SEARCH_TIMES):
        stats.pop(key, None)
    return stats


def snapshot(arena, sids=()):
    return arena.pieces(), [arena.storage_info(s) for s in sids], comparable_stats(arena)




def _noop(victims):
    raise AssertionError("the evict callback must not be called")

