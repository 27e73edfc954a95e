"""Allocation path of the CuPy backend: microseconds per allocate + free pair.

Measured in one run, medians of --repeat runs of --n pairs, order alternating:
- coop: ``pool.malloc(n)`` of ``coop.allocator`` and the pointer dropped at once (the piece is
  freed by its owner), and the same through ``cupy.empty(n, uint8)`` with the pool installed;
- cupy: ``cupy.cuda.MemoryPool().malloc(n)``, CuPy's default pool (cached blocks, no driver
  call after the first), the same two ways. Only with a GPU: CuPy's pool asks the driver for
  the current device even on a cached block.
- the parts of coop's pair: the arena alone (``Arena.request`` + ``free``) and CuPy's wrapper
  objects alone (``MemoryPointer(UnownedMemory(...))``).
- with ``--baseline FILE``: the same pool.malloc pair of another version of the backend (a copy
  of an older coop/backends/cupy.py, loaded as a module), e.g. before its path moved to Cython:
  ``git show 36a9812:coop/backends/cupy.py > /tmp/cupy_before.py``.
Without a GPU, coop runs on fake device pointers (``base=``: nothing reads the memory, no
driver call, no stream query), and the CuPy rows are reported as not measurable.

Run: python benchmarks/bench_alloc.py [--n 20000] [--repeat 7] [--sizes 512,65536,16777216]
     [--baseline FILE] [--out bench-out/alloc]
"""
import argparse
import importlib.util
import json
import os
import shlex
import statistics
import sys
import time

import cupy
from cupy.cuda.memory import MemoryPointer, UnownedMemory
from tqdm import tqdm

import coop

BASE = 0x7F0000000000  # fake device address (no GPU): nothing reads or writes it


def per_pair(case, n):
    fn, allocator = case
    cupy.cuda.set_allocator(allocator)   # None: CuPy's plain cudaMalloc (unused by fn then)
    try:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - start) / n * 1e6
    finally:
        cupy.cuda.set_allocator(None)


def load_baseline(path):
    spec = importlib.util.spec_from_file_location("coop_alloc_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cases(size, gpu, baseline=None):
    """name -> (a no-argument callable doing one allocate + free pair, the CuPy allocator
    set while it runs)."""
    pool = coop.allocator("1GiB") if gpu else coop.allocator("1GiB", base=BASE)
    empty = lambda: cupy.empty(size, dtype=cupy.uint8)  # noqa: E731
    out = {"coop pool.malloc": (lambda: pool.malloc(size), None),
           "coop cupy.empty": (empty, pool)}
    if baseline is not None:
        old = baseline.allocator("1GiB") if gpu else baseline.allocator("1GiB", base=BASE)
        out["baseline pool.malloc"] = (lambda: old.malloc(size), None)
    if gpu:
        cupy_pool = cupy.cuda.MemoryPool()
        out["cupy pool.malloc"] = (lambda: cupy_pool.malloc(size), None)
        out["cupy cupy.empty"] = (empty, cupy_pool.malloc)
    arena = coop.Arena(1 << 30, 512)
    out["part: coop arena request+free"] = (lambda: arena.free(arena.request(size)), None)
    owner = object()
    out["part: CuPy wrappers"] = (lambda: MemoryPointer(
        UnownedMemory(BASE, size, owner, device_id=0), 0), None)
    for case in out.values():
        per_pair(case, 1)   # warm: the reservation, CuPy's first block
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--sizes", default="512,65536,16777216")
    parser.add_argument("--baseline", default=None,
                        help="another coop/backends/cupy.py to time in the same run")
    parser.add_argument("--out", default="bench-out/alloc")
    args = parser.parse_args(argv)
    print("command:", shlex.join([sys.executable, *sys.argv]))
    gpu = cupy.cuda.is_available()
    print("device:", cupy.cuda.runtime.getDeviceProperties(0)["name"].decode() if gpu else
          "none (coop on fake pointers; CuPy's MemoryPool needs a device: not measured)")
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = {}
    for size in sizes:
        funcs = cases(size, gpu, load_baseline(args.baseline) if args.baseline else None)
        times = {name: [] for name in funcs}
        names = list(funcs)
        for r in tqdm(range(args.repeat), desc=f"{size} B", leave=False, file=sys.stderr):
            for name in (names if r % 2 == 0 else names[::-1]):
                times[name].append(per_pair(funcs[name], args.n))
        rows[size] = {name: statistics.median(t) for name, t in times.items()}
    width = max(len(n) for r in rows.values() for n in r)
    print(f"\nmicroseconds per allocate + free pair (median of {args.repeat} x {args.n})")
    print(f"{'':{width}s} " + " ".join(f"{s:>12d}B" for s in sizes))
    for name in rows[sizes[0]]:
        print(f"{name:{width}s} " + " ".join(f"{rows[s][name]:13.3f}" for s in sizes))
    if args.baseline:
        for s in sizes:
            print(f"coop / baseline (pool.malloc), {s} B: "
                  f"{rows[s]['coop pool.malloc'] / rows[s]['baseline pool.malloc']:.2f}")
    if gpu:
        for s in sizes:
            print(f"coop / cupy (pool.malloc), {s} B: "
                  f"{rows[s]['coop pool.malloc'] / rows[s]['cupy pool.malloc']:.2f}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "alloc.json"), "w") as f:
        json.dump({"gpu": gpu, "rows": {str(s): r for s, r in rows.items()}}, f, indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 4))
        names = list(rows[sizes[0]])
        for k, name in enumerate(names):
            ax.bar([i + k * 0.8 / len(names) for i in range(len(sizes))],
                   [rows[s][name] for s in sizes], 0.8 / len(names), label=name)
        ax.set_xticks([i + 0.4 - 0.4 / len(names) for i in range(len(sizes))],
                      [f"{s} B" for s in sizes])
        ax.set_ylabel("us per allocate + free")
        ax.set_title("CuPy allocation path" + ("" if gpu else " (no GPU: coop on fake pointers)"))
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "alloc.png"), dpi=100)
    except ImportError:
        pass
    print(f"wrote {args.out}/alloc.json" + (" and alloc.png" if "plt" in dir() else ""))


if __name__ == "__main__":
    main()
