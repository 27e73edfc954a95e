"""Training the character GPT of examples/train_gpt.py under shrinking budgets.

Workload: the model, corpus and batches of examples/train_gpt.py (imported from it: the same
code; its defaults unless changed here: 4 layers, 4 heads, d_model 64, block 64, batch 16,
AdamW), trained `--steps` steps with a deterministic cost model (`--cost`, default "cpu"), so every
eviction decision, and the whole run, is reproducible. First an unlimited run (`--probe-budget`)
gives the peak arena use P, the losses and the final parameters. Then, for each policy (coop,
dtr, dte) and each budget ratio r in 1.0, 0.5, 0.45, 0.4, ..., 0.3, 0.25, ... (steps of 0.05,
down to `--min-ratio`; always 1.0, 0.5 and 0.3; the sweep stops at the first ratio <= 0.3 where
every policy fails), a fresh run at int(r * P) bytes.

Reports, per run: the peak arena bytes, wall time, compute overhead (docs/design.md: op cost
executed incl. recomputes / op cost of the unlimited run), evictions, recomputes, the pieces
coop's window moved and how often it made room for a kernel by moving its inputs, and whether
the losses and the final parameters are bit-identical to the unlimited run's; "OOM" when the run
cannot fit. The lowest ratio that completes per policy is printed. A PNG (`--out`) plots
compute overhead against the budget ratio, one line per policy.

Run (after `pip install .`): python benchmarks/bench_train.py [--steps 4]
"""
import argparse
import importlib.util
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # see examples/train_gpt.py
os.environ.setdefault("OMP_NUM_THREADS", "1")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

import coop  # noqa: E402

MB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


def load_example():
    path = os.path.join(HERE, os.pardir, "examples", "train_gpt.py")
    spec = importlib.util.spec_from_file_location("train_gpt", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_once(example, args, data, budget, steps):
    """(losses, state_dict, stats, wall seconds) or None on OutOfMemoryError."""
    t0 = time.perf_counter()
    try:
        run = example.train(args, data, budget, steps, progress=False, log=None)
    except coop.OutOfMemoryError:
        return None
    return (run["losses"], run["model"].state_dict(), run["rt"].stats(),
            time.perf_counter() - t0)


def identical(a, b):
    return a[0] == b[0] and all(np.array_equal(a[1][k], b[1][k]) for k in a[1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--policies", nargs="+", default=["coop", "dtr", "dte"])
    p.add_argument("--min-ratio", type=float, default=0.05)
    p.add_argument("--cost", default="cpu",
                   help="the runtime's cost model (cpu; a device's spec, e.g. a100-80gb)")
    p.add_argument("--out", default="bench_out/bench_train.png")
    p.add_argument("--model", nargs="*", default=[],
                   help="extra options for examples/train_gpt.py's parser, e.g. --layers 2")
    opts = p.parse_args(argv)
    print("command: python benchmarks/bench_train.py",
          " ".join(sys.argv[1:] if argv is None else argv))

    example = load_example()
    args = example.parser().parse_args(["--cost", opts.cost, "--backend", "numpy", *opts.model])
    text, modules = example.build_corpus()
    data = example.CharData(text, args.val_fraction)
    print(f"corpus: docstrings of {len(modules)} stdlib modules ({len(text):,} chars), vocab "
          f"{data.vocab}; GPT layers={args.layers} heads={args.heads} d_model={args.d_model} "
          f"block={args.block} batch={args.batch}; {opts.steps} steps, cost model {args.cost}")

    base = run_once(example, args, data, args.probe_budget, opts.steps)
    peak = base[2]["peak_used_bytes"]
    print(f"unlimited: peak {peak:,} bytes ({peak / MB:.2f} MiB), wall {base[3]:.2f} s, "
          f"losses {[round(x, 4) for x in base[0]]}")

    ratios = [1.0, 0.5]
    r = 0.45
    while r >= opts.min_ratio - 1e-9:
        ratios.append(round(r, 2))
        r -= 0.05
    rows = []
    bar = tqdm(desc="runs", total=len(ratios) * len(opts.policies))
    for ratio in ratios:
        failed = 0
        for policy in opts.policies:
            bar.update()
            args.policy = policy
            got = run_once(example, args, data, int(ratio * peak), opts.steps)
            if got is None:
                rows.append((policy, ratio, None))
                failed += 1
                continue
            losses, state, stats, wall = got
            rows.append((policy, ratio, dict(
                peak=stats["peak_used_bytes"], wall=wall,
                overhead=stats["cost_total"] / base[2]["cost_first"],
                evictions=stats["evictions"], recomputes=stats["recomputes"],
                moves=stats["window_moves"], room=stats["room_made"],
                identical=identical((losses, state), base[:2]))))
            bar.set_postfix(policy=policy, ratio=ratio)
        if failed == len(opts.policies) and ratio <= 0.3 + 1e-9:
            break                         # every policy failed at this ratio: stop the sweep
    bar.close()

    header = (f"{'policy':<6} {'ratio':>5} {'budget MiB':>10} {'peak MiB':>9} {'wall s':>7} "
              f"{'overhead':>8} {'evictions':>9} {'recomputes':>10} {'moves':>6} {'room':>5} "
              f"{'bit-identical':>13}")
    print(header)
    print("-" * len(header))
    for policy, ratio, row in sorted(rows, key=lambda r: (opts.policies.index(r[0]), -r[1])):
        budget = int(ratio * peak) / MB
        if row is None:
            print(f"{policy:<6} {ratio:>5.2f} {budget:>10.2f} {'OOM':>9}")
            continue
        print(f"{policy:<6} {ratio:>5.2f} {budget:>10.2f} {row['peak'] / MB:>9.2f} "
              f"{row['wall']:>7.2f} {row['overhead']:>8.3f} {row['evictions']:>9,} "
              f"{row['recomputes']:>10,} {row['moves']:>6,} {row['room']:>5,} "
              f"{str(row['identical']):>13}")
    lowest = {}
    for policy, ratio, row in rows:
        if row is not None:
            lowest[policy] = min(lowest.get(policy, 9.0), ratio)
    print("lowest ratio that completes:",
          ", ".join(f"{p} {lowest.get(p, float('nan')):.2f}" for p in opts.policies))
    bad = [(p, r) for p, r, row in rows if row is not None and not row["identical"]]
    print("bit-identical to the unlimited run (losses and final parameters):",
          "all completed runs" if not bad else f"NOT for {bad}")

    fig, ax = plt.subplots(figsize=(7, 4))
    for policy in opts.policies:
        pts = sorted((r, row["overhead"]) for p, r, row in rows if p == policy and row)
        if pts:
            ax.plot(*zip(*pts), marker="o", label=policy)
    ax.axhline(2.0, color="gray", ls="--", lw=1, label="thrash (2.0)")
    ax.set_xlabel("budget ratio (budget / unlimited peak)")
    ax.set_ylabel("compute overhead")
    ax.invert_xaxis()
    ax.legend()
    ax.set_title(f"char GPT, {opts.steps} AdamW steps, cost model {args.cost}")
    fig.tight_layout()
    os.makedirs(os.path.dirname(opts.out) or ".", exist_ok=True)
    fig.savefig(opts.out, dpi=110)
    plt.close(fig)
    print(f"saved {opts.out}")
    return rows


if __name__ == "__main__":
    main()
