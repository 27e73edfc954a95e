"""Why contiguity matters: DTR's one-at-a-time eviction vs coop's window, at the same budget.

Workload (synthetic, fixed seed): a few training iterations of a residual MLP of `--layers`
blocks. Each block computes, like a transformer's feed-forward block,

    h = x @ W1           (matmul: EXPENSIVE, width f * A bytes, f in 1..4 drawn per block)
    mean, var, ... = stats(h)   (reductions: CHEAP, a handful of small tensors of a few KB)
    n = normalize(h, stats); a = gelu(n)    (elementwise: CHEAP, f * A bytes each)
    y = a @ W2           (matmul: EXPENSIVE, A bytes)
    x = x + y            (elementwise: CHEAP, A bytes)

where A (the activation size) varies per iteration, as with variable sequence lengths. The
backward pass walks the blocks in reverse: gradients and weight gradients are anonymous
(never evicted) and read the saved forward tensors, which are released once nothing needs them.
Costs are proportional to bytes: a matmul costs `--matmul-density` times more per byte than an
elementwise op; a reduction costs its input's bytes.

The script plays the runtime: it registers every forward output with
`add_storage(sid, cost, neighbors=inputs)`, allocates it with `allocate_or_evict`, pins an op's
inputs while it runs and touches them on a logical clock that advances by each op's cost. The
evict callback frees the victims' pieces; when a later op needs an evicted tensor, it is
recomputed (recursively, its inputs first) into a new piece with `storage=sid`.

The same program runs under `dtr` (every tensor at the low end of its free range, as the
paper's baseline) and `coop` (window eviction, cheap tensors at the high end) with the same
budget, `--budget`: a share of the unlimited run's peak ("0.5", "0.5x", "50%") or a size. It prints evictions, recomputes,
compute overhead and fragmentation side by side, and saves a memory map per policy: coop
frees contiguous runs of cheap tensors, DTR frees scattered ones and must evict more bytes to
find one range large enough.

Run (after `pip install .`): python examples/fragmentation.py [--budget 0.4] [--policies ...]
Exit status (as `coop replay`'s): 0 when every policy completed, 3 when one ran out of memory
(its column says where), 2 for a bad argument.
"""
import os
import sys
import time
from collections import namedtuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from tqdm import tqdm  # noqa: E402

import coop  # noqa: E402
from coop.budget import Budget  # noqa: E402
from coop.engine.policies import get_policy  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # examples/_common.py
from _common import (Parser, check_out, non_negative_int, positive_float,  # noqa: E402
                     positive_int, usage_error)

SCRIPT = "examples/fragmentation.py"

MB = 1 << 20
FREE, CHEAP_USED, EXPENSIVE_USED, ANONYMOUS = range(4)
STATE_NAMES = ("free", "used, cheap", "used, expensive", "anonymous / unevictable")
STATE_COLORS = ("#f2f2f2", "#f5a623", "#2b6cb0", "#555555")
# name -> (the core's policy, whether cheap tensors go to the high end of their free range,
# whether coop's window may move pieces out of the way)
POLICIES = {name: (get_policy(name).core, get_policy(name).partition, get_policy(name).move)
            for name in ("dtr", "coop", "coop-no-move", "coop-no-partition", "none")}
# cost of moving one byte: a copy reads and writes each byte, as an elementwise op does
MOVE_COST = 1.0 / MB


# one op's output: its size, placement class, own cost, input sids and whether it is evictable
Tensor = namedtuple("Tensor", "nbytes cls cost inputs evictable")


def build_program(layers, iterations, unit, density, seed):
    """Returns (tensors, steps): steps are ("compute", sid) or ("release", sid) in program order."""
    rng = np.random.default_rng(seed)
    widths = rng.integers(1, 5, size=layers)
    tensors, order, persistent = [], [], set()

    def op(nbytes, cls, cost, inputs=(), evictable=True):
        tensors.append(Tensor(int(nbytes), cls, float(cost), tuple(inputs), evictable))
        order.append(len(tensors) - 1)
        return len(tensors) - 1

    def fixed(nbytes, cls, cost, inputs=()):
        """Weights, the input batch and gradients: anonymous, never evicted."""
        return op(nbytes, cls, cost, inputs, evictable=False)

    weights = [(fixed(unit // 8, coop.EXPENSIVE, 0.0), fixed(unit // 8, coop.EXPENSIVE, 0.0))
               for _ in range(layers)]
    persistent.update(w for pair in weights for w in pair)
    for _ in range(iterations):
        act = int(unit * rng.uniform(0.6, 1.0)) // 64 * 64
        x = fixed(act, coop.EXPENSIVE, 0.0)  # the input batch
        saved = []
        for (w1, w2), f in zip(weights, widths):
            h = op(f * act, coop.EXPENSIVE, density * f * act / MB, (x, w1))
            stats = [op(int(rng.integers(1, 9)) * 1024, coop.CHEAP, f * act / MB, (h,))
                     for _ in range(int(rng.integers(2, 6)))]
            n = op(f * act, coop.CHEAP, f * act / MB, (h, *stats))
            a = op(f * act, coop.CHEAP, f * act / MB, (n,))
            y = op(act, coop.EXPENSIVE, density * act / MB, (a, w2))
            saved.append((x, h, stats, n, a, w1, w2, f))
            x = op(act, coop.CHEAP, act / MB, (x, y))
        grad = fixed(act, coop.CHEAP, act / MB, (x,))  # d loss / d x
        weight_grads = []
        for x_in, h, stats, n, a, w1, w2, f in reversed(saved):
            g_a = fixed(f * act, coop.EXPENSIVE, density * f * act / MB, (grad, w2))
            weight_grads.append(fixed(unit // 8, coop.EXPENSIVE, density * act / MB, (a, grad)))
            g_h = fixed(f * act, coop.CHEAP, 2 * f * act / MB, (g_a, n, h, *stats))
            weight_grads.append(fixed(unit // 8, coop.EXPENSIVE, density * act / MB, (x_in, g_h)))
            grad = fixed(act, coop.EXPENSIVE, density * f * act / MB, (g_h, w1, grad))
        fixed(64, coop.CHEAP, len(weight_grads) * unit / 8 / MB, weight_grads)  # optimizer step
    return tensors, schedule_releases(tensors, order, persistent)


def schedule_releases(tensors, order, persistent):
    """Release each tensor after its last reader, and never before an evictable consumer that
    may still need it to be recomputed."""
    last = {}
    for index, sid in enumerate(order):
        last[sid] = index
        for x in tensors[sid].inputs:
            last[x] = index
    for sid in reversed(order):
        if tensors[sid].evictable:
            for x in tensors[sid].inputs:
                last[x] = max(last[x], last[sid])
    releases = {}
    for sid, index in last.items():
        if sid not in persistent:
            releases.setdefault(index, []).append(sid)
    steps = []
    for index, sid in enumerate(order):
        steps.append(("compute", sid))
        steps.extend(("release", x) for x in sorted(releases.get(index, ())))
    return steps


class Runtime:
    """Plays the runtime over one arena: allocation, pins, clock, evictions and recomputes."""

    def __init__(self, tensors, capacity, policy, partition, bins, move=False):
        self.tensors, self.policy, self.partition = tensors, policy, partition
        self.arena = coop.Arena(capacity)
        # with moves, unevictable tensors get a storage too (unevictable, movable): the walls
        # coop's window may move away; moves: (memory map row, destination offset, bytes)
        self.move, self.moves = move, []
        if move:
            self.arena.move_cost = MOVE_COST
        self.offsets, self.evicted = {}, set()
        self.clock = self.executed = self.recompute_cost = 0.0
        self.recomputes = self.peak = 0
        self.largest_free_ratios = []  # largest free / free bytes at each failed attempt
        self.centers = (np.arange(bins) + 0.5) * (self.arena.capacity / max(bins, 1))
        self.rows = []

    def note_failed_attempt(self):
        s = self.arena.stats()
        self.largest_free_ratios.append(s["largest_free"] / max(s["free_bytes"], 1))

    def evict(self, victims):
        self.note_failed_attempt()  # the arena calls back only after an allocation failed
        for sid in victims:
            self.arena.free(self.offsets.pop(sid))
            self.evicted.add(sid)

    def compute(self, sid, recompute=False):
        """Makes sid resident: its evicted inputs first (pinned as they arrive), then its piece."""
        t = self.tensors[sid]
        pinned = []
        try:
            for x in t.inputs:
                if x in self.evicted:
                    self.compute(x, recompute=True)
                if self.tensors[x].evictable:
                    self.arena.pin(x)
                    pinned.append(x)
            if t.evictable and not recompute:
                neighbors = [x for x in t.inputs if self.tensors[x].evictable]
                self.arena.add_storage(sid, t.cost, neighbors)
            elif self.move and not recompute:
                self.arena.add_storage(sid, t.cost, (), evictable=False)
            cls = t.cls if self.partition else coop.EXPENSIVE
            storage = sid if t.evictable or self.move else coop.NO_STORAGE
            self.offsets[sid] = self.arena.allocate_or_evict(
                t.nbytes, cls, self.policy, self.clock, self.evict, storage=storage,
                move=self.moved)
        finally:
            for x in pinned:
                self.arena.unpin(x)
        self.evicted.discard(sid)
        self.clock += t.cost
        self.executed += t.cost
        for x in (sid, *t.inputs):
            if self.tensors[x].evictable:
                self.arena.touch(x, self.clock)
        if recompute:
            self.recomputes += 1
            self.recompute_cost += t.cost
        self.peak = max(self.peak, self.arena.stats()["used_bytes"])

    def moved(self, sid, src, dst):
        """The arena moves sid out of a window (policy coop): its bytes go to dst."""
        self.offsets[sid] = dst
        self.moves.append((len(self.rows), dst, self.tensors[sid].nbytes))
        self.executed += self.arena.storage_info(sid)["nbytes"] * MOVE_COST   # the copy

    def release(self, sid):
        """The program drops sid: its piece (if resident) and its storage go."""
        if sid in self.offsets:
            self.arena.free(self.offsets.pop(sid))
        self.evicted.discard(sid)
        if self.tensors[sid].evictable or self.move:
            self.arena.remove_storage(sid)

    def sample(self):
        """One row of the memory map: the state of the piece under each address bin."""
        pieces = self.arena.pieces()
        starts = np.fromiter((p[0] for p in pieces), np.int64, len(pieces))
        used = (EXPENSIVE_USED, CHEAP_USED)
        states = np.array([FREE if free else ANONYMOUS if sid < 0 or not self.tensors[sid].evictable
                           else used[self.tensors[sid].cls] for _, _, free, sid in pieces])
        self.rows.append(states[np.searchsorted(starts, self.centers, side="right") - 1])


def run(tensors, steps, capacity, policy_name, bins, label):
    """Runs the program; returns the runtime and the step where it ran out of memory (or None)."""
    policy, partition, move = POLICIES[policy_name]
    runtime = Runtime(tensors, capacity, policy, partition, bins, move)
    failed_at = None
    start = time.perf_counter()
    for index, (kind, sid) in enumerate(tqdm(steps, desc=label, unit="step", leave=False)):
        if kind == "release":
            runtime.release(sid)
            continue
        try:
            runtime.compute(sid)
        except coop.OutOfMemoryError as error:
            failed_at = (index, str(error))
            runtime.note_failed_attempt()
            break
        if bins:
            runtime.sample()
    runtime.wall = time.perf_counter() - start
    return runtime, failed_at


def save_memory_map(runtime, path, title):
    grid = np.array(runtime.rows).T
    mib = runtime.arena.capacity / MB
    fig, ax = plt.subplots(figsize=(11, 4.5))
    ax.imshow(grid, aspect="auto", origin="lower", interpolation="nearest", vmin=0, vmax=3,
              cmap=ListedColormap(STATE_COLORS), extent=(0, grid.shape[1], 0, mib))
    ax.set(xlabel="time step (op)", ylabel="address (MiB)", title=title)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in STATE_COLORS]
    labels = list(STATE_NAMES)
    if runtime.moves:    # coop: where each moved piece went, at the step it moved
        rows, dsts, sizes = np.array(runtime.moves, dtype=np.float64).T
        ax.plot(rows + 0.5, (dsts + sizes / 2) / MB, "v", color="#d0021b", ms=7, mec="white")
        handles.append(plt.Line2D([], [], color="#d0021b", marker="v", ls=""))
        labels.append(f"moved here ({len(runtime.moves)})")
    ax.legend(handles=handles, labels=labels, loc="upper left", bbox_to_anchor=(1.01, 1),
              fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report_rows(runtime, failed_at, baseline_cost, total_steps):
    s = runtime.arena.stats()
    outcome = "completed" if failed_at is None else f"OOM at step {failed_at[0]}/{total_steps}"
    overhead = f"{runtime.executed / baseline_cost:.3f}{'' if failed_at is None else ' (partial)'}"
    ratios = runtime.largest_free_ratios
    return [
        ("outcome", outcome),
        ("evictions", f"{s['evictions']}"),
        ("bytes evicted (MiB)", f"{s['bytes_evicted'] / MB:.1f}"),
        ("recomputes", f"{runtime.recomputes}"),
        ("recompute cost", f"{runtime.recompute_cost:.1f}"),
        ("compute overhead", overhead),
        ("fragmentation rate", f"{s['fragmentation_rate']:.3f}"),
        ("largest free / free at failures", f"{np.mean(ratios):.3f}" if ratios else "-"),
        ("window moves", f"{s['window_moves']}"),
        ("bytes moved (MiB)", f"{s['bytes_moved'] / MB:.1f}"),
        ("eviction searches", f"{s['searches']}"),
        ("search time (ms)", f"{s['search_time'] * 1e3:.2f}"),
        ("peak used (MiB)", f"{runtime.peak / MB:.1f}"),
        ("wall time (s)", f"{runtime.wall:.2f}"),
    ]


def check_budget(text, spec, peak):
    """The budget's bytes (a share: of peak); one the arena cannot hold a piece in, or a share
    of less than a byte, is a usage error."""
    try:
        budget = spec.resolve(peak)
    except ValueError as e:
        usage_error(SCRIPT, f"--budget: {e}")
    try:
        coop.Arena(budget)          # the arena's own check: at least one aligned piece
    except ValueError as e:
        usage_error(SCRIPT, f"--budget {text}: {e}")
    return budget


def main(argv=None):
    parser = Parser(SCRIPT, description=__doc__.splitlines()[0])
    parser.add_argument("--budget", default="0.5",
                        help='a share of the unlimited peak ("0.5", "0.5x", "50%%") or a size '
                             '("64MiB")')
    parser.add_argument("--layers", type=positive_int, default=16)
    parser.add_argument("--iterations", type=positive_int, default=3)
    parser.add_argument("--unit-mib", type=positive_float, default=8.0,
                        help="largest activation size A")
    parser.add_argument("--matmul-density", type=positive_float, default=32.0,
                        help="cost per byte of a matmul relative to an elementwise op")
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument("--policies", nargs="+", default=["dtr", "coop"], choices=POLICIES)
    parser.add_argument("--bins", type=positive_int, default=400,
                        help="address bins of the memory map")
    parser.add_argument("--out", default="fragmentation_out", help="directory for the PNGs")
    args = parser.parse_args(argv)
    names = args.policies
    try:
        spec = Budget(args.budget, of="the unlimited peak", bare="ratio")
    except (TypeError, ValueError) as e:
        usage_error(SCRIPT, f"--budget: {e}")
    if not spec.is_share:       # a size: checked before the unlimited run
        check_budget(args.budget, spec, None)
    check_out(SCRIPT, args.out)

    tensors, steps = build_program(args.layers, args.iterations, int(args.unit_mib * MB),
                                   args.matmul_density, args.seed)
    total = sum(t.nbytes for t in tensors) * 2
    unlimited, failed = run(tensors, steps, total, "none", 0, "unlimited")
    if failed is not None:
        raise RuntimeError(f"the unlimited run ran out of memory: {failed[1]}")
    budget = check_budget(args.budget, spec, unlimited.peak)
    ratio = f"{budget / unlimited.peak:.3g}"
    print(f"command: {' '.join([os.path.basename(sys.argv[0])] + (argv or sys.argv[1:]))}")
    print(f"program: {len(tensors)} tensors, {len(steps)} steps; unlimited peak "
          f"{unlimited.peak / MB:.1f} MiB, cost {unlimited.executed:.1f}; budget "
          f"{budget / MB:.1f} MiB (ratio {ratio})")

    os.makedirs(args.out, exist_ok=True)
    columns, saved = {}, []
    for name in names:
        runtime, failed_at = run(tensors, steps, budget, name, args.bins, name)
        columns[name] = report_rows(runtime, failed_at, unlimited.executed, len(steps))
        path = os.path.join(args.out, f"memory_map_{name}.png")
        verdict = columns[name][0][1]
        if runtime.rows:       # none where the policy ran out of memory at its first op
            save_memory_map(runtime, path, f"{name} at ratio {ratio}: {verdict}, "
                            f"{runtime.arena.stats()['evictions']} evictions")
            saved.append(path)
        if failed_at is not None:
            print(f"{name} ran out of memory: {failed_at[1]}")

    labels = [label for label, _ in next(iter(columns.values()))]
    width = max(map(len, labels))
    print(f"\n{'':{width}}  " + "  ".join(f"{n:>18}" for n in names))
    for i, label in enumerate(labels):
        print(f"{label:{width}}  " + "  ".join(f"{columns[n][i][1]:>18}" for n in names))
    print("\nmemory maps: " + (", ".join(saved) or "none (every policy ran out of memory at its "
                                                  "first op)"))
    return 3 if any(columns[n][0][1] != "completed" for n in names) else 0


if __name__ == "__main__":
    sys.exit(main())
