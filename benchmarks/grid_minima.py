"""Minimum feasible budgets over shifted grids: how much of a gap between two policies' minima
is the grid's.

    python -m coop bench --out bench-out --policies coop --jobs 2     # records the nine traces
    python benchmarks/grid_minima.py bench-out/traces/*.jsonl --jobs 2 --png grid_minima.png

A run's outcome is not monotone in the budget, so the minimum feasible ratio that `coop bench`
reports (the smallest ratio of its grid 1.00, 0.99, ... that completes, each policy swept until
5 failures in a row) moves by a few hundredths when the grid moves. For each trace and policy,
this sweeps --shifts grids, the bench's own and the ones shifted down by step/shifts, 2
step/shifts, ... (0.00125 apart with the defaults), exactly as `coop bench` sweeps each
(coop.cli.bench.sweep), and prints per model: each policy's minimum on the bench grid and its
mean (range) over the grids; and for each policy but the last (the reference, dtr-ideal by
default), its minimum minus the reference's on the same grid: the mean (range) over the grids
and on how many grids it is within --slack (0.02). --png draws the means with their ranges.
"""
import argparse
import multiprocessing
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from tqdm import tqdm  # noqa: E402

from coop.cli.bench import sweep, sweep_ratios  # noqa: E402
from coop.engine.policies import POLICIES  # noqa: E402
from coop.trace import replay as R  # noqa: E402

STEP = 0.01
PATIENCE = 5


def model_name(path):
    return os.path.basename(path).split("-")[0]


def grid_of(path):
    """The bench grid of a trace (ratios, largest first) and its unlimited peak in bytes."""
    base = R.unlimited(R.load(path))
    peak = base["peak_bytes"]     # ratio 1.0, as coop bench has it
    return sweep_ratios(STEP, base["lower_bound_bytes"] / peak), peak


def task(args):
    """The minimum feasible ratio of one (trace, policy, shift): None when none completes."""
    path, policy, peak, ratios, shift = args
    rows = sweep(model_name(path), path, policy, peak, ratios, PATIENCE)
    ok = [r["ratio"] for r in rows if r["status"] == "ok"]
    return path, policy, shift, (min(ok) if ok else None)


def run_sweeps(task, tasks, jobs, progress=True, initializer=None, initargs=()):
    """task over tasks, yielding each result as it comes, a progress bar counting them: in this
    process with jobs 1 (no pool: the tasks need not be picklable), else in a pool of jobs
    workers (spawned, each running initializer(*initargs) first, when an initializer is
    given)."""
    pool = None
    bar = tqdm(total=len(tasks), unit="sweep", disable=not progress)
    if jobs == 1:
        results = map(task, tasks)
    else:
        ctx = multiprocessing.get_context("spawn") if initializer else multiprocessing
        pool = ctx.Pool(jobs, initializer=initializer, initargs=initargs)
        results = pool.imap_unordered(task, tasks)
    try:
        for result in results:
            yield result
            bar.update()
    finally:
        bar.close()
        if pool is not None:
            pool.terminate()     # every task is done, or one failed: nothing left to wait for
            pool.join()


def measure(paths, policies, shifts, jobs, progress=True):
    """{path: {policy: [minimum on grid 0, 1, ...]}}."""
    tasks = []
    for path in paths:
        grid, peak = grid_of(path)
        for policy in policies:
            for k in range(shifts):
                tasks.append((path, policy, peak, [round(r - k * STEP / shifts, 6) for r in grid],
                              k))
    mins = {p: {q: [None] * shifts for q in policies} for p in paths}
    for path, policy, k, m in run_sweeps(task, tasks, jobs, progress):
        mins[path][policy][k] = m
    return mins


def trace_arguments(p):
    """The arguments every sweep script here takes: traces, --jobs, --png, --no-progress."""
    p.add_argument("traces", nargs="+", help="coop traces (e.g. a coop bench's traces/*.jsonl)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    p.add_argument("--png", default=None, help="write the figure as a PNG")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def check_traces(p, opts):
    """Refuse (p.error) a --jobs below 1 or a trace that is not a file."""
    if opts.jobs < 1:
        p.error(f"--jobs must be >= 1, got {opts.jobs}")
    missing = [t for t in opts.traces if not os.path.isfile(t)]
    if missing:
        p.error(f"no such trace: {missing[0]}")


def fmt(xs):
    ok = [x for x in xs if x is not None]
    if not ok:
        return "none"
    return f"{statistics.fmean(ok):.3f} ({min(ok):.2f}-{max(ok):.2f})"


def table(paths, mins, policies, shifts, slack):
    ref = policies[-1]
    head = ["model"] + [f"{p}: bench grid / mean (range)" for p in policies]
    head += [f"{p} - {ref}: mean (range), within +{slack:g}" for p in policies[:-1]]
    out = [f"Minimum feasible ratio over {shifts} grids (the bench's, then shifted down by "
           f"{STEP / shifts:g} each), each policy swept as `coop bench` sweeps it:", "",
           "| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for path in paths:
        m = mins[path]
        cells = [model_name(path)]
        for p in policies:
            first = "none" if m[p][0] is None else f"{m[p][0]:.2f}"
            cells.append(f"{first} / {fmt(m[p])}")
        for p in policies[:-1]:
            d = [a - b for a, b in zip(m[p], m[ref]) if a is not None and b is not None]
            if d:
                within = sum(x <= slack + 1e-9 for x in d)
                cells.append(f"{statistics.fmean(d):+.3f} ({min(d):+.2f} to {max(d):+.2f}), "
                             f"{within} of {len(d)}")
            else:
                cells.append("-")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def plot(paths, mins, policies, png):
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(policies)
    for i, p in enumerate(policies):
        means, lo, hi = [], [], []
        for path in paths:
            ok = [x for x in mins[path][p] if x is not None]
            mean = statistics.fmean(ok) if ok else 0.0
            means.append(mean)
            lo.append(mean - min(ok) if ok else 0.0)
            hi.append(max(ok) - mean if ok else 0.0)
        xs = [j + (i - (len(policies) - 1) / 2) * width for j in range(len(paths))]
        ax.bar(xs, means, width, yerr=[lo, hi], capsize=2, label=p)
    ax.set_xticks(range(len(paths)), [model_name(p) for p in paths], rotation=30, ha="right")
    ax.set_ylabel("minimum feasible ratio (mean, range)")
    ax.set_title("minimum feasible budget over shifted grids")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    trace_arguments(p)
    p.add_argument("--policies", default="coop,dtr,dte,dtr-ideal",
                   help="comma-separated; the last is the reference (default "
                        "coop,dtr,dte,dtr-ideal)")
    p.add_argument("--shifts", type=int, default=8, help="grids per policy (>= 1; default 8)")
    p.add_argument("--slack", type=float, default=0.02,
                   help="the margin over the reference counted as within (default 0.02)")
    opts = p.parse_args(argv)
    policies = [q.strip() for q in opts.policies.split(",") if q.strip()]
    unknown = [q for q in policies if q not in POLICIES]
    if unknown or len(policies) < 2:
        p.error(f"--policies needs two or more of {', '.join(POLICIES)}; got {opts.policies!r}")
    if opts.shifts < 1:
        p.error(f"--shifts must be >= 1, got {opts.shifts}")
    check_traces(p, opts)
    mins = measure(opts.traces, policies, opts.shifts, opts.jobs, not opts.no_progress)
    print(table(opts.traces, mins, policies, opts.shifts, opts.slack))
    if opts.png:
        plot(opts.traces, mins, policies, opts.png)
        print(f"\nwrote {opts.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
