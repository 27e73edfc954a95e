"""Kernels: a callable over NumPy or CuPy arrays, with what the runtime needs to know about it.

A kernel is written once against the array module it is given (``xp``); the runtime decides
where its outputs live, times it (or models its cost), and may call it again to recompute.
"""
import inspect
import math

import numpy

from coop._core import CHEAP, EXPENSIVE
from coop.tensor import Tensor

#: ops whose outputs are expensive per byte (the paper's table): placed at the low end
EXPENSIVE_OPS = frozenset({
    "matmul", "batch_matmul", "bmm", "conv2d", "conv2d_grad_input", "conv2d_grad_weight",
    "conv_transpose2d", "conv_transpose2d_grad_input", "conv_transpose2d_grad_weight", "add_n",
})


class Kernel:
    """A named callable with its class, randomness, in-place target and cost/shape rules.

    fn(*arrays, **attrs) returns an array or a tuple of arrays. With ``random=True`` it also
    receives ``rng=``, a ``coop.random.Stream`` (counter-based Philox draws: ``rng.random``,
    ``rng.bits``) keyed by a seed the runtime records, so a recompute draws the same numbers
    and no generator state is allocated. With ``inplace=i`` it mutates its i-th input and returns
    nothing (or that input). ``views=i`` declares that its (first) output is a view of input i,
    for the simulation backend (on arrays, views are detected). ``flops(*specs, **attrs)`` and ``shape(*specs, **attrs)`` take
    ``(shape, dtype)`` pairs: the cost model and the simulation backend use them.
    """

    __slots__ = ("fn", "name", "cls", "random", "inplace", "views", "flops", "shape", "wants_xp")

    def __init__(self, fn, name=None, cls=None, random=False, inplace=None, views=None,
                 flops=None, shape=None):
        if not callable(fn):
            raise TypeError(f"a kernel must be callable, got {fn!r}")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", type(fn).__name__)
        if cls is None:
            cls = EXPENSIVE if self.name in EXPENSIVE_OPS else CHEAP
        if cls not in (EXPENSIVE, CHEAP):
            raise ValueError(f"kernel class must be coop.EXPENSIVE or coop.CHEAP, got {cls!r}")
        self.cls = cls
        self.random = bool(random)
        if inplace is not None and (isinstance(inplace, bool) or not isinstance(inplace, int)):
            raise TypeError(f"inplace must be the index of the mutated input, got {inplace!r}")
        if inplace is not None and inplace < 0:
            raise ValueError(f"inplace must be the index of the mutated input, 0 or more, got "
                             f"{inplace}")
        self.inplace = inplace
        self.views = views
        self.flops = flops
        self.shape = shape
        try:
            self.wants_xp = "xp" in inspect.signature(fn).parameters
        except (TypeError, ValueError):
            self.wants_xp = False

    def __call__(self, *inputs, **attrs):
        return apply(self, *inputs, **attrs)

    def with_fn(self, fn):
        """This kernel running fn instead (a wrapper of its function: a timer's), its name,
        class and rules kept."""
        return Kernel(fn, name=self.name, cls=self.cls, random=self.random,
                      inplace=self.inplace, views=self.views, flops=self.flops, shape=self.shape)

    def __repr__(self):
        return f"<coop.Kernel {self.name}>"


def call_error(kernel, inputs, attrs, error):
    """The TypeError to raise for `error`, raised by running kernel on inputs and attrs: one
    that names the kernel and its signature when the call does not fit it, else error."""
    try:
        signature = inspect.signature(kernel.fn)
    except (TypeError, ValueError):
        return error
    given = dict(attrs)
    if kernel.wants_xp:
        given["xp"] = None
    if kernel.random:
        given["rng"] = None
    try:
        signature.bind(*inputs, **given)
    except TypeError as bad:
        named = ", ".join(attrs)
        return TypeError(f"kernel {kernel.name!r}{signature} called with {len(inputs)} "
                         f"input(s){' and ' + named if named else ''}: {bad}")
    return error


def kernel(fn=None, **options):
    """Decorator form: ``@coop.kernel`` or ``@coop.kernel(name=..., cls=..., random=True)``.

    The decorated function, called on coop Tensors, runs through ``coop.apply``.
    """
    if fn is None:
        return lambda f: Kernel(f, **options)
    return Kernel(fn, **options)


def as_kernel(fn):
    return fn if isinstance(fn, Kernel) else Kernel(fn)


# ---- (shape, dtype) specs: what shape rules return and cost models price -------------------

def is_spec(value):
    """(shape, dtype): a shape tuple and anything numpy.dtype accepts."""
    return (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], tuple)
            and not isinstance(value[1], tuple))


def specs_of(value):
    """A shape rule's result (one spec, or a sequence of them) as a list of specs."""
    return [value] if is_spec(value) else list(value)


def spec_nbytes(spec):
    shape, dtype = spec
    return math.prod(shape) * numpy.dtype(dtype).itemsize


#: the runtimes entered with ``with runtime:``, innermost last (coop.Runtime keeps it)
active_runtimes = []


def get_runtime():
    """The innermost runtime entered with ``with runtime:``."""
    if not active_runtimes:
        raise RuntimeError("no coop runtime is active: create one, e.g. "
                           "`with coop.Runtime(coop.numpy_allocator('1GiB')):`")
    return active_runtimes[-1]


def apply(kernel, *inputs, **attrs):
    """Run kernel on coop Tensors (see Runtime.apply); the runtime is the inputs' own."""
    for t in inputs:
        if isinstance(t, Tensor):
            return t._view.runtime.apply(kernel, *inputs, **attrs)
    return get_runtime().apply(kernel, *inputs, **attrs)
