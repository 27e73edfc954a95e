"""Two builds of coop side by side, in one run: the same probes in alternating fresh processes.

Each build is a directory whose `coop` package is built (an install's site-packages, or a
checkout built in place). Per round, each build runs one process of PROBE (the order alternates
by round); every figure is the median over --rounds of the per-process medians:
- core a: `Arena.allocate` + `free` pairs per second (a mixed sequence, about 200 live pieces);
- core b: one `coop` window search (`Arena.choose_plan`) on a fragmented arena of 10^4 pieces,
  evict-only and with moving on (bench_core.py's arenas);
- apply: microseconds per `coop.apply` of a one-element kernel on coop Tensors (the runtime's
  per-op bookkeeping; bench_host.py part B measures the same over a training step);
- replay: records per second of a paper-model trace replayed under coop at 0.5 of its peak;
- malloc: CuPy pool `malloc` + free pairs per second on fake device pointers (no GPU needed).
The ratio is NEW / OLD for rates and OLD / NEW for times, so > 1 means NEW is faster.

Run: python benchmarks/compare_speed.py OLD_DIR NEW_DIR --trace TRACE.jsonl [--rounds 5]
(e.g. TRACE from `coop bench --out DIR`: DIR/traces/resnet50-b115.jsonl)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from tqdm import tqdm

PROBE = r'''
import json, statistics, sys, time
import numpy as np
import coop

def median_time(fn, repeat=5, min_seconds=0.05):
    start = time.perf_counter(); fn()
    calls = max(1, int(min_seconds / max(time.perf_counter() - start, 1e-9)))
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)

def core_pairs():
    rng = np.random.default_rng(0)
    sizes = np.exp(rng.uniform(np.log(64), np.log(4 << 20), 20000)).astype(np.int64).tolist()
    classes = rng.integers(0, 2, 20000).tolist()
    frees = rng.integers(0, 200, 20000).tolist()
    def run():
        arena, live = coop.Arena(sum(sizes)), []
        for n, c, k in zip(sizes, classes, frees):
            live.append(arena.allocate(n, c))
            if len(live) > 200:
                arena.free(live.pop(k % len(live)))
        for off in live:
            arena.free(off)
    return 20000 / median_time(run, 5, 0.0)

def window_us(moving):
    rng = np.random.default_rng(0)
    n = 10_000
    sizes = rng.integers(1, 65, n) * 64
    costs, touched = rng.uniform(0.1, 10.0, n), rng.uniform(0.0, 1000.0, n)
    inputs = np.maximum(np.arange(n) - rng.integers(1, 9, n), 0)
    arena = coop.Arena(int(sizes.sum()))
    offsets = {}
    for sid in range(n):
        arena.add_storage(sid, float(costs[sid]), [int(inputs[sid])] if sid else [])
        offsets[sid] = arena.allocate(int(sizes[sid]), coop.CHEAP, storage=sid)
        arena.touch(sid, float(touched[sid]))
    for sid in rng.choice(n, n // 100, replace=False):
        arena.free(offsets.pop(int(sid)))
    if moving:
        arena.move_cost = 1e-6
        for sid in np.random.default_rng(1).choice(sorted(offsets), n // 100, replace=False):
            arena.set_evictable(int(sid), False)
    return median_time(lambda: arena.choose_plan(8 * 4096, "coop", 2000.0)) * 1e6

def apply_us():
    rt = coop.Runtime(coop.numpy_allocator("64MB"), policy="coop", cost="cpu")
    k = coop.Kernel(lambda a: a + 1.0, name="add_one")
    x = rt.tensor(np.zeros(1))
    def run():
        y = x
        for _ in range(2000):
            y = rt.apply(k, y)
    return median_time(run, 7, 0.0) / 2000 * 1e6

def replay_rate(trace):
    try:
        from coop.trace import replay as R
    except ImportError:
        from coop import replay as R
    R.replay(trace, ratio=0.5, policy="coop")
    return statistics.median(R.replay(trace, ratio=0.5, policy="coop")["records_per_s"]
                             for _ in range(3))

def malloc_rate():
    import cupy
    pool = coop.allocator("1GiB", base=0x7F0000000000)
    pool.malloc(4096)
    def run():
        for _ in range(20000):
            pool.malloc(65536)
    return 20000 / median_time(run, 5, 0.0)

trace = sys.argv[1]
print(json.dumps({"core_pairs_per_s": core_pairs(), "window_evict_us": window_us(False),
                  "window_moving_us": window_us(True), "apply_us": apply_us(),
                  "replay_rate": replay_rate(trace), "malloc_pairs_per_s": malloc_rate()}))
'''

#: figure -> True when higher is better
HIGHER = {"core_pairs_per_s": True, "window_evict_us": False, "window_moving_us": False,
          "apply_us": False, "replay_rate": True, "malloc_pairs_per_s": True}


def probe(build, trace):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(build), OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", PROBE, trace], capture_output=True, text=True,
                         env=env, cwd=os.path.abspath(build), check=False)
    if out.returncode != 0:
        sys.exit(f"compare_speed: the probe failed in {build}:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--trace", required=True, help="a coop trace to replay (.jsonl)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    runs = {"old": [], "new": []}
    for r in tqdm(range(args.rounds), desc="rounds"):
        for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
            runs[name].append(probe(getattr(args, name), args.trace))
    print(f"{'figure':22s} {'old':>14s} {'new':>14s} {'speed new/old':>14s}")
    for key, higher in HIGHER.items():
        old = statistics.median(r[key] for r in runs["old"])
        new = statistics.median(r[key] for r in runs["new"])
        ratio = new / old if higher else old / new
        print(f"{key:22s} {old:14.4g} {new:14.4g} {ratio:14.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
