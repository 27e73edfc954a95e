"""The tape's nouns: Storage (one computed value's memory), View, Tensor (what users hold), Op.

Ownership (no cycles, so reference counting frees everything at once):
Tensor -> View -> Storage -> Op (its producer) -> input Views -> their Storages ...
An Op refers to its outputs only weakly. A Storage lives while a Tensor or a recorded Op needs
it; its memory lives while a Tensor needs it (or until evicted). A released storage that an Op
still needs is kept as a record only, and recomputed on demand.
"""
import contextlib
import sys
import weakref

import numpy

from coop.autograd import TensorMethods


class Storage:
    """One value's memory: resident (``array`` set) or not (evicted, released, or pending).

    ``array`` is the root array owning the arena piece (host/device) or, in simulation, the
    piece's offset. ``op`` is the producer (None for constants, which are never evicted).
    """

    __slots__ = ("sid", "runtime", "op", "index", "array", "nbytes", "users", "consumers",
                 "held", "__weakref__")

    def __init__(self, runtime, sid, nbytes, op=None, index=0):
        self.sid = sid                      # id in the arena
        self.runtime = runtime
        self.op = op                        # producer; None: cannot be recomputed
        self.index = index                  # which output of op
        self.array = None                   # root array (or sim offset) while resident
        self.nbytes = nbytes
        self.users = 0                      # live Tensors on this storage
        self.consumers = weakref.WeakSet()  # recorded Ops that read it
        self.held = False                   # its array escaped the runtime: never evict

    @property
    def resident(self):
        return self.array is not None

    def __del__(self):
        runtime = self.runtime
        if runtime is not None and not sys.is_finalizing():
            runtime._forget(self)

    def __repr__(self):
        state = "resident" if self.array is not None else "evicted"
        return f"<Storage {self.sid} {self.nbytes}B {state}>"


class View:
    """Where a tensor's elements sit in its storage: shape, dtype, strides, byte offset."""

    __slots__ = ("storage", "shape", "dtype", "strides", "offset")

    def __init__(self, storage, shape, dtype, strides, offset):
        self.storage = storage
        self.shape = tuple(shape)
        self.dtype = numpy.dtype(dtype)
        self.strides = tuple(strides) if strides is not None else None
        self.offset = offset

    def on(self, storage):
        return View(storage, self.shape, self.dtype, self.strides, self.offset)

    @property
    def spec(self):
        return (self.shape, self.dtype)


class Op:
    """One recorded kernel call: enough to run it again."""

    __slots__ = ("kernel", "inputs", "attrs", "outputs", "cost", "cls", "seed", "__weakref__")

    def __init__(self, kernel, inputs, attrs, cls, seed):
        self.kernel = kernel
        self.inputs = inputs     # list of View (their storages are kept alive by the op)
        self.attrs = attrs
        self.outputs = []        # per output: (weakref to Storage, View params) or None (alias)
        self.cost = 0.0          # ns, measured at the first run or modelled
        self.cls = cls
        self.seed = seed         # random kernels: the seed of the stream they consumed

    def __repr__(self):
        return f"<Op {self.kernel.name} cost={self.cost:.0f}ns>"


class Tensor(TensorMethods):
    """A user's handle on a value: a view on a storage. Its memory is freed when the last
    Tensor on the storage goes away (the value stays recomputable while an Op needs it).

    Autograd (coop/autograd.py): ``grad_fn`` is the Node that made it (None for leaves and
    outside the graph); ``grad`` accumulates a leaf's gradient; operators and op methods come
    from TensorMethods."""

    __slots__ = ("_view", "requires_grad", "grad", "grad_fn", "__weakref__")

    def __init__(self, view):
        self._view = view
        view.storage.users += 1
        self.requires_grad = False
        self.grad = None
        self.grad_fn = None

    def __del__(self):
        storage = self._view.storage
        storage.users -= 1
        if storage.users == 0 and storage.runtime is not None and not sys.is_finalizing():
            storage.runtime._release(storage)

    @property
    def shape(self):
        return self._view.shape

    @property
    def dtype(self):
        return self._view.dtype

    @property
    def ndim(self):
        return len(self._view.shape)

    @property
    def size(self):
        n = 1
        for d in self._view.shape:
            n *= d
        return n

    @property
    def storage(self):
        return self._view.storage

    @property
    def runtime(self):
        return self._view.storage.runtime

    @contextlib.contextmanager
    def borrow(self):
        """The raw array, pinned (and resident) while the block runs.

        Keep no reference past the block: if one survives, the storage is never evicted.
        """
        runtime = self.runtime
        storage = self._view.storage
        runtime._pin([storage])
        try:
            runtime._make_resident([storage])
            yield runtime._array(self._view)
        finally:
            runtime._unpin([storage])

    def numpy(self):
        """A host copy of the value (NumPy array), made outside the arena."""
        with self.borrow() as a:
            return self.runtime._to_host(a)

    def __repr__(self):
        return f"<coop.Tensor shape={self.shape} dtype={self.dtype} storage={self.storage.sid}>"
