"""coop's exceptions."""


class OutOfMemoryError(MemoryError):
    """No placement and nothing left to evict: the request cannot be served within the budget."""

    def __init__(self, message, request=0, budget=0, free=0, largest_free=0):
        super().__init__(message)
        self.request = request
        self.budget = budget
        self.free = free
        self.largest_free = largest_free
        #: from the arena's window search, when it raised: bytes pinned (held by the running
        #: kernel) or anonymous, bytes neither evictable nor movable, and the largest range
        #: free of both (what evicting and moving everything else could have freed)
        self.pinned_bytes = None
        self.wall_bytes = None
        self.largest_window = None


class UsageError(ValueError):
    """A command-line argument that cannot be used: the message names it and the fix."""
