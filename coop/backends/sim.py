"""The simulation backend: sizes and costs only, no arrays (trace replay, paper-scale models).

It places storages in a real arena, so fragmentation, evictions and search time are those of
the real policy; kernels are not run: their shape rules size the outputs and the cost model
prices them.
"""
import contextlib

from coop._core import Arena
from coop.backends.base import Backend
from coop.budget import parse_budget


class SimBackend(Backend):
    """A budget of bytes with no memory behind it. ideal: memory as a plain sum of sizes, no
    addresses (DTR's own simulator; only policy 'dtr-ideal' takes it)."""

    xp = None

    def __init__(self, budget, alignment=512, ideal=False):
        self.arena = Arena(parse_budget(budget), alignment, ideal=ideal)

    def offset_of(self, array):
        return None

    def array_at(self, offset, nbytes):
        raise TypeError("the simulation backend has no memory behind its arena")

    def placing(self, placement):
        return contextlib.nullcontext(self)

    def install(self):
        pass

    def uninstall(self):
        pass

    def __repr__(self):
        return f"<coop.SimBackend capacity={self.arena.capacity} ideal={self.arena.ideal}>"
