"""Replay speed: trace records per second per budget point, on the paper's models.

For each model, one training step at its paper batch is recorded (simulation backend, a100-80gb
roofline) and loaded once; then every (policy, ratio) point is replayed --repeat times and the
median records/s reported, with the share of the replay spent in eviction searches. Loading
(JSON parsing and compiling) is measured apart: it happens once per trace, not per budget.

    python benchmarks/bench_replay.py --repeat 5
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from tqdm import tqdm  # noqa: E402

import coop.trace.replay as R  # noqa: E402
from coop.models import paper  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(paper.PAPER_MODELS))
    p.add_argument("--policies", default="coop,dtr,dte,dtr-ideal")
    p.add_argument("--ratios", default="1.0,0.5,0.3")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", default="bench_out/bench_replay.png")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    models = args.models.split(",")
    policies = args.policies.split(",")
    ratios = [float(r) for r in args.ratios.split(",")]
    print("command: python " + " ".join([sys.argv[0]] + (argv if argv is not None else sys.argv[1:])))
    rows, loads = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        points = [(m, pol, r) for m in models for pol in policies for r in ratios]
        bar = tqdm(total=len(points), desc="points", disable=args.no_progress)
        for model in models:
            path = os.path.join(tmp, f"{model}.jsonl")
            paper.record_trace(model, path)
            t0 = time.perf_counter()
            program = R.load(path)
            loads[model] = (program.n_records, time.perf_counter() - t0)
            peak = R.peak(program)
            for policy in policies:
                for ratio in ratios:
                    runs = [R.replay(program, ratio=ratio, policy=policy, peak_bytes=peak)
                            for _ in range(args.repeat)]
                    rate = statistics.median(r["records_per_s"] for r in runs)
                    search = statistics.median(r["search_time"] / r["wall_time"] for r in runs)
                    rows.append((model, policy, ratio, runs[0]["status"], runs[0]["records"],
                                 rate, search))
                    bar.set_postfix(model=model, policy=policy, ratio=ratio)
                    bar.update()
        bar.close()
    print(f"\n{'model':<13}{'records':>9}{'load s':>9}{'load rec/s':>12}")
    for model, (n, secs) in loads.items():
        print(f"{model:<13}{n:>9,}{secs:>9.3f}{n / secs:>12,.0f}")
    print(f"\n{'model':<13}{'policy':<11}{'ratio':>6}  {'status':<7}{'records':>9}"
          f"{'records/s':>12}{'search share':>14}")
    for model, policy, ratio, status, n, rate, search in rows:
        print(f"{model:<13}{policy:<11}{ratio:>6.2f}  {status:<7}{n:>9,}{rate:>12,.0f}"
              f"{search:>14.2f}")
    print("\nmedian records/s over models, per policy and ratio (every point, whatever its status):")
    for policy in policies:
        cells = []
        for ratio in ratios:
            rates = [r[5] for r in rows if r[1] == policy and r[2] == ratio]
            cells.append(f"{ratio:.2f}: {statistics.median(rates):,.0f}")
        print(f"  {policy:<11}" + "   ".join(cells))
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    fig, axes = plt.subplots(1, len(ratios), figsize=(4 * len(ratios), 3.6), sharey=True)
    for ax, ratio in zip(axes if len(ratios) > 1 else [axes], ratios):
        for i, policy in enumerate(policies):
            rates = [r[5] for m in models for r in rows
                     if r[0] == m and r[1] == policy and r[2] == ratio]
            ax.bar([j + i * 0.8 / len(policies) for j in range(len(models))], rates,
                   width=0.8 / len(policies), label=policy)
        ax.axhline(200_000, color="k", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.set_title(f"budget ratio {ratio}")
        ax.set_xticks(range(len(models)), models, rotation=60, fontsize=7)
    axes[0].set_ylabel("records / s (median)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
