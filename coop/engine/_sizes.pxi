# The sizes-only executor: included by coop/engine/_engine.pyx, declared in _engine.pxd. It uses
# the engine's executors' API only, as every executor does.


cdef class SizeExecutor(Executor):
    """Sizes only (trace replays, the simulation backend): running an op again places its
    evicted outputs; dropping frees pieces; a move is the arena's bookkeeping alone."""

    def __cinit__(self, *args, **kwargs):
        self.can_move = True       # no bytes to copy: a move is the arena's bookkeeping
        self.can_slide = True
        self.can_offload = True    # ... and so is an offload: the host tier counts bytes
        self.can_copy_ahead = True

    cpdef bint offload(self, int s, bint ahead=False) except -1:
        return True

    cpdef int fetch(self, int s, int placement, bint ahead=False) except -1:
        self.engine.c_place(s, placement)
        return 0

    cpdef bint relocate(self, int s, Py_ssize_t src, Py_ssize_t dst) except -1:
        return True

    cpdef bint slide(self, int s, Py_ssize_t src, Py_ssize_t dst) except -1:
        return True

    cpdef int run(self, int o) except -1:
        cdef Engine e = self.engine
        cdef vector[int] placed
        cdef int k, s
        try:
            for k in range(e.c_n_outputs(o)):
                # asked as it goes: placing one output may evict another of o's, resident
                # when the run started (nothing pins it), which is then placed in its turn
                s = e.c_evicted_output(o, k)
                if s >= 0:
                    # pinned until all are placed, as a kernel's outputs are while it runs
                    e.c_place(s, e.c_placement(o))
                    e.c_pin(s)
                    placed.push_back(s)
        except BaseException:
            # one found no room: the run failed, so nothing it placed stays pinned or
            # resident (a failed kernel's outputs do not exist)
            for s in placed:
                e.c_unpin(s, False)
                e.c_unplace(s)
            raise
        for s in placed:
            e.c_unpin(s, False)
        return 0

    cpdef bint drop(self, int s) except -1:
        cdef Engine e = self.engine
        e.arena.c_free(e.c_offset(s))
        return True

    cpdef int forget(self, int s) except -1:
        cdef Engine e = self.engine
        if e.c_offset(s) >= 0:
            e.arena.c_free(e.c_offset(s))
        return 0

    cpdef int copy(self, int dst, int src, int placement, Py_ssize_t release) except -1:
        cdef Engine e = self.engine
        e.c_place(dst, placement)
        if release >= 0:
            e.arena.c_free(release)
        return 0
