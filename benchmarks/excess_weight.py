"""coop's window compared per byte it frees, at several weights of the bytes beyond the request:
what each weight does to the overhead against the DTR family and to the minimum budgets.

    python -m coop bench --out bench-out --policies coop --jobs 2     # records the nine traces
    python benchmarks/excess_weight.py bench-out/traces/*.jsonl --jobs 2 --png excess_weight.png

`Arena.excess_weight` w (docs/core.md, Moving, "The bytes beyond the request") compares each of
coop's windows by cost / (request + w * (bytes freed - request)); 0.0 is `coop`'s rule (the
cost alone), 1.0 the policy `coop-per-byte` (per byte, as DTR compares tensors). For each
weight of --weights this registers `coop` with that weight (as `coop-excess-W`, in this
script's processes only) and sweeps every trace under it, dtr and dte, exactly as `coop bench`
sweeps each (coop.cli.bench.sweep: the bench grid, 5 failures in a row), then prints one row
per weight: at how many of the ratios where it, dtr and dte all complete its overhead is above
min(dtr, dte) + 0.5% (`coop bench`'s claim against the DTR family), on how many models its
minimum feasible ratio is at most dtr's and dte's, and each model's minimum. --png draws both.
"""
import argparse
import dataclasses
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from coop.cli.bench import sweep  # noqa: E402
from coop.cli.claims import family_limit  # noqa: E402
from coop.engine.policies import POLICIES  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# the bench grid, the pool of sweeps and the arguments are grid_minima's
from grid_minima import (PATIENCE, STEP, check_traces, grid_of, model_name,  # noqa: E402
                         run_sweeps, trace_arguments)

FAMILY = ("dtr", "dte")


def policy_name(weight):
    return f"coop-excess-{weight:g}"


def register(weights):
    """coop with each weight, as a runtime policy of this process (coop's record otherwise)."""
    for w in weights:
        POLICIES.setdefault(policy_name(w), dataclasses.replace(
            POLICIES["coop"], name=policy_name(w), excess_weight=w))


def task(args):
    """One sweep: (model, policy, {ratio: (status, overhead)})."""
    path, policy, peak, ratios = args
    rows = sweep(model_name(path), path, policy, peak, ratios, PATIENCE)
    return model_name(path), policy, {r["ratio"]: (r["status"], r["compute_overhead"])
                                      for r in rows}


def measure(paths, weights, jobs, progress=True):
    """{model: {policy: {ratio: (status, overhead)}}} for dtr, dte and each weight's policy."""
    register(weights)
    policies = list(FAMILY) + [policy_name(w) for w in weights]
    tasks = []
    for path in paths:
        ratios, peak = grid_of(path)
        tasks += [(path, p, peak, ratios) for p in policies]
    runs = {}
    # spawned workers start from the package: they register the weights' policies too
    for model, policy, by_ratio in run_sweeps(task, tasks, jobs, progress, initializer=register,
                                              initargs=(weights,)):
        runs.setdefault(model, {})[policy] = by_ratio
    return runs


def minimum(by_ratio):
    ok = [r for r, (status, _) in by_ratio.items() if status == "ok"]
    return min(ok) if ok else None


def summarize(runs, policy):
    """(above, of, at_most, models, minima): the ratios where policy, dtr and dte all complete
    (of) and where policy's overhead is above the DTR-family claim's limit (claims.family_limit:
    min(dtr, dte) + 0.5%) (above); the
    models where policy's minimum is at most dtr's and dte's (at_most, of models: a policy
    that never completes has no minimum, and one that does is below it); each model's
    minimum."""
    above = of = at_most = 0
    minima = {}
    for model in sorted(runs):
        mine = runs[model][policy]
        for ratio, (status, overhead) in mine.items():
            family = [runs[model][p].get(ratio) for p in FAMILY]
            if status != "ok" or any(f is None or f[0] != "ok" for f in family):
                continue
            of += 1
            above += overhead > family_limit(family[0][1], family[1][1])
        minima[model] = minimum(mine)
        others = [minimum(runs[model][p]) for p in FAMILY]
        at_most += minima[model] is not None and all(o is None or minima[model] <= o + 1e-9
                                                     for o in others)
    return above, of, at_most, len(runs), minima


def table(runs, weights):
    models = sorted(runs)
    head = ["weight", "above min(dtr, dte) + 0.5%", "minimum <= dtr's and dte's"]
    head += [f"{m} min" for m in models]
    out = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for w in weights:
        above, of, at_most, n, minima = summarize(runs, policy_name(w))
        cells = [f"{w:g}", f"{above} of {of}", f"{at_most} of {n}"]
        cells += ["none" if minima[m] is None else f"{minima[m]:.2f}" for m in models]
        out.append("| " + " | ".join(cells) + " |")
    for p in FAMILY:
        cells = [p, "-", "-"] + ["none" if minimum(runs[m][p]) is None
                                 else f"{minimum(runs[m][p]):.2f}" for m in models]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def plot(runs, weights, png):
    models = sorted(runs)
    summaries = [summarize(runs, policy_name(w)) for w in weights]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
    left.plot(weights, [above / of if of else 0.0 for above, of, *_ in summaries], "o-")
    left.set_xlabel("excess_weight")
    left.set_ylabel("share of ratios above min(dtr, dte) + 0.5%")
    left.set_title("overhead against the DTR family")
    for m in models:
        ys = [minima[m] for *_, minima in summaries]
        right.plot(weights, [y if y is not None else float("nan") for y in ys], "o-", label=m)
    right.set_xlabel("excess_weight")
    right.set_ylabel("minimum feasible ratio")
    right.set_title("minimum budget (bench grid)")
    right.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    trace_arguments(p)
    p.add_argument("--weights", default="0,0.25,0.5,0.75,1",
                   help="comma-separated weights in [0, 1] (default 0,0.25,0.5,0.75,1)")
    args = p.parse_args(argv)
    try:
        weights = [float(w) for w in args.weights.split(",")]
    except ValueError:
        p.error(f"--weights: comma-separated numbers, got {args.weights!r}")
    if not weights or any(not 0.0 <= w <= 1.0 for w in weights):
        p.error(f"--weights: each must be a number in [0, 1], got {args.weights!r}")
    check_traces(p, args)
    runs = measure(args.traces, weights, args.jobs, progress=not args.no_progress)
    print(" ".join(["python"] + sys.argv))
    print(table(runs, weights))
    if args.png:
        plot(runs, weights, args.png)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
