"""coop's exceptions: one base class, ``CoopError``, for everything coop raises on purpose.

The layer below every other: it imports nothing from coop.
"""


class CoopError(Exception):
    """Base of coop's own errors: ``except coop.CoopError`` catches each of them."""


class OutOfMemoryError(CoopError, MemoryError):
    """No placement and no choice that makes room (nothing left to evict, or nothing the
    policy's choice could use): the request cannot be served within the budget.

    Figures (bytes): ``request``, ``budget``, ``free`` and ``largest_free`` (the largest free
    range); from the arena's window search, when it raised: ``pinned_bytes`` (held by the running
    kernel, pinned, or anonymous), ``wall_bytes`` (neither evictable nor movable),
    ``largest_window`` (the largest range free of both: what evicting and moving everything else
    could have freed), ``constant_bytes`` (unevictable but movable: each may move only to a free
    piece of its own) and ``evictable_bytes`` (candidates no choice of the policy's could use);
    None where the search did not run.
    """

    def __init__(self, message, request=0, budget=0, free=0, largest_free=0,
                 pinned_bytes=None, wall_bytes=None, largest_window=None, constant_bytes=None,
                 evictable_bytes=None):
        super().__init__(message)
        self.request = request
        self.budget = budget
        self.free = free
        self.largest_free = largest_free
        self.pinned_bytes = pinned_bytes
        self.wall_bytes = wall_bytes
        self.largest_window = largest_window
        self.constant_bytes = constant_bytes
        self.evictable_bytes = evictable_bytes

    @property
    def bytes_fit(self):
        """Whether what could not leave (pinned or anonymous, walls, constants) and the request
        together fit the budget: then the addresses stopped the allocation, not the budget.
        None where the search did not run."""
        if self.pinned_bytes is None:
            return None
        held = self.pinned_bytes + self.wall_bytes + (self.constant_bytes or 0)
        return held + self.request <= self.budget

    def figures(self):
        """The constructor's arguments after the message, in order (to rebuild or pickle it)."""
        return (self.request, self.budget, self.free, self.largest_free, self.pinned_bytes,
                self.wall_bytes, self.largest_window, self.constant_bytes, self.evictable_bytes)

    def __reduce__(self):
        return (type(self), (str(self),) + self.figures())


class HostMemoryError(CoopError, MemoryError):
    """The host could not give the memory for a host-tier copy (CuPy: cudaHostAlloc failed to
    pin it). The engine treats the host tier as full: a recomputable storage is evicted
    instead, a constant stays on the device (refused, as by a host_budget)."""


class Thrash(CoopError):
    """The cost executed passed the engine's thrash limit (compute overhead above it)."""


class TraceError(CoopError, ValueError):
    """A trace that cannot be read: the message names the file, the line and the problem."""


class UsageError(CoopError, ValueError):
    """A command-line argument that cannot be used: the message names it and the fix."""


class InternalError(CoopError, RuntimeError):
    """A broken invariant inside coop (a bug, not a usage error): please report it."""
