"""Replaying a trace under a budget and policy on the real arena core (docs/trace-format.md).

``replay(trace, ratio=0.5, policy="coop")`` returns docs/design.md's metrics for one run. The
budget is a ratio of the trace's unlimited peak (``peak(trace)``: the arena's peak used bytes
when nothing is evicted) or a number of bytes. The replayer is coop/trace/_replay.pyx: the runtime's
residency rules over integer storages, so a trace recorded from a run replays with that run's
evictions and recomputes.
"""
import math
import os
import time

from coop._core import Arena
from coop.budget import parse_budget
from coop.engine.cost import DEVICES
from coop.engine.policies import POLICIES, get_policy
from coop.errors import OutOfMemoryError, Thrash, TraceError
from coop.trace._replay import Program, Replayer
from coop.trace.compile import load
from coop.trace.records import MAX_BYTES, valid_alignment

__all__ = ["DEFAULT_ALIGNMENT", "THRASH", "load", "make_replayer", "peak", "replay", "unlimited"]

#: the simulation backend's alignment, used when a trace does not name one
DEFAULT_ALIGNMENT = 512
#: compute overhead above which a run counts as thrashing (docs/design.md#thrash)
THRASH = 2.0
#: the unlimited run's arena, and the largest budget: 2**62 bytes (an arena's offsets are signed)
_UNLIMITED = MAX_BYTES
#: the policies that must complete at ratio 1.0 (`none` never evicts: it needs no fragmentation;
#: DTR's in-place rule keeps a mutated constant's old version: more than the program's peak)
#: (an offloading policy is left out: the peak is the device-only runs')
PEAK_POLICIES = tuple(p for p in POLICIES
                      if p != "none" and POLICIES[p].inplace and not POLICIES[p].offload)
#: ops ahead whose offloaded inputs a replay brings back early (the host tier's prefetch, into
#: free ranges only, so a longer lookahead only starts copies sooner): 64 against 4 lowered 12 of
#: the 36 tier-sweep minima and raised one (docs/benchmarks.md, "The host tier, measured")
DEFAULT_LOOKAHEAD = 64


def _program(trace):
    if isinstance(trace, Program):
        return trace
    if isinstance(trace, (str, os.PathLike)):
        return load(trace)
    raise TypeError(f"trace must be a path or a coop.trace Program, got {type(trace).__name__}")


def copy_cost(program):
    """The cost of copying one byte (a move of coop's window, an in-place op's copy of an old
    value): the recording runtime's (meta copy_cost), else that of the trace's cost model's
    device (meta cost_model; a100-80gb, the recorders' default)."""
    rate = program.meta.get("copy_cost")
    if rate is not None:
        return float(rate)
    return DEVICES.get(program.meta.get("cost_model"), DEVICES["a100-80gb"]).copy_ns_per_byte


def host_link(program):
    """(d2h, h2d): the cost of copying one byte to the host and back, in the trace's cost
    units: the recording runtime's (meta host_link), else from its cost model's device (meta
    cost_model; a100-80gb, the recorders' default)."""
    link = program.meta.get("host_link")
    if link is not None:
        return float(link[0]), float(link[1])
    spec = DEVICES.get(program.meta.get("cost_model"), DEVICES["a100-80gb"])
    return spec.host_link


def _alignment(program, alignment):
    if alignment is None:
        return int(program.meta.get("alignment") or DEFAULT_ALIGNMENT)
    if not valid_alignment(alignment):
        raise ValueError(f"alignment must be a power of two in [1, 2**30] bytes, got "
                         f"{alignment!r}")
    return alignment


def unlimited(trace, alignment=None):
    """The unlimited run: its metrics, with peak_used_bytes, lower_bound_bytes (docs/design.md's
    bound, evaluated per op: live constants plus the op's other inputs and outputs),
    offload_floor_bytes (the largest op's inputs and outputs, constants it does not read left
    out: what no host tier can go below) and peak_bytes (the budget ratios' denominator, see
    `peak`). TraceError if the trace needs more than 2**62 bytes at once."""
    program = _program(trace)
    # placed as under the default policy (coop: partitioned), as runs are recorded: moving a
    # new constant to the low end takes a transient copy, so the peak depends on placement
    result = replay(program, budget=_UNLIMITED, policy="coop", alignment=alignment, thrash=None)
    if result["status"] != "ok":
        raise TraceError(f"{program.source}: the trace needs more than 2**62 bytes at once (its "
                         f"unlimited run stops after {result['records']:,} of "
                         f"{program.n_records:,} records)")
    result["peak_bytes"] = _feasible_peak(program, _alignment(program, alignment),
                                          result["peak_used_bytes"])
    return result


def _feasible_peak(program, align, used):
    """The smallest budget in steps of 1/64 from the peak used bytes (aligned up) at which
    every policy of PEAK_POLICIES completes: an arena of exactly the used peak can be too
    fragmented (by constants and a kernel's pinned inputs and temporaries) to complete."""
    nbytes = max(-(-used // align) * align, align)
    while True:
        if all(replay(program, budget=nbytes, policy=p, alignment=align,
                      thrash=THRASH)["status"] == "ok" for p in PEAK_POLICIES):
            return nbytes
        if nbytes >= _UNLIMITED:
            return _UNLIMITED
        nbytes = min(-(-(nbytes + max(nbytes // 64, align)) // align) * align, _UNLIMITED)


def open_tier_below_bound(engine, program, policy, capacity, alignment, lower_bound_bytes=None):
    """Open engine's host tier at the start (Engine.open_tier) when policy offloads only once a
    choice needs the tier (offload_last) and capacity is below the program's recompute-only
    lower bound (lower_bound_bytes; None: from its unlimited run at alignment): a run that
    cannot complete without the tier. True when it opened the tier."""
    record = get_policy(policy)
    if not (record.offload and record.offload_last and engine.offloading):
        return False
    if lower_bound_bytes is None:
        lower_bound_bytes = unlimited(program, alignment)["lower_bound_bytes"]
    return capacity < lower_bound_bytes and engine.open_tier(constants_only=True)


def make_replayer(program, nbytes, policy, alignment, thrash_cost=0.0, host_budget=None,
                  link=None, lookahead=DEFAULT_LOOKAHEAD, lower_bound_bytes=None):
    """What a replay of program (a Program) at nbytes under policy runs on: (arena, replayer,
    opened). The arena has alignment (bytes) and an ideal one for an ideal policy;
    thrash_cost stops the replayer once the cost executed passes it (0: never); host_budget
    (bytes, None: no limit), link ((d2h, h2d) per byte; None: the trace's, host_link) and
    lookahead are the host tier's; opened: the tier opened at the start, below the
    recompute-only bound (open_tier_below_bound, with lower_bound_bytes)."""
    arena = Arena(nbytes, alignment, ideal=get_policy(policy).ideal)
    # a replay looks ahead where its policy has a host tier to bring inputs back from
    replayer = Replayer(program, arena, policy, thrash_cost, copy_cost(program), host_budget,
                        host_link(program) if link is None else link,
                        lookahead if get_policy(policy).offload else 0)
    opened = open_tier_below_bound(replayer.engine, program, policy, arena.capacity, alignment,
                                   lower_bound_bytes)
    return arena, replayer, opened


def peak(trace, alignment=None):
    """What a budget ratio of 1.0 means: the smallest budget, from the unlimited run's peak
    used bytes up in steps of 1/64, at which every policy with coop's in-place rule but `none`
    completes."""
    return unlimited(trace, alignment)["peak_bytes"]


def replay(trace, budget=None, ratio=None, policy="coop", alignment=None, thrash=THRASH,
           peak_bytes=None, check=False, host_budget=None, lookahead=DEFAULT_LOOKAHEAD,
           device=None, lower_bound_bytes=None):
    """Replay trace (a path or Program) under a budget (bytes: an int or "6GiB") or a ratio of
    its unlimited peak, with one of coop.engine.policies.POLICIES.

    Returns a dict: status ("ok", "oom" or "thrash": stopped once the compute overhead passed
    `thrash`; None never stops), compute_overhead, evictions, bytes_evicted, recomputes,
    searches, search_time (s) and of it search_fill_time, search_scan_time and search_plan_time
    (coop's window searches: docs/core.md, Counters), plans_evaluated, moving_searches,
    search_entries and search_pieces (the moving window's entries swept and the pieces then),
    fragmentation_rate, largest_free_ratio, window_moves,
    bytes_moved, move_cost (coop's moves: docs/core.md, Moving; the cost is in compute_overhead),
    room_made (times coop moved a kernel's inputs to make room for it), compactions (those
    times it compacted one window to do so), constants_placed (new constants copied down to
    the lowest free range that holds them),
    peak_used_bytes, lower_bound_bytes and offload_floor_bytes (docs/design.md: the first runs'
    largest working sets, with every live constant and with only the constants each op reads),
    records, wall_time (s), records_per_s, the budget in bytes and as a
    ratio, and where a failed run stopped: failed_record (the record's index), failed_request
    and failed_largest_free (bytes asked for and the largest free range, for "oom"), and what
    blocked the last search (coop.OutOfMemoryError's figures): failed_pinned, failed_walls,
    failed_window, failed_constants, failed_evictable and failed_bytes_fit
    (OutOfMemoryError.bytes_fit), and where it ran out inside a rematerialization,
    failed_recompute_depth (its ops pending), failed_recompute_planned (the ops it planned)
    and failed_recompute_pinned (the bytes of the pinned pieces that those pending ops read)
    (Engine.oom_recompute; None outside one); None for a run that completed. check: verify
    the arena's invariants at the end (Arena.check: AssertionError if one is broken).

    The host tier (an offloading policy: coop-offload): host_budget is the bytes it may hold
    (None: no limit; bytes or "64GiB"), lookahead the ops ahead whose offloaded inputs are
    brought back early, device the cost model whose host link prices the copies (a name of
    coop.engine.cost.DEVICES; None: the trace's). The result then also has offloads, fetches
    (copies back on demand), prefetches, bytes_d2h, bytes_h2d, copy_exposed (link time the
    clock waited for, in the trace's cost units, part of compute_overhead), copy_hidden
    (prefetched copy time under compute), host_peak_bytes, host_drops (recomputable copies
    dropped for room) and host_refusals (constants the full tier refused).

    Below the trace's recompute-only lower bound (lower_bound_bytes; None: from its unlimited
    run) no policy without the tier can complete, and the replay knows it before it starts: an
    offloading policy whose tier opens at its first blocked choice (coop-offload) then opens it
    at the start (tier_open_at_start in the result), for constants with a cached host copy
    until a choice needs more (Engine.open_tier), as a live training loop's later steps find it
    open once its first step opened it (docs/core.md, "The host tier"); the constants the trace
    registers before its first op that no free range holds then start in the host tier, as a
    loop's step finds what the step before copied out (constants_on_host in the result).
    lower_bound_bytes=0 replays a live run's first step: the tier opens at its first blocked
    choice."""
    program = _program(trace)
    if (budget is None) == (ratio is None):
        raise ValueError("give exactly one of budget (bytes) and ratio (of the unlimited peak)")
    align = _alignment(program, alignment)
    if ratio is not None:
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) \
                or not 0 < ratio < math.inf:
            raise ValueError(f"ratio must be a finite number > 0, got {ratio!r}")
        if peak_bytes is None:
            peak_bytes = peak(program, align)
        nbytes = max(int(ratio * peak_bytes), align)
    else:
        nbytes = parse_budget(budget)
    if nbytes > _UNLIMITED:
        raise ValueError(f"a budget of {nbytes:,} bytes is more than an arena holds (2**62 "
                         "bytes); give a smaller budget or ratio")
    if thrash is not None and not 0 <= thrash < math.inf:
        raise ValueError(f"thrash must be a finite number >= 0 (0 or None: never), got "
                         f"{thrash!r}")
    if device is not None and device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; choose one of {', '.join(DEVICES)}")
    if host_budget is not None:
        host_budget = parse_budget(host_budget)
    arena, replayer, opened = make_replayer(
        program, nbytes, policy, align, thrash * program.cost_first if thrash else 0.0,
        host_budget, None if device is None else DEVICES[device].host_link, lookahead,
        lower_bound_bytes)
    status = "ok"
    failed = dict(failed_record=None, failed_request=None, failed_largest_free=None,
                  failed_pinned=None, failed_walls=None, failed_window=None,
                  failed_constants=None, failed_evictable=None, failed_bytes_fit=None,
                  failed_recompute_depth=None, failed_recompute_planned=None,
                  failed_recompute_pinned=None)
    t0 = time.perf_counter()
    try:
        replayer.run()
        replayer.finish()
    except OutOfMemoryError as err:
        status = "oom"
        failed.update(failed_record=replayer.records, failed_request=err.request,
                      failed_largest_free=err.largest_free, failed_pinned=err.pinned_bytes,
                      failed_walls=err.wall_bytes, failed_window=err.largest_window,
                      failed_constants=err.constant_bytes, failed_evictable=err.evictable_bytes,
                      failed_bytes_fit=err.bytes_fit)
        # inside a rematerialization: its depth, the ops it planned, and the bytes its
        # pending ops' inputs kept pinned (Engine.oom_recompute)
        inside = replayer.engine.oom_recompute
        if inside is not None:
            failed.update(failed_recompute_depth=inside[0], failed_recompute_planned=inside[1],
                          failed_recompute_pinned=inside[3])
    except Thrash:
        status = "thrash"
        failed["failed_record"] = replayer.records
    wall = time.perf_counter() - t0
    if check:
        arena.check()
    counters = replayer.counters()
    stats = arena.stats()
    tier = replayer.engine.tier_counters()
    del tier["host_bytes"]
    cost_first = program.cost_first
    overhead = counters["cost_total"] / cost_first if cost_first else 1.0
    if status == "ok" and thrash and overhead > thrash:
        status = "thrash"
        failed["failed_record"] = counters["records"]
    return {
        "policy": policy,
        "status": status,
        "budget_bytes": arena.capacity,
        "ratio": arena.capacity / peak_bytes if peak_bytes else None,
        "compute_overhead": overhead,
        "cost_first": cost_first,
        "cost_total": counters["cost_total"],
        "ops": counters["ops"],
        "recomputes": counters["recomputes"],
        "eager_evictions": counters["eager_evictions"],
        "evictions": stats["evictions"],
        "bytes_evicted": stats["bytes_evicted"],
        "searches": stats["searches"],
        "search_time": stats["search_time"],
        "search_fill_time": stats["search_fill_time"],
        "search_scan_time": stats["search_scan_time"],
        "search_plan_time": stats["search_plan_time"],
        "plans_evaluated": stats["plans_evaluated"],
        "moving_searches": stats["moving_searches"],
        "search_entries": stats["search_entries"],
        "search_pieces": stats["search_pieces"],
        "fragmentation_rate": stats["fragmentation_rate"],
        "failed_allocations": stats["failed_allocations"],
        "largest_free_ratio": stats["largest_free_ratio"],
        "window_moves": stats["window_moves"],
        "room_made": counters["room_made"],
        "compactions": counters["compactions"],
        "bytes_moved": stats["bytes_moved"],
        "move_cost": stats["move_cost"],
        "constants_placed": counters["constants_placed"],
        "peak_used_bytes": stats["peak_used_bytes"],
        "lower_bound_bytes": counters["lower_bound_bytes"],
        "offload_floor_bytes": counters["offload_floor_bytes"],
        "records": counters["records"],
        **tier,
        "tier_open_at_start": opened,
        "wall_time": wall,
        "records_per_s": counters["records"] / wall if wall > 0 else float("inf"),
        **failed,
    }
