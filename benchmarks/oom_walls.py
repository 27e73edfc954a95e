"""What stopped a policy's failed replays in a `coop bench` sweep: the budget, or addresses.

    python -m coop bench --out bench-out
    python benchmarks/oom_walls.py bench-out [--policy coop]

Every replay that ran out of memory keeps what blocked its last search (coop.OutOfMemoryError's
figures, in runs.json: failed_pinned, failed_walls, failed_window, failed_constants,
failed_evictable, failed_bytes_fit). Per model, of the policy's replays that ran out of memory: how many had the
bytes (what was pinned or anonymous, the walls, the constants and the request together within
the budget), how many had a range free of pinned pieces and walls at least as large as the
request, and how many still had evictable pieces that no choice of the policy's could use;
how many ran out inside a rematerialization (failed_recompute_depth), and there the median
share of the pinned bytes that its pending ops' inputs held (failed_recompute_pinned over
failed_pinned); then the same over all models. Where the bytes fit and a range holds the
request, the addresses stopped the run, not the budget.
"""
import argparse
import json
import os
import statistics


def load(folder, policy):
    """The policy's out-of-memory rows of folder/runs.json that carry the search's figures."""
    with open(os.path.join(folder, "runs.json")) as f:
        rows = json.load(f)
    return [r for r in rows if r["policy"] == policy and r["status"] == "oom"
            and r.get("failed_bytes_fit") is not None]


def counts(rows):
    """(failed, the bytes fit, a range holds the request, both, evictable pieces left, inside
    a rematerialization, the median share of the pinned bytes its pending ops' inputs held
    there, or "-" where none ran out inside one)."""
    fit = [r["failed_bytes_fit"] for r in rows]
    held = [r["failed_window"] >= r["failed_request"] for r in rows]
    left = sum(r["failed_evictable"] > 0 for r in rows)
    inside = [r for r in rows if r.get("failed_recompute_depth")]
    shares = [r["failed_recompute_pinned"] / r["failed_pinned"] for r in inside]
    share = f"{statistics.median(shares):.2f}" if shares else "-"
    return (len(rows), sum(fit), sum(held), sum(a and b for a, b in zip(fit, held)), left,
            len(inside), share)


def table(rows):
    models = list(dict.fromkeys(r["model"] for r in rows))
    out = ["| model | out of memory | the bytes fit | a range free of pinned pieces and walls "
           "holds the request | both | evictable pieces left | inside a rematerialization | "
           "its pending inputs' share of the pinned bytes (median) |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for m in models + ["all"]:
        mine = rows if m == "all" else [r for r in rows if r["model"] == m]
        out.append("| " + " | ".join([m] + [str(x) for x in counts(mine)]) + " |")
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", help="a coop bench output folder (its runs.json)")
    p.add_argument("--policy", default="coop", help="the policy (default coop)")
    args = p.parse_args(argv)
    if not os.path.isfile(os.path.join(args.folder, "runs.json")):
        p.error(f"{args.folder}: no runs.json (a `coop bench --out` folder)")
    rows = load(args.folder, args.policy)
    if not rows:
        raise SystemExit(f"{args.folder}: no replay of {args.policy} ran out of memory "
                         "(or the sweep predates the search's figures in runs.json)")
    print(table(rows))


if __name__ == "__main__":
    main()
