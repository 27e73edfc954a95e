"""Two window policies side by side, from one sweep of `coop bench` that ran both with dtr and
dtr-ideal (e.g. `coop bench --policies coop,coop-move-if-blocked,dtr,dte,dtr-ideal --out DIR`).

    python benchmarks/pair_table.py DIR [--a coop] [--b coop-move-if-blocked]

prints a Markdown table, one row per model: each policy's minimum feasible ratio (the smallest
that completes) beside dtr-ideal's; the overhead at 0.5 of both and of dtr; dtr's total search
time over each policy's, median over the ratios where both complete; at the ratios where
both policies complete, how many times b's overhead is lower / higher / the same as a's; and
for each policy, at how many of the ratios where it, dtr and dte all complete its overhead is
above min(dtr, dte) + 0.5% (`coop bench`'s claim against the DTR family), of how many.
"""
import argparse
import json
import os
import statistics

from coop.cli.claims import family_limit


def load(folder):
    with open(os.path.join(folder, "runs.json")) as f:
        return {(r["model"], r["policy"], round(r["ratio"], 2)): r for r in json.load(f)}


def minimum(rows, model, policy):
    ok = [k[2] for k, r in rows.items() if k[:2] == (model, policy) and r["status"] == "ok"]
    return f"{min(ok):.2f}" if ok else "none"


def overhead(rows, model, policy, ratio):
    r = rows.get((model, policy, ratio))
    if r is None:
        return "-"
    return f"{r['compute_overhead']:.3f}" if r["status"] == "ok" else r["status"]


def both_ok(rows, model, p, q):
    """The ratios where p and q both complete."""
    return sorted(k[2] for k, r in rows.items() if k[:2] == (model, p) and r["status"] == "ok"
                  and rows.get((model, q, k[2]), {}).get("status") == "ok")


def search_ratio(rows, model, policy):
    """dtr's total search time over policy's, median over the ratios where both complete."""
    xs = [rows[(model, "dtr", x)]["search_time"] / rows[(model, policy, x)]["search_time"]
          for x in both_ok(rows, model, policy, "dtr") if rows[(model, policy, x)]["search_time"]]
    return f"{statistics.median(xs):.2f}" if xs else "-"


def family(rows, model, policy):
    """'above / of': the ratios where policy, dtr and dte all complete, and of those, where
    policy's overhead is above the DTR-family claim's limit (claims.family_limit)."""
    above = of = 0
    for x in both_ok(rows, model, policy, "dtr"):
        e = rows.get((model, "dte", x))
        if e is None or e["status"] != "ok":
            continue
        of += 1
        limit = family_limit(rows[(model, "dtr", x)]["compute_overhead"], e["compute_overhead"])
        above += rows[(model, policy, x)]["compute_overhead"] > limit
    return f"{above} / {of}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="a coop bench output folder (its runs.json)")
    ap.add_argument("--a", default="coop", help="the first policy (default coop)")
    ap.add_argument("--b", default="coop-move-if-blocked",
                    help="the second policy (default coop-move-if-blocked)")
    args = ap.parse_args()
    rows = load(args.folder)
    a, b = args.a, args.b
    models = sorted({k[0] for k in rows if k[1] in (a, b)})
    if not models:
        raise SystemExit(f"{args.folder}: no replays of {a} or {b}")
    print(f"| model | {a} min | {b} min | dtr-ideal min | {a} @0.5 | {b} @0.5 | dtr @0.5 | "
          f"search dtr/{a} | dtr/{b} | overhead lower / higher / same | "
          f"above the DTR family: {a} | {b} |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for m in models:
        lower = higher = same = 0
        for x in both_ok(rows, m, a, b):
            d = rows[(m, b, x)]["compute_overhead"] - rows[(m, a, x)]["compute_overhead"]
            lower += d < 0
            higher += d > 0
            same += d == 0
        print(f"| {m} | {minimum(rows, m, a)} | {minimum(rows, m, b)} | "
              f"{minimum(rows, m, 'dtr-ideal')} | {overhead(rows, m, a, 0.5)} | "
              f"{overhead(rows, m, b, 0.5)} | {overhead(rows, m, 'dtr', 0.5)} | "
              f"{search_ratio(rows, m, a)} | {search_ratio(rows, m, b)} | "
              f"{lower} / {higher} / {same} | {family(rows, m, a)} | {family(rows, m, b)} |")


if __name__ == "__main__":
    main()
