# Moves and making room: included by coop/engine/_engine.pyx, declared in _engine.pxd.
# Uses the records layer and the arena's eviction loop and compaction (coop._core).


cdef class _Room(_Records):
    """The core's callbacks for moving storages (coop's window, compaction), room made for a
    kernel before it runs by moving its inputs, and the retry of a failed first run."""

    cdef int evict(self, Arena arena, vector[int]& victims) except -1:
        """The core's victims (slots): drop each one's memory."""
        cdef int v
        for v in victims:
            self._drop(<int>arena.c_sid(v))
        return 0

    cdef int move(self, Arena arena, int slot, size_t src, size_t dst) except -1:
        """The core moves resident s (coop's window): the executor copies its bytes; the cost
        (bytes times move_rate) is charged as executed cost and advances the clock."""
        cdef int s = <int>arena.c_sid(slot)
        if self.held[s]:
            return 0
        self._arrived(s)
        if not self.executor.relocate(s, <Py_ssize_t>src, <Py_ssize_t>dst):
            return 0
        return self._moved_to(s, dst)

    cdef int _arrived(self, int s) except -1:
        """Resident s is about to be moved: its bytes must be there (the host tier waits for
        a prefetched copy still coming back: _Tier)."""
        return 0

    cdef int _moved_to(self, int s, size_t dst) except -1:
        """s now lives at dst: the copy (bytes times move_rate) is charged as executed cost and
        advances the clock."""
        self.offset[s] = <Py_ssize_t>dst
        self._charge_copy(<double>self.arena.request_size(self.size[s]) * self.move_rate)
        return 1

    cdef int moved(self, Arena arena) except -1:
        self.executor.moved()
        return 0

    cdef int slide(self, Arena arena, int slot, size_t src, size_t dst) except -1:
        """The core compacts a window (c_compact): the executor moves resident s's bytes down
        in place; charged as a move (bytes times move_rate)."""
        cdef int s = <int>arena.c_sid(slot)
        if self.held[s]:
            return 0
        self._arrived(s)
        if not self.executor.slide(s, <Py_ssize_t>src, <Py_ssize_t>dst):
            return 0
        return self._moved_to(s, dst)

    cdef int _make_room(self, int o) except -1:
        """Before recomputing o, when the policy moves: o's evicted outputs' sizes are known and
        no kernel holds its inputs yet, so when one fits no free range, c_make_room makes room
        for them before the kernel starts (while it runs, its inputs are walls)."""
        cdef vector[int] index, storages
        cdef vector[size_t] need
        cdef size_t largest = self.arena.largest_free(), req
        cdef bint short = False
        cdef int s
        self.c_evicted_outputs(o, index, storages)
        for s in storages:
            req = self.arena.request_size(self.size[s])
            need.push_back(req)
            short = short or req > largest
        if short:
            self.c_make_room(o, need)
        return 0

    cdef bint c_make_room(self, int o, vector[size_t]& need) except -1:
        """Room for allocations of the request sizes in need, for op o whose kernel holds
        nothing yet (before a recompute, or a first run aborted by its failed allocation, to be
        run again: docs/core.md, "Moving"): coop's window places each while o's resident inputs
        and outputs may move but not be evicted. The ranges found are freed again at once, for
        the kernel's own allocations. False (nothing lost) when one could not be found; the
        kernel's allocation then searches as it would have. Only when the policy moves."""
        if not self.move_rate < INFINITY:
            return False
        # room is made without the host tier (moves, then compaction): until the tier is open,
        # an offload is the way out of an allocation that fails after everything else,
        # never of room made ahead (docs/core.md, "The host tier")
        cdef bint held = self.arena.offload_held
        self.arena.offload_held = self.arena.offload_last
        try:
            return self._room_for(o, need)
        finally:
            self.arena.offload_held = held

    cdef bint _room_for(self, int o, vector[size_t]& need) except -1:
        """c_make_room's one attempt, offloads counted as the arena says (offload_held)."""
        cdef vector[int] keep            # o's resident inputs and outputs, flags lifted
        cdef vector[int] kept_pins
        cdef vector[unsigned char] kept_ev
        cdef vector[double] kept_off
        cdef vector[Py_ssize_t] taken
        cdef vector[int] outer_kept      # an enclosing call's kept_now, kept_reoffer
        cdef vector[unsigned char] outer_reoffer, reoffer
        cdef bint found = False
        cdef int s, slot, k
        cdef size_t req, total
        cdef Py_ssize_t off
        for s in self.op_in[o]:
            if self.offset[s] >= 0 and not _contains(keep, s):
                keep.push_back(s)
        for s in self.op_out[o]:
            if s >= 0 and self.offset[s] >= 0 and not _contains(keep, s):
                keep.push_back(s)
        for s in keep:
            slot = self.slot[s]
            kept_pins.push_back(self.arena.c_pins(slot))
            kept_ev.push_back(self.arena.c_evictable(slot))
            kept_off.push_back(self.arena.c_offload_cost(slot))
            self.arena.c_set_evictable(slot, False)
            self.arena.c_set_offload(slot, INFINITY)
            self.arena.c_pin(slot, -self.arena.c_pins(slot))
        # while they are kept, a change of their offer (a host copy made or released) waits
        # for the end (_offer): set now, it would let them leave by an offload
        outer_kept.swap(self.kept_now)
        outer_reoffer.swap(self.kept_reoffer)
        self.kept_now = keep
        self.kept_reoffer.assign(keep.size(), 0)
        try:
            for req in need:
                off = self.arena.c_allocate_or_evict(req, self.placement_of[o], self.policy_code,
                                                     self.now, -1, self, self.policy_name)
                taken.push_back(off)
                # the arena's log keeps the evictions and moves, not the reservation: it is
                # no allocation of the kernel's
                self.arena.log.c_unlog_allocation()
            found = True
        except OutOfMemoryError:
            # no window could move o's inputs away (their movers found no destinations):
            # compact one window instead, sliding its movers to its low end (docs/core.md)
            if self.executor.can_slide:
                self._release(taken)
                total = 0
                for req in need:
                    total += req
                found = self.arena.c_compact(total, self.now, self) >= 0
                if found:
                    self.compactions += 1
        finally:
            self._release(taken)
            reoffer.swap(self.kept_reoffer)
            self.kept_now.swap(outer_kept)
            self.kept_reoffer.swap(outer_reoffer)
            for k in range(<int>keep.size()):
                slot = self.slot[keep[k]]
                self.arena.c_pin(slot, kept_pins[k])
                self.arena.c_set_evictable(slot, kept_ev[k])
                self.arena.c_set_offload(slot, kept_off[k])
                if reoffer[k]:
                    self._offer(keep[k])
        if found:
            self.room_made += 1
        return found

    cdef int _release(self, vector[Py_ssize_t]& taken) except -1:
        """Free c_make_room's reservations (not logged: they were not) and clear them."""
        cdef Py_ssize_t off
        cdef bint logging = self.arena.log.c_pause()
        try:
            for off in taken:
                self.arena.c_free(<size_t>off)
        finally:
            self.arena.log.c_resume(logging)
        taken.clear()
        return 0

    cdef bint c_may_retry(self) noexcept:
        """Whether the running first run may be aborted and run again (c_retry)."""
        return self.retries_left > 0 and self.move_rate < INFINITY

    cdef bint c_retry(self, int o, size_t request) except -1:
        """The running first run of o failed to allocate request bytes while its kernel held
        its inputs (walls). Under a policy that moves, and at most twice per first run, the
        kernel is aborted and runs again (True) after c_make_room made room for the request
        with o's inputs movable (docs/core.md, "Moving"); when no room could be made it runs
        once more, failing as it would have. The caller frees what the failed attempt holds
        first.

        The one retry level of coop's for a failed allocation: the first runs that catch
        OutOfMemoryError (c_first_output, the replayer's kernel allocations, the array
        executor's kernels) ask this rule and decide nothing themselves. Below it, CuPy's pool
        collects garbage once before it raises, as every CuPy pool does with or without an
        engine (cycles may hold pieces): that is CuPy's contract, not a rule of coop's."""
        if not self.c_may_retry():
            return False
        self.retries_left -= 1
        cdef vector[size_t] need
        need.push_back(self.arena.request_size(request))
        if not self.c_make_room(o, need):
            self.retries_left = 0
        return True
