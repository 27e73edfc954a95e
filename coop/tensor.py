"""What users hold: Tensor, a handle on a View (coop._executor) of one storage of the
residency engine.

The engine (coop.engine) owns storages and ops by integer id: residency, pins, records and
their lifetime. A Tensor counts as one user of its storage; when the last one goes, the
engine releases the storage (its memory is freed; the record stays while an op needs it to
recompute another). Nothing here refers back to a Tensor, so reference counting frees a
value's memory as soon as the program drops it.
"""
import contextlib
import sys


class StorageRef:
    """A look at one storage of a runtime (for inspection: ``tensor.storage``)."""

    __slots__ = ("runtime", "sid")

    def __init__(self, runtime, sid):
        self.runtime = runtime
        self.sid = sid

    def _info(self):
        with self.runtime._lock:
            return self.runtime._engine.info(self.sid) or {}

    @property
    def nbytes(self):
        return self._info().get("nbytes", 0)

    @property
    def resident(self):
        return self._info().get("offset") is not None

    @property
    def array(self):
        """The flat bytes holding the value while resident (host and CuPy runs), else None."""
        return self.runtime._executor.array_of(self.sid)

    @property
    def op(self):
        """The producer op's id, or None for a constant (never evicted)."""
        return self._info().get("producer")

    @property
    def users(self):
        return self._info().get("users", 0)

    @property
    def held(self):
        return self._info().get("held", False)

    def __eq__(self, other):
        return isinstance(other, StorageRef) and other.runtime is self.runtime \
            and other.sid == self.sid

    def __hash__(self):
        return hash((id(self.runtime), self.sid))

    def __repr__(self):
        state = "resident" if self.resident else "evicted"
        return f"<Storage {self.sid} {self.nbytes}B {state}>"


class Tensor:
    """A user's handle on a value: a view on a storage. Its memory is freed when the last
    Tensor on the storage goes away (the value stays recomputable while an Op needs it).

    Autograd (coop.autograd): ``grad_fn`` is the Node that made it (None for leaves and
    outside the graph); ``grad`` accumulates a leaf's gradient; operators and op methods come
    from coop.autograd.methods, installed by coop/__init__.py."""

    __slots__ = ("_view", "requires_grad", "grad", "grad_fn", "__weakref__")

    def __init__(self, view):
        # one C step that runs no Python code: atomic under the GIL, no lock needed
        view.runtime._engine.retain(view.sid)
        self._view = view
        self.requires_grad = False
        self.grad = None
        self.grad_fn = None

    def __del__(self):
        try:
            view = self._view
        except AttributeError:
            return        # its construction failed: it never counted as a user
        if _finalizing():
            return
        runtime = view.runtime
        lock = runtime._lock
        if lock.acquire(False):
            try:
                runtime._engine.unref(view.sid)
            finally:
                lock.release()
        else:             # another thread is in the engine: it releases this on its way out
            runtime._pending.append(view.sid)
        if runtime._pending or runtime._executor.dying:
            runtime._release_pending()

    def __copy__(self):
        """Another Tensor on the same storage (one more user of it)."""
        new = Tensor.__new__(type(self))
        Tensor.__init__(new, self._view)
        new.requires_grad = self.requires_grad
        new.grad = self.grad
        new.grad_fn = self.grad_fn
        return new

    def __deepcopy__(self, memo):
        """An independent Tensor: a new constant of the same runtime holding a copy of the
        value (a leaf; its grad deep-copied). Like PyTorch, only leaves of the autograd graph
        can be deep-copied."""
        if self.grad_fn is not None:
            raise RuntimeError("only leaf Tensors (made by runtime.tensor or as parameters, not "
                               "by an op of the autograd graph) support copy.deepcopy; "
                               "deep-copy t.detach() instead")
        runtime = self._view.runtime
        if runtime.xp is None:
            leaf = runtime.tensor(self._view.spec)
        else:
            with self._borrow(False) as a:
                leaf = runtime.tensor(a)
        new = Tensor.__new__(type(self))
        Tensor.__init__(new, leaf._view)
        memo[id(self)] = new
        new.requires_grad = self.requires_grad
        new.grad = None if self.grad is None else self.grad.__deepcopy__(memo)
        new.grad_fn = None
        return new

    @property
    def shape(self):
        """The shape, a tuple of ints."""
        return self._view.shape

    @property
    def dtype(self):
        """The NumPy dtype."""
        return self._view.dtype

    @property
    def ndim(self):
        """The number of dimensions."""
        return len(self._view.shape)

    @property
    def size(self):
        """The number of elements."""
        n = 1
        for d in self._view.shape:
            n *= d
        return n

    @property
    def storage(self):
        """A StorageRef to the storage this tensor looks at (for inspection)."""
        return StorageRef(self._view.runtime, self._view.sid)

    @property
    def runtime(self):
        """The coop.Runtime that owns this tensor."""
        return self._view.runtime

    def borrow(self):
        """The raw array, pinned (and resident) while the block runs.

        Keep no reference past the block: if one survives, the storage is never evicted.
        Writing into the array in place is kept for a constant (a recomputable value comes
        back from its op): when the block ends, a host-tier copy of the storage made before
        (a copy out ahead) is dropped, as it may no longer hold its bytes.
        """
        return self._borrow(True)

    @contextlib.contextmanager
    def _borrow(self, written):
        """borrow's block; written: the array may have been written (a host copy is dropped)."""
        view = self._view
        runtime = view.runtime
        engine = runtime._engine
        with runtime._lock:
            runtime._check_owner()
            engine.pin(view.sid)
            try:
                engine.make_resident(view.sid)
                array = runtime._executor.array(view)
            except BaseException:
                engine.unpin(view.sid)
                raise
        try:
            yield array
        finally:
            del array
            with runtime._lock:
                if written:
                    engine.written(view.sid)
                engine.unpin(view.sid)

    def numpy(self):
        """A host copy of the value (NumPy array), made outside the arena."""
        with self._borrow(False) as a:
            return self.runtime._to_host(a)

    def __repr__(self):
        return f"<coop.Tensor shape={self.shape} dtype={self.dtype} storage={self._view.sid}>"


_finalizing = sys.is_finalizing
