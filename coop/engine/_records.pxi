# The engine's records and their lifetime: included by coop/engine/_engine.pyx, declared in
# _engine.pxd. Uses the arena (coop._core) and the executor; nothing above this layer.


cdef class _Records(_Clock):
    """Storage and op records with integer ids, their memory, and their lifetime.

    A storage's record lives while the program holds it (users) or a live op reads it
    (readers); an op's record lives while one of its outputs does. A storage the program
    released loses its memory at once; its record may stay, to recompute others. The methods
    under "executors' API" are what executors call (unchecked: their ids come from the engine).
    """

    # ---- storages and ops -----------------------------------------------------------------------

    cdef int _new_sid(self) except -1:
        cdef int s
        self.n_alive += 1
        if not self.free_sids.empty():
            s = self.free_sids.back()
            self.free_sids.pop_back()
            return s
        s = self.size.size()
        self.size.push_back(0)
        self.slot.push_back(-1)
        self.offset.push_back(-1)
        self.producer.push_back(-1)
        self.index.push_back(0)
        self.users.push_back(0)
        self.alive.push_back(0)
        self.held.push_back(0)
        self.readers.push_back(0)
        self.pins.push_back(0)
        self.frame_pins.push_back(0)
        self.released_pinned.push_back(0)
        self.remade.push_back(0)
        self.consumers.push_back(vector[uint64_t]())
        self.needs.push_back(0)
        self.pending.push_back(0)
        self.temp.push_back(0)
        self.on_host.push_back(0)
        self.ready_at.push_back(0.0)
        self.coming.push_back(0)
        self.out_at.push_back(0.0)
        return s

    cdef int _new_storage(self, int64_t size, int o, int index, double cost,
                          vector[int]& neighbors, bint evictable) except -1:
        cdef int s = self._new_sid()
        self.size[s] = size
        self.alive[s] = 1
        self.producer[s] = o
        self.index[s] = index
        self._register(s, cost, neighbors, evictable)
        return s

    cdef int _register(self, int s, double cost, vector[int]& neighbors, bint evictable) except -1:
        cdef vector[int] slots
        cdef int u
        for u in neighbors:
            # constants never evict: they are nobody's neighbor (no decision changes, and a
            # weight read by thousands of ops stays off their lists)
            if u != s and self.slot[u] >= 0 and self.producer[u] >= 0:
                slots.push_back(self.slot[u])
        self.slot[s] = self.arena.c_add_storage(s, cost, slots, evictable)
        return self._offer(s)

    cdef int _offer(self, int s) except -1:
        """Registered s's way out to the host tier (_Tier: none below it)."""
        return 0

    cdef int _host_release(self, int s) except -1:
        """s's host copy, if any, goes (_Tier: no tier below it)."""
        return 0

    # ---- executors' API ------------------------------------------------------------------------

    cdef inline Py_ssize_t c_offset(self, int s) noexcept:
        """Where s is resident, -1 when it is not."""
        return self.offset[s]

    cdef inline int64_t c_size(self, int s) noexcept:
        return self.size[s]

    cdef inline int c_placement(self, int o) noexcept:
        """The placement class of o's outputs (partitioning decided: c_begin)."""
        return self.placement_of[o]

    cdef inline int c_tag(self, int o) noexcept:
        """The caller's id for o (a program's op index), -1 when none was given."""
        return self.tag[o]

    cdef vector[int] c_inputs(self, int o) noexcept:
        """o's current input storages (in-place ops redirect them)."""
        return self.op_in[o]

    cdef inline int c_n_outputs(self, int o) noexcept:
        return self.op_out[o].size()

    cdef inline int c_evicted_output(self, int o, int k) noexcept:
        """The storage of o's output k if it is live and evicted (running o again must give
        it memory), else -1. An offloaded output stays in the host tier: its copy holds its
        bytes, and one given memory here would be resident with its host copy counted as
        the only one."""
        cdef int s = self.op_out[o][k]
        if s >= 0 and self.alive[s] and self.producer[s] == o and self.offset[s] < 0 \
                and self.on_host[s] != 1:
            return s
        return -1

    cdef int c_evicted_outputs(self, int o, vector[int]& index, vector[int]& storages) except -1:
        """c_evicted_output of each of o's outputs, now: the output index and storage of each
        that has no memory, in output order."""
        cdef int k, s
        index.clear()
        storages.clear()
        for k in range(<int>self.op_out[o].size()):
            s = self.c_evicted_output(o, k)
            if s >= 0:
                index.push_back(k)
                storages.push_back(s)
        return 0

    cdef Py_ssize_t c_allocate(self, int64_t nbytes, int placement) except -2:
        """An anonymous piece of nbytes, evicting as the policy chooses."""
        return self.arena.c_request(<size_t>nbytes, placement)

    cdef int c_place(self, int s, int placement) except -1:
        """Memory for registered, non-resident s, evicting as the policy chooses."""
        cdef size_t nbytes = self.size[s]
        if nbytes > self.arena.capacity:
            self.arena.c_request(nbytes, placement)      # raises the arena's error
        self.offset[s] = self.arena.c_allocate_or_evict(
            self.arena.request_size(nbytes), placement, self.policy_code, self.now,
            self.slot[s], self, self.policy_name)
        return 0

    cdef int c_bind(self, int s, Py_ssize_t off) except -1:
        """Bind the anonymous used piece at off to s."""
        self.arena.c_bind(self.slot[s], off)
        self.offset[s] = off
        return 0

    cdef int c_unplace(self, int s) except -1:
        """The run that placed s failed: its memory goes and s is not resident, as a failed
        kernel's outputs are not (the array executor binds them only once it has run)."""
        return self._drop(s)

    cdef int c_set_cost(self, int o, double cost) except -1:
        """The cost of o's run, known before its first run finishes (a replayed op's)."""
        self.cost[o] = cost
        return 0

    cdef int c_retain(self, int s) except -1:
        """The program took a reference to s."""
        self.users[s] += 1
        return 0

    cdef int c_unref(self, int s) except -1:
        """The program dropped a reference to s; at none, s is released (c_release)."""
        self.users[s] -= 1
        if self.users[s] == 0:
            self.c_release(s)
        return 0

    # ---- memory and op records -------------------------------------------------------------------

    cdef int _drop(self, int s) except -1:
        """Free resident s's memory through the executor; one it cannot free (held by a user's
        array) is held: never evicted again."""
        if self.offset[s] < 0 or self.held[s]:
            return 0
        self._host_release(s)      # evicted, it is recomputed: a cached host copy is no use
        if self.executor.drop(s):
            self.offset[s] = -1
            self.ready_at[s] = 0.0
            return 0
        return self._hold(s)

    cdef int _hold(self, int s) except -1:
        """The executor cannot free s's memory (a user's array holds it): s is held, never
        evicted, moved or offloaded again."""
        self.held[s] = 1
        self.held_count += 1
        self.arena.c_set_evictable(self.slot[s], False)
        self.arena.c_set_movable(self.slot[s], False)
        self.arena.c_set_offload(self.slot[s], INFINITY)
        return 0

    cdef int _new_op(self) except -1:
        cdef int o
        if not self.free_ops.empty():
            o = self.free_ops.back()
            self.free_ops.pop_back()
            return o
        o = self.op_in.size()
        self.op_in.push_back(vector[int]())
        self.op_out.push_back(vector[int]())
        self.live_out.push_back(0)
        self.cost.push_back(0.0)
        self.placement_of.push_back(PLACE_EXPENSIVE)
        self.tag.push_back(-1)
        self.generation.push_back(0)
        self.planned.push_back(0)
        return o

    cdef int _kill_op(self, int o) except -1:
        self.op_in[o].clear()
        self.op_out[o].clear()
        self.live_out[o] = 0
        self.generation[o] += 1
        self.free_ops.push_back(o)
        self.executor.forget_op(o)
        return 0

    cdef int _die(self, int s) except -1:
        """Forget s at once (registered by a first run that failed)."""
        self.alive[s] = 0
        self._host_release(s)
        if self.slot[s] >= 0:
            self.arena.c_remove_storage(self.slot[s])
            self.slot[s] = -1
        self.executor.forget(s)
        self._recycle(s)
        return 0

    cdef void _recycle(self, int s) noexcept:
        self.offset[s] = -1
        self.producer[s] = -1
        self.users[s] = 0
        self.held[s] = 0
        self.readers[s] = 0
        self.pins[s] = 0
        self.frame_pins[s] = 0
        self.released_pinned[s] = 0
        self.remade[s] = 0
        self.on_host[s] = 0
        self.ready_at[s] = 0.0
        self.coming[s] = 0
        self.consumers[s].clear()
        self.free_sids.push_back(s)
        self.n_alive -= 1

    cdef void _link(self, int o) noexcept:
        """o's first run is recorded: it reads its inputs (a live record counts once each)."""
        cdef vector[int] uniq
        _unique_into(self.op_in[o], uniq)
        cdef int s
        cdef uint64_t packed = (<uint64_t>self.generation[o] << 32) | <uint64_t>o
        for s in uniq:
            self.consumers[s].push_back(packed)
            self.readers[s] += 1

    cdef void _live_consumers(self, int s, vector[int]& out) noexcept:
        """Consumers of s whose record lives, pruning dead ones."""
        cdef vector[uint64_t]* cs = &self.consumers[s]
        cdef size_t i, j = 0
        cdef int co
        out.clear()
        for i in range(cs.size()):
            co = <int>(cs[0][i] & 0xffffffff)
            if self.generation[co] == (cs[0][i] >> 32) and self.live_out[co] > 0:
                cs[0][j] = cs[0][i]
                j += 1
                out.push_back(co)
        cs.resize(j)

    # ---- lifetime -------------------------------------------------------------------------------

    cdef int c_release(self, int s) except -1:
        """The program's last reference to s went away: free its memory now (a constant's
        with its record), or at its last unpin when it is pinned; the record stays while a
        live op reads it. The one eager eviction of a released storage: one recomputed later,
        as a dependency, is kept (demoted) like any other."""
        self.releases += 1
        if self.release_hook is not None:
            self.release_hook(s)
        if self.pins[s] > 0:
            self.released_pinned[s] = 1     # c_unpin settles it
        elif self.producer[s] >= 0 and self.offset[s] >= 0 and self.readers[s] > 0:
            self._drop(s)   # the record stays, to recompute its readers; the memory goes now
        # with no reader (nor pin) the record dies below, and its memory with it
        self.work.clear()
        self.work.push_back(s)
        return self._collect()

    cdef int _lose_output(self, int o) except -1:
        """o lost a live output; with none left its record dies, and its inputs each lose a
        reader (put on the work list, to be collected)."""
        cdef vector[int] uniq
        cdef int u
        self.live_out[o] -= 1
        if self.live_out[o] == 0:
            _unique_into(self.op_in[o], uniq)
            for u in uniq:
                self.readers[u] -= 1
                self.work.push_back(u)
            self._kill_op(o)
        return 0

    cdef int _collect(self) except -1:
        """Free the records on the work list that nothing refers to any more, transitively."""
        cdef int s, o
        while not self.work.empty():
            s = self.work.back()
            self.work.pop_back()
            if not self.alive[s] or self.users[s] or self.readers[s] > 0 or self.pins[s] > 0:
                continue
            self.alive[s] = 0
            self._host_release(s)
            if self.slot[s] >= 0:
                self.arena.c_remove_storage(self.slot[s])
                self.slot[s] = -1
            if self.offset[s] >= 0:
                if self.producer[s] < 0:
                    self.const_bytes -= self.arena.request_size(self.size[s])
                self.executor.forget(s)   # no memory, nothing kept: no call
            o = self.producer[s]
            self._recycle(s)
            if o >= 0:
                self.op_out[o][self.index[s]] = -1
                self._lose_output(o)
        return 0

    # ---- the Python API's checks: the vectors are read without bounds checks -------------------

    cdef inline int _storage(self, int s) except -1:
        if s < 0 or s >= <int>self.alive.size() or not self.alive[s]:
            raise ValueError(f"storage {s} does not exist")
        return s

    cdef inline int _op(self, int o) except -1:
        if o < 0 or o >= <int>self.op_in.size():
            raise ValueError(f"op {o} does not exist")
        return o
