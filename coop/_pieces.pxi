# The piece table (included by _core.pyx): pieces in address order, the size-ordered free index,
# best fit at either end, split and merge. It keeps each piece's scan entry (ScanRuns) in step;
# what a piece holds (its storage) and the bytes in use are the arena's to count.


cdef inline size_t deref_offset(cset[SizeOffset].iterator it) noexcept:
    return deref(it).second


@cython.final
@cython.no_gc_clear
cdef class PieceTable:
    """Pieces tiling [0, space): one free piece at first."""

    def __cinit__(self, size_t space):
        self.pool = -1
        self.runs = ScanRuns()
        self.runs.pieces = &self.at
        self.first = self.new_piece(0, space, -1, -1, True)
        self.count = 1
        self.index_free(self.first)

    cdef int new_piece(self, size_t offset, size_t size, int prev, int next, bint free) noexcept:
        """A piece linked after prev (its entry too); the caller links prev and next to it."""
        cdef int idx
        if self.pool >= 0:
            idx = self.pool
            self.pool = self.at[idx].next
        else:
            idx = <int>self.at.size()
            self.at.push_back(Piece(0, 0, -1, -1, -1, -1, False, 0))
        cdef Piece* p = &self.at[idx]
        p.offset = offset
        p.size = size
        p.prev = prev
        p.next = next
        p.storage = -1
        p.free = free
        self.by_offset[offset] = idx
        self.runs.insert(prev, idx)
        return idx

    cdef void split_low(self, int idx, size_t size) noexcept:
        """Piece idx (out of the free index) keeps its low size bytes; the rest becomes a new
        free piece after it, indexed."""
        cdef Piece* p = &self.at[idx]
        cdef int rest = self.new_piece(p.offset + size, p.size - size, idx, p.next, True)
        p = &self.at[idx]           # new_piece may move the pieces
        if p.next >= 0:
            self.at[p.next].prev = rest
        p.next = rest
        p.size = size
        self.index_free(rest)
        self.count += 1

    cdef int split_high(self, int idx, size_t size) noexcept:
        """Free piece idx (out of the free index) gives its high size bytes to a new used piece
        after it, returned; idx keeps the low remainder and is indexed again."""
        cdef Piece* p = &self.at[idx]
        cdef int used = self.new_piece(p.offset + p.size - size, size, idx, p.next, False)
        p = &self.at[idx]
        if p.next >= 0:
            self.at[p.next].prev = used
        p.next = used
        p.size -= size
        self.index_free(idx)
        self.count += 1
        return used

    cdef void drop(self, int idx) noexcept:
        """Return unlinked piece idx (and its entry) to the pool."""
        self.runs.remove(idx)
        self.by_offset.erase(self.at[idx].offset)
        self.at[idx].next = self.pool
        self.at[idx].size = 0
        self.pool = idx

    cdef inline void index_free(self, int idx) noexcept:
        self.free_index.insert(SizeOffset(self.at[idx].size, self.at[idx].offset))
        self.n_free += 1

    cdef inline void unindex_free(self, int idx) noexcept:
        self.free_index.erase(SizeOffset(self.at[idx].size, self.at[idx].offset))
        self.n_free -= 1

    cdef inline int find(self, size_t offset) noexcept:
        """The piece starting at offset, or -1."""
        cdef unordered_map[size_t, int].iterator it = self.by_offset.find(offset)
        return -1 if it == self.by_offset.end() else deref(it).second

    cdef size_t largest_free(self) noexcept:
        if self.free_index.empty():
            return 0
        return deref(self.free_index.rbegin()).first

    cdef int best_fit(self, size_t size, int placement) noexcept:
        """The free piece an allocation of size takes (see docs/core.md, best fit), or -1."""
        cdef cset[SizeOffset].iterator it = self.free_index.lower_bound(SizeOffset(size, 0))
        if it == self.free_index.end():
            return -1
        if placement == PLACE_LOWEST:
            return self.lowest_fit(size)
        if placement == PLACE_CHEAP:
            # among the equally small pieces, the highest: cheap tensors gather at the arena's
            # high end as they do at their piece's
            it = self.free_index.lower_bound(SizeOffset(deref(it).first + 1, 0))
            predecrement(it)
        return self.by_offset[deref_offset(it)]

    cdef int lowest_fit(self, size_t size) noexcept:
        """The lowest free piece that holds size, or -1: a sweep of the scan runs (address
        order, flat arrays) rather than a walk of the piece links, since the used pieces below
        the first fit (the constants placed there) are many."""
        cdef int r = self.runs.first, k
        cdef ScanRun* run
        while r >= 0:
            run = &self.runs.runs[r]
            for k in range(run.count):
                if run.flags[k] == W_FREE and run.size[k] >= size:
                    return run.piece[k]
            r = run.next
        return -1

    cdef int take(self, int idx, size_t size, int placement) noexcept:
        """Use size bytes of free piece idx, at its high end for PLACE_CHEAP, else at its low end;
        the used piece."""
        cdef Piece* p = &self.at[idx]
        cdef int used = idx
        self.unindex_free(idx)
        if p.size > size:
            if placement == PLACE_CHEAP:
                used = self.split_high(idx, size)
            else:
                self.split_low(idx, size)
        self.at[used].free = False
        self.runs.mirror_piece(idx)     # a new piece's entry is written as it is linked
        return used

    cdef int carve(self, size_t dst, size_t size) noexcept:
        """A used piece of size at the low end of the free piece starting at dst; -1 (nothing
        changed) when no free piece of at least size starts there."""
        cdef int idx = self.find(dst)
        if idx < 0 or not self.at[idx].free or self.at[idx].size < size:
            return -1
        return self.take(idx, size, PLACE_EXPENSIVE)

    cdef int release(self, int idx) noexcept:
        """Used piece idx becomes free, unbound, and merges with its free neighbors; the free
        piece that holds it now."""
        cdef Piece* p = &self.at[idx]
        cdef int nb
        p.free = True
        p.storage = -1
        if p.prev >= 0 and self.at[p.prev].free:
            nb = p.prev
            self.unindex_free(nb)
            self.at[nb].size += p.size
            self.at[nb].next = p.next
            if p.next >= 0:
                self.at[p.next].prev = nb
            self.drop(idx)
            self.count -= 1
            idx = nb
            p = &self.at[idx]
        if p.next >= 0 and self.at[p.next].free:
            nb = p.next
            self.unindex_free(nb)
            p.size += self.at[nb].size
            p.next = self.at[nb].next
            if p.next >= 0:
                self.at[p.next].prev = idx
            self.drop(nb)
            self.count -= 1
        self.runs.mirror_piece(idx)
        self.index_free(idx)
        return idx

    cdef void slide(self, int idx, size_t dst) noexcept:
        """Used piece idx moves down to dst, inside the free piece just below it (the caller
        checked that one is there); the bytes its high end leaves become free, merged with a
        free piece above."""
        cdef size_t src = self.at[idx].offset, size = self.at[idx].size
        cdef int low = self.at[idx].prev, nxt = self.at[idx].next, below, rest
        cdef size_t shift = src - dst, f = self.at[low].offset
        self.unindex_free(low)
        self.by_offset.erase(src)
        if dst > f:
            self.at[low].size = dst - f
            self.runs.mirror_piece(low)
            self.index_free(low)
        else:
            below = self.at[low].prev
            self.at[idx].prev = below
            if below >= 0:
                self.at[below].next = idx
            else:
                self.first = idx
            self.drop(low)          # its offset is dst: dropped before idx takes it
            self.count -= 1
        self.at[idx].offset = dst
        self.by_offset[dst] = idx
        if nxt >= 0 and self.at[nxt].free:
            self.unindex_free(nxt)
            self.by_offset.erase(self.at[nxt].offset)
            self.at[nxt].offset -= shift
            self.at[nxt].size += shift
            self.by_offset[self.at[nxt].offset] = nxt
            self.runs.mirror_piece(nxt)
            self.index_free(nxt)
        else:
            rest = self.new_piece(dst + size, shift, idx, nxt, True)
            self.at[idx].next = rest
            if nxt >= 0:
                self.at[nxt].prev = rest
            self.index_free(rest)
            self.count += 1
