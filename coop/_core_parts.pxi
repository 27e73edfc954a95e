# Declarations of the arena's parts (included by _core.pxd). Cython needs them to lay out Arena;
# they are the core's own: no module outside coop._core uses a name declared here.
from libcpp.set cimport set as cset
from libcpp.unordered_map cimport unordered_map
from libcpp.utility cimport pair

ctypedef pair[size_t, size_t] SizeOffset


cdef struct Piece:
    size_t offset      # start, in bytes from the arena's base; a multiple of the alignment
    size_t size        # > 0, a multiple of the alignment
    int prev           # piece just below in address order, -1 at offset 0
    int next           # piece just above, -1 at the end; chains unused slots in the pool
    int storage        # bound storage slot; -1 when free or anonymous
    int run            # the scan run holding this piece's entry (found in it by ScanRuns.entry)
    unsigned char free # free pieces are in the free index; never two adjacent
    unsigned char at_k # where in its run its entry was last seen: a hint, checked before use


cdef enum:
    RUN_LEN = 64       # entries per scan run
    W_FREE = 1         # ScanRun.flags: the piece is free
    W_CANDIDATE = 2    # ScanRun.flags: bound, evictable and unpinned: may be evicted
    W_MOVABLE = 4      # ScanRun.flags (a bit, with W_CANDIDATE or alone): bound, movable, unpinned


cdef struct ScanRun:
    # Consecutive pieces' scan inputs, by value and in address order, so that the window scans
    # sweep contiguous arrays instead of chasing piece links. Runs are chained in address
    # order; entry k of a run is the piece piece[k], whose run points back.
    int count                       # entries in use, 1..RUN_LEN; two neighbors: > RUN_LEN/2
    int prev                        # run just below in address order, -1 for the first
    int next                        # run just above, -1 for the last; chains the run pool
    int piece[RUN_LEN]              # the piece of each entry; -1 in the unused slots
    unsigned char flags[RUN_LEN]    # W_FREE, or W_CANDIDATE | W_MOVABLE bits; 0 for a wall
    size_t size[RUN_LEN]            # mirror of the piece's size
    double dsize[RUN_LEN]           # ... as a double (the moving window's fill vectorises)
    double cprime[RUN_LEN]          # mirror of the bound storage's c'; 0 if unbound
    double mlimit[RUN_LEN]          # a move is its way out iff a free piece holds it and the
                                    # copy (size * move cost) is below this (_mlimit)
    double last_access[RUN_LEN]     # mirror of the bound storage's last_access


cdef struct Storage:
    int64_t sid        # the owner's id; key of by_sid while the slot is live
    double cost        # own compute cost, >= 0
    double cprime      # cost + costs of the distinct classes of evicted neighbors; valid while resident
    double last_access # logical clock of the last touch
    int piece          # bound piece, -1 when not resident
    int pins           # > 0 forbids eviction
    bint evictable     # False: the owner cannot recompute it (or holds it elsewhere)
    int eq_class       # DTR equivalence class slot while evicted (and ever resident), else -1
    int eq_next        # circular list of the class's members
    int eq_prev
    bint live          # slot in use (else chained in the storage pool)
    bint movable       # False: the owner cannot relocate it (its memory is held elsewhere)
    double offload     # cost of its way out to the owner's host tier (copy out and back);
                       # INFINITY: it may not go there. An offloaded storage is registered,
                       # not resident, in no class (nothing recomputes it: a copy brings it back)


cdef struct EvictedClass:
    double cost        # sum of its members' costs
    int head           # one member; -1 when the slot is unused
    int size           # number of members


cdef struct MovePlan:
    # What the chosen window does besides evicting its candidates (Chooser.choose's result)
    vector[int] moves          # the moved storage slots, address order
    vector[size_t] dst         # ... each one's destination offset
    double cost                # the window's cost (INFINITY: none chosen)
    Py_ssize_t start           # its first piece's offset (-1: none)
    Py_ssize_t pieces          # its number of pieces


cdef struct SearchPhases:
    # where a coop window search spends its time: seconds, then counts
    double fill                # sweeping the scan runs into the scratch arrays (h, mv, kinds)
    double scan                # the two-pointer scans: the evict-only window, the moving first pass
    double plan                # the moving window's plans: best first, bounds, destinations
    long long plans            # plans evaluated (MovePlanner.evaluate)
    long long moving           # searches that ran the moving window
    long long quick            # ... that its quick first pass decided
    long long lazy             # ... whose best-first pass tightened bounds as it popped them
    long long eager            # ... whose best-first pass tightened every bound first
    long long entries          # entries the moving window's sweeps wrote (a placeholder: one)
    long long pieces           # pieces in the arena at those sweeps


cdef struct Counters:
    # the eviction loop's counters (Arena.stats)
    long long evictions        # victims evicted by the eviction loop and compaction
    long long bytes_evicted    # their piece sizes
    long long searches         # eviction searches
    long long failed           # eviction loops that raised OutOfMemoryError
    double search_time         # seconds spent choosing victims
    double frag_sum            # sum over searches of free / capacity
    double largest_ratio_sum   # sum over failures of largest free / free
    long long moves            # pieces moved by windows or slid by compaction
    long long bytes_moved      # their sizes
    double move_cost_sum       # their move costs (size * move_rate)
    long long offloads         # victims that left for the owner's host tier instead
    long long bytes_offloaded  # their piece sizes
    SearchPhases phases        # the searches' phases, summed (coop's window searches)


@cython.final
cdef class ScanRuns:
    cdef bint offloads                  # the entries count offloads (Storage.offload) as a way out
    cdef vector[ScanRun] runs           # run slots; pointers into it die when it grows
    cdef int first                      # the run holding the piece at offset 0
    cdef int pool                       # unused run slots, chained through next
    cdef vector[Piece]* pieces          # the piece table's slots (each piece names its run)
    cdef int new_run(self, int prev, int next) noexcept
    cdef void unlink(self, int r) noexcept
    cdef int entry(self, int idx) noexcept
    cdef void mirror_piece(self, int idx) noexcept
    cdef void mirror_storage(self, int idx, Storage* st) noexcept
    cdef void mirror_wall(self, int idx) noexcept
    cdef unsigned char flags(self, int idx) noexcept
    cdef void move_entry(self, ScanRun* dst, int r, int k, ScanRun* src, int j) noexcept
    cdef void shift(self, int r, int k, int end, int by) noexcept
    cdef void insert(self, int after, int idx) noexcept
    cdef void merge(self, int r) noexcept
    cdef void remove(self, int idx) noexcept
    cdef void settle(self, int r) noexcept


@cython.final
@cython.no_gc_clear
cdef class PieceTable:
    cdef vector[Piece] at               # piece slots; address order via prev/next
    cdef int first                      # piece at offset 0
    cdef int pool                       # unused piece slots, chained through next
    cdef cset[SizeOffset] free_index    # (size, offset) of every free piece: best fit
    cdef unordered_map[size_t, int] by_offset   # offset -> piece, for every piece
    cdef Py_ssize_t count               # pieces in the address list
    cdef Py_ssize_t n_free              # == free_index.size()
    cdef ScanRuns runs                  # the pieces' scan entries
    cdef int new_piece(self, size_t offset, size_t size, int prev, int next, bint free) noexcept
    cdef void split_low(self, int idx, size_t size) noexcept
    cdef int split_high(self, int idx, size_t size) noexcept
    cdef void drop(self, int idx) noexcept
    cdef void index_free(self, int idx) noexcept
    cdef void unindex_free(self, int idx) noexcept
    cdef int find(self, size_t offset) noexcept
    cdef size_t largest_free(self) noexcept
    cdef int best_fit(self, size_t size, int placement) noexcept
    cdef int lowest_fit(self, size_t size) noexcept
    cdef int take(self, int idx, size_t size, int placement) noexcept
    cdef int carve(self, size_t dst, size_t size) noexcept
    cdef int release(self, int idx) noexcept
    cdef void slide(self, int idx, size_t dst) noexcept


@cython.final
@cython.no_gc_clear
cdef class Storages:
    cdef vector[Storage] at             # storage slots
    cdef vector[vector[int]] adjacency  # per storage slot: neighbor slots (symmetric)
    cdef unordered_map[int64_t, int] by_sid
    cdef vector[int] pool               # unused storage slots
    cdef vector[EvictedClass] classes   # class slots
    cdef vector[int] class_pool         # unused class slots
    cdef vector[vector[int]] frontier   # per class: resident storages next to a member (a superset:
                                        # may hold duplicates and stale slots, pruned on refresh)
    cdef vector[unsigned int] stamps    # per storage slot: dedup mark of refresh_class
    cdef unsigned int stamp_now         # the current mark
    cdef vector[int] cls                # per storage slot: its eq_class (a compact mirror
                                        # that cprime reads, -1 while resident or in none)
    cdef vector[uint64_t] class_mark    # per class: the cprime call that last counted it
    cdef uint64_t mark                  # the current cprime call's mark
    cdef PieceTable pieces              # where resident storages' scan inputs are mirrored
    cdef int add(self, int64_t key, double cost, vector[int]& neighbors, bint evictable) noexcept
    cdef void remove(self, int slot) noexcept
    cdef int slot_of(self, sid) except -1
    cdef void bind(self, int idx, int slot) noexcept
    cdef void rebind(self, int slot, int idx) noexcept
    cdef void sync(self, int slot) noexcept
    cdef void set_cost(self, int slot, double cost) noexcept
    cdef void evicted(self, int slot) noexcept
    cdef int class_new(self, int slot) noexcept
    cdef int class_union(self, int a, int b) noexcept
    cdef void class_leave(self, int slot) noexcept
    cdef double cprime(self, int slot) noexcept
    cdef void refresh_neighbors(self, int slot) noexcept
    cdef void refresh_class(self, int c) noexcept


@cython.final
cdef class Chooser:
    cdef PieceTable pieces
    cdef Storages storages
    cdef bint ideal                     # an ideal arena: no neighbors in memory (dte)
    cdef bint moves_if_blocked          # coop moves only when no evict-only window exists
    cdef double excess_weight           # coop's windows compared per byte freed, those beyond
                                        # the request at this weight (0.0: by cost alone)
    cdef vector[double] h               # fill's scratch, an entry per piece in address order: h
                                        # (MovePlanner: where costs wrote it)
    cdef vector[size_t] size            # ... its size
    cdef vector[unsigned char] flags    # ... its flags
    cdef vector[int] piece              # ... its piece (fill with pieces)
    cdef vector[double] mv              # ... its move on h's scale (MovePlanner.fill)
    cdef vector[double] value           # compact_window's scratch: an entry's cost in the window
    cdef vector[size_t] cover           # ... the bytes it frees
    cdef MovePlanner planner            # the window when pieces may move
    cdef SearchPhases phases            # its last choice's phases (a coop window's; else zero)
    cdef void choose(self, size_t size, int policy, double now, double rate,
                     vector[int]& victims, MovePlan* plan) noexcept
    cdef void choose_one(self, size_t size, int policy, double now, vector[int]& victims) noexcept
    cdef size_t fill(self, double now, bint pieces) noexcept
    cdef bint evict_window(self, size_t size, size_t total, size_t* best_lo, size_t* best_end,
                           double* best_cost, double* best_sum) noexcept
    cdef void take_window(self, size_t best_lo, size_t best_end, double best_cost,
                          vector[int]& victims, MovePlan* plan) noexcept
    cdef bint compact_window(self, size_t size, double now, double rate, size_t* best_lo,
                             size_t* best_end) noexcept


@cython.final
cdef class MovePlanner:
    cdef Chooser scan                   # the scratch arrays that fill swept
    cdef vector[double] v               # an entry's cheapest way out of a window (full: if no move)
    cdef vector[double] q               # ... full: if a move (each entry is 0.0 in one of v, q)
    cdef vector[unsigned char] kind     # ... its kind for the scan (K_* bits; 0: a wall)
    cdef vector[SizeOffset] bins        # the free entries as (SIZE_MAX - size, entry)
    cdef vector[double] lbs             # the smallest window from each start: its bound (NaN: none)
    cdef size_t next_lo                 # the scan's next start without a bound yet
    cdef double least                   # the window of least bound: its bound
    cdef size_t least_lo                # ... its start (the number of entries: none)
    cdef vector[pair[double, Py_ssize_t]] heap  # best_first's windows as (-bound, -start)
    cdef vector[double] saving          # bound's scratch: the optional movers' h - mv
    cdef vector[size_t] mover_sizes     # ... the sizes of all its movers
    cdef vector[size_t] outb            # outside's: free sizes outside the window, largest first
    cdef vector[size_t] chosen          # ... moved sizes, largest first
    cdef vector[unsigned char] moved_flag   # ... moved entries of the window
    cdef vector[int] moved              # ... the plan's moved entries
    cdef size_t size                    # the search's request
    cdef double rate                    # ... its move cost per byte
    cdef double now                     # ... its clock
    cdef double price                   # ... the room's price per byte it counts (room_price or 0)
    cdef double room_price              # what the last coop choice carried out paid per byte of
                                        # its request (Arena.room_price): a move adds it per byte
    cdef size_t largest                 # ... the largest free piece
    cdef vector[unsigned char] done     # ... each entry's kind, h and mv written (details)
    cdef bint detailed                  # ... every entry's
    cdef double undecided               # the share of recent searches the first pass left open
    cdef size_t first_end               # the end of the window evaluate saw last
    cdef double popped                  # the share of ordered windows recent best-firsts popped
    cdef int eager_run                  # best-firsts in a row that tightened every bound first
    cdef vector[int] run_at             # fill's runs, in address order (-1: a placeholder)
    cdef vector[size_t] run_base        # ... the entry of each one's first piece
    cdef vector[int] run_k0             # ... the first of its entries swept (fill: part of a run)
    cdef vector[int] run_k1             # ... and the end of them
    cdef vector[int] walk               # skip_runs' scratch: the runs in address order
    cdef vector[unsigned char] skipped  # ... each: plain (no free or candidate entry)
    cdef vector[int] seg_run            # ... what fill sweeps: runs (-1: a placeholder)
    cdef vector[int] seg_lo             # ... each one's entries seg_lo..seg_hi-1
    cdef vector[int] seg_hi
    cdef size_t total                   # the entries fill wrote
    cdef double ub                      # ... the least cost (from above) of a window seen that moves nothing
    cdef double best_cost               # ... the best plan so far: its cost
    cdef size_t best_lo                 # ... its entries, best_lo..best_end-1 (best_end 0: none)
    cdef size_t best_end
    cdef vector[int] best_moved         # ... its moved entries
    cdef vector[SizeOffset] order       # destinations' scratch: the moved entries, largest first
    cdef vector[unsigned char] taken    # ... each free entry: taken as a destination
    cdef vector[size_t] dst_of          # ... each entry of the window: its destination
    cdef vector[unsigned char] is_moved # ... each entry of the window: moved
    cdef void choose(self, size_t size, double now, double rate, vector[int]& victims,
                     MovePlan* plan) noexcept
    cdef void visit(self, size_t lo, double p_left, double p_right, double q_left,
                    double q_right, int taken, int movers, bint costless,
                    size_t covered) noexcept
    cdef size_t fill(self, double now, double rate, double price, bint costs, bint kinds,
                     size_t request) noexcept
    cdef bint skip_runs(self, size_t request) noexcept
    cdef void _segment(self, int r, int lo, int hi) noexcept
    cdef void window_details(self, size_t lo) noexcept
    cdef void details(self, size_t lo, size_t end) noexcept
    cdef void full(self, size_t total) noexcept
    cdef void best_first(self, size_t total) noexcept
    cdef void evaluate(self, size_t lo) noexcept
    cdef double bound(self, size_t lo, double lb) noexcept
    cdef void outside(self, size_t lo, size_t end, size_t most) noexcept
    cdef bint plan(self, size_t lo, size_t end, double rate, vector[size_t]& outb,
                   vector[int]& moved, double* cost) noexcept
    cdef void destinations(self, size_t best_lo, size_t best_end, vector[int]& best_moved,
                           vector[int]& victims, MovePlan* plan) noexcept


@cython.final
cdef class EvictionLoop:
    cdef Counters counts
    cdef vector[int] placing_slots      # slots being placed by eviction loops now, innermost last
    cdef vector[unsigned char] placing_lost   # ... each: removed by an evict callback meanwhile
    cdef Py_ssize_t run(self, Arena arena, size_t size, int placement, int code, double now,
                        int slot, Evictor evictor, object policy, size_t depth) except -2
    cdef int evict(self, Arena arena, vector[int]& victims, Evictor evictor,
                   bint strict) except -1
    cdef int carry_out(self, Arena arena, MovePlan* plan, Evictor evictor) except -1
    cdef Py_ssize_t compact(self, Arena arena, size_t size, double now,
                            Evictor evictor) except -2
    cdef void lost(self, int slot) noexcept
