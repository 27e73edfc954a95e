"""Optimizers that update parameters IN PLACE through inplace kernels run by ``rt.apply``.

That is the runtime's recomputable in-place path: a parameter keeps its storage (no copy per
step), and any recorded reader of the old value keeps a recomputable version. Optimizer state
(momentum buffers, Adam's moments) are runtime constants like the parameters: never evicted.
The update formulas are PyTorch's (torch.optim.SGD and AdamW), elementwise in one kernel each;
``clip_grad_norm`` and ``warmup_cosine`` are PyTorch's gradient clipping and a warmup + cosine
learning-rate schedule, so training runs converge from any seed.
"""
import math

from coop import ops
from coop._checks import check_number
from coop.kernel import Kernel
from coop.nn.module import make_buffer
from coop.ops._common import as_array, elementwise_flops, into
from coop.tensor import Tensor


def _sgd(p, d, lr):
    p -= lr * d


# The updates write their steps into one array they made (out=): the plain expressions'
# operations in the same order, bit for bit (coop/ops/elementwise.py says why), so an update
# holds one array of its parameter's size where CuPy's expression held up to three.


def _decayed(xp, g, p, weight_decay):
    """g + weight_decay * p as a new array, or None without weight decay."""
    if not weight_decay:
        return None
    d = as_array(weight_decay * p)
    return into(xp, xp.add, g, d, d)


def _sgd_decayed(p, g, xp, lr, weight_decay):
    d = _decayed(xp, g, p, weight_decay)
    if d is None:
        p -= lr * g
        return
    d *= lr
    p -= d


def _momentum(buf, g, p, xp, momentum, weight_decay):
    buf *= momentum
    d = _decayed(xp, g, p, weight_decay)
    buf += g if d is None else d


def _scale(g, factor):
    g *= factor


def _ema(m, g, beta):
    m *= beta
    m += (1.0 - beta) * g


def _ema_square(v, g, beta):
    v *= beta
    d = as_array(g * g)               # (1.0 - beta) * (g * g)
    d *= 1.0 - beta
    v += d


def _adamw(p, m, v, xp, lr, weight_decay, eps, correction1, correction2):
    if weight_decay:
        p *= 1.0 - lr * weight_decay
    d = as_array(xp.sqrt(v))          # (lr / c1) * (m / (sqrt(v) / c2 ** 0.5 + eps))
    d /= correction2 ** 0.5
    d += eps
    d = into(xp, xp.divide, m, d, d)
    d *= lr / correction1
    p -= d


SGD_STEP = Kernel(_sgd_decayed, name="sgd_", inplace=0, flops=elementwise_flops(3))
MOMENTUM = Kernel(_momentum, name="momentum_", inplace=0, flops=elementwise_flops(4))
APPLY = Kernel(_sgd, name="sgd_apply_", inplace=0, flops=elementwise_flops(2))
SCALE = Kernel(_scale, name="scale_", inplace=0, flops=elementwise_flops(1))
EMA = Kernel(_ema, name="ema_", inplace=0, flops=elementwise_flops(3))
EMA_SQUARE = Kernel(_ema_square, name="ema_square_", inplace=0, flops=elementwise_flops(4))
ADAMW = Kernel(_adamw, name="adamw_", inplace=0, flops=elementwise_flops(8))
#: the names of the optimizers' update kernels (clip_grad_norm's SCALE among them): what
#: benchmarks/tier_phases.py and link_bound.py count as a step's update in a trace
UPDATE_KERNELS = frozenset(k.name for k in (SGD_STEP, MOMENTUM, APPLY, SCALE, EMA, EMA_SQUARE,
                                            ADAMW))


class Optimizer:
    """Parameters (leaf Tensors of one runtime) and their per-parameter state tensors."""

    def __init__(self, params, lr):
        if isinstance(params, Tensor):
            raise TypeError("optimizer params must be an iterable of Tensors, got one Tensor; "
                            "pass [tensor] or model.parameters()")
        self.params = list(params)
        if not self.params:
            raise ValueError("optimizer got an empty parameter list")
        for i, p in enumerate(self.params):
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer params must be coop Tensors, got "
                                f"{type(p).__name__} at {i}; pass model.parameters() or "
                                f"Tensors made by a runtime")
        self.runtime = self.params[0].runtime
        if any(p.runtime is not self.runtime for p in self.params):
            raise ValueError("optimizer parameters belong to different runtimes")
        self.lr = check_number("lr", lr)

    def _zeros(self, p):
        """State for p: a zero constant of its shape and dtype (a spec in simulation)."""
        return make_buffer(self.runtime, p.shape, p.dtype, 0.0)

    def zero_grad(self):
        """Drop the gradients (their memory is freed at once)."""
        for p in self.params:
            p.grad = None

    def step(self):
        """One update of every parameter that has a gradient."""
        apply = self.runtime.apply
        for i, p in enumerate(self.params):
            if p.grad is not None:
                self._update(apply, i, p, p.grad)
        self.runtime.mark_step()      # the host tier's prefetch looks ahead by steps

    def backward_step(self, loss, grad=None):
        """``loss.backward(grad)``, ``step()`` and ``zero_grad()`` in one pass, with the same
        result bit for bit: each parameter is updated as soon as its gradient is complete (every
        op that read it has had its backward), and that gradient is dropped at once. So the
        gradients are never all held together, and an update runs beside the backward pass
        rather than after it. A parameter this pass does not reach but that holds a gradient
        (from an earlier backward) is updated after it, as ``step()`` would. Every update is
        per parameter (clip_grad_norm, which needs all gradients first, cannot run between)."""
        from coop.autograd.backward import backward
        index = {id(p): i for i, p in enumerate(self.params)}
        apply = self.runtime.apply

        def update(leaf):
            i = index.get(id(leaf))
            if i is not None:         # a leaf that is not this optimizer's keeps its gradient
                self._update(apply, i, leaf, leaf.grad)
                leaf.grad = None

        backward(loss, grad, on_grad=update)
        self.step()          # the parameters the pass did not reach that hold a gradient
        self.zero_grad()

    def _update(self, apply, i, p, g):
        raise NotImplementedError


class SGD(Optimizer):
    """p -= lr * d, d = g + weight_decay * p, or with momentum the buffer
    b = momentum * b + d (b starts at 0, so its first value is d, as in PyTorch)."""

    def __init__(self, params, lr, momentum=0.0, weight_decay=0.0):
        super().__init__(params, lr)
        self.momentum = check_number("momentum", momentum)
        self.weight_decay = check_number("weight_decay", weight_decay)
        self.buffers = [self._zeros(p) for p in self.params] if momentum else None

    def _update(self, apply, i, p, g):
        if self.buffers is None:
            apply(SGD_STEP, p, g, lr=self.lr, weight_decay=self.weight_decay)
            return
        buf = self.buffers[i]
        apply(MOMENTUM, buf, g, p, momentum=self.momentum, weight_decay=self.weight_decay)
        apply(APPLY, p, buf, lr=self.lr)


class AdamW(Optimizer):
    """Adam with decoupled weight decay (Loshchilov and Hutter; PyTorch's AdamW):
    p *= 1 - lr * wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
    p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, lr)
        if isinstance(betas, (str, bytes)) or not hasattr(betas, "__len__") or len(betas) != 2:
            raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
        self.betas = (check_number("betas[0]", betas[0], below=1.0),
                      check_number("betas[1]", betas[1], below=1.0))
        self.eps = check_number("eps", eps)
        self.weight_decay = check_number("weight_decay", weight_decay)
        self.m = [self._zeros(p) for p in self.params]
        self.v = [self._zeros(p) for p in self.params]
        self.counts = [0] * len(self.params)   # per parameter: the steps it took (bias correction)

    def _update(self, apply, i, p, g):
        b1, b2 = self.betas
        self.counts[i] += 1
        t = self.counts[i]
        apply(EMA, self.m[i], g, beta=b1)
        apply(EMA_SQUARE, self.v[i], g, beta=b2)
        apply(ADAMW, p, self.m[i], self.v[i], lr=self.lr, weight_decay=self.weight_decay,
              eps=self.eps, correction1=1.0 - b1 ** t, correction2=1.0 - b2 ** t)


def clip_grad_norm(params, max_norm):
    """Scale the gradients of params in place so that their global L2 norm is at most max_norm
    (torch.nn.utils.clip_grad_norm_); returns the norm before clipping, a float.

    The norm is computed by coop ops and the scaling is an in-place kernel, so both run under
    the runtime's budget like any other op."""
    # inf: the norm, no clipping
    check_number("clip_grad_norm: max_norm", max_norm, above_minimum=True, finite=False)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    squares = [ops.sum(ops.mul(g, g)) for g in grads]
    total = math.sqrt(float((ops.add_n(*squares) if len(squares) > 1 else squares[0]).numpy()))
    if total > max_norm:
        factor = max_norm / (total + 1e-6)
        for g in grads:
            g.runtime.apply(SCALE, g, factor=factor)
    return total


def warmup_cosine(step, lr, warmup, total, final_ratio=0.1):
    """The learning rate at 0-based `step`: a linear warmup from lr / warmup to lr over
    `warmup` steps, then a cosine decay to final_ratio * lr at step total - 1."""
    if not 0 <= warmup < total:
        raise ValueError(f"warmup_cosine: need 0 <= warmup < total, got warmup {warmup!r}, "
                         f"total {total!r}")
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - 1 - warmup)
    floor = final_ratio * lr
    return floor + (lr - floor) * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
