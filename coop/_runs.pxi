# The scan runs (included by _core.pyx): the pieces' scan inputs by value, in address order.
#
# Every piece has exactly one entry, in runs[piece.run] (where entry() finds it); walking the run
# chain from first visits the pieces in address order. An insert into a full run splits it (see
# insert); a run merges with a neighbor when the two hold <= RUN_LEN / 2 entries together, so any
# two neighboring runs hold more than RUN_LEN / 2 and a sweep over N pieces touches fewer than
# 4 N / RUN_LEN + 1 runs. A piece records its run, not its position: shifting entries within a run
# is then a plain memmove, and only entries that change runs (at most RUN_LEN per operation)
# rewrite their piece. Every write to an entry happens with the GIL held and no Python call in
# between, like the rest of the arena.
from libc.string cimport memmove


cdef inline unsigned char _flags(Storage* st, bint offloads) noexcept:
    """A resident storage's scan flags: W_CANDIDATE (it may be evicted, or offloaded when the
    scan counts offloads) and W_MOVABLE bits, 0 for a wall."""
    if st.pins != 0:
        return 0
    return ((W_CANDIDATE if st.evictable or (offloads and st.offload < INFINITY) else 0)
            | (W_MOVABLE if st.movable else 0))


cdef inline double _way_out(Storage* st, bint offloads) noexcept:
    """What a resident candidate costs to leave, the scan's c': when the scan counts offloads,
    the cheaper of its eviction (c', when evictable) and its offload (Storage.offload), on one
    scale (docs/core.md); else, and for a storage that may not be offloaded, c' (ties:
    eviction)."""
    if offloads and st.offload < INFINITY and (st.offload < st.cprime or not st.evictable):
        return st.offload
    return st.cprime


cdef inline double _mlimit(unsigned char flags, double cprime) noexcept:
    """An entry's move limit (ScanRun.mlimit): +inf for a movable piece that is not a candidate
    (it must move), its c' for a movable candidate (it moves when the copy costs less), -inf
    for a piece that never moves; so the moving window's sweep decides by doubles alone."""
    if not (flags & W_MOVABLE):
        return -INFINITY
    return cprime if flags & W_CANDIDATE else INFINITY


@cython.final
cdef class ScanRuns:
    """The scan entries of a piece table's pieces, in runs of up to RUN_LEN."""

    def __cinit__(self):
        self.first = -1
        self.pool = -1

    cdef int new_run(self, int prev, int next) noexcept:
        """An empty run linked between prev and next (either may be -1)."""
        cdef int r
        if self.pool >= 0:
            r = self.pool
            self.pool = self.runs[r].next
        else:
            r = <int>self.runs.size()
            self.runs.resize(self.runs.size() + 1)
        cdef ScanRun* run = &self.runs[r]
        cdef int k
        run.count = 0
        for k in range(RUN_LEN):
            run.piece[k] = -1
        run.prev = prev
        run.next = next
        if prev >= 0:
            self.runs[prev].next = r
        else:
            self.first = r
        if next >= 0:
            self.runs[next].prev = r
        return r

    cdef void unlink(self, int r) noexcept:
        cdef ScanRun* run = &self.runs[r]
        if run.prev >= 0:
            self.runs[run.prev].next = run.next
        else:
            self.first = run.next
        if run.next >= 0:
            self.runs[run.next].prev = run.prev
        run.count = 0
        run.next = self.pool
        self.pool = r

    cdef inline int entry(self, int idx) noexcept:
        """Position of piece idx's entry in its run: where it was last seen (Piece.at_k) when it
        is still there (a shift moves entries without telling their pieces), else a search over
        all RUN_LEN slots (unused ones hold -1) without an early exit, which the compiler
        vectorises and the CPU predicts, remembered for next time."""
        cdef Piece* p = &self.pieces[0][idx]
        cdef ScanRun* run = &self.runs[p.run]
        cdef int k, pos = p.at_k
        if run.piece[pos] == idx:
            return pos
        pos = 0
        for k in range(RUN_LEN):
            pos = k if run.piece[k] == idx else pos
        p.at_k = <unsigned char>pos
        return pos

    cdef inline void mirror_piece(self, int idx) noexcept:
        """Mirror an unbound piece's size and state into its entry (a free piece has c' = 0)."""
        cdef ScanRun* run = &self.runs[self.pieces[0][idx].run]
        cdef int k = self.entry(idx)
        run.size[k] = self.pieces[0][idx].size
        run.dsize[k] = <double>run.size[k]
        run.flags[k] = W_FREE if self.pieces[0][idx].free else 0
        run.cprime[k] = 0.0
        run.mlimit[k] = -INFINITY

    cdef inline void mirror_storage(self, int idx, Storage* st) noexcept:
        """Mirror the scan inputs of st, bound to piece idx, into its entry."""
        cdef ScanRun* run = &self.runs[self.pieces[0][idx].run]
        cdef int k = self.entry(idx)
        run.cprime[k] = _way_out(st, self.offloads)
        run.last_access[k] = st.last_access
        run.flags[k] = _flags(st, self.offloads)
        run.mlimit[k] = _mlimit(run.flags[k], run.cprime[k])

    cdef inline void mirror_wall(self, int idx) noexcept:
        """Used piece idx lost its storage: its entry is an anonymous wall."""
        cdef ScanRun* run = &self.runs[self.pieces[0][idx].run]
        cdef int k = self.entry(idx)
        run.flags[k] = 0
        run.cprime[k] = 0.0
        run.mlimit[k] = -INFINITY

    cdef inline unsigned char flags(self, int idx) noexcept:
        return self.runs[self.pieces[0][idx].run].flags[self.entry(idx)]

    cdef inline void move_entry(self, ScanRun* dst, int r, int k, ScanRun* src, int j) noexcept:
        """Copy src's entry j to dst's position k (dst is run r) and point its piece there."""
        dst.piece[k] = src.piece[j]
        dst.flags[k] = src.flags[j]
        dst.size[k] = src.size[j]
        dst.dsize[k] = src.dsize[j]
        dst.cprime[k] = src.cprime[j]
        dst.mlimit[k] = src.mlimit[j]
        dst.last_access[k] = src.last_access[j]
        self.pieces[0][dst.piece[k]].run = r
        self.pieces[0][dst.piece[k]].at_k = <unsigned char>k

    cdef void shift(self, int r, int k, int end, int by) noexcept:
        """Move entries k..end-1 of run r by `by` (+1 or -1) positions; count is unchanged."""
        cdef ScanRun* run = &self.runs[r]
        cdef int n = end - k
        if n <= 0:
            return
        memmove(&run.piece[k + by], &run.piece[k], n * sizeof(int))
        memmove(&run.flags[k + by], &run.flags[k], n * sizeof(unsigned char))
        memmove(&run.size[k + by], &run.size[k], n * sizeof(size_t))
        memmove(&run.dsize[k + by], &run.dsize[k], n * sizeof(double))
        memmove(&run.cprime[k + by], &run.cprime[k], n * sizeof(double))
        memmove(&run.mlimit[k + by], &run.mlimit[k], n * sizeof(double))
        memmove(&run.last_access[k + by], &run.last_access[k], n * sizeof(double))

    cdef void insert(self, int after, int idx) noexcept:
        """Give piece idx (fresh, unbound) the entry just after piece after's, or the first one of
        a new first run when after is -1 (the arena's only piece)."""
        cdef int r, k, m, k2, upper = -1
        cdef ScanRun* run
        cdef ScanRun* other
        if after < 0:
            r = self.new_run(-1, -1)
            k = 0
        else:
            r = self.pieces[0][after].run
            k = self.entry(after) + 1         # >= 1
            run = &self.runs[r]
            if run.count == RUN_LEN:
                # split at k when it is near an end, so that a run of inserts at one place leaves
                # full runs behind it (the scans sweep those fastest); else in halves
                m = k if k < RUN_LEN // 4 or k > RUN_LEN - RUN_LEN // 4 else RUN_LEN // 2
                upper = self.new_run(r, run.next)
                run = &self.runs[r]
                other = &self.runs[upper]
                for k2 in range(m, RUN_LEN):
                    self.move_entry(other, upper, k2 - m, run, k2)
                other.count = RUN_LEN - m
                run.count = m
                for k2 in range(m, RUN_LEN):
                    run.piece[k2] = -1
                if k > m or m == RUN_LEN:
                    r = upper
                    k -= m
            self.shift(r, k, self.runs[r].count, 1)
        run = &self.runs[r]
        run.count += 1
        cdef Piece* p = &self.pieces[0][idx]
        run.piece[k] = idx
        run.flags[k] = W_FREE if p.free else 0
        run.size[k] = p.size
        run.dsize[k] = <double>p.size
        run.cprime[k] = 0.0
        run.mlimit[k] = -INFINITY
        run.last_access[k] = 0.0
        p.run = r
        p.at_k = <unsigned char>k
        if upper >= 0:
            # an uneven split may leave a small half next to a small neighbor
            self.settle(self.runs[upper].prev)
            self.settle(upper)

    cdef void merge(self, int r) noexcept:
        """Append run r's successor to r and unlink it (together they fit)."""
        cdef int nxt = self.runs[r].next
        cdef ScanRun* run = &self.runs[r]
        cdef ScanRun* src = &self.runs[nxt]
        cdef int j
        for j in range(src.count):
            self.move_entry(run, r, run.count + j, src, j)
        run.count += src.count
        self.unlink(nxt)

    cdef void remove(self, int idx) noexcept:
        """Drop piece idx's entry, then restore the neighbor-occupancy invariant."""
        cdef int r = self.pieces[0][idx].run
        self.shift(r, self.entry(idx) + 1, self.runs[r].count, -1)
        cdef ScanRun* run = &self.runs[r]
        run.count -= 1
        run.piece[run.count] = -1
        if run.count == 0:
            # both neighbors held > RUN_LEN / 2 with it: together they still do
            self.unlink(r)
        else:
            self.settle(r)

    cdef void settle(self, int r) noexcept:
        """Merge run r with a neighbor while the two hold <= RUN_LEN / 2 entries together (the
        merged run then holds at least as many as r did: its other pair is still sound)."""
        cdef ScanRun* run = &self.runs[r]
        if run.prev >= 0 and self.runs[run.prev].count + run.count <= RUN_LEN // 2:
            r = run.prev
            self.merge(r)
        run = &self.runs[r]
        if run.next >= 0 and self.runs[run.next].count + run.count <= RUN_LEN // 2:
            self.merge(r)
