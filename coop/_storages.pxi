# The storages (included by _core.pyx): per-storage eviction metadata, DTR's equivalence classes
# of evicted neighbors (union-find with member lists) and the cached c' of resident storages,
# mirrored into their pieces' scan entries.


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


@cython.final
@cython.no_gc_clear
cdef class Storages:
    """The registered storages of one piece table, by slot and by the owner's id."""

    def __cinit__(self, PieceTable pieces):
        self.pieces = pieces

    cdef int add(self, int64_t key, double cost, vector[int]& neighbors, bint evictable) noexcept:
        """Register key (not resident) with neighbor slots (distinct from its own); its slot."""
        cdef int slot
        if not self.pool.empty():
            slot = self.pool.back()
            self.pool.pop_back()
        else:
            slot = <int>self.at.size()
            self.at.push_back(Storage(0, 0.0, 0.0, 0.0, -1, 0, False, -1, 0, 0, False, True,
                                      INFINITY))
            self.adjacency.push_back(vector[int]())
            self.stamps.push_back(0)
            self.cls.push_back(-1)
        self.at[slot] = Storage(key, cost, cost, 0.0, -1, 0, evictable, -1, slot, slot, True, True,
                               INFINITY)
        self.adjacency[slot].clear()
        self.by_sid[key] = slot
        cdef int n_slot
        for n_slot in neighbors:
            if not _contains(self.adjacency[slot], n_slot):
                self.adjacency[slot].push_back(n_slot)
                self.adjacency[n_slot].push_back(slot)
        return slot

    cdef void remove(self, int slot) noexcept:
        """Forget slot; its piece, if resident, stays used and becomes anonymous."""
        cdef Storage* st = &self.at[slot]
        cdef int c = st.eq_class
        cdef int n
        if st.piece >= 0:
            self.pieces.at[st.piece].storage = -1
            self.pieces.runs.mirror_wall(st.piece)
            st.piece = -1
        for n in self.adjacency[slot]:
            _remove(self.adjacency[n], slot)
        if c >= 0:
            # only an evicted storage counts in its neighbors' c': refresh them now that it
            # is gone (the class's frontier, and the neighbors themselves if the class died)
            self.class_leave(slot)
            if self.classes[c].head >= 0:
                self.refresh_class(c)
            self.refresh_neighbors(slot)
        self.adjacency[slot].clear()
        self.by_sid.erase(self.at[slot].sid)
        self.at[slot].live = False
        self.pool.push_back(slot)

    cdef int slot_of(self, sid) except -1:
        """The slot of a registered storage id; TypeError or ValueError naming it otherwise."""
        if isinstance(sid, bool) or isinstance(sid, float):
            raise TypeError(f"storage ids are integers, got {sid!r}")
        cdef int64_t key = _index(sid)
        cdef unordered_map[int64_t, int].iterator it = self.by_sid.find(key)
        if it == self.by_sid.end():
            raise ValueError(f"unknown storage {sid}: register it with add_storage first")
        return deref(it).second

    cdef void bind(self, int idx, int slot) noexcept:
        """Used piece idx holds slot's storage now: it leaves its class, if any."""
        cdef Storage* st = &self.at[slot]
        cdef int c = st.eq_class
        self.pieces.at[idx].storage = slot
        st.piece = idx
        cdef int n
        if c >= 0:
            self.class_leave(slot)
            if self.classes[c].head >= 0:
                self.refresh_class(c)
            self.refresh_neighbors(slot)
        # slot is resident now: each class it touches must refresh it when it changes
        for n in self.adjacency[slot]:
            if self.at[n].piece < 0 and self.at[n].eq_class >= 0:
                self.frontier[self.at[n].eq_class].push_back(slot)
        self.at[slot].cprime = self.cprime(slot)
        self.sync(slot)

    cdef void rebind(self, int slot, int idx) noexcept:
        """Resident slot's storage moves to the anonymous used piece idx; its old piece stays
        used, anonymous (a wall in the scan entries)."""
        cdef int old = self.at[slot].piece
        self.pieces.at[old].storage = -1
        self.pieces.runs.mirror_wall(old)
        self.pieces.at[idx].storage = slot
        self.at[slot].piece = idx
        self.sync(slot)

    cdef inline void sync(self, int slot) noexcept:
        """Mirror a resident storage's scan inputs into its piece's scan entry."""
        cdef Storage* st = &self.at[slot]
        if st.piece >= 0:
            self.pieces.runs.mirror_storage(st.piece, st)

    cdef void set_cost(self, int slot, double cost) noexcept:
        cdef Storage* st = &self.at[slot]
        cdef double old = st.cost
        st.cost = cost
        if st.piece >= 0:
            st.cprime = self.cprime(slot)
            self.sync(slot)
        elif st.eq_class >= 0:
            self.classes[st.eq_class].cost = self.classes[st.eq_class].cost + (cost - old)
            self.refresh_class(st.eq_class)

    cdef void evicted(self, int slot) noexcept:
        """slot is not resident (its piece was freed): it forms a class and joins its evicted
        neighbors' classes."""
        cdef int c = self.class_new(slot)
        cdef int n
        for n in self.adjacency[slot]:
            if (self.at[n].piece < 0 and self.at[n].eq_class >= 0
                    and self.at[n].eq_class != c):
                c = self.class_union(c, self.at[n].eq_class)
        self.refresh_class(c)

    cdef int class_new(self, int slot) noexcept:
        cdef int c
        if not self.class_pool.empty():
            c = self.class_pool.back()
            self.class_pool.pop_back()
        else:
            c = <int>self.classes.size()
            self.classes.push_back(EvictedClass(0.0, -1, 0))
            self.frontier.push_back(vector[int]())
            self.class_mark.push_back(0)
        self.classes[c].cost = self.at[slot].cost
        self.classes[c].head = slot
        self.classes[c].size = 1
        self.frontier[c].clear()
        cdef int n
        for n in self.adjacency[slot]:
            if self.at[n].piece >= 0:
                self.frontier[c].push_back(n)
        self.at[slot].eq_class = c
        self.cls[slot] = c
        self.at[slot].eq_next = slot
        self.at[slot].eq_prev = slot
        return c

    cdef int class_union(self, int a, int b) noexcept:
        """Merge two classes (relabelling the smaller); returns the survivor."""
        if self.classes[a].size < self.classes[b].size:
            a, b = b, a
        cdef int ha = self.classes[a].head
        cdef int hb = self.classes[b].head
        cdef int m = hb
        while True:
            self.at[m].eq_class = a
            self.cls[m] = a
            m = self.at[m].eq_next
            if m == hb:
                break
        # splice the two circular lists
        cdef int ta = self.at[ha].eq_prev
        cdef int tb = self.at[hb].eq_prev
        self.at[ta].eq_next = hb
        self.at[hb].eq_prev = ta
        self.at[tb].eq_next = ha
        self.at[ha].eq_prev = tb
        self.classes[a].cost = self.classes[a].cost + self.classes[b].cost
        self.classes[a].size += self.classes[b].size
        if self.frontier[a].size() < self.frontier[b].size():
            self.frontier[a].swap(self.frontier[b])
        self.frontier[a].insert(self.frontier[a].end(), self.frontier[b].begin(),
                                self.frontier[b].end())
        self.frontier[b].clear()
        self.classes[b].head = -1
        self.classes[b].size = 0
        self.class_pool.push_back(b)
        return a

    cdef void class_leave(self, int slot) noexcept:
        cdef Storage* st = &self.at[slot]
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
            self.at[st.eq_prev].eq_next = st.eq_next
            self.at[st.eq_next].eq_prev = st.eq_prev
        st.eq_class = -1
        self.cls[slot] = -1
        st.eq_next = slot
        st.eq_prev = slot

    cdef double cprime(self, int slot) noexcept:
        """cost + the cost of each distinct class among the evicted neighbors, summed in the
        order of their first neighbor (a resident storage is in no class: cls is -1). Leaves
        the classes it counted marked with this call's mark (refresh_class reads it)."""
        cdef double total = self.at[slot].cost
        cdef int n, c
        cdef int* cls = self.cls.data()
        cdef uint64_t* marks = self.class_mark.data()
        cdef uint64_t mark
        self.mark += 1
        mark = self.mark
        for n in self.adjacency[slot]:
            c = cls[n]
            if c >= 0 and marks[c] != mark:
                marks[c] = mark
                total = total + self.classes[c].cost
        return total

    cdef void refresh_neighbors(self, int slot) noexcept:
        cdef int n
        for n in self.adjacency[slot]:
            if self.at[n].piece >= 0:
                self.at[n].cprime = self.cprime(n)
                self.sync(n)

    cdef void refresh_class(self, int c) noexcept:
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
            if not self.at[r].live or self.at[r].piece < 0:
                continue
            self.at[r].cprime = self.cprime(r)
            self.sync(r)
            if self.class_mark[c] == self.mark:   # cprime counted c for r: r touches it
                front[0][kept] = r
                kept += 1
        front.resize(kept)
