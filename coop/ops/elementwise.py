"""Elementwise ops: broadcasting arithmetic (Tensor or Python scalar operands), unary math and
activations, add_n (the gradient accumulator, EXPENSIVE in the paper's table), ones_like.

Each op is a forward kernel and a backward kernel named ``<op>_backward``; the backward of a
broadcasting op sums its gradients down to the inputs' shapes inside the kernel.
"""
import math

from coop.autograd.tape import record
from coop.ops._common import (
    as_array,
    broadcast,
    check_tensors,
    elementwise_flops,
    fresh,
    into,
    is_scalar,
    like,
    numel,
    op_kernel,
    sum_to,
    unary_op,
)

# ---- unary ------------------------------------------------------------------------------------


_GELU_C = math.sqrt(2.0 / math.pi)


# The kernels below write their intermediate values into arrays they own (out=) instead of
# leaving each step a new array: CuPy makes a new device array for every step of an
# expression (NumPy reuses some temporaries, CuPy none), and a kernel's temporaries are pinned
# in the arena beside its inputs while it runs, so they set how small a budget can get. Every
# step is the same IEEE operation on the same operands as the plain expression, in the same
# order (only commutative operands swap), so the results are the expression's bit for bit
# (tests/test_kernel_temporaries.py holds the expressions and checks it).


def _gelu_tanh(xp, x):
    """tanh(sqrt(2/pi) (x + 0.044715 x^3)), in one new array."""
    t = as_array(0.044715 * x)
    t *= x
    t *= x
    xp.add(x, t, out=t)
    t *= _GELU_C
    return xp.tanh(t, out=t)


def _gelu(xp, x):
    # 0.5 * x * (1.0 + tanh(...)): two arrays
    y = as_array(0.5 * x)
    t = _gelu_tanh(xp, x)
    t += 1.0
    y *= t
    return y


def _gelu_derivative(xp, x, g):
    # g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * _GELU_C * (1.0 + 3 * 0.044715 * x * x)):
    # three arrays (the expression's, with NumPy's reuse of temporaries, five)
    t = _gelu_tanh(xp, x)
    d = as_array(1.0 + t)
    d *= 0.5
    xp.multiply(t, t, out=t)
    xp.subtract(1.0, t, out=t)
    s = as_array(0.5 * x)
    s *= t
    s *= _GELU_C
    xp.multiply(3 * 0.044715, x, out=t)
    t *= x
    t += 1.0
    s *= t
    d += s
    return into(xp, xp.multiply, g, d, d)


def _tanh_derivative(xp, y, g):
    # g * (1 - y * y), in one array
    d = as_array(y * y)
    xp.subtract(1, d, out=d)
    return into(xp, xp.multiply, g, d, d)


exp = unary_op("exp", lambda xp, x: xp.exp(x), lambda xp, y, g: g * y, saves="y")
log = unary_op("log", lambda xp, x: xp.log(x), lambda xp, x, g: g / x)
sqrt = unary_op("sqrt", lambda xp, x: xp.sqrt(x), lambda xp, y, g: 0.5 * g / y, saves="y")
tanh = unary_op("tanh", lambda xp, x: xp.tanh(x), _tanh_derivative, saves="y", flops=4)
sigmoid = unary_op("sigmoid", lambda xp, x: xp.exp(-xp.logaddexp(0, -x)),
                 lambda xp, y, g: g * y * (1 - y), saves="y", flops=4)
relu = unary_op("relu", lambda xp, x: xp.maximum(x, 0), lambda xp, y, g: g * (y > 0), saves="y")
gelu = unary_op("gelu", _gelu, _gelu_derivative, flops=8)
gelu.__doc__ = "GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."
_pow_scalar = unary_op("pow_scalar", lambda xp, x, exponent: x ** exponent,
                     lambda xp, x, g, exponent: g * exponent * x ** (exponent - 1), flops=4)
_rdiv = unary_op("rdiv", lambda xp, x, c: c / x, lambda xp, x, g, c: -c * g / (x * x))

# ---- affine: x * scale + shift (scalar arithmetic, neg) ---------------------------------------


def _affine_fn(x, scale, shift):
    if scale == 1.0:
        return x + shift
    out = x * scale
    if shift != 0.0:
        out += shift
    return out


AFFINE = op_kernel(_affine_fn, name="affine", shape=like(0), flops=elementwise_flops(2))


def _affine_backward(node, g):
    scale = node.attrs["scale"]
    return (g if scale == 1.0 else AFFINE(g, scale=scale, shift=0.0),)


def _affine(x, scale, shift):
    out = AFFINE(x, scale=float(scale), shift=float(shift))
    return record(out, (x,), _affine_backward, name="affine", scale=float(scale))


# ---- binary, broadcasting ---------------------------------------------------------------------


def _binary_grads(derivatives):
    """A backward kernel: the gradients of the needed inputs, summed to their shapes."""
    def grads(a, b, g, xp, needs):
        return tuple(sum_to(d(xp, a, b, g), x.shape).astype(x.dtype, copy=False)
                     for d, x, need in zip(derivatives, (a, b), needs) if need)
    return grads


def _binary(name, forward, derivatives, flops=1):
    """A broadcasting op of two tensors; derivatives: (d/da, d/db), each (xp, a, b, g) -> grad
    of the broadcast shape. Returns the tensor-tensor op function."""
    fwd = op_kernel(lambda a, b, xp: forward(xp, a, b), name=name, shape=broadcast,
                    flops=elementwise_flops(flops))
    bwd = op_kernel(_binary_grads(derivatives), name=f"{name}_backward",
                    shape=lambda a, b, g, needs: [s for s, need in zip((a, b), needs) if need],
                    flops=elementwise_flops(2 * flops + 2))

    def backward(node, g):
        out = bwd(*node.saved, g, needs=node.needs)
        grads = iter(out if isinstance(out, tuple) else (out,))
        return tuple(next(grads) if need else None for need in node.needs)

    def op(a, b):
        return record(fwd(a, b), (a, b), backward, saved=(a, b), name=name)

    return op


_mul = _binary("mul", lambda xp, a, b: a * b,
               (lambda xp, a, b, g: g * b, lambda xp, a, b, g: g * a))
_div = _binary("div", lambda xp, a, b: a / b,
               (lambda xp, a, b, g: g / b, lambda xp, a, b, g: -g * a / (b * b)), flops=4)
_pow = _binary("pow", lambda xp, a, b: a ** b,
               (lambda xp, a, b, g: g * b * a ** (b - 1),
                lambda xp, a, b, g: g * a ** b * xp.log(a)), flops=8)

ADD = op_kernel(lambda a, b: a + b, name="add", shape=broadcast, flops=elementwise_flops(1))
SUB = op_kernel(lambda a, b: a - b, name="sub", shape=broadcast, flops=elementwise_flops(1))


def _add_backward(node, g):
    return g, g


def _sub_backward(node, g):
    return g, (neg(g) if node.needs[1] else None)


def add(a, b):
    """a + b, broadcasting; either may be a Python scalar."""
    if is_scalar(b):
        return _affine(a, 1.0, b)
    if is_scalar(a):
        return _affine(b, 1.0, a)
    return record(ADD(a, b), (a, b), _add_backward, name="add")


def sub(a, b):
    """a - b, broadcasting; either may be a Python scalar."""
    if is_scalar(b):
        return _affine(a, 1.0, -b)
    if is_scalar(a):
        return _affine(b, -1.0, a)
    return record(SUB(a, b), (a, b), _sub_backward, name="sub")


def mul(a, b):
    """a * b, broadcasting; either may be a Python scalar."""
    if is_scalar(b):
        return _affine(a, b, 0.0)
    if is_scalar(a):
        return _affine(b, a, 0.0)
    return _mul(a, b)


def div(a, b):
    """a / b, broadcasting; either may be a Python scalar (a tensor over a scalar multiplies
    by its reciprocal)."""
    if is_scalar(b):
        return _affine(a, 1.0 / b, 0.0)
    if is_scalar(a):
        return _rdiv(b, c=float(a))
    return _div(a, b)


def neg(x):
    """-x."""
    return _affine(x, -1.0, 0.0)


def pow(a, b):  # noqa: A001 (the op's name)
    """a ** b, broadcasting; a scalar exponent, or a positive scalar base (exp(b log a))."""
    if is_scalar(b):
        return _pow_scalar(a, exponent=float(b))
    if is_scalar(a):
        if a <= 0:
            raise ValueError(f"pow: a scalar base must be positive, got {a}")
        return exp(_affine(b, math.log(a), 0.0))
    return _pow(a, b)


# ---- n-ary and constants --------------------------------------------------------------------


def _add_n_fn(*arrays):
    out = arrays[0] + arrays[1] if len(arrays) > 1 else arrays[0].copy()
    for a in arrays[2:]:
        out += a
    return out


def _same_specs(*specs):
    if any(s != specs[0] for s in specs):
        raise ValueError(f"add_n: inputs must have one shape and dtype, got {list(specs)}")
    return specs[0]


ADD_N = op_kernel(_add_n_fn, name="add_n", shape=_same_specs,
                  flops=lambda *specs: float((len(specs) - 1) * numel(specs[0][0])))
ONES_LIKE = op_kernel(lambda x, xp: xp.ones_like(x), name="ones_like", shape=like(0))
COPY = op_kernel(lambda x, xp: fresh(xp, x), name="copy", shape=like(0))


def _add_n_backward(node, g):
    return (g,) * len(node.shapes)


def add_n(*tensors):
    """The sum of tensors of one shape and dtype, in one kernel (``add_n(a, b, c)`` or
    ``add_n([a, b, c])``)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if not tensors:
        raise ValueError("add_n needs at least one tensor")
    check_tensors("add_n", *tensors)
    _same_specs(*((t.shape, t.dtype) for t in tensors))   # raises on a mismatch
    return record(ADD_N(*tensors), tensors, _add_n_backward, name="add_n")


def _copy_backward(node, g):
    return (g,)


def copy(x):
    """x in a storage of its own (differentiable)."""
    return record(COPY(x), (x,), _copy_backward, name="copy")


def ones_like(x):
    """Ones of x's shape and dtype (not differentiable)."""
    return ONES_LIKE(x)
