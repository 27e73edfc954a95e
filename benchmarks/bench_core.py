"""Speed of the Cython arena (coop.Arena) against the plain-Python model (tests/reference_arena.py).

a. allocate/free pairs per second on a mixed sequence: sizes from 64 B to 4 MiB (log-uniform),
   both placement classes, about --live pieces live at a time (Python call overhead included,
   as the runtime sees it);
b. one `coop` window search (`choose_plan(n, "coop", now)`) on a fragmented arena of N
   evictable storages (chained neighbours, random costs and access times, 1% of the pieces
   freed as holes) for a request of eight of the largest pieces: it should grow linearly in N;
   again with moving on (a finite move cost, 1% of the pieces unevictable but movable), and
   with moving on under moves_if_blocked (policy coop-move-if-blocked's rule: here an
   evict-only window exists, so the moving window never runs);
c. one `allocate_or_evict` of a large request (5% of the arena) on an arena full of small,
   scattered victims, under `coop` (one window) and `dtr` (one storage per search, until a
   contiguous range appears); the arena is rebuilt before each repeat.

Every number is a median over --repeat runs in this process; the reference is measured in the
same run. Run from a checkout: the reference is loaded from ../tests/ relative to this file.

Run: python benchmarks/bench_core.py [--repeat 5] [--out bench_out]
"""
import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

import coop  # noqa: E402

REFERENCE_PATH = Path(__file__).resolve().parents[1] / "tests" / "reference_arena.py"


def load_reference():
    """ReferenceArena from the checkout's tests/ (it is not part of the installed package;
    it imports the tests' helpers beside it, so tests/ goes on the path)."""
    if not REFERENCE_PATH.exists():
        sys.exit(f"bench_core.py needs {REFERENCE_PATH}: run it from a checkout of coop")
    if str(REFERENCE_PATH.parent) not in sys.path:
        sys.path.insert(0, str(REFERENCE_PATH.parent))
    spec = importlib.util.spec_from_file_location("reference_arena", REFERENCE_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ReferenceArena


def median_time(fn, repeat, min_seconds=0.0):
    """Median wall time of one fn() call over repeat batches; a batch calls fn as often as it
    takes to last min_seconds (calibrated on one call), so fast calls are timed in bulk."""
    start = time.perf_counter()
    fn()
    calls = max(1, int(min_seconds / max(time.perf_counter() - start, 1e-9)))
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


# ---- a. allocate/free throughput ------------------------------------------------------------

def mixed_sequence(pairs, live, seed):
    """(nbytes, cls, index of the allocation to free next or -1) triples; every allocation is
    freed, in random order, keeping about `live` pieces live."""
    rng = np.random.default_rng(seed)
    sizes = np.exp(rng.uniform(np.log(64), np.log(4 << 20), pairs)).astype(np.int64)
    classes = rng.integers(0, 2, pairs)
    ops, pending = [], []
    for i in range(pairs):
        ops.append((int(sizes[i]), int(classes[i]), -1))
        pending.append(i)
        if len(pending) > live:
            ops.append((0, 0, pending.pop(int(rng.integers(len(pending))))))
    ops.extend((0, 0, i) for i in pending)
    return ops, int(sizes.sum())


def run_sequence(arena_type, ops, capacity):
    arena, offsets = arena_type(capacity), []
    for nbytes, cls, victim in ops:
        if victim < 0:
            offsets.append(arena.allocate(nbytes, cls))
        else:
            arena.free(offsets[victim])
    assert arena.stats()["used_bytes"] == 0 and -1 not in offsets


# ---- b, c. fragmented arenas of evictable storages ------------------------------------------

CLS = coop.CHEAP


def fragmented_arena(arena_type, n, min_bytes, max_bytes, holes, seed):
    """An arena tiled by n pieces, each bound to an evictable storage (neighbour: one of the 8
    storages made before it, like an op's recent input), with random costs and access times;
    `holes` pieces freed. Returns (arena, offsets, now)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(min_bytes // 64, max_bytes // 64 + 1, n) * 64
    costs, touched = rng.uniform(0.1, 10.0, n), rng.uniform(0.0, 1000.0, n)
    inputs = np.maximum(np.arange(n) - rng.integers(1, 9, n), 0)
    arena = arena_type(int(sizes.sum()))
    offsets = {}
    for sid in range(n):
        arena.add_storage(sid, float(costs[sid]), [int(inputs[sid])] if sid else [])
        offsets[sid] = arena.allocate(int(sizes[sid]), CLS, storage=sid)
        arena.touch(sid, float(touched[sid]))
    for sid in rng.choice(n, holes, replace=False):
        arena.free(offsets.pop(int(sid)))
    return arena, offsets, 2000.0


#: b with moving on: the cost of moving a byte. A piece moves rather than being evicted when
#: its copy, size * MOVE_COST, is below its c' (0.1 to 10 and more; docs/core.md, "Moving"):
#: 71% of these pieces (64 B to 4 KiB; a 4 KiB piece copies for 6.1), and the share of the
#: pieces that are walls only moving passes
MOVE_COST = 1.5e-3
WALLS = 0.01


def search_time(arena_type, n, repeat, seed, moving=False, blocked=False):
    """Median microseconds of one coop window search on an n-piece fragmented arena; moving:
    with a finite move cost and 1% of the pieces unevictable but movable (constants);
    blocked: with moves_if_blocked too."""
    arena, offsets, now = fragmented_arena(arena_type, n, 64, 4096, max(n // 100, 1), seed)
    if moving:
        arena.move_cost = MOVE_COST
        arena.moves_if_blocked = blocked
        rng = np.random.default_rng(seed + 1)
        for sid in rng.choice(sorted(offsets), max(int(WALLS * len(offsets)), 1), replace=False):
            arena.set_evictable(int(sid), False)
    request = 8 * 4096
    assert arena.choose_plan(request, "coop", now)["pieces"], "no window found"
    return median_time(lambda: arena.choose_plan(request, "coop", now), repeat, 0.02) * 1e6


def evict_once(arena_type, n, policy, seed):
    """One allocate_or_evict of 5% of a rebuilt arena of n small victims; returns its numbers."""
    arena, offsets, now = fragmented_arena(arena_type, n, 64, 512, n // 100, seed)
    request = arena.capacity // 20

    def evict(victims):
        for sid in victims:
            arena.free(offsets.pop(sid))

    start = time.perf_counter()
    arena.allocate_or_evict(request, coop.CHEAP, policy, now, evict)
    wall = time.perf_counter() - start
    s = arena.stats()
    return {"searches": s["searches"], "victims": s["evictions"],
            "bytes_evicted": s["bytes_evicted"], "search_time": s["search_time"], "wall": wall,
            "request": request}


def median_dict(rows):
    return {key: statistics.median(row[key] for row in rows) for key in rows[0]}


def plot_search(sizes, results, path):
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for name, marker in (("coop.Arena", "o"), ("moving", "^"), ("if blocked", "v"),
                         ("ReferenceArena", "s")):
        points = [(n, results[n][name]) for n in sizes if results[n].get(name) is not None]
        if points:
            ax.loglog(*zip(*points), marker=marker, label=name)
    first = sizes[0]
    ax.loglog(sizes, [results[first]["coop.Arena"] * n / first for n in sizes], "k:",
              label="linear in N")
    ax.set(xlabel="pieces N", ylabel="microseconds per window search",
           title="coop window search (choose_plan)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (median)")
    parser.add_argument("--pairs", type=int, default=20_000, help="a: allocations in the sequence")
    parser.add_argument("--live", type=int, default=200, help="a: pieces live at a time")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10_000, 100_000],
                        help="b: numbers of pieces")
    parser.add_argument("--ref-max-n", type=int, default=1_000,
                        help="b: largest N measured with the (slow) reference")
    parser.add_argument("--victims", type=int, default=5_000, help="c: pieces in the arena")
    parser.add_argument("--ref-victims", type=int, default=500,
                        help="c: pieces in the arena for the reference (it is slow)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench_out", help="directory for the PNG")
    args = parser.parse_args(argv)
    Reference = load_reference()
    print(f"command: {' '.join([Path(sys.argv[0]).name] + (argv or sys.argv[1:]))}")
    print(f"coop {coop.__version__}, python {sys.version.split()[0]}, "
          f"median of {args.repeat} runs each\n")

    # a.
    ops, total = mixed_sequence(args.pairs, args.live, args.seed)
    rates = {}
    for name, arena_type in tqdm((("coop.Arena", coop.Arena), ("ReferenceArena", Reference)),
                                 desc="a. allocate/free", leave=False):
        rates[name] = args.pairs / median_time(lambda: run_sequence(arena_type, ops, total),
                                               args.repeat)
    print(f"a. allocate/free pairs per second ({args.pairs} pairs, ~{args.live} live)")
    print(f"   {'coop.Arena':<16}{rates['coop.Arena']:>14,.0f}")
    print(f"   {'ReferenceArena':<16}{rates['ReferenceArena']:>14,.0f}")
    print(f"   ratio {rates['coop.Arena'] / rates['ReferenceArena']:.1f}x (target >= 20x)\n")

    # b.
    sizes = args.sizes
    results = {}
    for n in tqdm(sizes, desc="b. window search", leave=False):
        results[n] = {"coop.Arena": search_time(coop.Arena, n, args.repeat, args.seed),
                      "moving": search_time(coop.Arena, n, args.repeat, args.seed, True),
                      "if blocked": search_time(coop.Arena, n, args.repeat, args.seed, True,
                                                True)}
        results[n]["ReferenceArena"] = (search_time(Reference, n, args.repeat, args.seed)
                                        if n <= args.ref_max_n else None)
    print("b. coop window search, microseconds per choose_plan (median); moving: move cost "
          f"{MOVE_COST:g} per byte, {WALLS:.0%} of the pieces movable walls; if blocked: the "
          "same with moves_if_blocked")
    print(f"   {'N':>8}{'coop.Arena':>14}{'us/piece':>10}{'moving':>10}{'if blocked':>12}"
          f"{'ReferenceArena':>16}{'ratio':>9}")
    for n in sizes:
        fast, slow = results[n]["coop.Arena"], results[n]["ReferenceArena"]
        slow_text = f"{slow:>16.1f}{slow / fast:>8.0f}x" if slow else f"{'(skipped)':>16}{'':>9}"
        print(f"   {n:>8}{fast:>14.2f}{fast / n:>10.4f}{results[n]['moving']:>10.2f}"
              f"{results[n]['if blocked']:>12.2f}{slow_text}")
    for key in ("coop.Arena", "moving"):
        slope = np.polyfit(np.log(sizes), np.log([results[n][key] for n in sizes]), 1)[0]
        verdict = "linear" if slope < 1.25 else "SUPERLINEAR: the scan should be O(N)"
        print(f"   log-log slope of {key}: {slope:.2f} (1.0 = linear in N): {verdict}")
    if any(n > args.ref_max_n for n in sizes):
        print(f"   the reference is brute force and was measured only up to N = {args.ref_max_n}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    plot_path = Path(args.out) / "window_search.png"
    plot_search(sizes, results, plot_path)

    # c.
    print("\nc. one allocate_or_evict of 5% of an arena of small victims (median)")
    print(f"   {'arena':<16}{'N':>7}{'policy':>7}{'searches':>10}{'victims':>9}"
          f"{'evicted':>10}{'search ms':>11}{'wall ms':>10}")
    for name, arena_type, n in (("coop.Arena", coop.Arena, args.victims),
                                ("ReferenceArena", Reference, args.ref_victims)):
        row = {}
        for policy in ("coop", "dtr"):
            runs = [evict_once(arena_type, n, policy, args.seed)
                    for _ in tqdm(range(args.repeat), desc=f"c. {name} {policy}", leave=False)]
            row[policy] = r = median_dict(runs)
            print(f"   {name:<16}{n:>7}{policy:>7}{r['searches']:>10.0f}{r['victims']:>9.0f}"
                  f"{r['bytes_evicted'] / r['request']:>9.2f}x{r['search_time'] * 1e3:>11.3f}"
                  f"{r['wall'] * 1e3:>10.3f}")
        ratio = row["dtr"]["search_time"] / row["coop"]["search_time"]
        print(f"   {'':<16}dtr / coop search time: {ratio:.1f}x, victims: "
              f"{row['dtr']['victims'] / row['coop']['victims']:.1f}x")
    print("   (evicted: bytes evicted / request)")
    print(f"\nplot of b: {plot_path}")


if __name__ == "__main__":
    main()
