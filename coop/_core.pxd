# The arena core: what other Cython modules (the host memory handler) cimport.
from libc.stdint cimport int64_t
from libcpp.set cimport set as cset
from libcpp.unordered_map cimport unordered_map
from libcpp.utility cimport pair
from libcpp.vector cimport vector

ctypedef pair[size_t, size_t] SizeOffset

cdef struct Piece:
    size_t offset      # start, in bytes from the arena's base; a multiple of the alignment
    size_t size        # > 0, a multiple of the alignment
    int prev           # piece just below in address order, -1 at offset 0
    int next           # piece just above, -1 at the end; chains unused slots in the pool
    int storage        # bound storage slot; -1 when free or anonymous
    int block          # the block holding this piece's scan entry (found in it by _entry)
    unsigned char free # free pieces are in free_index; never two adjacent


cdef enum Placement:
    # where an allocation goes (the Python constants EXPENSIVE, CHEAP, LOWEST have these values)
    PLACE_EXPENSIVE = 0   # best fit, at the low end of the chosen free piece
    PLACE_CHEAP = 1       # best fit, at its high end
    PLACE_LOWEST = 2      # first fit in address order, at the low end (constants)


cdef enum PolicyCode:
    # the core's eviction policies, in the order of coop._core.POLICIES
    P_COOP, P_DTR, P_DTE, P_LRU, P_SIZE, P_NONE


cdef enum:
    BLOCK_LEN = 64     # scan entries per block
    W_FREE = 1         # Block.flags: the piece is free
    W_CANDIDATE = 2    # Block.flags: bound, evictable and unpinned: may be evicted
    W_MOVABLE = 4      # Block.flags (a bit, with W_CANDIDATE or alone): bound, movable, unpinned


cdef struct Block:
    # A run of consecutive pieces' scan inputs, by value and in address order, so the victim
    # scans sweep contiguous arrays instead of chasing piece links. Blocks are chained in
    # address order; entry k of a block is the piece piece[k], whose block points back.
    int count                       # entries in use, 1..BLOCK_LEN; two neighbours: > BLOCK_LEN/2
    int prev                        # block just below in address order, -1 for the first
    int next                        # block just above, -1 for the last; chains the block pool
    int piece[BLOCK_LEN]            # the piece of each entry; -1 in the unused slots
    unsigned char flags[BLOCK_LEN]  # W_FREE, or W_CANDIDATE | W_MOVABLE bits; 0 for a wall
    size_t size[BLOCK_LEN]          # mirror of the piece's size
    double cprime[BLOCK_LEN]        # mirror of the bound storage's c'; 0 if unbound
    double last_access[BLOCK_LEN]   # mirror of the bound storage's last_access


cdef struct Storage:
    int64_t sid        # the owner's id; key of by_sid while the slot is live
    double cost        # own compute cost, >= 0
    double cprime      # cost + costs of the distinct classes of evicted neighbours; valid while resident
    double last_access # logical clock of the last touch
    int piece          # bound piece, -1 when not resident
    int pins           # > 0 forbids eviction
    bint evictable     # False: the owner cannot recompute it (or holds it elsewhere)
    int eq_class       # DTR equivalence class slot while evicted (and ever resident), else -1
    int eq_next        # circular list of the class's members
    int eq_prev
    bint live          # slot in use (else chained in storage_pool)
    bint movable       # False: the owner cannot relocate it (its memory is held elsewhere)


cdef struct EvictedClass:
    double cost        # sum of its members' costs
    int head           # one member; -1 when the slot is unused
    int size           # number of members


cdef class Evictor


cdef class Arena:
    cdef readonly size_t capacity       # usable bytes: the budget rounded down to the alignment
    cdef readonly size_t alignment      # a power of two
    cdef readonly bint ideal            # count bytes only, as DTR's simulator (no fragmentation)
    cdef size_t space                   # bytes the pieces tile: capacity, or IDEAL_SPACE if ideal
    cdef vector[Piece] pieces_          # piece slots; address order via prev/next
    cdef int first                      # piece at offset 0
    cdef int piece_pool                 # unused piece slots, chained through next
    cdef vector[Block] blocks           # block slots; pointers into it die when it grows
    cdef int first_block                # the block holding the piece at offset 0
    cdef int block_pool                 # unused block slots, chained through next
    cdef vector[double] scan_h          # _choose_window scratch, a piece each, address order: h
    cdef vector[size_t] scan_size       # ... its size
    cdef vector[unsigned char] scan_flags   # ... its flags
    cdef cset[SizeOffset] free_index    # (size, offset) of every free piece: best fit
    cdef unordered_map[size_t, int] by_offset   # offset -> piece, for every piece
    cdef vector[Storage] storages       # storage slots
    cdef vector[vector[int]] adjacency  # per storage slot: neighbour slots (symmetric)
    cdef unordered_map[int64_t, int] by_sid
    cdef vector[int] storage_pool       # unused storage slots
    cdef vector[EvictedClass] classes   # class slots
    cdef vector[int] class_pool         # unused class slots
    cdef vector[vector[int]] frontier   # per class: resident storages next to a member (a superset:
                                        # may hold duplicates and stale slots, pruned on refresh)
    cdef vector[unsigned int] stamps    # per storage slot: dedup mark of _refresh_class
    cdef unsigned int stamp_now         # the current mark
    cdef vector[int] seen               # _cprime scratch: distinct classes of one storage
    cdef readonly size_t used_bytes     # sum of used piece sizes
    cdef size_t peak_used               # highest used_bytes so far
    cdef Py_ssize_t n_pieces            # pieces in the address list
    cdef Py_ssize_t n_free_pieces       # == free_index.size()
    cdef long long evictions            # victims evicted by allocate_or_evict
    cdef long long bytes_evicted        # their piece sizes
    cdef long long searches             # eviction searches
    cdef long long failed               # eviction loops that raised OutOfMemoryError
    cdef double search_time             # seconds spent choosing victims
    cdef double frag_sum                # sum over searches of free / capacity
    cdef double largest_ratio_sum       # sum over failures of largest free / free
    cdef readonly Evictor owner         # evicts for c_request when nothing fits; None: nobody
    cdef bint logging                   # record c_allocate / c_free / moves into alloc_log
    cdef vector[int64_t] alloc_log      # [offset, nbytes, offset, -1 (a free), ...] since start_log
    cdef public object managed_by       # None, or the backend whose arrays own the pieces: free() refuses
    cdef vector[int] placing_slots      # slots being placed by eviction loops now, innermost last
    cdef vector[unsigned char] placing_lost   # ... each: removed by an evict callback meanwhile
    cdef double move_rate               # cost of moving one byte; INFINITY: coop never moves
    cdef long long moves                # pieces relocated by eviction loops
    cdef long long bytes_moved          # their sizes
    cdef double move_cost_sum           # their move costs (size * move_rate)
    cdef vector[double] scan_v          # _choose_moving scratch: a piece's cheapest way out
    cdef vector[int] scan_piece         # ... its piece
    cdef vector[SizeOffset] scan_bins   # ... the free pieces as (SIZE_MAX - size, scan index)
    cdef vector[int] scan_nfree         # ... free pieces before each entry (a prefix count)
    cdef vector[int] scan_nmand         # ... pieces that must move (movable, not candidates)
    cdef vector[int] scan_nopt          # ... candidates whose move is cheaper than their h
    cdef vector[size_t] plan_outb       # _plan scratch: free sizes outside the window
    cdef vector[size_t] plan_chosen     # ... moved sizes, largest first
    cdef vector[unsigned char] plan_flag   # ... moved entries of the window
    cdef vector[int] plan_moves         # the chosen window's moved storage slots, address order
    cdef vector[size_t] plan_dst        # ... each one's destination offset
    cdef double plan_cost               # the chosen window's cost (INFINITY: none chosen)
    cdef Py_ssize_t plan_start          # its first piece's offset (-1: none)
    cdef Py_ssize_t plan_len            # its number of pieces

    cdef int _new_piece(self, size_t offset, size_t size, int prev, int next, bint free) noexcept
    cdef void _split_low(self, int idx, size_t size) noexcept
    cdef void _drop_piece(self, int idx) noexcept
    cdef inline void _index_free(self, int idx) noexcept
    cdef inline void _unindex_free(self, int idx) noexcept
    cdef size_t request_size(self, size_t nbytes) noexcept
    cdef size_t largest_free(self) noexcept
    cdef Py_ssize_t c_allocate(self, size_t size, int placement, int slot) noexcept
    cdef int c_free(self, size_t offset) except -1
    cdef Py_ssize_t c_lowest_fit(self, size_t size) noexcept
    cdef int _slot(self, sid) except -1
    cdef void _bind(self, int idx, int slot) noexcept
    cdef inline void _sync(self, int slot) noexcept
    cdef void _on_evicted(self, int slot) noexcept
    cdef int _class_new(self, int slot) noexcept
    cdef int _class_union(self, int a, int b) noexcept
    cdef void _class_leave(self, int slot) noexcept
    cdef double _cprime(self, int slot) noexcept
    cdef void _refresh_neighbours(self, int slot) noexcept
    cdef void _refresh_class(self, int c) noexcept
    cdef inline bint _candidate(self, int idx) noexcept
    cdef void _choose(self, size_t size, int policy, double now, vector[int]& victims) noexcept
    cdef void _choose_window(self, size_t size, double now, vector[int]& victims) noexcept
    cdef void _choose_moving(self, size_t size, double now, vector[int]& victims) noexcept
    cdef size_t _fill_scan(self, double now, bint pieces) noexcept
    cdef void _scan_evict(self, size_t size, size_t total, size_t* best_lo, size_t* best_end,
                          double* best_cost, double* best_sum) noexcept
    cdef void _take_window(self, size_t best_lo, size_t best_end, double best_cost,
                           vector[int]& victims) noexcept
    cdef int _do_moves(self, Evictor evictor) except -1
    cdef int _relocate_all(self, Evictor evictor, bint log) except -1
    cdef int _carve(self, size_t dst, size_t size, int64_t sid) except -1
    cdef void _rebind(self, int slot, int idx) noexcept
    cdef bint _plan(self, size_t lo, size_t end, vector[size_t]& outb, vector[int]& moved,
                    double* cost) noexcept
    cdef size_t _checked_request(self, nbytes) except? 0
    cdef object _too_large(self, size_t nbytes)
    cdef int _unbound_slot(self, storage) except -2
    cdef int _anonymous_piece(self, size_t offset) except -1
    cdef object _oom(self, size_t size, policy)
    cdef Py_ssize_t _evict_loop(self, size_t size, int placement, int code, double now,
                                int slot, Evictor evictor, object policy,
                                size_t depth) except -2
    # C-level API for Cython owners (the trace replayer, the backends): storage slots instead of
    # ids; nothing outside this module reads the private fields above
    cdef Py_ssize_t c_allocate_or_evict(self, size_t size, int placement, int code, double now,
                                        int slot, Evictor evictor, object policy) except -2
    cdef Py_ssize_t c_request(self, size_t nbytes, int placement) except -2
    cdef int c_add_storage(self, int64_t key, double cost, vector[int]& neighbours,
                           bint evictable) except -1
    cdef void c_remove_storage(self, int slot) noexcept
    cdef int c_bind(self, int slot, size_t offset) except -1
    cdef void c_pin(self, int slot, int delta) noexcept
    cdef void c_touch(self, int slot, double now) noexcept
    cdef void c_set_evictable(self, int slot, bint flag) noexcept
    cdef void c_set_movable(self, int slot, bint flag) noexcept
    cdef bint c_movable(self, int slot) noexcept
    cdef int c_move(self, int slot, size_t dst) except -1
    cdef int c_slide(self, int slot, size_t dst) except -1
    cdef Py_ssize_t c_compact(self, size_t size, double now, Evictor evictor) except -2
    cdef double c_cost(self, int slot) noexcept
    cdef int c_pins(self, int slot) noexcept
    cdef bint c_evictable(self, int slot) noexcept
    cdef int64_t c_sid(self, int slot) noexcept
    cdef Py_ssize_t c_offset(self, int slot) noexcept
    cdef int c_used_piece(self, size_t offset, size_t* size, int* slot) noexcept
    cdef void c_log_request(self, size_t nbytes) noexcept


cdef class Evictor:
    """What the eviction loop calls with the victims' storage slots; it must free each
    victim's piece (or make it unevictable). As an arena's owner (Arena.attach) it also says
    how c_request evicts: its subclass keeps these up to date."""
    cdef int policy_code               # a PolicyCode (P_COOP ... P_NONE); P_NONE by default
    cdef double now                    # the owner's logical clock, for staleness; 0.0 by default
    cdef object policy_name            # the core policy's name, for error messages; "none"
    cdef int evict(self, Arena arena, vector[int]& victims) except -1
    cdef int move(self, Arena arena, int slot, size_t src, size_t dst) except -1
    cdef int moved(self, Arena arena) except -1
    cdef int slide(self, Arena arena, int slot, size_t src, size_t dst) except -1


cdef int policy_code(policy, bint ideal) except -1
