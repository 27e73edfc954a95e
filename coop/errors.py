"""coop's exceptions."""


class OutOfMemoryError(MemoryError):
    """No placement and nothing left to evict: the request cannot be served within the budget."""

    def __init__(self, message, request=0, budget=0, free=0, largest_free=0):
        super().__init__(message)
        self.request = request
        self.budget = budget
        self.free = free
        self.largest_free = largest_free


class UsageError(ValueError):
    """A command-line argument that cannot be used: the message names it and the fix."""
