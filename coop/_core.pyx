# distutils: language = c++
"""The arena core: page table, two-ended best fit, eviction metadata, window scoring, eviction loops.

Specification: docs/core.md. Every method runs without releasing the GIL and calls no Python code
while the structures are inconsistent, so the GIL is the lock: frees arriving from another thread,
or re-entrantly from an object's ``__dealloc__`` inside the eviction callback, always see a
consistent arena.
"""
from cython.operator cimport dereference as deref, predecrement
from libc.math cimport INFINITY, isfinite
from libc.stdint cimport SIZE_MAX, int64_t
from libc.string cimport memcpy
from libcpp.algorithm cimport sort
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from operator import index as _index

from coop.errors import OutOfMemoryError

# The public API's placements and policies; C code uses the enums of _core.pxd (Placement,
# PolicyCode) instead, so rebinding these names cannot change what the core does.
EXPENSIVE = PLACE_EXPENSIVE
CHEAP = PLACE_CHEAP
LOWEST = PLACE_LOWEST   # placement: first fit from the arena's low end (where constants go)
NO_STORAGE = -1
LOG_MOVE = -2   # take_log: the code of a move of coop's window, (old, LOG_MOVE, new, size, sid)


def log_records(log):
    """The arena's log (Arena.take_log) as one tuple per event: (offset, nbytes) allocated,
    (offset, -1) freed, (old offset, LOG_MOVE, new offset, size, storage id) moved."""
    out, k, n = [], 0, len(log)
    while k < n:
        width = 5 if log[k + 1] == LOG_MOVE else 2
        out.append(tuple(log[k:k + width]))
        k += width
    return out
POLICIES = ("coop", "dtr", "dte", "lru", "size", "none")   # index == PolicyCode

cdef size_t IDEAL_SPACE = (<size_t>1) << 62   # address space of an ideal arena
cdef dict _POLICY_CODES = {name: code for code, name in enumerate(POLICIES)}


cdef inline double _monotonic() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef int policy_code(policy, bint ideal) except -1:
    cdef int code
    try:
        code = _POLICY_CODES[policy]
    except (KeyError, TypeError):
        raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}") from None
    if ideal and code == P_COOP:
        raise ValueError("an ideal arena has no addresses to scan: use a loop policy "
                         "(dtr, dte, lru, size) or none")
    return code


cdef size_t _size_arg(value, str what) except? 0:
    """A non-negative integer argument (NumPy integers included), with errors that name it."""
    if isinstance(value, bool) or isinstance(value, float):
        raise TypeError(f"{what} must be an integer number of bytes, got {value!r}")
    try:
        n = _index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer number of bytes, got {value!r}") from None
    if n < 0:
        raise ValueError(f"{what} must be >= 0, got {n}")
    return n


cdef int _placement_arg(value) except -1:
    if isinstance(value, bool) or isinstance(value, float):
        raise TypeError(f"placement must be coop.EXPENSIVE, coop.CHEAP or coop.LOWEST, "
                        f"got {value!r}")
    cdef Py_ssize_t placement = _index(value)
    if placement != PLACE_EXPENSIVE and placement != PLACE_CHEAP and placement != PLACE_LOWEST:
        raise ValueError(f"placement must be coop.EXPENSIVE (0), coop.CHEAP (1) or "
                         f"coop.LOWEST (2), got {placement}")
    return placement


cdef double _clock_arg(value) except? -1.0:
    now = float(value)
    if not isfinite(now):
        raise ValueError(f"a clock (now, last access) must be a finite number, got {value!r}")
    return now


cdef double _cost_arg(value) except? -1.0:
    cost = float(value)
    if not isfinite(cost) or cost < 0.0:
        raise ValueError(f"cost must be a finite number >= 0, got {value!r}")
    return cost


cdef class Arena:
    """A contiguous range of ``capacity`` bytes cut into pieces, with per-storage eviction data."""

    def __cinit__(self, nbytes, alignment=64, ideal=False):
        cdef size_t align = _size_arg(alignment, "alignment")
        if align == 0 or (align & (align - 1)) != 0:
            raise ValueError(f"alignment must be a power of two, got {alignment!r}")
        cdef size_t total = _size_arg(nbytes, "the arena size")
        self.alignment = align
        self.capacity = total - total % align
        if self.capacity == 0:
            raise ValueError(
                f"an arena of {total} bytes holds no {align}-byte aligned piece; "
                f"give a budget of at least {align} bytes")
        self.ideal = bool(ideal)
        # an ideal arena counts bytes only (DTR's simulator): its pieces live in an address
        # space so large that placement never fails; the budget alone refuses requests
        self.space = IDEAL_SPACE if self.ideal else self.capacity
        self.piece_pool = -1
        self.block_pool = -1
        self.move_rate = INFINITY
        self.plan_cost = INFINITY
        self.plan_start = -1
        self.first = self._new_piece(0, self.space, -1, -1, True)
        self.n_pieces = 1
        self._index_free(self.first)

    # ---- pieces -------------------------------------------------------------------------------

    cdef void _split_low(self, int idx, size_t size) noexcept:
        """Piece idx (out of the free index) keeps its low size bytes; the rest becomes a new
        free piece after it, indexed."""
        cdef Piece* p = &self.pieces_[idx]
        cdef int rest = self._new_piece(p.offset + size, p.size - size, idx, p.next, True)
        p = &self.pieces_[idx]           # _new_piece may move the pieces
        if p.next >= 0:
            self.pieces_[p.next].prev = rest
        p.next = rest
        p.size = size
        self._index_free(rest)
        self.n_pieces += 1

    cdef int _new_piece(self, size_t offset, size_t size, int prev, int next, bint free) noexcept:
        cdef int idx
        if self.piece_pool >= 0:
            idx = self.piece_pool
            self.piece_pool = self.pieces_[idx].next
        else:
            idx = <int>self.pieces_.size()
            self.pieces_.push_back(Piece(0, 0, -1, -1, -1, -1, -1, False))
        cdef Piece* p = &self.pieces_[idx]
        p.offset = offset
        p.size = size
        p.prev = prev
        p.next = next
        p.storage = -1
        p.free = free
        self.by_offset[offset] = idx
        _block_insert(self, prev, idx)
        return idx

    cdef void _drop_piece(self, int idx) noexcept:
        _block_remove(self, idx)
        self.by_offset.erase(self.pieces_[idx].offset)
        self.pieces_[idx].next = self.piece_pool
        self.pieces_[idx].size = 0
        self.piece_pool = idx

    cdef inline void _index_free(self, int idx) noexcept:
        self.free_index.insert(SizeOffset(self.pieces_[idx].size, self.pieces_[idx].offset))
        self.n_free_pieces += 1

    cdef inline void _unindex_free(self, int idx) noexcept:
        self.free_index.erase(SizeOffset(self.pieces_[idx].size, self.pieces_[idx].offset))
        self.n_free_pieces -= 1

    cdef size_t request_size(self, size_t nbytes) noexcept:
        """Bytes a request of nbytes takes: rounded up to the alignment, never 0."""
        if nbytes <= self.alignment:
            return self.alignment
        return (nbytes + self.alignment - 1) & ~(self.alignment - 1)

    cdef size_t largest_free(self) noexcept:
        if self.ideal:
            return self.capacity - self.used_bytes
        if self.free_index.empty():
            return 0
        return deref(self.free_index.rbegin()).first

    cdef Py_ssize_t c_allocate(self, size_t size, int placement, int slot) noexcept:
        """Best fit of an already rounded size; returns the offset or -1. Binds slot if >= 0.

        While logging, records (offset, size); callers that know the request's own byte count
        replace size with it through c_log_request."""
        if self.ideal and self.used_bytes + size > self.capacity:
            return -1
        cdef cset[SizeOffset].iterator it = self.free_index.lower_bound(SizeOffset(size, 0))
        if it == self.free_index.end():
            return -1
        cdef int idx
        if placement == PLACE_LOWEST:
            # first fit from the arena's low end (address order), at its low end
            idx = self.first
            while not (self.pieces_[idx].free and self.pieces_[idx].size >= size):
                idx = self.pieces_[idx].next
        elif placement == PLACE_CHEAP:
            # among the equally small pieces, the highest: cheap tensors gather at the arena's
            # high end as they do at their piece's
            it = self.free_index.lower_bound(SizeOffset(deref(it).first + 1, 0))
            predecrement(it)
            idx = self.by_offset[deref_offset(it)]
        else:
            idx = self.by_offset[deref_offset(it)]
        cdef Piece* p = &self.pieces_[idx]
        cdef int used = idx
        self._unindex_free(idx)
        if p.size > size:
            if placement == PLACE_CHEAP:
                # used piece at the high end; idx keeps the low remainder (stays free)
                used = self._new_piece(p.offset + p.size - size, size, idx, p.next, False)
                p = &self.pieces_[idx]
                if p.next >= 0:
                    self.pieces_[p.next].prev = used
                p.next = used
                p.size -= size
                self._index_free(idx)
                self.n_pieces += 1
            else:
                self._split_low(idx, size)
        p = &self.pieces_[used]
        p.free = False
        _entry_mirror(self, idx)     # a new piece's entry is written as it is linked
        self.used_bytes += size
        if self.used_bytes > self.peak_used:
            self.peak_used = self.used_bytes
        cdef size_t offset = p.offset
        if slot >= 0:
            self._bind(used, slot)
        if self.logging:
            self.alloc_log.push_back(<int64_t>offset)
            self.alloc_log.push_back(<int64_t>size)
        return <Py_ssize_t>offset

    cdef Py_ssize_t c_lowest_fit(self, size_t size) noexcept:
        """Offset of the lowest free piece that holds size (rounded), or -1."""
        if self.ideal and self.used_bytes + size > self.capacity:
            return -1
        cdef int idx = self.first
        while idx >= 0:
            if self.pieces_[idx].free and self.pieces_[idx].size >= size:
                return <Py_ssize_t>self.pieces_[idx].offset
            idx = self.pieces_[idx].next
        return -1

    cdef int c_free(self, size_t offset) except -1:
        cdef unordered_map[size_t, int].iterator it = self.by_offset.find(offset)
        if it == self.by_offset.end():
            raise ValueError(f"free of unknown offset {offset}: no piece starts there")
        cdef int idx = deref(it).second
        if self.pieces_[idx].free:
            raise ValueError(f"double free of offset {offset}: the piece is already free")
        cdef Piece* p = &self.pieces_[idx]
        cdef int slot = p.storage
        cdef int nb
        self.used_bytes -= p.size
        p.free = True
        p.storage = -1
        # merge with the free neighbours
        if p.prev >= 0 and self.pieces_[p.prev].free:
            nb = p.prev
            self._unindex_free(nb)
            self.pieces_[nb].size += p.size
            self.pieces_[nb].next = p.next
            if p.next >= 0:
                self.pieces_[p.next].prev = nb
            self._drop_piece(idx)
            self.n_pieces -= 1
            idx = nb
            p = &self.pieces_[idx]
        if p.next >= 0 and self.pieces_[p.next].free:
            nb = p.next
            self._unindex_free(nb)
            p.size += self.pieces_[nb].size
            p.next = self.pieces_[nb].next
            if p.next >= 0:
                self.pieces_[p.next].prev = idx
            self._drop_piece(nb)
            self.n_pieces -= 1
        _entry_mirror(self, idx)
        self._index_free(idx)
        if slot >= 0:
            self.storages[slot].piece = -1
            self._on_evicted(slot)
        if self.logging:
            self.alloc_log.push_back(<int64_t>offset)
            self.alloc_log.push_back(-1)
        return 0

    # ---- storages and classes ----------------------------------------------------------------

    cdef int _slot(self, sid) except -1:
        if isinstance(sid, bool) or isinstance(sid, float):
            raise TypeError(f"storage ids are integers, got {sid!r}")
        cdef int64_t key = _index(sid)
        cdef unordered_map[int64_t, int].iterator it = self.by_sid.find(key)
        if it == self.by_sid.end():
            raise ValueError(f"unknown storage {sid}: register it with add_storage first")
        return deref(it).second

    cdef void _bind(self, int idx, int slot) noexcept:
        cdef Storage* st = &self.storages[slot]
        cdef int c = st.eq_class
        self.pieces_[idx].storage = slot
        st.piece = idx
        cdef int n
        if c >= 0:
            self._class_leave(slot)
            if self.classes[c].head >= 0:
                self._refresh_class(c)
            self._refresh_neighbours(slot)
        # slot is resident now: each class it touches must refresh it when it changes
        for n in self.adjacency[slot]:
            if self.storages[n].piece < 0 and self.storages[n].eq_class >= 0:
                self.frontier[self.storages[n].eq_class].push_back(slot)
        self.storages[slot].cprime = self._cprime(slot)
        self._sync(slot)

    cdef inline void _sync(self, int slot) noexcept:
        """Mirror a resident storage's scan inputs into its piece's block entry."""
        cdef Storage* st = &self.storages[slot]
        cdef Block* blk
        cdef int k
        if st.piece >= 0:
            blk = &self.blocks[self.pieces_[st.piece].block]
            k = _entry(self, st.piece)
            blk.cprime[k] = st.cprime
            blk.last_access[k] = st.last_access
            blk.flags[k] = _flags(st)

    cdef void _on_evicted(self, int slot) noexcept:
        """slot's piece was freed: it forms a class and joins its evicted neighbours' classes."""
        cdef int c = self._class_new(slot)
        cdef int n
        for n in self.adjacency[slot]:
            if (self.storages[n].piece < 0 and self.storages[n].eq_class >= 0
                    and self.storages[n].eq_class != c):
                c = self._class_union(c, self.storages[n].eq_class)
        self._refresh_class(c)

    cdef int _class_new(self, int slot) noexcept:
        cdef int c
        if not self.class_pool.empty():
            c = self.class_pool.back()
            self.class_pool.pop_back()
        else:
            c = <int>self.classes.size()
            self.classes.push_back(EvictedClass(0.0, -1, 0))
            self.frontier.push_back(vector[int]())
        self.classes[c].cost = self.storages[slot].cost
        self.classes[c].head = slot
        self.classes[c].size = 1
        self.frontier[c].clear()
        cdef int n
        for n in self.adjacency[slot]:
            if self.storages[n].piece >= 0:
                self.frontier[c].push_back(n)
        self.storages[slot].eq_class = c
        self.storages[slot].eq_next = slot
        self.storages[slot].eq_prev = slot
        return c

    cdef int _class_union(self, int a, int b) noexcept:
        """Merge two classes (relabelling the smaller); returns the survivor."""
        if self.classes[a].size < self.classes[b].size:
            a, b = b, a
        cdef int ha = self.classes[a].head
        cdef int hb = self.classes[b].head
        cdef int m = hb
        while True:
            self.storages[m].eq_class = a
            m = self.storages[m].eq_next
            if m == hb:
                break
        # splice the two circular lists
        cdef int ta = self.storages[ha].eq_prev
        cdef int tb = self.storages[hb].eq_prev
        self.storages[ta].eq_next = hb
        self.storages[hb].eq_prev = ta
        self.storages[tb].eq_next = ha
        self.storages[ha].eq_prev = tb
        self.classes[a].cost = self.classes[a].cost + self.classes[b].cost
        self.classes[a].size += self.classes[b].size
        if self.frontier[a].size() < self.frontier[b].size():
            self.frontier[a].swap(self.frontier[b])
        self.frontier[a].insert(self.frontier[a].end(), self.frontier[b].begin(), self.frontier[b].end())
        self.frontier[b].clear()
        self.classes[b].head = -1
        self.classes[b].size = 0
        self.class_pool.push_back(b)
        return a

    cdef void _class_leave(self, int slot) noexcept:
        cdef Storage* st = &self.storages[slot]
        cdef int c = st.eq_class
        cdef EvictedClass* k = &self.classes[c]
        k.cost = k.cost - st.cost
        k.size -= 1
        if k.size == 0:
            k.head = -1
            k.cost = 0.0
            self.frontier[c].clear()
            self.class_pool.push_back(c)
        else:
            if k.head == slot:
                k.head = st.eq_next
            self.storages[st.eq_prev].eq_next = st.eq_next
            self.storages[st.eq_next].eq_prev = st.eq_prev
        st.eq_class = -1
        st.eq_next = slot
        st.eq_prev = slot

    cdef double _cprime(self, int slot) noexcept:
        """cost + the cost of each distinct class among the evicted neighbours."""
        cdef double total = self.storages[slot].cost
        cdef int n, c
        self.seen.clear()
        for n in self.adjacency[slot]:
            c = self.storages[n].eq_class
            if c >= 0 and self.storages[n].piece < 0:
                if not _contains(self.seen, c):
                    self.seen.push_back(c)
                    total = total + self.classes[c].cost
        return total

    cdef void _refresh_neighbours(self, int slot) noexcept:
        cdef int n
        for n in self.adjacency[slot]:
            if self.storages[n].piece >= 0:
                self.storages[n].cprime = self._cprime(n)
                self._sync(n)

    cdef void _refresh_class(self, int c) noexcept:
        """Recompute c' of the class's frontier (the resident storages next to a member),
        dropping duplicates and entries that no longer touch the class."""
        cdef vector[int]* front = &self.frontier[c]
        cdef size_t k, kept = 0
        cdef int r
        self.stamp_now += 1
        for k in range(front.size()):
            r = front[0][k]
            if self.stamps[r] == self.stamp_now:
                continue
            self.stamps[r] = self.stamp_now
            if not self.storages[r].live or self.storages[r].piece < 0:
                continue
            self.storages[r].cprime = self._cprime(r)
            self._sync(r)
            if _contains(self.seen, c):      # _cprime left r's evicted classes in seen
                front[0][kept] = r
                kept += 1
        front.resize(kept)

    # ---- victim choice ----------------------------------------------------------------------

    cdef inline bint _candidate(self, int idx) noexcept:
        return (self.blocks[self.pieces_[idx].block].flags[_entry(self, idx)] & W_CANDIDATE) != 0

    cdef void _choose(self, size_t size, int policy, double now, vector[int]& victims) noexcept:
        victims.clear()
        self.plan_moves.clear()
        self.plan_dst.clear()
        self.plan_cost = INFINITY
        self.plan_start = -1
        self.plan_len = 0
        if policy == P_NONE:
            return
        if policy == P_COOP:
            if isfinite(self.move_rate) and not self.ideal:
                self._choose_moving(size, now, victims)
            else:
                self._choose_window(size, now, victims)
            return
        cdef int b = self.first_block, k
        cdef int best = -1
        cdef double best_score = INFINITY
        cdef double score, m
        cdef Block* blk
        cdef Piece* p
        while b >= 0:
            blk = &self.blocks[b]
            for k in range(blk.count):
                if not (blk.flags[k] & W_CANDIDATE):
                    continue
                if policy == P_DTR:
                    score = blk.cprime[k] / (<double>blk.size[k] * _stale(blk.last_access[k], now))
                elif policy == P_DTE:
                    m = <double>blk.size[k]
                    p = &self.pieces_[blk.piece[k]]
                    # an ideal arena has no neighbours in memory: nothing adjacent counts
                    if not self.ideal and p.prev >= 0 and self.pieces_[p.prev].free:
                        m = m + self.pieces_[p.prev].size
                    if not self.ideal and p.next >= 0 and self.pieces_[p.next].free:
                        m = m + self.pieces_[p.next].size
                    score = blk.cprime[k] / (m * _stale(blk.last_access[k], now))
                elif policy == P_LRU:
                    score = blk.last_access[k]
                else:
                    score = 1.0 / <double>blk.size[k]
                if best < 0 or score < best_score:
                    best = blk.piece[k]
                    best_score = score
            b = blk.next
        if best >= 0:
            victims.push_back(self.pieces_[best].storage)

    cdef void _choose_window(self, size_t size, double now, vector[int]& victims) noexcept:
        """One pass over the pieces for the cheapest run of free/candidate pieces covering size.

        The blocks are first swept into flat scratch arrays (h = c' / staleness in a branch-free
        loop the compiler vectorises; sizes and flags copied), so the two pointers index plain
        arrays. The window is entries lo..j of the current segment (a maximal run of window
        pieces): each new piece j extends it; while it covers the request it is a candidate (the
        smallest window starting at lo), then lo advances. p_right - p_left is the running-sum
        cost of docs/core.md: both restart at a blocker only, so they are the reference's sums
        bit for bit.
        """
        cdef size_t total = self._fill_scan(now, False)
        cdef size_t best_lo, best_end
        cdef double best_cost, best_sum
        self._scan_evict(size, total, &best_lo, &best_end, &best_cost, &best_sum)
        if best_end != 0:
            self._take_window(best_lo, best_end, best_cost, victims)

    cdef size_t _fill_scan(self, double now, bint pieces) noexcept:
        """Sweep the blocks into the flat scratch arrays, address order: h = c' / staleness (in
        a branch-free loop the compiler vectorises), sizes, flags and, with pieces, the piece
        indices. Returns the number of pieces."""
        cdef size_t total = <size_t>self.n_pieces
        if self.scan_h.size() < total:
            self.scan_h.resize(total)
            self.scan_size.resize(total)
            self.scan_flags.resize(total)
        if pieces and self.scan_piece.size() < total:
            self.scan_piece.resize(total)
        cdef double* hs = self.scan_h.data()
        cdef size_t* ss = self.scan_size.data()
        cdef unsigned char* fs = self.scan_flags.data()
        cdef int* ps = self.scan_piece.data()
        cdef Block* blk
        cdef int b = self.first_block, k
        cdef size_t base = 0
        cdef double s
        while b >= 0:
            blk = &self.blocks[b]
            for k in range(blk.count):
                s = now - blk.last_access[k]
                s = s if s > 1.0 else 1.0           # _stale, in the form that vectorises
                hs[base + k] = blk.cprime[k] / s    # free pieces mirror c' = 0
            memcpy(&ss[base], blk.size, blk.count * sizeof(size_t))
            memcpy(&fs[base], blk.flags, blk.count)
            if pieces:
                memcpy(&ps[base], blk.piece, blk.count * sizeof(int))
            base += blk.count
            b = blk.next
        return total

    cdef void _scan_evict(self, size_t size, size_t total, size_t* best_lo, size_t* best_end,
                          double* best_cost, double* best_sum) noexcept:
        """The evict-only two-pointer scan over the scratch arrays (_choose_window's docstring):
        the cheapest window [best_lo, best_end) (best_end 0: none), its cost (running sums)
        and the running sum p_right at it (what bounds the sums' rounding)."""
        cdef double* hs = self.scan_h.data()
        cdef size_t* ss = self.scan_size.data()
        cdef unsigned char* fs = self.scan_flags.data()
        cdef size_t j, lo = 0, covered = 0
        cdef double cost, p_left = 0.0, p_right = 0.0
        best_lo[0] = 0
        best_end[0] = 0
        best_cost[0] = INFINITY
        best_sum[0] = 0.0
        for j in range(total):
            if not (fs[j] & (W_FREE | W_CANDIDATE)):     # a wall (movable or not: no moves here)
                p_left = 0.0
                p_right = 0.0
                covered = 0
                lo = j + 1
                continue
            p_right = p_right + hs[j]
            covered += ss[j]
            while covered >= size:
                cost = p_right - p_left
                # the first window counts even when its cost is not a number (costs so large
                # their sums overflow: inf - inf), as the reference's
                if cost < best_cost[0] or best_end[0] == 0:
                    best_cost[0] = cost
                    best_lo[0] = lo
                    best_end[0] = j + 1
                    best_sum[0] = p_right
                p_left = p_left + hs[lo]
                covered -= ss[lo]
                lo += 1

    cdef void _take_window(self, size_t best_lo, size_t best_end, double best_cost,
                           vector[int]& victims) noexcept:
        """Make scan entries [best_lo, best_end) the plan: its cost, length, start and victims
        (its candidates, found again in the blocks)."""
        cdef int b = self.first_block, k
        cdef size_t base = 0, j
        cdef Block* blk
        self.plan_cost = best_cost
        self.plan_len = <Py_ssize_t>(best_end - best_lo)
        while base + <size_t>self.blocks[b].count <= best_lo:
            base += self.blocks[b].count
            b = self.blocks[b].next
        blk = &self.blocks[b]
        k = <int>(best_lo - base)
        self.plan_start = <Py_ssize_t>self.pieces_[blk.piece[k]].offset
        for j in range(best_lo, best_end):
            if blk.flags[k] & W_CANDIDATE:
                victims.push_back(self.pieces_[blk.piece[k]].storage)
            k += 1
            if k == blk.count and blk.next >= 0:
                blk = &self.blocks[blk.next]
                k = 0

    cdef void _choose_moving(self, size_t size, double now, vector[int]& victims) noexcept:
        """The coop window when pieces may move (move_rate finite): docs/core.md, "Moving".

        Each piece of a window leaves it by the cheaper of eviction (h) and moving (its bytes
        times move_rate); a movable piece that is not a candidate must move, a piece that is
        neither is a wall. v = that cheaper cost is a lower bound of the piece's share, so the
        two-pointer scan of _choose_window over v finds, from each start, the smallest window
        that covers the request; a window's exact plan (_plan) only grows dearer and less
        feasible as the window grows, so that window is the best from its start. Plans are
        evaluated only where the lower bound can beat the best so far.
        """
        cdef size_t total = self._fill_scan(now, True)
        self.scan_v.resize(total)
        self.scan_bins.clear()
        cdef double* hs = self.scan_h.data()
        cdef double* vs = self.scan_v.data()
        cdef size_t* ss = self.scan_size.data()
        cdef unsigned char* fs = self.scan_flags.data()
        cdef int* ps = self.scan_piece.data()
        cdef size_t j, lo = 0, best_lo = 0, best_end = 0, covered = 0, i
        cdef double m, cost, lb, rate = self.move_rate
        cdef double p_left = 0.0, p_right = 0.0, best_cost = INFINITY
        cdef unsigned char f
        self.scan_nfree.resize(total + 1)
        self.scan_nmand.resize(total + 1)
        self.scan_nopt.resize(total + 1)
        cdef int* nfree = self.scan_nfree.data()
        cdef int* nmand = self.scan_nmand.data()
        cdef int* nopt = self.scan_nopt.data()
        nfree[0] = nmand[0] = nopt[0] = 0
        for j in range(total):
            f = fs[j]
            nfree[j + 1] = nfree[j]
            nmand[j + 1] = nmand[j]
            nopt[j + 1] = nopt[j]
            if f & W_FREE:
                vs[j] = 0.0
                self.scan_bins.push_back(SizeOffset(SIZE_MAX - ss[j], j))
                nfree[j + 1] += 1
            elif f & W_MOVABLE:
                m = <double>ss[j] * rate
                if not (f & W_CANDIDATE):
                    vs[j] = m
                    nmand[j + 1] += 1
                elif m < hs[j]:
                    vs[j] = m
                    nopt[j + 1] += 1
                else:
                    vs[j] = hs[j]
            else:
                vs[j] = hs[j]
        # an upper bound: the cheapest window that only evicts (_choose_window's scan), so that
        # windows that cannot beat it are skipped before the best so far is known
        cdef size_t ev_lo, ev_end
        cdef double ev_cost, ev_sum
        self._scan_evict(size, total, &ev_lo, &ev_end, &ev_cost, &ev_sum)
        # above the exact sum (see lb below)
        cdef double ub = ev_cost + ev_sum * 1e-10 if ev_end != 0 else INFINITY
        if ub != ub:
            ub = INFINITY
        sort(self.scan_bins.begin(), self.scan_bins.end())   # largest first, then lowest address
        p_left = 0.0
        p_right = 0.0
        covered = 0
        lo = 0
        cdef int n_bins = <int>self.scan_bins.size(), n_mand, n_out, n_movers
        cdef vector[size_t]* outb = &self.plan_outb
        cdef vector[int] moved, best_moved
        # two running sums of v: movers' (move costs, often far larger) apart from the others',
        # so a window without movers gets its bound as precisely as _choose_window's sums
        cdef double q_left = 0.0, q_right = 0.0
        for j in range(total):
            if fs[j] == 0:
                p_left = p_right = q_left = q_right = 0.0
                covered = 0
                lo = j + 1
                continue
            if _mover(nmand, nopt, j):
                q_right = q_right + vs[j]
            else:
                p_right = p_right + vs[j]
            covered += ss[j]
            while covered >= size:
                # below the exact sum of v: a difference of running sums may be off by a few
                # of their ulps (n additions err by at most n * 2^-53 of the sum)
                lb = p_right - p_left - p_right * 1e-10
                if nmand[j + 1] + nopt[j + 1] != nmand[lo] + nopt[lo]:
                    lb = lb + (q_right - q_left - q_right * 1e-10)
                n_mand = nmand[j + 1] - nmand[lo]
                n_out = n_bins - (nfree[j + 1] - nfree[lo])
                # quick refusals and the plan without movers need no destinations
                if (best_end == 0 or not (lb >= best_cost)) and n_mand <= n_out \
                        and not (lb > ub):
                    # the largest destinations outside, as many as there are pieces that may
                    # move (a plan never uses more)
                    outb.clear()
                    n_movers = n_mand + nopt[j + 1] - nopt[lo]
                    i = 0
                    while <int>outb.size() < n_movers and i < <size_t>n_bins:
                        if self.scan_bins[i].second < lo or self.scan_bins[i].second > j:
                            outb.push_back(SIZE_MAX - self.scan_bins[i].first)
                        i += 1
                    if self._plan(lo, j + 1, outb[0], moved, &cost):
                        if cost < best_cost or best_end == 0:
                            best_cost = cost
                            best_lo = lo
                            best_end = j + 1
                            best_moved.swap(moved)
                if _mover(nmand, nopt, lo):
                    q_left = q_left + vs[lo]
                else:
                    p_left = p_left + vs[lo]
                covered -= ss[lo]
                lo += 1
        if best_end == 0:
            return
        self.plan_cost = best_cost
        self.plan_start = <Py_ssize_t>self.pieces_[ps[best_lo]].offset
        self.plan_len = <Py_ssize_t>(best_end - best_lo)
        # destinations: the moved pieces, largest first (then lowest address), each into the
        # smallest unused free piece outside the window that holds it (then the lowest address)
        cdef vector[SizeOffset] order, bins
        for i in range(best_moved.size()):
            order.push_back(SizeOffset(SIZE_MAX - ss[best_moved[i]], <size_t>best_moved[i]))
        sort(order.begin(), order.end())
        for i in range(self.scan_bins.size()):
            j = self.scan_bins[i].second
            if j < best_lo or j >= best_end:
                bins.push_back(SizeOffset(SIZE_MAX - self.scan_bins[i].first, j))
        sort(bins.begin(), bins.end())
        cdef vector[size_t] dst_of
        cdef vector[unsigned char] taken, is_moved
        dst_of.assign(best_end - best_lo, 0)
        taken.assign(bins.size(), 0)
        cdef size_t need
        for i in range(order.size()):
            need = SIZE_MAX - order[i].first
            for k in range(<int>bins.size()):
                if not taken[k] and bins[k].first >= need:
                    taken[k] = 1
                    dst_of[order[i].second - best_lo] = self.pieces_[ps[bins[k].second]].offset
                    break
        is_moved.assign(best_end - best_lo, 0)
        for i in range(best_moved.size()):
            is_moved[best_moved[i] - best_lo] = 1
        for j in range(best_lo, best_end):
            if is_moved[j - best_lo]:
                self.plan_moves.push_back(self.pieces_[ps[j]].storage)
                self.plan_dst.push_back(dst_of[j - best_lo])
            elif fs[j] & W_CANDIDATE:
                victims.push_back(self.pieces_[ps[j]].storage)

    cdef bint _plan(self, size_t lo, size_t end, vector[size_t]& outb, vector[int]& moved,
                    double* cost) noexcept:
        """The cheapest plan for the window of scan entries lo..end-1, with outb the sizes of
        the free pieces outside it, largest first: False when its pieces that must move cannot
        all have their own destination. Moved pieces need distinct destinations (one each), so
        a set can move iff its k-th largest piece fits the k-th largest destination; those sets
        are a matroid's independent sets, and adding the optional movers greedily by saving
        (h - move cost, largest first, then lowest address) to the forced ones is optimal.
        moved: the moved entries; cost: the plan's cost, summed in address order."""
        cdef double* hs = self.scan_h.data()
        cdef size_t* ss = self.scan_size.data()
        cdef unsigned char* fs = self.scan_flags.data()
        cdef double rate = self.move_rate, m, total = 0.0
        cdef vector[size_t]* chosen = &self.plan_chosen    # moved sizes, largest first
        cdef vector[pair[double, size_t]] optional
        cdef unsigned char* is_moved
        cdef size_t t, i
        self.plan_flag.assign(end - lo, 0)
        is_moved = self.plan_flag.data()
        chosen.clear()
        moved.clear()
        for t in range(lo, end):
            if outb.empty():
                break               # nothing can move: every piece is evicted (or free)
            if fs[t] & W_FREE or not (fs[t] & W_MOVABLE):
                continue
            m = <double>ss[t] * rate
            if not (fs[t] & W_CANDIDATE):
                if not _fits_with(chosen[0], ss[t], outb):
                    return False
                _insert_desc(chosen[0], ss[t])
                is_moved[t - lo] = 1
            elif m < hs[t]:
                optional.push_back(pair[double, size_t](m - hs[t], t))
        sort(optional.begin(), optional.end())
        for i in range(optional.size()):
            if chosen.size() >= outb.size():
                break
            t = optional[i].second
            if _fits_with(chosen[0], ss[t], outb):
                _insert_desc(chosen[0], ss[t])
                is_moved[t - lo] = 1
        for t in range(lo, end):
            if fs[t] & W_FREE:
                continue
            if is_moved[t - lo]:
                total = total + <double>ss[t] * rate
                moved.push_back(<int>t)
            else:
                total = total + hs[t]
        cost[0] = total
        return True

    # ---- Python API -------------------------------------------------------------------------

    def allocate(self, nbytes, placement=EXPENSIVE, storage=NO_STORAGE):
        """Best-fit placement of nbytes (EXPENSIVE at the low end of the lowest of the smallest
        pieces that hold it, CHEAP at the high end of the highest; LOWEST: first fit by address).

        Returns the offset, or -1 when no free piece fits; never evicts.
        """
        cdef size_t n = _size_arg(nbytes, "the request")
        if n > self.capacity:
            raise self._too_large(n)
        cdef int slot = self._unbound_slot(storage)
        cdef Py_ssize_t offset = self.c_allocate(self.request_size(n), _placement_arg(placement),
                                                 slot)
        if offset >= 0:
            self.c_log_request(n)
        return offset

    def request(self, nbytes, placement=EXPENSIVE):
        """Place nbytes for an anonymous allocation, evicting through the attached owner (see
        attach) when nothing fits; OutOfMemoryError when no owner is attached or nothing can
        make room. The CuPy backend's path: c_request."""
        cdef size_t n = _size_arg(nbytes, "the request")
        return self.c_request(n, _placement_arg(placement))

    def lowest_fit(self, nbytes):
        """The offset an allocation of nbytes with placement LOWEST would take now, or -1."""
        return self.c_lowest_fit(self._checked_request(nbytes))

    def free(self, offset):
        """Free the used piece at offset; a storage bound to it becomes evicted. Refused on a
        backend's arena (``managed_by``): its arrays free their pieces when they die."""
        if self.managed_by is not None:
            raise ValueError(f"the piece at offset {offset} belongs to {self.managed_by}'s "
                             "arrays: it is freed when the last array on it dies; drop the "
                             "array (or the coop.Tensor) instead of freeing its memory")
        self.c_free(_size_arg(offset, "offset"))

    def bind(self, offset, storage):
        """Bind the anonymous used piece at offset to a registered, non-resident storage."""
        cdef size_t off = _size_arg(offset, "offset")
        self._anonymous_piece(off)       # the offset's errors come before the storage's
        cdef int slot = self._unbound_slot(storage)
        if slot < 0:
            raise ValueError("bind needs a storage id >= 0")
        self.c_bind(slot, off)

    def add_storage(self, sid, cost=0.0, neighbors=(), evictable=True):
        """Register storage sid (not resident) with its own cost and neighbours."""
        if isinstance(sid, bool) or isinstance(sid, float):
            raise TypeError(f"storage ids are integers, got {sid!r}")
        cdef int64_t key = _index(sid)
        if key < 0:
            raise ValueError(f"storage ids must be >= 0, got {key}")
        if self.by_sid.count(key):
            raise ValueError(f"storage {key} is already registered")
        cdef double c = _cost_arg(cost)
        cdef vector[int] slots
        for n in neighbors:
            if n != key:
                slots.push_back(self._slot(n))
        self.c_add_storage(key, c, slots, bool(evictable))

    def remove_storage(self, sid):
        """Forget sid; if resident its piece stays used, anonymous, until freed."""
        self.c_remove_storage(self._slot(sid))

    def has_storage(self, sid):
        return self.by_sid.count(_index(sid)) > 0

    def set_cost(self, sid, cost):
        cdef int slot = self._slot(sid)
        cdef double c = _cost_arg(cost)
        cdef Storage* st = &self.storages[slot]
        cdef double old = st.cost
        st.cost = c
        if st.piece >= 0:
            st.cprime = self._cprime(slot)
            self._sync(slot)
        elif st.eq_class >= 0:
            self.classes[st.eq_class].cost = self.classes[st.eq_class].cost + (c - old)
            self._refresh_class(st.eq_class)

    def set_evictable(self, sid, flag):
        self.c_set_evictable(self._slot(sid), bool(flag))

    def pin(self, sid):
        self.c_pin(self._slot(sid), 1)

    def unpin(self, sid):
        cdef int slot = self._slot(sid)
        if self.c_pins(slot) == 0:
            raise ValueError(f"unpin of storage {sid}, which is not pinned")
        self.c_pin(slot, -1)

    def touch(self, sid, now):
        self.c_touch(self._slot(sid), _clock_arg(now))

    def storage_info(self, sid):
        cdef int slot = self._slot(sid)
        cdef Storage st = self.storages[slot]
        cdef Py_ssize_t offset = self.c_offset(slot)
        resident = offset >= 0
        return {
            "resident": resident,
            "offset": offset if resident else None,
            "nbytes": self.pieces_[st.piece].size if resident else 0,
            "cost": self.c_cost(slot),
            "cprime": st.cprime if resident else None,
            "last_access": st.last_access,
            "pins": self.c_pins(slot),
            "evictable": bool(self.c_evictable(slot)),
            "movable": bool(st.movable),
            "class_cost": self.classes[st.eq_class].cost if st.eq_class >= 0 else None,
        }

    def pieces(self):
        """[(offset, size, free, storage)] in address order; storage -1 when free or anonymous."""
        out = []
        cdef int idx = self.first
        while idx >= 0:
            p = self.pieces_[idx]
            out.append((p.offset, p.size, bool(p.free),
                        self.storages[p.storage].sid if p.storage >= 0 else NO_STORAGE))
            idx = self.pieces_[idx].next
        return out

    @property
    def move_cost(self):
        """Cost of moving one byte in policy coop's window (float('inf'), the default: coop
        never moves). Costs are in the unit of the storages' costs."""
        return self.move_rate

    @move_cost.setter
    def move_cost(self, value):
        rate = float(value)
        if rate != rate or rate < 0.0:
            raise ValueError(f"move_cost must be a number >= 0 (inf: never move), got {value!r}")
        self.move_rate = rate

    def set_movable(self, sid, flag):
        self.c_set_movable(self._slot(sid), bool(flag))

    def move(self, sid, offset):
        """Relocate resident sid to the free piece starting at offset (bookkeeping only)."""
        self.c_move(self._slot(sid), _size_arg(offset, "offset"))

    def slide(self, sid, offset):
        """Slide resident sid down to offset, inside the free piece just below it
        (bookkeeping only; see Moving, compaction)."""
        self.c_slide(self._slot(sid), _size_arg(offset, "offset"))

    def compact(self, nbytes, now, evict, slide=None):
        """Compaction inside one window for a request of nbytes (docs/core.md, "Moving"):
        evicts the chosen window's candidates through evict(list of storage ids), then slides
        its movable pieces to its low end, calling slide(storage id, old offset, new offset),
        when given, before each (move the bytes; False refuses). The offset from which nbytes
        are free, or -1."""
        cdef size_t size = self._checked_request(nbytes)
        if slide is not None and not callable(slide):
            raise TypeError(f"slide must be callable or None, got {slide!r}")
        cdef _CallbackEvictor ev = _CallbackEvictor(evict)
        ev.slide_fn = slide
        return self.c_compact(size, _clock_arg(now), ev)

    def choose_plan(self, nbytes, policy, now):
        """What the policy would do for a request of nbytes (does nothing): a dict with
        victims (storage ids), moves ([(storage id, destination offset)], address order) and,
        for coop, the window's cost, start (offset of its first piece) and pieces (its length);
        cost None, start None, pieces 0 when no window is chosen."""
        cdef size_t size = self._checked_request(nbytes)
        cdef int code = policy_code(policy, self.ideal)
        cdef vector[int] victims
        self._choose(size, code, _clock_arg(now), victims)
        return {
            "victims": [self.storages[s].sid for s in victims],
            "moves": [(self.storages[self.plan_moves[k]].sid, self.plan_dst[k])
                      for k in range(self.plan_moves.size())],
            "cost": self.plan_cost if self.plan_start >= 0 else None,
            "start": self.plan_start if self.plan_start >= 0 else None,
            "pieces": self.plan_len,
        }

    def choose_victims(self, nbytes, policy, now):
        """The storages the policy would evict for a request of nbytes (evicts nothing)."""
        cdef size_t size = self._checked_request(nbytes)
        cdef int code = policy_code(policy, self.ideal)
        cdef vector[int] victims
        self._choose(size, code, _clock_arg(now), victims)
        return [self.storages[s].sid for s in victims]

    def allocate_or_evict(self, nbytes, placement, policy, now, evict, storage=NO_STORAGE,
                          move=None):
        """Place nbytes, evicting through evict(list of storage ids) until it fits; a window
        that moves pieces (see move_cost) calls move(storage id, old offset, new offset), when
        given, before the arena relocates each one (copy the bytes there)."""
        cdef size_t n = _size_arg(nbytes, "the request")
        if n > self.capacity:
            raise self._too_large(n)
        cdef int code = policy_code(policy, self.ideal)
        cdef int slot = self._unbound_slot(storage)
        if move is not None and not callable(move):
            raise TypeError(f"move must be callable or None, got {move!r}")
        cdef _CallbackEvictor ev = _CallbackEvictor(evict)
        ev.move_fn = move
        cdef Py_ssize_t offset = self.c_allocate_or_evict(
            self.request_size(n), _placement_arg(placement), code, _clock_arg(now), slot,
            ev, policy)
        self.c_log_request(n)
        return offset

    # ---- the owner and the allocation log -----------------------------------------------------

    def attach(self, Evictor owner not None):
        """Make owner evict for request / c_request when nothing fits (its policy_code, now and
        policy_name say how). Attaching the attached owner again does nothing; ValueError if
        another owner is attached (detach it first)."""
        if self.owner is not None and self.owner is not owner:
            raise ValueError(f"this arena already has an owner ({self.owner!r}); detach it first "
                             "or make one arena per owner")
        self.owner = owner

    def detach(self, Evictor owner not None):
        """Forget owner; request then fails when nothing fits. Nothing happens when no owner is
        attached; ValueError when another owner is."""
        if self.owner is None:
            return
        if self.owner is not owner:
            raise ValueError(f"{owner!r} is not this arena's owner ({self.owner!r} is)")
        self.owner = None

    def start_log(self):
        """Record every allocation and free from now on (restarting an ongoing log)."""
        self.alloc_log.clear()
        self.logging = True

    def take_log(self):
        """Stop recording; the log since start_log as [offset, nbytes, offset, -1, ...]: an
        allocation's offset and byte count (the request's own count for allocate,
        allocate_or_evict, request and c_request; the rounded size for other C callers of
        c_allocate / c_allocate_or_evict), a free's offset and -1, or a move of coop's window
        as five: old offset, LOG_MOVE (-2), new offset, size, storage id. [] if none was
        started."""
        out = self.alloc_log
        self.alloc_log.clear()
        self.logging = False
        return out

    def stats(self):
        return {
            "capacity": self.capacity,
            "ideal": bool(self.ideal),
            "used_bytes": self.used_bytes,
            "peak_used_bytes": self.peak_used,
            "free_bytes": self.capacity - self.used_bytes,
            "largest_free": self.largest_free(),
            "pieces": self.n_pieces,
            "free_pieces": self.n_free_pieces,
            "evictions": self.evictions,
            "bytes_evicted": self.bytes_evicted,
            "searches": self.searches,
            "search_time": self.search_time,
            "fragmentation_rate": self.frag_sum / self.searches if self.searches else 0.0,
            "failed_allocations": self.failed,
            "largest_free_ratio": self.largest_ratio_sum / self.failed if self.failed else 0.0,
            "window_moves": self.moves,
            "bytes_moved": self.bytes_moved,
            "move_cost": self.move_cost_sum,
        }

    def check(self):
        """Verify every invariant; raise AssertionError naming the first one broken."""
        _check(self)

    def __repr__(self):
        return (f"<coop.Arena capacity={self.capacity} used={self.used_bytes} "
                f"pieces={self.n_pieces} free_pieces={self.n_free_pieces}>")

    # ---- C-level API (storage slots; for Cython owners such as the trace replayer) ----------

    cdef Py_ssize_t c_allocate_or_evict(self, size_t size, int placement, int code, double now,
                                        int slot, Evictor evictor, object policy) except -2:
        """The eviction loop: place size bytes (already a request size), evicting the policy's
        victims through evictor until it fits. slot: the storage being placed, or -1."""
        cdef Py_ssize_t off = self.c_allocate(size, placement, slot)
        if off >= 0:
            return off
        cdef size_t depth = self.placing_slots.size()
        self.placing_slots.push_back(slot)
        self.placing_lost.push_back(0)
        try:
            return self._evict_loop(size, placement, code, now, slot, evictor, policy, depth)
        finally:
            self.placing_slots.resize(depth)
            self.placing_lost.resize(depth)

    cdef Py_ssize_t _evict_loop(self, size_t size, int placement, int code, double now,
                                int slot, Evictor evictor, object policy,
                                size_t depth) except -2:
        """c_allocate_or_evict's loop; placing_slots[depth] is slot."""
        cdef vector[int] victims
        cdef vector[int64_t] ids
        cdef vector[size_t] sizes
        cdef int64_t key = self.storages[slot].sid if slot >= 0 else -1
        cdef double t0
        cdef Py_ssize_t off
        cdef size_t free_bytes
        cdef size_t k
        cdef int s
        while True:
            off = self.c_allocate(size, placement, slot)
            if off >= 0:
                return off
            t0 = _monotonic()
            self._choose(size, code, now, victims)
            self.search_time += _monotonic() - t0
            self.searches += 1
            free_bytes = self.capacity - self.used_bytes
            self.frag_sum += <double>free_bytes / <double>self.capacity
            if victims.empty() and self.plan_moves.empty():
                self.failed += 1
                self.largest_ratio_sum += (
                    <double>self.largest_free() / <double>free_bytes if free_bytes else 1.0)
                raise self._oom(size, policy)
            if not self.plan_moves.empty():
                self._do_moves(evictor)
            ids.clear()
            sizes.clear()
            for s in victims:
                ids.push_back(self.storages[s].sid)
                sizes.push_back(self.pieces_[self.storages[s].piece].size)
            if not victims.empty():
                evictor.evict(self, victims)
            still = []
            for k in range(ids.size()):
                if not self.by_sid.count(ids[k]) or self.storages[self.by_sid[ids[k]]].piece < 0:
                    self.evictions += 1
                    self.bytes_evicted += sizes[k]
                elif self._candidate(self.storages[self.by_sid[ids[k]]].piece):
                    still.append(ids[k])
            # a victim the owner could not drop (held elsewhere) must have been made unevictable
            # or pinned by the callback; one left a candidate would be chosen again forever
            if still:
                raise RuntimeError(f"the evict callback left storages {still} resident and "
                                   "evictable; it must free each victim's piece or mark it unevictable")
            # the callback may have removed the storage being placed (and maybe registered one
            # in its slot since): the piece must not go to another storage
            if slot >= 0 and self.placing_lost[depth]:
                raise ValueError(f"storage {key} was removed during its own allocation (by the "
                                 "evict callback); a callback must not remove or re-add it")

    cdef int _do_moves(self, Evictor evictor) except -1:
        """Relocate the chosen window's moved storages: every destination is taken first (so a
        freed source cannot merge into a destination still to take), then evictor.move copies
        each storage's bytes (or refuses: the storage becomes unmovable and its destination is
        freed again), each moved storage is bound to its new piece, evictor.moved runs, and
        the old pieces still used are freed, in the plan's order."""
        cdef bint logging = self.logging
        # a move is no allocation of the caller's: the log has each one as a move, not as the
        # destination's allocation and the source's free
        self.logging = False
        try:
            self._relocate_all(evictor, logging)
        finally:
            self.logging = logging
        return 0

    cdef int _relocate_all(self, Evictor evictor, bint log) except -1:
        cdef vector[int] slots = self.plan_moves
        cdef vector[size_t] dsts = self.plan_dst
        cdef vector[int] news
        cdef vector[size_t] olds
        cdef size_t k, size
        cdef int slot, old
        for k in range(slots.size()):
            news.push_back(self._carve(dsts[k], self.pieces_[self.storages[slots[k]].piece].size,
                                       self.storages[slots[k]].sid))
        for k in range(slots.size()):
            slot = slots[k]
            old = self.storages[slot].piece
            size = self.pieces_[old].size
            if evictor.move(self, slot, self.pieces_[old].offset, dsts[k]):
                olds.push_back(self.pieces_[old].offset)
                self._rebind(slot, news[k])
                if log:      # (old, LOG_MOVE, new, size, sid): where the storage's bytes went
                    self.alloc_log.push_back(<int64_t>olds.back())
                    self.alloc_log.push_back(-2)                # LOG_MOVE
                    self.alloc_log.push_back(<int64_t>dsts[k])
                    self.alloc_log.push_back(<int64_t>size)
                    self.alloc_log.push_back(self.storages[slot].sid)
                self.moves += 1
                self.bytes_moved += size
                self.move_cost_sum = self.move_cost_sum + <double>size * self.move_rate
            else:
                self.c_set_movable(slot, False)
                olds.push_back(dsts[k])
        evictor.moved(self)
        cdef size_t nb
        cdef int s_old
        for k in range(olds.size()):
            # the owner may have freed an old piece already (its array died in moved())
            if self.c_used_piece(olds[k], &nb, &s_old) == 0 and s_old < 0:
                self.c_free(olds[k])
        return 0

    cdef int c_add_storage(self, int64_t key, double cost, vector[int]& neighbours,
                           bint evictable) except -1:
        """Register key (not resident) with neighbour slots (distinct from its own); its slot."""
        cdef int slot
        if not self.storage_pool.empty():
            slot = self.storage_pool.back()
            self.storage_pool.pop_back()
        else:
            slot = <int>self.storages.size()
            self.storages.push_back(Storage(0, 0.0, 0.0, 0.0, -1, 0, False, -1, 0, 0, False, True))
            self.adjacency.push_back(vector[int]())
            self.stamps.push_back(0)
        self.storages[slot] = Storage(key, cost, cost, 0.0, -1, 0, evictable, -1, slot, slot, True,
                                      True)
        self.adjacency[slot].clear()
        self.by_sid[key] = slot
        cdef int n_slot
        for n_slot in neighbours:
            if not _contains(self.adjacency[slot], n_slot):
                self.adjacency[slot].push_back(n_slot)
                self.adjacency[n_slot].push_back(slot)
        return slot

    cdef void c_remove_storage(self, int slot) noexcept:
        cdef Storage* st = &self.storages[slot]
        cdef size_t i
        for i in range(self.placing_slots.size()):
            if self.placing_slots[i] == slot:
                self.placing_lost[i] = 1
        cdef int c = st.eq_class
        cdef int n, k
        if st.piece >= 0:
            self.pieces_[st.piece].storage = -1
            k = _entry(self, st.piece)
            self.blocks[self.pieces_[st.piece].block].flags[k] = 0
            self.blocks[self.pieces_[st.piece].block].cprime[k] = 0.0
            st.piece = -1
        for n in self.adjacency[slot]:
            _remove(self.adjacency[n], slot)
        if c >= 0:
            # only an evicted storage counts in its neighbours' c': refresh them now that it
            # is gone (the class's frontier, and the neighbours themselves if the class died)
            self._class_leave(slot)
            if self.classes[c].head >= 0:
                self._refresh_class(c)
            for n in self.adjacency[slot]:
                if self.storages[n].piece >= 0:
                    self.storages[n].cprime = self._cprime(n)
                    self._sync(n)
        self.adjacency[slot].clear()
        self.by_sid.erase(self.storages[slot].sid)
        self.storages[slot].live = False
        self.storage_pool.push_back(slot)

    cdef Py_ssize_t c_request(self, size_t nbytes, int placement) except -2:
        """Place nbytes (the request's own count, not yet rounded) for an anonymous allocation:
        best fit; when nothing fits, the eviction loop under the attached owner's policy_code,
        now and policy_name, the owner evicting. No owner: OutOfMemoryError, counted as a
        failed search like policy "none". Larger than the capacity: OutOfMemoryError, nothing
        counted. The offset (logged with nbytes)."""
        if nbytes > self.capacity:
            raise self._too_large(nbytes)
        cdef size_t size = self.request_size(nbytes)
        cdef Py_ssize_t offset = self.c_allocate(size, placement, -1)
        cdef Evictor owner = self.owner
        if offset < 0:
            if owner is None:
                offset = self.c_allocate_or_evict(size, placement, P_NONE, 0.0, -1, None, "none")
            else:
                if owner.policy_code < P_COOP or owner.policy_code > P_NONE:
                    raise ValueError(f"the arena's owner has no policy: policy_code "
                                     f"{owner.policy_code} is none of coop._core.POLICIES' codes")
                if self.ideal and owner.policy_code == P_COOP:
                    raise ValueError("an ideal arena has no addresses to scan: its owner needs a "
                                     "loop policy (dtr, dte, lru, size) or none")
                offset = self.c_allocate_or_evict(size, placement, owner.policy_code, owner.now,
                                                  -1, owner, owner.policy_name)
        self.c_log_request(nbytes)
        return offset

    cdef int c_bind(self, int slot, size_t offset) except -1:
        """Bind the anonymous used piece starting at offset to slot, a registered storage that
        is not resident; ValueError naming the problem otherwise."""
        cdef int idx = self._anonymous_piece(offset)
        if slot < 0 or <size_t>slot >= self.storages.size() or not self.storages[slot].live:
            raise ValueError(f"bind to offset {offset}: storage slot {slot} is not registered")
        if self.storages[slot].piece >= 0:
            raise ValueError(f"bind to offset {offset}: storage {self.storages[slot].sid} is "
                             f"already resident at offset "
                             f"{self.pieces_[self.storages[slot].piece].offset}")
        self._bind(idx, slot)
        return 0

    cdef void c_pin(self, int slot, int delta) noexcept:
        self.storages[slot].pins += delta
        self._sync(slot)

    cdef void c_touch(self, int slot, double now) noexcept:
        self.storages[slot].last_access = now
        self._sync(slot)

    cdef void c_set_evictable(self, int slot, bint flag) noexcept:
        self.storages[slot].evictable = flag
        self._sync(slot)

    cdef void c_set_movable(self, int slot, bint flag) noexcept:
        self.storages[slot].movable = flag
        self._sync(slot)

    cdef bint c_movable(self, int slot) noexcept:
        return self.storages[slot].movable

    cdef int c_move(self, int slot, size_t dst) except -1:
        """Relocate resident slot to the low end of the free piece starting at dst (its bytes
        are the owner's to copy): the new piece is bound to slot, the old one freed without
        evicting anything. ValueError naming the problem when slot is not resident or no free
        piece that holds it starts at dst."""
        if slot < 0 or <size_t>slot >= self.storages.size() or not self.storages[slot].live:
            raise ValueError(f"move to offset {dst}: storage slot {slot} is not registered")
        cdef int old = self.storages[slot].piece
        if old < 0:
            raise ValueError(f"move of storage {self.storages[slot].sid} to offset {dst}: it is "
                             "not resident")
        cdef int idx = self._carve(dst, self.pieces_[old].size, self.storages[slot].sid)
        self._rebind(slot, idx)
        self.c_free(self.pieces_[old].offset)      # anonymous now: freed, nothing evicted
        return 0

    cdef int c_slide(self, int slot, size_t dst) except -1:
        """Slide resident slot's piece down to dst, inside the free piece just below it (the
        old and new ranges may overlap: the owner's copy is a memmove); the bytes its high end
        leaves become free. Logged as a move; counted by c_compact, not here. ValueError
        naming the problem otherwise (nothing changed)."""
        if slot < 0 or <size_t>slot >= self.storages.size() or not self.storages[slot].live:
            raise ValueError(f"slide to offset {dst}: storage slot {slot} is not registered")
        cdef int idx = self.storages[slot].piece
        cdef int64_t sid = self.storages[slot].sid
        if idx < 0:
            raise ValueError(f"slide of storage {sid} to offset {dst}: it is not resident")
        cdef size_t src = self.pieces_[idx].offset, size = self.pieces_[idx].size
        cdef int low = self.pieces_[idx].prev, nxt = self.pieces_[idx].next, below, rest
        if (self.ideal or dst % self.alignment or dst >= src or low < 0
                or not self.pieces_[low].free or self.pieces_[low].offset > dst):
            raise ValueError(f"slide of storage {sid} from offset {src} to {dst}: {dst} is not "
                             "an aligned offset inside the free piece just below it")
        cdef size_t shift = src - dst, f = self.pieces_[low].offset
        self._unindex_free(low)
        self.by_offset.erase(src)
        if dst > f:
            self.pieces_[low].size = dst - f
            _entry_mirror(self, low)
            self._index_free(low)
        else:
            below = self.pieces_[low].prev
            self.pieces_[idx].prev = below
            if below >= 0:
                self.pieces_[below].next = idx
            else:
                self.first = idx
            self._drop_piece(low)          # its offset is dst: dropped before idx takes it
            self.n_pieces -= 1
        self.pieces_[idx].offset = dst
        self.by_offset[dst] = idx
        if nxt >= 0 and self.pieces_[nxt].free:
            self._unindex_free(nxt)
            self.by_offset.erase(self.pieces_[nxt].offset)
            self.pieces_[nxt].offset -= shift
            self.pieces_[nxt].size += shift
            self.by_offset[self.pieces_[nxt].offset] = nxt
            _entry_mirror(self, nxt)
            self._index_free(nxt)
        else:
            rest = self._new_piece(dst + size, shift, idx, nxt, True)
            self.pieces_[idx].next = rest
            if nxt >= 0:
                self.pieces_[nxt].prev = rest
            self._index_free(rest)
            self.n_pieces += 1
        if self.logging:      # (old, LOG_MOVE, new, size, sid), as the window's moves
            self.alloc_log.push_back(<int64_t>src)
            self.alloc_log.push_back(-2)
            self.alloc_log.push_back(<int64_t>dst)
            self.alloc_log.push_back(<int64_t>size)
            self.alloc_log.push_back(sid)
        return 0

    cdef Py_ssize_t c_compact(self, size_t size, double now, Evictor evictor) except -2:
        """Compaction inside one window (docs/core.md, "Moving"): the cheapest run of adjacent
        pieces, none a wall, whose free and candidate bytes cover size (candidates cost h,
        movable non-candidates a copy each); its candidates are evicted through evictor, then
        its movable pieces slide to its low end in address order (evictor.slide copies each
        one's bytes, memmove-like), so that size bytes are free from the returned offset. -1
        when no run covers size, or when the evictor refused a victim or a slide (what was
        done stays done: a valid state). Only with moving on."""
        if self.ideal or not self.move_rate < INFINITY:
            return -1
        cdef size_t total = <size_t>self.n_pieces
        self._fill_scan(now, False)
        cdef double* hs = self.scan_h.data()
        cdef size_t* ss = self.scan_size.data()
        cdef unsigned char* fs = self.scan_flags.data()
        cdef double rate = self.move_rate, cost, p_left = 0.0, p_right = 0.0, best_cost = INFINITY
        cdef size_t j, lo = 0, best_lo = 0, best_end = 0, covered = 0
        for j in range(total):
            if fs[j] == 0:        # a wall: pinned, anonymous, or neither evictable nor movable
                p_left = 0.0
                p_right = 0.0
                covered = 0
                lo = j + 1
                continue
            if fs[j] & (W_FREE | W_CANDIDATE):
                p_right = p_right + hs[j]
                covered += ss[j]
            else:                 # a mover: stays in the window, its bytes cost a copy
                p_right = p_right + <double>ss[j] * rate
            while covered >= size:
                cost = p_right - p_left
                if cost < best_cost or best_end == 0:
                    best_cost = cost
                    best_lo = lo
                    best_end = j + 1
                if fs[lo] & (W_FREE | W_CANDIDATE):
                    p_left = p_left + hs[lo]
                    covered -= ss[lo]
                else:
                    p_left = p_left + <double>ss[lo] * rate
                lo += 1
        if best_end == 0:
            return -1
        # the window's victims and movers (storage ids: the callbacks may reuse slots)
        cdef vector[int] victims
        cdef vector[int64_t] ids, movers
        cdef vector[size_t] sizes
        cdef int idx = self.first, slot
        cdef size_t cursor
        for j in range(best_lo):
            idx = self.pieces_[idx].next
        cursor = self.pieces_[idx].offset
        for j in range(best_lo, best_end):
            if fs[j] & W_CANDIDATE:
                victims.push_back(self.pieces_[idx].storage)
                ids.push_back(self.storages[self.pieces_[idx].storage].sid)
                sizes.push_back(self.pieces_[idx].size)
            elif fs[j] & W_MOVABLE:
                movers.push_back(self.storages[self.pieces_[idx].storage].sid)
            idx = self.pieces_[idx].next
        if not victims.empty():
            evictor.evict(self, victims)
        cdef bint refused = False
        cdef size_t k
        for k in range(ids.size()):
            if not self.by_sid.count(ids[k]) or self.storages[self.by_sid[ids[k]]].piece < 0:
                self.evictions += 1
                self.bytes_evicted += sizes[k]
            else:
                refused = True
        if refused:
            return -1
        cdef size_t src, nbytes
        for k in range(movers.size()):
            if not self.by_sid.count(movers[k]):
                return -1
            slot = self.by_sid[movers[k]]
            idx = self.storages[slot].piece
            if idx < 0:
                return -1
            src = self.pieces_[idx].offset
            nbytes = self.pieces_[idx].size
            if src != cursor:
                if not evictor.slide(self, slot, src, cursor):
                    self.c_set_movable(slot, False)
                    return -1
                self.c_slide(slot, cursor)
                self.moves += 1
                self.bytes_moved += nbytes
                self.move_cost_sum = self.move_cost_sum + <double>nbytes * rate
            cursor += nbytes
        if (not self.by_offset.count(cursor) or not self.pieces_[self.by_offset[cursor]].free
                or self.pieces_[self.by_offset[cursor]].size < size):
            return -1
        return <Py_ssize_t>cursor

    cdef int _carve(self, size_t dst, size_t size, int64_t sid) except -1:
        """An anonymous used piece of size at the low end of the free piece starting at dst."""
        cdef unordered_map[size_t, int].iterator it = self.by_offset.find(dst)
        if (it == self.by_offset.end() or not self.pieces_[deref(it).second].free
                or self.pieces_[deref(it).second].size < size):
            raise ValueError(f"move of storage {sid} ({size} bytes) to offset {dst}: no free "
                             f"piece of at least {size} bytes starts there")
        cdef int idx = deref(it).second
        self._unindex_free(idx)
        if self.pieces_[idx].size > size:
            self._split_low(idx, size)
        cdef Piece* p = &self.pieces_[idx]
        p.free = False
        _entry_mirror(self, idx)
        self.used_bytes += size
        if self.used_bytes > self.peak_used:
            self.peak_used = self.used_bytes
        if self.logging:
            self.alloc_log.push_back(<int64_t>dst)
            self.alloc_log.push_back(<int64_t>size)
        return idx

    cdef void _rebind(self, int slot, int idx) noexcept:
        """Resident slot's storage moves to the anonymous used piece idx; its old piece stays
        used, anonymous (a wall in the block mirror)."""
        cdef int old = self.storages[slot].piece
        cdef int k = _entry(self, old)
        self.pieces_[old].storage = -1
        self.blocks[self.pieces_[old].block].flags[k] = 0
        self.blocks[self.pieces_[old].block].cprime[k] = 0.0
        self.pieces_[idx].storage = slot
        self.storages[slot].piece = idx
        self._sync(slot)

    cdef double c_cost(self, int slot) noexcept:
        """The storage's own cost."""
        return self.storages[slot].cost

    cdef int c_pins(self, int slot) noexcept:
        return self.storages[slot].pins

    cdef bint c_evictable(self, int slot) noexcept:
        return self.storages[slot].evictable

    cdef int64_t c_sid(self, int slot) noexcept:
        """The owner's id of the storage in slot (what c_add_storage was given)."""
        return self.storages[slot].sid

    cdef Py_ssize_t c_offset(self, int slot) noexcept:
        """Offset of the storage's piece; -1 when it is not resident."""
        cdef int idx = self.storages[slot].piece
        return <Py_ssize_t>self.pieces_[idx].offset if idx >= 0 else -1

    cdef int c_used_piece(self, size_t offset, size_t* size, int* slot) noexcept:
        """0 and the used piece's size and storage slot (-1: anonymous) when a used piece starts
        at offset; -1 (size and slot untouched) when none does."""
        cdef unordered_map[size_t, int].iterator it = self.by_offset.find(offset)
        if it == self.by_offset.end() or self.pieces_[deref(it).second].free:
            return -1
        cdef Piece* p = &self.pieces_[deref(it).second]
        size[0] = p.size
        slot[0] = p.storage
        return 0

    cdef void c_log_request(self, size_t nbytes) noexcept:
        """While logging: record nbytes as the byte count of the allocation logged last (call it
        right after a successful c_allocate / c_allocate_or_evict when the request's own count
        is known; they log the rounded size)."""
        if self.logging and not self.alloc_log.empty():
            self.alloc_log[self.alloc_log.size() - 1] = <int64_t>nbytes

    # ---- argument checks --------------------------------------------------------------------

    cdef size_t _checked_request(self, nbytes) except? 0:
        cdef size_t n = _size_arg(nbytes, "the request")
        if n > self.capacity:
            raise self._too_large(n)
        return self.request_size(n)

    cdef object _too_large(self, size_t n):
        free_bytes = self.capacity - self.used_bytes
        return OutOfMemoryError(
            f"coop: a request of {n} bytes is larger than the whole arena "
            f"(budget {self.capacity} bytes, {free_bytes} bytes free, largest free range "
            f"{self.largest_free()} bytes); raise the budget above {n} bytes",
            n, self.capacity, free_bytes, self.largest_free())

    cdef int _anonymous_piece(self, size_t offset) except -1:
        """The used, anonymous piece starting at offset; ValueError naming why there is none."""
        cdef unordered_map[size_t, int].iterator it = self.by_offset.find(offset)
        if it == self.by_offset.end():
            raise ValueError(f"bind to unknown offset {offset}: no piece starts there")
        cdef int idx = deref(it).second
        if self.pieces_[idx].free:
            raise ValueError(f"bind to offset {offset}: the piece is free; allocate it first")
        if self.pieces_[idx].storage >= 0:
            raise ValueError(f"bind to offset {offset}: the piece already holds storage "
                             f"{self.storages[self.pieces_[idx].storage].sid}")
        return idx

    cdef int _unbound_slot(self, storage) except -2:
        if isinstance(storage, bool) or isinstance(storage, float):
            raise TypeError(f"storage ids are integers, got {storage!r}")
        if _index(storage) == NO_STORAGE:
            return -1
        cdef int slot = self._slot(storage)
        if self.storages[slot].piece >= 0:
            raise ValueError(f"storage {storage} is already resident at offset "
                             f"{self.pieces_[self.storages[slot].piece].offset}")
        return slot

    cdef object _oom(self, size_t size, policy):
        free_bytes = self.capacity - self.used_bytes
        largest = self.largest_free()
        # what blocks: pinned pieces (held by the running kernel, or pinned by the caller) and
        # unpinned walls (unevictable and unmovable), and the largest range free of both
        cdef size_t pinned = 0, walls = 0, run = 0, window = 0
        cdef int n_pinned = 0, n_walls = 0
        cdef int idx = self.first
        cdef Storage* st
        while idx >= 0:
            if not self.pieces_[idx].free and self.pieces_[idx].storage >= 0:
                st = &self.storages[self.pieces_[idx].storage]
                if st.pins != 0:
                    pinned += self.pieces_[idx].size
                    n_pinned += 1
                    run = 0
                    idx = self.pieces_[idx].next
                    continue
                if not st.evictable and not (st.movable and isfinite(self.move_rate)):
                    walls += self.pieces_[idx].size
                    n_walls += 1
                    run = 0
                    idx = self.pieces_[idx].next
                    continue
            elif not self.pieces_[idx].free:
                pinned += self.pieces_[idx].size     # anonymous: a caller's allocation
                n_pinned += 1
                run = 0
                idx = self.pieces_[idx].next
                continue
            run += self.pieces_[idx].size
            window = run if run > window else window
            idx = self.pieces_[idx].next
        return OutOfMemoryError(
            f"coop: cannot allocate {size} bytes under policy {policy!r}: budget {self.capacity} "
            f"bytes, {free_bytes} bytes free, largest free range {largest} bytes, and nothing "
            f"left to evict (pinned or anonymous: {n_pinned} pieces, {pinned} bytes; "
            f"unevictable: {n_walls} pieces, {walls} bytes; the largest range free of them: "
            f"{window} bytes); raise the budget, or free or unpin tensors",
            size, self.capacity, free_bytes, largest, pinned, walls, window)


include "_blocks.pxi"
include "_check.pxi"


cdef inline double _stale(double last_access, double now) noexcept:
    cdef double s = now - last_access
    # max(s, 1.0), and 1.0 for NaN (an infinite clock minus itself): a score stays a number
    return s if s > 1.0 else 1.0


cdef inline unsigned char _flags(Storage* st) noexcept:
    """A resident storage's scan flags: W_CANDIDATE and W_MOVABLE bits, 0 for a wall."""
    if st.pins != 0:
        return 0
    return (W_CANDIDATE if st.evictable else 0) | (W_MOVABLE if st.movable else 0)


cdef inline bint _mover(int* nmand, int* nopt, size_t j) noexcept:
    """Whether scan entry j may move (must, or more cheaply than it is evicted)."""
    return nmand[j + 1] + nopt[j + 1] != nmand[j] + nopt[j]


cdef bint _fits_with(vector[size_t]& chosen, size_t x, vector[size_t]& outb) noexcept:
    """Whether the sizes chosen (largest first) plus x have distinct destinations among outb
    (largest first): the k-th largest size fits the k-th largest destination, for every k."""
    cdef size_t n = chosen.size() + 1, k, i = 0, y
    cdef bint placed = False
    if n > outb.size():
        return False
    for k in range(n):
        if not placed and (i == chosen.size() or x > chosen[i]):
            y = x
            placed = True
        else:
            y = chosen[i]
            i += 1
        if y > outb[k]:
            return False
    return True


cdef void _insert_desc(vector[size_t]& chosen, size_t x) noexcept:
    cdef size_t i = 0
    while i < chosen.size() and chosen[i] >= x:
        i += 1
    chosen.insert(chosen.begin() + i, x)


cdef inline bint _contains(vector[int]& items, int value) noexcept:
    cdef int x
    for x in items:
        if x == value:
            return True
    return False


cdef inline void _remove(vector[int]& items, int value) noexcept:
    cdef size_t i
    for i in range(items.size()):
        if items[i] == value:
            items[i] = items.back()
            items.pop_back()
            return


cdef inline size_t deref_offset(cset[SizeOffset].iterator it) noexcept:
    return deref(it).second


cdef class Evictor:
    """Frees victims for the eviction loop; as an arena's owner it also names the policy and
    clock that Arena.c_request evicts with (policy_code, now, policy_name: set by subclasses)."""

    def __cinit__(self, *args, **kwargs):
        self.policy_code = P_NONE
        self.now = 0.0
        self.policy_name = "none"

    cdef int evict(self, Arena arena, vector[int]& victims) except -1:
        raise NotImplementedError

    cdef int move(self, Arena arena, int slot, size_t src, size_t dst) except -1:
        """Copy resident slot's bytes from its piece at src to the (already taken) piece at
        dst and return 1; the arena then binds slot to dst and frees src. 0 refuses (the
        storage becomes unmovable). The default copies nothing (owners of sizes only)."""
        return 1

    cdef int moved(self, Arena arena) except -1:
        """The window's moved storages are bound to their new pieces; their old pieces are
        anonymous now, and the arena frees those still used after this returns (an owner whose
        memory objects free their pieces when they die may let them die here)."""
        return 0

    cdef int slide(self, Arena arena, int slot, size_t src, size_t dst) except -1:
        """Move resident slot's bytes from src down to dst (dst < src; the ranges may overlap:
        copy as memmove does) and make the memory at dst its own, freeing nothing, and return
        1; the arena then slides its piece (Arena.c_slide). 0 refuses (the storage becomes
        unmovable). The default copies nothing (owners of sizes only)."""
        return 1


cdef class _CallbackEvictor(Evictor):
    """Evictor over a Python callable: evict(list of storage ids)."""

    cdef object fn
    cdef object move_fn
    cdef object slide_fn

    def __cinit__(self, fn, *args, **kwargs):
        self.fn = fn
        self.move_fn = None
        self.slide_fn = None

    cdef int evict(self, Arena arena, vector[int]& victims) except -1:
        self.fn([arena.c_sid(s) for s in victims])
        return 0

    cdef int move(self, Arena arena, int slot, size_t src, size_t dst) except -1:
        if self.move_fn is not None:
            return 0 if self.move_fn(arena.c_sid(slot), src, dst) is False else 1
        return 1

    cdef int slide(self, Arena arena, int slot, size_t src, size_t dst) except -1:
        if self.slide_fn is not None:
            return 0 if self.slide_fn(arena.c_sid(slot), src, dst) is False else 1
        return 1


cdef class CallbackOwner(_CallbackEvictor):
    """An arena owner over a Python callable, for tests and simple users:
    ``arena.attach(CallbackOwner(evict, "dtr"))`` makes ``arena.request`` evict through
    ``evict(list of storage ids)`` (which must free each victim's piece or make it unevictable)
    under core policy ``policy`` (one of coop.POLICIES), with staleness measured at ``now``."""

    def __cinit__(self, evict, policy, *args, **kwargs):
        if not callable(evict):
            raise TypeError(f"evict must be callable, got {evict!r}")
        self.policy_code = policy_code(policy, False)
        self.policy_name = policy

    @property
    def policy(self):
        """The core policy's name."""
        return self.policy_name

    @property
    def now(self):
        """The logical clock the owner's evictions score staleness against (writable)."""
        return self.now

    @now.setter
    def now(self, value):
        self.now = _clock_arg(value)

    def __repr__(self):
        return f"<coop.CallbackOwner policy={self.policy_name!r} now={self.now}>"
