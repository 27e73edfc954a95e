"""Benchmarks of the NumPy host backend (coop/backends/_host.pyx), one table per part.

A. Allocator overhead: an MLP's forward and backward passes in plain NumPy (many medium arrays
   per step), timed with every data allocation served by the coop handler at a budget that never
   evicts (2x the workload's peak) and with NumPy's default handler, in the same process,
   alternating which goes first. Target: coop / plain <= 1.10.
B. Per-op runtime overhead: `coop.apply(kernel, ...)` on coop Tensors (pin, run, time the
   kernel, record the Op, make the output's Tensor, release it) against calling the kernel's
   function directly on NumPy arrays, for a few kernels on small (16x16) and medium (256x256)
   float64 arrays, at a budget that never evicts; --ops calls per run, median of --repeat runs,
   order alternating. Reported in microseconds per op; the difference is the runtime's cost.
C. Per-op bookkeeping of the host tier: the same `coop.apply` loop (16x16 add) and AdamW training
   steps of a small GPT (coop.models.GPT, --gpt-steps per run, each step marked: the reference
   the tier prefetches and prices by) at a budget that never evicts, under `coop` and under
   `coop-offload` without and with a lookahead of 8 (the live reference: each op's constant
   inputs listed, each step's order rebuilt); one runtime per policy, the policies' runs
   interleaved, rotating which goes first. The tier never opens here, so the difference is its
   bookkeeping alone. Target: unchanged (ratios within the runs' noise).

Run: python benchmarks/bench_host.py [--repeat 7] [--steps 20] [--batch 64] [--width 512]
     [--ops 2000] [--gpt-steps 10] [--parts ABC]
(OPENBLAS_NUM_THREADS=1 gives steadier numbers on a shared or small machine.)
"""
import argparse
import os
import shlex
import statistics
import sys
import time
import tracemalloc

import numpy as np

import coop


def make_mlp(rng, sizes, dtype):
    """Weights and biases of a ReLU MLP with layer sizes `sizes`."""
    return [(rng.standard_normal((fan_in, fan_out)).astype(dtype) / np.sqrt(fan_in),
             np.zeros(fan_out, dtype))
            for fan_in, fan_out in zip(sizes[:-1], sizes[1:])]


def train_step(params, x, labels, lr=0.01):
    """One SGD step of softmax cross-entropy: forward, backward, in-place update; returns the loss."""
    activations = [x]
    for i, (w, b) in enumerate(params):
        z = activations[-1] @ w + b
        activations.append(np.maximum(z, 0) if i < len(params) - 1 else z)
    logits = activations[-1]
    shifted = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(shifted)
    probs /= probs.sum(axis=1, keepdims=True)
    rows = np.arange(len(labels))
    loss = -np.log(probs[rows, labels] + 1e-12).mean()
    grad = probs
    grad[rows, labels] -= 1
    grad /= len(labels)
    for i in range(len(params) - 1, -1, -1):
        w, b = params[i]
        grad_w = activations[i].T @ grad
        grad_b = grad.sum(axis=0)
        if i:
            grad = (grad @ w.T) * (activations[i] > 0)
        w -= lr * grad_w
        b -= lr * grad_b
    return float(loss)


def workload(args):
    """Model and batches from a fixed seed; returns run() doing args.steps training steps."""
    rng = np.random.default_rng(0)
    sizes = [args.width] * (args.depth + 1) + [10]
    params = make_mlp(rng, sizes, np.float32)
    x = rng.standard_normal((args.batch, args.width)).astype(np.float32)
    labels = rng.integers(0, 10, size=args.batch)

    def run():
        return [train_step(params, x, labels) for _ in range(args.steps)]
    return run


def peak_bytes(args):
    """Peak traced bytes of building the workload and running it once (NumPy reports its data)."""
    tracemalloc.start()
    workload(args)()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def time_plain(args):
    run = workload(args)
    start = time.perf_counter()
    losses = run()
    return time.perf_counter() - start, losses


def time_coop(args, budget):
    backend = coop.numpy_allocator(budget)
    with backend:
        run = workload(args)
        start = time.perf_counter()
        losses = run()
        elapsed = time.perf_counter() - start
        del run
    stats = backend.arena.stats()
    assert stats["used_bytes"] == 0 and stats["evictions"] == 0 and backend.calls()["slow"] == 0
    return elapsed, losses, backend.calls()


def part_a(args):
    """Allocator overhead; returns the table's rows and a summary line."""
    budget = 2 * peak_bytes(args)
    times = {"plain": [], "coop": []}
    calls = None
    for r in range(args.repeat):
        for name in (("plain", "coop") if r % 2 == 0 else ("coop", "plain")):
            if name == "plain":
                elapsed, losses = time_plain(args)
                reference = losses
            else:
                elapsed, losses, calls = time_coop(args, budget)
                coop_losses = losses
            times[name].append(elapsed)
    assert coop_losses == reference, "the coop run must compute bit-identical losses"
    plain, ours = statistics.median(times["plain"]), statistics.median(times["coop"])
    rows = [("NumPy default handler", plain, plain / args.steps, 1.0),
            (f"coop handler ({budget / 2**20:.1f} MiB budget)", ours, ours / args.steps,
             ours / plain)]
    summary = (f"coop / plain = {ours / plain:.3f} (target <= 1.10); "
               f"handler calls per run: {calls['malloc']} malloc, {calls['calloc']} calloc, "
               f"{calls['realloc']} realloc, {calls['free']} free")
    return rows, summary


#: part B's kernels: name -> (function, number of array inputs)
KERNELS_B = {
    "add": (lambda a, b: a + b, 2),
    "tanh": (np.tanh, 1),
    "matmul": (lambda a, b: a @ b, 2),
    "transpose (a view)": (lambda a: a.T, 1),
}
SIZES_B = {"small 16x16": 16, "medium 256x256": 256}


def time_ops(call, inputs, ops):
    """Seconds per call of call(*inputs), over `ops` calls (each result dropped at once)."""
    start = time.perf_counter()
    for _ in range(ops):
        call(*inputs)
    return (time.perf_counter() - start) / ops


def part_b(args):
    """Per-op overhead of coop.apply; returns the table's rows and a summary line."""
    rng = np.random.default_rng(0)
    rows, overheads = [], []
    for size_name, n in SIZES_B.items():
        arrays = [rng.standard_normal((n, n)) for _ in range(2)]
        budget = 8 * (2 + 1) * arrays[0].nbytes + (1 << 20)   # inputs and outputs, many times over
        rt = coop.Runtime(coop.numpy_allocator(budget))
        tensors = [rt.tensor(a) for a in arrays]
        ops = max(args.ops // (16 if n > 64 else 1), 50)
        for kernel_name, (fn, arity) in KERNELS_B.items():
            kernel = coop.Kernel(fn, name=kernel_name.split()[0])
            times = {"direct": [], "apply": []}
            for r in range(args.repeat):
                for variant in (("direct", "apply") if r % 2 == 0 else ("apply", "direct")):
                    if variant == "direct":
                        times[variant].append(time_ops(fn, arrays[:arity], ops))
                    else:
                        times[variant].append(time_ops(coop.apply, [kernel] + tensors[:arity], ops))
            direct, applied = statistics.median(times["direct"]), statistics.median(times["apply"])
            rows.append((f"{kernel_name}, {size_name}", direct, applied, applied / direct))
            overheads.append(applied - direct)
        stats = rt.stats()
        assert stats["evictions"] == 0 and stats["recomputes"] == 0
        assert stats["used_bytes"] == sum(a.nbytes for a in arrays)   # every output released
    low, high = min(overheads) * 1e6, max(overheads) * 1e6
    summary = (f"coop.apply adds {low:.1f} to {high:.1f} us per op "
               f"(median {statistics.median(overheads) * 1e6:.1f} us); {args.ops} calls per run on "
               f"small arrays, {max(args.ops // 16, 50)} on medium ones")
    return rows, summary


#: part C's variants: label -> Runtime keyword arguments
TIER_VARIANTS = {
    "coop": dict(policy="coop"),
    "coop-offload": dict(policy="coop-offload"),
    "coop-offload, lookahead 8": dict(policy="coop-offload", lookahead=8),
}


def gpt_steps(rt, steps):
    """A run of part C: a small GPT trained by AdamW for `steps` marked steps on rt; returns
    the seconds per step and the losses."""
    from coop.models import GPT
    from coop.optim import AdamW
    model = GPT(rt, 32, 16, 2, 2, 64, rng=0)
    opt = AdamW(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(1)
    batches = [rng.integers(0, 32, (4, 16)) for _ in range(steps)]
    losses = []
    start = time.perf_counter()
    for idx in batches:
        loss = model.loss(idx, np.roll(idx, -1, axis=1))
        losses.append(float(loss.numpy()))
        loss.backward()
        opt.step()          # marks the step (Runtime.mark_step)
        opt.zero_grad()
        del loss
    return (time.perf_counter() - start) / steps, losses


def part_c(args):
    """The host tier's per-op bookkeeping; returns the table's rows and a summary line."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((16, 16)) for _ in range(2)]
    kernel = coop.Kernel(lambda a, b: a + b, name="add")
    budget = 1 << 30
    runtimes = {name: coop.Runtime(coop.numpy_allocator(budget), **kw)
                for name, kw in TIER_VARIANTS.items()}
    tensors = {name: [rt.tensor(a) for a in arrays] for name, rt in runtimes.items()}
    names = list(TIER_VARIANTS)
    apply_t = {name: [] for name in names}
    step_t = {name: [] for name in names}
    losses = {}
    for r in range(args.repeat):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            apply_t[name].append(time_ops(coop.apply, [kernel] + tensors[name], args.ops))
        for name in order:
            rt = coop.Runtime(coop.numpy_allocator(budget), **TIER_VARIANTS[name])
            elapsed, losses[name] = gpt_steps(rt, args.gpt_steps)
            step_t[name].append(elapsed)
            stats = rt.stats()
            assert stats["evictions"] == 0 and stats.get("offloads", 0) == 0
    assert all(losses[name] == losses["coop"] for name in names), \
        "every variant must compute bit-identical losses"
    rows = []
    for name in names:
        # each run against coop's run of the same round (the machine's load moves between rounds)
        ra = [x / y for x, y in zip(apply_t[name], apply_t["coop"])]
        rs = [x / y for x, y in zip(step_t[name], step_t["coop"])]
        rows.append((name, statistics.median(apply_t[name]), statistics.median(step_t[name]),
                     statistics.median(ra), statistics.median(rs)))
    summary = (f"coop.apply: {args.ops} calls per run (16x16 add); GPT: {args.gpt_steps} AdamW "
               f"steps per run (2 layers, width 64, batch 4 x 16); medians of {args.repeat} runs; "
               f"ratios: the median over rounds of each run against coop's in the same round")
    return rows, summary


def print_table(title, header, rows, summary, unit=1e3, digits=(2, 3)):
    """Rows of (label, a, b, ratio); a and b are seconds, printed in 1/unit (ms by default)."""
    print(f"\n{title}")
    print(f"{header[0]:<40} {header[1]:>12} {header[2]:>12} {header[3]:>8}")
    for label, first, second, ratio in rows:
        print(f"{label:<40} {first * unit:>12.{digits[0]}f} {second * unit:>12.{digits[1]}f} "
              f"{ratio:>8.3f}")
    print(summary)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="timed runs per variant (median)")
    parser.add_argument("--steps", type=int, default=20, help="training steps per run")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--depth", type=int, default=4, help="hidden layers")
    parser.add_argument("--ops", type=int, default=2000,
                        help="part B: calls per run on small arrays (1/16 of it on medium ones)")
    parser.add_argument("--gpt-steps", type=int, default=10,
                        help="part C: training steps per run")
    parser.add_argument("--parts", default="ABC", help="the parts to run, e.g. C")
    args = parser.parse_args(argv)
    print("command:", shlex.join([sys.executable] + sys.argv))
    threads = {k: v for k, v in os.environ.items() if k.endswith("_NUM_THREADS")}
    print(f"numpy {np.__version__}, coop {coop.__version__}; median of {args.repeat} runs, "
          f"order alternating; {threads or 'BLAS threads: library default'}")

    if "A" in args.parts:
        rows, summary = part_a(args)
        print_table(f"A. allocator overhead: MLP {args.depth}x{args.width}, batch {args.batch}, "
                    f"{args.steps} steps", ("variant", "run [ms]", "step [ms]", "ratio"), rows,
                    summary)
    if "B" in args.parts:
        rows, summary = part_b(args)
        print_table("B. per-op overhead: coop.apply vs the kernel called directly",
                    ("kernel, arrays (float64)", "direct [us]", "apply [us]", "ratio"), rows,
                    summary, unit=1e6, digits=(2, 2))
    if "C" not in args.parts:
        return
    rows, summary = part_c(args)
    print("\nC. the host tier's per-op bookkeeping (the tier never opens: its bookkeeping alone)")
    print(f"{'policy':<28} {'apply [us]':>11} {'GPT step [ms]':>14} {'apply ratio':>12} "
          f"{'step ratio':>11}")
    for name, a, t, ra, rs in rows:
        print(f"{name:<28} {a * 1e6:>11.2f} {t * 1e3:>14.2f} {ra:>12.3f} {rs:>11.3f}")
    print(summary)


if __name__ == "__main__":
    main()
