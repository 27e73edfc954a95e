"""The simulation backend: sizes and costs only, no arrays (trace replay, paper-scale models).

It places storages in a real arena, so fragmentation, evictions and search time are those of
the real policy; kernels are not run: their shape rules size the outputs and the cost model
prices them.
"""
from coop._core import EXPENSIVE, Arena


class SimBackend:
    """A budget of bytes with no memory behind it."""

    xp = None

    def __init__(self, budget, policy="coop", alignment=512, ideal=False):
        from coop.budget import parse_budget
        self.alignment = alignment
        # ideal: memory as a plain sum of sizes, no addresses (DTR's own simulator)
        self.arena = Arena(parse_budget(budget), alignment, ideal=ideal)
        self.cls = EXPENSIVE
        self.policy = policy
        self.now = 0.0
        self.evict = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def offset_of(self, array):
        return None

    def __repr__(self):
        return f"<coop.SimBackend capacity={self.arena.capacity} policy={self.policy!r}>"
