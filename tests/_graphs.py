"""Kernels, small helpers and random kernel DAGs shared by the runtime tests.

Every kernel is a plain function of NumPy arrays (see coop/kernel.py); names follow the
paper's table where the class matters ("matmul" is EXPENSIVE, the rest CHEAP).
"""
import numpy as np

import coop

KiB = 1 << 10
MiB = 1 << 20

# ---- kernels ------------------------------------------------------------------------------------

ADD = coop.Kernel(lambda a, b: a + b, name="add")
ADDC = coop.Kernel(lambda a, c: a + c, name="add_scalar")
MUL = coop.Kernel(lambda a, b: a * b, name="mul")
TANH = coop.Kernel(np.tanh, name="tanh")
MATMUL = coop.Kernel(lambda a, b: (a @ b) / b.shape[0], name="matmul",
                     flops=lambda a, b: 2.0 * a[0][0] * a[0][1] * b[0][1])
SUM = coop.Kernel(lambda a: a.sum(axis=0, keepdims=True), name="sum")
TRANSPOSE = coop.Kernel(lambda a: a.T, name="transpose")
RESHAPE = coop.Kernel(lambda a, shape: a.reshape(shape), name="reshape")
SLICE = coop.Kernel(lambda a, index: a[index], name="slice")
FLIP = coop.Kernel(lambda a: a[:, ::-1], name="flip")
DROPOUT = coop.Kernel(lambda a, rng, p=0.5: a * (rng.random(a.shape) >= p) / (1 - p),
                      name="dropout", random=True)
RELU_ = coop.Kernel(lambda a: np.maximum(a, 0, out=a), name="relu_", inplace=0)
TANH_ = coop.Kernel(lambda a: np.tanh(a, out=a), name="tanh_", inplace=0)
# temporaries: tanh(a), tanh(b) and the products live only inside the kernel
MIX = coop.Kernel(lambda a, b: np.tanh(a) * 0.5 + np.tanh(b) * 0.25, name="mix")
SPLIT = coop.Kernel(lambda a: (a + 1.0, a * a), name="split")          # two new outputs
T_AND_DEC = coop.Kernel(lambda a: (a.T, a - 1.0), name="t_and_dec")    # an alias and a new one


# ---- helpers ------------------------------------------------------------------------------------

def used(rt):
    return rt.arena.stats()["used_bytes"]


def resident(t):
    return t.storage.array is not None


def evict(rt, *tensors):
    """Evict the tensors' storages the way the core's callback would; they must be gone."""
    rt.evict(*tensors)
    for t in tensors:
        assert not resident(t) and not rt.arena.storage_info(t.storage.sid)["resident"]


def checked_apply(rt):
    """rt.apply followed by rt.arena.check() after every op."""
    def apply(kernel, *inputs, **attrs):
        out = rt.apply(kernel, *inputs, **attrs)
        rt.arena.check()
        return out
    return apply


def rounded(nbytes, alignment=64):
    return max(-(-nbytes // alignment) * alignment, alignment)


# ---- random DAGs --------------------------------------------------------------------------------

N = 24                      # matrices are N x N float64: 4.5 KiB (4608 bytes) each
BINARY = (ADD, MUL, MATMUL, MIX)
UNARY = (TANH, SUM, TRANSPOSE, FLIP, DROPOUT, SPLIT, T_AND_DEC)


def random_graph(seed, n_ops=36, n_constants=3):
    """A program: constants' values and a list of (kernel, input node ids, attrs, n outputs).

    Node ids count constants first, then every output of every op in order. An in-place op
    (relu_/tanh_) yields one node: the mutated tensor. In-place targets are never constants
    (nor views of them), so the only unevictable bytes are the constants. `keep` is the set of
    nodes whose tensors the program holds to the end; every other one is dropped right after
    its last use (so it is released, and recomputed from its record when needed).
    """
    rng = np.random.default_rng(seed)
    constants = [rng.standard_normal((N, N)) for _ in range(n_constants)]
    shape = {i: (N, N) for i in range(n_constants)}
    root = {i: i for i in range(n_constants)}          # node -> node owning its storage
    ops, n = [], n_constants
    square = lambda: [i for i in shape if shape[i] == (N, N)]  # noqa: E731
    while len(ops) < n_ops:
        kind = rng.random()
        if kind < 0.1:
            targets = [i for i in square() if root[i] >= n_constants]
            if not targets:
                continue
            a = int(rng.choice(targets))
            ops.append((RELU_ if rng.random() < 0.5 else TANH_, (a,), {}, 1))
            shape[n], root[n] = (N, N), root[a]
            n += 1
        elif kind < 0.45:
            kernel = BINARY[rng.integers(len(BINARY))]
            pool = square() if kernel is MATMUL else list(shape)
            a, b = (int(x) for x in rng.choice(pool, 2))
            out = np.broadcast_shapes(shape[a], shape[b]) if kernel is not MATMUL else shape[a]
            if kernel is MATMUL and shape[a] != (N, N):
                continue
            ops.append((kernel, (a, b), {}, 1))
            shape[n], root[n] = out, n
            n += 1
        else:
            kernel = UNARY[rng.integers(len(UNARY))]
            a = int(rng.choice(square()))
            attrs = {"p": 0.25} if kernel is DROPOUT else {}
            n_out = 2 if kernel in (SPLIT, T_AND_DEC) else 1
            ops.append((kernel, (a,), attrs, n_out))
            for k in range(n_out):
                alias = kernel in (TRANSPOSE, FLIP) or (kernel is T_AND_DEC and k == 0)
                shape[n] = (1, N) if kernel is SUM else (N, N)
                root[n] = root[a] if alias else n
                n += 1
    keep = {int(i) for i in rng.choice(n, size=n // 3, replace=False)}
    return constants, ops, keep, n


def lower_bound(graph):
    """The lower bound in bytes (docs/design.md#lower-bound): unevictable bytes (the
    constants) plus the largest single op's inputs, outputs and temporaries."""
    return sum(rounded(c.nbytes) for c in graph[0]) + max(op_footprints(graph))


def run_graph(rt, graph, after_op=None):
    """Run a random_graph program on rt; returns {kept node: values}."""
    constants, ops, keep, n = graph
    nodes = [rt.tensor(c) for c in constants]
    last_use = {}
    for step, (_, inputs, _, _) in enumerate(ops):
        for i in inputs:
            last_use[i] = step
    for step, (kernel, inputs, attrs, n_out) in enumerate(ops):
        out = rt.apply(kernel, *(nodes[i] for i in inputs), **attrs)
        nodes.extend(out if n_out > 1 else (out,))
        if after_op is not None:
            after_op(rt)
        for i in inputs:
            if last_use[i] == step and i not in keep:
                nodes[i] = None
        for i in range(len(nodes) - n_out, len(nodes)):
            if i not in keep and i not in last_use:
                nodes[i] = None
    return {i: nodes[i].numpy() for i in sorted(keep)}


def op_footprints(graph):
    """Per op, the arena bytes it needs alone: its inputs, outputs and temporaries (run once
    on constant copies of its inputs' values in a fresh unlimited arena)."""
    constants, ops, _, _ = graph
    rt = coop.Runtime(coop.numpy_allocator(64 * MiB), cost="cpu")
    nodes = [rt.tensor(c) for c in constants]
    sizes = []
    for kernel, inputs, attrs, n_out in ops:
        values = [nodes[i].numpy() for i in inputs]
        alone = coop.Runtime(coop.numpy_allocator(64 * MiB), cost="cpu")
        args = [alone.tensor(v) for v in values]
        out = alone.apply(kernel, *args, **attrs)
        size = alone.arena.stats()["peak_used_bytes"]
        if kernel.inplace is not None:   # recomputing it: old value V and new value S both live
            size += rounded(values[kernel.inplace].nbytes)
        sizes.append(size)
        del out, args, alone
        out = rt.apply(kernel, *(nodes[i] for i in inputs), **attrs)
        nodes.extend(out if n_out > 1 else (out,))
    return sizes
