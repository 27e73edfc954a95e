# The eviction loop and compaction (included by _core.pyx): they carry out the Chooser's choices
# through an Evictor and count what was done. The evictor may re-enter the arena (free, remove
# storages): victims and movers are kept as storage ids across its calls, never as slots.


cdef void _remirror(Arena a, bint offloads) noexcept:
    """Every bound piece's scan entry mirrors its storage with offloads counted or not."""
    a.table.runs.offloads = offloads
    cdef int idx = a.table.first
    cdef int slot
    while idx >= 0:
        slot = a.table.at[idx].storage
        if slot >= 0:
            a.table.runs.mirror_storage(idx, &a.storages.at[slot])
        idx = a.table.at[idx].next
    return


cdef bint _choose(Arena a, size_t size, int code, double now, vector[int]& victims,
                  MovePlan* plan, Evictor evictor) except -1:
    """The policy's choice for size bytes; True when it was made with offloads counted as a
    way out. With offload_last (the default) offloads count only when no choice exists
    without them: the scan runs again with them (docs/core.md, "The host tier"). Before a
    choice that counts offloads, the evictor (None: the arena's own Python choose) may price
    its offers anew (Evictor.price)."""
    if not a.offload_last:
        if a.n_offload > 0 and evictor is not None:
            evictor.price(a)
        a.chooser.choose(size, code, now, a.move_rate, victims, plan)
        return a.n_offload > 0
    a.chooser.choose(size, code, now, a.move_rate, victims, plan)
    if victims.empty() and plan.moves.empty() and a.n_offload > 0 and not a.offload_held:
        if evictor is not None:
            evictor.price(a)
        _remirror(a, True)
        a.chooser.choose(size, code, now, a.move_rate, victims, plan)
        _remirror(a, False)
        return not (victims.empty() and plan.moves.empty())
    return False


cdef inline void _add_phases(SearchPhases* total, SearchPhases* one) noexcept:
    total.fill += one.fill
    total.scan += one.scan
    total.plan += one.plan
    total.plans += one.plans
    total.moving += one.moving
    total.quick += one.quick
    total.lazy += one.lazy
    total.eager += one.eager
    total.entries += one.entries
    total.pieces += one.pieces


@cython.final
cdef class EvictionLoop:
    """Arena.c_allocate_or_evict's loop, the carrying out of move plans, and compaction."""

    def stats(self):
        """The counters, as Arena.stats names them."""
        cdef Counters* c = &self.counts
        return {
            "evictions": c.evictions,
            "bytes_evicted": c.bytes_evicted,
            "searches": c.searches,
            "search_time": c.search_time,
            "fragmentation_rate": c.frag_sum / c.searches if c.searches else 0.0,
            "failed_allocations": c.failed,
            "largest_free_ratio": c.largest_ratio_sum / c.failed if c.failed else 0.0,
            "window_moves": c.moves,
            "bytes_moved": c.bytes_moved,
            "move_cost": c.move_cost_sum,
            "offloads": c.offloads,
            "bytes_offloaded": c.bytes_offloaded,
            "search_fill_time": c.phases.fill,
            "search_scan_time": c.phases.scan,
            "search_plan_time": c.phases.plan,
            "plans_evaluated": c.phases.plans,
            "moving_searches": c.phases.moving,
            "quick_decided": c.phases.quick,
            "search_entries": c.phases.entries,
            "search_pieces": c.phases.pieces,
        }

    cdef void lost(self, int slot) noexcept:
        """slot's storage was removed: an eviction loop placing it must not go on."""
        cdef size_t i
        for i in range(self.placing_slots.size()):
            if self.placing_slots[i] == slot:
                self.placing_lost[i] = 1

    cdef Py_ssize_t run(self, Arena arena, size_t size, int placement, int code, double now,
                        int slot, Evictor evictor, object policy, size_t depth) except -2:
        """Allocate size (rounded) for slot (-1: anonymous), evicting and moving the policy's
        choice through evictor until it fits; placing_slots[depth] is slot."""
        cdef vector[int] victims
        cdef MovePlan plan
        cdef int64_t key = arena.storages.at[slot].sid if slot >= 0 else -1
        cdef double t0
        cdef Py_ssize_t off
        cdef size_t free_bytes
        cdef bint taken, saved
        while True:
            off = arena.c_allocate(size, placement, slot)
            if off >= 0:
                return off
            memset(&arena.chooser.phases, 0, sizeof(SearchPhases))
            t0 = _monotonic()
            taken = _choose(arena, size, code, now, victims, &plan, evictor)
            self.counts.search_time += _monotonic() - t0
            self.counts.searches += 1
            _add_phases(&self.counts.phases, &arena.chooser.phases)
            free_bytes = arena.capacity - arena.used_bytes
            self.counts.frag_sum += <double>free_bytes / <double>arena.capacity
            if victims.empty() and plan.moves.empty():
                if evictor is not None and evictor.widen(arena):
                    continue
                self.counts.failed += 1
                self.counts.largest_ratio_sum += (
                    <double>arena.largest_free() / <double>free_bytes if free_bytes else 1.0)
                raise _oom(arena, size, policy,
                           evictor.oom_note(arena) if evictor is not None else "")
            if code == P_COOP and isfinite(plan.cost):
                # the room's price from now on (docs/core.md, "One scale"): what this choice
                # pays per byte of its request
                arena.chooser.planner.room_price = plan.cost / <double>size
            # the evictor asks c_offload_wins of each victim: offloads only where they counted
            saved = arena.offload_taken
            arena.offload_taken = taken
            try:
                if not plan.moves.empty():
                    self.carry_out(arena, &plan, evictor)
                self.evict(arena, victims, evictor, True)
            finally:
                arena.offload_taken = saved
            # the callback may have removed the storage being placed (and maybe registered one
            # in its slot since): the piece must not go to another storage
            if slot >= 0 and self.placing_lost[depth]:
                raise ValueError(f"storage {key} was removed during its own allocation (by the "
                                 "evict callback); a callback must not remove or re-add it")

    cdef int evict(self, Arena arena, vector[int]& victims, Evictor evictor,
                   bint strict) except -1:
        """evictor.evict(victims), counting those no longer resident afterwards; 1 when one is
        still resident (refused). strict: one still resident and a candidate is an error, as it
        would be chosen again forever (a victim the owner cannot drop must have been made
        unevictable or pinned by the callback)."""
        if victims.empty():
            return 0
        cdef Storages storages = arena.storages
        cdef vector[int64_t] ids
        cdef vector[size_t] sizes
        cdef int s
        cdef size_t k
        for s in victims:
            ids.push_back(storages.at[s].sid)
            sizes.push_back(arena.table.at[storages.at[s].piece].size)
        evictor.evict(arena, victims)
        cdef bint refused = False
        still = []
        for k in range(ids.size()):
            if not storages.by_sid.count(ids[k]):
                self.counts.evictions += 1
                self.counts.bytes_evicted += sizes[k]
            elif storages.at[storages.by_sid[ids[k]]].piece < 0:
                # still registered and in no class: it left for the owner's host tier
                if storages.at[storages.by_sid[ids[k]]].eq_class < 0:
                    self.counts.offloads += 1
                    self.counts.bytes_offloaded += sizes[k]
                else:
                    self.counts.evictions += 1
                    self.counts.bytes_evicted += sizes[k]
            else:
                refused = True
                # a candidate as the choice counted it (offloads too, where they counted)
                if strict and _flags(&storages.at[storages.by_sid[ids[k]]],
                                     arena.offload_taken or not arena.offload_last) \
                        & W_CANDIDATE:
                    still.append(ids[k])
        if still:
            raise InternalError(f"the evict callback left storages {still} resident and "
                                "evictable; it must free each victim's piece or mark it "
                                "unevictable (with no offload)")
        return refused

    cdef int carry_out(self, Arena arena, MovePlan* plan, Evictor evictor) except -1:
        """Relocate the plan's moved storages: every destination is taken first (so a freed
        source cannot merge into a destination still to take), then evictor.move copies each
        storage's bytes (or refuses: the storage becomes unmovable and its destination is freed
        again), each moved storage is bound to its new piece, evictor.moved runs, and the old
        pieces still used are freed, in the plan's order. The log has each move done as one
        entry, and nothing else of it: a move is no allocation of the caller's."""
        cdef vector[int] slots = plan.moves
        cdef vector[size_t] dsts = plan.dst
        cdef vector[int] news
        cdef vector[size_t] olds
        cdef vector[int64_t] done          # old offset, new offset, size, sid of each move
        cdef size_t k, size, nb
        cdef int slot, old, s_old
        cdef Storages storages = arena.storages
        cdef bint logging = arena.log.c_pause()
        cdef vector[pair[size_t, size_t]] by_dst
        for k in range(slots.size()):
            by_dst.push_back(pair[size_t, size_t](dsts[k], k))
        # lowest destination first: moves packed into one free piece take it from its low end
        sort(by_dst.begin(), by_dst.end())
        news.assign(slots.size(), -1)
        try:
            for k in range(by_dst.size()):
                news[by_dst[k].second] = _carve(
                    arena, by_dst[k].first,
                    arena.table.at[storages.at[slots[by_dst[k].second]].piece].size,
                    storages.at[slots[by_dst[k].second]].sid)
            for k in range(slots.size()):
                slot = slots[k]
                old = storages.at[slot].piece
                size = arena.table.at[old].size
                if evictor.move(arena, slot, arena.table.at[old].offset, dsts[k]):
                    olds.push_back(arena.table.at[old].offset)
                    storages.rebind(slot, news[k])
                    done.push_back(<int64_t>olds.back())
                    done.push_back(<int64_t>dsts[k])
                    done.push_back(<int64_t>size)
                    done.push_back(storages.at[slot].sid)
                    self.counts.moves += 1
                    self.counts.bytes_moved += size
                    self.counts.move_cost_sum = self.counts.move_cost_sum + <double>size * arena.move_rate
                else:
                    arena.c_set_movable(slot, False)
                    olds.push_back(dsts[k])
            evictor.moved(arena)
            for k in range(olds.size()):
                # the owner may have freed an old piece already (its array died in moved())
                if arena.c_used_piece(olds[k], &nb, &s_old) == 0 and s_old < 0:
                    arena.c_free(olds[k])
        finally:
            arena.log.c_resume(logging)
            k = 0
            while k < done.size():     # logged now: nothing else was while paused
                arena.log.c_moved(<size_t>done[k], <size_t>done[k + 1], <size_t>done[k + 2],
                                  done[k + 3])
                k += 4
        return 0

    cdef Py_ssize_t compact(self, Arena arena, size_t size, double now,
                            Evictor evictor) except -2:
        """Arena.c_compact: the cheapest run of adjacent pieces, none a wall, whose free and
        candidate bytes cover size (candidates cost h, movable non-candidates a copy each); its
        candidates are evicted through evictor, then its movable pieces slide to its low end in
        address order (evictor.slide copies each one's bytes, memmove-like), so that size bytes
        are free from the returned offset. -1 when no run covers size, or when the evictor
        refused a victim or a slide."""
        cdef size_t best_lo, best_end, j
        if not arena.chooser.compact_window(size, now, arena.move_rate, &best_lo, &best_end):
            return -1
        cdef unsigned char* fs = arena.chooser.flags.data()
        cdef Storages storages = arena.storages
        cdef PieceTable table = arena.table
        # the window's victims and movers (storage ids: the callbacks may reuse slots)
        cdef vector[int] victims
        cdef vector[int64_t] movers
        cdef int idx = table.first, slot
        cdef size_t cursor
        for j in range(best_lo):
            idx = table.at[idx].next
        cursor = table.at[idx].offset
        for j in range(best_lo, best_end):
            if fs[j] & W_CANDIDATE:
                victims.push_back(table.at[idx].storage)
            elif fs[j] & W_MOVABLE:
                movers.push_back(storages.at[table.at[idx].storage].sid)
            idx = table.at[idx].next
        if self.evict(arena, victims, evictor, False):
            return -1
        cdef size_t src, nbytes, k
        for k in range(movers.size()):
            if not storages.by_sid.count(movers[k]):
                return -1
            slot = storages.by_sid[movers[k]]
            idx = storages.at[slot].piece
            if idx < 0:
                return -1
            src = table.at[idx].offset
            nbytes = table.at[idx].size
            if src != cursor:
                if not evictor.slide(arena, slot, src, cursor):
                    arena.c_set_movable(slot, False)
                    return -1
                arena.c_slide(slot, cursor)
                self.counts.moves += 1
                self.counts.bytes_moved += nbytes
                self.counts.move_cost_sum = self.counts.move_cost_sum + <double>nbytes * arena.move_rate
            cursor += nbytes
        idx = table.find(cursor)
        if idx < 0 or not table.at[idx].free or table.at[idx].size < size:
            return -1
        return <Py_ssize_t>cursor
