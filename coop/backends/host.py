"""NumPy on the host: ``numpy_allocator`` builds a ``HostBackend`` (``coop.backends._host``) for a budget.

Install it with ``with backend:`` (or ``install()`` / ``uninstall()``). NumPy keeps its memory
handler in a contextvar, so the backend serves the thread (and context) that installed it; a
thread started inside the block allocates with NumPy's default handler, and every array is freed
by the handler that allocated it. See docs/backends.md, "NumPy (host)".
"""
from coop.backends._host import HostBackend
from coop.budget import host_memory_bytes, parse_budget

__all__ = ["HostBackend", "numpy_allocator"]


def numpy_allocator(budget, alignment=64, host_budget=None):
    """A host backend of `budget` bytes (an int, "6GiB", or "50%" / "0.5x" of the host's memory),
    at most the host's memory. It evicts when a coop.Runtime (its engine) owns its arena:
    ``coop.Runtime(backend, policy=...)``. alignment: of every piece, at least 16 bytes.
    host_budget: the bytes its host tier may hold under
    an offloading policy (``policy="coop-offload"``: copies of arrays in memory outside the
    budget's arena), None for no limit."""
    memory = host_memory_bytes()
    backend = HostBackend(parse_budget(budget, memory, of="this host's memory", limit=memory,
                                       limit_name="this host's memory"), alignment)
    if host_budget is not None:
        backend.host_budget = parse_budget(host_budget, memory, of="this host's memory",
                                           name="host_budget")
    return backend
