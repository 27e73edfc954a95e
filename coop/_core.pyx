# distutils: language = c++
"""The arena core: one contiguous range cut into pieces, and what to evict (or move) for a request.

Specification: docs/core.md. The arena is composed of parts, each a final cdef class with one job:
PieceTable (pieces, free index, best fit at either end, split/merge) with its ScanRuns (the pieces'
scan inputs in address order), Storages (eviction metadata, DTR's classes, c'), Chooser (the loop
policies and coop's two-pointer window scan) with its MovePlanner (the window when pieces may move),
EvictionLoop (carrying choices out through an Evictor, compaction, counters) and AllocLog (the
allocation log the arena writes). Arena holds them and is the C API (_core.pxd) and the Python API.

Every method runs without releasing the GIL and calls no Python code while the structures are
inconsistent, so the GIL is the lock: frees arriving from another thread, or re-entrantly from an
object's ``__dealloc__`` inside the eviction callback, always see a consistent arena.

Layer: the bottom of coop; imports only coop.errors.
"""
cimport cython
from cython.operator cimport dereference as deref, predecrement, preincrement
from libc.math cimport INFINITY, NAN, isfinite
from libc.stdint cimport SIZE_MAX, int64_t, uint64_t
from libc.string cimport memcpy, memset
from libcpp.algorithm cimport make_heap, nth_element, pop_heap, sort, upper_bound
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from operator import index as _index

from coop.errors import InternalError, OutOfMemoryError

include "_log.pxi"

# The public API's placements and policies; C code uses the enums of _core.pxd (Placement,
# PolicyCode) instead, so rebinding these names cannot change what the core does.
EXPENSIVE = PLACE_EXPENSIVE
CHEAP = PLACE_CHEAP
LOWEST = PLACE_LOWEST   # placement: first fit from the arena's low end (where constants go)
NO_STORAGE = -1
LOG_MOVE = LOGGED_MOVE  # take_log: the code of a move, (old offset, LOG_MOVE, new, size, sid)
POLICIES = ("coop", "dtr", "dte", "lru", "size", "none")   # index == PolicyCode

cdef size_t IDEAL_SPACE = (<size_t>1) << 62   # address space of an ideal arena
cdef dict _POLICY_CODES = {name: code for code, name in enumerate(POLICIES)}


def log_records(log):
    """The arena's log (Arena.take_log) as one tuple per event: (offset, nbytes) allocated,
    (offset, -1) freed, (old offset, LOG_MOVE, new offset, size, storage id) moved."""
    out, k, n = [], 0, len(log)
    while k < n:
        width = 5 if log[k + 1] == LOGGED_MOVE else 2
        out.append(tuple(log[k:k + width]))
        k += width
    return out


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

cdef inline double _monotonic() noexcept nogil:
    """Seconds on the monotonic clock: the eviction loop's search_time, the searches' phases."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9

include "_runs.pxi"
include "_pieces.pxi"
include "_storages.pxi"
include "_choose.pxi"
include "_move_plan.pxi"
include "_evict.pxi"
include "_check.pxi"


cdef int _carve(Arena a, size_t dst, size_t size, int64_t sid) except -1:
    """An anonymous used piece of size at the low end of the free piece starting at dst."""
    cdef int idx = a.table.carve(dst, size)
    if idx < 0:
        raise ValueError(f"move of storage {sid} ({size} bytes) to offset {dst}: no free "
                         f"piece of at least {size} bytes starts there")
    a.used_bytes += size
    if a.used_bytes > a.peak_used:
        a.peak_used = a.used_bytes
    a.log.c_allocated(dst, size)
    return idx


cdef size_t _checked_request(Arena a, nbytes) except? 0:
    cdef size_t n = _size_arg(nbytes, "the request")
    if n > a.capacity:
        raise _too_large(a, n)
    return a.request_size(n)


cdef object _too_large(Arena a, size_t n):
    free_bytes = a.capacity - a.used_bytes
    return OutOfMemoryError(
        f"coop: a request of {n} bytes is larger than the whole arena "
        f"(budget {a.capacity} bytes, {free_bytes} bytes free, largest free range "
        f"{a.largest_free()} bytes); raise the budget above {n} bytes",
        n, a.capacity, free_bytes, a.largest_free())


cdef int _anonymous_piece(Arena a, size_t offset) except -1:
    """The used, anonymous piece starting at offset; ValueError naming why there is none."""
    cdef int idx = a.table.find(offset)
    if idx < 0:
        raise ValueError(f"bind to unknown offset {offset}: no piece starts there")
    if a.table.at[idx].free:
        raise ValueError(f"bind to offset {offset}: the piece is free; allocate it first")
    if a.table.at[idx].storage >= 0:
        raise ValueError(f"bind to offset {offset}: the piece already holds storage "
                         f"{a.storages.at[a.table.at[idx].storage].sid}")
    return idx


cdef int _unbound_slot(Arena a, storage) except -2:
    if isinstance(storage, bool) or isinstance(storage, float):
        raise TypeError(f"storage ids are integers, got {storage!r}")
    if _index(storage) == NO_STORAGE:
        return -1
    cdef int slot = a.storages.slot_of(storage)
    if a.storages.at[slot].piece >= 0:
        raise ValueError(f"storage {storage} is already resident at offset "
                         f"{a.table.at[a.storages.at[slot].piece].offset}")
    return slot


cdef int _registered(Arena a, int slot, str what) except -1:
    if slot < 0 or <size_t>slot >= a.storages.at.size() or not a.storages.at[slot].live:
        raise ValueError(f"{what}: storage slot {slot} is not registered")
    return 0


cdef object _oom(Arena a, size_t size, policy, str note=""):
    free_bytes = a.capacity - a.used_bytes
    largest = a.largest_free()
    # what blocks: pinned pieces (held by the running kernel, or pinned by the caller) and
    # unpinned walls (unevictable and unmovable), and the largest range free of both
    cdef size_t pinned = 0, walls = 0, kept = 0, evictable = 0, run = 0, window = 0
    cdef int n_pinned = 0, n_walls = 0, n_kept = 0, n_evictable = 0
    cdef int idx = a.table.first
    cdef Piece* p
    cdef Storage* st
    while idx >= 0:
        p = &a.table.at[idx]
        if not p.free and p.storage >= 0:
            st = &a.storages.at[p.storage]
            if st.pins != 0:
                pinned += p.size
                n_pinned += 1
                run = 0
                idx = p.next
                continue
            if not st.evictable and not st.offload < INFINITY \
                    and not (st.movable and isfinite(a.move_rate)):
                walls += p.size
                n_walls += 1
                run = 0
                idx = p.next
                continue
            if not st.evictable:     # a constant: it can only move (or leave for the host)
                kept += p.size
                n_kept += 1
            else:                    # a candidate no window of the policy's could use
                evictable += p.size
                n_evictable += 1
        elif not p.free:
            pinned += p.size     # anonymous: a caller's allocation
            n_pinned += 1
            run = 0
            idx = p.next
            continue
        run += p.size
        window = run if run > window else window
        idx = p.next
    # with candidates left, coop's window found none that covers the request: each window
    # holds a wall, or more constants than there are free pieces outside it to move them to
    if n_evictable == 0:
        blocked = "nothing left to evict"
    elif policy == "none":
        blocked = (f"the policy evicts nothing, though {n_evictable} evictable pieces "
                   f"({evictable} bytes) are left")
    else:
        blocked = (f"no window of evictions and moves covers it, though {n_evictable} "
                   f"evictable pieces ({evictable} bytes) are left between what cannot leave")
    return OutOfMemoryError(
        f"coop: cannot allocate {size} bytes under policy {policy!r}: budget {a.capacity} "
        f"bytes, {free_bytes} bytes free, largest free range {largest} bytes, and {blocked} "
        f"(pinned or anonymous: {n_pinned} pieces, {pinned} bytes; "
        f"unevictable: {n_walls} pieces, {walls} bytes; the largest range free of them: "
        f"{window} bytes; constants, which can only move, each to a free piece of its own: "
        f"{n_kept} pieces, {kept} bytes){note}; raise the budget, or free or unpin tensors",
        size, a.capacity, free_bytes, largest, pinned, walls, window, kept, evictable)


@cython.no_gc_clear
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
        self.move_rate = INFINITY
        self.offload_last = True
        self.table = PieceTable(self.space)
        self.storages = Storages(self.table)
        self.chooser = Chooser(self.table, self.storages, self.ideal)
        self.loop = EvictionLoop()
        self.log = AllocLog()

    # ---- C API (_core.pxd): storage slots instead of ids ---------------------------------------

    cdef size_t request_size(self, size_t nbytes) noexcept:
        """Bytes a request of nbytes takes: rounded up to the alignment, never 0."""
        if nbytes <= self.alignment:
            return self.alignment
        return (nbytes + self.alignment - 1) & ~(self.alignment - 1)

    cdef size_t largest_free(self) noexcept:
        if self.ideal:
            return self.capacity - self.used_bytes
        return self.table.largest_free()

    cdef Py_ssize_t c_allocate(self, size_t size, int placement, int slot) noexcept:
        """Best fit of an already rounded size; returns the offset or -1. Binds slot if >= 0.

        Logs (offset, size); callers that know the request's own byte count replace size with
        it through c_log_request."""
        if self.ideal and self.used_bytes + size > self.capacity:
            return -1
        cdef int idx = self.table.best_fit(size, placement)
        if idx < 0:
            return -1
        cdef int used = self.table.take(idx, size, placement)
        self.used_bytes += size
        if self.used_bytes > self.peak_used:
            self.peak_used = self.used_bytes
        cdef size_t offset = self.table.at[used].offset
        if slot >= 0:
            self.storages.bind(used, slot)
        self.log.c_allocated(offset, size)
        return <Py_ssize_t>offset

    cdef Py_ssize_t c_lowest_fit(self, size_t size) noexcept:
        """Offset of the lowest free piece that holds size (rounded), or -1."""
        if self.ideal and self.used_bytes + size > self.capacity:
            return -1
        cdef int idx = self.table.lowest_fit(size)
        return <Py_ssize_t>self.table.at[idx].offset if idx >= 0 else -1

    cdef int c_free(self, size_t offset) except -1:
        """Free the used piece at offset; its storage, if any, becomes evicted."""
        cdef int idx = self.table.find(offset)
        if idx < 0:
            raise ValueError(f"free of unknown offset {offset}: no piece starts there")
        if self.table.at[idx].free:
            raise ValueError(f"double free of offset {offset}: the piece is already free")
        cdef int slot = self.table.at[idx].storage
        self.used_bytes -= self.table.at[idx].size
        self.table.release(idx)
        if slot >= 0:
            self.storages.at[slot].piece = -1
            self.storages.evicted(slot)
        self.log.c_freed(offset)
        return 0

    cdef Py_ssize_t c_allocate_or_evict(self, size_t size, int placement, int code, double now,
                                        int slot, Evictor evictor, object policy) except -2:
        """The eviction loop: place size bytes (already a request size), evicting the policy's
        victims through evictor until it fits. slot: the storage being placed, or -1."""
        cdef Py_ssize_t off = self.c_allocate(size, placement, slot)
        if off >= 0:
            return off
        cdef EvictionLoop loop = self.loop
        cdef size_t depth = loop.placing_slots.size()
        loop.placing_slots.push_back(slot)
        loop.placing_lost.push_back(0)
        try:
            return loop.run(self, size, placement, code, now, slot, evictor, policy, depth)
        finally:
            loop.placing_slots.resize(depth)
            loop.placing_lost.resize(depth)

    cdef Py_ssize_t c_request(self, size_t nbytes, int placement) except -2:
        """Place nbytes (the request's own count, not yet rounded) for an anonymous allocation:
        best fit; when nothing fits, the eviction loop under the attached owner's policy_code,
        now and policy_name, the owner evicting, holding the owner's lock where it has one
        (Evictor.lock: a backend serves every thread, and an eviction must not run inside the
        runtime's op on another; a piece that fits takes no lock). No owner: OutOfMemoryError,
        counted as a failed search like policy "none". Larger than the capacity:
        OutOfMemoryError, nothing counted. The offset (logged with nbytes)."""
        if nbytes > self.capacity:
            raise _too_large(self, nbytes)
        cdef size_t size = self.request_size(nbytes)
        cdef Py_ssize_t offset = self.c_allocate(size, placement, -1)
        cdef Evictor owner = self.owner
        if offset < 0:
            if owner is None:
                offset = self.c_allocate_or_evict(size, placement, P_NONE, 0.0, -1, None, "none")
            elif owner.lock is None:
                offset = self._owner_evicts(size, placement, owner)
            else:
                with owner.lock:
                    # what the holder left may fit now
                    offset = self.c_allocate(size, placement, -1)
                    if offset < 0:
                        offset = self._owner_evicts(size, placement, owner)
        self.log.c_request(nbytes)
        return offset

    cdef Py_ssize_t _owner_evicts(self, size_t size, int placement, Evictor owner) except -2:
        """c_request's eviction loop, under the owner's policy and clock."""
        if owner.policy_code < P_COOP or owner.policy_code > P_NONE:
            raise ValueError(f"the arena's owner has no policy: policy_code "
                             f"{owner.policy_code} is none of coop._core.POLICIES' codes")
        if self.ideal and owner.policy_code == P_COOP:
            raise ValueError("an ideal arena has no addresses to scan: its owner needs a "
                             "loop policy (dtr, dte, lru, size) or none")
        return self.c_allocate_or_evict(size, placement, owner.policy_code, owner.now,
                                        -1, owner, owner.policy_name)

    cdef int c_add_storage(self, int64_t key, double cost, vector[int]& neighbors,
                           bint evictable) except -1:
        """Register key (not resident) with neighbor slots (distinct from its own); its slot."""
        return self.storages.add(key, cost, neighbors, evictable)

    cdef void c_remove_storage(self, int slot) noexcept:
        """Forget slot; a resident one leaves its piece used and anonymous."""
        self.loop.lost(slot)
        if self.storages.at[slot].offload < INFINITY:
            self.n_offload -= 1
        self.storages.remove(slot)

    cdef int c_bind(self, int slot, size_t offset) except -1:
        """Bind the anonymous used piece starting at offset to slot, a registered storage that
        is not resident; ValueError naming the problem otherwise."""
        cdef int idx = _anonymous_piece(self, offset)
        _registered(self, slot, f"bind to offset {offset}")
        if self.storages.at[slot].piece >= 0:
            raise ValueError(f"bind to offset {offset}: storage {self.storages.at[slot].sid} is "
                             f"already resident at offset "
                             f"{self.table.at[self.storages.at[slot].piece].offset}")
        self.storages.bind(idx, slot)
        return 0

    cdef void c_evicted(self, int slot) noexcept:
        """slot, registered and not resident, counts as evicted from now on: it joins its
        evicted neighbors' class (a value that was never resident but can be recomputed)."""
        self.storages.evicted(slot)

    cdef void c_pin(self, int slot, int delta) noexcept:
        self.storages.at[slot].pins += delta
        self.storages.sync(slot)

    cdef void c_touch(self, int slot, double now) noexcept:
        self.storages.at[slot].last_access = now
        self.storages.sync(slot)

    cdef void c_demote(self, int slot) noexcept:
        """slot becomes every policy's first victim until it is touched again: its last
        access is -inf, so coop's windows count it at h = c' / staleness = 0, as free memory,
        and the loop policies take it before any other candidate (Chooser.choose_one)."""
        self.storages.at[slot].last_access = -INFINITY
        self.storages.sync(slot)

    cdef void c_set_evictable(self, int slot, bint flag) noexcept:
        self.storages.at[slot].evictable = flag
        self.storages.sync(slot)

    cdef void c_set_movable(self, int slot, bint flag) noexcept:
        self.storages.at[slot].movable = flag
        self.storages.sync(slot)

    cdef void c_set_offload(self, int slot, double cost) noexcept:
        """slot's way out to the owner's host tier costs cost (INFINITY: it has none); a
        window that counts offloads takes the cheaper of that and its eviction (docs/core.md,
        "The host tier")."""
        cdef bint had = self.storages.at[slot].offload < INFINITY
        self.storages.at[slot].offload = cost
        self.n_offload += (cost < INFINITY) - had
        self.storages.sync(slot)

    cdef bint c_offload_wins(self, int slot) noexcept:
        """Whether resident slot, a victim being carried out, leaves by an offload: the
        choice counted offloads and its offload is the cost it counted (_way_out) rather than
        its eviction."""
        cdef Storage* st = &self.storages.at[slot]
        return (self.offload_taken or not self.offload_last) and st.offload < INFINITY \
            and (st.offload < st.cprime or not st.evictable)

    cdef void c_count_offloads(self, bint always) noexcept:
        """always: every choice counts offloads from now on (offload_last off); else only
        when none exists without them."""
        if self.offload_last == always:
            self.offload_last = not always
            _remirror(self, always)

    cdef double c_offload_cost(self, int slot) noexcept:
        return self.storages.at[slot].offload

    cdef int c_unbind(self, int slot) except -1:
        """Resident slot leaves its piece without being evicted (the owner has copied its bytes
        elsewhere: an offload): the piece stays used, anonymous, for the owner to free; slot
        stays registered, not resident and in no class (nothing recomputes it)."""
        cdef int idx = self.storages.at[slot].piece
        if idx < 0:
            raise ValueError(f"unbind of storage {self.storages.at[slot].sid}: it is not resident")
        self.table.at[idx].storage = -1
        self.table.runs.mirror_wall(idx)
        self.storages.at[slot].piece = -1
        return 0

    cdef int c_move(self, int slot, size_t dst) except -1:
        """Relocate resident slot to the low end of the free piece starting at dst (its bytes
        are the owner's to copy): the new piece is bound to slot, the old one freed without
        evicting anything. ValueError naming the problem when slot is not resident or no free
        piece that holds it starts at dst."""
        _registered(self, slot, f"move to offset {dst}")
        cdef int old = self.storages.at[slot].piece
        if old < 0:
            raise ValueError(f"move of storage {self.storages.at[slot].sid} to offset {dst}: "
                             "it is not resident")
        cdef int idx = _carve(self, dst, self.table.at[old].size, self.storages.at[slot].sid)
        self.storages.rebind(slot, idx)
        self.c_free(self.table.at[old].offset)      # anonymous now: freed, nothing evicted
        return 0

    cdef int c_slide(self, int slot, size_t dst) except -1:
        """Slide resident slot's piece down to dst, inside the free piece just below it (the
        old and new ranges may overlap: the owner's copy is a memmove); the bytes its high end
        leaves become free. Logged as a move; counted by c_compact, not here. ValueError
        naming the problem otherwise (nothing changed)."""
        _registered(self, slot, f"slide to offset {dst}")
        cdef int idx = self.storages.at[slot].piece
        cdef int64_t sid = self.storages.at[slot].sid
        if idx < 0:
            raise ValueError(f"slide of storage {sid} to offset {dst}: it is not resident")
        cdef size_t src = self.table.at[idx].offset, size = self.table.at[idx].size
        cdef int low = self.table.at[idx].prev
        if (self.ideal or dst % self.alignment or dst >= src or low < 0
                or not self.table.at[low].free or self.table.at[low].offset > dst):
            raise ValueError(f"slide of storage {sid} from offset {src} to {dst}: {dst} is not "
                             "an aligned offset inside the free piece just below it")
        self.table.slide(idx, dst)
        self.log.c_moved(src, dst, size, sid)
        return 0

    cdef Py_ssize_t c_compact(self, size_t size, double now, Evictor evictor) except -2:
        """Compaction inside one window for size (rounded) bytes, evicting and sliding through
        evictor (docs/core.md, "Moving"): the offset from which size bytes are free, or -1 (what
        was done stays done: a valid state). Only with moving on."""
        if self.ideal or not self.move_rate < INFINITY:
            return -1
        return self.loop.compact(self, size, now, evictor)

    cdef double c_cost(self, int slot) noexcept:
        """The storage's own cost."""
        return self.storages.at[slot].cost

    cdef double c_last_access(self, int slot) noexcept:
        return self.storages.at[slot].last_access

    cdef bint c_searched(self) noexcept:
        """Whether an eviction search has run: the arena has had to make room."""
        return self.loop.counts.searches > 0

    cdef int c_pins(self, int slot) noexcept:
        return self.storages.at[slot].pins

    cdef bint c_evictable(self, int slot) noexcept:
        return self.storages.at[slot].evictable

    cdef int64_t c_sid(self, int slot) noexcept:
        """The owner's id of the storage in slot (what c_add_storage was given)."""
        return self.storages.at[slot].sid

    cdef Py_ssize_t c_offset(self, int slot) noexcept:
        """Offset of the storage's piece; -1 when it is not resident."""
        cdef int idx = self.storages.at[slot].piece
        return <Py_ssize_t>self.table.at[idx].offset if idx >= 0 else -1

    cdef int c_used_piece(self, size_t offset, size_t* size, int* slot) noexcept:
        """0 and the used piece's size and storage slot (-1: anonymous) when a used piece starts
        at offset; -1 (size and slot untouched) when none does."""
        cdef int idx = self.table.find(offset)
        if idx < 0 or self.table.at[idx].free:
            return -1
        size[0] = self.table.at[idx].size
        slot[0] = self.table.at[idx].storage
        return 0

    cdef void c_log_request(self, size_t nbytes) noexcept:
        """While logging: record nbytes as the byte count of the allocation logged last (call it
        right after a successful c_allocate / c_allocate_or_evict when the request's own count
        is known; they log the rounded size)."""
        self.log.c_request(nbytes)

    # ---- Python API -------------------------------------------------------------------------

    def allocate(self, nbytes, placement=EXPENSIVE, storage=NO_STORAGE):
        """Best-fit placement of nbytes (EXPENSIVE at the low end of the lowest of the smallest
        pieces that hold it, CHEAP at the high end of the highest; LOWEST: first fit by address).

        Returns the offset, or -1 when no free piece fits; never evicts.
        """
        cdef size_t n = _size_arg(nbytes, "the request")
        if n > self.capacity:
            raise _too_large(self, n)
        cdef int slot = _unbound_slot(self, storage)
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
        return self.c_lowest_fit(_checked_request(self, nbytes))

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
        _anonymous_piece(self, off)       # the offset's errors come before the storage's
        cdef int slot = _unbound_slot(self, storage)
        if slot < 0:
            raise ValueError("bind needs a storage id >= 0")
        self.c_bind(slot, off)

    def add_storage(self, sid, cost=0.0, neighbors=(), evictable=True):
        """Register storage sid (not resident) with its own cost and neighbors."""
        if isinstance(sid, bool) or isinstance(sid, float):
            raise TypeError(f"storage ids are integers, got {sid!r}")
        cdef int64_t key = _index(sid)
        if key < 0:
            raise ValueError(f"storage ids must be >= 0, got {key}")
        if self.storages.by_sid.count(key):
            raise ValueError(f"storage {key} is already registered")
        cdef double c = _cost_arg(cost)
        cdef vector[int] slots
        for n in neighbors:
            if n != key:
                slots.push_back(self.storages.slot_of(n))
        self.c_add_storage(key, c, slots, bool(evictable))

    def remove_storage(self, sid):
        """Forget sid; if resident its piece stays used, anonymous, until freed."""
        self.c_remove_storage(self.storages.slot_of(sid))

    def has_storage(self, sid):
        return self.storages.by_sid.count(_index(sid)) > 0

    def set_cost(self, sid, cost):
        cdef int slot = self.storages.slot_of(sid)
        self.storages.set_cost(slot, _cost_arg(cost))

    def set_evictable(self, sid, flag):
        self.c_set_evictable(self.storages.slot_of(sid), bool(flag))

    def set_offload(self, sid, cost):
        """sid's way out to a host tier costs cost (float('inf'): it has none, the default),
        in its cost's unit; the windows take the cheaper of that and evicting it."""
        cdef double c = float(cost)
        if c != c or c < 0.0:
            raise ValueError(f"an offload cost must be a number >= 0 (inf: none), got {cost!r}")
        self.c_set_offload(self.storages.slot_of(sid), c)

    def offload_wins(self, sid):
        """Whether resident sid, a victim of the choice being carried out (inside an evict
        callback), leaves by an offload rather than by eviction."""
        return bool(self.c_offload_wins(self.storages.slot_of(sid)))

    @property
    def offload_last(self):
        """True (the default): a choice counts offloads (set_offload) only when none exists
        without them; False: every choice counts them, each piece leaving by its cheaper way."""
        return self.offload_last

    @offload_last.setter
    def offload_last(self, flag):
        self.c_count_offloads(not flag)

    def unbind(self, sid):
        """Resident sid leaves its piece unevicted (its bytes went elsewhere): the piece stays
        used and anonymous, to be freed by its owner; sid stays registered, not resident."""
        self.c_unbind(self.storages.slot_of(sid))

    def pin(self, sid):
        self.c_pin(self.storages.slot_of(sid), 1)

    def unpin(self, sid):
        cdef int slot = self.storages.slot_of(sid)
        if self.c_pins(slot) == 0:
            raise ValueError(f"unpin of storage {sid}, which is not pinned")
        self.c_pin(slot, -1)

    def touch(self, sid, now):
        self.c_touch(self.storages.slot_of(sid), _clock_arg(now))

    def storage_info(self, sid):
        cdef int slot = self.storages.slot_of(sid)
        cdef Storage st = self.storages.at[slot]
        cdef Py_ssize_t offset = self.c_offset(slot)
        resident = offset >= 0
        return {
            "resident": resident,
            "offset": offset if resident else None,
            "nbytes": self.table.at[st.piece].size if resident else 0,
            "cost": self.c_cost(slot),
            "cprime": st.cprime if resident else None,
            "last_access": st.last_access,
            "pins": self.c_pins(slot),
            "evictable": bool(self.c_evictable(slot)),
            "movable": bool(st.movable),
            "offload": st.offload,
            "class_cost": self.storages.classes[st.eq_class].cost if st.eq_class >= 0 else None,
        }

    def pieces(self):
        """[(offset, size, free, storage)] in address order; storage -1 when free or anonymous."""
        out = []
        cdef int idx = self.table.first
        while idx >= 0:
            p = self.table.at[idx]
            out.append((p.offset, p.size, bool(p.free),
                        self.storages.at[p.storage].sid if p.storage >= 0 else NO_STORAGE))
            idx = self.table.at[idx].next
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

    @property
    def room_price(self):
        """The room's price per byte in coop's moving window (docs/core.md, "One scale"): what
        the last coop choice carried out paid per byte of its request (its cost over the
        request's bytes; 0.0 before the first). A move's way out is its copy plus this price
        times the bytes it moves. Settable (a number >= 0), for tests and what-ifs."""
        return self.chooser.planner.room_price

    @room_price.setter
    def room_price(self, value):
        try:
            price = float(value)
        except (TypeError, ValueError):
            price = NAN
        if not (price >= 0.0 and price < INFINITY):
            raise ValueError(f"room_price must be a finite number >= 0, got {value!r}")
        self.chooser.planner.room_price = price

    @property
    def moves_if_blocked(self):
        """False (the default): every choice of coop's is the moving window, each piece
        leaving by the cheaper of its eviction and its move. True: the evict-only window
        chooses whenever one covers the request, and the moving window only where none does
        (docs/core.md, "Moving"): a cheaper search, other choices. Only matters with a finite
        move_cost."""
        return self.chooser.moves_if_blocked

    @moves_if_blocked.setter
    def moves_if_blocked(self, flag):
        self.chooser.moves_if_blocked = bool(flag)

    @property
    def excess_weight(self):
        """0.0 (the default): coop's window (evict-only or moving) is the one of least cost.
        A weight w in (0, 1]: the one of least cost per byte it frees, those beyond the request
        counted at w: cost / (request + w * (freed - request)), over the smallest window from
        each start (docs/core.md, "The bytes beyond the request"). 1.0 compares windows as
        DTR compares tensors, per byte. The compaction window is not affected."""
        return self.chooser.excess_weight

    @excess_weight.setter
    def excess_weight(self, value):
        cdef double w
        try:
            w = float(value)
        except (TypeError, ValueError):
            w = NAN
        if not (0.0 <= w <= 1.0):
            raise ValueError(f"excess_weight must be a number in [0, 1], got {value!r}")
        self.chooser.excess_weight = w

    def set_movable(self, sid, flag):
        self.c_set_movable(self.storages.slot_of(sid), bool(flag))

    def move(self, sid, offset):
        """Relocate resident sid to the free piece starting at offset (bookkeeping only)."""
        self.c_move(self.storages.slot_of(sid), _size_arg(offset, "offset"))

    def slide(self, sid, offset):
        """Slide resident sid down to offset, inside the free piece just below it
        (bookkeeping only; see Moving, compaction)."""
        self.c_slide(self.storages.slot_of(sid), _size_arg(offset, "offset"))

    def compact(self, nbytes, now, evict, slide=None):
        """Compaction inside one window for a request of nbytes (docs/core.md, "Moving"):
        evicts the chosen window's candidates through evict(list of storage ids), then slides
        its movable pieces to its low end, calling slide(storage id, old offset, new offset),
        when given, before each (move the bytes; False refuses). The offset from which nbytes
        are free, or -1."""
        cdef size_t size = _checked_request(self, nbytes)
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
        cdef size_t size = _checked_request(self, nbytes)
        cdef int code = policy_code(policy, self.ideal)
        cdef vector[int] victims
        cdef MovePlan plan
        memset(&self.chooser.phases, 0, sizeof(SearchPhases))
        _choose(self, size, code, _clock_arg(now), victims, &plan, None)
        return {
            "victims": [self.storages.at[s].sid for s in victims],
            "moves": [(self.storages.at[plan.moves[k]].sid, plan.dst[k])
                      for k in range(plan.moves.size())],
            "cost": plan.cost if plan.start >= 0 else None,
            "start": plan.start if plan.start >= 0 else None,
            "pieces": plan.pieces,
        }

    def last_search(self):
        """The phases of the last choice (choose_plan's, or the eviction loop's last search):
        seconds sweeping, scanning and planning, plans evaluated, whether the moving window
        ran, whether its quick first pass decided, how its best-first pass tightened the
        windows' bounds ("eager": all before ordering them, "lazy": as popped; None when it did
        not run), and the entries its sweep wrote beside the pieces then (fewer where runs no
        window reaches were skipped) (docs/core.md, Moving)."""
        cdef SearchPhases* p = &self.chooser.phases
        return {"fill_time": p.fill, "scan_time": p.scan, "plan_time": p.plan,
                "plans_evaluated": p.plans, "moving": bool(p.moving), "quick_decided": bool(p.quick),
                "entries": p.entries, "pieces": p.pieces,
                "best_first": "eager" if p.eager else "lazy" if p.lazy else None,
                "room_price": self.chooser.planner.room_price}

    def choose_victims(self, nbytes, policy, now):
        """The storages the policy would evict for a request of nbytes (evicts nothing)."""
        return self.choose_plan(nbytes, policy, now)["victims"]

    def allocate_or_evict(self, nbytes, placement, policy, now, evict, storage=NO_STORAGE,
                          move=None):
        """Place nbytes, evicting through evict(list of storage ids) until it fits; a window
        that moves pieces (see move_cost) calls move(storage id, old offset, new offset), when
        given, before the arena relocates each one (copy the bytes there)."""
        cdef size_t n = _size_arg(nbytes, "the request")
        if n > self.capacity:
            raise _too_large(self, n)
        cdef int code = policy_code(policy, self.ideal)
        cdef int slot = _unbound_slot(self, storage)
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
        self.log.start()

    def take_log(self):
        """Stop recording; the log since start_log as [offset, nbytes, offset, -1, ...]: an
        allocation's offset and byte count (the request's own count for allocate,
        allocate_or_evict, request and c_request; the rounded size for other C callers of
        c_allocate / c_allocate_or_evict), a free's offset and -1, or a move of coop's window
        as five: old offset, LOG_MOVE (-2), new offset, size, storage id. [] if none was
        started."""
        return self.log.take()

    def stats(self):
        out = {
            "capacity": self.capacity,
            "ideal": bool(self.ideal),
            "used_bytes": self.used_bytes,
            "peak_used_bytes": self.peak_used,
            "free_bytes": self.capacity - self.used_bytes,
            "largest_free": self.largest_free(),
            "pieces": self.table.count,
            "free_pieces": self.table.n_free,
        }
        out.update(self.loop.stats())
        return out

    def check(self):
        """Verify every invariant; raise coop.errors.InternalError naming the first one broken."""
        _check(self)

    def __repr__(self):
        return (f"<coop.Arena capacity={self.capacity} used={self.used_bytes} "
                f"pieces={self.table.count} free_pieces={self.table.n_free}>")


cdef class Evictor:
    """Frees victims for the eviction loop; as an arena's owner it also names the policy and
    clock that Arena.c_request evicts with (policy_code, now, policy_name: set by subclasses)."""

    def __cinit__(self, *args, **kwargs):
        self.policy_code = P_NONE
        self.now = 0.0
        self.policy_name = "none"
        self.lock = None

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

    cdef bint widen(self, Arena arena) except -1:
        """No choice makes room: the owner may offer more ways out (Arena.c_set_offload) and
        return True for the eviction loop to choose again; False (the default) and the
        allocation fails. An owner widens a finite number of times."""
        return False

    cdef int price(self, Arena arena) except -1:
        """A choice that counts offloads is about to be made: the owner may price its offers
        anew for it (Arena.c_set_offload; the host tier's known next reads). The default
        changes nothing."""
        return 0

    cdef str oom_note(self, Arena arena):
        """No choice made room: what the owner adds to the out-of-memory error's message
        (what of its own stopped it, and the fix), or "" (the default)."""
        return ""


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
    under core policy ``policy`` (one of coop._core.POLICIES), with staleness measured at ``now``."""

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
