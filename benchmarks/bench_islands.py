"""The islands workload (benchmarks/islands.py) replayed under shrinking budgets.

Writes the workload's trace (its default shape, or `--trace` replays another trace instead),
takes its unlimited run's peak P (ratio 1.0, as `coop bench` does), and replays it with the
real arena core (coop.trace.replay) under each policy at ratios 1.0, 1.0 - step, ... down to
`--min-ratio`, each with the thrash limit (overhead above 2.0 stops a run as `thrash`).

Prints, per policy and ratio: status, compute overhead, evictions (eager ones apart),
recomputes and the pieces coop's window moved; then per policy its minimum feasible ratio
(the smallest that completes; a failure above it is listed) and its overhead at 0.5, and
whether coop meets the workload's target: completing down to dtr-ideal's minimum + 0.05,
with its overhead at 0.5 within 5% of dtr-ideal's. Writes OUT/islands.jsonl (the trace),
OUT/table.md (what is printed) and OUT/overhead.png (overhead against ratio per policy).

Run: python benchmarks/bench_islands.py [--out islands-out] [--trace T.jsonl]
"""
import argparse
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from tqdm import tqdm  # noqa: E402

import coop.trace.replay as R  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from islands import write_islands  # noqa: E402

POLICIES = ("coop", "coop-no-move", "dtr", "dte", "dtr-ideal")
#: coop's target on this workload: its minimum within this of dtr-ideal's ...
MIN_SLACK = 0.05
#: ... and its overhead at 0.5 within this factor of dtr-ideal's
OVERHEAD_SLACK = 1.05


def ratios(step, lowest):
    """1.0, 1.0 - step, ... down to `lowest` (rounded, so 0.05 steps land on 0.15)."""
    out, k = [], 0
    while (r := round(1.0 - k * step, 6)) >= lowest - 1e-9:
        out.append(r)
        k += 1
    return out


def sweep(program, peak, policies, grid, progress=True):
    """{policy: [(ratio, metrics), ...]} for every policy and ratio."""
    runs = {p: [] for p in policies}
    with tqdm(total=len(policies) * len(grid), unit="replay", disable=not progress) as bar:
        for policy in policies:
            for ratio in grid:
                bar.set_postfix_str(f"{policy} {ratio:.2f}")
                runs[policy].append((ratio, R.replay(program, ratio=ratio, policy=policy,
                                                     peak_bytes=peak, thrash=R.THRASH)))
                bar.update()
    return runs


def minimum(results):
    """(smallest ratio that completes or None, the failed ratios above it)."""
    done = [r for r, m in results if m["status"] == "ok"]
    if not done:
        return None, []
    low = min(done)
    return low, [r for r, m in results if m["status"] != "ok" and r > low]


def at(results, ratio):
    """The metrics at `ratio` (None when it was not replayed)."""
    return next((m for r, m in results if abs(r - ratio) < 1e-9), None)


def report(runs, source, peak):
    """The printed table and summary, as markdown."""
    lines = [f"islands: {source}, peak {peak / (1 << 20):,.1f} MiB (ratio 1.0)", "",
             "| policy | ratio | status | overhead | evictions | eager | recomputes | moves |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for policy, results in runs.items():
        for ratio, m in results:
            lines.append(f"| {policy} | {ratio:.2f} | {m['status']} | "
                         f"{m['compute_overhead']:.3f} | {m['evictions']:,} | "
                         f"{m['eager_evictions']:,} | {m['recomputes']:,} | "
                         f"{m['window_moves']:,} |")
    lines += ["", "| policy | min feasible ratio | failed above it | overhead at 0.5 |",
              "| --- | ---: | --- | ---: |"]
    for policy, results in runs.items():
        low, above = minimum(results)
        half = at(results, 0.5)
        lines.append(f"| {policy} | {'none' if low is None else f'{low:.2f}'} | "
                     f"{', '.join(f'{r:.2f}' for r in above) or '-'} | "
                     f"{_overhead(half)} |")
    if "coop" in runs and "dtr-ideal" in runs:
        lines += ["", target(runs["coop"], runs["dtr-ideal"])]
    return "\n".join(lines) + "\n"


def _overhead(m):
    if m is None:
        return "not run"
    return f"{m['compute_overhead']:.3f}" if m["status"] == "ok" else m["status"]


def target(coop, ideal):
    """One line: whether coop completes down to dtr-ideal's minimum + MIN_SLACK, with its
    overhead at 0.5 within OVERHEAD_SLACK of dtr-ideal's."""
    low, _ = minimum(coop)
    ideal_low, _ = minimum(ideal)
    reach = low is not None and ideal_low is not None and low <= ideal_low + MIN_SLACK + 1e-9
    c, i = at(coop, 0.5), at(ideal, 0.5)
    close = (c is not None and i is not None and c["status"] == i["status"] == "ok"
             and c["compute_overhead"] <= OVERHEAD_SLACK * i["compute_overhead"])
    return (f"target: coop's minimum {'none' if low is None else f'{low:.2f}'} <= dtr-ideal's "
            f"{'none' if ideal_low is None else f'{ideal_low:.2f}'} + {MIN_SLACK}: "
            f"{'met' if reach else 'not met'}; coop's overhead at 0.5 {_overhead(c)} <= "
            f"{OVERHEAD_SLACK} x dtr-ideal's {_overhead(i)}: {'met' if close else 'not met'}")


def plot(runs, path, source):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for policy, results in runs.items():
        # a failed run is a gap in its policy's line, not a segment across it
        ax.plot([r for r, _ in results],
                [m["compute_overhead"] if m["status"] == "ok" else float("nan")
                 for _, m in results], marker="o", ms=3, label=policy)
    ax.set_xlabel("budget / unlimited peak")
    ax.set_ylabel("compute overhead (completed runs; gaps: failed)")
    ax.set_title(f"islands: {source}")
    ax.invert_xaxis()
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="islands-out", help="output directory")
    ap.add_argument("--trace", help="replay this trace instead of writing the workload's")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--step", type=float, default=0.05)
    ap.add_argument("--min-ratio", type=float, default=0.15)
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    if not 0 < a.step < 1 or not 0 < a.min_ratio <= 1:
        ap.error(f"--step must be in (0, 1) and --min-ratio in (0, 1], got {a.step} and "
                 f"{a.min_ratio}")
    os.makedirs(a.out, exist_ok=True)
    if a.trace:
        path, source = a.trace, os.path.basename(a.trace)
    else:
        path, source = os.path.join(a.out, "islands.jsonl"), "the workload's default shape"
        write_islands(path)
    program = R.load(path)
    peak = R.unlimited(program)["peak_bytes"]
    runs = sweep(program, peak, [p.strip() for p in a.policies.split(",") if p.strip()],
                 ratios(a.step, a.min_ratio), progress=not a.no_progress)
    text = report(runs, source, peak)
    print(text, end="")
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(text)
    plot(runs, os.path.join(a.out, "overhead.png"), source)
    print(f"wrote {a.out}/table.md and {a.out}/overhead.png")


if __name__ == "__main__":
    main()
