# Arena.check(): every invariant of docs/core.md, verified from scratch (included by _core.pyx).


cdef _fail(str what):
    raise AssertionError(f"coop arena invariant broken: {what}")


cdef _check(Arena a):
    cdef size_t expect_offset = 0, used = 0
    cdef Py_ssize_t n = 0, n_free = 0
    cdef int idx = a.first, prev = -1, slot, k
    cdef Piece p
    cdef Block* blk
    cdef Storage st
    cdef bint prev_free = False
    if a.pieces_[idx].prev != -1 or a.pieces_[idx].offset != 0:
        _fail("the first piece does not start the arena")
    while idx >= 0:
        p = a.pieces_[idx]
        if p.offset != expect_offset:
            _fail(f"piece at {p.offset} should start at {expect_offset} (gap or overlap)")
        if p.size == 0 or p.size % a.alignment:
            _fail(f"piece at {p.offset} has size {p.size}, not a positive multiple of {a.alignment}")
        if p.prev != prev:
            _fail(f"piece at {p.offset} has a wrong prev link")
        if a.by_offset.count(p.offset) == 0 or a.by_offset[p.offset] != idx:
            _fail(f"offset index misses the piece at {p.offset}")
        if p.free:
            if prev_free:
                _fail(f"two adjacent free pieces at {p.offset}")
            if a.free_index.count(SizeOffset(p.size, p.offset)) == 0:
                _fail(f"free piece at {p.offset} is missing from the free index")
            if p.storage != -1:
                _fail(f"free piece at {p.offset} is bound to a storage")
            n_free += 1
        else:
            used += p.size
            slot = p.storage
            if slot >= 0 and (not a.storages[slot].live or a.storages[slot].piece != idx):
                _fail(f"piece at {p.offset} and its storage disagree")
        if p.block < 0 or <size_t>p.block >= a.blocks.size():
            _fail(f"piece at {p.offset} names block {p.block}, which does not exist")
        blk = &a.blocks[p.block]
        k = 0
        while k < blk.count and blk.piece[k] != idx:
            k += 1
        if k == blk.count or blk.size[k] != p.size:
            _fail(f"piece at {p.offset} and its block entry disagree")
        if p.free and blk.flags[k] != W_FREE:
            _fail(f"free piece at {p.offset} is not flagged free in its block")
        if p.storage >= 0:
            st = a.storages[p.storage]
            if (blk.cprime[k] != st.cprime or blk.last_access[k] != st.last_access
                    or blk.flags[k] != _flags(&st)):
                _fail(f"piece at {p.offset} mirrors its storage's scan inputs wrongly")
        if p.storage < 0 and (blk.cprime[k] != 0.0 or (not p.free and blk.flags[k] != 0)):
            _fail(f"piece at {p.offset} has no storage but mirrors one")
        prev_free = p.free
        expect_offset += p.size
        n += 1
        prev = idx
        idx = p.next
    if expect_offset != a.space:
        _fail(f"pieces cover {expect_offset} bytes of a {a.space}-byte address space")
    if a.used_bytes > a.capacity:
        _fail(f"{a.used_bytes} bytes used in a {a.capacity}-byte budget")
    if n != a.n_pieces or <size_t>n != a.by_offset.size():
        _fail(f"{n} pieces in address order, counter says {a.n_pieces}, index {a.by_offset.size()}")
    if n_free != a.n_free_pieces or <size_t>n_free != a.free_index.size():
        _fail(f"{n_free} free pieces, counter says {a.n_free_pieces}, index {a.free_index.size()}")
    if used != a.used_bytes:
        _fail(f"used pieces sum to {used} bytes, counter says {a.used_bytes}")
    _check_blocks(a)
    _check_storages(a)


cdef _check_blocks(Arena a):
    """The block chain lists every piece once, in address order, with dense enough blocks."""
    cdef int b = a.first_block, prev = -1, idx = a.first, k
    cdef Py_ssize_t n = 0
    cdef Block* blk
    while b >= 0:
        blk = &a.blocks[b]
        if blk.prev != prev:
            _fail(f"block {b} has a wrong prev link")
        if blk.count < 1 or blk.count > BLOCK_LEN:
            _fail(f"block {b} holds {blk.count} entries")
        if prev >= 0 and a.blocks[prev].count + blk.count <= BLOCK_LEN // 2:
            _fail(f"blocks {prev} and {b} hold {a.blocks[prev].count + blk.count} entries together")
        for k in range(blk.count):
            if blk.piece[k] != idx:
                _fail(f"entry {k} of block {b} is out of address order")
            idx = a.pieces_[idx].next
            n += 1
        for k in range(blk.count, BLOCK_LEN):
            if blk.piece[k] != -1:
                _fail(f"unused slot {k} of block {b} names piece {blk.piece[k]}")
        prev = b
        b = blk.next
    if n != a.n_pieces or idx != -1:
        _fail(f"the blocks hold {n} entries for {a.n_pieces} pieces")


cdef _check_storages(Arena a):
    cdef size_t live = 0
    cdef int slot, n, m, c
    cdef double total
    cdef Storage st
    for slot in range(<int>a.storages.size()):
        st = a.storages[slot]
        if not st.live:
            continue
        live += 1
        if a.by_sid.count(st.sid) == 0 or a.by_sid[st.sid] != slot:
            _fail(f"storage {st.sid} is missing from the id index")
        if st.piece >= 0 and (a.pieces_[st.piece].free or a.pieces_[st.piece].storage != slot):
            _fail(f"storage {st.sid} and its piece disagree")
        if st.piece >= 0 and st.eq_class != -1:
            _fail(f"resident storage {st.sid} is in an evicted class")
        for n in a.adjacency[slot]:
            if not a.storages[n].live or not _contains(a.adjacency[n], slot):
                _fail(f"adjacency of storage {st.sid} is not symmetric")
        if st.piece >= 0 and abs(st.cprime - a._cprime(slot)) > 1e-9 * (1.0 + abs(st.cprime)):
            _fail(f"cached c' of storage {st.sid} is {st.cprime}, recomputed {a._cprime(slot)}")
    if live != a.by_sid.size():
        _fail(f"{live} live storages, id index holds {a.by_sid.size()}")
    for c in range(<int>a.classes.size()):
        if a.classes[c].head < 0:
            continue
        total = 0.0
        n = 0
        m = a.classes[c].head
        while True:
            if a.storages[m].eq_class != c or a.storages[m].piece >= 0 or not a.storages[m].live:
                _fail(f"class {c} holds storage {a.storages[m].sid}, which is not evicted in it")
            total += a.storages[m].cost
            n += 1
            m = a.storages[m].eq_next
            if m == a.classes[c].head or n > a.classes[c].size:
                break
        if n != a.classes[c].size:
            _fail(f"class {c} lists {n} members, size says {a.classes[c].size}")
        if abs(total - a.classes[c].cost) > 1e-9 * (1.0 + abs(total)):
            _fail(f"class {c} costs {a.classes[c].cost}, its members sum to {total}")
