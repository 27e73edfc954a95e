# Recomputable in-place: included by coop/engine/_engine.pyx, declared in _engine.pxd.


cdef class _InPlace(_FirstRun):
    """An in-place op's first run: a mutated storage S's old value becomes a new storage V with
    S's old producer, S's readers are redirected to V, and the op becomes S's producer (with
    DTR's rule, or for a constant, V holds a copy instead)."""

    cdef int c_prepare_inplace(self, int o, vector[int]& mutated) except -1:
        """Before an in-place op's first run, decide per mutated input S what becomes of its old
        value (docs/design.md, "In-place: the rules"). DTR's rule (``inplace`` off): always a
        new version (OLD_VERSION: a copy, released after the op; a constant stays one). coop's:
        a constant's old value is copied when a live op reads it (OLD_COPY), else nothing is
        kept (OLD_NONE); a computed S gets a new version, as with DTR's rule, when it has a
        pending reader (a live op that read S) and recomputing the old value (S's producer's
        cost) costs more than copying it (size * copy_cost); else S is overwritten and its old
        value V, a new storage with S's old producer, starts evicted (OLD_RECOMPUTE), in its
        evicted neighbors' class as DTR's released copy would be."""
        cdef int m, s, w, p, mode
        cdef vector[int] neighbors
        cdef vector[int] live_readers
        self._bound(o)     # before a constant's copy counts among the constants
        self.cur_mutated = mutated
        self.cur_created.clear()
        self.cur_mode.clear()
        for m in mutated:
            s = self.op_in[o][m]
            # the host tier's copy of S (kept since S came back) no longer holds S's bytes
            self._host_release(s)
            p = self.producer[s]
            w = -1
            self._live_consumers(s, live_readers)
            if not self.inplace:
                mode = OLD_VERSION
            elif p < 0:
                mode = OLD_NONE if live_readers.empty() else OLD_COPY
            elif not live_readers.empty() and self.cost[p] > self.size[s] * self.copy_cost:
                mode = OLD_VERSION
            else:
                mode = OLD_RECOMPUTE
            if mode != OLD_NONE:
                neighbors.clear()
                if p >= 0:
                    neighbors = self.op_in[p]
                w = self._new_storage(self.size[s], p, self.index[s],
                                      self.arena.c_cost(self.slot[s]), neighbors, p >= 0)
            if mode == OLD_RECOMPUTE:
                # V is S's old value, evicted: it joins its evicted neighbors' class as an
                # evicted copy would (DTR's rule), so what V's recompute needs counts in the c'
                # of the resident storages next to it (S among them)
                self.arena.c_evicted(self.slot[w])
            # recorded before the copy: an abort (the copy ran out of memory) forgets w
            self.cur_created.push_back(w)
            self.cur_mode.push_back(mode)
            if mode != OLD_NONE:
                if mode != OLD_RECOMPUTE:
                    # a copy; a constant's copy is unevictable and goes with the constants
                    self.executor.copy(w, s, PLACE_LOWEST if p < 0 else self.placement_of[o], -1)
                    self.arena.c_touch(self.slot[w], self.now)
                    self.copies += 1
                    if p < 0:
                        self.const_bytes += self.arena.request_size(self.size[w])
        return 0

    cdef void _redirect(self, int s, int w, int skip) noexcept:
        """S's old value is now w: S's producer outputs w, and every live op that read S
        (but skip) reads w instead, its reader count moving with it."""
        cdef uint64_t c
        cdef int co
        if self.producer[s] >= 0:
            self.op_out[self.producer[s]][self.index[s]] = w
        for c in self.consumers[s]:
            co = <int>(c & 0xffffffff)
            if self.generation[co] != (c >> 32) or co == skip:
                continue
            if _replace(self.op_in[co], s, w):
                self.consumers[w].push_back(c)
                if self.live_out[co] > 0:
                    self.readers[s] -= 1
                    self.readers[w] += 1
        self.consumers[s].clear()

    cdef int c_finish_inplace(self, int o) except -1:
        """After an in-place op's first run: redirect readers of each mutated S to its old
        value V, and make o S's producer."""
        cdef int k, m, s, w, j = 0
        cdef int co
        cdef vector[int] neighbors
        for k in range(<int>self.cur_mutated.size()):
            m = self.cur_mutated[k]
            s = self.op_in[o][m]
            w = self.cur_created[k]
            if w >= 0:
                self._redirect(s, w, -1)
                _replace(self.op_in[o], s, w)
            self.op_out[o].push_back(s)
            if self.producer[s] >= 0:
                # S's producer is now o: its neighbors are o's inputs (V among them)
                neighbors.clear()
                for co in self.op_in[o]:
                    if co != s:
                        neighbors.push_back(co)
                self._reregister(s, self.cost[o], neighbors,
                                 self.arena.c_evictable(self.slot[s]), False)
                self.producer[s] = o
                self.index[s] = j
                self.live_out[o] += 1
            j += 1
        if self.live_out[o] > 0:
            self._link(o)
        self._finish_common(o)
        self.work.clear()
        for k in range(<int>self.cur_mode.size()):
            if self.cur_mode[k] == OLD_VERSION:
                # DTR: the name now refers to the new version; the old one lost its only
                # reference: it loses its memory now if it can be recomputed, and its record
                # (a constant's copy too) when nothing reads it
                self._evict_eagerly(self.cur_created[k])
                self.work.push_back(self.cur_created[k])
        self.cur_created.clear()
        self.cur_mutated.clear()
        self.cur_mode.clear()
        return self._collect()

    cdef int c_fail_inplace(self, int o) except -1:
        """An in-place op's kernel failed (or was interrupted) after prepare: it may have
        written part of each mutated S. What was computed from S's old value keeps it: S's
        readers (and S's old producer) move to the old value V, as on success, and S becomes a
        constant holding whatever the kernel left (never recomputed). Then the op aborts."""
        cdef int k, m, s, w, p
        cdef vector[int] none
        self.work.clear()
        for k in range(<int>self.cur_mutated.size()):
            m = self.cur_mutated[k]
            s = self.op_in[o][m]
            w = self.cur_created[k]
            if w < 0:
                continue      # nothing recorded reads S's old value: S just keeps what it holds
            p = self.producer[s]
            self._redirect(s, w, o)
            if p >= 0:
                self.producer[s] = -1
                self.index[s] = 0
                self._reregister(s, 0.0, none, False, False)
                self.const_bytes += self.arena.request_size(self.size[s])
            self.work.push_back(w)     # an old value nothing reads dies below
        self.cur_created.clear()
        self.cur_mutated.clear()
        self.cur_mode.clear()
        self.c_abort(o)
        return self._collect()
