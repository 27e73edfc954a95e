"""Simulation-backend throughput: runtime ops per second of one paper-model training step.

For each model (default: resnet50, gpt2, bert_large), one training step at its paper batch
(forward, loss, backward, SGD with momentum; coop.models.paper's models and optimizers) runs on
coop.SimBackend with the a100-80gb roofline cost model, as coop.models.paper.training_step runs
it, without recording a trace: first at an unlimited budget (1 << 50 bytes), which gives the
peak arena use P, then at int(r * P) bytes for each --ratios r under each --policies policy.

Each point is run --repeat times on a fresh Runtime and SimBackend; building the model, the
optimizer and the inputs is not timed, only the step (mark_start .. optimizer step). Reported:
ops/s = the runtime's op count for the step (rt.stats()["ops"] after the step minus before it)
over the step's wall time (median over the repeats), the same with recomputes counted
("exec ops/s"), and the step's stats from rt.stats(): evictions, recomputes, compute overhead,
peak used bytes. The stats are deterministic; a point whose stats differ between repeats is
flagged. "oom" when the step raises coop.OutOfMemoryError.

Only coop.models.paper (PAPER_MODELS, OPTIMIZERS; training_step as a fallback), coop.Runtime,
coop.SimBackend, coop.OutOfMemoryError and rt.stats() are used, so the script runs against any
build that keeps them: put the build first on PYTHONPATH.

Run: python benchmarks/bench_sim.py [--repeat 5] [--models resnet50,gpt2,bert_large]
     [--policies coop] [--ratios 0.5] [--json out.json]
"""
import argparse
import gc
import json
import statistics
import sys
import time

import coop
from coop.models import paper

GiB = 1 << 30
UNLIMITED = 1 << 50
DEVICE = "a100-80gb"
STAT_KEYS = ("ops", "recomputes", "evictions", "compute_overhead", "peak_used_bytes")


def make_runtime(budget, policy):
    backend = coop.SimBackend(budget, ideal=(policy == "dtr-ideal"))
    return coop.Runtime(backend, policy=policy, cost=DEVICE)


def run_step(name, budget, policy, batch=None, optimizer="sgd"):
    """One training step of paper model `name` at `budget` bytes under `policy`, timed alone.
    Returns dict(status, wall, ops, recomputes, stats, timed) where ops/recomputes are the
    step's own counts (after minus before) and timed says what the wall time covers."""
    rt = make_runtime(budget, policy)
    models = getattr(paper, "PAPER_MODELS", None)
    optimizers = getattr(paper, "OPTIMIZERS", None)
    spec = models.get(name) if models is not None else None
    decomposed = (spec is not None and optimizers is not None and hasattr(spec, "build")
                  and hasattr(spec, "make_inputs"))
    gc.collect()
    status = "ok"
    if decomposed:
        # training_step's body, with the model, optimizer and inputs built before the clock
        model = spec.build(rt)
        opt = optimizers[optimizer](model.parameters())
        inputs = spec.make_inputs(rt, batch)
        before = rt.stats()
        t0 = time.perf_counter()
        try:
            rt.mark_start()
            loss = model.loss(*inputs)
            loss.backward()
            del loss
            opt.step()
        except coop.OutOfMemoryError:
            status = "oom"
        wall = time.perf_counter() - t0
        timed = "step"
    else:                               # a build without the pieces: time training_step whole
        before = rt.stats()
        t0 = time.perf_counter()
        try:
            paper.training_step(rt, name, batch, optimizer)
        except coop.OutOfMemoryError:
            status = "oom"
        wall = time.perf_counter() - t0
        timed = "build+step"
    after = rt.stats()
    return dict(status=status, wall=wall, timed=timed,
                ops=after["ops"] - before.get("ops", 0),
                recomputes=after.get("recomputes", 0) - before.get("recomputes", 0),
                stats={k: after.get(k) for k in STAT_KEYS})


def measure(name, budget, policy, repeat, batch, optimizer):
    runs = [run_step(name, budget, policy, batch, optimizer) for _ in range(repeat)]
    first = runs[0]
    same = all(r["status"] == first["status"] and r["ops"] == first["ops"]
               and r["recomputes"] == first["recomputes"] and r["stats"] == first["stats"]
               for r in runs)
    wall = statistics.median(r["wall"] for r in runs)
    return dict(model=name, policy=policy, budget_bytes=budget, status=first["status"],
                timed=first["timed"], wall_s=wall, walls=[r["wall"] for r in runs],
                ops=first["ops"], recomputes=first["recomputes"],
                ops_per_s=first["ops"] / wall if wall > 0 else float("nan"),
                exec_ops_per_s=(first["ops"] + first["recomputes"]) / wall if wall > 0 else float("nan"),
                evictions=first["stats"]["evictions"],
                compute_overhead=first["stats"]["compute_overhead"],
                peak_used_bytes=first["stats"]["peak_used_bytes"],
                deterministic=same)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=5, help="runs per point (median wall time)")
    p.add_argument("--models", default="resnet50,gpt2,bert_large",
                   help="comma-separated names of coop.models.paper.PAPER_MODELS")
    p.add_argument("--policies", default="coop", help="comma-separated policies for the ratios")
    p.add_argument("--ratios", default="0.5", help="comma-separated budget ratios of the peak")
    p.add_argument("--batch", type=int, default=None, help="override the paper's batch")
    p.add_argument("--optimizer", default="sgd")
    p.add_argument("--json", default=None, help="also write the rows as JSON to this path")
    args = p.parse_args(argv)
    print("command: python " + " ".join([sys.argv[0]] + (argv if argv is not None else sys.argv[1:])))
    print(f"coop {getattr(coop, '__version__', '?')} from {coop.__file__}; device {DEVICE}; "
          f"median of {args.repeat} runs; wall time of the step alone")
    models = args.models.split(",")
    policies = args.policies.split(",")
    ratios = [float(r) for r in args.ratios.split(",")]
    rows = []
    for name in models:
        base = measure(name, UNLIMITED, "coop", args.repeat, args.batch, args.optimizer)
        base["ratio"] = None
        rows.append(base)
        peak = base["peak_used_bytes"]
        for policy in policies:
            for ratio in ratios:
                row = measure(name, int(ratio * peak), policy, args.repeat, args.batch,
                              args.optimizer)
                row["ratio"] = ratio
                rows.append(row)
    header = (f"{'model':<11} {'policy':<9} {'ratio':>9} {'budget GiB':>10} {'status':<6} "
              f"{'ops':>6} {'wall ms':>8} {'ops/s':>9} {'exec ops/s':>10} {'evictions':>9} "
              f"{'recomputes':>10} {'overhead':>9} {'peak GiB':>8}")
    print(header)
    print("-" * len(header))
    for r in rows:
        ratio = "unlimited" if r["ratio"] is None else f"{r['ratio']:.2f}"
        flag = "" if r["deterministic"] else "  (stats differ between repeats)"
        flag += "" if r["timed"] == "step" else f"  (timed {r['timed']})"
        print(f"{r['model']:<11} {r['policy']:<9} {ratio:>9} {r['budget_bytes'] / GiB:>10.2f} "
              f"{r['status']:<6} {r['ops']:>6} {r['wall_s'] * 1e3:>8.1f} {r['ops_per_s']:>9,.0f} "
              f"{r['exec_ops_per_s']:>10,.0f} {r['evictions']:>9,} {r['recomputes']:>10,} "
              f"{r['compute_overhead']:>9.4f} {r['peak_used_bytes'] / GiB:>8.2f}{flag}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
        print(f"wrote {args.json}")
    return rows


if __name__ == "__main__":
    main()
