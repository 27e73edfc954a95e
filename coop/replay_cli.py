"""Replay a trace (coop's JSON lines, or a DTR simulator log) under a budget on the real arena
core, for one or more policies, and print docs/design.md's metrics.

A budget is a ratio of the trace's unlimited peak ("0.5") or a size with a unit ("6GiB").
Example: coop replay run.jsonl --budget 0.5 --policy coop,dtr,dtr-ideal
"""
import json
import os
import sys

from coop import replay as R
from coop.budget import parse_budget
from coop.policies import POLICIES

ROWS = [  # (label, key, format)
    ("status", "status", "{}"),
    ("budget (bytes)", "budget_bytes", "{:,}"),
    ("budget ratio", "ratio", "{:.3f}"),
    ("compute overhead", "compute_overhead", "{:.4f}"),
    ("evictions", "evictions", "{:,}"),
    ("bytes evicted", "bytes_evicted", "{:,}"),
    ("moves (coop-move)", "window_moves", "{:,}"),
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
    parser.add_argument("--alignment", type=int, default=None,
                        help="arena alignment in bytes (default: the trace's, else "
                             f"{R.DEFAULT_ALIGNMENT})")
    parser.add_argument("--thrash", type=float, default=R.THRASH,
                        help="stop a run once its compute overhead passes this (0: never)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per policy")
    parser.add_argument("--timeline", metavar="OUT.html", default=None,
                        help="also draw each run's memory timeline as a self-contained HTML "
                             "page (several policies: OUT-<policy>.html)")
    parser.set_defaults(run=main)


def parse_ratio_or_size(text):
    """("ratio", float) for "0.5", ("bytes", int) for "6GiB"; ValueError naming the fix."""
    try:
        ratio = float(text)
    except ValueError:
        return "bytes", parse_budget(text)
    if not ratio > 0:
        raise ValueError(f"budget ratio {text!r} must be > 0 (a share of the unlimited peak, "
                         "e.g. 0.5), or give a size such as 6GiB")
    return "ratio", ratio


def _timelines(args, program, results):
    from coop import timeline
    stem, suffix = os.path.splitext(args.timeline)
    for r in results:
        path = args.timeline if len(results) == 1 else f"{stem}-{r['policy']}{suffix or '.html'}"
        timeline.write(program, path, budget=r["budget_bytes"], policy=r["policy"],
                       alignment=args.alignment, thrash=args.thrash or None)
        print(f"timeline of {r['policy']}: {path}", file=sys.stderr if args.json else sys.stdout)


def main(args):
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    for p in policies:
        if p not in POLICIES:
            raise SystemExit(f"coop replay: unknown policy {p!r}; choose from "
                             f"{', '.join(POLICIES)}")
    try:
        kind, value = parse_ratio_or_size(args.budget)
    except ValueError as e:
        raise SystemExit(f"coop replay: {e}") from None
    program = R.load(args.trace, args.format)
    base = R.unlimited(program, args.alignment)
    peak = base["peak_used_bytes"]
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
    print(f"trace {args.trace}: {program.n_records:,} records, {program.n_ops:,} ops; unlimited "
          f"peak {peak:,} bytes, lower bound {base['lower_bound_bytes'] / peak:.3f} of it; "
          f"unlimited cost {program.cost_first / 1e6:,.3f} ms")
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
