"""Modules and parameters: the containers of coop.nn.

Every module takes its runtime once, as the first argument (``Linear(rt, 4, 8)``); passing
``None`` picks up the innermost runtime entered with ``with rt:`` (``coop.get_runtime()``).
Parameters and buffers are runtime constants: pinned, never evicted, updated only in place
(optimizer steps, running statistics, load_state_dict), through the recomputable in-place path.
Initial values come from a seeded ``numpy.random.Generator``, so construction is reproducible;
on a simulation backend nothing is drawn and parameters are (shape, dtype) specs.
"""
import numpy

from coop._checks import check_int
from coop.kernel import Kernel
from coop.ops._common import elementwise_flops
from coop.kernel import get_runtime
from coop.tensor import Tensor


def runtime_of(rt):
    """rt itself, or the active runtime when rt is None."""
    if rt is None:
        return get_runtime()
    if not hasattr(rt, "tensor"):
        raise TypeError(f"coop.nn layers take a coop.Runtime first (None: the active one), got "
                        f"{type(rt).__name__}; make one with coop.Runtime(backend)")
    return rt


def check_sizes(owner, minimum=1, **sizes):
    """Each of sizes an int >= minimum (coop._checks.check_int, named owner: size)."""
    for name, value in sizes.items():
        check_int(f"{owner}: {name}", value, minimum)


def as_tensor(rt, value, below=None, what="ids"):
    """value as a Tensor of rt: Tensors as they are, arrays as constants (token ids, targets);
    an array of the runtime's own module (a CuPy array already on the device) is copied there
    as it is. below: integer ids that index an axis of that size must lie in [-below, below),
    checked here for host arrays (ValueError naming what and the range): NumPy would raise
    inside the kernel, CuPy wraps them silently (a vocabulary mismatch would train on the
    wrong rows). Device arrays are not checked (that would wait for the device)."""
    if isinstance(value, Tensor):
        return value
    rt = runtime_of(rt)
    xp = rt.xp
    if xp is None or xp is numpy or not isinstance(value, xp.ndarray):
        value = numpy.asarray(value)
        if below is not None and value.size and value.dtype.kind in "iu":
            low, high = int(value.min()), int(value.max())
            if low < -below or high >= below:
                raise ValueError(f"coop: {what} index an axis of {below}, so they must lie in "
                                 f"[{-below}, {below}), but they run from {low} to {high}; "
                                 f"check the vocabulary or number of classes against the data")
    return rt.tensor(value, dtype=value.dtype)   # a simulation keeps the int dtype


def generator(rng):
    """A numpy Generator from a Generator, a seed, or None (seed 0: reproducible by default)."""
    return rng if isinstance(rng, numpy.random.Generator) else numpy.random.default_rng(rng or 0)


def _assign(dst, src):
    dst[...] = src


ASSIGN = Kernel(_assign, name="assign_", inplace=0, flops=elementwise_flops(1))


class Parameter(Tensor):
    """A leaf Tensor that requires grad, held by the runtime as a constant (never evicted).

    data: an array (copied into the arena) or, on a simulation backend, a (shape, dtype) spec.
    """

    __slots__ = ()

    def __init__(self, rt, data, dtype=None, requires_grad=True):
        leaf = runtime_of(rt).tensor(data, dtype=dtype)
        super().__init__(leaf._view)
        self.requires_grad = bool(requires_grad)

    def detach(self):
        """A plain Tensor on the same storage (saved by autograd nodes, outside the graph)."""
        return Tensor(self._view)

    def __repr__(self):
        return f"<coop.nn.Parameter shape={self.shape} dtype={self.dtype}>"


def make_parameter(rt, shape, dtype, draw, requires_grad=True):
    """A Parameter of shape holding draw(shape) (float64 values cast to dtype); on a
    simulation backend a spec only, and draw is not called."""
    rt = runtime_of(rt)
    shape = tuple(int(d) for d in shape)
    if rt.xp is None:
        return Parameter(rt, (shape, numpy.dtype(dtype)), requires_grad=requires_grad)
    return Parameter(rt, numpy.asarray(draw(shape)).astype(dtype), requires_grad=requires_grad)


def make_buffer(rt, shape, dtype, fill):
    """A constant Tensor (no grad) of shape filled with `fill`: running statistics, optimizer
    state, gradient buckets. The runtime copies a broadcast view of one `fill` made by its own
    module: on the host no temporary of the buffer's size; on a device the copy runs there (a
    host view would be staged through a pinned host copy of the whole buffer)."""
    rt = runtime_of(rt)
    shape = tuple(int(d) for d in shape)
    if rt.xp is None:
        return rt.tensor((shape, numpy.dtype(dtype)))
    return rt.tensor(rt.xp.broadcast_to(rt.xp.asarray(fill, dtype=dtype), shape))


def uniform(rng, bound):
    """Initializer: U(-bound, bound), drawn from rng."""
    return lambda shape: rng.uniform(-bound, bound, shape)


def normal(rng, std):
    """Initializer: N(0, std^2), drawn from rng."""
    return lambda shape: rng.normal(0.0, std, shape)


def constant(value):
    """Initializer: every element `value` (no draw)."""
    return lambda shape: numpy.full(shape, value)


class Module:
    """A model part: parameters, buffers and sub-modules registered by attribute assignment
    (in that order), a training flag, and ``forward`` (called by ``module(...)``)."""

    def __init__(self):
        object.__setattr__(self, "_children", {})   # name -> Parameter | Module, in order
        object.__setattr__(self, "_buffers", {})    # name -> Tensor (state, no grad)
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        children = self.__dict__.get("_children")
        if children is None:
            raise RuntimeError(f"{type(self).__name__}: call Module.__init__() before assigning "
                               "attributes")
        if isinstance(value, (Parameter, Module)):
            children[name] = value
        else:
            children.pop(name, None)
        if name in self._buffers:
            self._buffers[name] = value
        object.__setattr__(self, name, value)

    def register_buffer(self, name, tensor):
        """Register a state tensor (no grad) saved by state_dict, e.g. running statistics."""
        self._buffers[name] = tensor
        object.__setattr__(self, name, tensor)

    def forward(self, *args, **kwargs):
        """The module's computation on coop Tensors; ``module(x)`` calls it."""
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ---- traversal ------------------------------------------------------------------------------

    def named_modules(self, prefix=""):
        """(name, module) for this module and every sub-module, depth first in order."""
        yield prefix, self
        for name, child in self._children.items():
            if isinstance(child, Module):
                yield from child.named_modules(f"{prefix}{name}.")

    def named_parameters(self):
        """(dotted name, Parameter) in registration order, recursively (a sub-module's where
        it was registered); a shared parameter once."""
        seen = set()
        for name, p in self._all_parameters(""):
            if id(p) not in seen:
                seen.add(id(p))
                yield name, p

    def _all_parameters(self, prefix):
        for name, child in self._children.items():
            if isinstance(child, Parameter):
                yield prefix + name, child
            else:
                yield from child._all_parameters(f"{prefix}{name}.")

    def parameters(self):
        """The parameters, recursively, in registration order."""
        return [p for _, p in self.named_parameters()]

    def named_buffers(self):
        """(dotted name, tensor) of every buffer of this module and its submodules."""
        for prefix, module in self.named_modules():
            for name, buffer in module._buffers.items():
                yield prefix + name, buffer

    def num_parameters(self):
        """The number of parameter elements (each shared parameter counted once)."""
        return sum(p.size for p in self.parameters())

    # ---- modes and state -------------------------------------------------------------------------

    def train(self, mode=True):
        """Set training mode (dropout active, batch statistics) here and below; returns self."""
        for _, module in self.named_modules():
            object.__setattr__(module, "training", bool(mode))
        return self

    def eval(self):
        """Evaluation mode: dropout off, running statistics."""
        return self.train(False)

    def _state_tensors(self):
        return dict(list(self.named_parameters()) + list(self.named_buffers()))

    def state_dict(self):
        """{name: NumPy copy} of every parameter and buffer."""
        return {name: t.numpy() for name, t in self._state_tensors().items()}

    def load_state_dict(self, state):
        """Copy state's arrays into the parameters and buffers, in place (same storages, so
        optimizers keep working). Keys and shapes must match exactly, and each value must
        convert to its tensor's dtype: all are checked before anything is copied, so a refused
        state changes nothing. Values are arrays, or coop Tensors (of any runtime)."""
        tensors = self._state_tensors()
        missing, unexpected = tensors.keys() - state.keys(), state.keys() - tensors.keys()
        if missing or unexpected:
            raise KeyError(f"load_state_dict: missing {sorted(missing)}, unexpected "
                           f"{sorted(unexpected)}")
        values = {}
        for name, t in tensors.items():
            value = state[name]
            value = value.numpy() if isinstance(value, Tensor) else numpy.asarray(value)
            if value.shape != t.shape:
                raise ValueError(f"load_state_dict: {name} has shape {t.shape}, got {value.shape}")
            try:
                values[name] = value.astype(t.dtype, casting="same_kind", copy=False)
            except (TypeError, ValueError):
                raise ValueError(f"load_state_dict: {name} has dtype {t.dtype}, got "
                                 f"{value.dtype}, which does not convert to it; give "
                                 f"{t.dtype} values") from None
        for name, t in tensors.items():
            t.runtime.apply(ASSIGN, t, t.runtime.tensor(values[name], dtype=t.dtype))

    def extra_repr(self):
        """The module's settings inside its repr's parentheses (e.g. "64, 128")."""
        return ""

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, child in self._children.items():
            if isinstance(child, Module):
                lines.append(f"  ({name}): " + repr(child).replace("\n", "\n  "))
        return "\n".join(lines) + ")" if len(lines) > 1 else lines[0] + ")"


class Sequential(Module):
    """Modules applied one after another; registered as "0", "1", ..."""

    def __init__(self, *modules):
        super().__init__()
        for i, module in enumerate(modules):
            if not isinstance(module, Module):
                raise TypeError(f"Sequential takes coop.nn Modules, got {type(module).__name__} "
                                f"at {i}; wrap a function in a Module (its forward)")
            setattr(self, str(i), module)

    def __len__(self):
        return len(self._children)

    def __getitem__(self, i):
        return list(self._children.values())[i]

    def __iter__(self):
        return iter(list(self._children.values()))

    def forward(self, x):
        for module in self:
            x = module(x)
        return x
