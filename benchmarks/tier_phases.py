"""Where a replay's host-link time goes: the forward pass, the backward pass and the optimizer's
update, each with its cost, the copy time the clock waited for and the bytes each way.

    python benchmarks/tier_phases.py TRACE --budget 0.10 [--policy coop-offload] [--lookahead 64]

replays TRACE (a coop trace of a training step, as `coop bench` records the paper models) as
`coop replay` does (below the recompute-only bound the tier opens at the start), record by
record, and charges each record's cost, exposed copy time and copies to its phase: the update
is every op of coop.optim's optimizers (`momentum_`, `sgd_apply_`, `adamw_`, ...), the backward
pass every other op from the first whose kernel is a `*_backward`, the forward pass the ops
before it; a record that is not an op (a constant, a release) goes with the phase it falls in.
With the updates inside the backward pass (`coop bench --optimizer sgd-in-backward`) the update
rows count the update ops wherever they run. Costs are in the trace's units (ns for the
roofline cost models), bytes as copied.
"""
import argparse
import os

from coop.budget import parse_budget
from coop.errors import OutOfMemoryError, Thrash
from coop.optim import UPDATE_KERNELS
from coop.trace.replay import (DEFAULT_ALIGNMENT, DEFAULT_LOOKAHEAD, load, make_replayer,
                               unlimited)

PHASES = ("forward", "backward", "update")


def phases(trace, budget=None, ratio=None, policy="coop-offload", lookahead=DEFAULT_LOOKAHEAD):
    """Replay trace (a path or Program) at budget bytes or ratio of its peak; returns (status,
    compute overhead, {phase: dict(records, ops, cost, exposed, bytes_d2h, bytes_h2d)})."""
    program = load(trace) if isinstance(trace, (str, os.PathLike)) else trace
    align = int(program.meta.get("alignment") or DEFAULT_ALIGNMENT)
    base = unlimited(program)
    nbytes = max(int(ratio * base["peak_bytes"]), align) if ratio is not None \
        else parse_budget(budget)
    _, replayer, _ = make_replayer(program, nbytes, policy, align, lookahead=lookahead,
                                   lower_bound_bytes=base["lower_bound_bytes"])
    names = program.names
    rows = {p: dict(records=0, ops=0, cost=0.0, exposed=0.0, bytes_d2h=0, bytes_h2d=0)
            for p in PHASES}
    before = (0.0, 0.0, 0, 0, 0)
    backward = False
    phase = "forward"
    status = "ok"
    try:
        for i in range(program.n_records):
            replayer.run(i, i + 1)
            counters, tier = replayer.counters(), replayer.engine.tier_counters()
            now = (counters["cost_total"], tier["copy_exposed"], tier["bytes_d2h"],
                   tier["bytes_h2d"], counters["ops"])
            row_op = now[4] > before[4]
            if row_op:
                name = names[now[4] - 1]
                backward = backward or name.endswith("_backward")
                phase = ("update" if name in UPDATE_KERNELS
                         else "backward" if backward else "forward")
            row = rows[phase]
            row["records"] += 1
            row["ops"] += row_op
            row["cost"] += now[0] - before[0]
            row["exposed"] += now[1] - before[1]
            row["bytes_d2h"] += now[2] - before[2]
            row["bytes_h2d"] += now[3] - before[3]
            before = now
        replayer.finish()
    except OutOfMemoryError:
        status = "oom"
    except Thrash:
        status = "thrash"
    total = replayer.counters()["cost_total"]
    return status, total / program.cost_first if program.cost_first else 1.0, rows


def table(rows):
    lines = ["| phase | records | ops | cost (ms) | of it copies exposed (ms) | GB to the host "
             "| GB from the host |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in PHASES + ("step",):
        if name == "step":
            row = {k: sum(rows[p][k] for p in PHASES) for k in rows["forward"]}
        else:
            row = rows[name]
        lines.append(f"| {name} | {row['records']:,} | {row['ops']:,} | {row['cost'] / 1e6:.1f} "
                     f"| {row['exposed'] / 1e6:.1f} | {row['bytes_d2h'] / 1e9:.2f} "
                     f"| {row['bytes_h2d'] / 1e9:.2f} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--budget", required=True,
                    help='a share of the trace\'s peak ("0.1") or a size ("1GiB")')
    ap.add_argument("--policy", default="coop-offload")
    ap.add_argument("--lookahead", type=int, default=DEFAULT_LOOKAHEAD)
    args = ap.parse_args(argv)
    try:
        ratio, budget = float(args.budget), None
    except ValueError:
        ratio, budget = None, args.budget
    status, overhead, rows = phases(args.trace, budget=budget, ratio=ratio, policy=args.policy,
                                    lookahead=args.lookahead)
    print(f"{args.trace} at {args.budget} under {args.policy}: {status}, compute overhead "
          f"{overhead:.3f}")
    print(table(rows))


if __name__ == "__main__":
    main()
