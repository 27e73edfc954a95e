"""The host tier against coop, from sweeps of `coop bench --policies coop,coop-offload --out DIR`
(with --device and --optimizer as wanted).

    python benchmarks/tier_table.py DIR [DIR ...] [--png FILE]

prints a Markdown table of the minimum feasible ratios per model and sweep (the lower bound and
the offload floor beside them), then one line per sweep: at how many ratios where coop
completes coop-offload makes the same run (same status, overhead, evictions, recomputes, moves,
searches and peak, and no offload), the claims of `coop bench`'s summary (never worse than
coop; below the lower bound; within 0.05 of the offload floor) and the median (and largest) of
coop-offload's total search time over coop's at the ratios where both complete. --png draws the
minima: one panel per sweep, per model the lower bound and the offload floor as bars, coop's and
coop-offload's minimum feasible ratios as marks.
"""
import argparse
import csv
import json
import os
import statistics

#: the figures that make two replays the same run
SAME = ("status", "compute_overhead", "evictions", "recomputes", "window_moves", "searches",
        "peak_used_bytes")


def load(folder):
    with open(os.path.join(folder, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(folder, "runs.csv")) as f:
        rows = {(r["model"], r["policy"], r["ratio"]): r for r in csv.DictReader(f)}
    return summary, rows


def _ratio(x):
    return "-" if x is None else f"{x:.2f}"


def table(sweeps):
    models = list(sweeps[0][0]["models"])
    head = ["model"]
    for summary, _ in sweeps:
        meta = summary["meta"]
        head += [f"{meta['device'].split('-')[0]} {meta['optimizer']}: bound / floor", "coop",
                 "coop-offload"]
    lines = ["| " + " | ".join(head) + " |",
             "| " + " | ".join(["---"] + ["---:"] * (len(head) - 1)) + " |"]
    for name in models:
        cells = [name]
        for summary, _ in sweeps:
            m = summary["models"][name]
            cells += [f"{m['lower_bound_ratio']:.2f} / {m['offload_floor_ratio']:.2f}",
                      _ratio(m["policies"]["coop"]["min_feasible_ratio"]),
                      _ratio(m["policies"]["coop-offload"]["min_feasible_ratio"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdicts(summary, rows):
    models = list(summary["models"])
    claims = {n: summary["models"][n]["claims"] for n in models}
    worse = [n for n in models if not claims[n]["offload_not_worse_than_coop"]["holds"]]
    below = [n for n in models if claims[n]["offload_floor"].get("below_lower_bound")]
    near = [n for n in models if claims[n]["offload_floor"]["holds"]]
    same = differ = 0
    search = []
    for (model, policy, ratio), r in rows.items():
        q = rows.get((model, "coop-offload", ratio))
        if policy != "coop" or r["status"] != "ok" or q is None:
            continue
        if all(r[k] == q[k] for k in SAME) and q["offloads"] == "0":
            same += 1
        else:
            differ += 1
        if q["status"] == "ok" and float(r["search_time"]) > 0:
            search.append(float(q["search_time"]) / float(r["search_time"]))
    meta = summary["meta"]
    text = (f"{meta['device']} {meta['optimizer']}: the same run at {same} of the {same + differ} "
            f"ratios where coop completes; never worse than coop on "
            f"{len(models) - len(worse)}/{len(models)}{f' (not: {worse})' if worse else ''}; "
            f"below the lower bound on {below}; within 0.05 of the offload floor on {near}")
    if search:
        text += (f"; search time coop-offload / coop: median {statistics.median(search):.2f} "
                 f"(largest {max(search):.2f}) over {len(search)} ratios")
    return text


def plot(sweeps, path):
    """The minima per model and sweep (the table's figures), one panel per sweep."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = list(sweeps[0][0]["models"])
    fig, axes = plt.subplots(1, len(sweeps), figsize=(4.2 * len(sweeps), 4.2), sharey=True,
                             squeeze=False)
    xs = range(len(models))
    for ax, (summary, _) in zip(axes[0], sweeps):
        ms = [summary["models"][n] for n in models]
        ax.bar(xs, [m["lower_bound_ratio"] for m in ms], color="0.85",
               label="lower bound (recompute only)")
        ax.bar(xs, [m["offload_floor_ratio"] for m in ms], color="0.6", width=0.5,
               label="offload floor")
        for policy, mark in (("coop", "o"), ("coop-offload", "v")):
            ys = [m["policies"][policy]["min_feasible_ratio"] for m in ms]
            ax.plot([x for x, y in zip(xs, ys) if y is not None],
                    [y for y in ys if y is not None], mark, linestyle="none", label=policy)
        meta = summary["meta"]
        ax.set_title(f"{meta['device']}, {meta['optimizer']}")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(models, rotation=60, ha="right")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("minimum feasible budget (share of the peak)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folders", nargs="+", help="coop bench --out folders")
    p.add_argument("--png", default=None, help="draw the minima to this file")
    args = p.parse_args(argv)
    sweeps = [load(f) for f in args.folders]
    print(table(sweeps))
    print()
    for summary, rows in sweeps:
        print(verdicts(summary, rows))
    if args.png:
        plot(sweeps, args.png)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
