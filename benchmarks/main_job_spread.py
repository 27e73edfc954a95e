"""The main job's figures across seeds and BLAS kernels: examples/train_gpt.py with its defaults
for each --seed, with OpenBLAS's native kernel and with OPENBLAS_CORETYPE set to other kernels
(Haswell: AVX2 and FMA; Sandybridge: AVX without FMA, so other roundings).

The budget's decisions (evictions, recomputes) do not depend on the BLAS kernel, but its
rounding does change the losses; this prints each run's final train loss (mean of the last 10
steps) and held-out loss, then their mean and spread (max - min) over all runs. The runs are
sequential (each is about two minutes on 2 cores, more when other jobs share them).

Run (after `pip install .`): python benchmarks/main_job_spread.py [--seeds 0 1 2]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                       "train_gpt.py")
FIGURES = {"final": r"final train loss \(mean of last 10\)\s+([\d.]+)",
           "held_out": r"held-out loss\s+([\d.]+)", "evictions": r"evictions\s+([\d,]+)",
           "recomputes": r"recomputes\s+([\d,]+)", "time": r"training time \(s\)\s+([\d.]+)"}


def run(seed, coretype, extra):
    """One run's figures (a dict), with OPENBLAS_CORETYPE set to coretype (None: unset)."""
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    with tempfile.TemporaryDirectory() as out:
        text = subprocess.run([sys.executable, EXAMPLE, "--seed", str(seed), "--no-progress",
                               "--log-every", "0", "--out", out, *extra], env=env, check=True,
                              capture_output=True, text=True).stdout
    return {k: float(re.search(p, text).group(1).replace(",", "")) for k, p in FIGURES.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--coretypes", nargs="+", default=["native", "Haswell", "Sandybridge"],
                   help='OPENBLAS_CORETYPE values ("native": unset)')
    args, extra = p.parse_known_args(argv)
    rows = []
    print(f"{'kernel':>8} {'seed':>4} {'final':>7} {'held-out':>8} {'evictions':>9} "
          f"{'recomputes':>10} {'time s':>7}", flush=True)
    for coretype in args.coretypes:
        for seed in args.seeds:
            r = run(seed, None if coretype == "native" else coretype, extra)
            rows.append(r)
            print(f"{coretype:>8} {seed:>4} {r['final']:7.4f} {r['held_out']:8.4f} "
                  f"{r['evictions']:9,.0f} {r['recomputes']:10,.0f} {r['time']:7.1f}",
                  flush=True)
    for key in ("final", "held_out"):
        values = [r[key] for r in rows]
        print(f"{key}: mean {statistics.mean(values):.3f}, spread (max - min) "
              f"{max(values) - min(values):.3f}, from {min(values):.3f} to {max(values):.3f} "
              f"over {len(values)} runs")


if __name__ == "__main__":
    main()
