"""`coop bench`: sweep budget ratios x policies over the paper's models (and any traces given)
with the trace replayer (coop.trace.replay: the real arena core), and report docs/design.md's metrics.

Each paper model is recorded once (one training step at its paper batch, simulation backend,
a100-80gb roofline costs, SGD with momentum or, with --optimizer adamw, AdamW: two moments per
parameter; with --optimizer sgd-in-backward or adamw-in-backward, each parameter is updated
inside the backward pass once its gradient is complete) into OUT/traces/ (reused unless --rerecord); extra traces (coop traces or DTR logs)
are given as paths. Per model, the unlimited run gives the peak (ratio 1.0), docs/design.md's
lower bound and its offload floor. Each policy then replays at ratios 1.00, 0.99, ... (--step)
until it has failed (OOM or thrash: overhead > 2.0) at --patience consecutive ratios, or the
ratio falls below the lower bound - 0.05 (never below 0.01); 0.5 and 0.3 are always tried when
above that floor. Runs are not always monotone in the budget: a policy can fail at a ratio and
complete at a smaller one, so the minimum feasible ratio (the smallest that completes) comes
with the failures seen above it.

Writes runs.csv and runs.json (one row per replay), summary.json (per model and policy, and
the paper's claims per model, checked, never tuned: coop's minimum budget no higher than dtr's
and dte's, and within 0.02 of dtr-ideal's; coop's overhead at most min(dtr, dte) + 0.5% at
every ratio where all three complete, each exception with its cause measured by coop-no-move at
its ratio; coop never worse than each ablation; a lower
fragmentation rate than dtr's and dte's; dtr searching at least 3x longer at ratio 0.3),
tables.md (printed too) and four PNGs: overhead, fragmentation, search_time, min_budget.
Example: coop bench --out bench-out --jobs 2
"""
import csv
import json
import math
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

from tqdm import tqdm

from coop.cli.claims import MARKS, summarize
from coop.cli.report import plot_all, tables
from coop.engine.cost import DEVICES
from coop.engine.policies import POLICIES
from coop.errors import UsageError
from coop.models.paper import OPTIMIZERS, PAPER_MODELS, record_trace
from coop.trace import replay as R

DEFAULT_POLICIES = ("coop", "dtr", "dte", "lru", "dtr-ideal", "coop-no-move",
                    "coop-no-partition", "coop-no-inplace", "coop-loop")
#: batch size of every model under --quick (the test suite's setting)
QUICK_BATCH = 2
#: how far below the lower bound a sweep goes
BELOW_BOUND = 0.05
#: the smallest --step: 10,000 ratios per sweep
MIN_STEP = 1e-4
#: first columns of runs.csv; the replay's metrics follow, in coop.trace.replay.replay's order
LEAD = ("model", "policy", "ratio", "budget_bytes")


def add_arguments(parser):
    parser.add_argument("traces", nargs="*",
                        help="extra traces to sweep: coop traces (.jsonl) or DTR simulator logs")
    parser.add_argument("--models", default=",".join(PAPER_MODELS),
                        help="comma-separated paper models, or 'none' (default: all nine)")
    parser.add_argument("--policies", default=",".join(DEFAULT_POLICIES),
                        help=f"comma-separated, of: {', '.join(POLICIES)}")
    parser.add_argument("--step", type=float, default=0.01, help="ratio step (default 0.01)")
    parser.add_argument("--patience", type=int, default=5,
                        help="stop a policy's sweep after this many failures in a row")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="worker processes (default: the CPU count)")
    parser.add_argument("--out", default="bench-out", help="output directory")
    parser.add_argument("--quick", action="store_true",
                        help=f"record the models at batch {QUICK_BATCH} (for tests)")
    parser.add_argument("--optimizer", choices=list(OPTIMIZERS), default="sgd",
                        help="the paper models' optimizer: sgd (momentum 0.9: one state tensor "
                             "per parameter) or adamw (two), or either with -in-backward (each "
                             "parameter updated inside the backward pass as soon as its gradient "
                             "is complete, Optimizer.backward_step); default sgd")
    parser.add_argument("--device", choices=list(DEVICES), default="a100-80gb",
                        help="the cost model the paper models are recorded with: its roofline "
                             "prices the ops, its host link the copies of an offloading policy "
                             "(default a100-80gb)")
    parser.add_argument("--rerecord", action="store_true",
                        help="record the models' traces even when OUT/traces has them")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(run=main)


def _names(text, known, what):
    names = [n.strip() for n in text.split(",") if n.strip()]
    if what == "model" and names == ["none"]:
        return []
    if what == "model" and not names:
        raise UsageError(f"coop bench: --models names no model; give paper models from "
                         f"{', '.join(known)}, or 'none' for the traces alone")
    for n in names:
        if n not in known:
            raise UsageError(f"coop bench: unknown {what} {n[:80]!r}; choose from "
                             f"{', '.join(known)}")
    if len(set(names)) != len(names):
        raise UsageError(f"coop bench: a {what} is named twice in {text[:200]!r}")
    return names


def check(args):
    """(models, policies) from args; UsageError naming the first bad argument."""
    models = _names(args.models, list(PAPER_MODELS), "model")
    policies = _names(args.policies, list(POLICIES), "policy")
    if not policies:
        raise UsageError("coop bench: --policies names no policy")
    if not MIN_STEP <= args.step < 1:
        raise UsageError(f"coop bench: --step must be in [{MIN_STEP:g}, 1), got {args.step}")
    if args.patience < 1:
        raise UsageError(f"coop bench: --patience must be >= 1, got {args.patience}")
    if args.jobs < 1:
        raise UsageError(f"coop bench: --jobs must be >= 1, got {args.jobs}")
    for path in args.traces:
        if not os.path.isfile(path):
            raise UsageError(f"coop bench: trace {path!r} is not a file")
    if not models and not args.traces:
        raise UsageError("coop bench: nothing to sweep (--models none and no traces)")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"coop bench: --out {args.out!r} is a file, not a directory")
    return models, policies


# ---- sources: record or load, then the unlimited run ---------------------------------------------

def prepare(models, traces, out, quick=False, rerecord=False, optimizer="sgd",
            device="a100-80gb"):
    """Per source (a model or a trace), in order: name, kind, trace path, batch, optimizer
    (None for a trace) and its unlimited run (peak, lower bound, offload floor, cost). Models
    are recorded into out/traces/ first, with `optimizer` (a coop.models.paper.OPTIMIZERS
    name)."""
    folder = os.path.join(out, "traces")
    os.makedirs(folder, exist_ok=True)
    sources = []
    for name in models:
        batch = QUICK_BATCH if quick else PAPER_MODELS[name].batch
        # the optimizer names the file (but sgd's): a reused trace is always the one asked for
        tag = ("" if optimizer == "sgd" else f"-{optimizer}") + \
            ("" if device == "a100-80gb" else f"-{device}")
        path = os.path.join(folder, f"{name}-b{batch}{tag}.jsonl")
        if rerecord or not os.path.isfile(path):
            record_trace(name, path + ".tmp", batch=batch, optimizer=optimizer, device=device)
            os.replace(path + ".tmp", path)    # a killed run leaves no half trace to reuse
        sources.append({"name": name, "kind": "model", "path": path, "batch": batch,
                        "optimizer": optimizer})
    taken = set(models)
    for path in traces:
        stem = base = os.path.splitext(os.path.basename(path))[0]
        k = 2
        while stem in taken:
            stem, k = f"{base}-{k}", k + 1
        taken.add(stem)
        sources.append({"name": stem, "kind": "trace", "path": os.path.abspath(path),
                        "batch": None, "optimizer": None})
    for s in sources:
        program = R.load(s["path"])
        base = R.unlimited(program)
        peak = base["peak_bytes"]    # ratio 1.0: every policy but none completes there
        s.update(records=program.n_records, ops=program.n_ops, cost_first=program.cost_first,
                 peak_bytes=peak, peak_used_bytes=base["peak_used_bytes"],
                 lower_bound_bytes=base["lower_bound_bytes"],
                 lower_bound_ratio=base["lower_bound_bytes"] / peak if peak else 0.0,
                 offload_floor_bytes=base["offload_floor_bytes"],
                 offload_floor_ratio=base["offload_floor_bytes"] / peak if peak else 0.0,
                 unlimited_wall_time=base["wall_time"])
    return sources


def sweep_ratios(step, lower_bound_ratio):
    """1.0, 1.0 - step, ... down to max(lower bound - 0.05, 0.01), plus MARKS above that (an
    offloading policy's sweep is given the offload floor as its bound)."""
    floor = max(lower_bound_ratio - BELOW_BOUND, 0.01)
    ratios, k = [], 0
    while (r := round(1.0 - k * step, 6)) >= floor - 1e-9:
        ratios.append(r)
        k += 1
    ratios += [m for m in MARKS if m >= floor - 1e-9 and all(abs(m - r) > 1e-9 for r in ratios)]
    return sorted(ratios, reverse=True)


# ---- the sweep (one task per source and policy; runs in a worker process) ------------------------

_programs = {}   # trace path -> Program, per worker process (a worker serves many tasks)


def sweep(name, path, policy, peak, ratios, patience, lower_bound=None):
    """Replay one source under one policy at each ratio, largest first, until `patience`
    failures in a row, and then at the MARKS left (0.5 and 0.3 are always tried: runs are not
    monotone in the budget); returns one row per replay. lower_bound: the source's
    recompute-only lower bound in bytes (None: from its unlimited run, where a replay needs
    it)."""
    program = _programs.get(path)
    if program is None:
        program = _programs[path] = R.load(path)
    rows, failures = [], 0
    for ratio in ratios:
        if failures >= patience and all(abs(ratio - m) > 1e-9 for m in MARKS):
            continue
        m = R.replay(program, ratio=ratio, policy=policy, peak_bytes=peak, thrash=R.THRASH,
                     lower_bound_bytes=lower_bound)
        row = {"model": name, "policy": policy, "ratio": ratio, "budget_bytes": m["budget_bytes"]}
        row.update((k, v) for k, v in m.items() if k not in ("policy", "ratio", "budget_bytes"))
        row["budget_ratio"] = m["ratio"]    # budget_bytes / peak (the budget is aligned down)
        rows.append(row)
        if failures < patience:
            failures = failures + 1 if m["status"] != "ok" else 0
    return rows


def run_sweeps(sources, policies, step, patience, jobs, progress=True):
    """Every (source, policy) sweep, over `jobs` processes; rows sorted by source, policy order
    and descending ratio."""
    # an offloading policy can go below the lower bound, down to the offload floor
    tasks = [(s["name"], s["path"], p, s["peak_bytes"],
              sweep_ratios(step, s["offload_floor_ratio"] if POLICIES[p].offload
                           else s["lower_bound_ratio"]), patience, s["lower_bound_bytes"])
             for s in sources for p in policies]
    size = {s["name"]: s["records"] for s in sources}
    tasks.sort(key=lambda t: -size[t[0]] * len(t[4]))   # the longest first: less tail
    rows = []
    bar = tqdm(total=len(tasks), desc="sweeps", unit="sweep", disable=not progress)
    if jobs == 1 or len(tasks) == 1:
        for t in tasks:
            bar.set_postfix_str(f"{t[0]}/{t[2]}")
            rows += sweep(*t)
            bar.update()
    else:
        # spawn, not fork: the parent may hold threads (tqdm's monitor), and fork copies locks
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=ctx) as pool:
            futures = {pool.submit(sweep, *t): t for t in tasks}
            for f in as_completed(futures):
                t = futures[f]
                rows += f.result()
                bar.set_postfix_str(f"{t[0]}/{t[2]}")
                bar.update()
    bar.close()
    order = {s["name"]: i for i, s in enumerate(sources)}
    rows.sort(key=lambda r: (order[r["model"]], policies.index(r["policy"]), -r["ratio"]))
    return rows


# ---- outputs ------------------------------------------------------------------------------------

def _finite(x):
    """JSON without NaN or Infinity (not JSON): such floats become null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(_finite(obj), f, indent=1, allow_nan=False)
        f.write("\n")


def write_csv(path, rows):
    columns = list(rows[0]) if rows else list(LEAD)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def main(args):
    models, policies = check(args)
    t0 = time.perf_counter()
    out = args.out
    os.makedirs(out, exist_ok=True)
    print(f"coop bench: models {','.join(models) or 'none'}; traces {len(args.traces)}; policies "
          f"{','.join(policies)}; step {args.step:g}, patience {args.patience}, jobs {args.jobs}"
          f"{', quick' if args.quick else ''}, optimizer {args.optimizer}, device {args.device}")
    sources = prepare(models, args.traces, out, quick=args.quick, rerecord=args.rerecord,
                      optimizer=args.optimizer, device=args.device)
    t_prep = time.perf_counter() - t0
    rows = run_sweeps(sources, policies, args.step, args.patience, args.jobs,
                      progress=not args.no_progress)
    wall = time.perf_counter() - t0
    summary = summarize(sources, rows, policies)
    meta = {"policies": policies, "step": args.step, "patience": args.patience,
            "thrash": R.THRASH, "jobs": args.jobs, "quick": args.quick,
            "optimizer": args.optimizer, "device": args.device,
            "record_and_unlimited_s": t_prep, "wall_time_s": wall, "replays": len(rows)}
    write_csv(os.path.join(out, "runs.csv"), rows)
    write_json(os.path.join(out, "runs.json"), rows)
    write_json(os.path.join(out, "summary.json"), {"meta": meta, "models": summary})

    text = tables(summary, policies, rows)
    with open(os.path.join(out, "tables.md"), "w") as f:
        f.write(text)
    print(text)
    plot_all(summary, rows, policies, out)
    print(f"{len(rows):,} replays of {len(sources)} traces x {len(policies)} policies in "
          f"{wall:.1f} s ({t_prep:.1f} s recording and unlimited runs; {args.jobs} jobs); "
          f"wrote {out}/runs.csv, runs.json, summary.json, tables.md, overhead.png, "
          "fragmentation.png, search_time.png, min_budget.png")
    return 0
