"""What the host link alone allows a training step whose optimizer updates after the backward
pass: a lower bound on any schedule's compute overhead at each budget, however it offloads,
prefetches or recomputes.

    python benchmarks/link_bound.py TRACE [TRACE ...] [--ratios 0.05,0.10,...] [--thrash 2.0]

The update (the ops of coop.optim's optimizers, from the first to the end of the trace) reads
every parameter, gradient and optimizer state: R bytes of constants (a storage registered as a
constant, or made one by `materialize`, before the update starts). At the update's start at
most B bytes (the budget) are on the device, so at least R - B bytes cross the host link
during the update, at the link's host-to-device rate, and nothing is left to hide them under
but the update's own compute c_U. Every other op runs at least once. So the step costs at
least

    C - c_U + max(c_U, (R - B) x h2d)

against its first-run cost C (the roofline's), an overhead of that over C. It is a bound, not
a schedule: the bytes the forward and backward passes must move (the parameters they read,
the gradients they make) and every recompute come on top of it. Printed per trace: C, c_U
and R, then the bound at each ratio of the trace's peak (the denominator `coop bench` uses),
and the smallest ratio at which the bound stays within the thrash limit (what no policy can
go below under it, whatever its tier does). The link's rate is the trace's `host_link`, else
its cost model's device's (docs/trace-format.md).
"""
import argparse

from coop.engine.cost import DEVICES
from coop.optim import UPDATE_KERNELS
from coop.trace.records import json_lines
from coop.trace.replay import unlimited


def update_reads(path):
    """(C, c_U, R, h2d ns per byte) of the trace at path: its first-run cost, its update's
    cost, the bytes of the distinct constants the update reads, and the link's rate. ValueError
    when the trace has no update at its end (an update inside the backward pass is not one
    phase, and this bound does not hold for it)."""
    sizes, constant = {}, set()
    cost_total = cost_update = 0.0
    reads = set()
    meta = {}
    in_update = False
    for _, rec in json_lines(path):
        op = rec["op"]
        if op == "meta":
            meta = rec
        elif op == "constant":
            sizes[rec["id"]] = rec["size"]
            if not in_update:
                constant.add(rec["id"])
        elif op == "materialize":
            if not in_update:
                constant.add(rec["id"])
        elif op in ("call", "mutate"):
            cost_total += rec["cost"]
            for out in rec.get("outputs", ()):
                if out.get("alias", -1) < 0:
                    sizes.setdefault(out["id"], out["size"])
            if rec["name"] in UPDATE_KERNELS:
                in_update = True
                cost_update += rec["cost"]
                reads.update(i for i in rec["inputs"] if i in constant)
            elif in_update:
                raise ValueError(f"{path}: op {rec['name']!r} after the update began: the "
                                 f"update is not one phase at the step's end")
    if not in_update:
        raise ValueError(f"{path}: no update (coop.optim's kernels) in the trace")
    if meta.get("host_link"):
        h2d = float(meta["host_link"][1])
    else:
        h2d = DEVICES.get(meta.get("cost_model"), DEVICES["a100-80gb"]).h2d_ns_per_byte
    return cost_total, cost_update, sum(sizes[i] for i in reads), h2d


def bound(cost, cost_update, read, h2d, budget):
    """The lower bound on the step's overhead at budget bytes."""
    link = max(read - budget, 0) * h2d
    return (cost - cost_update + max(cost_update, link)) / cost


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--ratios", default="0.05,0.10,0.15,0.20,0.25,0.30",
                    help="comma-separated ratios of each trace's peak")
    ap.add_argument("--thrash", type=float, default=2.0,
                    help="the thrash limit: overhead above it counts as failing (default 2.0)")
    args = ap.parse_args(argv)
    ratios = [float(r) for r in args.ratios.split(",")]
    head = ("| trace | compute ms | update ms | update reads GB | "
            + " | ".join(f"bound @{r:.2f}" for r in ratios)
            + f" | smallest ratio within {args.thrash} |")
    print(head)
    print("| --- |" + " ---: |" * (head.count("|") - 2))
    for path in args.traces:
        cost, cost_update, read, h2d = update_reads(path)
        peak = unlimited(path)["peak_bytes"]
        cells = [f"{bound(cost, cost_update, read, h2d, int(r * peak)):.3f}" for r in ratios]
        # the bound falls as the budget grows: the smallest ratio (in steps of 0.001) within
        # the thrash limit
        step = next((k / 1000 for k in range(1, 1001)
                     if bound(cost, cost_update, read, h2d, int(k / 1000 * peak))
                     <= args.thrash), None)
        name = path.rsplit("/", 1)[-1]
        print(f"| {name} | {cost / 1e6:.1f} | {cost_update / 1e6:.1f} | {read / 1e9:.2f} | "
              + " | ".join(cells) + f" | {'-' if step is None else f'{step:.3f}'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
