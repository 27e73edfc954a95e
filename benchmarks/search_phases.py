"""Where the eviction searches' time goes: coop's window searches, phase by phase, beside dtr's.

For each trace (the paper models' traces that `coop bench --out DIR` records in DIR/traces, or
any coop trace) and each budget ratio (--ratios), coop and dtr replay it --repeat times
(coop.trace.replay.replay, the trace loaded once). The decisions are the same in every repeat;
the times are medians over the repeats, per search:
- coop, from Arena.stats (docs/core.md, Counters): the pieces in the arena and the entries the
  moving window's sweep wrote (fewer where runs no window reaches were skipped), `sweep`
  (search_fill_time: the scan runs swept into the scratch arrays, h and a move's cost
  computed for every entry swept), `scans` (the
  two-pointer scans: the evict-only window, the moving window's first pass), `plans` (the moving
  window's plans evaluated best first, and the chosen plan's destinations) and `other` (the rest
  of search_time: the clock reads, a choice made again with offloads counted);
- dtr: its whole search (one pass over the candidates for the lowest score).
Also: the plans evaluated per moving-window search, the total search times and their ratio
dtr / coop (the paper's claim is dtr's total above coop's), and coop's sweep alone over dtr's
whole search. Prints a markdown table (written to OUT.md too) and draws OUT.png: per model,
coop's time per search by phase beside dtr's.

Run: python benchmarks/search_phases.py bench-out/traces/*.jsonl [--ratios 0.5 0.3]
     [--repeat 5] [--out bench_out/search_phases]
"""
import argparse
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from tqdm import tqdm  # noqa: E402

from coop.trace import replay as R  # noqa: E402

PHASES = (("sweep", "search_fill_time"), ("scans", "search_scan_time"),
          ("plans", "search_plan_time"))


def measure(program, ratio, policy, repeat):
    """The replay's result (the last repeat's) with each time replaced by its median."""
    runs = [R.replay(program, ratio=ratio, policy=policy) for _ in range(repeat)]
    out = dict(runs[-1])
    for key in ("search_time",) + tuple(key for _, key in PHASES):
        out[key] = statistics.median(run[key] for run in runs)
    return out


def row(model, ratio, coop, dtr):
    """One table row: per-search microseconds of coop's phases and dtr's search, and totals."""
    n = max(coop["searches"], 1)
    phases = {name: coop[key] / n * 1e6 for name, key in PHASES}
    phases["other"] = coop["search_time"] / n * 1e6 - sum(phases.values())
    d = dtr["search_time"] / max(dtr["searches"], 1) * 1e6
    return dict(model=model, ratio=ratio, coop_status=coop["status"], dtr_status=dtr["status"],
                coop_searches=coop["searches"], dtr_searches=dtr["searches"],
                moving=coop["moving_searches"],
                plans_per_search=coop["plans_evaluated"] / max(coop["moving_searches"], 1),
                pieces=coop["search_pieces"] / max(coop["moving_searches"], 1),
                entries=coop["search_entries"] / max(coop["moving_searches"], 1),
                **phases, coop_per=coop["search_time"] / n * 1e6, dtr_per=d,
                coop_total=coop["search_time"] * 1e3, dtr_total=dtr["search_time"] * 1e3,
                ratio_total=dtr["search_time"] / coop["search_time"] if coop["search_time"]
                else float("nan"),
                sweep_over_dtr=phases["sweep"] / d if d else float("nan"))


HEADER = ("| model | ratio | status coop / dtr | searches coop / dtr | moving | plans per moving "
          "search | pieces / entries swept per moving search | coop us per search: sweep | "
          "scans | plans | other | total | dtr us per search | coop sweep / dtr search | "
          "total coop ms | dtr ms | dtr / coop |")


def table(rows):
    lines = [HEADER, "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
                     "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['ratio']:.2f} | {r['coop_status']} / {r['dtr_status']} | "
            f"{r['coop_searches']:,} / {r['dtr_searches']:,} | {r['moving']:,} | "
            f"{r['plans_per_search']:.1f} | {r['pieces']:,.0f} / {r['entries']:,.0f} | "
            f"{r['sweep']:.2f} | {r['scans']:.2f} | {r['plans']:.2f} | "
            f"{r['other']:.2f} | {r['coop_per']:.2f} | {r['dtr_per']:.2f} | "
            f"{r['sweep_over_dtr']:.1f}x | {r['coop_total']:.3f} | {r['dtr_total']:.3f} | "
            f"{r['ratio_total']:.2f} |")
    return "\n".join(lines)


def draw(rows, path):
    ratios = sorted({r["ratio"] for r in rows}, reverse=True)
    fig, axes = plt.subplots(1, len(ratios), figsize=(6.5 * len(ratios), 4.5), squeeze=False)
    colors = dict(sweep="tab:blue", scans="tab:orange", plans="tab:green", other="tab:gray")
    for ax, ratio in zip(axes[0], ratios):
        picked = [r for r in rows if r["ratio"] == ratio]
        xs = range(len(picked))
        bottom = [0.0] * len(picked)
        for name in ("sweep", "scans", "plans", "other"):
            heights = [max(r[name], 0.0) for r in picked]
            ax.bar([x - 0.2 for x in xs], heights, 0.4, bottom=bottom, color=colors[name],
                   label=f"coop: {name}")
            bottom = [b + h for b, h in zip(bottom, heights)]
        ax.bar([x + 0.2 for x in xs], [r["dtr_per"] for r in picked], 0.4, color="tab:red",
               label="dtr: its search")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([r["model"] for r in picked], rotation=35, ha="right")
        ax.set_ylabel("microseconds per search (median)")
        ax.set_title(f"budget ratio {ratio:.2f}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+", help="coop traces, e.g. bench-out/traces/*.jsonl")
    p.add_argument("--ratios", type=float, nargs="+", default=[0.5, 0.3])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", default=os.path.join("bench_out", "search_phases"),
                   help="writes OUT.md and OUT.png")
    p.add_argument("--no-progress", action="store_true")
    opts = p.parse_args(argv)
    if opts.repeat < 1:
        p.error(f"--repeat {opts.repeat}: must be at least 1")
    print("command: python benchmarks/search_phases.py",
          " ".join(sys.argv[1:] if argv is None else argv))
    rows = []
    bar = tqdm(total=len(opts.traces) * len(opts.ratios) * 2, desc="replays",
               disable=opts.no_progress)
    for path in opts.traces:
        program = R.load(path)
        model = os.path.basename(path).split("-")[0].removesuffix(".jsonl")
        for ratio in opts.ratios:
            got = {}
            for policy in ("coop", "dtr"):
                bar.set_postfix(model=model, ratio=ratio, policy=policy)
                got[policy] = measure(program, ratio, policy, opts.repeat)
                bar.update()
            rows.append(row(model, ratio, got["coop"], got["dtr"]))
    bar.close()
    text = table(rows)
    print(text)
    os.makedirs(os.path.dirname(opts.out) or ".", exist_ok=True)
    with open(opts.out + ".md", "w") as f:
        f.write(text + "\n")
    draw(rows, opts.out + ".png")
    print(f"wrote {opts.out}.md and {opts.out}.png")
    return rows


if __name__ == "__main__":
    main()
