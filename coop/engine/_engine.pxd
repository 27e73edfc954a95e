# The residency engine's C API: what the trace replayer and the executors cimport.
#
# The Engine is one object built from layers, each a cdef class in its own .pxi file that uses
# only the layers below it: _Clock (clock and counters) < _Records (storage and op tables,
# memory, record lifetime) < _Room (moves, making room, the retry of a failed first run) <
# _Tier (the host tier: offloads, copies back, prefetch) < _Residency (pins, rematerialization,
# demotion, materialize) < _FirstRun (a first run's
# records) < _InPlace (recomputable in-place) < Engine (construction, the Python API).
# Executors (SizeExecutor here, coop._replay's and coop._executor's) use the methods under
# "executors' API" and read no table directly.
from libc.stdint cimport int64_t, uint64_t
from libcpp.vector cimport vector

from coop._core cimport Arena, Evictor


cdef class Executor:
    """What the engine asks of the world: run an op again, drop or forget a storage's memory,
    copy one storage's bytes into new memory, move one. Sizes-only executors (coop._replay)
    and the array executor (coop._executor) are Cython subclasses."""
    cdef public Engine engine      # set by Engine.__init__
    cdef public bint can_move      # relocate moves memory: coop's window may move storages
    cdef public bint can_slide     # slide moves memory in place: making room may compact a window
    cdef public bint can_offload   # offload, fetch and forget_host copy bytes to and from host memory
    cdef public bint can_copy_ahead  # offload may copy a storage that stays in use (copies ahead)
    cpdef int run(self, int op) except -1
    cpdef bint drop(self, int storage) except -1
    cpdef bint can_drop(self, int storage) except -1
    cpdef int forget(self, int storage) except -1
    cpdef int forget_op(self, int op) except -1
    cpdef int copy(self, int dst, int src, int placement, Py_ssize_t release) except -1
    cpdef bint relocate(self, int storage, Py_ssize_t src, Py_ssize_t dst) except -1
    cpdef bint slide(self, int storage, Py_ssize_t src, Py_ssize_t dst) except -1
    cpdef int moved(self) except -1
    cpdef bint offload(self, int storage, bint ahead=*) except -1
    cpdef int fetch(self, int storage, int placement, bint ahead=*) except -1
    cpdef int await_fetch(self, int storage) except -1
    cpdef int forget_host(self, int storage) except -1


cdef class SizeExecutor(Executor):
    pass


cdef class _Clock(Evictor):
    # the clock itself is Evictor.now: the core reads it for staleness
    cdef double thrash_cost            # raise Thrash once the cost executed passes it (0: never)
    cdef readonly double cost_total, cost_first
    cdef readonly long long ops, recomputes, eager_evictions, demotions, releases, held_count
    cdef readonly long long constants_placed   # new constants copied down to the lowest fit
    cdef readonly int64_t const_bytes, bound_bytes
    cdef readonly int64_t floor_bytes  # the offload floor: the largest op's working set
    cdef readonly long long copies     # old values copied by in-place ops (any rule)
    cdef readonly long long room_made  # times coop made room for a kernel by moving its inputs
    cdef readonly long long compactions   # ... of them by compacting one window (c_compact)
    cdef int _charge_run(self, double c, bint recompute) except -1
    cdef void _charge_copy(self, double c) noexcept


cdef class _Records(_Clock):
    cdef readonly Arena arena
    cdef readonly Executor executor
    cdef public object release_hook    # None, or called with a storage id when users reach 0
    # per storage (ids are reused once a storage's record dies)
    cdef vector[int64_t] size          # bytes
    cdef vector[int] slot              # arena slot, -1 when not registered
    cdef vector[Py_ssize_t] offset     # resident at, -1 when not
    cdef vector[int] producer          # op, -1 for a constant
    cdef vector[int] index             # output index in its producer
    cdef vector[int] users             # the program's references (Tensors; 1 in a replay)
    cdef vector[unsigned char] alive   # its record lives
    cdef vector[unsigned char] held    # memory held outside (a user's array): never evicted
    cdef vector[int] readers           # live ops that read it
    cdef vector[int] pins              # the engine's pins
    cdef vector[int] frame_pins        # of them, the pending frames' of _rematerialize
    cdef vector[unsigned char] released_pinned   # released while pinned: settled at its last unpin
    cdef vector[unsigned char] remade  # recomputes since the program released it, up to 2
    cdef vector[vector[uint64_t]] consumers   # ops that read it, as (generation << 32 | op)
    cdef vector[int] needs             # scratch of _rematerialize: the call's readings of it to come
    cdef vector[int] pending           # scratch of _rematerialize: pushed frames reading it
    cdef vector[unsigned char] temp    # scratch of _rematerialize: recomputed as a dependency
    cdef vector[unsigned char] on_host # its bytes are in the host tier (offloaded), not resident
    cdef vector[double] ready_at       # a prefetch's copy back completes then (the clock); 0: none
    cdef vector[unsigned char] coming  # a prefetch's copy back not yet awaited (c_await; a
                                       # flag: the clock need not advance, ready_at may be 0)
    cdef vector[double] out_at         # a copy out ahead completes then (the clock); 0: none
    cdef vector[int] free_sids         # dead storage ids, reused first
    cdef Py_ssize_t n_alive            # live storage records
    # per op (ids are reused once a record dies; generation tells reuses apart)
    cdef vector[vector[int]] op_in     # current inputs (in-place redirects them)
    cdef vector[vector[int]] op_out    # outputs: a storage, or -1 (an alias, or dead)
    cdef vector[int] live_out          # live output storages; 0: the record is dead
    cdef vector[double] cost
    cdef vector[unsigned char] placement_of   # placement class of its outputs
    cdef vector[int] tag               # the caller's id for it (a program's op index)
    cdef vector[unsigned int] generation
    cdef vector[int] free_ops
    cdef vector[unsigned char] planned # scratch of _rematerialize: its inputs' readings counted
    cdef vector[int] work              # scratch of _collect
    # executors' API (unchecked: ids come from the engine)
    cdef Py_ssize_t c_offset(self, int s) noexcept
    cdef int64_t c_size(self, int s) noexcept
    cdef int c_placement(self, int o) noexcept
    cdef int c_tag(self, int o) noexcept
    cdef vector[int] c_inputs(self, int o) noexcept
    cdef int c_n_outputs(self, int o) noexcept
    cdef int c_evicted_output(self, int o, int k) noexcept
    cdef int c_evicted_outputs(self, int o, vector[int]& index, vector[int]& storages) except -1
    cdef int c_place(self, int s, int placement) except -1
    cdef Py_ssize_t c_allocate(self, int64_t nbytes, int placement) except -2
    cdef int c_bind(self, int s, Py_ssize_t off) except -1
    cdef int c_unplace(self, int s) except -1
    cdef int c_set_cost(self, int o, double cost) except -1
    cdef int c_retain(self, int s) except -1
    cdef int c_unref(self, int s) except -1
    cdef int c_release(self, int s) except -1
    # storages and ops
    cdef int _new_sid(self) except -1
    cdef int _new_storage(self, int64_t size, int o, int index, double cost,
                          vector[int]& neighbors, bint evictable) except -1
    cdef int _register(self, int s, double cost, vector[int]& neighbors, bint evictable) except -1
    cdef int _drop(self, int s) except -1
    cdef int _hold(self, int s) except -1
    cdef int _new_op(self) except -1
    cdef int _kill_op(self, int o) except -1
    # lifetime
    cdef int _die(self, int s) except -1
    cdef int _host_release(self, int s) except -1
    cdef int _offer(self, int s) except -1
    cdef void _recycle(self, int s) noexcept
    cdef void _link(self, int o) noexcept
    cdef void _live_consumers(self, int s, vector[int]& out) noexcept
    cdef int _lose_output(self, int o) except -1
    cdef int _collect(self) except -1
    # the Python API's checks
    cdef int _storage(self, int s) except -1
    cdef int _op(self, int o) except -1


cdef class _Room(_Records):
    cdef readonly double move_rate     # cost per byte moved (INFINITY: this engine never moves)
    cdef int retries_left              # reruns left to the running first run (c_retry)
    cdef vector[int] kept_now          # _room_for: the kernel's storages kept from leaving
    cdef vector[unsigned char] kept_reoffer   # ... whose offer changed meanwhile (_offer)
    cdef bint c_may_retry(self) noexcept
    cdef bint c_retry(self, int o, size_t request) except -1
    cdef bint c_make_room(self, int o, vector[size_t]& need) except -1
    cdef bint _room_for(self, int o, vector[size_t]& need) except -1
    cdef int _make_room(self, int o) except -1
    cdef int _moved_to(self, int s, size_t dst) except -1
    cdef int _arrived(self, int s) except -1
    cdef int _release(self, vector[Py_ssize_t]& taken) except -1


cdef class _Tier(_Room):
    cdef readonly bint offloading      # the policy offloads and the executor copies to the host
    cdef readonly bint tier_constants  # the tier takes constants only (opened at the start)
    cdef readonly int64_t host_budget  # bytes the host tier may hold (-1: no limit)
    cdef readonly int64_t host_bytes, host_peak
    cdef readonly double d2h_rate, h2d_rate   # cost units (ns) per byte of a copy out, back
    cdef readonly int lookahead        # prefetch: ops ahead a caller may bring inputs back for
    cdef public bint step_prefetch     # a live run: prefetch by the previous step's order of ops
    cdef vector[vector[int]] prev_reads   # ... the constants each op of the previous step read
    cdef vector[vector[int]] cur_reads    # ... and of this step, so far
    cdef vector[double] cur_times      # ... the clock at each of this step's ops, from its start
    cdef double step_began             # the clock when this step began
    cdef public Py_ssize_t max_step_ops   # ops a step may list before its list is dropped
    cdef long long listed_before       # ops listed in earlier steps (cur_reads[0]'s index)
    cdef vector[long long] born        # per storage id: the index of the first op listed
                                       # after it was made (earlier reads were a dead id's)
    # the reference, what the engine knows of the future (with lookahead: the trace in a
    # replay, the previous step in a live run): positions (records; ops of a step), the
    # reference's clock at each and at its end, and per storage the positions that read it
    cdef vector[double] ref_time       # ref_time[p]: the reference's clock when p starts
    cdef vector[vector[int]] ref_reads # per storage id, ascending
    cdef vector[Py_ssize_t] ref_release  # per storage id: the position that releases it (-1)
    cdef vector[int] ref_known         # storage ids with reads (the dead dropped lazily)
    cdef vector[unsigned char] ref_listed   # ... a storage id is in ref_known
    cdef Py_ssize_t ref_pos            # the position running now (-1: none)
    cdef public bint read_pricing      # price constants' offloads by their next read (default)
    cdef public bint release_pricing   # ... and one released unread by its release
    cdef int c_ref_reads(self, int s, int* positions, Py_ssize_t n) except -1
    cdef int c_ref_clock(self, vector[double]& times) except -1
    cdef int c_ref_release(self, int s, Py_ssize_t pos) except -1
    cdef double c_dies_at(self, int s) noexcept
    cdef void c_ref_at(self, Py_ssize_t pos) noexcept
    cdef double _copies(self, int s) noexcept
    cdef bint _ref_running(self) noexcept
    cdef void _ref_list(self, int s) noexcept
    cdef double c_next_read(self, int s) noexcept
    cdef double d2h_free_at, h2d_free_at      # when each copy engine is next free (the clock)
    cdef int ahead_s                   # the storage whose copy out ahead runs, or ran last (-1)
    cdef double room_free_at           # when the copies out for room queued so far end
    cdef public int64_t ahead_chunk    # a copy out ahead runs in chunks of this many bytes (0: whole)
    cdef vector[int] host_fifo         # storages put in the host tier, oldest first (may be stale)
    cdef int bringing                  # the storage whose host copy is being brought back (-1)
    cdef size_t host_head              # host_fifo's first entry still to look at
    cdef readonly long long offloads, fetches, prefetches, host_drops, host_refusals
    cdef readonly long long host_failures  # copies out the host had no memory for (HostMemoryError)
    cdef readonly long long constants_on_host  # a later step's constants started in the tier
    cdef readonly long long copies_ahead
    cdef bint ahead_idle               # c_copy_ahead found nothing to copy (until a change)
    cdef vector[int] ahead_pool        # constants c_copy_ahead looks at (the dead dropped lazily)
    cdef vector[unsigned char] pooled  # ... a storage id's entry is in it
    cdef readonly int64_t bytes_d2h, bytes_h2d
    cdef readonly double copy_exposed  # link time the clock waited for (charged as cost)
    cdef readonly double copy_hidden   # copy time that ran under compute (prefetches, copies ahead)
    cdef int _offload(self, int s) except -1
    cdef bint _to_host(self, int s) except -1
    cdef int _no_host_room(self, int s) except -1
    cdef int _constant_on_host(self, int64_t size) except -2
    cdef int _leave(self, int s) except -1
    cdef void _into_tier(self, int s, int64_t need) noexcept
    cdef double _copy_out(self, int s, int64_t need) noexcept
    cdef double _copy(self, double* free_at, int64_t nbytes, double rate) noexcept
    cdef int _wait(self, double done) except -1
    cdef int _wait_hidden(self, double done) except -1
    cdef int _bring_back(self, int s, bint ahead) except -1
    cdef bint _host_room(self, int64_t need, bint constant) except -1
    cdef int _host_drop(self, int s) except -1
    cdef int c_fetch(self, int s) except -1
    cdef bint c_prefetch(self, int s) except -1
    cdef bint c_prefetch_room(self, int s) except -1
    cdef bint c_back_idle(self) noexcept
    cdef bint c_late_back(self, int s, double before) noexcept
    cdef bint _prefetched(self, int s) except -1
    cdef int c_await(self, int s) except -1
    cdef int _arrived(self, int s) except -1
    cdef int c_copy_ahead(self) except -1
    cdef void _pool_constant(self, int s) noexcept
    cdef int c_step_reads(self, vector[int]& inputs) except -1
    cdef int _placement_of_storage(self, int s) noexcept


cdef class _Residency(_Tier):
    cdef readonly int remat_depth      # frames pending in the rematerializations under way
    cdef readonly long long remat_planned   # the ops those calls planned
    cdef readonly object oom_recompute # at the last out-of-memory error inside a
                                       # rematerialization: (depth, planned, pieces, bytes)
    cdef void c_pin(self, int s) noexcept
    cdef int c_unpin(self, int s, bint release) except -1
    cdef void _frame_pin(self, int s) noexcept
    cdef int _frame_unpin(self, int s, bint release) except -1
    cdef int c_make_resident(self, int s) except -1
    cdef int c_keep_resident(self, vector[int]& targets) except -1
    cdef bint _kept_to_host(self, vector[int]& kept) except -1
    cdef bint c_resident(self, int s) noexcept
    cdef int c_access(self, int s) except -1
    cdef int c_materialize(self, int s, bint settle) except -1
    cdef int _make_resident(self, vector[int]& targets) except -1
    cdef int _rematerialize(self, int target, vector[int]& targets) except -1
    cdef void _plan(self, int target, vector[int]& touched, vector[int]& planned_ops) noexcept
    cdef void _push_frame(self, int s, vector[int]& f_storage, vector[int]& f_next,
                          vector[int]& f_start, vector[int]& f_len, vector[int]& f_inputs,
                          vector[int]& touched) noexcept
    cdef void _demote(self, int s) noexcept
    cdef int _evict_eagerly(self, int s) except -1
    cdef int _recompute(self, int o) except -1
    cdef int _account(self, int o, bint recompute) except -1
    cdef int _reregister(self, int s, double cost, vector[int]& neighbors, bint evictable,
                         bint settle) except -1
    cdef int c_prefetch_after_next(self, vector[int]& reads, vector[int]& wanted) except -1
    cdef int c_step_prefetch(self) except -1


cdef class _FirstRun(_Residency):
    cdef bint partition                # cheap ops' outputs at the high end
    cdef int cur_op                    # the op whose first run is in progress, or -1
    cdef vector[int] cur_uniq          # its unique inputs, pinned
    cdef vector[int] cur_placed        # its new outputs, pinned until finish
    cdef vector[int] cur_created       # in-place: the old value made per mutated input, or -1
    cdef vector[int] cur_mutated       # in-place: mutated input positions
    cdef vector[unsigned char] cur_mode   # in-place: per mutated input, OLD_NONE .. OLD_VERSION
    cdef int c_constant(self, int64_t size, Py_ssize_t off) except -1
    cdef int c_begin(self, vector[int]& inputs, int placement, int tag) except -1
    cdef int c_output(self, int o, int64_t nbytes, Py_ssize_t off) except -1
    cdef int c_first_output(self, int o, int64_t nbytes) except -1
    cdef int c_alias(self, int o) except -1
    cdef int c_finish(self, int o) except -1
    cdef int c_abort(self, int o) except -1
    cdef int _finish_common(self, int o) except -1
    cdef void _bound(self, int o) noexcept
    cdef int _running(self, int o) except -1


cdef class _InPlace(_FirstRun):
    cdef bint inplace                  # coop's in-place rule (else DTR's: a new version per mutation)
    cdef readonly double copy_cost     # cost units per byte of copying memory (>= 0)
    cdef int c_prepare_inplace(self, int o, vector[int]& mutated) except -1
    cdef int c_finish_inplace(self, int o) except -1
    cdef int c_fail_inplace(self, int o) except -1
    cdef void _redirect(self, int s, int w, int skip) noexcept


cdef class Engine(_InPlace):
    cdef readonly object policy        # the coop.engine.policies.Policy record
