# First runs: included by coop/engine/_engine.pyx, declared in _engine.pxd.


cdef class _FirstRun(_Residency):
    """An op's first run: its inputs pinned and made resident (c_begin), its outputs recorded
    (c_output, c_first_output, c_alias), then recorded (c_finish) or forgotten (c_abort).
    Constants are recorded here too (c_constant)."""

    cdef int c_constant(self, int64_t size, Py_ssize_t off) except -1:
        """A constant of size bytes: at off (an anonymous piece), or placed at the low end; or,
        in a run that stands for a later training step (its tier opened at the start for
        constants: open_tier) before its first op, in the host tier when no free range holds
        it (_constant_on_host)."""
        cdef vector[int] none
        cdef int s
        if off < 0 and self.tier_constants and self.ops == 0 \
                and self.arena.largest_free() < self.arena.request_size(size):
            s = self._constant_on_host(size)
            if s >= 0:
                return s
        s = self._new_storage(size, -1, 0, 0.0, none, False)
        try:
            if off >= 0:
                self.c_bind(s, off)
            else:
                self.c_place(s, PLACE_LOWEST)
        except BaseException:
            self._die(s)
            raise
        self.const_bytes += self.arena.request_size(size)
        self._pool_constant(s)
        return s

    cdef int c_begin(self, vector[int]& inputs, int placement, int tag) except -1:
        """A first run starts: the op's inputs are pinned and made resident. Returns the op."""
        cdef int s
        if self.cur_op >= 0:
            raise RuntimeError("coop: an op started while another one was running (a kernel "
                               "called coop.apply?); kernels must be plain array functions")
        for s in inputs:
            if s < 0 or s >= <int>self.alive.size() or not self.alive[s]:
                raise ValueError(f"input storage {s} does not exist")
        cdef int o = self._new_op()
        self.retries_left = 2
        self.op_in[o] = inputs
        self.cost[o] = 0.0
        # partitioning is decided here, once, for the first run and every recompute: without
        # it every output is placed EXPENSIVE (the low end); LOWEST (constants' copies) stays
        self.placement_of[o] = placement if self.partition or placement == PLACE_LOWEST \
            else PLACE_EXPENSIVE
        self.tag[o] = tag
        _unique_into(inputs, self.cur_uniq)
        for s in self.cur_uniq:
            self.c_pin(s)
        if self.step_prefetch:
            self.c_step_reads(self.cur_uniq)
        self.cur_op = o
        try:
            self._make_resident(self.cur_uniq)
        except BaseException:
            self.c_abort(o)
            raise
        return o

    cdef int c_output(self, int o, int64_t nbytes, Py_ssize_t off) except -1:
        """A new output of the running op o: bound at off, or (off < 0) placed now. It stays
        pinned until c_finish, as a kernel's outputs are while it runs."""
        cdef int s = self._new_storage(nbytes, o, self.op_out[o].size(), self.cost[o],
                                       self.op_in[o], True)
        self.op_out[o].push_back(s)
        self.live_out[o] += 1
        self.cur_placed.push_back(s)
        try:
            if off >= 0:
                self.c_bind(s, off)
            else:
                self.c_place(s, self.placement_of[o])
        except BaseException:
            # a failed output leaves no trace: the op may still abort, or run again
            self.op_out[o].pop_back()
            self.live_out[o] -= 1
            self.cur_placed.pop_back()
            self._die(s)
            raise
        self.c_pin(s)
        return s

    cdef int c_first_output(self, int o, int64_t nbytes) except -1:
        """c_output placed now, for a kernel that allocates its outputs before any work (a
        simulated or replayed op): a failed allocation may run the kernel again (c_retry). While
        it may, the host tier waits: until the tier is open, it is tried once everything else has
        failed, room made for the request with the kernel's inputs movable and offloads counted,
        then the allocation once more."""
        cdef bint held = self.arena.offload_held
        cdef bint tier_tried = False
        cdef vector[size_t] need
        while True:
            self.arena.offload_held = held or self.c_may_retry()
            try:
                return self.c_output(o, nbytes, -1)
            except OutOfMemoryError as err:
                self.arena.offload_held = held
                if self.c_retry(o, err.request):
                    continue
                if held or tier_tried or not self.offloading or not self.move_rate < INFINITY \
                        or not (self.arena.offload_last or self.tier_constants):
                    raise
                tier_tried = True
                need.clear()
                need.push_back(self.arena.request_size(err.request))
                self._room_for(o, need)
            finally:
                self.arena.offload_held = held

    cdef int c_alias(self, int o) except -1:
        """An output of o that views one of its inputs (no new memory)."""
        self.op_out[o].push_back(-1)
        return 0

    cdef int _finish_common(self, int o) except -1:
        cdef int s
        cdef vector[int] through      # pinned through the step's prefetch
        cdef bint prefetch
        self._account(o, False)
        self.cur_op = -1
        # (with nothing in the host tier, the prefetch has nothing to bring back)
        prefetch = self.step_prefetch and self.host_bytes > 0
        if prefetch:
            # the op's inputs and outputs stay pinned through c_step_prefetch: the executor
            # stores the outputs' arrays only once the engine has finished the op, and until
            # then they may be views of its inputs, so room made for a prefetch must take none
            # of them (an array not stored cannot be dropped, one still viewed not freed)
            for s in self.cur_uniq:
                if self.offset[s] >= 0:
                    self.c_pin(s)
                    through.push_back(s)
            if self.live_out[o]:
                for s in self.op_out[o]:
                    if s >= 0 and self.alive[s] and self.offset[s] >= 0 \
                            and not _contains(through, s):
                        self.c_pin(s)
                        through.push_back(s)
        for s in self.cur_uniq:
            self.c_unpin(s, True)
        self.cur_uniq.clear()
        if self.live_out[o] == 0:
            self._kill_op(o)     # an op of views only leaves no record
        if prefetch:
            try:
                self.c_step_prefetch()
            finally:
                for s in through:
                    self.c_unpin(s, True)
        return 0

    cdef int c_finish(self, int o) except -1:
        """The running op's outputs are all known: record it, account it, unpin its inputs."""
        cdef int s
        for s in self.cur_placed:
            self.c_unpin(s, False)
        self.cur_placed.clear()
        self._bound(o)
        if self.live_out[o]:
            self._link(o)
        return self._finish_common(o)

    cdef int c_abort(self, int o) except -1:
        """The running op failed: its inputs are unpinned (and released as on success), the
        outputs registered so far are forgotten, and nothing else changes."""
        cdef int s
        for s in self.cur_placed:
            self.c_unpin(s, False)
        for s in self.cur_placed:
            self._die(s)
        self.cur_placed.clear()
        for s in self.cur_created:
            if s >= 0:
                self._die(s)
        self.cur_created.clear()
        self.cur_mode.clear()
        self.cur_op = -1
        for s in self.cur_uniq:
            self.c_unpin(s, True)
        self.cur_uniq.clear()
        self._kill_op(o)
        return 0

    cdef void _bound(self, int o) noexcept:
        """The lower bound of a budget and the offload floor (docs/design.md), per op: the
        op's inputs and its outputs, with every live constant (the bound: nothing recomputes
        a constant) or with only the constants the op reads (the floor: the others could
        wait in host memory)."""
        cdef int64_t io = 0, read = 0, n
        cdef int s
        for s in self.cur_uniq:
            n = self.arena.request_size(self.size[s])
            if self.producer[s] >= 0:
                io += n
            else:
                read += n
        for s in self.op_out[o]:
            if s >= 0:
                io += self.arena.request_size(self.size[s])
        if io + self.const_bytes > self.bound_bytes:
            self.bound_bytes = io + self.const_bytes
        if io + read > self.floor_bytes:
            self.floor_bytes = io + read

    cdef inline int _running(self, int o) except -1:
        if o < 0 or o != self.cur_op:
            raise ValueError(f"op {o} is not the op running now ({self.cur_op})")
        return o
