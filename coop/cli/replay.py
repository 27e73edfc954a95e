"""Replay a trace (coop's JSON lines, or a DTR simulator log) under a budget on the real arena
core, for one or more policies, and print docs/design.md's metrics.

A budget is a share of the trace's unlimited peak ("0.5", "0.5x" or "50%") or a size ("6GiB").
Moves come in three kinds, each counted apart: window moves (coop's window relocating pieces to
free a range), room made (times coop moved a kernel's inputs to make room for it) and constants
placed (new constants copied down to the lowest free range that holds them). An offloading
policy (coop-offload) also counts the host tier: offloads, copies back (on demand and
prefetched), bytes each way, the copy time exposed and hidden, and the tier's peak; below the
trace's recompute-only lower bound its tier opens at the start, for constants with a cached host
copy (a training loop's later steps), unless --first-step replays a live run's first step.
Exit status: 0 when every policy completed, 3 when one ran out of memory or thrashed (a line
below the table says where; for memory, what blocked its last search and whether the bytes
would have fit the budget), 2 for a bad argument, 1 for a trace that cannot be read.
Example: coop replay run.jsonl --budget 0.5 --policy coop,dtr,dtr-ideal
"""
import argparse
import json
import math
import os
import sys

from coop.budget import Budget, EmptyBudget, parse_budget
from coop.engine.cost import DEVICES
from coop.trace import replay as R
from coop.trace.compile import load_lines
from coop.errors import CoopError, UsageError
from coop.engine.policies import POLICIES
from coop.trace import valid_alignment

#: exit status when a policy did not complete (ran out of memory or thrashed)
INCOMPLETE = 3

ROWS = [  # (label, key, format)
    ("status", "status", "{}"),
    ("budget (bytes)", "budget_bytes", "{:,}"),
    ("budget ratio", "ratio", "{:.3f}"),
    ("compute overhead", "compute_overhead", "{:.4f}"),
    ("evictions", "evictions", "{:,}"),
    ("bytes evicted", "bytes_evicted", "{:,}"),
    ("window moves", "window_moves", "{:,}"),
    ("room made for kernels", "room_made", "{:,}"),
    ("  of which by compaction", "compactions", "{:,}"),
    ("bytes moved", "bytes_moved", "{:,}"),
    ("move cost", "move_cost", "{:,.1f}"),
    ("constants placed", "constants_placed", "{:,}"),
    ("recomputes", "recomputes", "{:,}"),
    ("host tier open at the start", "tier_open_at_start", "{}"),
    ("constants starting in the host tier", "constants_on_host", "{:,}"),
    ("offloads to the host tier", "offloads", "{:,}"),
    ("constants copied out ahead", "copies_ahead", "{:,}"),
    ("copies back on demand", "fetches", "{:,}"),
    ("  prefetched", "prefetches", "{:,}"),
    ("bytes to the host", "bytes_d2h", "{:,}"),
    ("bytes from the host", "bytes_h2d", "{:,}"),
    ("copy time exposed", "copy_exposed", "{:,.1f}"),
    ("copy time hidden", "copy_hidden", "{:,.1f}"),
    ("host tier peak (bytes)", "host_peak_bytes", "{:,}"),
    ("searches", "searches", "{:,}"),
    ("search time (ms)", "search_time", "{:.3f}"),
    ("  sweeping the scan runs (ms)", "search_fill_time", "{:.3f}"),
    ("  two-pointer scans (ms)", "search_scan_time", "{:.3f}"),
    ("  the moving window's plans (ms)", "search_plan_time", "{:.3f}"),
    ("moving-window searches", "moving_searches", "{:,}"),
    ("  plans evaluated", "plans_evaluated", "{:,}"),
    ("  entries swept", "search_entries", "{:,}"),
    ("  pieces then", "search_pieces", "{:,}"),
    ("fragmentation rate", "fragmentation_rate", "{:.4f}"),
    ("largest free / free at failures", "largest_free_ratio", "{:.3f}"),
    ("peak used (bytes)", "peak_used_bytes", "{:,}"),
    ("records", "records", "{:,}"),
    ("replay time (s)", "wall_time", "{:.3f}"),
    ("records / s", "records_per_s", "{:,.0f}"),
]


def add_arguments(parser):
    parser.add_argument("trace", help="a coop trace (.jsonl) or a DTR simulator log")
    parser.add_argument("--budget", required=True,
                        help='a share of the unlimited peak ("0.5", "0.5x", "50%%") or a size '
                             '("6GiB", "512MB")')
    parser.add_argument("--policy", default="coop",
                        help=f"one or more, comma-separated, of: {', '.join(POLICIES)}")
    parser.add_argument("--format", choices=("coop", "dtr"), default=None,
                        help="the trace's format (default: sniffed from its first record)")
    parser.add_argument("--alignment", type=_alignment, default=None,
                        help="arena alignment in bytes (default: the trace's, else "
                             f"{R.DEFAULT_ALIGNMENT})")
    parser.add_argument("--thrash", type=_thrash, default=R.THRASH,
                        help="stop a run once its compute overhead passes this: a number >= 1, "
                             f"or 0: never (default {R.THRASH})")
    parser.add_argument("--host-budget", default=None,
                        help="bytes the host tier may hold (an offloading policy: coop-offload); "
                             "default: no limit")
    # None: not given (an option of the host tier, refused without an offloading policy)
    parser.add_argument("--lookahead", type=_lookahead, default=None,
                        help="ops ahead whose offloaded inputs come back early (an offloading "
                             f"policy), up to {MAX_LOOKAHEAD:,} (default "
                             f"{R.DEFAULT_LOOKAHEAD})")
    parser.add_argument("--device", choices=list(DEVICES), default=None,
                        help="the cost model whose host link prices copies to and from the "
                             "host (an offloading policy; default: the trace's)")
    parser.add_argument("--first-step", action="store_true",
                        help="replay as a live run's first step: an offloading policy's host "
                             "tier opens at the first choice that needs it (default: below the "
                             "trace's recompute-only lower bound it opens at the start, as a "
                             "training loop's later steps find it)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per policy")
    parser.add_argument("--timeline", metavar="OUT.html", default=None,
                        help="also draw each run's memory timeline as a self-contained HTML "
                             "page (several policies: OUT-<policy>.html)")
    parser.set_defaults(run=main)


def _alignment(text):
    """--alignment: a power of two in [1, 2**30]."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not valid_alignment(value):
        raise argparse.ArgumentTypeError(f"alignment must be a power of two in [1, 2**30] bytes "
                                         f"(e.g. 512), got {text!r}")
    return value


#: the longest --lookahead: the replayer holds it in a C int
MAX_LOOKAHEAD = 2**31 - 1


def _lookahead(text):
    """--lookahead: a number of ops in [0, MAX_LOOKAHEAD]."""
    try:
        value = int(text)
    except ValueError:     # not an integer, or more digits than Python reads
        value = -1
    if not 0 <= value <= MAX_LOOKAHEAD:
        raise argparse.ArgumentTypeError(f"--lookahead must be a number of ops >= 0 and at most "
                                         f"{MAX_LOOKAHEAD:,}, got {text[:80]!r}")
    return value


def _thrash(text):
    """--thrash: 0 (never), or a finite compute overhead >= 1: every completed run's is at
    least 1, so a limit below 1 would stop every run."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value == 0 or 1 <= value < math.inf):
        raise argparse.ArgumentTypeError(f"thrash must be a finite number >= 1, or 0 (never "
                                         f"stop): a run's compute overhead is at least 1.0 "
                                         f"(default {R.THRASH}), got {text[:80]!r}")
    return value


#: the longest budget text read: 2**62 bytes is 19 digits, a share's decimals need a few more
_BUDGET_CHARS = 100


def read_budget(text):
    """--budget: a Budget whose share is of the trace's unlimited peak; a bare number is a
    ratio."""
    _short(text, Budget("1", of="the trace's unlimited peak", bare="ratio"))
    return Budget(text, of="the trace's unlimited peak", bare="ratio")


def _short(text, example):
    """ValueError, naming the budget and the forms of example (a Budget), for a text too long
    to be one (and longer than Python reads a number from)."""
    if len(text) > _BUDGET_CHARS:
        raise ValueError(f"budget {text[:20]!r}...: {len(text):,} characters, more than any "
                         f"budget has (2**62 bytes is 19 digits); give {example.forms()}")


def _timeline_paths(args, policies):
    """(policy, path) of each page --timeline writes; UsageError, before any replay, for a path
    that cannot be written (a directory, a missing directory, no permission) or is empty."""
    if not args.timeline:
        raise UsageError("coop replay: --timeline names no file; give a path such as "
                         "out.html")
    stem, suffix = os.path.splitext(args.timeline)
    paths = [(p, args.timeline if len(policies) == 1 else f"{stem}-{p}{suffix or '.html'}")
             for p in policies]
    for _, path in paths:
        existed = os.path.lexists(path)
        try:
            with open(path, "a", encoding="utf-8"):
                pass
        except OSError as e:
            raise UsageError(f"coop replay: --timeline {path[:200]!r} cannot be written: "
                             f"{e.strerror or e}; give a file in a directory you can write") \
                from None
        if not existed:
            os.remove(path)
    return paths


def _timelines(args, program, results, paths, lower_bound_bytes):
    """Draw each result's run: the replay's budget, policy and host tier (--host-budget,
    --lookahead, --device), so that each page's figures are the table's."""
    from coop.trace import timeline
    for r, (_, path) in zip(results, paths):
        offload = POLICIES[r["policy"]].offload
        timeline.write(program, path, budget=r["budget_bytes"], policy=r["policy"],
                       alignment=args.alignment, thrash=args.thrash or None,
                       lower_bound_bytes=lower_bound_bytes,
                       host_budget=args.host_budget if offload else None,
                       lookahead=args.lookahead, device=args.device)
        print(f"timeline of {r['policy']}: {path}", file=sys.stderr if args.json else sys.stdout)


def main(args):
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    if not policies:
        raise UsageError(f"coop replay: --policy names no policy; choose from "
                         f"{', '.join(POLICIES)}")
    for p in policies:
        if p not in POLICIES:
            raise UsageError(f"coop replay: unknown policy {p[:80]!r}; choose from "
                             f"{', '.join(POLICIES)}")
    if len(set(policies)) != len(policies):
        raise UsageError(f"coop replay: a policy is named twice in {args.policy[:200]!r}")
    try:
        budget = read_budget(args.budget)
        nbytes = None if budget.is_share else budget.resolve()
    except ValueError as e:
        raise UsageError(f"coop replay: {e}") from None
    offloading = [p for p in policies if POLICIES[p].offload]
    if not offloading:
        # the host tier's options: without a policy that offloads they would change nothing
        for option, given in (("--host-budget", args.host_budget is not None),
                              ("--lookahead", args.lookahead is not None),
                              ("--device", args.device is not None),
                              ("--first-step", args.first_step)):
            if given:
                raise UsageError(f"coop replay: {option} needs an offloading policy "
                                 f"({', '.join(p for p in POLICIES if POLICIES[p].offload)})")
    if args.lookahead is None:
        args.lookahead = R.DEFAULT_LOOKAHEAD
    if args.host_budget is not None:
        try:
            _short(args.host_budget, Budget("1"))
            parse_budget(args.host_budget)
        except ValueError as e:
            raise UsageError(f"coop replay: --host-budget: {e}") from None
    paths = _timeline_paths(args, policies) if args.timeline is not None else None
    program, lines = load_lines(args.trace, args.format)
    base = R.unlimited(program, args.alignment)
    peak = base["peak_bytes"]
    align = R._alignment(program, args.alignment)
    if budget.is_share:
        try:
            budget.resolve(peak)
        except EmptyBudget as e:
            if peak <= align:
                # a good budget that this trace makes empty (it needs the smallest arena,
                # one aligned piece): not a usage error
                raise CoopError(str(e)) from None
            raise UsageError(f"coop replay: {e}") from None
        except ValueError as e:
            raise UsageError(f"coop replay: {e}") from None
        sized = dict(ratio=float(budget.share))
    else:
        if nbytes < align:
            raise UsageError(f"coop replay: budget {args.budget[:80]!r}: {nbytes:,} bytes is less "
                             f"than the arena's alignment, {align:,} bytes; give --budget "
                             f"{align}B or more (or a smaller --alignment)")
        sized = dict(budget=nbytes)
    lower_bound = 0 if args.first_step else base["lower_bound_bytes"]
    results = [R.replay(program, policy=policy, alignment=args.alignment,
                        thrash=args.thrash or None, peak_bytes=peak, lookahead=args.lookahead,
                        device=args.device,
                        host_budget=args.host_budget if POLICIES[policy].offload else None,
                        lower_bound_bytes=lower_bound, **sized)
               for policy in policies]
    if paths is not None:
        _timelines(args, program, results, paths, lower_bound)
    status = 0 if all(r["status"] == "ok" for r in results) else INCOMPLETE
    if args.json:
        for r in results:
            # a failed run's figures are a partial run's: no overhead, as the table's "-"
            print(json.dumps(r if r["status"] == "ok" else {**r, "compute_overhead": None}))
        return status
    print(f"trace {args.trace}: {program.n_records:,} records, {program.n_ops:,} ops; peak "
          f"{peak:,} bytes (ratio 1.0; the unlimited run used {base['peak_used_bytes']:,}), "
          f"lower bound {base['lower_bound_bytes'] / peak:.3f} of it, offload floor "
          f"{base['offload_floor_bytes'] / peak:.3f}; unlimited cost "
          f"{program.cost_first / 1e6:,.3f} ms")
    width = max(len(label) for label, _, _ in ROWS)
    print(f"{'':{width}}  " + "  ".join(f"{p:>14}" for p in policies))
    for label, key, fmt in ROWS:
        cells = [f"{_cell(r, key, fmt):>14}" for r in results]
        print(f"{label:{width}}  " + "  ".join(cells))
    for r in results:
        if r["status"] != "ok":
            print(failure(r, program.n_records, lines))
    return status


#: the phases of coop's window searches (docs/core.md, Counters)
_PHASES = ("search_fill_time", "search_scan_time", "search_plan_time")


def _cell(result, key, fmt):
    """A table cell: a failed run's figures are a partial run's, so it shows no overhead."""
    value = result[key]
    if value is None or (key == "compute_overhead" and result["status"] != "ok"):
        return "-"
    if key in _PHASES and result["searches"] and not any(result[k] for k in _PHASES):
        return "-"      # a loop policy: one pass per search, timed as a whole (search_time)
    if key.startswith("search_") and key.endswith("_time"):
        value *= 1e3
    return fmt.format(value)


def failure(result, n_records, lines=None):
    """One line: where a run that did not complete stopped, and why (lines: the trace's line
    number of each record, coop.trace.compile.load_lines's; a run that thrashed at its end
    stopped past the last record, on no line)."""
    record = result["failed_record"]
    where = f"{result['policy']}: {result['status']} at record {record:,} of {n_records:,}"
    if lines is not None and record < len(lines) and lines[record] is not None:
        where += f" (line {lines[record]:,})"
    if result["status"] == "oom":
        line = (f"{where}: a request of {result['failed_request']:,} bytes found no room within "
                f"the budget of {result['budget_bytes']:,} (largest free range "
                f"{result['failed_largest_free']:,} bytes; no choice made room")
        if result.get("failed_pinned") is None:
            return line + ")"
        verdict = ("the bytes fit: the addresses stopped it" if result["failed_bytes_fit"]
                   else "the bytes do not fit")
        refused = result.get("host_refusals") or 0
        host = (f"; the host tier was full and refused {refused:,} "
                f"constant{'' if refused == 1 else 's'} (raise --host-budget)" if refused else "")
        depth = result.get("failed_recompute_depth")
        inside = (f", {result['failed_recompute_pinned']:,} of them the inputs of a "
                  f"rematerialization's pending ops ({depth:,} deep of the "
                  f"{result['failed_recompute_planned']:,} it planned)" if depth else "")
        return (line + f": {result['failed_pinned']:,} bytes pinned or anonymous{inside}, "
                f"{result['failed_walls']:,} unevictable and unmovable, the largest range free "
                f"of both {result['failed_window']:,} bytes, {result['failed_constants']:,} "
                f"bytes of constants, which can only move, {result['failed_evictable']:,} "
                f"evictable bytes left; {verdict}{host})")
    return (f"{where}: the compute overhead passed --thrash "
            f"({result['compute_overhead']:.3f} when it stopped)")
