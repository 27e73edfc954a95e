"""coop's in-place rule against DTR's (coop-no-inplace) and DTR's baselines on the unrolled-GAN-like
program (coop.models.unrolled): compute overhead per budget ratio (of coop.trace.replay.peak) and the
minimum feasible ratio, each policy replayed with coop.trace.replay at ratios 1.00, 0.99, ...

Run: python benchmarks/bench_inplace.py [--unroll 5 --layers 3 --width 512 --batch 64]
"""
import argparse
import os
import sys
import tempfile

import coop.trace.replay as R
from coop.models.unrolled import unrolled_gan_trace

POLICIES = ("coop", "coop-no-inplace", "dtr")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--unroll", type=int, default=5)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lowest", type=float, default=0.6)
    args = ap.parse_args(argv)
    print("command: python benchmarks/bench_inplace.py " + " ".join(sys.argv[1:] if argv is None
                                                                     else argv))
    with tempfile.TemporaryDirectory() as tmp:
        program = R.load(unrolled_gan_trace(os.path.join(tmp, "gan.jsonl"), args.unroll,
                                            args.layers, args.width, args.batch))
    peak = R.peak(program)
    ratios = [i / 100 for i in range(100, int(args.lowest * 100) - 1, -1)]
    print(f"peak {peak:,} bytes; overhead (recomputes) per ratio; '-' failed (oom or thrash)")
    print("| policy | min ratio | " + " | ".join(f"{r:.2f}" for r in ratios if r * 100 % 5 == 0)
          + " |")
    runs = {}
    for policy in POLICIES:
        cells, ok = [], []
        for r in ratios:
            res = runs[policy, r] = R.replay(program, budget=int(r * peak), policy=policy)
            if res["status"] == "ok":
                ok.append(r)
            if round(r * 100) % 5 == 0:
                cells.append(f"{res['compute_overhead']:.3f} ({res['recomputes']})"
                             if res["status"] == "ok" else "-")
        print(f"| {policy} | {min(ok) if ok else '-'} | " + " | ".join(cells) + " |")
    # coop's in-place rule against DTR's at every ratio, not only the tabulated ones
    worse, better = [], []
    for r in ratios:
        ours, dtrs = runs["coop", r], runs["coop-no-inplace", r]
        done = (ours["status"] == "ok", dtrs["status"] == "ok")
        if done == (False, True) or all(done) and ours["compute_overhead"] > \
                dtrs["compute_overhead"]:
            worse.append(f"{r:.2f}")
        elif done == (True, False) or all(done) and ours["compute_overhead"] < \
                dtrs["compute_overhead"]:
            better.append(f"{r:.2f}")
    print(f"coop against coop-no-inplace at each of the {len(ratios)} ratios: worse at "
          f"{', '.join(worse) or 'none'}; better at {len(better)}; equal or both failed at "
          f"{len(ratios) - len(worse) - len(better)}")


if __name__ == "__main__":
    main()
