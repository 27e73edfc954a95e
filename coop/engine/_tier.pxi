# The host tier: included by coop/engine/_engine.pyx, declared in _engine.pxd. Uses the room
# layer (the core's callbacks) and the records; the residency layer above brings storages back.


cdef class _Tier(_Room):
    """A second tier of memory outside the arena (the host's, pinned on CuPy): a storage may
    leave a window by an offload (its bytes copied out, then its piece freed) instead of being
    evicted or moved, and comes back by a copy (c_fetch), on demand or ahead of its use
    (c_prefetch). The window prices an offload on its one scale (docs/core.md, "The host
    tier"): the copy out and the copy back, bytes times d2h_rate + h2d_rate, over staleness.

    The link is modelled with one copy engine per direction: a copy starts when its engine is
    free, and the clock waits for what it cannot hide (copy_exposed, charged as executed cost):
    all of a copy out made when the room is needed (the range it frees is reused at once) and
    of a copy back on demand; of a copy out ahead (c_copy_ahead) or a prefetched copy back only
    what is left of it when its range is freed or its reader starts (c_await).

    A storage brought back keeps its host copy (on_host 2: cached) until its bytes change (an
    in-place op mutates it: c_prepare_inplace) or the tier needs the room: leaving again then
    costs no copy out, and the window prices it at the copy back alone. Parameters, optimizer
    state and kept gradients are read many times and written once per step: their copies out
    happen once."""

    cdef int _offer(self, int s) except -1:
        """s is registered (or its host copy changed): with the tier on and s not held by a
        user's array, it may leave by an offload at the copies' cost; with a cached host copy,
        at the copy back's alone. While the tier takes constants only (tier_constants), only a
        constant with a cached host copy is offered."""
        cdef size_t k
        for k in range(self.kept_now.size()):
            if self.kept_now[k] == s:       # a kernel's, kept while room is made for it
                self.kept_reoffer[k] = 1
                return 0
        if self.offloading and not self.held[s] and self.slot[s] >= 0 \
                and not (self.tier_constants and (self.producer[s] >= 0 or self.on_host[s] != 2)):
            self.arena.c_set_offload(self.slot[s], self._copies(s))
        return 0

    cdef double _copies(self, int s) noexcept:
        """What s's offload costs: its copy out and back, or with a cached host copy the copy
        back alone; while a copy back ahead into it is still coming, also what is left of that
        copy, which its piece waits for before it can be reused (_leave)."""
        cdef double wait = self.ready_at[s] - self.now if self.coming[s] else 0.0
        cdef double out = self.out_at[s] - self.now
        if wait < 0.0:
            wait = 0.0
        if out > 0.0:
            wait += out
        return <double>self.arena.request_size(self.size[s]) * (
            self.h2d_rate if self.on_host[s] == 2 else self.d2h_rate + self.h2d_rate) + wait

    cdef bint _ref_running(self) noexcept:
        """A reference is known and a position in it is running."""
        return self.ref_pos >= 0 and <size_t>self.ref_pos + 1 < self.ref_time.size()

    cdef void _ref_list(self, int s) noexcept:
        """s has reads in the reference: listed once in ref_known."""
        if not self.ref_listed[s]:
            self.ref_listed[s] = 1
            self.ref_known.push_back(s)

    cdef str oom_note(self, Arena arena):
        """The host tier full: the constants it refused, and the fix."""
        if not self.offloading or self.host_refusals == 0:
            return ""
        refused = (f"has refused {self.host_refusals:,} "
                   f"{'constant, which stays' if self.host_refusals == 1 else 'constants, which stay'}")
        if self.host_failures:
            return (f"; the host tier holds {self.host_bytes:,} bytes and {refused}: the host "
                    f"had no memory for {self.host_failures:,} "
                    f"{'copy' if self.host_failures == 1 else 'copies'} (free host memory, or "
                    f"give the runtime a host_budget the host can pin)")
        return (f"; the host tier holds {self.host_bytes:,} of its {self.host_budget:,} "
                f"bytes and {refused} (raise host_budget)")

    cdef bint widen(self, Arena arena) except -1:
        """No choice makes room with the cached constants alone in the tier (opened at the
        start for them: Engine.open_tier): from now on every storage may leave by an offload,
        as after a first blocked choice. A pinned storage is not offered: it is a kernel's
        input or output (held, or lifted to move while room is made for the kernel:
        _room_for), which may not leave by an offload. True when it offered more (once)."""
        if not (self.offloading and self.tier_constants):
            return False
        self.tier_constants = False
        cdef int s
        for s in range(<int>self.alive.size()):
            if self.alive[s] and self.offset[s] >= 0 and self.pins[s] == 0:
                self._offer(s)
        return True

    cdef int evict(self, Arena arena, vector[int]& victims) except -1:
        """The core's victims (slots): each leaves by the way the window counted for it, an
        offload where that was the cheaper (Arena.c_offload_wins), else eviction; one whose
        host copy is cached leaves by an offload always (it copies nothing). The first choice
        that needed offloads opens the tier for good (Arena.c_count_offloads)."""
        cdef int v, s
        if self.offloading and arena.offload_taken:
            # the tier was needed: from now on every choice counts offloads, each piece
            # leaving by its cheapest way (the budget is below what the device alone holds)
            arena.c_count_offloads(True)
        for v in victims:
            s = <int>arena.c_sid(v)
            if self.offloading and (self.on_host[s] == 2 or arena.c_offload_wins(v)):
                self._offload(s)
            else:
                self._drop(s)
        return 0

    cdef int _offload(self, int s) except -1:
        """Copy resident s out to the host tier and free its piece. When the tier has no room
        (its budget, or the host's memory: HostMemoryError): a recomputable s is evicted
        instead; a constant is refused (it stays, never to be offloaded again) once no
        recomputable copy can be dropped for it. One the executor cannot copy (its memory held
        by a user's array) is held, as _drop holds it."""
        cdef int64_t need = self.arena.request_size(self.size[s])
        cdef bint copied
        if self.offset[s] < 0 or self.held[s]:
            return 0
        if self.on_host[s] == 2:
            # its host copy holds its bytes: the piece is freed, nothing is copied (the clock
            # waits for what is left of a copy out ahead); unless a user's array holds it
            if not self.executor.can_drop(s):
                self._host_release(s)
                return self._hold(s)
            self._wait_hidden(self.out_at[s])
            self.out_at[s] = 0.0
            return self._leave(s)
        if not self._host_room(need, self.producer[s] < 0):
            return self._no_host_room(s)
        try:
            copied = self.executor.offload(s)
        except HostMemoryError:
            # the host could not give the memory (CuPy: cudaHostAlloc failed): a full tier
            self.host_failures += 1
            return self._no_host_room(s)
        if not copied:
            return self._hold(s)
        # the copy out: the freed range is reused at once, so the clock waits for all of it
        self._wait(self._copy_out(s, need))
        return self._leave(s)

    cdef bint _to_host(self, int s) except -1:
        """Send resident s, unpinned, to the host tier now, where its bytes are safe (room for
        a value kept at a replay's end: c_keep_resident): True when it went; False without
        the tier, when a user's array holds it, or when the host tier has no room without
        dropping a copy that something else needs."""
        if not self.offloading or self.offset[s] < 0 or self.held[s] \
                or not self._host_room(self.arena.request_size(self.size[s]), False):
            return False
        self._offload(s)
        return self.offset[s] < 0

    cdef int _no_host_room(self, int s) except -1:
        """The host tier has no room for resident s: a recomputable s is evicted instead, a
        constant is refused (it stays, never offered again)."""
        if self.producer[s] >= 0:
            return self._drop(s)
        self.arena.c_set_offload(self.slot[s], INFINITY)
        self.host_refusals += 1
        return 0

    cdef int _constant_on_host(self, int64_t size) except -2:
        """A constant that a later training step starts with in the host tier (c_constant):
        registered there, not resident, nothing copied nor charged (the step before copied it
        out, as this step's own copies out stand for the next one's). Sizes only (replays and
        simulations, SizeExecutor: a backend with bytes has the constant's in the arena);
        -1 (nothing registered) otherwise, or when the host tier has no room for it."""
        cdef int64_t need = self.arena.request_size(size)
        cdef vector[int] none
        if not (self.offloading and isinstance(self.executor, SizeExecutor)) \
                or not self._host_room(need, True):
            return -1
        cdef int s = self._new_storage(size, -1, 0, 0.0, none, False)
        self.on_host[s] = 1
        self.host_bytes += need
        if self.host_bytes > self.host_peak:
            self.host_peak = self.host_bytes
        self.host_fifo.push_back(s)
        self.const_bytes += need
        self.constants_on_host += 1
        self._pool_constant(s)
        self._offer(s)
        return s

    cdef int _leave(self, int s) except -1:
        """Resident s, whose bytes are in the host tier, leaves its piece (unbound, then freed
        by the executor): offloaded. A copy back ahead into it still coming ends first: the
        piece is reused at once."""
        self.c_await(s)
        self.arena.c_unbind(self.slot[s])
        if not self.executor.drop(s):
            raise RuntimeError(f"the executor could not free offloaded storage {s}")
        self.offset[s] = -1
        self.ready_at[s] = 0.0
        self.on_host[s] = 1
        self.offloads += 1
        return self._offer(s)

    cdef void _into_tier(self, int s, int64_t need) noexcept:
        """Resident s's bytes (need of the tier's) go into the host tier: counted, and
        listed for _host_room (the copy itself is the caller's: _copy_out, c_copy_ahead)."""
        self.host_bytes += need
        if self.host_bytes > self.host_peak:
            self.host_peak = self.host_bytes
        self.host_fifo.push_back(s)
        self.bytes_d2h += self.size[s]

    cdef double _copy_out(self, int s, int64_t need) noexcept:
        """Resident s's bytes go into the host tier, copied out for room on the device-to-host
        engine; returns when the copy ends. A copy out ahead (c_copy_ahead) runs in chunks of
        ahead_chunk bytes: while one runs, this copy waits for the chunk in flight (at most)
        or for the copies for room queued before it, not for all of the copy ahead, whose rest
        goes on after it (its out_at moves by this copy's time)."""
        cdef double start, end, t = <double>self.size[s] * self.d2h_rate
        cdef int a = self.ahead_s
        self._into_tier(s, need)
        if a < 0 or self.ahead_chunk <= 0 or not self.out_at[a] > self.now:
            end = self._copy(&self.d2h_free_at, self.size[s], self.d2h_rate)
            self.room_free_at = end
            return end
        if self.room_free_at > self.now:
            start = self.room_free_at
        else:
            start = self.now + <double>self.ahead_chunk * self.d2h_rate
            if start > self.out_at[a]:
                start = self.out_at[a]
        end = start + t
        self.room_free_at = end
        if self.out_at[a] > start:
            self.out_at[a] += t
        self.d2h_free_at = end if end > self.out_at[a] else self.out_at[a]
        return end

    cdef double _copy(self, double* free_at, int64_t nbytes, double rate) noexcept:
        """A copy of nbytes on the copy engine free at *free_at (one per direction): it starts
        when the engine is free, no earlier than now; returns when it ends."""
        cdef double start = free_at[0] if free_at[0] > self.now else self.now
        free_at[0] = start + <double>nbytes * rate
        return free_at[0]

    cdef int _wait(self, double done) except -1:
        """The clock waits until done for a copy it cannot hide (charged as executed cost)."""
        if done > self.now:
            self.copy_exposed += done - self.now
            self._charge_copy(done - self.now)
        return 0

    cdef int _wait_hidden(self, double done) except -1:
        """As _wait, for a copy counted as hidden when it started (a prefetch, a copy out
        ahead): what the clock waits for of it is exposed after all."""
        if done > self.now:
            self.copy_hidden -= done - self.now
        return self._wait(done)

    cdef int _bring_back(self, int s, bint ahead) except -1:
        """Give offloaded s memory holding its host copy's bytes (the executor's fetch: placed
        as its producer's outputs); the copy stays, cached. Its host copy is not dropped
        while room is made for it (_host_room). ahead: a prefetch, whose copy the executor
        may leave running beside the work after it until c_await."""
        cdef int outer = self.bringing
        self.bringing = s
        try:
            self.executor.fetch(s, self._placement_of_storage(s), ahead)
        finally:
            self.bringing = outer
        if self.offset[s] < 0:
            raise RuntimeError(f"the executor's fetch did not bring storage {s} back")
        self.on_host[s] = 2
        self._offer(s)
        self.bytes_h2d += self.size[s]
        return 0

    cdef bint _host_room(self, int64_t need, bint constant) except -1:
        """Whether need more bytes fit the host tier, after dropping what it can, oldest first:
        cached copies of resident storages (nothing is lost), then, for a constant, copies of
        offloaded recomputable storages (they become evicted: recomputed when needed). The copy
        of an offloaded constant is never dropped."""
        if self.host_budget < 0 or self.host_bytes + need <= self.host_budget:
            return True
        if need > self.host_budget:
            return False
        cdef size_t k, kept
        cdef int x, sweep
        for sweep in range(2 if constant else 1):
            kept = 0
            for k in range(self.host_fifo.size()):
                x = self.host_fifo[k]
                if self.host_bytes + need > self.host_budget and self.alive[x]:
                    if self.on_host[x] == 2:
                        self._host_release(x)
                    elif sweep == 1 and self.on_host[x] == 1 and self.producer[x] >= 0 \
                            and x != self.bringing:
                        self._host_drop(x)
                if self.alive[x] and self.on_host[x]:
                    self.host_fifo[kept] = x
                    kept += 1
            self.host_fifo.resize(kept)
            if self.host_bytes + need <= self.host_budget:
                return True
        return False

    cdef int _host_drop(self, int s) except -1:
        """Drop recomputable s's host copy: s is evicted from now on."""
        self._host_release(s)
        self.arena.c_evicted(self.slot[s])
        self.host_drops += 1
        return 0

    cdef int _host_release(self, int s) except -1:
        """s's host copy goes (its record died, its bytes changed, or it is dropped); a
        resident s leaving again would have to copy out. A copy back ahead from it that is
        still coming ends first (c_await): a copy out of s, a reader, or the next owner of its
        freed piece, needs that copy done."""
        cdef bint cached
        self.c_await(s)
        if self.on_host[s]:
            cached = self.on_host[s] == 2
            self.on_host[s] = 0
            self.out_at[s] = 0.0
            self.ahead_idle = False
            self.host_bytes -= self.arena.request_size(self.size[s])
            self.executor.forget_host(s)
            if cached and self.alive[s]:
                self._offer(s)
        return 0

    cdef int _placement_of_storage(self, int s) noexcept:
        """Where s goes when it comes back: its producer's placement, a constant at the low end."""
        return self.placement_of[self.producer[s]] if self.producer[s] >= 0 else PLACE_LOWEST

    cdef int c_fetch(self, int s) except -1:
        """Bring offloaded s back on demand: memory for it (placed as its producer's outputs,
        evicting as the policy chooses), its bytes copied back; the clock waits for the copy."""
        self._bring_back(s, False)
        self.fetches += 1
        return self._wait(self._copy(&self.h2d_free_at, self.size[s], self.h2d_rate))

    cdef bint c_prefetch(self, int s) except -1:
        """Start bringing offloaded s back ahead of its use, when it fits a free range as is
        (a prefetch never evicts): the copy runs on the host-to-device engine while ops run;
        its reader waits for what is left of it (c_await). False when s is not offloaded or
        does not fit."""
        if self.on_host[s] != 1 or self.offset[s] >= 0 \
                or self.arena.largest_free() < self.arena.request_size(self.size[s]):
            return False
        self._bring_back(s, True)
        return self._prefetched(s)

    cdef bint c_prefetch_room(self, int s) except -1:
        """Start bringing offloaded s back ahead of its use, making room for it as a fetch
        does (the window chooses, evicting or offloading what it prices lowest) when no free
        range holds it: the caller reads it after the next op, whose inputs it has pinned, so
        the copy runs under that op instead of after it (c_prefetch_after_next). False when s
        is not offloaded or no room can be made (nothing is lost: the arena's state is as the failed choice left it)."""
        if self.c_prefetch(s):
            return True
        if self.on_host[s] != 1 or self.offset[s] >= 0:
            return False
        try:
            self._bring_back(s, True)
        except OutOfMemoryError:
            return False
        return self._prefetched(s)

    cdef bint c_back_idle(self) noexcept:
        """The host-to-device copy engine has no copy queued now."""
        return not self.h2d_free_at > self.now

    cdef bint c_late_back(self, int s, double before) noexcept:
        """Whether offloaded s should come back now, room made for it (c_prefetch_room), for
        a reader that starts after `before` more of compute: with the copy engine back idle
        (a copy that would queue gains nothing from room made early), its copy back is longer
        than that, so started after it, it would not end in time (a replay's lookahead knows
        the ops' costs: Replayer._prefetch_room)."""
        return self.on_host[s] == 1 and self.c_back_idle() \
            and <double>self.size[s] * self.h2d_rate > before

    cdef bint _prefetched(self, int s) except -1:
        """s was just given memory for its host copy's bytes: its copy back starts on the
        host-to-device engine; its reader waits for what is left of it (c_await)."""
        self.arena.c_touch(self.slot[s], self.now)   # just brought back: not the next victim
        self.prefetches += 1
        self.coming[s] = 1
        self.ready_at[s] = self._copy(&self.h2d_free_at, self.size[s], self.h2d_rate)
        self.copy_hidden += <double>self.size[s] * self.h2d_rate   # less what c_await waits
        self._offer(s)      # priced with the copy's wait until c_await
        return True

    cdef int c_ref_reads(self, int s, int* positions, Py_ssize_t n) except -1:
        """The reference's positions (ascending, n of them) that read storage s."""
        if self.ref_reads.size() <= <size_t>s:
            self.ref_reads.resize(s + 1)
            self.ref_listed.resize(s + 1, 0)
        self.ref_reads[s].assign(positions, positions + n)
        if n > 0:
            self._ref_list(s)
        return 0

    cdef int c_ref_release(self, int s, Py_ssize_t pos) except -1:
        """The reference's position that releases storage s (a replay's release record;
        -1: none)."""
        if self.ref_release.size() <= <size_t>s:
            self.ref_release.resize(s + 1, -1)
        self.ref_release[s] = pos
        return 0

    cdef double c_dies_at(self, int s) noexcept:
        """The reference's clock at s's release when no read of s is left before it (the
        program releases s unread from the running position on: a gradient after its update);
        -1 otherwise, or when not known."""
        cdef vector[int]* r
        cdef Py_ssize_t rel
        if not self._ref_running() or <size_t>s >= self.ref_release.size():
            return -1.0
        rel = self.ref_release[s]
        if rel <= self.ref_pos or <size_t>rel >= self.ref_time.size():
            return -1.0
        if <size_t>s < self.ref_reads.size():
            r = &self.ref_reads[s]
            if not r.empty() and r.back() > self.ref_pos and r.back() < rel:
                return -1.0       # read again before its release
        return self.ref_time[rel]

    cdef int c_ref_clock(self, vector[double]& times) except -1:
        """A replay's reference: its clock at each position and, last, at its end (taken
        from times, which is left empty)."""
        self.ref_time.swap(times)
        times.clear()
        return 0

    cdef void c_ref_at(self, Py_ssize_t pos) noexcept:
        """A replay's position in its reference: the record running now."""
        self.ref_pos = pos

    cdef int _new_sid(self) except -1:
        """A live run with a lookahead notes when each storage id is made: reads of the id
        listed before belong to a storage that died (step drops them)."""
        cdef int s = _Room._new_sid(self)
        if self.step_prefetch:
            if self.born.size() <= <size_t>s:
                self.born.resize(s + 1, 0)
            self.born[s] = self.listed_before + <long long>self.cur_reads.size()
        return s

    cdef void _recycle(self, int s) noexcept:
        """s died: its reads in the reference go with it (its id may be reused), and in a live
        run the previous step's list of reads, which the prefetch looks ahead in, forgets it."""
        cdef int k
        cdef vector[int]* r
        if <size_t>s < self.ref_reads.size():
            if self.step_prefetch:
                for k in self.ref_reads[s]:         # exactly the ops of prev_reads listing s
                    if <size_t>k < self.prev_reads.size():
                        r = &self.prev_reads[k]
                        r.erase(remove(r.begin(), r.end(), s), r.end())
            self.ref_reads[s].clear()
        if <size_t>s < self.ref_release.size():
            self.ref_release[s] = -1
        _Room._recycle(self, s)

    cdef double c_next_read(self, int s) noexcept:
        """The reference's clock at s's next read after the running position (its first read
        plus the reference's length when none is left: the next step reads as this one);
        INFINITY when none is known."""
        cdef vector[int]* r
        cdef size_t lo, hi, mid
        if not self._ref_running() or <size_t>s >= self.ref_reads.size():
            return INFINITY
        r = &self.ref_reads[s]
        if r.empty():
            return INFINITY
        lo, hi = 0, r.size()
        while lo < hi:        # the first position after ref_pos
            mid = (lo + hi) // 2
            if r[0][mid] <= self.ref_pos:
                lo = mid + 1
            else:
                hi = mid
        if lo < r.size():
            return self.ref_time[r[0][lo]]
        return self.ref_time.back() + self.ref_time[r[0][0]]

    cdef int price(self, Arena arena) except -1:
        """Before a choice that counts offloads: with a reference (lookahead), each resident
        constant on offer whose next read is known is priced by it (docs/core.md, "The host
        tier"): the copies over the time until that read rather than over its staleness, so
        a parameter the next layers read stays and one read only in the next step leaves
        first. The scan divides a way out by staleness: the offer is set to the copies times
        staleness over the time until the read. Staleness misleads for what a training step
        reads cyclically: the parameters of the layers just ahead are the stalest."""
        cdef size_t k, kept = 0
        cdef int s, slot
        cdef double nxt, until, stale, now_ref, copies
        if not self.read_pricing or not self._ref_running():
            return 0
        now_ref = self.ref_time[self.ref_pos]
        for k in range(self.ref_known.size()):
            s = self.ref_known[k]
            if not self.alive[s] or self.ref_reads[s].empty():
                self.ref_listed[s] = 0
                continue
            self.ref_known[kept] = s
            kept += 1
            slot = self.slot[s]
            if self.producer[s] >= 0 or self.offset[s] < 0 or slot < 0 \
                    or arena.c_offload_cost(slot) == INFINITY:
                continue
            copies = self._copies(s)
            nxt = self.c_dies_at(s) if self.release_pricing else -1.0
            if nxt >= 0.0:
                # released unread: an offload frees its room only until then, and its copy
                # never comes back (with a cached host copy, leaving copies nothing)
                copies = 0.0 if self.on_host[s] == 2 else \
                    <double>self.arena.request_size(self.size[s]) * self.d2h_rate
            else:
                nxt = self.c_next_read(s)
                if nxt == INFINITY:
                    continue
            until = nxt - now_ref
            if until < 1.0:
                until = 1.0
            stale = self.now - arena.c_last_access(slot)
            if not stale > 1.0:
                stale = 1.0
            arena.c_set_offload(slot, copies * stale / until)
        self.ref_known.resize(kept)
        return 0

    cdef int _arrived(self, int s) except -1:
        """A move reads s's bytes: a prefetched copy still coming back ends first (c_await)."""
        return self.c_await(s)

    cdef int c_await(self, int s) except -1:
        """s is about to be read, written, moved or copied out, or its host copy dropped or its
        piece freed: the clock waits for what is left of its prefetched copy, and the executor
        orders the work from now on after that copy (a prefetch's copy runs beside the ops
        before its reader: Executor.fetch with ahead)."""
        if self.ready_at[s] > 0.0:
            self._wait_hidden(self.ready_at[s])
            self.ready_at[s] = 0.0
        if self.coming[s]:
            self.coming[s] = 0
            self.executor.await_fetch(s)
            self._offer(s)      # its offer without the copy's wait (_copies)
        return 0

    cdef void _pool_constant(self, int s) noexcept:
        """s became a constant: one more for c_copy_ahead to look at (once per id)."""
        self.ahead_idle = False
        if self.pooled.size() <= <size_t>s:
            self.pooled.resize(s + 1, 0)
        if not self.pooled[s]:
            self.pooled[s] = 1
            self.ahead_pool.push_back(s)

    cdef int c_copy_ahead(self) except -1:
        """Copies out ahead of the pressure: once the arena has had to make room, while the
        device-to-host engine is idle, the stalest resident constant without a host copy is
        copied out in the background (it stays resident, its host copy cached), into room the
        host tier has free (nothing is dropped for it). When the window later offloads it,
        nothing is copied: the clock waits only for what is left of that copy. Only where the
        executor can copy an array that stays in use (can_copy_ahead: replays, the NumPy
        backend, and CuPy's, whose copy out ahead leaves the compute stream running and
        orders the piece's reuse after it)."""
        cdef int s, best = -1
        cdef size_t k, kept = 0
        cdef double last, best_last = INFINITY
        cdef int64_t need
        cdef bint copied
        if self.ahead_idle or not self.executor.can_copy_ahead or self.d2h_free_at > self.now \
                or not self.arena.c_searched():
            return 0
        for k in range(self.ahead_pool.size()):
            s = self.ahead_pool[k]
            if not (self.alive[s] and self.producer[s] < 0):
                self.pooled[s] = 0      # dead, or its id reused by a computed storage
                continue
            self.ahead_pool[kept] = s
            kept += 1
            if self.offset[s] >= 0 and not self.on_host[s] and not self.held[s] \
                    and self.slot[s] >= 0:
                last = self.arena.c_last_access(self.slot[s])
                # the stalest; ties: the lowest id
                if best < 0 or last < best_last or (last == best_last and s < best):
                    best, best_last = s, last
        self.ahead_pool.resize(kept)
        if best < 0:
            self.ahead_idle = True
            return 0
        s = best
        need = self.arena.request_size(self.size[s])
        if self.host_budget >= 0 and self.host_bytes + need > self.host_budget:
            self.ahead_idle = True
            return 0
        try:
            copied = self.executor.offload(s, True)
        except HostMemoryError:
            self.host_failures += 1
            copied = False
        if not copied:
            self.ahead_idle = True
            return 0
        self.on_host[s] = 2
        self._into_tier(s, need)
        self.out_at[s] = self._copy(&self.d2h_free_at, self.size[s], self.d2h_rate)
        self.ahead_s = s
        self.copy_hidden += <double>self.size[s] * self.d2h_rate
        self.copies_ahead += 1
        return self._offer(s)

    cdef int c_step_reads(self, vector[int]& inputs) except -1:
        """A live run's op starts (step_prefetch): the constants among its inputs join this
        step's order of reads."""
        cdef vector[int] consts
        cdef int s
        if <Py_ssize_t>self.cur_reads.size() >= self.max_step_ops:
            # no step marked for that long: the list would only grow
            warnings.warn(
                f"coop: a lookahead of {self.lookahead} ops, but no training step was marked "
                f"in {self.cur_reads.size():,} ops: the list of this step's reads is dropped "
                f"and starts again; call Runtime.mark_step() after each training step (the "
                f"optimizers of coop.optim do)", RuntimeWarning, stacklevel=2)
            self.listed_before += <long long>self.cur_reads.size()
            self.cur_reads.clear()
            self.cur_times.clear()
            self.step_began = self.now
        for s in inputs:
            if self.producer[s] < 0:
                consts.push_back(s)
        # this op's position in the reference: the previous step's op at the same place
        self.ref_pos = <Py_ssize_t>self.cur_reads.size()
        self.cur_reads.push_back(consts)
        self.cur_times.push_back(self.now - self.step_began)
        return 0

    def step(self):
        """A training step ended (the runtime's optimizers say so): this step's order of reads
        becomes the one the next step prefetches by, and the reference its offers are priced
        by (price: each constant's next read, at the clock this step's op at that place
        started)."""
        cdef size_t k, j, kept
        cdef int s
        cdef vector[int]* r
        for s in self.ref_known:
            self.ref_reads[s].clear()
            self.ref_listed[s] = 0
        self.ref_known.clear()
        self.ref_time.swap(self.cur_times)
        self.ref_time.push_back(self.now - self.step_began)
        for k in range(self.cur_reads.size()):
            r = &self.cur_reads[k]
            kept = 0
            for j in range(r.size()):
                s = r[0][j]
                # a storage that died, or listed before its id was last made: a read of
                # one that died
                if not self.alive[s] or (<size_t>s < self.born.size()
                                         and self.listed_before + <long long>k < self.born[s]):
                    continue
                r[0][kept] = s
                kept += 1
            r.resize(kept)
            for s in r[0]:
                if self.ref_reads.size() <= <size_t>s:
                    self.ref_reads.resize(s + 1)
                    self.ref_listed.resize(s + 1, 0)
                if self.ref_reads[s].empty() or self.ref_reads[s].back() != <int>k:
                    self.ref_reads[s].push_back(<int>k)
                self._ref_list(s)
        self.cur_times.clear()
        self.step_began = self.now
        self.ref_pos = -1
        self.listed_before += <long long>self.cur_reads.size()
        self.prev_reads.swap(self.cur_reads)
        self.cur_reads.clear()

    def next_read(self, int s):
        """The reference's clock at storage s's next read after the op running now (its first
        read plus the reference's length when none is left in it), less the clock at that op's
        start: the time until s is read again, as price() counts it; None when not known (no
        lookahead, or s read nowhere in the reference)."""
        cdef double t = self.c_next_read(s)
        if t == INFINITY:
            return None
        return t - self.ref_time[self.ref_pos]

    def dies_at(self, int s):
        """The time from the start of the op running now until the reference releases storage
        s, when it reads s no more before then (as price() counts it for a storage released
        unread); None otherwise, or when not known."""
        cdef double t = self.c_dies_at(s)
        if t < 0.0:
            return None
        return t - self.ref_time[self.ref_pos]

    def tier_counters(self):
        """The host tier's counters (Runtime.stats, replays, coop bench)."""
        return {"offloads": self.offloads, "copies_ahead": self.copies_ahead,
                "constants_on_host": self.constants_on_host,
                "fetches": self.fetches,
                "prefetches": self.prefetches, "bytes_d2h": self.bytes_d2h,
                "bytes_h2d": self.bytes_h2d, "copy_exposed": self.copy_exposed,
                "copy_hidden": self.copy_hidden, "host_bytes": self.host_bytes,
                "host_peak_bytes": self.host_peak, "host_drops": self.host_drops,
                "host_refusals": self.host_refusals, "host_failures": self.host_failures}
