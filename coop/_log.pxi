# The allocation log (included by _core.pyx): the recorder the arena writes into as it allocates,
# frees and moves. Owners steer it (pause, restart, drop a reservation) but never write entries.

cdef enum LogCode:
    LOGGED_FREE = -1    # an entry's second number for a free: (offset, LOGGED_FREE)
    LOGGED_MOVE = -2    # ... for a move: (old offset, LOGGED_MOVE, new offset, size, sid)


@cython.final
cdef class AllocLog:
    """[offset, nbytes, offset, -1, ...] while on: see Arena.take_log."""

    cdef inline void c_allocated(self, size_t offset, size_t nbytes) noexcept:
        if self.on:
            self.entries.push_back(<int64_t>offset)
            self.entries.push_back(<int64_t>nbytes)

    cdef inline void c_freed(self, size_t offset) noexcept:
        if self.on:
            self.entries.push_back(<int64_t>offset)
            self.entries.push_back(LOGGED_FREE)

    cdef void c_moved(self, size_t old, size_t new, size_t size, int64_t sid) noexcept:
        """A storage's bytes went from old to new (a window's move or a slide)."""
        if self.on:
            self.entries.push_back(<int64_t>old)
            self.entries.push_back(LOGGED_MOVE)
            self.entries.push_back(<int64_t>new)
            self.entries.push_back(<int64_t>size)
            self.entries.push_back(sid)

    cdef void c_request(self, size_t nbytes) noexcept:
        """Record nbytes as the byte count of the allocation logged last (right after a
        successful allocation, whose entry has the rounded size)."""
        if self.on and not self.entries.empty():
            self.entries[self.entries.size() - 1] = <int64_t>nbytes

    cdef void c_unlog_allocation(self) noexcept:
        """Drop the allocation logged last: a reservation the owner frees again unlogged."""
        if self.on:
            self.entries.pop_back()
            self.entries.pop_back()

    cdef bint c_pause(self) noexcept:
        """Stop recording; whether it was on, for c_resume."""
        cdef bint was = self.on
        self.on = False
        return was

    cdef void c_resume(self, bint on) noexcept:
        self.on = on

    cdef void c_restart(self) noexcept:
        """While on, drop what was recorded (a kernel run again records only its last run)."""
        if self.on:
            self.entries.clear()

    def start(self):
        self.entries.clear()
        self.on = True

    def take(self):
        out = self.entries
        self.entries.clear()
        self.on = False
        return out
