"""coop's moves on the paper models: a table and a PNG from a `coop bench` output directory.

Run the sweep first (it records the nine traces), then this script:
    python -m coop bench --out bench-move --policies coop-move,coop,dtr-ideal --jobs 2
    python benchmarks/move_table.py bench-move --png docs/bench/moves.png

Per model: the minimum feasible budget ratio of coop-move (coop whose window also moves
pieces), coop (evicts only) and dtr-ideal (no fragmentation); the compute overhead at ratios 0.5 and 0.3 (moves charged:
2 bytes per byte over the a100-80gb's bandwidth, included); coop's moves, bytes moved and the
move cost's share of the cost executed at 0.5, 0.3 and at its minimum ratio; coop-move's
and coop's total search time at 0.5 (wall, this machine).
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

POLICIES = ("coop-move", "coop", "dtr-ideal")


def load(out):
    with open(os.path.join(out, "runs.json")) as f:
        runs = json.load(f)
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    return runs, summary


def run_at(runs, model, policy, ratio):
    """The replay of model under policy at the swept ratio (None if not run)."""
    for r in runs:
        if r["model"] == model and r["policy"] == policy and abs(r["ratio"] - ratio) < 1e-9:
            return r
    return None


def fmt_min(p):
    if p is None or p.get("min_feasible_ratio") is None:
        return "none"
    return f"{p['min_feasible_ratio']:.2f}" + ("*" if p.get("failures_above_min") else "")


def fmt_overhead(r):
    if r is None:
        return "-"
    if r["status"] != "ok":
        return r["status"].upper() if r["status"] == "oom" else r["status"]
    return f"{r['compute_overhead']:.3f}"


def fmt_moves(r):
    if r is None or r["status"] != "ok":
        return "-"
    share = r["move_cost"] / r["cost_total"] if r["cost_total"] else 0.0
    return f"{r['window_moves']} / {r['bytes_moved'] / 2**20:,.1f} / {100 * share:.4f}%"


def table(runs, summary):
    lines = [
        "| model | min ratio coop-move | coop | dtr-ideal | overhead @0.5 coop-move / coop / "
        "ideal | overhead @0.3 coop-move / coop / ideal | coop-move's moves / MiB moved / move "
        "cost share @0.5 | @0.3 | @its min | search @0.5 ms coop-move / coop |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for model, info in summary["models"].items():
        pol = info["policies"]
        cells = [model] + [fmt_min(pol.get(p)) for p in POLICIES]
        for ratio in (0.5, 0.3):
            cells.append(" / ".join(fmt_overhead(run_at(runs, model, p, ratio))
                                    for p in POLICIES))
        for ratio in (0.5, 0.3):
            cells.append(fmt_moves(run_at(runs, model, "coop-move", ratio)))
        low = pol.get("coop-move", {}).get("min_feasible_ratio")
        cells.append(fmt_moves(run_at(runs, model, "coop-move", low)) if low else "-")
        times = [run_at(runs, model, p, 0.5) for p in ("coop-move", "coop")]
        cells.append(" / ".join("-" if t is None else f"{1e3 * t['search_time']:.2f}"
                                for t in times))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(summary, path):
    models = list(summary["models"])
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.27
    for k, policy in enumerate(POLICIES):
        values = [summary["models"][m]["policies"].get(policy, {}).get("min_feasible_ratio")
                  or 0.0 for m in models]
        ax.bar([i + (k - 1) * width for i in range(len(models))], values, width, label=policy)
    ax.set_xticks(range(len(models)))
    ax.set_xticklabels(models, rotation=30, ha="right")
    ax.set_ylabel("minimum feasible budget ratio (lower is better)")
    ax.set_title("coop with moves (coop-move) and without, and DTR without fragmentation")
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"saved {path}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", help="a coop bench output directory swept with coop-move, coop "
                               "and dtr-ideal")
    p.add_argument("--png", default=None, help="write the minimum ratios as a bar chart")
    opts = p.parse_args(argv)
    print("command: python benchmarks/move_table.py",
          " ".join(sys.argv[1:] if argv is None else argv))
    runs, summary = load(opts.out)
    print(table(runs, summary))
    if opts.png:
        plot(summary, opts.png)


if __name__ == "__main__":
    main()
