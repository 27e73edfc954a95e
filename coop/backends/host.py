"""NumPy on the host: ``numpy_allocator`` builds a ``HostBackend`` (``coop.backends._host``) for a budget.

Install it with ``with backend:`` (or ``install()`` / ``uninstall()``). NumPy keeps its memory
handler in a contextvar, so the backend serves the thread (and context) that installed it; a
thread started inside the block allocates with NumPy's default handler, and every array is freed
by the handler that allocated it. See docs/backends.md, "NumPy (host)".
"""
from coop.backends._host import HostBackend
from coop.budget import host_memory_bytes, parse_budget

__all__ = ["HostBackend", "numpy_allocator"]


def numpy_allocator(budget, alignment=64):
    """A host backend of `budget` bytes ("6GiB", "80%" of the host's memory, an int). It evicts
    when a coop.Runtime (its engine) owns its arena: ``coop.Runtime(backend, policy=...)``."""
    return HostBackend(parse_budget(budget, total=host_memory_bytes()), alignment)
