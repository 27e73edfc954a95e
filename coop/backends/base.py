"""The backend base class: memory only.

A backend reserves one arena of ``budget`` bytes and says where arrays live in it; it holds
no policy, clock or runtime state (the residency engine owns those, and evicts through the
arena it is attached to). The runtime needs of a backend:

- ``arena``: the coop._core.Arena that cuts the memory into pieces;
- ``xp``: the array module (numpy, cupy), or None for a backend of sizes only;
- ``alignment``: the arena's alignment in bytes;
- ``offset_of(array)``: the arena offset of the piece holding array's memory, or None;
- ``array_at(offset, nbytes)``: a flat uint8 array over nbytes of the arena at offset;
- ``placing(placement)``: a context in which the array module's allocations of this thread go
  to the arena with that placement class (EXPENSIVE, CHEAP or LOWEST), restored on every exit;
- ``install()`` / ``uninstall()``, and ``with backend:`` for the same with EXPENSIVE placement.

The runtime and the array executor (coop._executor) also ask what differs between the host and
a device; each has a default here, for a backend of sizes only or one that cannot move memory:
``bound()``, ``device_name()``, ``event_timer()``, ``logs_allocations``, ``address_of(array)``,
``memory_held(array)``, ``can_move`` with ``copy_to(array, offset)``, and ``can_slide`` with
``slide(arrays, index, src, dst)``. Nothing asks a backend with hasattr.
"""
import abc

#: a copy out ahead of the pressure (the host tier's, while the link is idle) is issued in
#: chunks of this many bytes, so that a copy out for room made meanwhile waits for the chunk
#: in flight, not for all of it: CuPy's stream for copies ahead (coop.backends.cupy) issues
#: it so, and the engine's clock assumes it (coop.engine.Engine.ahead_chunk). 4 MiB moves in
#: 0.17 ms at 25 GB/s, about one kernel of the paper models' transformers.
AHEAD_CHUNK = 4 << 20


class Backend(abc.ABC):
    """What every coop backend provides (HostBackend, a Cython class, is registered as one)."""

    __slots__ = ()       # a slotted subclass (CuPy's bound pool) stays slotted
    arena = None
    xp = None

    @property
    def alignment(self):
        return self.arena.alignment

    @abc.abstractmethod
    def offset_of(self, array):
        """Arena offset of the piece holding array's memory (also for views), else None."""

    @abc.abstractmethod
    def array_at(self, offset, nbytes):
        """A flat uint8 array over nbytes of the arena starting at offset."""

    @abc.abstractmethod
    def placing(self, placement):
        """A context manager: allocations inside go to the arena with this placement."""

    @abc.abstractmethod
    def install(self):
        """Route the array module's allocations of this thread to the arena."""

    @abc.abstractmethod
    def uninstall(self):
        """Undo the matching install()."""

    # ---- what the runtime and the array executor ask beyond memory --------------------------

    #: a recorded trace keeps the kernels' own allocations (the host's: docs/trace-format.md)
    logs_allocations = False
    #: copy_to can put a copy on a given piece: coop's window may move storages
    can_move = False
    #: slide can move bytes down in place: a window may be compacted
    can_slide = False

    def bound(self):
        """The backend as a runtime's executor holds it (CuPy: bound to the current device, the
        pool held weakly, so the arena's owner and the backend make no reference cycle)."""
        return self

    def device_name(self):
        """The device's name, for the default cost model (e.g. 'NVIDIA H100 80GB HBM3'); None
        when there is none to ask."""
        return None

    def event_timer(self):
        """What cost="timing" measures kernels with when host timers cannot (a device runs them
        asynchronously): an object with ``kernel(k)`` and ``elapsed_ns()``; None: host timers."""
        return None

    def address_of(self, array):
        """The address of array's first element (a view's offset in its storage is the
        difference of two)."""
        raise NotImplementedError(f"{type(self).__name__} has no arrays")

    def memory_held(self, array):
        """Whether something besides array holds the memory object behind it (CuPy: another
        pointer to its UnownedMemory): then its memory may be neither dropped nor moved."""
        return False

    def copy_to(self, array, offset):
        """A new C-ordered array on the used, anonymous piece at offset (taken already: a
        move) holding a copy of array's bytes; None where it cannot be put there."""
        return None

    @property
    def can_offload(self):
        """Whether to_host, from_host and free_host copy arrays to host memory outside the
        arena and back (the host tier of an offloading policy)."""
        return False

    @property
    def can_copy_ahead(self):
        """Whether to_host may copy an array that stays in use (the host tier's copies out
        ahead of the pressure) without holding up the work after it."""
        return False

    def to_host(self, array, ahead=False):
        """A copy of C-contiguous array's bytes in host memory outside the arena (a handle
        with shape, dtype and nbytes); array may be freed as soon as this returns. ahead (only
        where can_copy_ahead): a copy out ahead of the pressure, from an array that stays in
        use, which must not hold up the work after it. coop.HostMemoryError when the host has
        no memory for the copy: the engine then treats the host tier as full (a recomputable
        storage is evicted instead, a constant stays)."""
        raise NotImplementedError(f"{type(self).__name__} has no host tier")

    def from_host(self, copy, placement, ahead=False):
        """A new C-contiguous array in the arena (placed with placement, as an allocation
        of the backend's is) holding the bytes of to_host's copy. ahead (a prefetch: the
        array is read only after await_host(copy)): the copy may run beside the work after
        it, which must then not hold up; the array's memory, if freed first, must not be
        handed out again before the copy ends."""
        raise NotImplementedError(f"{type(self).__name__} has no host tier")

    def await_host(self, copy):
        """The array from_host(copy, ..., ahead=True) made is about to be read: the work from
        now on waits for that copy. Nothing to do where from_host's copy is done when it
        returns."""
        return None

    def free_host(self, copy):
        """Free to_host's copy (safe to call twice)."""
        raise NotImplementedError(f"{type(self).__name__} has no host tier")

    def slide(self, arrays, index, src, dst):
        """Move the bytes of arrays[index] (at offset src) down to offset dst in place, the
        ranges may overlap, under a new array at dst that replaces it in arrays; the old array
        dies here, freeing nothing (the arena slides the piece). False where this cannot be
        done (the old array stays)."""
        return False

    def __enter__(self):
        self.install()
        return self

    def __exit__(self, *exc):
        self.uninstall()
        return False
