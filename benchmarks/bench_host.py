"""Benchmarks of the NumPy host backend (coop/_host.pyx), one table per part.

A. Allocator overhead: an MLP's forward and backward passes in plain NumPy (many medium arrays
   per step), timed with every data allocation served by the coop handler at a budget that never
   evicts (2x the workload's peak) and with NumPy's default handler, in the same process,
   alternating which goes first. Target: coop / plain <= 1.10.

Run: python benchmarks/bench_host.py [--repeat 7] [--steps 20] [--batch 64] [--width 512]
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


def print_table(title, header, rows, summary):
    print(f"\n{title}")
    print(f"{header[0]:<40} {header[1]:>12} {header[2]:>12} {header[3]:>8}")
    for label, total, per_step, ratio in rows:
        print(f"{label:<40} {total * 1e3:>12.2f} {per_step * 1e3:>12.3f} {ratio:>8.3f}")
    print(summary)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="timed runs per variant (median)")
    parser.add_argument("--steps", type=int, default=20, help="training steps per run")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--depth", type=int, default=4, help="hidden layers")
    args = parser.parse_args(argv)
    print("command:", shlex.join([sys.executable] + sys.argv))
    threads = {k: v for k, v in os.environ.items() if k.endswith("_NUM_THREADS")}
    print(f"numpy {np.__version__}, coop {coop.__version__}; median of {args.repeat} runs, "
          f"order alternating; {threads or 'BLAS threads: library default'}")

    rows, summary = part_a(args)
    print_table(f"A. allocator overhead: MLP {args.depth}x{args.width}, batch {args.batch}, "
                f"{args.steps} steps", ("variant", "run [ms]", "step [ms]", "ratio"), rows, summary)

    # B. (to add) per-op overhead of coop.apply vs a direct kernel call: its own part_b()
    # returning rows for print_table, called here after part A.


if __name__ == "__main__":
    main()
