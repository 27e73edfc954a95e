# The logical clock and the counters: included by coop/engine/_engine.pyx, declared in
# _engine.pxd.


cdef class _Clock(Evictor):
    """The logical clock (Evictor.now, which the core reads for staleness), advanced by the
    cost of every op run (recomputes and moves included), and the engine's counters."""

    cdef int _charge_run(self, double c, bint recompute) except -1:
        """An op ran at cost c (again, with recompute): the cost executed and the clock advance;
        Thrash once the cost executed passes thrash_cost (the clock stays)."""
        self.cost_total += c
        if self.thrash_cost > 0.0 and self.cost_total > self.thrash_cost:
            raise Thrash()
        if not recompute:
            self.ops += 1
            self.cost_first += c
        self.now += c
        return 0

    cdef void _charge_copy(self, double c) noexcept:
        """A move's copy at cost c: executed cost, and the clock advances."""
        self.cost_total += c
        self.now += c

    @property
    def clock(self):
        return self.now

    def counters(self):
        """The engine's counters (docs/design.md's metrics come from these and the arena's)."""
        return {"ops": self.ops, "recomputes": self.recomputes, "cost_first": self.cost_first,
                "cost_total": self.cost_total, "eager_evictions": self.eager_evictions,
                "demotions": self.demotions, "releases": self.releases,
                "constants_placed": self.constants_placed,
                "held": self.held_count, "clock": self.now, "lower_bound_bytes": self.bound_bytes,
                "offload_floor_bytes": self.floor_bytes, "room_made": self.room_made,
                "compactions": self.compactions}
