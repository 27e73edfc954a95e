"""The islands workload: one training step, as a coop trace (docs/trace-format.md), of a
branchy convolutional pyramid whose backward pass leaves small weight gradients, held to the
end, between large activations.

Block k (k = 1..blocks, activations shrinking by `shrink` per block) runs `branches` convs on
x[k-1], each with its own weight, and concatenates them into x[k]; a per-block counter (8
bytes, like batch norm's num_batches_tracked) is updated and held. The backward pass, from the
top block down, takes per branch a slice of the gradient, the weight gradient (the weight's
size, held to the end, as autograd leaves it in .grad) and the input gradient (x[k-1]'s size),
summed into x[k-1]'s gradient branch by branch. Each weight gradient is allocated between
the large gradients and activations of its block; once those are released, the gradients stay
as islands: free memory is plentiful but cut into ranges smaller than the stem's gradients,
which come last. Recomputing an evicted weight gradient needs the backward chain above it and
the forward chain below it, both released by then, through fan-outs of `branches`.

Costs: an a100-80gb roofline with a launch cost per kernel; a conv does 2 * taps * channels
flops per output element (fp32).

usage: python benchmarks/islands.py OUT.jsonl [--blocks K] [--branches M] [--stem-mib S] ...
"""
import argparse
import json
import random
from dataclasses import dataclass

from coop.engine.cost import DEVICES, DeviceSpec

MIB = 1 << 20
ALIGNMENT = 512


@dataclass(frozen=True)
class Islands:
    """The workload's shape (the defaults are the benchmark's)."""

    blocks: int = 48
    branches: int = 3
    stem_mib: float = 256.0         # the input batch and the stem's activation
    shrink: float = 0.97            # activation size ratio from one block to the next
    weight_kib: tuple = (256, 2816)  # each weight's (and its gradient's) size, drawn uniformly
    taps: int = 9                   # a 3x3 conv
    channels: int = 64              # input channels each conv output element reads
    launch_ns: float = 5000.0       # fixed cost of every kernel
    seed: int = 0

    def __post_init__(self):
        if self.blocks < 1 or self.branches < 1:
            raise ValueError(f"Islands: blocks and branches must be >= 1, got {self.blocks} "
                             f"and {self.branches}")
        if not (0 < self.shrink <= 1 and self.stem_mib > 0):
            raise ValueError(f"Islands: shrink must be in (0, 1] and stem_mib > 0, got "
                             f"{self.shrink} and {self.stem_mib}")

    def activation(self, k):
        """Bytes of x[k], a multiple of branches * ALIGNMENT (each branch its share)."""
        unit = self.branches * ALIGNMENT
        return max(unit, int(self.stem_mib * MIB * self.shrink ** k) // unit * unit)


class _Writer:
    """Appends coop trace records with fresh ids."""

    def __init__(self, device):
        self.records = [{"op": "meta", "alignment": ALIGNMENT}]
        self.device = device
        self.next_id = 0

    def _fresh(self):
        self.next_id += 1
        return self.next_id - 1

    def constant(self, size):
        sid = self._fresh()
        self.records.append({"op": "constant", "id": sid, "size": int(size)})
        return sid

    def call(self, name, inputs, size, flops, read, cls):
        """One kernel with one new output of `size` bytes, reading `read` bytes."""
        sid = self._fresh()
        self.records.append({"op": "call", "name": name, "inputs": list(inputs),
                             "outputs": [{"id": sid, "size": int(size), "alias": -1}],
                             "cost": self.device.cost_ns(flops, read + size), "cls": cls})
        return sid

    def release(self, *sids):
        self.records += [{"op": "release", "id": s} for s in sids]


def islands_records(shape=Islands()):
    """The trace's records, in order (a list of dicts)."""
    a100 = DEVICES["a100-80gb"]
    w = _Writer(DeviceSpec("a100-80gb", a100.flops_per_s, a100.bytes_per_s, shape.launch_ns))
    rng = random.Random(shape.seed)
    M = shape.branches
    low, high = shape.weight_kib
    size = {(k, j): rng.randint(low, high) * 1024
            for k in range(1, shape.blocks + 1) for j in range(M)}
    weight = {kj: w.constant(s) for kj, s in size.items()}
    one = w.constant(8)
    x = {0: w.constant(shape.activation(0))}        # the input batch

    def conv_flops(out_bytes):
        return 2 * shape.taps * shape.channels * out_bytes / 4

    for k in range(1, shape.blocks + 1):
        act_in, part = shape.activation(k - 1), shape.activation(k) // M
        parts = [w.call("conv", [x[k - 1], weight[k, j]], part, conv_flops(part), act_in,
                        "expensive") for j in range(M)]
        x[k] = w.call("cat", parts, shape.activation(k), 0, shape.activation(k), "cheap")
        w.release(*parts)
        counter = w.constant(8)
        w.call("add", [counter, one], 8, 1, 16, "cheap")    # the new counter, held
        w.release(counter)
    top = shape.blocks
    w.call("sum", [x[top]], 8, shape.activation(top) / 4, shape.activation(top), "cheap")
    grad = w.call("ones_like", [x[top]], shape.activation(top), 0, 0, "cheap")
    w.release(x[top])
    for k in range(top, 0, -1):
        act_in, part = shape.activation(k - 1), shape.activation(k) // M
        total = None
        for j in range(M):
            g = w.call("slice", [grad], part, 0, part, "cheap")
            w.call("conv_backward_weight", [g, x[k - 1]], size[k, j],     # held to the end
                   conv_flops(part), part + act_in, "expensive")
            gx = w.call("conv_backward_input", [g, weight[k, j]], act_in, conv_flops(part),
                        part, "expensive")
            w.release(g)
            if total is None:
                total = gx
            else:
                summed = w.call("add", [total, gx], act_in, 0, 2 * act_in, "cheap")
                w.release(total, gx)
                total = summed
        w.release(grad)
        if k > 1:
            w.release(x[k - 1])          # the input batch x[0] stays: it is the program's
        grad = total
    w.release(grad)
    return w.records


def write_islands(path, shape=Islands()):
    """Write the trace to `path`; returns the number of records."""
    records = islands_records(shape)
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")
    return len(records)


def main(argv=None):
    defaults = Islands()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the trace to write (.jsonl)")
    ap.add_argument("--blocks", type=int, default=defaults.blocks)
    ap.add_argument("--branches", type=int, default=defaults.branches)
    ap.add_argument("--stem-mib", type=float, default=defaults.stem_mib)
    ap.add_argument("--shrink", type=float, default=defaults.shrink)
    ap.add_argument("--seed", type=int, default=defaults.seed)
    a = ap.parse_args(argv)
    shape = Islands(blocks=a.blocks, branches=a.branches, stem_mib=a.stem_mib, shrink=a.shrink,
                    seed=a.seed)
    n = write_islands(a.out, shape)
    print(f"{a.out}: {n} records, {shape.blocks} blocks x {shape.branches} branches, stem "
          f"{shape.activation(0) / MIB:.0f} MiB")


if __name__ == "__main__":
    main()
