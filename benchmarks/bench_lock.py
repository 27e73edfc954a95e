"""What the runtime's lock costs per op: `coop.apply` on small and medium float64 arrays, per-op
overhead over calling the kernel directly, with the lock (coop as shipped: Runtime.apply and
Tensor.__del__ take the runtime's RLock) and without it (apply's body, Runtime._apply, called
directly, and Tensor.__del__ without the lock patched in for the run), in the same process, order alternating,
median of --repeat runs of --ops calls each. The difference of the two overheads is the lock's.

Run: OPENBLAS_NUM_THREADS=1 python benchmarks/bench_lock.py [--repeat 9] [--ops 4000]
"""
import argparse
import shlex
import statistics
import sys
import time

import numpy as np

import coop
from coop import tensor as tensor_module

KERNELS = {"add": (lambda a, b: a + b, 2), "tanh": (np.tanh, 1), "transpose (a view)": (lambda a: a.T, 1)}
SIZES = {"small 16x16": 16, "medium 256x256": 256}


def _del_unlocked(self):
    view = self._view
    view.runtime._engine.unref(view.sid)


class Unlocked:
    """Tensor.__del__ without the lock, while entered (the unlocked variant calls
    Runtime._apply, apply's body, directly)."""

    def __enter__(self):
        self.saved = tensor_module.Tensor.__del__
        tensor_module.Tensor.__del__ = _del_unlocked

    def __exit__(self, *exc):
        tensor_module.Tensor.__del__ = self.saved


def time_ops(call, inputs, ops):
    start = time.perf_counter()
    for _ in range(ops):
        call(*inputs)
    return (time.perf_counter() - start) / ops


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--ops", type=int, default=4000)
    args = parser.parse_args(argv)
    print("command:", shlex.join([sys.executable] + sys.argv))
    print(f"numpy {np.__version__}; median of {args.repeat} runs, order alternating")
    print(f"\n{'kernel, arrays (float64)':<34} {'direct':>9} {'locked':>9} {'unlocked':>9} "
          f"{'lock [us/op]':>13}")
    rng = np.random.default_rng(0)
    lock_costs, overheads = [], []
    for size_name, n in SIZES.items():
        arrays = [rng.standard_normal((n, n)) for _ in range(2)]
        rt = coop.Runtime(coop.numpy_allocator(8 * 3 * arrays[0].nbytes + (1 << 20)))
        tensors = [rt.tensor(a) for a in arrays]
        ops = max(args.ops // (16 if n > 64 else 1), 50)
        for name, (fn, arity) in KERNELS.items():
            kernel = coop.Kernel(fn, name=name.split()[0])
            times = {"direct": [], "locked": [], "unlocked": []}
            for r in range(args.repeat):
                order = ["direct", "locked", "unlocked"]
                for variant in (order if r % 2 == 0 else order[::-1]):
                    if variant == "direct":
                        times[variant].append(time_ops(fn, arrays[:arity], ops))
                    elif variant == "locked":
                        times[variant].append(time_ops(rt.apply, [kernel] + tensors[:arity], ops))
                    else:
                        with Unlocked():
                            times[variant].append(time_ops(rt._apply, [kernel, tuple(tensors[:arity]), {}], ops))
            direct, locked, unlocked = (statistics.median(times[v]) for v in times)
            lock_costs.append(locked - unlocked)
            overheads.append(locked - direct)
            print(f"{name + ', ' + size_name:<34} {direct * 1e6:>9.2f} {locked * 1e6:>9.2f} "
                  f"{unlocked * 1e6:>9.2f} {(locked - unlocked) * 1e6:>13.2f}")
        assert rt.stats()["evictions"] == 0 and rt.pinned() == {}
    print(f"\nthe lock adds a median {statistics.median(lock_costs) * 1e6:.2f} us per op "
          f"(range {min(lock_costs) * 1e6:.2f} to {max(lock_costs) * 1e6:.2f}) to coop.apply's "
          f"median overhead of {statistics.median(overheads) * 1e6:.2f} us per op; times in us")


if __name__ == "__main__":
    main()
