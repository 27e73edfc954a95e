"""Neural-network ops: softmax, log_softmax, cross_entropy, dropout (a random kernel: its mask
is replayed bit-exactly on recompute), embedding, and an LSTM cell composed of the other ops.
"""
import numpy

from coop.autograd.tape import record
from coop.ops._common import (
    as_array,
    axes_of,
    check_tensors,
    elementwise_flops,
    index_add,
    into,
    like,
    numel,
    op_kernel,
    unary_op,
)
from coop.ops.elementwise import add, mul, sigmoid, tanh
from coop.ops.linalg import matmul
from coop.ops.shape import getitem

# ---- softmax ----------------------------------------------------------------------------------


# Each kernel writes its steps into the arrays it made (out=), as coop/ops/elementwise.py
# explains: the same operations as the plain expressions, bit for bit, with fewer arrays live.


def _shifted(x, axis):
    return x - x.max(axis=axis, keepdims=True)


def _softmax(xp, x, axis):
    e = as_array(_shifted(x, axis))   # one array: exp(x - max) / sum
    e = xp.exp(e, out=e) if e.dtype.kind in "fc" else xp.exp(e)   # integers: a float array
    e /= e.sum(axis=axis, keepdims=True)
    return e


def _log_softmax(xp, x, axis):
    s = as_array(_shifted(x, axis))   # s - log(sum(exp(s))): two arrays
    return into(xp, xp.subtract, s, xp.log(xp.exp(s).sum(axis=axis, keepdims=True)), s)


def _softmax_derivative(xp, y, g, axis):
    d = as_array(g * y)               # y * (g - sum(g * y)): one array
    xp.subtract(g, d.sum(axis=axis, keepdims=True), out=d)
    d *= y
    return d


def _log_softmax_derivative(xp, y, g, axis):
    d = as_array(xp.exp(y))           # g - exp(y) * sum(g): one array
    d = into(xp, xp.multiply, d, g.sum(axis=axis, keepdims=True), d)
    return into(xp, xp.subtract, g, d, d)


_softmax_op = unary_op("softmax", _softmax, _softmax_derivative, saves="y", flops=5)
_log_softmax_op = unary_op("log_softmax", _log_softmax, _log_softmax_derivative, saves="y",
                           flops=5)


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along axis (computed shifted by the max)."""
    return _softmax_op(x, axis=axes_of(axis, x.ndim)[0])


def log_softmax(x, axis=-1):
    """x - logsumexp(x) along axis."""
    return _log_softmax_op(x, axis=axes_of(axis, x.ndim)[0])


# ---- cross entropy ----------------------------------------------------------------------------


def _cross_entropy(logits, targets, xp):
    picked = xp.take_along_axis(_log_softmax(xp, logits, 1), targets[:, None], axis=1)
    return -picked.mean()


def _cross_entropy_backward(logits, targets, g, xp):
    p = _softmax(xp, logits, 1)
    p[xp.arange(targets.shape[0]), targets] -= 1
    p *= g / targets.shape[0]
    return p


CROSS_ENTROPY = op_kernel(_cross_entropy, name="cross_entropy",
                          shape=lambda logits, targets: ((), logits[1]),
                          flops=elementwise_flops(6))
CROSS_ENTROPY_BACKWARD = op_kernel(_cross_entropy_backward, name="cross_entropy_backward",
                                   shape=like(0), flops=elementwise_flops(6))


def _cross_entropy_grad(node, g):
    return CROSS_ENTROPY_BACKWARD(*node.saved, g), None


def cross_entropy(logits, targets):
    """Mean over the batch of -log softmax(logits)[i, targets[i]]; logits (N, C), targets (N,)
    integer class indices (a constant tensor)."""
    check_tensors("cross_entropy", logits, targets)
    if logits.ndim != 2 or targets.shape != logits.shape[:1] or targets.dtype.kind not in "iu":
        raise ValueError(f"cross_entropy: logits (N, C) and integer targets (N,), got "
                         f"{logits.shape} and {targets.shape} {targets.dtype}")
    return record(CROSS_ENTROPY(logits, targets), (logits, targets), _cross_entropy_grad,
                  saved=(logits, targets), name="cross_entropy")


# ---- dropout ----------------------------------------------------------------------------------


def _dropout(x, xp, rng, p):
    # rng: the op's Philox stream (coop.random); comparing two float32s gives both backends
    # the same mask
    mask = rng.random(x.shape, dtype=numpy.float32) >= numpy.float32(p)
    return x * mask * (1.0 / (1.0 - p)), mask


def _masked(g, mask, scale):
    return g * mask * scale


DROPOUT = op_kernel(_dropout, name="dropout", random=True,
                    shape=lambda x, p: [x, (x[0], "bool")], flops=elementwise_flops(3))
DROPOUT_BACKWARD = op_kernel(_masked, name="dropout_backward", shape=like(0),
                             flops=elementwise_flops(2))


def _dropout_backward(node, g):
    return (DROPOUT_BACKWARD(g, node.saved[0], scale=node.attrs["scale"]),)


def dropout(x, p=0.5, training=True):
    """Zero each element with probability p and scale the rest by 1 / (1 - p) (identity when
    not training). The mask is drawn from the op's recorded seed: recomputing replays it."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    if not training or p == 0.0:
        return x
    y, mask = DROPOUT(x, p=float(p))
    return record(y, (x,), _dropout_backward, saved=(mask,), name="dropout",
                  scale=1.0 / (1.0 - p))


# ---- embedding --------------------------------------------------------------------------------


def _embedding_backward(g, indices, xp, num):
    return index_add(xp, indices, g, num)   # deterministic on CuPy too (no atomicAdd)


EMBEDDING = op_kernel(lambda weight, indices: weight[indices], name="embedding",
                      shape=lambda w, idx: (idx[0] + w[0][1:], w[1]))
EMBEDDING_BACKWARD = op_kernel(_embedding_backward, name="embedding_backward",
                               shape=lambda g, idx, num: ((num,) + g[0][len(idx[0]):], g[1]),
                               flops=lambda g, idx, num: float(numel(g[0])))


def _embedding_grad(node, g):
    return EMBEDDING_BACKWARD(g, node.saved[0], num=node.shapes[0][0]), None


def embedding(weight, indices):
    """weight[indices]: rows of weight (V, D) for integer indices of any shape -> (*, D)."""
    check_tensors("embedding", weight, indices)
    if indices.dtype.kind not in "iu":
        raise TypeError(f"embedding: indices must be integers, got {indices.dtype}")
    return record(EMBEDDING(weight, indices), (weight, indices), _embedding_grad,
                  saved=(indices,), name="embedding")


# ---- LSTM -------------------------------------------------------------------------------------


def lstm_cell(x, h, c, w_ih, w_hh, b):
    """One LSTM step: x (N, D), h and c (N, H), w_ih (D, 4H), w_hh (H, 4H), b (4H,), gates in
    the order input, forget, cell, output. Returns (h', c'), composed of differentiable ops."""
    gates = add(add(matmul(x, w_ih), matmul(h, w_hh)), b)
    size = h.shape[-1]
    i, f, g, o = (getitem(gates, (slice(None), slice(k * size, (k + 1) * size)))
                  for k in range(4))
    c_next = add(mul(sigmoid(f), c), mul(sigmoid(i), tanh(g)))
    return mul(sigmoid(o), tanh(c_next)), c_next
