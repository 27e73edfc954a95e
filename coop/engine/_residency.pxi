# Residency: included by coop/engine/_engine.pyx, declared in _engine.pxd.


cdef class _Residency(_Tier):
    """Pins, iterative rematerialization (no recursion limit), demotion of what was recomputed
    only as a dependency, eager eviction of released storages (at release, or at the end of
    the rematerialization that first recomputed them), and materialize (a storage becomes a
    constant)."""

    cdef void c_pin(self, int s) noexcept:
        """Pin s: the policy may not evict it (it may still move) until c_unpin."""
        self.arena.c_pin(self.slot[s], 1)
        self.pins[s] += 1

    cdef int c_unpin(self, int s, bint release) except -1:
        """Unpin s; with release, a storage the program released while it was pinned is
        settled at its last unpin as c_release would have: its memory goes, and its record
        too when no live op reads it. Without (an error's unwinding: the traceback may still
        refer to the kernel's arrays) it stays, as a storage recomputed as a dependency does."""
        self.arena.c_pin(self.slot[s], -1)
        self.pins[s] -= 1
        if release and self.pins[s] == 0 and self.released_pinned[s]:
            self.released_pinned[s] = 0
            if self.readers[s] == 0:
                self.work.push_back(s)     # the caller's pending work, if any, is done too
                self._collect()
            elif self.producer[s] >= 0:
                self._evict_eagerly(s)
        return 0

    cdef void _frame_pin(self, int s) noexcept:
        """Pin s for a pending frame of _rematerialize (counted in frame_pins: oom_note)."""
        self.c_pin(s)
        self.frame_pins[s] += 1

    cdef int _frame_unpin(self, int s, bint release) except -1:
        self.frame_pins[s] -= 1
        return self.c_unpin(s, release)

    cdef int _evict_eagerly(self, int s) except -1:
        if self.offset[s] >= 0 and self.pins[s] == 0 and not self.held[s] \
                and self.arena.c_evictable(self.slot[s]):
            self._drop(s)
            if self.offset[s] < 0:
                self.eager_evictions += 1
        return 0

    cdef int c_make_resident(self, int s) except -1:
        """Recompute s if it is evicted (pin it first)."""
        cdef vector[int] one
        one.push_back(s)
        return self._make_resident(one)

    cdef int c_keep_resident(self, vector[int]& targets) except -1:
        """Each of targets, in order, is made resident and pinned (a recompute may be
        needed), or stays in the host tier, where its bytes are safe: a replay's end, for the
        values the program still holds. With the tier, when no room can be made for one, one
        kept before it goes to the host tier (_kept_to_host) and the room is sought again."""
        cdef vector[int] kept
        cdef int s
        for s in targets:
            if self.on_host[s]:
                continue
            self.c_pin(s)
            while True:
                try:
                    self.c_make_resident(s)
                    break
                except OutOfMemoryError:
                    if not self._kept_to_host(kept):
                        raise
            kept.push_back(s)
        return 0

    cdef bint _kept_to_host(self, vector[int]& kept) except -1:
        """c_keep_resident found no room: of the storages it kept, the largest that can go to
        the host tier goes there, unpinned (ties: the first kept); False when none can."""
        cdef vector[unsigned char] tried
        cdef size_t k, best
        cdef int s
        tried.assign(kept.size(), 0)
        while True:
            best = kept.size()
            for k in range(kept.size()):
                if not tried[k] and self.offset[kept[k]] >= 0 and (
                        best == kept.size() or self.size[kept[k]] > self.size[kept[best]]):
                    best = k
            if best == kept.size():
                return False
            tried[best] = 1
            s = kept[best]
            self.c_unpin(s, False)
            if self._to_host(s):
                kept.erase(kept.begin() + best)
                return True
            self.c_pin(s)

    cdef inline bint c_resident(self, int s) noexcept:
        return self.offset[s] >= 0

    cdef int _make_resident(self, vector[int]& targets) except -1:
        """Bring each target back: copied from the host tier if it is there, else recomputed;
        the clock waits for what is left of a prefetched copy."""
        cdef int target
        for target in targets:
            if self.offset[target] < 0:
                if self.on_host[target]:
                    self.c_fetch(target)
                else:
                    self._rematerialize(target, targets)
        if self.offloading:
            for target in targets:
                self.c_await(target)
        return 0

    cdef int _rematerialize(self, int target, vector[int]& targets) except -1:
        """Recompute target, iteratively: pin each pending op's inputs as they become
        resident, unpin them when it has run; a dependency recomputed only for this call is
        demoted after its last pending reader (_demote), and a released one recomputed for
        the first time since its release is also evicted when the whole call ends, if it is
        still resident and unpinned. Evicting every released dependency as soon as its reader
        has run recomputes a shared ancestor once per path through the graph's fan-outs
        (exponentially many), and a value another path of the same call reads next (a
        sibling's input) once more per call; keeping every one past the call costs more at
        tight budgets than it saves where no path shares it (docs/benchmarks.md).

        A dependency's readers are counted over every op the call will run, before it starts
        (_plan), not only over the frames pushed so far: a frame's later input can read again
        what an earlier input's chain recomputed (a residual block's skip connection), and a
        dependency demoted before that reading was the first victim, evicted, and its chain
        recomputed once more per such reading. Once no pushed frame reads it but a planned
        reader is still to run, it is ranked as if untouched since time 0 (a mild demotion:
        kept resident while a cheaper victim exists, rather than holding its place at the
        clock's now and pushing out values the call will reach later). An error leaves no
        dependency pinned."""
        cdef vector[int] f_storage, f_next, f_start, f_len
        cdef vector[int] f_inputs       # the frames' unique inputs, concatenated
        cdef vector[int] touched
        cdef vector[int] first_made     # released, recomputed for the first time: evicted at
                                        # the end (a storage may appear more than once)
        cdef vector[int] planned_ops
        cdef int top, s, i, dep, k
        self._plan(target, touched, planned_ops)
        self.remat_planned += planned_ops.size()
        self._push_frame(target, f_storage, f_next, f_start, f_len, f_inputs, touched)
        try:
            while not f_storage.empty():
                top = f_storage.size() - 1
                s = f_storage[top]
                i = f_next[top]
                if i < f_len[top]:
                    dep = f_inputs[f_start[top] + i]
                    if self.offset[dep] < 0 and self.on_host[dep]:
                        self.c_fetch(dep)
                    if self.offset[dep] < 0:
                        if self.producer[dep] < 0:
                            raise RuntimeError(f"storage {dep} was lost: it has no producer")
                        self._push_frame(dep, f_storage, f_next, f_start, f_len, f_inputs,
                                         touched)
                        self.temp[dep] = 1
                        continue
                    self._frame_pin(dep)
                    if self.offloading:
                        self.c_await(dep)
                    f_next[top] = i + 1
                    continue
                if self.offset[s] < 0:
                    self._recompute(self.producer[s])
                    if not self.users[s] and self.remade[s] < 2:
                        self.remade[s] += 1
                    if self.offset[s] < 0:
                        raise RuntimeError(f"recomputing op {self.producer[s]} did not produce "
                                           f"storage {s}")
                for k in range(f_start[top], f_start[top] + f_len[top]):
                    dep = f_inputs[k]
                    self._frame_unpin(dep, True)
                    # released, and recomputed once since: evicted when the call ends (a
                    # second recompute keeps it: the graph reads it on several paths)
                    if self.remade[dep] == 1:
                        first_made.push_back(dep)
                for k in range(f_start[top], f_start[top] + f_len[top]):
                    dep = f_inputs[k]
                    self.needs[dep] -= 1
                    self.pending[dep] -= 1
                    # a dependency recomputed for this call, or one the program released
                    # (kept from an earlier call and read again), is demoted once read
                    if self.needs[dep] == 0 and not _contains(targets, dep) and (self.temp[dep]
                            or (not self.users[dep] and self.producer[dep] >= 0)):
                        self._demote(dep)
                    elif self.pending[dep] == 0 and self.temp[dep] \
                            and self.offset[dep] >= 0 and not _contains(targets, dep):
                        # read again later in this call, by a frame not pushed yet
                        self.arena.c_touch(self.slot[dep], 0.0)
                f_inputs.resize(f_start[top])
                self.remat_depth -= 1
                f_storage.pop_back()
                f_next.pop_back()
                f_start.pop_back()
                f_len.pop_back()
            for dep in first_made:
                if self.remade[dep] == 1:       # _evict_eagerly skips the pinned and the gone
                    self._evict_eagerly(dep)
        except BaseException:
            # unpin what the pending frames pinned, without evicting: the traceback may still
            # refer to the failed kernel's arrays
            for top in range(<int>f_storage.size()):
                for k in range(f_start[top], f_start[top] + f_next[top]):
                    self._frame_unpin(f_inputs[k], False)
            raise
        finally:
            self.remat_depth -= f_storage.size()
            self.remat_planned -= planned_ops.size()
            for s in touched:
                self.needs[s] = 0
                self.pending[s] = 0
                self.temp[s] = 0
            for k in planned_ops:
                self.planned[k] = 0
        return 0

    cdef str oom_note(self, Arena arena):
        """Inside a rematerialization, what its pending frames hold: their depth, the ops the
        calls under way planned, and the pieces and bytes their inputs keep pinned until the
        ops that read them run (kept as oom_recompute)."""
        note = _Tier.oom_note(self, arena)
        if self.remat_depth == 0:
            self.oom_recompute = None
            return note
        cdef int s, pieces = 0
        cdef long long nbytes = 0
        for s in range(<int>self.alive.size()):
            if self.alive[s] and self.frame_pins[s] > 0 and self.offset[s] >= 0:
                pieces += 1
                nbytes += self.arena.request_size(self.size[s])
        self.oom_recompute = (self.remat_depth, self.remat_planned, pieces, nbytes)
        return (f"{note}; a rematerialization is under way, {self.remat_depth:,} "
                f"{'op' if self.remat_depth == 1 else 'ops'} deep of the {self.remat_planned:,} "
                f"it planned: the inputs its pending ops read are {pieces:,} of the pinned "
                f"pieces, {nbytes:,} bytes")

    cdef void _plan(self, int target, vector[int]& touched, vector[int]& planned_ops) noexcept:
        """Count, before _rematerialize starts, each storage's readings among the ops it will
        run: the producers of target and of every evicted storage (not in the host tier) they
        read, transitively, each op once (planned). Their frames' first pushes then count
        nothing more (_push_frame); a frame pushed again (its storage evicted during the call)
        counts its inputs again, as it reads them again."""
        cdef vector[int] stack, uniq
        cdef int s, o, dep
        stack.push_back(target)
        while not stack.empty():
            s = stack.back()
            stack.pop_back()
            o = self.producer[s]
            if o < 0 or self.planned[o]:
                continue
            self.planned[o] = 1
            planned_ops.push_back(o)
            _unique_into(self.op_in[o], uniq)
            for dep in uniq:
                self.needs[dep] += 1
                touched.push_back(dep)
                if self.offset[dep] < 0 and not self.on_host[dep] and self.producer[dep] >= 0:
                    stack.push_back(dep)

    cdef void _push_frame(self, int s, vector[int]& f_storage, vector[int]& f_next,
                          vector[int]& f_start, vector[int]& f_len, vector[int]& f_inputs,
                          vector[int]& touched) noexcept:
        cdef vector[int] uniq
        cdef int o = self.producer[s]
        cdef bint counted = self.planned[o]
        self.remat_depth += 1
        self.planned[o] = 0           # counted once: a second push reads its inputs again
        _unique_into(self.op_in[o], uniq)
        f_storage.push_back(s)
        f_next.push_back(0)
        f_start.push_back(f_inputs.size())
        f_len.push_back(uniq.size())
        cdef int dep
        for dep in uniq:
            f_inputs.push_back(dep)
            self.pending[dep] += 1
            touched.push_back(dep)
            if not counted:
                self.needs[dep] += 1
        touched.push_back(s)

    cdef void _demote(self, int s) noexcept:
        """Keep resident s, demoted until read again: one the program holds (and will read) as
        if untouched since the start; one it released (only recomputes read it) as every
        policy's first victim (Arena.c_demote)."""
        if self.offset[s] >= 0:
            if self.users[s]:
                self.arena.c_touch(self.slot[s], 0.0)
            else:
                self.arena.c_demote(self.slot[s])
            self.demotions += 1

    cdef int _recompute(self, int o) except -1:
        """Run o again (the executor gives its live evicted outputs memory)."""
        if self.move_rate < INFINITY:
            self._make_room(o)
        self.executor.run(o)
        self.recomputes += 1
        self._account(o, True)
        return 0

    cdef int _account(self, int o, bint recompute) except -1:
        """o ran (again, with recompute): its cost is charged and the clock advances; its
        resident inputs and outputs are touched now."""
        cdef int s
        self._charge_run(self.cost[o], recompute)
        for s in self.op_in[o]:
            if self.offset[s] >= 0:
                self.arena.c_touch(self.slot[s], self.now)
        for s in self.op_out[o]:
            if s >= 0 and self.alive[s] and self.offset[s] >= 0:
                self.arena.c_touch(self.slot[s], self.now)
        if self.offloading:
            self.c_copy_ahead()
        return 0

    cdef int c_access(self, int s) except -1:
        """The program reads s: it is made resident and touched now."""
        self.c_pin(s)
        try:
            self.c_make_resident(s)
            self.arena.c_touch(self.slot[s], self.now)
        finally:
            self.c_unpin(s, True)
        return 0

    cdef int c_materialize(self, int s, bint settle) except -1:
        """s becomes a constant (resident, unevictable, no producer); its producer's record may
        die, and what only it kept alive. settle: s is made resident first if evicted, and
        then settles at the low end; else only a resident s changes, and stays where it is (an
        evicted one keeps its record, to be recomputed)."""
        cdef int o = self.producer[s]
        cdef vector[int] none
        if o < 0 or (not settle and self.offset[s] < 0):
            return 0
        self.c_pin(s)
        try:
            self.c_make_resident(s)
        finally:
            self.c_unpin(s, True)
        # the producer's record goes first (what it alone kept alive is freed), then s settles
        self.op_out[o][self.index[s]] = -1
        self.producer[s] = -1
        self.index[s] = 0
        self.work.clear()
        self._lose_output(o)
        self._collect()
        self._reregister(s, 0.0, none, False, settle)
        self.const_bytes += self.arena.request_size(self.size[s])
        if settle:
            # one made a constant where it lies (a backward pass's root, or the gradients on
            # their way down one that updates inside it) is consumed within a few ops: a copy
            # of it out ahead would only load the link
            self._pool_constant(s)
        return 0

    cdef int _reregister(self, int s, double cost, vector[int]& neighbors, bint evictable,
                         bint settle) except -1:
        """Register resident s anew (a new producer, or none: a constant), keeping its memory
        and pins; settling a new constant, move it (a copy) to the lowest free range that holds
        it when that lies below (never evicting for it)."""
        cdef Py_ssize_t off = self.offset[s], lowest = -1
        cdef int pins = self.arena.c_pins(self.slot[s])
        self.arena.c_remove_storage(self.slot[s])
        self.slot[s] = -1
        self.offset[s] = -1
        self._register(s, cost, neighbors, evictable)
        if settle:
            lowest = self.arena.c_lowest_fit(self.arena.request_size(self.size[s]))
        if 0 <= lowest < off:
            self.executor.copy(s, s, PLACE_LOWEST, off)
            self.constants_placed += 1
        else:
            self.c_bind(s, off)
        self.arena.c_pin(self.slot[s], pins)
        return 0

    cdef int c_prefetch_after_next(self, vector[int]& reads, vector[int]& wanted) except -1:
        """The host tier's room made ahead (replays and live runs alike): the storages in
        wanted (the op after next's inputs) that wait in the tier come back now, room made for
        them where no free range holds them (c_prefetch_room), so that their copies run under
        the next op; meanwhile every resident storage in reads (what the next two ops read)
        and each one brought back stays pinned, so that no choice takes it. Ids that are not
        alive (a live run's previous step may name dead ones) are skipped."""
        cdef vector[int] pinned
        cdef int s
        try:
            for s in reads:
                if 0 <= s < <int>self.alive.size() and self.alive[s] and self.offset[s] >= 0:
                    self.c_pin(s)
                    pinned.push_back(s)
            for s in wanted:
                if 0 <= s < <int>self.alive.size() and self.alive[s] and self.c_prefetch_room(s):
                    self.c_pin(s)
                    pinned.push_back(s)
        finally:
            for s in pinned:
                self.c_unpin(s, True)
        return 0

    cdef int c_step_prefetch(self) except -1:
        """A live run's op finished: the constants the next `lookahead` ops of the previous
        step read (parameters and optimizer state are the same storages each step), where they
        wait in the host tier, start coming back (c_prefetch: into free ranges only); with a
        lookahead of two or more, those of the op after next first, with room made for them
        (c_prefetch_after_next: a live run knows only the constants the next two ops read)."""
        cdef size_t j, n = self.cur_reads.size()
        cdef int s
        cdef vector[int] reads
        if self.lookahead >= 2 and n + 1 < self.prev_reads.size():
            reads = self.prev_reads[n]
            reads.insert(reads.end(), self.prev_reads[n + 1].begin(), self.prev_reads[n + 1].end())
            self.c_prefetch_after_next(reads, self.prev_reads[n + 1])
        for j in range(n, min(n + <size_t>self.lookahead, self.prev_reads.size())):
            for s in self.prev_reads[j]:
                if s < <int>self.alive.size() and self.alive[s] and self.on_host[s] == 1:
                    self.c_prefetch(s)
        return 0
