"""Gradient checking for coop's ops: inputs by kind, runs on the host and in simulation, and
central finite differences.

Each evaluation runs in a fresh runtime with the same seed, so a random op (dropout) draws
the same mask every time: finite differences see one fixed function.
"""
from dataclasses import dataclass

import numpy as np

import coop


@dataclass(frozen=True)
class Arg:
    """One input: its shape, how its values are drawn, and whether it gets a gradient.

    kinds: normal; positive (in [0.5, 2]); away (|x| >= 0.2: relu's kink is never crossed);
    distinct (a shuffled grid 0.1 apart: no ties for max and pooling); int (in [0, high)).
    """

    shape: tuple
    kind: str = "normal"
    grad: bool = True
    high: int = 0

    def draw(self, rng, dtype):
        n = int(np.prod(self.shape))
        if self.kind == "int":
            return rng.integers(0, self.high, self.shape)
        if self.kind == "normal":
            values = rng.standard_normal(n)
        elif self.kind == "positive":
            values = rng.uniform(0.5, 2.0, n)
        elif self.kind == "away":
            values = np.sign(rng.standard_normal(n)) * (0.2 + np.abs(rng.standard_normal(n)))
        elif self.kind == "distinct":
            values = (rng.permutation(n) - n / 2) * 0.1 + rng.uniform(-0.01, 0.01, n)
        else:
            raise ValueError(self.kind)
        return values.reshape(self.shape).astype(dtype)


def N(*shape):
    return Arg(shape)


def P(*shape):
    return Arg(shape, "positive")


def A(*shape):
    return Arg(shape, "away")


def D(*shape):
    return Arg(shape, "distinct")


def I(high, *shape):  # noqa: E743
    return Arg(shape, "int", grad=False, high=high)


def const(arg):
    """The same input without a gradient (running statistics, masks)."""
    return Arg(arg.shape, arg.kind, grad=False, high=arg.high)


def draw(args, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [arg.draw(rng, dtype) for arg in args]


def host_runtime(budget="8MiB", policy="coop", seed=0):
    return coop.Runtime(coop.numpy_allocator(budget), policy=policy, cost="cpu", seed=seed)


def leaves(rt, args, arrays):
    """Tensors for the inputs: host arrays, or (shape, dtype) specs in simulation."""
    if rt.xp is None:
        return [rt.tensor((a.shape, a.dtype), requires_grad=arg.grad)
                for arg, a in zip(args, arrays)]
    return [rt.tensor(a, requires_grad=arg.grad) for arg, a in zip(args, arrays)]


def evaluate(fn, args, arrays):
    """fn's output value on the inputs, in a fresh runtime."""
    rt = host_runtime()
    return fn(*leaves(rt, args, arrays)).numpy()


def analytic(fn, args, arrays, weight, rt=None):
    """(output, gradients of sum(output * weight) for the inputs with grad) from backward,
    in rt or a fresh host runtime."""
    rt = rt or host_runtime()
    inputs = leaves(rt, args, arrays)
    out = fn(*inputs)
    value = out.numpy()
    out.backward(rt.tensor(weight))
    return value, [t.grad.numpy() for arg, t in zip(args, inputs) if arg.grad]


def numeric(fn, args, arrays, weight, eps=1e-6):
    """Central differences of sum(fn(inputs) * weight) for the inputs with grad."""
    grads = []
    for i, arg in enumerate(args):
        if not arg.grad:
            continue
        grad = np.zeros_like(arrays[i])
        for index in np.ndindex(arrays[i].shape):
            value = {}
            for sign in (1, -1):
                moved = [a.copy() for a in arrays]
                moved[i][index] += sign * eps
                value[sign] = np.sum(evaluate(fn, args, moved) * weight)
            grad[index] = (value[1] - value[-1]) / (2 * eps)
        grads.append(grad)
    return grads


def specs(rt, fn, args, arrays):
    """(shape, dtype) of the output and of each gradient, running fn and backward on rt."""
    inputs = leaves(rt, args, arrays)
    out = fn(*inputs)
    seed = rt.tensor((out.shape, out.dtype) if rt.xp is None else np.ones(out.shape, out.dtype))
    out.backward(seed)
    return [(out.shape, out.dtype)] + [(t.grad.shape, t.grad.dtype)
                                       for arg, t in zip(args, inputs) if arg.grad]


def np_conv_transpose2d(x, w, b=None, stride=1, padding=0):
    """Each input pixel scatters its kernel-weighted copy; then the border is cropped."""
    n, _, h, wd = x.shape
    _, f, kh, kw = w.shape
    full = np.zeros((n, f, (h - 1) * stride + kh, (wd - 1) * stride + kw))
    for i in range(h):
        for j in range(wd):
            full[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw] += np.einsum(
                "nc,cfhw->nfhw", x[:, :, i, j], w)
    out = full[:, :, padding:full.shape[2] - padding, padding:full.shape[3] - padding]
    return out if b is None else out + b[None, :, None, None]


def deep_mlp(rt, depth, width, batch):
    """A deep, narrow ReLU MLP's data and parameters (activations dominate its constants):
    (x, targets, params), params as [w1, b1, ..., w_out, b_out], leaves that require grad."""
    rng = np.random.default_rng(0)
    x = rt.tensor(rng.standard_normal((batch, width)))
    targets = rt.tensor(rng.integers(0, 10, batch))
    shapes = [(width, width), (width,)] * depth + [(width, 10), (10,)]
    params = [rt.tensor(rng.standard_normal(s) / np.sqrt(s[0]), requires_grad=True)
              for s in shapes]
    return x, targets, params


def deep_mlp_loss(x, targets, params):
    from coop import ops
    h = x
    for w, b in zip(params[:-2:2], params[1:-2:2]):
        h = ops.relu(h @ w + b)
    return ops.cross_entropy(h @ params[-2] + params[-1], targets)


def train_deep_mlp(rt, steps=3):
    """`steps` AdamW steps of deep_mlp(rt, 24, 16, 128); returns copies of its parameters."""
    from coop.optim import AdamW
    x, targets, params = deep_mlp(rt, depth=24, width=16, batch=128)
    opt = AdamW(params, lr=1e-2)
    for _ in range(steps):
        loss = deep_mlp_loss(x, targets, params)
        loss.backward()
        del loss
        opt.step()
        opt.zero_grad()
    return [p.numpy().copy() for p in params]
