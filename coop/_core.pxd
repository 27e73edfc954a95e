# The arena core's C API, for the Cython modules above it (engine, replayer, executors, backends).
# They use the enums, Arena's readonly fields and c_* methods (plus request_size, largest_free),
# AllocLog's c_* methods through Arena.log, Evictor and policy_code; nothing else.
cimport cython
from libc.stdint cimport int64_t, uint64_t
from libcpp.vector cimport vector

cdef class Arena
cdef class Evictor
cdef class MovePlanner

include "_core_parts.pxi"


cdef enum Placement:
    # where an allocation goes (the Python constants EXPENSIVE, CHEAP, LOWEST have these values)
    PLACE_EXPENSIVE = 0   # best fit, at the low end of the chosen free piece
    PLACE_CHEAP = 1       # best fit, at its high end
    PLACE_LOWEST = 2      # first fit in address order, at the low end (constants)


cdef enum PolicyCode:
    # the core's eviction policies, in the order of coop._core.POLICIES
    P_COOP, P_DTR, P_DTE, P_LRU, P_SIZE, P_NONE


@cython.final
cdef class AllocLog:
    """The arena's allocation log; the arena is its one writer, owners only steer it."""
    cdef bint on                        # recording
    cdef vector[int64_t] entries        # [offset, nbytes, offset, LOG_FREE, ...] since start
    cdef void c_allocated(self, size_t offset, size_t nbytes) noexcept
    cdef void c_freed(self, size_t offset) noexcept
    cdef void c_moved(self, size_t old, size_t new, size_t size, int64_t sid) noexcept
    cdef void c_request(self, size_t nbytes) noexcept
    cdef void c_unlog_allocation(self) noexcept
    cdef bint c_pause(self) noexcept
    cdef void c_resume(self, bint on) noexcept
    cdef void c_restart(self) noexcept


@cython.no_gc_clear
cdef class Arena:
    cdef readonly size_t capacity       # usable bytes: the budget rounded down to the alignment
    cdef readonly size_t alignment      # a power of two
    cdef readonly bint ideal            # count bytes only, as DTR's simulator (no fragmentation)
    cdef readonly size_t used_bytes     # sum of used piece sizes
    cdef size_t peak_used               # highest used_bytes so far
    cdef size_t space                   # bytes the pieces tile: capacity, or IDEAL_SPACE if ideal
    cdef double move_rate               # cost of moving one byte; INFINITY: coop never moves
    cdef bint offload_last              # offloads only when no window without them exists
    cdef bint offload_taken             # the victims being carried out were chosen with offloads
    cdef bint offload_held              # the owner asks for choices without offloads for now
    cdef Py_ssize_t n_offload           # registered storages with an offload (finite cost)
    cdef readonly Evictor owner         # evicts for c_request when nothing fits; None: nobody
    cdef public object managed_by       # None, or the backend whose arrays own the pieces: free() refuses
    cdef AllocLog log                   # records allocations, frees and moves while on
    cdef PieceTable table               # the pieces: page table, free index, scan runs
    cdef Storages storages              # eviction metadata and classes
    cdef Chooser chooser                # the policies' victim choice
    cdef EvictionLoop loop              # the eviction loop, compaction, their counters

    cdef size_t request_size(self, size_t nbytes) noexcept
    cdef size_t largest_free(self) noexcept
    cdef Py_ssize_t c_allocate(self, size_t size, int placement, int slot) noexcept
    cdef int c_free(self, size_t offset) except -1
    cdef Py_ssize_t c_lowest_fit(self, size_t size) noexcept
    cdef Py_ssize_t c_allocate_or_evict(self, size_t size, int placement, int code, double now,
                                        int slot, Evictor evictor, object policy) except -2
    cdef Py_ssize_t c_request(self, size_t nbytes, int placement) except -2
    cdef Py_ssize_t _owner_evicts(self, size_t size, int placement, Evictor owner) except -2
    cdef int c_add_storage(self, int64_t key, double cost, vector[int]& neighbors,
                           bint evictable) except -1
    cdef void c_remove_storage(self, int slot) noexcept
    cdef int c_bind(self, int slot, size_t offset) except -1
    cdef void c_evicted(self, int slot) noexcept
    cdef void c_pin(self, int slot, int delta) noexcept
    cdef void c_touch(self, int slot, double now) noexcept
    cdef void c_demote(self, int slot) noexcept
    cdef void c_set_evictable(self, int slot, bint flag) noexcept
    cdef void c_set_movable(self, int slot, bint flag) noexcept
    cdef void c_set_offload(self, int slot, double cost) noexcept
    cdef bint c_offload_wins(self, int slot) noexcept
    cdef double c_offload_cost(self, int slot) noexcept
    cdef int c_unbind(self, int slot) except -1
    cdef void c_count_offloads(self, bint always) noexcept
    cdef int c_move(self, int slot, size_t dst) except -1
    cdef int c_slide(self, int slot, size_t dst) except -1
    cdef Py_ssize_t c_compact(self, size_t size, double now, Evictor evictor) except -2
    cdef double c_cost(self, int slot) noexcept
    cdef double c_last_access(self, int slot) noexcept
    cdef bint c_searched(self) noexcept
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
    cdef public object lock            # what an eviction for c_request holds (the owner's
                                       # runtime's lock, any thread allocating); None: none
    cdef int evict(self, Arena arena, vector[int]& victims) except -1
    cdef int move(self, Arena arena, int slot, size_t src, size_t dst) except -1
    cdef int moved(self, Arena arena) except -1
    cdef int slide(self, Arena arena, int slot, size_t src, size_t dst) except -1
    cdef bint widen(self, Arena arena) except -1
    cdef int price(self, Arena arena) except -1
    cdef str oom_note(self, Arena arena)


cdef int policy_code(policy, bint ideal) except -1
