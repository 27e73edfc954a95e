"""Reductions: sum, mean, max, var over axes (None, an int or a tuple; keepdims), and sum_to
(summing a broadcast result down to a shape: the gradient of broadcasting).

Their backward kernels broadcast the gradient back (``expand``), scaled or masked.
"""
from coop.autograd.tape import record
from coop.ops._common import axes_of, numel, op_kernel, reduced
from coop.ops._common import sum_to as _sum_to


def _reduce_rule(x, axis, keepdims):
    shape, dtype = x
    return reduced(shape, axis, keepdims), dtype


def _input_flops(*specs, **attrs):
    return float(numel(specs[0][0]))


def _reduction(name, fn):
    return op_kernel(lambda x, axis, keepdims: fn(x, axis, keepdims), name=name,
                     shape=_reduce_rule, flops=_input_flops)


SUM = _reduction("sum", lambda x, axis, keepdims: x.sum(axis=axis, keepdims=keepdims))
MEAN = _reduction("mean", lambda x, axis, keepdims: x.mean(axis=axis, keepdims=keepdims))
MAX = _reduction("max", lambda x, axis, keepdims: x.max(axis=axis, keepdims=keepdims))
VAR = _reduction("var", lambda x, axis, keepdims: x.var(axis=axis, keepdims=keepdims))


def _expand(g, xp, shape, keep, scale):
    out = xp.broadcast_to(g.reshape(keep), shape)
    return xp.array(out, copy=True) if scale == 1.0 else out * scale


def _max_backward(x, g, xp, axis, keep):
    mask = x == x.max(axis=axis, keepdims=True)
    return mask * (g.reshape(keep) / mask.sum(axis=axis, keepdims=True, dtype=g.dtype))


def _var_backward(x, g, xp, axis, keep):
    m = numel(x.shape[a] for a in axis)
    return (x - x.mean(axis=axis, keepdims=True)) * (g.reshape(keep) * (2.0 / m))


def _like_x(x, g, **attrs):
    return x[0], g[1]


EXPAND = op_kernel(_expand, name="expand", shape=lambda g, shape, keep, scale: (tuple(shape), g[1]),
                   flops=lambda g, shape, keep, scale: float(numel(shape)))
MAX_BACKWARD = op_kernel(_max_backward, name="max_backward", shape=_like_x, flops=_input_flops)
VAR_BACKWARD = op_kernel(_var_backward, name="var_backward", shape=_like_x, flops=_input_flops)
SUM_TO = op_kernel(lambda x, shape: _sum_to(x, shape), name="sum_to",
                   shape=lambda x, shape: (tuple(shape), x[1]), flops=_input_flops)


def expand(g, shape, keep, scale=1.0):
    """g (of shape `keep`, broadcastable to `shape`) broadcast to shape and scaled, as a new
    array: the gradient of a reduction (not differentiable)."""
    return EXPAND(g, shape=tuple(shape), keep=tuple(keep), scale=float(scale))


def _backward_of(kind):
    """Backward of a reduction: expand the gradient, scaled (sum, mean) or masked (max, var)."""
    def backward(node, g):
        shape, axis = node.shapes[0], node.attrs["axis"]
        keep = reduced(shape, axis, True)
        if kind == "sum":
            return (expand(g, shape, keep),)
        if kind == "mean":
            return (expand(g, shape, keep, 1.0 / numel(shape[a] for a in axis)),)
        kernel = MAX_BACKWARD if kind == "max" else VAR_BACKWARD
        return (kernel(node.saved[0], g, axis=axis, keep=keep),)
    backward.__name__ = f"{kind}_backward"
    return backward


_BACKWARD = {kind: _backward_of(kind) for kind in ("sum", "mean", "max", "var")}


def _reduce(kernel, x, axis, keepdims):
    axis = axes_of(axis, x.ndim)
    out = kernel(x, axis=axis, keepdims=bool(keepdims))
    saved = (x,) if kernel is MAX or kernel is VAR else ()
    return record(out, (x,), _BACKWARD[kernel.name], saved=saved, name=kernel.name, axis=axis)


def sum(x, axis=None, keepdims=False):  # noqa: A001 (the op's name)
    """Sum over axis (None: all)."""
    return _reduce(SUM, x, axis, keepdims)


def mean(x, axis=None, keepdims=False):
    """Mean over axis (None: all)."""
    return _reduce(MEAN, x, axis, keepdims)


def max(x, axis=None, keepdims=False):  # noqa: A001 (the op's name)
    """Maximum over axis (None: all); the gradient is shared among tied maxima."""
    return _reduce(MAX, x, axis, keepdims)


def var(x, axis=None, keepdims=False):
    """Population variance (ddof=0) over axis (None: all)."""
    return _reduce(VAR, x, axis, keepdims)


def _sum_to_backward(node, g):
    shape = node.shapes[0]
    return (expand(g, shape, (1,) * (len(shape) - g.ndim) + g.shape),)


def sum_to(x, shape):
    """Sum x down to shape (x's shape must be shape broadcast); x itself when equal."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    return record(SUM_TO(x, shape=shape), (x,), _sum_to_backward, name="sum_to")
