# The scan blocks (included by _core.pyx): the pieces' scan inputs by value, in address order.
#
# Every piece has exactly one entry, in blocks[piece.block] (where _entry finds it); walking the
# block chain from first_block visits the pieces in address order. An insert into a full block
# splits it (see _block_insert); a block merges with a neighbour when the two hold <= BLOCK_LEN / 2
# entries together, so any two neighbouring blocks hold more than BLOCK_LEN / 2 and a sweep over N
# pieces touches fewer than 4 N / BLOCK_LEN + 1 blocks. A piece records its block, not its
# position: shifting entries within a block is then a plain memmove, and only entries that change
# blocks (at most BLOCK_LEN per operation) rewrite their piece. Every write to an entry happens
# with the GIL held and no Python call in between, like the rest of the arena.
from libc.string cimport memmove


cdef int _block_new(Arena a, int prev, int next) noexcept:
    """An empty block linked between prev and next (either may be -1)."""
    cdef int b
    if a.block_pool >= 0:
        b = a.block_pool
        a.block_pool = a.blocks[b].next
    else:
        b = <int>a.blocks.size()
        a.blocks.resize(a.blocks.size() + 1)
    cdef Block* blk = &a.blocks[b]
    cdef int k
    blk.count = 0
    for k in range(BLOCK_LEN):
        blk.piece[k] = -1
    blk.prev = prev
    blk.next = next
    if prev >= 0:
        a.blocks[prev].next = b
    else:
        a.first_block = b
    if next >= 0:
        a.blocks[next].prev = b
    return b


cdef void _block_unlink(Arena a, int b) noexcept:
    cdef Block* blk = &a.blocks[b]
    if blk.prev >= 0:
        a.blocks[blk.prev].next = blk.next
    else:
        a.first_block = blk.next
    if blk.next >= 0:
        a.blocks[blk.next].prev = blk.prev
    blk.count = 0
    blk.next = a.block_pool
    a.block_pool = b


cdef inline int _entry(Arena a, int idx) noexcept:
    """Position of piece idx's entry in its block: a search over all BLOCK_LEN slots (unused ones
    hold -1) without an early exit, which the compiler vectorises and the CPU predicts."""
    cdef Block* blk = &a.blocks[a.pieces_[idx].block]
    cdef int k, pos = 0
    for k in range(BLOCK_LEN):
        pos = k if blk.piece[k] == idx else pos
    return pos


cdef inline void _entry_mirror(Arena a, int idx) noexcept:
    """Mirror an unbound piece's size and state into its entry (a free piece has c' = 0)."""
    cdef Block* blk = &a.blocks[a.pieces_[idx].block]
    cdef int k = _entry(a, idx)
    blk.size[k] = a.pieces_[idx].size
    blk.flags[k] = W_FREE if a.pieces_[idx].free else 0
    blk.cprime[k] = 0.0


cdef inline void _entry_move(Arena a, Block* dst, int b, int k, Block* src, int j) noexcept:
    """Copy src's entry j to dst's position k (dst is block b) and point its piece there."""
    dst.piece[k] = src.piece[j]
    dst.flags[k] = src.flags[j]
    dst.size[k] = src.size[j]
    dst.cprime[k] = src.cprime[j]
    dst.last_access[k] = src.last_access[j]
    a.pieces_[dst.piece[k]].block = b


cdef void _block_shift(Arena a, int b, int k, int end, int by) noexcept:
    """Move entries k..end-1 of block b by `by` (+1 or -1) positions; count is unchanged."""
    cdef Block* blk = &a.blocks[b]
    cdef int n = end - k
    if n <= 0:
        return
    memmove(&blk.piece[k + by], &blk.piece[k], n * sizeof(int))
    memmove(&blk.flags[k + by], &blk.flags[k], n * sizeof(unsigned char))
    memmove(&blk.size[k + by], &blk.size[k], n * sizeof(size_t))
    memmove(&blk.cprime[k + by], &blk.cprime[k], n * sizeof(double))
    memmove(&blk.last_access[k + by], &blk.last_access[k], n * sizeof(double))


cdef void _block_insert(Arena a, int after, int idx) noexcept:
    """Give piece idx (fresh, unbound) the entry just after piece after's, or the first one of
    a new first block when after is -1 (the arena's only piece)."""
    cdef int b, k, m, k2, upper = -1
    cdef Block* blk
    cdef Block* other
    if after < 0:
        b = _block_new(a, -1, -1)
        k = 0
    else:
        b = a.pieces_[after].block
        k = _entry(a, after) + 1         # >= 1
        blk = &a.blocks[b]
        if blk.count == BLOCK_LEN:
            # split at k when it is near an end, so that a run of inserts at one place leaves
            # full blocks behind it (the scans sweep those fastest); else in halves
            m = k if k < BLOCK_LEN // 4 or k > BLOCK_LEN - BLOCK_LEN // 4 else BLOCK_LEN // 2
            upper = _block_new(a, b, blk.next)
            blk = &a.blocks[b]
            other = &a.blocks[upper]
            for k2 in range(m, BLOCK_LEN):
                _entry_move(a, other, upper, k2 - m, blk, k2)
            other.count = BLOCK_LEN - m
            blk.count = m
            for k2 in range(m, BLOCK_LEN):
                blk.piece[k2] = -1
            if k > m or m == BLOCK_LEN:
                b = upper
                k -= m
        _block_shift(a, b, k, a.blocks[b].count, 1)
    blk = &a.blocks[b]
    blk.count += 1
    cdef Piece* p = &a.pieces_[idx]
    blk.piece[k] = idx
    blk.flags[k] = W_FREE if p.free else 0
    blk.size[k] = p.size
    blk.cprime[k] = 0.0
    blk.last_access[k] = 0.0
    p.block = b
    if upper >= 0:
        # an uneven split may leave a small half next to a small neighbour
        _block_settle(a, a.blocks[upper].prev)
        _block_settle(a, upper)


cdef void _block_merge(Arena a, int b) noexcept:
    """Append block b's successor to b and unlink it (together they fit)."""
    cdef int nxt = a.blocks[b].next
    cdef Block* blk = &a.blocks[b]
    cdef Block* src = &a.blocks[nxt]
    cdef int j
    for j in range(src.count):
        _entry_move(a, blk, b, blk.count + j, src, j)
    blk.count += src.count
    _block_unlink(a, nxt)


cdef void _block_remove(Arena a, int idx) noexcept:
    """Drop piece idx's entry, then restore the neighbour-occupancy invariant."""
    cdef int b = a.pieces_[idx].block
    _block_shift(a, b, _entry(a, idx) + 1, a.blocks[b].count, -1)
    cdef Block* blk = &a.blocks[b]
    blk.count -= 1
    blk.piece[blk.count] = -1
    if blk.count == 0:
        # both neighbours held > BLOCK_LEN / 2 with it: together they still do
        _block_unlink(a, b)
    else:
        _block_settle(a, b)


cdef void _block_settle(Arena a, int b) noexcept:
    """Merge block b with a neighbour while the two hold <= BLOCK_LEN / 2 entries together (the
    merged block then holds at least as many as b did: its other pair is still sound)."""
    cdef Block* blk = &a.blocks[b]
    if blk.prev >= 0 and a.blocks[blk.prev].count + blk.count <= BLOCK_LEN // 2:
        b = blk.prev
        _block_merge(a, b)
    blk = &a.blocks[b]
    if blk.next >= 0 and a.blocks[blk.next].count + blk.count <= BLOCK_LEN // 2:
        _block_merge(a, b)
