"""What the op modules share: shape rules, FLOP estimates, array helpers, argument checks.

Shape rules and FLOP estimates take ``(shape, dtype)`` pairs (coop.Kernel's ``shape`` and
``flops``); array helpers take the array module ``xp`` so kernels run on NumPy and CuPy alike.
"""
import functools
import math
import numbers

import numpy

from coop.autograd.tape import record
from coop.errors import OutOfMemoryError
from coop.kernel import Kernel
from coop.tensor import Tensor

# ---- specs ----------------------------------------------------------------------------------


def numel(shape):
    return math.prod(shape)


def like(index=0):
    """Shape rule: the output is like input `index`."""
    return lambda *specs, **attrs: specs[index]


def broadcast(*specs, **attrs):
    """Shape rule: elementwise over inputs broadcast together."""
    return (numpy.broadcast_shapes(*(s for s, _ in specs)),
            numpy.result_type(*(d for _, d in specs)))


def elementwise_flops(per_element):
    """FLOP estimate: per_element operations for each element of the largest input."""
    return lambda *specs, **attrs: float(per_element * max(numel(s) for s, _ in specs))


def axes_of(axis, ndim):
    """axis (None, an int or a tuple) as a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    axis = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    out = sorted(_normalize(int(a), ndim) for a in axis)
    if len(set(out)) != len(out):
        raise ValueError(f"repeated axis in {axis}")
    return tuple(out)


def _normalize(axis, ndim):
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of bounds for a {ndim}-d tensor")
    return axis % ndim


def reduced(shape, axes, keepdims):
    """The shape left by reducing `axes` (a tuple from axes_of)."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


# ---- kernels ----------------------------------------------------------------------------------


def op_kernel(fn, **options):
    """A coop.Kernel whose NumPy scalar results become 0-d arrays (NumPy's 0-d arithmetic and
    full reductions give scalars; the runtime takes arrays only)."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        out = fn(*args, **kwargs)
        return tuple(map(as_array, out)) if isinstance(out, tuple) else as_array(out)
    return Kernel(run, **options)


def as_array(value):
    """value as an array: NumPy gives scalars for arithmetic on 0-d arrays and for full
    reductions (a new 0-d array then, one a kernel may write into); anything else unchanged."""
    return numpy.asarray(value) if isinstance(value, numpy.generic) else value


# ---- ops of one tensor -------------------------------------------------------------------------


def unary_op(name, forward, derivative, saves="x", flops=1):
    """An op of one tensor: forward(xp, x, **attrs) -> y; derivative(xp, s, g, **attrs) -> dx,
    where s is x or y (``saves``). Returns the op function."""
    fwd = op_kernel(lambda x, xp, **attrs: forward(xp, x, **attrs), name=name, shape=like(0),
                    flops=elementwise_flops(flops))
    bwd = op_kernel(lambda s, g, xp, **attrs: derivative(xp, s, g, **attrs),
                    name=f"{name}_backward", shape=like(1), flops=elementwise_flops(flops + 1))

    def backward(node, g):
        return (bwd(node.saved[0], g, **node.attrs),)

    def op(x, **attrs):
        out = fwd(x, **attrs)
        return record(out, (x,), backward, saved=(x if saves == "x" else out,), name=name, **attrs)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Elementwise {name} of x (differentiable)."
    return op


# ---- arrays (inside kernels) ------------------------------------------------------------------


def sum_to(a, shape):
    """Sum a down to `shape` (the inverse of broadcasting shape to a.shape)."""
    if a.shape == tuple(shape):
        return a
    lead = a.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape)
                                      if d == 1 and a.shape[lead + i] != 1)
    return a.sum(axis=axes, keepdims=True).reshape(shape)


def fresh(xp, a):
    """a as an array of its own (not a view of a kernel's input)."""
    return xp.array(a, copy=True)


# ---- a kernel's steps in arrays it made (fewer temporaries; the same values) -------------------


def into(xp, ufunc, a, b, out):
    """ufunc(a, b), written into out (an array the kernel made, possibly a or b) when out's
    dtype is the result's, else a new array: ufunc(a, b)'s values either way. For operands
    of two arrays whose dtypes may differ (a gradient and a saved activation)."""
    if out.dtype == xp.result_type(a, b):
        return ufunc(a, b, out=out)
    return ufunc(a, b)


def index_add(xp, indices, values, num):
    """out[v] = the sum of values[k] over the positions k of indices (C order) where
    indices[k] == v, adding in that order; out is (num,) + values.shape[indices.ndim:].

    Deterministic on both backends, with the same bits: NumPy's add.at adds sequentially in
    position order; CuPy's add.at (atomicAdd) adds in thread order, so on CuPy a stable sort
    groups the positions by index and one thread per output element adds its group in order.
    """
    out_shape = (num,) + values.shape[indices.ndim:]
    if xp is numpy:
        out = numpy.zeros(out_shape, dtype=values.dtype)
        numpy.add.at(out, indices, values)
        return out
    order, bounds = index_groups(xp, indices, num)
    width = numel(out_shape[1:])
    rows = xp.ascontiguousarray(values).reshape(order.size, width)
    out = xp.empty(out_shape, dtype=values.dtype)
    if out.size:
        _index_add_kernel()(rows, order, bounds, width, out)
    return out


def index_groups(xp, indices, num):
    """(order, bounds): positions of indices (flattened, negative ones counted from num)
    stably sorted by index, and where each index's group starts: group v is
    order[bounds[v]:bounds[v + 1]], in position order."""
    flat = indices.reshape(-1).astype(numpy.int64)
    flat = xp.where(flat < 0, flat + num, flat)
    # CuPy's argsort is always stable (thrust); NumPy's must be asked to be
    order = xp.argsort(flat, kind="stable") if xp is numpy else _device_argsort(xp, flat)
    bounds = xp.searchsorted(flat[order], xp.arange(num + 1, dtype=numpy.int64), side="left")
    return order.astype(numpy.int64, copy=False), bounds.astype(numpy.int64, copy=False)


def _device_argsort(xp, flat):
    """CuPy's argsort of flat. Thrust allocates its scratch memory through CuPy's allocator,
    whose failure (coop's OutOfMemoryError) it turns into a plain MemoryError: raised again as
    coop's, with about what the sort needed, so that the runtime can make room and retry the op
    (CuPy releases before that fix, cupy/cupy#9894, lost the failure and sorted wrongly: the
    project asks for CuPy 14.2, which has it)."""
    try:
        return xp.argsort(flat)
    except OutOfMemoryError:
        raise
    except MemoryError as err:
        raise OutOfMemoryError(f"coop: sorting {flat.size:,} indices on the device ran out of "
                               f"memory for its scratch space ({err})",
                               request=4 * flat.nbytes) from err


#: one thread per output element adds its index group's rows in position order
INDEX_ADD_BODY = r"""
const long long v = i / width, d = i % width;
T acc = T(0);
for (long long p = bounds[v]; p < bounds[v + 1]; ++p) acc += rows[order[p] * width + d];
out = acc;
"""
_index_add = None


def _index_add_kernel():
    global _index_add
    if _index_add is None:
        import cupy
        _index_add = cupy.ElementwiseKernel(
            "raw T rows, raw int64 order, raw int64 bounds, int64 width", "T out",
            INDEX_ADD_BODY, "coop_index_add")
    return _index_add


# ---- arguments --------------------------------------------------------------------------------


def is_scalar(value):
    return isinstance(value, numbers.Number) and not isinstance(value, bool)


def check_tensors(name, *values):
    for i, v in enumerate(values):
        if not isinstance(v, Tensor):
            raise TypeError(f"{name}: argument {i} is a {type(v).__name__}, not a coop.Tensor; "
                            "wrap arrays with runtime.tensor(...)")
    return values
