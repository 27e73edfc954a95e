"""Shape ops: reshape, transpose, basic indexing and broadcast_to (views of their input's
storage where the array module makes one), concatenate, stack, pad and roll (new storages).
"""
import numbers

import numpy

from coop.autograd.tape import record
from coop.ops._common import axes_of, check_tensors, numel, op_kernel


def _view_rule(fn):
    return lambda x, **attrs: (fn(x[0], **attrs), x[1])


def _indexed_shape(shape, index):
    # a zero-strided stand-in: indexing it costs no memory whatever the shape
    return numpy.broadcast_to(numpy.zeros((), numpy.uint8), shape)[index].shape


RESHAPE = op_kernel(lambda x, shape: x.reshape(shape), name="reshape", views=0,
                    shape=_view_rule(lambda s, shape: tuple(shape)))
TRANSPOSE = op_kernel(lambda x, axes: x.transpose(axes), name="transpose", views=0,
                      shape=_view_rule(lambda s, axes: tuple(s[a] for a in axes)))
GETITEM = op_kernel(lambda x, index: x[index], name="getitem", views=0,
                    shape=_view_rule(_indexed_shape))
BROADCAST_TO = op_kernel(lambda x, xp, shape: xp.broadcast_to(x, shape), name="broadcast_to",
                         views=0, shape=_view_rule(lambda s, shape: tuple(shape)))


def _scatter(g, xp, shape, index):
    out = xp.zeros(shape, dtype=g.dtype)
    out[index] = g
    return out


GETITEM_BACKWARD = op_kernel(_scatter, name="getitem_backward",
                             shape=lambda g, shape, index: (tuple(shape), g[1]),
                             flops=lambda g, shape, index: float(numel(shape)))


def _joined(specs, axis, stack):
    shapes = [s for s, _ in specs]
    # stacked shapes must be equal; concatenated ones equal except along axis
    key = (lambda s: s) if stack else (lambda s: (len(s), s[:axis] + s[axis + 1:]))
    if any(key(s) != key(shapes[0]) for s in shapes):
        raise ValueError(f"{'stack' if stack else 'concatenate'}: shapes {shapes} do not match "
                         f"along axis {axis}")
    first = shapes[0]
    if stack:
        out = first[:axis] + (len(shapes),) + first[axis:]
    else:
        out = first[:axis] + (sum(s[axis] for s in shapes),) + first[axis + 1:]
    return out, numpy.result_type(*(d for _, d in specs))


CONCATENATE = op_kernel(lambda *xs, xp, axis: xp.concatenate(xs, axis=axis), name="concatenate",
                        shape=lambda *specs, axis: _joined(specs, axis, stack=False))
STACK = op_kernel(lambda *xs, xp, axis: xp.stack(xs, axis=axis), name="stack",
                  shape=lambda *specs, axis: _joined(specs, axis, stack=True))

PAD = op_kernel(lambda x, xp, pad_width: xp.pad(x, pad_width), name="pad",
               shape=_view_rule(lambda s, pad_width: tuple(d + b + a for d, (b, a)
                                                           in zip(s, pad_width))),
               flops=lambda x, pad_width: float(numel(d + b + a for d, (b, a)
                                                      in zip(x[0], pad_width))))
ROLL = op_kernel(lambda x, xp, shift, axis: xp.roll(x, shift, axis), name="roll",
                 shape=_view_rule(lambda s, shift, axis: s),
                 flops=lambda x, shift, axis: float(numel(x[0])))

# ---- ops --------------------------------------------------------------------------------------


def _resolve(shape, size):
    """shape with its one -1 (if any) resolved for an input of `size` elements."""
    shape = tuple(int(d) for d in shape)
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise ValueError(f"reshape: invalid shape {shape}")
    if -1 in shape:
        known = numel(d for d in shape if d != -1)
        if known == 0 or size % known:
            raise ValueError(f"reshape: cannot reshape {size} elements into {shape}")
        shape = tuple(size // known if d == -1 else d for d in shape)
    if numel(shape) != size:
        raise ValueError(f"reshape: cannot reshape {size} elements into {shape}")
    return shape


def _reshape_backward(node, g):
    return (reshape(g, node.shapes[0]),)


def reshape(x, shape):
    """x with a new shape of as many elements (one dim may be -1)."""
    check_tensors("reshape", x)
    shape = _resolve((shape,) if isinstance(shape, numbers.Integral) else shape, x.size)
    return record(RESHAPE(x, shape=shape), (x,), _reshape_backward, name="reshape")


def _transpose_backward(node, g):
    return (transpose(g, tuple(int(a) for a in numpy.argsort(node.attrs["axes"]))),)


def transpose(x, axes=None):
    """x with its axes permuted (None: reversed)."""
    check_tensors("transpose", x)
    axes = tuple(reversed(range(x.ndim))) if axes is None else tuple(int(a) for a in axes)
    if sorted(axes_of(axes, x.ndim)) != list(range(x.ndim)):
        raise ValueError(f"transpose: axes {axes} are not a permutation of {x.ndim} dims")
    axes = tuple(a % x.ndim for a in axes)
    return record(TRANSPOSE(x, axes=axes), (x,), _transpose_backward, name="transpose", axes=axes)


def _basic_index(index):
    """index as a tuple of ints, slices and None ending with Ellipsis (so NumPy returns a 0-d
    array, not a scalar, for a full integer index)."""
    index = index if isinstance(index, tuple) else (index,)
    for item in index:
        if not (item is None or item is Ellipsis or isinstance(item, slice)
                or (isinstance(item, numbers.Integral) and not isinstance(item, bool))):
            raise TypeError(f"coop tensors take basic indices only (ints, slices, None, ...), "
                            f"got {type(item).__name__}")
    return index if Ellipsis in index else index + (Ellipsis,)


def _getitem_backward(node, g):
    return (GETITEM_BACKWARD(g, shape=node.shapes[0], index=node.attrs["index"]),)


def getitem(x, index):
    """x[index] for a basic index (ints, slices, None, Ellipsis): a view."""
    check_tensors("getitem", x)
    index = _basic_index(index)
    return record(GETITEM(x, index=index), (x,), _getitem_backward, name="getitem", index=index)


def _broadcast_to_backward(node, g):
    return (g,)   # the engine sums it down to the input's shape


def broadcast_to(x, shape):
    """x broadcast to shape (a view with zero strides)."""
    check_tensors("broadcast_to", x)
    shape = tuple(int(d) for d in shape)
    numpy.broadcast_shapes(x.shape, shape)   # raises on a mismatch
    return record(BROADCAST_TO(x, shape=shape), (x,), _broadcast_to_backward, name="broadcast_to")


def _concatenate_backward(node, g):
    axis, start, grads = node.attrs["axis"], 0, []
    for shape, need in zip(node.shapes, node.needs):
        stop = start + shape[axis]
        grads.append(getitem(g, (slice(None),) * axis + (slice(start, stop),)) if need else None)
        start = stop
    return tuple(grads)


def concatenate(tensors, axis=0):
    """The tensors joined along an existing axis."""
    tensors = check_tensors("concatenate", *tensors)
    axis = axes_of(axis, tensors[0].ndim)[0]
    _joined([(t.shape, t.dtype) for t in tensors], axis, stack=False)   # raises on a mismatch
    return record(CONCATENATE(*tensors, axis=axis), tensors, _concatenate_backward,
                  name="concatenate", axis=axis)


def _stack_backward(node, g):
    axis = node.attrs["axis"]
    return tuple(getitem(g, (slice(None),) * axis + (i,)) if need else None
                 for i, need in enumerate(node.needs))


def stack(tensors, axis=0):
    """The tensors (of one shape) joined along a new axis."""
    tensors = check_tensors("stack", *tensors)
    axis = axes_of(axis, tensors[0].ndim + 1)[0]
    _joined([(t.shape, t.dtype) for t in tensors], axis, stack=True)    # raises on a mismatch
    return record(STACK(*tensors, axis=axis), tensors, _stack_backward, name="stack", axis=axis)


def _pad_backward(node, g):
    pairs = zip(node.shapes[0], node.attrs["pad_width"])
    return (getitem(g, tuple(slice(before, before + d) for d, (before, _) in pairs)),)


def _pad_width(pad_width, ndim):
    """pad_width as a tuple of ndim (before, after) pairs of non-negative ints."""
    try:
        pairs = tuple((int(b), int(a)) for b, a in pad_width)
        exact = all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                    for pair in pad_width for v in pair)
    except (TypeError, ValueError):
        pairs, exact = (), False
    if not exact or len(pairs) != ndim or any(v < 0 for pair in pairs for v in pair):
        raise ValueError(f"pad: pad_width must be {ndim} (before, after) pairs of non-negative "
                         f"ints, one per axis, got {pad_width!r}")
    return pairs


def pad(x, pad_width):
    """x zero-padded: pad_width holds one (before, after) pair of ints per axis (numpy.pad's
    constant mode)."""
    check_tensors("pad", x)
    pad_width = _pad_width(pad_width, x.ndim)
    return record(PAD(x, pad_width=pad_width), (x,), _pad_backward, name="pad",
                  pad_width=pad_width)


def _roll_backward(node, g):
    return (roll(g, tuple(-s for s in node.attrs["shift"]), node.attrs["axis"]),)


def _roll_args(shift, axis, ndim):
    """(shift, axis) as equal-length tuples of ints, broadcast as numpy.roll does."""
    def ints(v):
        v = (v,) if not isinstance(v, (tuple, list)) else tuple(v)
        if not v or not all(isinstance(i, numbers.Integral) and not isinstance(i, bool)
                            for i in v):
            raise ValueError(f"roll: shift and axis must be ints or tuples of ints, got "
                             f"{shift!r} and {axis!r}")
        return tuple(int(i) for i in v)
    shift, axis = ints(shift), ints(axis)
    if len(shift) != len(axis) and 1 not in (len(shift), len(axis)):
        raise ValueError(f"roll: {len(shift)} shifts for {len(axis)} axes")
    n = max(len(shift), len(axis))
    shift, axis = shift * (n // len(shift)), axis * (n // len(axis))
    for a in axis:
        if not -ndim <= a < ndim:
            raise ValueError(f"roll: axis {a} is out of bounds for a {ndim}-d tensor")
    return shift, tuple(a % ndim for a in axis)


def roll(x, shift, axis):
    """x with elements shifted by `shift` along `axis` (ints or tuples; numpy.roll): those
    that leave one end come back at the other."""
    check_tensors("roll", x)
    shift, axis = _roll_args(shift, axis, x.ndim)
    return record(ROLL(x, shift=shift, axis=axis), (x,), _roll_backward, name="roll",
                  shift=shift, axis=axis)
