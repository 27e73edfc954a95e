"""Normalization: layer_norm (over the trailing dims of the weight's shape) and batch_norm
(over every dim but the channel, dim 1). Both are one fused kernel forward and one backward,
written once for "normalize over these axes, scale and shift along the others".

batch_norm in training mode normalizes with the batch's statistics and updates the running
statistics IN PLACE (an inplace kernel, so the runtime keeps every version recomputable);
in eval mode it uses the running statistics (composed of elementwise ops).
"""
from coop.autograd.tape import no_grad, record
from coop.ops._common import (as_array, check_tensors, elementwise_flops, into, like,
                              op_kernel, sum_to)
from coop.ops.elementwise import add, div, mul, sqrt, sub
from coop.ops.shape import reshape


# The kernels write their steps into the arrays they made (out=), as coop/ops/elementwise.py
# explains: the plain expressions' operations, bit for bit, with fewer arrays live.


def _normalized(xp, x, axes, eps):
    """(x - mean) * invstd in one new array (a second lives while the variance is taken),
    with mean, var and invstd."""
    mean = x.mean(axis=axes, keepdims=True)
    xhat = as_array(x - mean)
    var = (xhat * xhat).mean(axis=axes, keepdims=True)
    invstd = 1.0 / xp.sqrt(var + eps)
    xhat *= invstd                   # both of x's dtype
    return xhat, mean, var, invstd


def _forward(x, w, b, xp, axes, eps, wshape, stats=False):
    y, mean, var, _ = _normalized(xp, x, axes, eps)    # xhat * w + b, in xhat's array
    y = into(xp, xp.multiply, y, w.reshape(wshape), y)
    y = into(xp, xp.add, y, b.reshape(wshape), y)
    if not stats:
        return y
    m = x.size // mean.size
    return y, mean.reshape(w.shape), var.reshape(w.shape) * (m / (m - 1))   # unbiased


def _backward(x, w, g, xp, axes, eps, wshape):
    # dx = invstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = g * w: three
    # arrays (xhat, dxhat, dx; the expression's five)
    xhat, _, _, invstd = _normalized(xp, x, axes, eps)
    dxhat = as_array(g * w.reshape(wshape))
    mean_dxhat = dxhat.mean(axis=axes, keepdims=True)
    dx = as_array(dxhat * xhat)
    mean_dxhat_xhat = dx.mean(axis=axes, keepdims=True)
    dx = into(xp, xp.subtract, dxhat, mean_dxhat, dx)
    dxhat = into(xp, xp.multiply, xhat, mean_dxhat_xhat, dxhat)
    dx = into(xp, xp.subtract, dx, dxhat, dx)
    dx = into(xp, xp.multiply, invstd, dx, dx)
    gx = into(xp, xp.multiply, g, xhat, dxhat)
    return dx, sum_to(gx, wshape).reshape(w.shape), sum_to(g, wshape).reshape(w.shape)


def _forward_rule(x, w, b, stats=False, **attrs):
    return [x, w, w] if stats else x


KERNELS = {name: (op_kernel(_forward, name=name, shape=_forward_rule, flops=elementwise_flops(8)),
                  op_kernel(_backward, name=f"{name}_backward",
                            shape=lambda x, w, g, **attrs: [x, w, w], flops=elementwise_flops(14)))
           for name in ("layer_norm", "batch_norm")}


def _normalize_backward(node, g):
    return KERNELS[node.name][1](*node.saved, g, **node.attrs)


def _normalize(name, x, weight, bias, axes, wshape, eps, stats=False):
    check_tensors(name, x, weight, bias)
    if weight.shape != bias.shape:
        raise ValueError(f"{name}: weight {weight.shape} and bias {bias.shape} differ")
    attrs = dict(axes=axes, eps=float(eps), wshape=wshape)
    out = KERNELS[name][0](x, weight, bias, stats=stats, **attrs)
    record(out[0] if stats else out, (x, weight, bias), _normalize_backward,
           saved=(x, weight), name=name, **attrs)
    return out


def layer_norm(x, weight, bias, eps=1e-5):
    """Normalize x over its trailing weight.ndim dims, then scale by weight and shift by bias."""
    if x.shape[x.ndim - weight.ndim:] != weight.shape:
        raise ValueError(f"layer_norm: weight {weight.shape} is not x's trailing shape {x.shape}")
    axes = tuple(range(x.ndim - weight.ndim, x.ndim))
    return _normalize("layer_norm", x, weight, bias, axes, weight.shape, eps)


def _update_running(running, stat, momentum):
    running *= 1.0 - momentum
    running += momentum * stat


UPDATE_RUNNING = op_kernel(_update_running, name="update_running_", inplace=0, shape=like(0),
                           flops=elementwise_flops(3))


def batch_norm(x, weight, bias, running_mean=None, running_var=None, training=True,
               momentum=0.1, eps=1e-5):
    """Normalize x (N, C, ...) per channel. Training: batch statistics (biased variance), and
    running_mean/var (if given) move toward them by momentum in place (unbiased variance).
    Eval: the running statistics."""
    if x.ndim < 2 or weight.shape != (x.shape[1],):
        raise ValueError(f"batch_norm: x (N, C, ...) and weight (C,), got {x.shape} and "
                         f"{weight.shape}")
    wshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    if not training:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm in eval mode needs running_mean and running_var")
        scale = div(weight, sqrt(add(running_var, float(eps))))
        shift = sub(bias, mul(running_mean, scale))
        return add(mul(x, reshape(scale, wshape)), reshape(shift, wshape))
    if x.size // x.shape[1] < 2:
        raise ValueError(f"batch_norm: training needs more than one value per channel, got "
                         f"input shape {x.shape}")
    axes = (0,) + tuple(range(2, x.ndim))
    y, mean, var = _normalize("batch_norm", x, weight, bias, axes, wshape, eps, stats=True)
    with no_grad():
        for running, stat in ((running_mean, mean), (running_var, var)):
            if running is not None:
                UPDATE_RUNNING(running, stat, momentum=float(momentum))
    return y
