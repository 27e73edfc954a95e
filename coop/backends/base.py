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

A device backend may also offer (the runtime asks with hasattr): ``bound()``, the backend as
the runtime's executor should hold it (CuPy: bound to the current device, the pool held weakly,
so the arena's owner and the backend make no reference cycle); ``device_name()``, for the
default cost model; ``event_timer()``, what cost="timing" measures kernels with.
"""
import abc


class Backend(abc.ABC):
    """What every coop backend provides (HostBackend, a Cython class, is registered as one)."""

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

    def __enter__(self):
        self.install()
        return self

    def __exit__(self, *exc):
        self.uninstall()
        return False
