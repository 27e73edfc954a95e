"""A dropout mask drawn two ways, in the same run: the array module's Generator built per run
(``default_rng(seed).random(shape, float32) >= p``, what random kernels did) and the
counter-based Philox stream (``coop.random.Stream(seed, xp).random(...) >= float32(p)``).

Per size: the median of --repeat timed runs of each (interleaved), their ratio, and on CuPy
the device bytes each leaves allocated while it runs (the Generator's curand states). Host
runs include the generator's construction, as a recompute pays it.

Run: python benchmarks/bench_random.py [--xp numpy|cupy] [--repeat 15] [--png out.png]
"""
import argparse
import shlex
import statistics
import sys
import time

import numpy
from tqdm import tqdm

from coop.random import Stream

SIZES = (1 << 14, 1 << 17, 1 << 20, 1 << 22)
P = 0.1


GENERATORS = {
    "old": lambda xp, seed: xp.random.default_rng(seed),
    "new": lambda xp, seed: Stream(seed, xp),
}


def mask(rng, n):
    return rng.random(n, dtype=numpy.float32) >= numpy.float32(P)


def old_mask(xp, seed, n):
    return mask(GENERATORS["old"](xp, seed), n)


def new_mask(xp, seed, n):
    return mask(GENERATORS["new"](xp, seed), n)


def timed(xp, fn, seed, n):
    """Seconds of one call (CuPy: synchronized before and after)."""
    sync = xp.cuda.Device().synchronize if xp is not numpy else (lambda: None)
    sync()
    start = time.perf_counter()
    fn(xp, seed, n)
    sync()
    return time.perf_counter() - start


def device_bytes(xp, kind, n):
    """CuPy: the pool's used bytes while a generator of `kind` and its mask are alive, less
    the mask itself (the Generator's curand states; nothing for the Philox stream)."""
    pool = xp.get_default_memory_pool()
    pool.free_all_blocks()
    before = pool.used_bytes()
    rng = GENERATORS[kind](xp, 1)
    result = mask(rng, n)
    return pool.used_bytes() - before - result.nbytes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--xp", choices=("numpy", "cupy"), default="numpy")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--png", default=None, help="draw the medians to this PNG")
    args = parser.parse_args(argv)
    xp = numpy if args.xp == "numpy" else __import__("cupy")
    print("$ python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv or sys.argv[1:])]))
    rows = []
    for n in tqdm(SIZES, desc="sizes"):
        new_mask(xp, 0, n), old_mask(xp, 0, n)                      # warm-up (CuPy compiles)
        runs = {"old": [], "new": []}
        for seed in range(args.repeat):
            runs["old"].append(timed(xp, old_mask, seed, n))
            runs["new"].append(timed(xp, new_mask, seed, n))
        old, new = (statistics.median(runs[k]) for k in ("old", "new"))
        extra = (device_bytes(xp, "old", n), device_bytes(xp, "new", n)) \
            if xp is not numpy else None
        rows.append((n, old, new, extra))
    print(f"| elements | default_rng per run (ms) | Philox stream (ms) | Philox / default_rng |"
          + (" extra device bytes (rng, Philox) |" if xp is not numpy else ""))
    print("| ---: | ---: | ---: | ---: |" + (" ---: |" if xp is not numpy else ""))
    for n, old, new, extra in rows:
        line = f"| {n:,} | {old * 1e3:.3f} | {new * 1e3:.3f} | {new / old:.2f} |"
        if extra is not None:
            line += f" {extra[0]:,}, {extra[1]:,} |"
        print(line)
    print(f"({args.xp}, medians of {args.repeat} runs each, p = {P}, float32 uniforms)")
    if args.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 4))
        sizes = [r[0] for r in rows]
        ax.loglog(sizes, [r[1] * 1e3 for r in rows], "o-", label="default_rng per run")
        ax.loglog(sizes, [r[2] * 1e3 for r in rows], "s-", label="Philox stream")
        ax.set_xlabel("mask elements")
        ax.set_ylabel(f"ms (median of {args.repeat})")
        ax.set_title(f"dropout mask on {args.xp}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
