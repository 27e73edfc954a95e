"""`coop bench`: sweep budget ratios x policies over the paper's models (and any traces given)
with the trace replayer (coop.replay: the real arena core), and report docs/design.md's metrics.

Each paper model is recorded once (one training step at its paper batch, simulation backend,
a100-80gb roofline costs) into OUT/traces/ (reused unless --rerecord); extra traces (coop
traces or DTR logs) are given as paths. Per model, the unlimited run gives the peak (ratio 1.0)
and docs/design.md's lower bound. Each policy then replays at ratios 1.00, 0.99, ... (--step) until
it has failed (OOM or thrash: overhead > 2.0) at --patience consecutive ratios, or the ratio
falls below the lower bound - 0.05 (never below 0.01); 0.5 and 0.3 are always tried when above
that floor. Runs are not always monotone in the budget: a policy can fail at a ratio and
complete at a smaller one, so the minimum feasible ratio (the smallest that completes) comes
with the failures seen above it.

Writes runs.csv and runs.json (one row per replay), summary.json (per model and policy, and
the paper's claims per model, checked, never tuned: coop's minimum budget no higher than dtr's
and dte's, and within 0.02 of dtr-ideal's; coop never worse than each ablation; a lower
fragmentation rate than dtr's and dte's; dtr searching at least 3x longer at ratio 0.3),
tables.md (printed too) and four PNGs: overhead, fragmentation, search_time, min_budget.
Example: coop bench --out bench-out --jobs 2
"""
import csv
import json
import math
import multiprocessing
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

from tqdm import tqdm

from coop import replay as R
from coop.models.paper import PAPER_MODELS, record_trace
from coop.errors import UsageError
from coop.policies import POLICIES

DEFAULT_POLICIES = ("coop", "dtr", "dte", "lru", "dtr-ideal", "coop-no-move",
                    "coop-no-partition", "coop-no-inplace", "coop-loop")
#: batch size of every model under --quick (the test suite's setting)
QUICK_BATCH = 2
#: ratios reported in the tables (and always swept when above a model's floor)
MARKS = (0.5, 0.3)
#: how far below the lower bound a sweep goes
BELOW_BOUND = 0.05
#: the search-time claim: dtr's total search time at 0.3 over coop's, at least this
SEARCH_FACTOR = 3.0
#: the smallest --step: 10,000 ratios per sweep
MIN_STEP = 1e-4
#: first columns of runs.csv; the replay's metrics follow, in coop.replay.replay's order
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
    parser.add_argument("--rerecord", action="store_true",
                        help="record the models' traces even when OUT/traces has them")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(run=main)


def _names(text, known, what):
    names = [n.strip() for n in text.split(",") if n.strip()]
    if what == "model" and names == ["none"]:
        return []
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

def prepare(models, traces, out, quick=False, rerecord=False):
    """Per source (a model or a trace), in order: name, kind, trace path, batch and its
    unlimited run (peak, lower bound, cost). Models are recorded into out/traces/ first."""
    folder = os.path.join(out, "traces")
    os.makedirs(folder, exist_ok=True)
    sources = []
    for name in models:
        batch = QUICK_BATCH if quick else PAPER_MODELS[name].batch
        path = os.path.join(folder, f"{name}-b{batch}.jsonl")
        if rerecord or not os.path.isfile(path):
            record_trace(name, path + ".tmp", batch=batch)
            os.replace(path + ".tmp", path)    # a killed run leaves no half trace to reuse
        sources.append({"name": name, "kind": "model", "path": path, "batch": batch})
    taken = set(models)
    for path in traces:
        stem = base = os.path.splitext(os.path.basename(path))[0]
        k = 2
        while stem in taken:
            stem, k = f"{base}-{k}", k + 1
        taken.add(stem)
        sources.append({"name": stem, "kind": "trace", "path": os.path.abspath(path),
                        "batch": None})
    for s in sources:
        program = R.load(s["path"])
        base = R.unlimited(program)
        peak = base["peak_bytes"]    # ratio 1.0: every policy but none completes there
        s.update(records=program.n_records, ops=program.n_ops, cost_first=program.cost_first,
                 peak_bytes=peak, peak_used_bytes=base["peak_used_bytes"],
                 lower_bound_bytes=base["lower_bound_bytes"],
                 lower_bound_ratio=base["lower_bound_bytes"] / peak if peak else 0.0,
                 unlimited_wall_time=base["wall_time"])
    return sources


def sweep_ratios(step, lower_bound_ratio):
    """1.0, 1.0 - step, ... down to max(lower bound - 0.05, 0.01), plus MARKS above that."""
    floor = max(lower_bound_ratio - BELOW_BOUND, 0.01)
    ratios, k = [], 0
    while (r := round(1.0 - k * step, 6)) >= floor - 1e-9:
        ratios.append(r)
        k += 1
    ratios += [m for m in MARKS if m >= floor - 1e-9 and all(abs(m - r) > 1e-9 for r in ratios)]
    return sorted(ratios, reverse=True)


# ---- the sweep (one task per source and policy; runs in a worker process) ------------------------

_programs = {}   # trace path -> Program, per worker process (a worker serves many tasks)


def sweep(name, path, policy, peak, ratios, patience):
    """Replay one source under one policy at each ratio, largest first, until `patience`
    failures in a row; returns one row per replay."""
    program = _programs.get(path)
    if program is None:
        program = _programs[path] = R.load(path)
    rows, failures = [], 0
    for ratio in ratios:
        m = R.replay(program, ratio=ratio, policy=policy, peak_bytes=peak, thrash=R.THRASH)
        row = {"model": name, "policy": policy, "ratio": ratio, "budget_bytes": m["budget_bytes"]}
        row.update((k, v) for k, v in m.items() if k not in ("policy", "ratio", "budget_bytes"))
        row["budget_ratio"] = m["ratio"]    # budget_bytes / peak (the budget is aligned down)
        rows.append(row)
        failures = failures + 1 if m["status"] != "ok" else 0
        if failures >= patience:
            break
    return rows


def run_sweeps(sources, policies, step, patience, jobs, progress=True):
    """Every (source, policy) sweep, over `jobs` processes; rows sorted by source, policy order
    and descending ratio."""
    tasks = [(s["name"], s["path"], p, s["peak_bytes"],
              sweep_ratios(step, s["lower_bound_ratio"]), patience)
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


# ---- summary and claims --------------------------------------------------------------------------

def _at(rows, ratio):
    return next((r for r in rows if abs(r["ratio"] - ratio) < 1e-9), None)


def _point(row):
    if row is None:
        return None
    return {k: row[k] for k in ("status", "compute_overhead", "search_time",
                                "fragmentation_rate", "evictions", "bytes_evicted",
                                "recomputes", "window_moves",
                                "bytes_moved", "move_cost", "room_made", "cost_total")}


def summarize_policy(rows):
    """A policy's sweep on one source: minimum feasible ratio, failures above it, the MARKS."""
    ok = [r for r in rows if r["status"] == "ok"]
    best = min((r["ratio"] for r in ok), default=None)
    above = [r["ratio"] for r in rows
             if r["status"] != "ok" and (best is None or r["ratio"] > best)]
    return {
        "min_feasible_ratio": best,
        "failures_above_min": above,
        "ratios_run": len(rows),
        "lowest_ratio_run": min(r["ratio"] for r in rows),
        "at": {f"{m:g}": _point(_at(rows, m)) for m in MARKS},
        "at_min": _point(_at(rows, best)) if best is not None else None,
        "max_fragmentation_rate": max((r["fragmentation_rate"] for r in ok), default=None),
        "median_records_per_s": statistics.median(r["records_per_s"] for r in rows),
    }


def _min_claim(mins):
    if any(p not in mins for p in ("coop", "dtr", "dte")):
        return {"holds": None, "why": "needs coop, dtr and dte"}
    c, d, e = mins["coop"], mins["dtr"], mins["dte"]
    if c is None and d is None and e is None:
        return {"holds": None, "why": "no run of coop, dtr or dte completed"}
    inf = math.inf
    holds = (c if c is not None else inf) <= min(d if d is not None else inf,
                                                 e if e is not None else inf)
    return {"holds": holds, "coop": c, "dtr": d, "dte": e}


#: how far above dtr-ideal (no addresses) coop's minimum ratio and overhead at 0.5 may be
IDEAL_SLACK = 0.02


def _ideal_claim(mins, by_policy):
    """coop's minimum ratio <= dtr-ideal's + IDEAL_SLACK, and its overhead at 0.5 <= dtr-ideal's
    + IDEAL_SLACK (where both complete at 0.5): what addresses cost coop."""
    if "coop" not in mins or "dtr-ideal" not in mins:
        return {"holds": None, "why": "needs coop and dtr-ideal"}
    c, i = mins["coop"], mins["dtr-ideal"]
    if i is None:
        return {"holds": None, "why": "no run of dtr-ideal completed"}
    min_holds = c is not None and c <= i + IDEAL_SLACK + 1e-9
    a, b = _at(by_policy["coop"], 0.5), _at(by_policy["dtr-ideal"], 0.5)
    over = None
    if a is not None and b is not None and b["status"] == "ok":
        over = a["status"] == "ok" and \
            a["compute_overhead"] <= b["compute_overhead"] + IDEAL_SLACK + 1e-12
    return {"holds": min_holds and over is not False, "coop": c, "dtr-ideal": i,
            "min_holds": min_holds, "overhead_0.5_holds": over,
            "overhead_0.5": None if a is None or b is None else
            [a["compute_overhead"] if a["status"] == "ok" else None,
             b["compute_overhead"] if b["status"] == "ok" else None]}


def _never_worse_claim(by_policy, other):
    """coop no worse than the ablation `other`: its minimum ratio no higher, and its compute
    overhead no higher (1e-9 relative) at every ratio where both complete."""
    if "coop" not in by_policy or other not in by_policy:
        return {"holds": None, "why": f"needs coop and {other}"}
    ok_c = [r["ratio"] for r in by_policy["coop"] if r["status"] == "ok"]
    ok_o = [r["ratio"] for r in by_policy[other] if r["status"] == "ok"]
    c, o = min(ok_c, default=None), min(ok_o, default=None)
    min_holds = o is None or (c is not None and c <= o + 1e-9)
    worse = []
    for r in by_policy["coop"]:
        q = _at(by_policy[other], r["ratio"])
        if r["status"] == "ok" and q is not None and q["status"] == "ok" and \
                r["compute_overhead"] > q["compute_overhead"] * (1 + 1e-9):
            worse.append(r["ratio"])
    return {"holds": min_holds and not worse, "coop": c, other: o, "min_holds": min_holds,
            "worse_at": worse}


def _fragmentation_claim(by_policy):
    """coop's fragmentation rate below dtr's and dte's at every ratio where all three complete
    and each searched at least once (the rate is a mean over searches: none, no rate)."""
    if any(p not in by_policy for p in ("coop", "dtr", "dte")):
        return {"holds": None, "why": "needs coop, dtr and dte"}
    points, no_search = [], []
    for c in by_policy["coop"]:
        d, e = _at(by_policy["dtr"], c["ratio"]), _at(by_policy["dte"], c["ratio"])
        if any(r is None or r["status"] != "ok" for r in (c, d, e)):
            continue
        if not (c["searches"] and d["searches"] and e["searches"]):
            no_search.append(c["ratio"])
            continue
        points.append((c["ratio"], c["fragmentation_rate"], d["fragmentation_rate"],
                       e["fragmentation_rate"]))
    if not points:
        return {"holds": None, "why": "no ratio where coop, dtr and dte all complete and search",
                "ratios_without_searches": no_search}
    return {
        "holds": all(c < d and c < e for _, c, d, e in points),
        "ratios": len(points),
        "ratios_without_searches": no_search,
        "violations": [r for r, c, d, e in points if not (c < d and c < e)],
        "mean": {p: statistics.fmean(pt[i] for pt in points)
                 for i, p in enumerate(("coop", "dtr", "dte"), 1)},
    }


def _search_claim(by_policy, ratio=0.3):
    if "coop" not in by_policy or "dtr" not in by_policy:
        return {"holds": None, "why": "needs coop and dtr"}
    c, d = _at(by_policy["coop"], ratio), _at(by_policy["dtr"], ratio)
    failed = [f"{p} {'not run (its sweep had stopped)' if r is None else r['status']}"
              for p, r in (("coop", c), ("dtr", d)) if r is None or r["status"] != "ok"]
    if failed:
        return {"holds": None, "why": f"at {ratio:g}: " + ", ".join(failed)}
    tc, td = c["search_time"], d["search_time"]
    if tc == 0 and td == 0:
        return {"holds": None, "why": f"neither searched at {ratio:g}", "coop": 0.0, "dtr": 0.0}
    factor = td / tc if tc else math.inf
    return {"holds": factor >= SEARCH_FACTOR, "coop": tc, "dtr": td, "factor": factor,
            "coop_searches": c["searches"], "dtr_searches": d["searches"]}


def search_factor_median(by_policy):
    """dtr's total search time over coop's, median over the ratios where both complete and
    coop searched (None if there are none): search time beyond the single ratio 0.3."""
    if "coop" not in by_policy or "dtr" not in by_policy:
        return None
    factors = []
    for c in by_policy["coop"]:
        d = _at(by_policy["dtr"], c["ratio"])
        if c["status"] == "ok" and d is not None and d["status"] == "ok" and c["search_time"]:
            factors.append(d["search_time"] / c["search_time"])
    return {"median": statistics.median(factors), "ratios": len(factors)} if factors else None


def summarize(sources, rows, policies):
    """summary.json's content: per source, its unlimited run, per policy summaries and the
    paper's claims (holds: true, false, or null where it cannot be checked, with why)."""
    summary = {}
    for s in sources:
        mine = [r for r in rows if r["model"] == s["name"]]
        by_policy = {p: [r for r in mine if r["policy"] == p] for p in policies}
        by_policy = {p: v for p, v in by_policy.items() if v}
        per = {p: summarize_policy(v) for p, v in by_policy.items()}
        mins = {p: v["min_feasible_ratio"] for p, v in per.items()}
        summary[s["name"]] = {
            **{k: v for k, v in s.items() if k != "name"},
            "policies": per,
            "search_dtr_over_coop": search_factor_median(by_policy),
            "claims": {
                "min_budget": _min_claim(mins),
                "ideal": _ideal_claim(mins, by_policy),
                **{f"not_worse_than_{p}": _never_worse_claim(by_policy, p)
                   for p in ("coop-no-move", "coop-no-inplace", "coop-no-partition")},
                "fragmentation": _fragmentation_claim(by_policy),
                "search_time_0.3": _search_claim(by_policy),
            },
        }
    return summary


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
          f"{', quick' if args.quick else ''}")
    sources = prepare(models, args.traces, out, quick=args.quick, rerecord=args.rerecord)
    t_prep = time.perf_counter() - t0
    rows = run_sweeps(sources, policies, args.step, args.patience, args.jobs,
                      progress=not args.no_progress)
    wall = time.perf_counter() - t0
    summary = summarize(sources, rows, policies)
    meta = {"policies": policies, "step": args.step, "patience": args.patience,
            "thrash": R.THRASH, "jobs": args.jobs, "quick": args.quick,
            "record_and_unlimited_s": t_prep, "wall_time_s": wall, "replays": len(rows)}
    write_csv(os.path.join(out, "runs.csv"), rows)
    write_json(os.path.join(out, "runs.json"), rows)
    write_json(os.path.join(out, "summary.json"), {"meta": meta, "models": summary})

    from coop.bench_report import plot_all, tables
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
