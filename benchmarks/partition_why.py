"""Partitioning measured: policy coop (partitioned placement) against coop-no-partition.

    python -m coop bench --out bench-out --policies coop --jobs 2     # records the nine traces
    python benchmarks/partition_why.py bench-out/traces/*.jsonl --png docs/bench/partition.png

Per trace, for coop and coop-no-partition:
- the minimum feasible budget ratio as `coop bench` finds it (ratios 1.00, 0.99, ... until 5
  failures in a row), and its mean over --shifts grids shifted by step/shifts (0, 0.00125, ...
  with 8): a run's outcome is not monotone in the budget, so one grid's minimum moves by a few
  hundredths with the grid; the mean over shifted grids is what a placement rule changes;
- the compute overhead at 0.5 and the geometric mean of coop's over coop-no-partition's at the
  bench grid's ratios where both complete;
- the ratios of the bench grid where one completes and the other fails (OOM or thrash).
--classes rewrites the ops' classes (the trace's `cls`) before coop replays them, to try other
rules for which end a tensor takes: `recorded` (as recorded: the kernel's type), `flip` (cheap
at the low end, expensive at the high end), `lifetime` (outputs that outlive the trace's median
lifetime, in records from definition to release, at the low end; the others at the high end),
`density` (expensive when the op's cost per output byte is >= 1 ns/B, as
`Runtime(classifier="density")`). coop-no-partition places every output as EXPENSIVE anyway.
Then, per OOM at such a ratio (the failing policy first): the request that failed, and the
largest range free of *walls* (constants, kernels' temporaries and the running ops' pinned
inputs; an upper bound, as the running op's outputs placed so far are not counted) at the
failure, against the same range, for the same pinned values, just before the same op under the
policy that completed; and where the pinned values lie, per tenth of the arena, under each.
"""
import argparse
import math
import os
import re
import statistics
import sys

from tqdm import tqdm

from coop.trace import replay as R
from coop._core import Arena
from coop.errors import Thrash
from coop.trace._replay import Replayer
from coop.cli.bench import sweep_ratios
from coop.errors import OutOfMemoryError
from coop.trace import compile_program, read_records

POLICIES = ("coop", "coop-no-partition")
CLASSES = ("recorded", "flip", "lifetime", "density")
STEP = 0.01
PATIENCE = 5
MiB = 2 ** 20


class Ops:
    """A coop trace's ops in program order: each op's input values and name, and each value's
    producing op, with values numbered as coop.trace.compile_program numbers them (dense, in
    order of definition; what the records before `start` leave referenced comes first)."""

    def __init__(self, path):
        records = [r for _, r in read_records(path)]
        start = max((i for i, r in enumerate(records) if r["op"] == "start"), default=-1)
        prefix = {}
        for r in records[:start]:
            if r["op"] == "constant":
                prefix[r["id"]] = True
            elif r["op"] == "call":
                for out in _outputs(r):
                    prefix.setdefault(out["id"], True)
            elif r["op"] == "release":
                prefix.pop(r["id"], None)
        index = {tid: n for n, tid in enumerate(prefix)}
        n = len(index)
        self.inputs, self.names, self.producer = [], [], {}
        for r in records[start + 1:]:
            if r["op"] == "constant":
                index[r["id"]], n = n, n + 1
            elif r["op"] in ("call", "mutate"):
                t = len(self.inputs)
                self.inputs.append([index[i] for i in r["inputs"]])
                self.names.append(r["name"])
                seen = set()     # an id repeated among a call's outputs is a view of the first
                for out in _outputs(r) if r["op"] == "call" else []:
                    if out["id"] not in seen:
                        seen.add(out["id"])
                        index[out["id"]], n = n, n + 1
                        self.producer[index[out["id"]]] = t


def _outputs(record):
    return [o for o in record.get("outputs", []) if o.get("alias", -1) < 0]


def load(path, classes="recorded"):
    """The trace at path compiled, its ops' classes rewritten by the rule `classes`."""
    records = list(read_records(path))
    ops = [r for _, r in records if r.get("op") in ("call", "mutate")]
    if classes == "flip":
        for r in ops:
            r["cls"] = "expensive" if r.get("cls") == "cheap" else "cheap"
    elif classes == "lifetime":
        born, life = {}, {}
        for i, (_, r) in enumerate(records):
            if r.get("op") in ("call", "mutate"):
                for o in _outputs(r):
                    born[o["id"]] = i
            elif r.get("op") == "release" and r["id"] in born:
                life.setdefault(r["id"], i - born[r["id"]])
        for tid, i in born.items():
            life.setdefault(tid, len(records) - i)
        median = statistics.median(life.values()) if life else 0
        for r in ops:
            longest = max((life[o["id"]] for o in _outputs(r)), default=0)
            r["cls"] = "expensive" if longest > median else "cheap"
    elif classes == "density":
        for r in ops:
            nbytes = sum(o["size"] for o in _outputs(r))
            r["cls"] = "expensive" if not nbytes or r["cost"] / nbytes >= 1.0 else "cheap"
    return compile_program(records, str(path))


def replayer(program, peak, ratio, policy):
    align = int(program.meta.get("alignment") or R.DEFAULT_ALIGNMENT)
    arena = Arena(max(int(ratio * peak), align), align)
    return Replayer(program, arena, policy, R.THRASH * program.cost_first,
                    R.copy_cost(program)), arena


def walls(arena, pinned):
    """(offset, size) of the used pieces no window may take: anonymous, unevictable, pinned."""
    out = []
    for offset, size, free, sid in arena.pieces():
        if free:
            continue
        if sid < 0 or sid in pinned or not arena.storage_info(sid)["evictable"]:
            out.append((offset, size))
    return out


def largest_gap(ws, capacity):
    best, start = 0, 0
    for offset, size in ws:
        best, start = max(best, offset - start), offset + size
    return max(best, capacity - start)


def tenths(arena, sids):
    """How many of the storages sids lie in each tenth of the arena (by offset), as text."""
    counts = [0] * 10
    for s in sids:
        info = arena.storage_info(s)
        if info["resident"]:
            counts[min(9, info["offset"] * 10 // arena.capacity)] += 1
    return " ".join(map(str, counts))


def pinned_values(ops, rp, t):
    """The values pinned when op t (or a recompute it started) ran out of memory: t's inputs
    and, for each evicted one, its producer's inputs, recursively, that are resident."""
    e, out, todo, seen = rp.engine, set(), [t], set()
    while todo:
        u = todo.pop()
        if u in seen:
            continue
        seen.add(u)
        for v in ops.inputs[u]:
            s = rp.storage_of(v)
            if s < 0:
                continue
            if e.resident(s):
                out.add(v)
            elif v in ops.producer:
                todo.append(ops.producer[v])
    return out


def why(program, ops, peak, ratio, bad, good):
    """The failing request of `bad` at ratio, the largest wall-free range then, and under `good`
    just before the same op (None if `bad` did not run out of memory: it completed or thrashed)."""
    rp, arena = replayer(program, peak, ratio, bad)
    try:
        rp.run()
        rp.finish()
        return None
    except OutOfMemoryError as err:
        message = str(err)
    except Thrash:
        return None
    t = rp.last_op
    values = pinned_values(ops, rp, t)
    sids = {rp.storage_of(v) for v in values}
    gap_bad = largest_gap(walls(arena, sids), arena.capacity)
    # the record that runs op t: replay `good` until its last op is t, then again up to there
    probe, _ = replayer(program, peak, ratio, good)
    i = 0
    while probe.last_op != t:
        probe.run(i, i + 1)
        i += 1
    rp2, arena2 = replayer(program, peak, ratio, good)
    rp2.run(0, i - 1)
    sids2 = {rp2.storage_of(v) for v in values} - {-1}
    gap_good = largest_gap(walls(arena2, sids2), arena2.capacity)
    request = int(re.search(r"allocate (\d+) bytes", message).group(1))
    return {"op": ops.names[t], "request": request, "pinned": len(values),
            "gap_bad": gap_bad, "gap_good": gap_good,
            "tenths_bad": tenths(arena, sids), "tenths_good": tenths(arena2, sids2)}


def sweep(program, peak, policy, ratios):
    """{ratio: (status, overhead)} down the ratios until PATIENCE failures in a row."""
    out, failures = {}, 0
    for r in ratios:
        m = R.replay(program, ratio=r, policy=policy, peak_bytes=peak, thrash=R.THRASH)
        out[r] = (m["status"], m["compute_overhead"])
        failures = failures + 1 if m["status"] != "ok" else 0
        if failures >= PATIENCE:
            break
    return out


def min_ratio(runs):
    return min((r for r, (status, _) in runs.items() if status == "ok"), default=None)


def measure(path, shifts, classes, bar):
    program = load(path, classes)
    base = R.unlimited(load(path))     # ratio 1.0 as coop bench has it, whatever the classes
    peak = base["peak_bytes"]
    grid = sweep_ratios(STEP, base["lower_bound_bytes"] / peak)
    row = {"model": os.path.basename(path).split("-")[0], "runs": {}, "mins": {}}
    for policy in POLICIES:
        mins = []
        for k in range(shifts):
            ratios = [round(r - k * STEP / shifts, 6) for r in grid]
            runs = sweep(program, peak, policy, ratios)
            if k == 0:
                row["runs"][policy] = runs
            mins.append(min_ratio(runs))
            bar.update()
        row["mins"][policy] = mins
    a, b = (row["runs"][p] for p in POLICIES)
    both = [r for r in a if r in b and a[r][0] == "ok" and b[r][0] == "ok"]
    row["overhead_gmean"] = math.exp(statistics.fmean(math.log(a[r][1] / b[r][1])
                                                      for r in both)) if both else None
    row["only"] = {p: [r for r in a if r in b and (a, b)[i][r][0] == "ok"
                       and (b, a)[i][r][0] != "ok"] for i, p in enumerate(POLICIES)}
    ops = Ops(path)
    row["why"] = []
    for i, good in enumerate(POLICIES):
        bad = POLICIES[1 - i]
        for r in row["only"][good]:
            w = why(program, ops, peak, r, bad, good)
            if w is not None:
                row["why"].append({"ratio": r, "fails": bad, **w})
    return row


def fmt_min(mins):
    ok = [m for m in mins if m is not None]
    first = "none" if mins[0] is None else f"{mins[0]:.2f}"
    if not ok:
        return first, "none"
    return first, f"{statistics.fmean(ok):.3f} ({min(ok):.3f}-{max(ok):.3f})"


def fmt_at(runs, ratio):
    status, overhead = runs.get(ratio, (None, None))
    return "-" if status is None else f"{overhead:.3f}" if status == "ok" else status


def tables(rows, shifts, classes):
    out = [f"coop's op classes: {classes}. Minimum feasible ratio: the bench grid's, and the mean (range) over {shifts} "
           f"grids shifted by {STEP / shifts:g}; compute overhead at 0.5; coop's overhead over "
           "coop-no-partition's (geometric mean where both complete); ratios where only one "
           "completes:", "",
           "| model | coop min | no-partition min | coop mean | no-partition mean | "
           "overhead @0.5 coop / no-partition | overhead coop/no-partition | only coop | "
           "only no-partition |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for row in rows:
        (c0, cm), (n0, nm) = (fmt_min(row["mins"][p]) for p in POLICIES)
        g = row["overhead_gmean"]
        out.append(f"| {row['model']} | {c0} | {n0} | {cm} | {nm} | "
                   f"{fmt_at(row['runs']['coop'], 0.5)} / "
                   f"{fmt_at(row['runs']['coop-no-partition'], 0.5)} | "
                   f"{'-' if g is None else f'{g:.3f}'} | "
                   + " | ".join(", ".join(f"{r:.2f}" for r in row["only"][p]) or "-"
                                for p in POLICIES) + " |")
    out += ["", "Each OOM at a ratio where the other policy completes: the op, the request, the "
            "pinned values, the largest range free of walls (constants, temporaries, pinned "
            "inputs) at the failure and, for the same values, before the same op under the "
            "policy that completed; and how many of the pinned values lie in each tenth of the "
            "arena, low to high, under each:", "",
            "| model | ratio | fails | op | request MiB | pinned | largest wall-free MiB "
            "(failing) | (completing) | pinned per tenth (failing) | (completing) |",
            "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | --- | --- |"]
    for row in rows:
        for w in row["why"]:
            out.append(f"| {row['model']} | {w['ratio']:.2f} | {w['fails']} | {w['op']} | "
                       f"{w['request'] / MiB:,.1f} | {w['pinned']} | {w['gap_bad'] / MiB:,.1f} "
                       f"| {w['gap_good'] / MiB:,.1f} | {w['tenths_bad']} | {w['tenths_good']} |")
    return "\n".join(out)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.38
    for k, policy in enumerate(POLICIES):
        means = [statistics.fmean([m for m in row["mins"][policy] if m is not None] or [0.0])
                 for row in rows]
        ax.bar([i + (k - 0.5) * width for i in range(len(rows))], means, width, label=policy)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([row["model"] for row in rows], rotation=30, ha="right")
    ax.set_ylabel("mean minimum feasible ratio (lower is better)")
    ax.set_title("partitioned placement (coop) and not (coop-no-partition)")
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"saved {path}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("traces", nargs="+", help="coop traces (e.g. a coop bench's traces/*.jsonl)")
    p.add_argument("--shifts", type=int, default=8, help="shifted grids per policy (>= 1)")
    p.add_argument("--classes", choices=CLASSES, default="recorded",
                   help="the rule that classes coop's ops (default: as recorded)")
    p.add_argument("--png", default=None, help="write the mean minimum ratios as a bar chart")
    opts = p.parse_args(argv)
    if opts.shifts < 1:
        p.error(f"--shifts must be >= 1, got {opts.shifts}")
    print("command: python benchmarks/partition_why.py",
          " ".join(sys.argv[1:] if argv is None else argv))
    bar = tqdm(total=len(opts.traces) * len(POLICIES) * opts.shifts, unit="sweep")
    rows = []
    for path in opts.traces:
        bar.set_postfix_str(os.path.basename(path))
        rows.append(measure(path, opts.shifts, opts.classes, bar))
    bar.close()
    print(tables(rows, opts.shifts, opts.classes))
    if opts.png:
        plot(rows, opts.png)


if __name__ == "__main__":
    main()
