"""Compare two `coop bench` output directories (baseline, new) row by row.

Joins BASE/runs.csv and NEW/runs.csv on (model, policy, ratio) and prints, per model and policy,
the rows that differ: status, compute_overhead (beyond --rtol relative, default 1e-9),
evictions or recomputes. Each joined row is counted as
  identical  same status, overhead within rtol, same evictions and recomputes;
  better     new completes ("ok") where the baseline failed, or both complete and new's
             overhead is lower;
  worse      the baseline completed where new fails, or both complete and new's overhead is
             higher;
  other      differs otherwise (both failed with different statuses or counts; same overhead
             but different evictions/recomputes);
and rows present on one side only (a sweep that stopped at a different ratio) are counted
apart. Also prints each (model, policy)'s minimum feasible ratio where it changed.

Run: python benchmarks/compare_bench.py BASE_DIR NEW_DIR [--rtol 1e-9] [--models a,b] [--policies p,q]
Exit status 0, or 1 with --strict when anything is not identical.
"""
import argparse
import csv
import math
import os
import sys
from collections import Counter, OrderedDict

KEY = ("model", "policy", "ratio")


def load(directory):
    """OrderedDict (model, policy, ratio rounded to 1e-6) -> row dict, from directory/runs.csv."""
    path = os.path.join(directory, "runs.csv") if os.path.isdir(directory) else directory
    rows = OrderedDict()
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            key = (row["model"], row["policy"], round(float(row["ratio"]), 6))
            if key in rows:
                sys.exit(f"{path}: duplicate row for {key}")
            rows[key] = row
    return path, rows


def num(row, field):
    value = row.get(field, "")
    try:
        return float(value)
    except ValueError:
        return math.nan


def close(a, b, rtol):
    if math.isnan(a) and math.isnan(b):
        return True
    return a == b or abs(a - b) <= rtol * max(abs(a), abs(b))


def classify(old, new, rtol):
    """('identical'|'better'|'worse'|'other', list of differing fields)."""
    diffs = []
    if old["status"] != new["status"]:
        diffs.append("status")
    o_ovh, n_ovh = num(old, "compute_overhead"), num(new, "compute_overhead")
    if not close(o_ovh, n_ovh, rtol):
        diffs.append("compute_overhead")
    for field in ("evictions", "recomputes"):
        if num(old, field) != num(new, field):
            diffs.append(field)
    if not diffs:
        return "identical", diffs
    o_ok, n_ok = old["status"] == "ok", new["status"] == "ok"
    if n_ok and not o_ok:
        return "better", diffs
    if o_ok and not n_ok:
        return "worse", diffs
    if o_ok and n_ok and "compute_overhead" in diffs:
        return ("better" if n_ovh < o_ovh else "worse"), diffs
    return "other", diffs


def fmt(row):
    if row is None:
        return "(absent)"
    return (f"{row['status']:<6} ovh {num(row, 'compute_overhead'):.9f} "
            f"ev {int(num(row, 'evictions')):>6} rc {int(num(row, 'recomputes')):>6}")


def min_feasible(rows, model, policy):
    ok = [k[2] for k, r in rows.items() if k[0] == model and k[1] == policy and r["status"] == "ok"]
    return min(ok) if ok else None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("base", help="baseline `coop bench --out` directory (or its runs.csv)")
    p.add_argument("new", help="new `coop bench --out` directory (or its runs.csv)")
    p.add_argument("--rtol", type=float, default=1e-9, help="relative tolerance of overheads")
    p.add_argument("--models", default=None, help="only these models (comma-separated)")
    p.add_argument("--policies", default=None, help="only these policies (comma-separated)")
    p.add_argument("--strict", action="store_true", help="exit 1 unless all rows are identical")
    args = p.parse_args(argv)
    print("command: python " + " ".join([sys.argv[0]] + (argv if argv is not None else sys.argv[1:])))
    base_path, base = load(args.base)
    new_path, new = load(args.new)
    print(f"baseline {base_path}: {len(base)} rows; new {new_path}: {len(new)} rows; "
          f"rtol {args.rtol:g}")
    models = args.models.split(",") if args.models else None
    policies = args.policies.split(",") if args.policies else None

    groups = OrderedDict()                      # (model, policy) -> [keys], in file order
    for key in list(base) + [k for k in new if k not in base]:
        if (models and key[0] not in models) or (policies and key[1] not in policies):
            continue
        groups.setdefault(key[:2], []).append(key)

    counts = Counter()
    per_group = OrderedDict()
    for (model, policy), keys in groups.items():
        lines = []
        group_counts = Counter()
        for key in sorted(set(keys), key=lambda k: -k[2]):
            old, nw = base.get(key), new.get(key)
            if old is None or nw is None:
                kind = "only in new" if old is None else "only in baseline"
                diffs = []
            else:
                kind, diffs = classify(old, nw, args.rtol)
            counts[kind] += 1
            group_counts[kind] += 1
            if kind != "identical":
                lines.append(f"    {key[2]:.2f}  {kind:<16} base {fmt(old)}  |  new {fmt(nw)}"
                             + (f"  [{', '.join(diffs)}]" if diffs else ""))
        per_group[(model, policy)] = group_counts
        if lines:
            mb, mn = min_feasible(base, model, policy), min_feasible(new, model, policy)
            note = ""
            if mb != mn:
                note = f"; minimum feasible ratio {mb} -> {mn}"
            print(f"\n{model} / {policy}: {len(lines)} of {len(set(keys))} rows differ{note}")
            print("\n".join(lines))

    order = ("identical", "better", "worse", "other", "only in baseline", "only in new")
    print("\nper model (identical / better / worse / other / only base / only new):")
    by_model = OrderedDict()
    for (model, _), c in per_group.items():
        by_model.setdefault(model, Counter()).update(c)
    for model, c in by_model.items():
        print(f"  {model:<13} " + " / ".join(str(c[k]) for k in order))
    total = sum(counts.values())
    print(f"\nsummary: {total} rows: " + ", ".join(f"{k} {counts[k]}" for k in order))
    if args.strict and counts["identical"] != total:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
