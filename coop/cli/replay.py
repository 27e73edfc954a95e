"""Replay a trace (coop's JSON lines, or a DTR simulator log) under a budget on the real arena
core, for one or more policies, and print docs/design.md's metrics.

A budget is a ratio of the trace's unlimited peak ("0.5") or a size with a unit ("6GiB").
Example: coop replay run.jsonl --budget 0.5 --policy coop,dtr,dtr-ideal
"""
import argparse
import json
import math
import os
import sys

from coop.trace import replay as R
from coop.budget import parse_budget
from coop.errors import UsageError
from coop.policies import POLICIES
from coop.trace import MAX_BYTES, valid_alignment

ROWS = [  # (label, key, format)
    ("status", "status", "{}"),
    ("budget (bytes)", "budget_bytes", "{:,}"),
    ("budget ratio", "ratio", "{:.3f}"),
    ("compute overhead", "compute_overhead", "{:.4f}"),
    ("evictions", "evictions", "{:,}"),
    ("bytes evicted", "bytes_evicted", "{:,}"),
    ("moves", "window_moves", "{:,}"),
    ("room made for kernels", "room_made", "{:,}"),
    ("  of which by compaction", "compactions", "{:,}"),
    ("bytes moved", "bytes_moved", "{:,}"),
    ("move cost", "move_cost", "{:,.1f}"),
    ("recomputes", "recomputes", "{:,}"),
    ("searches", "searches", "{:,}"),
    ("search time (ms)", "search_time", "{:.3f}"),
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
                        help="a ratio of the unlimited peak (0.5) or a size (6GiB, 512MB)")
    parser.add_argument("--policy", default="coop",
                        help=f"one or more, comma-separated, of: {', '.join(POLICIES)}")
    parser.add_argument("--format", choices=("coop", "dtr"), default=None,
                        help="the trace's format (default: sniffed from its first record)")
    parser.add_argument("--alignment", type=_alignment, default=None,
                        help="arena alignment in bytes (default: the trace's, else "
                             f"{R.DEFAULT_ALIGNMENT})")
    parser.add_argument("--thrash", type=_thrash, default=R.THRASH,
                        help="stop a run once its compute overhead passes this (0: never)")
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


def _thrash(text):
    """--thrash: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"thrash must be a finite number >= 0 (0: never stop), "
                                         f"got {text!r}")
    return value


def parse_ratio_or_size(text):
    """("ratio", float) for "0.5", ("bytes", int) for "6GiB"; ValueError naming the fix."""
    try:
        ratio = float(text)
    except ValueError:
        nbytes = parse_budget(text)
        if nbytes > MAX_BYTES:
            raise ValueError(f"budget {text!r} is more than an arena holds (2**62 bytes)") from None
        return "bytes", nbytes
    if not 0 < ratio < math.inf:
        raise ValueError(f"budget ratio {text!r} must be a finite number > 0 (a share of the "
                         "unlimited peak, e.g. 0.5), or give a size such as 6GiB")
    return "ratio", ratio


def _timelines(args, program, results):
    from coop.trace import timeline
    stem, suffix = os.path.splitext(args.timeline)
    for r in results:
        path = args.timeline if len(results) == 1 else f"{stem}-{r['policy']}{suffix or '.html'}"
        timeline.write(program, path, budget=r["budget_bytes"], policy=r["policy"],
                       alignment=args.alignment, thrash=args.thrash or None)
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
    try:
        kind, value = parse_ratio_or_size(args.budget)
    except ValueError as e:
        raise UsageError(f"coop replay: {e}") from None
    program = R.load(args.trace, args.format)
    base = R.unlimited(program, args.alignment)
    peak = base["peak_bytes"]
    if kind == "ratio" and value * peak > MAX_BYTES:
        raise UsageError(f"coop replay: budget ratio {args.budget!r} of the peak {peak:,} bytes "
                         "is more than an arena holds (2**62 bytes)")
    results = []
    for policy in policies:
        budget = dict(ratio=value) if kind == "ratio" else dict(budget=value)
        results.append(R.replay(program, policy=policy, alignment=args.alignment,
                                thrash=args.thrash or None, peak_bytes=peak, **budget))
    if args.timeline:
        _timelines(args, program, results)
    if args.json:
        for r in results:
            print(json.dumps(r))
        return 0
    print(f"trace {args.trace}: {program.n_records:,} records, {program.n_ops:,} ops; peak "
          f"{peak:,} bytes (ratio 1.0; the unlimited run used {base['peak_used_bytes']:,}), "
          f"lower bound {base['lower_bound_bytes'] / peak:.3f} of it; unlimited cost "
          f"{program.cost_first / 1e6:,.3f} ms")
    width = max(len(label) for label, _, _ in ROWS)
    print(f"{'':{width}}  " + "  ".join(f"{p:>14}" for p in policies))
    for label, key, fmt in ROWS:
        cells = []
        for r in results:
            value = r[key]
            if key == "search_time":
                value *= 1e3
            cells.append(f"{fmt.format(value) if value is not None else '-':>14}")
        print(f"{label:{width}}  " + "  ".join(cells))
    return 0
