# Arena.check(): every invariant of docs/core.md, verified from scratch (included by _core.pyx).


cdef _fail(str what):
    raise InternalError(f"coop arena invariant broken: {what}")


cdef _check(Arena a):
    cdef PieceTable t = a.table
    cdef Storages S = a.storages
    cdef size_t expect_offset = 0, used = 0
    cdef Py_ssize_t n = 0, n_free = 0
    cdef int idx = t.first, prev = -1, slot, k
    cdef Piece p
    cdef ScanRun* blk
    cdef Storage st
    cdef bint prev_free = False
    if t.at[idx].prev != -1 or t.at[idx].offset != 0:
        _fail("the first piece does not start the arena")
    while idx >= 0:
        p = t.at[idx]
        if p.offset != expect_offset:
            _fail(f"piece at {p.offset} should start at {expect_offset} (gap or overlap)")
        if p.size == 0 or p.size % a.alignment:
            _fail(f"piece at {p.offset} has size {p.size}, not a positive multiple of {a.alignment}")
        if p.prev != prev:
            _fail(f"piece at {p.offset} has a wrong prev link")
        if t.by_offset.count(p.offset) == 0 or t.by_offset[p.offset] != idx:
            _fail(f"offset index misses the piece at {p.offset}")
        if p.free:
            if prev_free:
                _fail(f"two adjacent free pieces at {p.offset}")
            if t.free_index.count(SizeOffset(p.size, p.offset)) == 0:
                _fail(f"free piece at {p.offset} is missing from the free index")
            if p.storage != -1:
                _fail(f"free piece at {p.offset} is bound to a storage")
            n_free += 1
        else:
            used += p.size
            slot = p.storage
            if slot >= 0 and (not S.at[slot].live or S.at[slot].piece != idx):
                _fail(f"piece at {p.offset} and its storage disagree")
        if p.run < 0 or <size_t>p.run >= t.runs.runs.size():
            _fail(f"piece at {p.offset} names run {p.run}, which does not exist")
        blk = &t.runs.runs[p.run]
        k = 0
        while k < blk.count and blk.piece[k] != idx:
            k += 1
        if k == blk.count or blk.size[k] != p.size or blk.dsize[k] != <double>p.size:
            _fail(f"piece at {p.offset} and its run entry disagree")
        if blk.mlimit[k] != _mlimit(blk.flags[k], blk.cprime[k]):
            _fail(f"piece at {p.offset} has a move limit its flags and c' do not give")
        if p.free and blk.flags[k] != W_FREE:
            _fail(f"free piece at {p.offset} is not flagged free in its run")
        if p.storage >= 0:
            st = S.at[p.storage]
            if (blk.cprime[k] != _way_out(&st, t.runs.offloads) or blk.last_access[k] != st.last_access
                    or blk.flags[k] != _flags(&st, t.runs.offloads)):
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
    if n != t.count or <size_t>n != t.by_offset.size():
        _fail(f"{n} pieces in address order, counter says {t.count}, index {t.by_offset.size()}")
    if n_free != t.n_free or <size_t>n_free != t.free_index.size():
        _fail(f"{n_free} free pieces, counter says {t.n_free}, index {t.free_index.size()}")
    if used != a.used_bytes:
        _fail(f"used pieces sum to {used} bytes, counter says {a.used_bytes}")
    _check_runs(a)
    _check_storages(a)


cdef _check_runs(Arena a):
    cdef PieceTable t = a.table
    """The run chain lists every piece once, in address order, with dense enough runs."""
    cdef int b = t.runs.first, prev = -1, idx = t.first, k
    cdef Py_ssize_t n = 0
    cdef ScanRun* blk
    while b >= 0:
        blk = &t.runs.runs[b]
        if blk.prev != prev:
            _fail(f"run {b} has a wrong prev link")
        if blk.count < 1 or blk.count > RUN_LEN:
            _fail(f"run {b} holds {blk.count} entries")
        if prev >= 0 and t.runs.runs[prev].count + blk.count <= RUN_LEN // 2:
            _fail(f"runs {prev} and {b} hold {t.runs.runs[prev].count + blk.count} entries together")
        for k in range(blk.count):
            if blk.piece[k] != idx:
                _fail(f"entry {k} of run {b} is out of address order")
            idx = t.at[idx].next
            n += 1
        for k in range(blk.count, RUN_LEN):
            if blk.piece[k] != -1:
                _fail(f"unused slot {k} of run {b} names piece {blk.piece[k]}")
        prev = b
        b = blk.next
    if n != t.count or idx != -1:
        _fail(f"the runs hold {n} entries for {t.count} pieces")


cdef _check_storages(Arena a):
    cdef PieceTable t = a.table
    cdef Storages S = a.storages
    cdef size_t live = 0
    cdef int slot, n, m, c
    cdef double total
    cdef Storage st
    for slot in range(<int>S.at.size()):
        st = S.at[slot]
        if not st.live:
            continue
        live += 1
        if S.by_sid.count(st.sid) == 0 or S.by_sid[st.sid] != slot:
            _fail(f"storage {st.sid} is missing from the id index")
        if st.piece >= 0 and (t.at[st.piece].free or t.at[st.piece].storage != slot):
            _fail(f"storage {st.sid} and its piece disagree")
        if st.piece >= 0 and st.eq_class != -1:
            _fail(f"resident storage {st.sid} is in an evicted class")
        if S.cls[slot] != st.eq_class:
            _fail(f"storage {st.sid}: class mirror {S.cls[slot]}, its class {st.eq_class}")
        for n in S.adjacency[slot]:
            if not S.at[n].live or not _contains(S.adjacency[n], slot):
                _fail(f"adjacency of storage {st.sid} is not symmetric")
        if st.piece >= 0 and abs(st.cprime - S.cprime(slot)) > 1e-9 * (1.0 + abs(st.cprime)):
            _fail(f"cached c' of storage {st.sid} is {st.cprime}, recomputed {S.cprime(slot)}")
    if live != S.by_sid.size():
        _fail(f"{live} live storages, id index holds {S.by_sid.size()}")
    for c in range(<int>S.classes.size()):
        if S.classes[c].head < 0:
            continue
        total = 0.0
        n = 0
        m = S.classes[c].head
        while True:
            if S.at[m].eq_class != c or S.at[m].piece >= 0 or not S.at[m].live:
                _fail(f"class {c} holds storage {S.at[m].sid}, which is not evicted in it")
            total += S.at[m].cost
            n += 1
            m = S.at[m].eq_next
            if m == S.classes[c].head or n > S.classes[c].size:
                break
        if n != S.classes[c].size:
            _fail(f"class {c} lists {n} members, size says {S.classes[c].size}")
        if abs(total - S.classes[c].cost) > 1e-9 * (1.0 + abs(total)):
            _fail(f"class {c} costs {S.classes[c].cost}, its members sum to {total}")
