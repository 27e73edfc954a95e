# distutils: language = c++
"""The residency engine: the one implementation of the rules that decide what is resident.

Live runs (coop.Runtime on the host, CuPy or the simulation backend), trace replays and
``coop bench`` all run these rules, over storages and ops with integer ids:

- an op's inputs are pinned while it runs, and made resident first by iterative
  rematerialization (no recursion limit): each pending op pins its inputs as they become
  resident; a dependency recomputed only for this call is kept but demoted (first in line to be
  evicted) after its last pending reader;
- recomputable in-place: a mutated storage S's old value becomes a new storage V with S's old
  producer, readers of S are redirected to V, and the in-place op becomes S's producer (with the
  ablation, or for a constant, V holds a copy instead);
- record lifetime: a storage's record lives while the program holds it (users) or a live op
  reads it (readers); an op's record lives while one of its outputs does; a storage released by
  the program loses its memory at once (the record may stay, to recompute others);
- materialize: a storage becomes a constant, and settles at the low end of the arena;
- the logical clock (advanced by each op's cost, recomputes included) and one set of counters.

The engine places memory through the arena core (coop._core) and is the arena's owner: the
core calls ``evict`` with its victims, whichever backend allocation ran out of room. What
running an op, dropping memory and copying mean is the executor's (coop.trace._replay.SizeExecutor
for sizes only; coop._executor.ArrayExecutor for NumPy and CuPy arrays).
"""
from libc.math cimport INFINITY, isfinite
from libc.stdint cimport int64_t, uint64_t
from libcpp.vector cimport vector

from coop._core cimport PLACE_EXPENSIVE, PLACE_LOWEST, Arena, Evictor, policy_code

from coop.errors import OutOfMemoryError, Thrash
from coop.kernel import DEVICES
from coop.policies import get_policy


# what becomes of a mutated storage's old value (c_prepare_inplace)
cdef enum:
    OLD_NONE = 0        # nothing: no record needs it
    OLD_RECOMPUTE = 1   # a new storage with S's old producer, evicted: recomputed when needed
    OLD_COPY = 2        # a copy of a constant, resident while read
    OLD_VERSION = 3     # DTR's rule: a copy, then released (evicted at once when recomputable)

#: cost units per byte of copying memory when none is given: the a100-80gb's, in nanoseconds
#: (coop's recorded traces and DTR's logs count nanoseconds)
DEFAULT_COPY_COST = DEVICES["a100-80gb"].copy_ns_per_byte


cdef class Executor:
    """Base executor: every method must be provided by a subclass."""

    cpdef int run(self, int op) except -1:
        """Run op again: give each of its live evicted outputs memory (Engine.place, .bind)."""
        raise NotImplementedError

    cpdef bint drop(self, int storage) except -1:
        """Free an evicted storage's memory; False refuses (its memory is held elsewhere)."""
        raise NotImplementedError

    cpdef int forget(self, int storage) except -1:
        """storage's record died: free its memory if it has any, and what is kept for it."""
        raise NotImplementedError

    cpdef int copy(self, int dst, int src, int placement, Py_ssize_t release) except -1:
        """Give dst new memory (placement) holding src's bytes, bound to dst; then free the
        anonymous piece at release (>= 0), if the executor frees pieces itself."""
        raise NotImplementedError

    cpdef bint relocate(self, int storage, Py_ssize_t src, Py_ssize_t dst) except -1:
        """Copy resident storage's bytes from its memory at offset src to the (already
        taken) piece at dst, which becomes its memory; False refuses (memory held elsewhere).
        Called only when can_move is set."""
        return False

    cpdef int moved(self) except -1:
        """The moved storages are bound to their new pieces: the old memory may go now."""
        return 0

    cpdef bint slide(self, int storage, Py_ssize_t src, Py_ssize_t dst) except -1:
        """Move resident storage's bytes from offset src down to dst (the ranges may overlap)
        and make the memory at dst its own, the memory at src freeing nothing; False refuses.
        Called only when can_slide is set."""
        return False


cdef class Engine(Evictor):
    """One run's residency state and rules over one arena (see the module docstring).

    policy: a name of coop.policies.POLICIES; executor: what running and dropping mean;
    thrash_cost: raise Thrash once the cost executed passes it (0: never); copy_cost: cost units
    per byte of copying memory (None: DEFAULT_COPY_COST), what coop's in-place rule weighs a
    copy at and what a move costs when the policy moves.
    """

    def __init__(self, Arena arena, policy, Executor executor, double thrash_cost=0.0,
                 copy_cost=None):
        cdef object record = get_policy(policy)
        if record.ideal != arena.ideal:
            raise ValueError(f"policy {record.name!r} needs "
                             + ("an ideal arena" if record.ideal else "an arena with addresses")
                             + ": use coop.SimBackend(budget, ideal=True) with policy='dtr-ideal', "
                               "and only with it")
        if executor.engine is not None:
            raise ValueError("this executor already serves another engine")
        self.policy_code = policy_code(record.core, arena.ideal)
        self.policy_name = record.name
        self.now = 0.0
        self.policy = record
        self.partition = record.partition
        self.inplace = record.inplace
        self.thrash_cost = thrash_cost
        self.copy_cost = DEFAULT_COPY_COST if copy_cost is None else float(copy_cost)
        if not 0.0 <= self.copy_cost < INFINITY:
            raise ValueError(f"copy_cost must be a finite number >= 0, got {copy_cost!r}")
        self.arena = arena
        self.executor = executor
        # coop's window moves pieces when the policy does and the executor can (docs/core.md,
        # Moving), at copy_cost per byte
        self.move_rate = INFINITY
        if record.move and executor.can_move and not arena.ideal:
            self.move_rate = self.copy_cost
        arena.move_cost = self.move_rate
        arena.attach(self)
        executor.engine = self
        self.cur_op = -1

    def close(self):
        """Stop owning the arena (its storages stay registered)."""
        self.arena.detach(self)

    # ---- storages -----------------------------------------------------------------------------

    cdef int _new_sid(self) except -1:
        cdef int s
        self.n_alive += 1
        if not self.free_sids.empty():
            s = self.free_sids.back()
            self.free_sids.pop_back()
            return s
        s = self.size.size()
        self.size.push_back(0)
        self.slot.push_back(-1)
        self.offset.push_back(-1)
        self.producer.push_back(-1)
        self.index.push_back(0)
        self.users.push_back(0)
        self.alive.push_back(0)
        self.held.push_back(0)
        self.readers.push_back(0)
        self.pins.push_back(0)
        self.consumers.push_back(vector[uint64_t]())
        self.needs.push_back(0)
        self.temp.push_back(0)
        return s

    cdef int _new_storage(self, int64_t size, int o, int index, double cost,
                          vector[int]& neighbours, bint evictable) except -1:
        cdef int s = self._new_sid()
        self.size[s] = size
        self.alive[s] = 1
        self.producer[s] = o
        self.index[s] = index
        self._register(s, cost, neighbours, evictable)
        return s

    cdef int _register(self, int s, double cost, vector[int]& neighbours, bint evictable) except -1:
        cdef vector[int] slots
        cdef int u
        for u in neighbours:
            # constants never evict: they are nobody's neighbour (no decision changes, and a
            # weight read by thousands of ops stays off their lists)
            if u != s and self.slot[u] >= 0 and self.producer[u] >= 0:
                slots.push_back(self.slot[u])
        self.slot[s] = self.arena.c_add_storage(s, cost, slots, evictable)
        return 0

    cdef int _reregister(self, int s, double cost, vector[int]& neighbours, bint evictable,
                         bint settle) except -1:
        """Register resident s anew (a new producer, or none: a constant), keeping its memory
        and pins; settling a new constant, move it (a copy) to the lowest free range that holds
        it when that lies below (never evicting for it)."""
        cdef Py_ssize_t off = self.offset[s], lowest = -1
        cdef int pins = self.arena.c_pins(self.slot[s])
        self.arena.c_remove_storage(self.slot[s])
        self.slot[s] = -1
        self.offset[s] = -1
        self._register(s, cost, neighbours, evictable)
        if settle:
            lowest = self.arena.c_lowest_fit(self.arena.request_size(self.size[s]))
        if 0 <= lowest < off:
            self.executor.copy(s, s, PLACE_LOWEST, off)
            self.constants_placed += 1
        else:
            self.c_bind(s, off)
        self.arena.c_pin(self.slot[s], pins)
        return 0

    cdef Py_ssize_t c_allocate(self, int64_t nbytes, int placement) except -2:
        """An anonymous piece of nbytes, evicting as the policy chooses."""
        return self.arena.c_request(<size_t>nbytes, placement)

    cdef int _place(self, int s, int placement) except -1:
        """Memory for registered, non-resident s, evicting as the policy chooses."""
        cdef size_t nbytes = self.size[s]
        if nbytes > self.arena.capacity:
            self.arena.c_request(nbytes, placement)      # raises the arena's error
        self.offset[s] = self.arena.c_allocate_or_evict(
            self.arena.request_size(nbytes), placement, self.policy_code, self.now,
            self.slot[s], self, self.policy_name)
        return 0

    cdef int c_bind(self, int s, Py_ssize_t off) except -1:
        """Bind the anonymous used piece at off to s."""
        self.arena.c_bind(self.slot[s], off)
        self.offset[s] = off
        return 0

    cdef int evict(self, Arena arena, vector[int]& victims) except -1:
        """The core's victims (slots): drop each one's memory."""
        cdef int v
        for v in victims:
            self._drop(<int>arena.c_sid(v))
        return 0

    cdef int move(self, Arena arena, int slot, size_t src, size_t dst) except -1:
        """The core moves resident s (coop's window): the executor copies its bytes; the cost
        (bytes times move_rate) is charged as executed cost and advances the clock."""
        cdef int s = <int>arena.c_sid(slot)
        if self.held[s] or not self.executor.relocate(s, <Py_ssize_t>src, <Py_ssize_t>dst):
            return 0
        return self._moved_to(s, dst)

    cdef int _moved_to(self, int s, size_t dst) except -1:
        """s now lives at dst: the copy (bytes times move_rate) is charged as executed cost and
        advances the clock."""
        self.offset[s] = <Py_ssize_t>dst
        cdef double c = <double>self.arena.request_size(self.size[s]) * self.move_rate
        self.cost_total += c
        self.now += c
        return 1

    cdef int moved(self, Arena arena) except -1:
        self.executor.moved()
        return 0

    cdef int slide(self, Arena arena, int slot, size_t src, size_t dst) except -1:
        """The core compacts a window (c_compact): the executor moves resident s's bytes down
        in place; charged as a move (bytes times move_rate)."""
        cdef int s = <int>arena.c_sid(slot)
        if self.held[s] or not self.executor.slide(s, <Py_ssize_t>src, <Py_ssize_t>dst):
            return 0
        return self._moved_to(s, dst)

    cdef int _drop(self, int s) except -1:
        """Free resident s's memory through the executor; one it cannot free (held by a user's
        array) is held: never evicted again."""
        if self.offset[s] < 0 or self.held[s]:
            return 0
        if self.executor.drop(s):
            self.offset[s] = -1
        else:
            self.held[s] = 1
            self.held_count += 1
            self.arena.c_set_evictable(self.slot[s], False)
            self.arena.c_set_movable(self.slot[s], False)
        return 0

    # ---- pins and residency -------------------------------------------------------------------

    cdef inline void _pin1(self, int s) noexcept:
        self.arena.c_pin(self.slot[s], 1)
        self.pins[s] += 1

    cdef int _unpin1(self, int s, bint release) except -1:
        """Unpin s; with release, a storage the program no longer holds loses its memory
        (released while pinned, or recomputed as a dependency)."""
        self.arena.c_pin(self.slot[s], -1)
        self.pins[s] -= 1
        if release and self.pins[s] == 0 and not self.users[s] and self.producer[s] >= 0 \
                and self.offset[s] >= 0:
            self._evict_eagerly(s)
        return 0

    cdef int _evict_eagerly(self, int s) except -1:
        if self.offset[s] >= 0 and self.pins[s] == 0 and not self.held[s] \
                and self.arena.c_evictable(self.slot[s]):
            self._drop(s)
            if self.offset[s] < 0:
                self.eager_evictions += 1
        return 0

    cdef int _make_resident1(self, int s) except -1:
        cdef vector[int] one
        one.push_back(s)
        return self._make_resident(one)

    cdef int _make_resident(self, vector[int]& targets) except -1:
        cdef int target
        for target in targets:
            if self.offset[target] < 0:
                self._rematerialize(target, targets)
        return 0

    cdef int _rematerialize(self, int target, vector[int]& targets) except -1:
        """Recompute target, iteratively: pin each pending op's inputs as they become
        resident, unpin them when it has run; a dependency recomputed only for this call is
        demoted after its last pending reader (first in line to be evicted). An error leaves
        no dependency pinned."""
        cdef vector[int] f_storage, f_next, f_start, f_len
        cdef vector[int] f_inputs       # the frames' unique inputs, concatenated
        cdef vector[int] touched
        cdef int top, s, i, dep, k
        self._push_frame(target, f_storage, f_next, f_start, f_len, f_inputs, touched)
        try:
            while not f_storage.empty():
                top = f_storage.size() - 1
                s = f_storage[top]
                i = f_next[top]
                if i < f_len[top]:
                    dep = f_inputs[f_start[top] + i]
                    if self.offset[dep] < 0:
                        if self.producer[dep] < 0:
                            raise RuntimeError(f"storage {dep} was lost: it has no producer")
                        self._push_frame(dep, f_storage, f_next, f_start, f_len, f_inputs,
                                         touched)
                        self.temp[dep] = 1
                        continue
                    self._pin1(dep)
                    f_next[top] = i + 1
                    continue
                if self.offset[s] < 0:
                    self._recompute(self.producer[s])
                    if self.offset[s] < 0:
                        raise RuntimeError(f"recomputing op {self.producer[s]} did not produce "
                                           f"storage {s}")
                for k in range(f_start[top], f_start[top] + f_len[top]):
                    self._unpin1(f_inputs[k], True)
                for k in range(f_start[top], f_start[top] + f_len[top]):
                    dep = f_inputs[k]
                    self.needs[dep] -= 1
                    if self.needs[dep] == 0 and self.temp[dep] and not _contains(targets, dep):
                        self._demote(dep)
                f_inputs.resize(f_start[top])
                f_storage.pop_back()
                f_next.pop_back()
                f_start.pop_back()
                f_len.pop_back()
        except BaseException:
            # unpin what the pending frames pinned, without evicting: the traceback may still
            # refer to the failed kernel's arrays
            for top in range(<int>f_storage.size()):
                for k in range(f_start[top], f_start[top] + f_next[top]):
                    self.arena.c_pin(self.slot[f_inputs[k]], -1)
                    self.pins[f_inputs[k]] -= 1
            raise
        finally:
            for s in touched:
                self.needs[s] = 0
                self.temp[s] = 0
        return 0

    cdef void _push_frame(self, int s, vector[int]& f_storage, vector[int]& f_next,
                          vector[int]& f_start, vector[int]& f_len, vector[int]& f_inputs,
                          vector[int]& touched) noexcept:
        cdef vector[int] uniq
        _unique_into(self.op_in[self.producer[s]], uniq)
        f_storage.push_back(s)
        f_next.push_back(0)
        f_start.push_back(f_inputs.size())
        f_len.push_back(uniq.size())
        cdef int dep
        for dep in uniq:
            f_inputs.push_back(dep)
            self.needs[dep] += 1
            touched.push_back(dep)
        touched.push_back(s)

    cdef void _demote(self, int s) noexcept:
        """Keep s, but as if untouched since the start: the first victim unless read again."""
        if self.offset[s] >= 0:
            self.arena.c_touch(self.slot[s], 0.0)
            self.demotions += 1

    cdef int _recompute(self, int o) except -1:
        """Run o again (the executor gives its live evicted outputs memory)."""
        if self.move_rate < INFINITY:
            self._make_room(o)
        self.executor.run(o)
        self.recomputes += 1
        self._account(o, True)
        return 0

    cdef int _make_room(self, int o) except -1:
        """Before recomputing o, when the policy moves: o's evicted outputs' sizes are known and
        no kernel holds its inputs yet, so when one fits no free range, c_make_room makes room
        for them before the kernel starts (while it runs, its inputs are walls)."""
        cdef vector[size_t] need
        cdef size_t largest = self.arena.largest_free(), req
        cdef bint short = False
        cdef int s
        for s in self.op_out[o]:
            if s >= 0 and self.alive[s] and self.producer[s] == o and self.offset[s] < 0:
                req = self.arena.request_size(self.size[s])
                need.push_back(req)
                short = short or req > largest
        if short:
            self.c_make_room(o, need)
        return 0

    cdef bint c_make_room(self, int o, vector[size_t]& need) except -1:
        """Room for allocations of the request sizes in need, for op o whose kernel holds
        nothing yet (before a recompute, or a first run aborted by its failed allocation, to be
        run again: docs/core.md, "Moving"): coop's window places each while o's resident inputs
        and outputs may move but not be evicted. The ranges found are freed again at once, for
        the kernel's own allocations. False (nothing lost) when one could not be found; the
        kernel's allocation then searches as it would have. Only when the policy moves."""
        if not self.move_rate < INFINITY:
            return False
        cdef vector[int] keep            # o's resident inputs and outputs, flags lifted
        cdef vector[int] kept_pins
        cdef vector[unsigned char] kept_ev
        cdef vector[Py_ssize_t] taken
        cdef bint logging, found = False
        cdef int s, slot, k
        cdef size_t req, total
        cdef Py_ssize_t off
        for s in self.op_in[o]:
            if self.offset[s] >= 0 and not _contains(keep, s):
                keep.push_back(s)
        for s in self.op_out[o]:
            if s >= 0 and self.offset[s] >= 0 and not _contains(keep, s):
                keep.push_back(s)
        for s in keep:
            slot = self.slot[s]
            kept_pins.push_back(self.arena.c_pins(slot))
            kept_ev.push_back(self.arena.c_evictable(slot))
            self.arena.c_set_evictable(slot, False)
            self.arena.c_pin(slot, -self.arena.c_pins(slot))
        logging = self.arena.logging
        try:
            for req in need:
                off = self.arena.c_allocate_or_evict(req, self.placement_of[o], self.policy_code,
                                                     self.now, -1, self, self.policy_name)
                taken.push_back(off)
                if logging:
                    # the arena's log keeps the evictions and moves, not the reservation: it
                    # is no allocation of the kernel's (its last entry: offset, size)
                    self.arena.alloc_log.pop_back()
                    self.arena.alloc_log.pop_back()
            found = True
        except OutOfMemoryError:
            # no window could move o's inputs away (their movers found no destinations):
            # compact one window instead, sliding its movers to its low end (docs/core.md)
            if self.executor.can_slide:
                self._release(taken, logging)
                total = 0
                for req in need:
                    total += req
                found = self.arena.c_compact(total, self.now, self) >= 0
                if found:
                    self.compactions += 1
        finally:
            self._release(taken, logging)
            for k in range(<int>keep.size()):
                slot = self.slot[keep[k]]
                self.arena.c_pin(slot, kept_pins[k])
                self.arena.c_set_evictable(slot, kept_ev[k])
        if found:
            self.room_made += 1
        return found

    cdef int _release(self, vector[Py_ssize_t]& taken, bint logging) except -1:
        """Free c_make_room's reservations (not logged: they were not) and clear them."""
        cdef Py_ssize_t off
        self.arena.logging = False
        try:
            for off in taken:
                self.arena.c_free(<size_t>off)
        finally:
            self.arena.logging = logging
        taken.clear()
        return 0

    def make_room(self, int o, sizes):
        """c_make_room for op o and allocations of sizes (bytes); whether room was made."""
        cdef vector[size_t] need
        for n in sizes:
            need.push_back(self.arena.request_size(n))
        return self.c_make_room(o, need)

    cdef int _account(self, int o, bint recompute) except -1:
        cdef double c = self.cost[o]
        cdef int s
        self.cost_total += c
        if self.thrash_cost > 0.0 and self.cost_total > self.thrash_cost:
            raise Thrash()
        if not recompute:
            self.ops += 1
            self.cost_first += c
        self.now += c
        for s in self.op_in[o]:
            if self.offset[s] >= 0:
                self.arena.c_touch(self.slot[s], self.now)
        for s in self.op_out[o]:
            if s >= 0 and self.alive[s] and self.offset[s] >= 0:
                self.arena.c_touch(self.slot[s], self.now)
        return 0

    # ---- records: constants, first runs, releases ---------------------------------------------

    cdef int c_constant(self, int64_t size, Py_ssize_t off) except -1:
        """A constant of size bytes: at off (an anonymous piece), or placed at the low end."""
        cdef vector[int] none
        cdef int s = self._new_storage(size, -1, 0, 0.0, none, False)
        try:
            if off >= 0:
                self.c_bind(s, off)
            else:
                self._place(s, PLACE_LOWEST)
        except BaseException:
            self._die(s)
            raise
        self.const_bytes += self.arena.request_size(size)
        return s

    cdef int _new_op(self) except -1:
        cdef int o
        if not self.free_ops.empty():
            o = self.free_ops.back()
            self.free_ops.pop_back()
            return o
        o = self.op_in.size()
        self.op_in.push_back(vector[int]())
        self.op_out.push_back(vector[int]())
        self.live_out.push_back(0)
        self.cost.push_back(0.0)
        self.placement_of.push_back(PLACE_EXPENSIVE)
        self.tag.push_back(-1)
        self.generation.push_back(0)
        return o

    cdef int _kill_op(self, int o) except -1:
        self.op_in[o].clear()
        self.op_out[o].clear()
        self.live_out[o] = 0
        self.generation[o] += 1
        self.free_ops.push_back(o)
        return 0

    cdef int c_begin(self, vector[int]& inputs, int placement, int tag) except -1:
        """A first run starts: the op's inputs are pinned and made resident. Returns the op."""
        cdef int s
        if self.cur_op >= 0:
            raise RuntimeError("coop: an op started while another one was running (a kernel "
                               "called coop.apply?); kernels must be plain array functions")
        for s in inputs:
            if s < 0 or s >= <int>self.alive.size() or not self.alive[s]:
                raise ValueError(f"input storage {s} does not exist")
        cdef int o = self._new_op()
        self.retries_left = 2
        self.op_in[o] = inputs
        self.cost[o] = 0.0
        self.placement_of[o] = placement if self.partition or placement == PLACE_LOWEST \
            else PLACE_EXPENSIVE
        self.tag[o] = tag
        _unique_into(inputs, self.cur_uniq)
        for s in self.cur_uniq:
            self._pin1(s)
        self.cur_op = o
        try:
            self._make_resident(self.cur_uniq)
        except BaseException:
            self.c_abort(o)
            raise
        return o

    cdef int c_output(self, int o, int64_t nbytes, Py_ssize_t off) except -1:
        """A new output of the running op o: bound at off, or (off < 0) placed now. It stays
        pinned until c_finish, as a kernel's outputs are while it runs."""
        cdef int s = self._new_storage(nbytes, o, self.op_out[o].size(), self.cost[o],
                                       self.op_in[o], True)
        self.op_out[o].push_back(s)
        self.live_out[o] += 1
        self.cur_placed.push_back(s)
        try:
            if off >= 0:
                self.c_bind(s, off)
            else:
                self._place(s, self.placement_of[o])
        except BaseException:
            # a failed output leaves no trace: the op may still abort, or run again
            self.op_out[o].pop_back()
            self.live_out[o] -= 1
            self.cur_placed.pop_back()
            self._die(s)
            raise
        self._pin1(s)
        return s

    cdef int c_first_output(self, int o, int64_t nbytes) except -1:
        """c_output placed now, for a kernel that allocates its outputs before any work (a
        simulated or replayed op): a failed allocation may run the kernel again (c_retry)."""
        while True:
            try:
                return self.c_output(o, nbytes, -1)
            except OutOfMemoryError as err:
                if not self.c_retry(o, err.request):
                    raise

    @property
    def may_retry(self):
        """Whether the running first run may be aborted and run again (c_retry)."""
        return self.retries_left > 0 and self.move_rate < INFINITY

    cdef bint c_retry(self, int o, size_t request) except -1:
        """The running first run of o failed to allocate request bytes while its kernel held
        its inputs (walls). Under a policy that moves, and at most twice per first run, the
        kernel is aborted and runs again (True) after c_make_room made room for the request
        with o's inputs movable (docs/core.md, "Moving"); when no room could be made it runs
        once more, failing as it would have. The caller frees what the failed attempt holds
        first. The one rule for replays (c_first_output, host traces' kernel allocations) and
        live runs (the array executor's first run)."""
        if not (self.retries_left > 0 and self.move_rate < INFINITY):
            return False
        self.retries_left -= 1
        cdef vector[size_t] need
        need.push_back(self.arena.request_size(request))
        if not self.c_make_room(o, need):
            self.retries_left = 0
        return True

    def retry(self, int o, request):
        """c_retry for a live kernel's failed allocation of request bytes."""
        return self.c_retry(o, request)

    cdef int c_alias(self, int o) except -1:
        """An output of o that views one of its inputs (no new memory)."""
        self.op_out[o].push_back(-1)
        return 0

    cdef int _finish_common(self, int o) except -1:
        cdef int s
        self._account(o, False)
        self.cur_op = -1
        for s in self.cur_uniq:
            self._unpin1(s, True)
        self.cur_uniq.clear()
        if self.live_out[o] == 0:
            self._kill_op(o)     # an op of views only leaves no record
        return 0

    cdef int c_finish(self, int o) except -1:
        """The running op's outputs are all known: record it, account it, unpin its inputs."""
        cdef int s
        for s in self.cur_placed:
            self.arena.c_pin(self.slot[s], -1)
            self.pins[s] -= 1
        self.cur_placed.clear()
        self._bound(o)
        if self.live_out[o]:
            self._link(o)
        return self._finish_common(o)

    cdef int c_abort(self, int o) except -1:
        """The running op failed: its inputs are unpinned (and released as on success), the
        outputs registered so far are forgotten, and nothing else changes."""
        cdef int s
        for s in self.cur_placed:
            self.arena.c_pin(self.slot[s], -1)
            self.pins[s] -= 1
        for s in self.cur_placed:
            self._die(s)
        self.cur_placed.clear()
        for s in self.cur_created:
            if s >= 0:
                self._die(s)
        self.cur_created.clear()
        self.cur_mode.clear()
        self.cur_op = -1
        for s in self.cur_uniq:
            self._unpin1(s, True)
        self.cur_uniq.clear()
        self._kill_op(o)
        return 0

    cdef int _die(self, int s) except -1:
        """Forget s at once (registered by a first run that failed)."""
        self.alive[s] = 0
        if self.slot[s] >= 0:
            self.arena.c_remove_storage(self.slot[s])
            self.slot[s] = -1
        self.executor.forget(s)
        self._recycle(s)
        return 0

    cdef void _recycle(self, int s) noexcept:
        self.offset[s] = -1
        self.producer[s] = -1
        self.users[s] = 0
        self.held[s] = 0
        self.readers[s] = 0
        self.pins[s] = 0
        self.consumers[s].clear()
        self.free_sids.push_back(s)
        self.n_alive -= 1

    cdef int c_prepare_inplace(self, int o, vector[int]& mutated) except -1:
        """Before an in-place op's first run, decide per mutated input S what becomes of its old
        value (docs/design.md, "In-place: the rules"). DTR's rule (``inplace`` off): always a
        new version (OLD_VERSION: a copy, released after the op; a constant stays one). coop's:
        a constant's old value is copied when a live op reads it (OLD_COPY), else nothing is
        kept (OLD_NONE); a computed S gets a new version, as with DTR's rule, when it has a
        pending reader (a live op that read S) and recomputing the old value (S's producer's
        cost) costs more than copying it (size * copy_cost); else S is overwritten and its old
        value V, a new storage with S's old producer, starts evicted (OLD_RECOMPUTE), in its
        evicted neighbours' class as DTR's released copy would be."""
        cdef int m, s, w, p, mode
        cdef vector[int] neighbours
        cdef vector[int] live_readers
        self._bound(o)     # before a constant's copy counts among the constants
        self.cur_mutated = mutated
        self.cur_created.clear()
        self.cur_mode.clear()
        for m in mutated:
            s = self.op_in[o][m]
            p = self.producer[s]
            w = -1
            self._live_consumers(s, live_readers)
            if not self.inplace:
                mode = OLD_VERSION
            elif p < 0:
                mode = OLD_NONE if live_readers.empty() else OLD_COPY
            elif not live_readers.empty() and self.cost[p] > self.size[s] * self.copy_cost:
                mode = OLD_VERSION
            else:
                mode = OLD_RECOMPUTE
            if mode != OLD_NONE:
                neighbours.clear()
                if p >= 0:
                    neighbours = self.op_in[p]
                w = self._new_storage(self.size[s], p, self.index[s],
                                      self.arena.c_cost(self.slot[s]), neighbours, p >= 0)
            if mode == OLD_RECOMPUTE:
                # V is S's old value, evicted: it joins its evicted neighbours' class as an
                # evicted copy would (DTR's rule), so what V's recompute needs counts in the c'
                # of the resident storages next to it (S among them)
                self.arena._on_evicted(self.slot[w])
            # recorded before the copy: an abort (the copy ran out of memory) forgets w
            self.cur_created.push_back(w)
            self.cur_mode.push_back(mode)
            if mode != OLD_NONE:
                if mode != OLD_RECOMPUTE:
                    # a copy; a constant's copy is unevictable and goes with the constants
                    self.executor.copy(w, s, PLACE_LOWEST if p < 0 else self.placement_of[o], -1)
                    self.arena.c_touch(self.slot[w], self.now)
                    self.copies += 1
                    if p < 0:
                        self.const_bytes += self.arena.request_size(self.size[w])
        return 0

    cdef void _redirect(self, int s, int w, int skip) noexcept:
        """S's old value is now w: S's producer outputs w, and every live op that read S
        (but skip) reads w instead, its reader count moving with it."""
        cdef uint64_t c
        cdef int co
        if self.producer[s] >= 0:
            self.op_out[self.producer[s]][self.index[s]] = w
        for c in self.consumers[s]:
            co = <int>(c & 0xffffffff)
            if self.generation[co] != (c >> 32) or co == skip:
                continue
            if _replace(self.op_in[co], s, w):
                self.consumers[w].push_back(c)
                if self.live_out[co] > 0:
                    self.readers[s] -= 1
                    self.readers[w] += 1
        self.consumers[s].clear()

    cdef int c_finish_inplace(self, int o) except -1:
        """After an in-place op's first run: redirect readers of each mutated S to its old
        value V, and make o S's producer."""
        cdef int k, m, s, w, j = 0
        cdef int co
        cdef vector[int] neighbours
        for k in range(<int>self.cur_mutated.size()):
            m = self.cur_mutated[k]
            s = self.op_in[o][m]
            w = self.cur_created[k]
            if w >= 0:
                self._redirect(s, w, -1)
                _replace(self.op_in[o], s, w)
            self.op_out[o].push_back(s)
            if self.producer[s] >= 0:
                # S's producer is now o: its neighbours are o's inputs (V among them)
                neighbours.clear()
                for co in self.op_in[o]:
                    if co != s:
                        neighbours.push_back(co)
                self._reregister(s, self.cost[o], neighbours,
                                 self.arena.c_evictable(self.slot[s]), False)
                self.producer[s] = o
                self.index[s] = j
                self.live_out[o] += 1
            j += 1
        if self.live_out[o] > 0:
            self._link(o)
        self._finish_common(o)
        self.work.clear()
        for k in range(<int>self.cur_mode.size()):
            if self.cur_mode[k] == OLD_VERSION:
                # DTR: the name now refers to the new version; the old one lost its only
                # reference: it loses its memory now if it can be recomputed, and its record
                # (a constant's copy too) when nothing reads it
                self._evict_eagerly(self.cur_created[k])
                self.work.push_back(self.cur_created[k])
        self.cur_created.clear()
        self.cur_mutated.clear()
        self.cur_mode.clear()
        return self._collect()

    cdef int c_fail_inplace(self, int o) except -1:
        """An in-place op's kernel failed (or was interrupted) after prepare: it may have
        written part of each mutated S. What was computed from S's old value keeps it: S's
        readers (and S's old producer) move to the old value V, as on success, and S becomes a
        constant holding whatever the kernel left (never recomputed). Then the op aborts."""
        cdef int k, m, s, w, p
        cdef vector[int] none
        self.work.clear()
        for k in range(<int>self.cur_mutated.size()):
            m = self.cur_mutated[k]
            s = self.op_in[o][m]
            w = self.cur_created[k]
            if w < 0:
                continue      # nothing recorded reads S's old value: S just keeps what it holds
            p = self.producer[s]
            self._redirect(s, w, o)
            if p >= 0:
                self.producer[s] = -1
                self.index[s] = 0
                self._reregister(s, 0.0, none, False, False)
                self.const_bytes += self.arena.request_size(self.size[s])
            self.work.push_back(w)     # an old value nothing reads dies below
        self.cur_created.clear()
        self.cur_mutated.clear()
        self.cur_mode.clear()
        self.c_abort(o)
        return self._collect()

    cdef void _bound(self, int o) noexcept:
        """The lower bound of a budget (docs/design.md), per op: live constants + the op's
        recomputable inputs and its outputs."""
        cdef int64_t io = self.const_bytes
        cdef int s
        for s in self.cur_uniq:
            if self.producer[s] >= 0:
                io += self.arena.request_size(self.size[s])
        for s in self.op_out[o]:
            if s >= 0:
                io += self.arena.request_size(self.size[s])
        if io > self.bound_bytes:
            self.bound_bytes = io

    cdef void _link(self, int o) noexcept:
        """o's first run is recorded: it reads its inputs (a live record counts once each)."""
        cdef vector[int] uniq
        _unique_into(self.op_in[o], uniq)
        cdef int s
        cdef uint64_t packed = (<uint64_t>self.generation[o] << 32) | <uint64_t>o
        for s in uniq:
            self.consumers[s].push_back(packed)
            self.readers[s] += 1

    cdef void _live_consumers(self, int s, vector[int]& out) noexcept:
        """Consumers of s whose record lives, pruning dead ones."""
        cdef vector[uint64_t]* cs = &self.consumers[s]
        cdef size_t i, j = 0
        cdef int co
        out.clear()
        for i in range(cs.size()):
            co = <int>(cs[0][i] & 0xffffffff)
            if self.generation[co] == (cs[0][i] >> 32) and self.live_out[co] > 0:
                cs[0][j] = cs[0][i]
                j += 1
                out.push_back(co)
        cs.resize(j)

    cdef int c_release(self, int s) except -1:
        """The program's last reference to s went away: free its memory now (a constant's
        with its record); the record stays while a live op reads it."""
        self.releases += 1
        if self.release_hook is not None:
            self.release_hook(s)
        if self.producer[s] >= 0 and self.offset[s] >= 0 and self.pins[s] == 0 \
                and self.readers[s] > 0:
            self._drop(s)   # the record stays, to recompute its readers; the memory goes now
        # with no reader (nor pin) the record dies below, and its memory with it
        self.work.clear()
        self.work.push_back(s)
        return self._collect()

    cdef int c_access(self, int s) except -1:
        self._pin1(s)
        try:
            self._make_resident1(s)
            self.arena.c_touch(self.slot[s], self.now)
        finally:
            self._unpin1(s, True)
        return 0

    cdef int c_materialize(self, int s, bint settle) except -1:
        """s becomes a constant (resident, unevictable, no producer); its producer's record may
        die, and what only it kept alive. settle: s is made resident first if evicted, and
        then settles at the low end; else only a resident s changes, and stays where it is (an
        evicted one keeps its record, to be recomputed)."""
        cdef int o = self.producer[s]
        cdef vector[int] none
        if o < 0 or (not settle and self.offset[s] < 0):
            return 0
        self._pin1(s)
        try:
            self._make_resident1(s)
        finally:
            self._unpin1(s, True)
        # the producer's record goes first (what it alone kept alive is freed), then s settles
        self.op_out[o][self.index[s]] = -1
        self.producer[s] = -1
        self.index[s] = 0
        self.work.clear()
        self._lose_output(o)
        self._collect()
        self._reregister(s, 0.0, none, False, settle)
        self.const_bytes += self.arena.request_size(self.size[s])
        return 0

    # ---- lifetime -----------------------------------------------------------------------------

    cdef int _lose_output(self, int o) except -1:
        """o lost a live output; with none left its record dies, and its inputs each lose a
        reader (put on the work list, to be collected)."""
        cdef vector[int] uniq
        cdef int u
        self.live_out[o] -= 1
        if self.live_out[o] == 0:
            _unique_into(self.op_in[o], uniq)
            for u in uniq:
                self.readers[u] -= 1
                self.work.push_back(u)
            self._kill_op(o)
        return 0

    cdef int _collect(self) except -1:
        """Free the records on the work list that nothing refers to any more, transitively."""
        cdef int s, o
        while not self.work.empty():
            s = self.work.back()
            self.work.pop_back()
            if not self.alive[s] or self.users[s] or self.readers[s] > 0 or self.pins[s] > 0:
                continue
            self.alive[s] = 0
            if self.slot[s] >= 0:
                self.arena.c_remove_storage(self.slot[s])
                self.slot[s] = -1
            if self.offset[s] >= 0:
                if self.producer[s] < 0:
                    self.const_bytes -= self.arena.request_size(self.size[s])
                self.executor.forget(s)   # no memory, nothing kept: no call
            o = self.producer[s]
            self._recycle(s)
            if o >= 0:
                self.op_out[o][self.index[s]] = -1
                self._lose_output(o)
        return 0

    # ---- Python API (the runtime's) -----------------------------------------------------------
    # Every entry checks its ids: the vectors are read without bounds checks.

    cdef inline int _storage(self, int s) except -1:
        if s < 0 or s >= <int>self.alive.size() or not self.alive[s]:
            raise ValueError(f"storage {s} does not exist")
        return s

    cdef inline int _running(self, int o) except -1:
        if o < 0 or o != self.cur_op:
            raise ValueError(f"op {o} is not the op running now ({self.cur_op})")
        return o

    cdef inline int _op(self, int o) except -1:
        if o < 0 or o >= <int>self.op_in.size():
            raise ValueError(f"op {o} does not exist")
        return o

    def constant(self, nbytes, Py_ssize_t offset=-1):
        """Register a constant of nbytes at offset (an anonymous used piece), or place it."""
        return self.c_constant(nbytes, offset)

    def begin(self, list inputs, int placement):
        """Start an op's first run over input storages: pin them, make them resident."""
        cdef vector[int] ins
        for s in inputs:
            ins.push_back(s)
        return self.c_begin(ins, placement, -1)

    def finish_call(self, int o, double cost, list outputs):
        """The running op's outputs as (nbytes, offset) each (offset -1: place it now; -2 - i:
        a view of input i); an output at an input's offset is an alias of that input, two at
        one offset share a storage. Returns the storage of each output."""
        self._running(o)
        cdef list sids = []
        cdef Py_ssize_t off
        cdef int s, k
        if not isfinite(cost) or cost < 0.0:
            self.c_abort(o)
            raise ValueError(f"an op's cost must be a finite number >= 0, got {cost!r}")
        self.cost[o] = cost
        try:
            for nbytes, off in outputs:
                s = -1
                if off <= -2:
                    # declared a view of input -2 - off (the simulation backend)
                    if -2 - off >= <Py_ssize_t>self.op_in[o].size():
                        raise ValueError(f"output declared a view of input {-2 - off}, but "
                                         f"the op has {self.op_in[o].size()} inputs")
                    s = self.op_in[o][-2 - off]
                    self.c_alias(o)
                    sids.append(s)
                    continue
                if off >= 0:
                    for k in self.cur_uniq:
                        if self.offset[k] == off:
                            s = k
                            break
                    if s >= 0:
                        self.c_alias(o)
                        sids.append(s)
                        continue
                    for k in self.cur_placed:
                        if self.offset[k] == off:
                            s = k
                            break
                    if s >= 0:
                        self.op_out[o].push_back(-1)
                        sids.append(s)
                        continue
                sids.append(self.c_output(o, nbytes, off) if off >= 0
                            else self.c_first_output(o, nbytes))
        except BaseException:
            self.c_abort(o)
            raise
        self.c_finish(o)
        return sids

    def abort(self, int o):
        self._running(o)
        self.c_abort(o)

    def prepare_inplace(self, int o, list mutated):
        self._running(o)
        cdef vector[int] ms
        for m in mutated:
            ms.push_back(m)
        try:
            self.c_prepare_inplace(o, ms)
        except BaseException:
            self.c_abort(o)
            raise

    def fail_inplace(self, int o):
        """The running in-place op failed after prepare_inplace (see c_fail_inplace)."""
        self._running(o)
        self.c_fail_inplace(o)

    def finish_inplace(self, int o, double cost):
        self._running(o)
        if not isfinite(cost) or cost < 0.0:
            self.c_abort(o)
            raise ValueError(f"an op's cost must be a finite number >= 0, got {cost!r}")
        self.cost[o] = cost
        self.c_finish_inplace(o)

    def retain(self, int s):
        """The program took a reference to s (a Tensor)."""
        self._storage(s)
        self.users[s] += 1

    def unref(self, int s):
        """The program dropped a reference to s; at none, s is released."""
        self._storage(s)
        self.users[s] -= 1
        if self.users[s] == 0:
            self.c_release(s)

    def pin(self, int s):
        self._storage(s)
        self._pin1(s)

    def unpin(self, int s):
        self._storage(s)
        if self.pins[s] <= 0:
            raise ValueError(f"unpin of storage {s}, which the engine has not pinned")
        self._unpin1(s, True)

    def make_resident(self, int s):
        """Recompute s if it is evicted (pin it first)."""
        self._storage(s)
        self._make_resident1(s)

    def materialize(self, int s, bint settle=True):
        """s becomes a constant (see c_materialize)."""
        self._storage(s)
        self.c_materialize(s, settle)

    def evict_now(self, int s):
        """Drop resident s's memory if the policy could: recomputable, unpinned, not held."""
        self._storage(s)
        if self.offset[s] >= 0 and self.pins[s] == 0 and self.producer[s] >= 0 \
                and self.arena.c_evictable(self.slot[s]):
            self._drop(s)

    def bind(self, int s, Py_ssize_t offset):
        """Bind the anonymous used piece at offset to registered, non-resident s."""
        self._storage(s)
        self.c_bind(s, offset)

    def inputs(self, int o):
        """o's current input storages (in-place ops redirect them)."""
        self._op(o)
        return list(self.op_in[o])

    def evicted_outputs(self, int o):
        """(index, storage) of o's live outputs that have no memory: what running it again
        must give memory to."""
        self._op(o)
        cdef int k, s
        out = []
        for k in range(<int>self.op_out[o].size()):
            s = self.op_out[o][k]
            if s >= 0 and self.alive[s] and self.producer[s] == o and self.offset[s] < 0:
                out.append((k, s))
        return out

    def placement(self, int o):
        self._op(o)
        return self.placement_of[o]

    def op_cost(self, int o):
        self._op(o)
        return self.cost[o]

    def resident(self, int s):
        self._storage(s)
        return self.offset[s] >= 0

    def info(self, int s):
        """A storage's state, for tests and debugging."""
        if s < 0 or s >= <int>self.alive.size() or not self.alive[s]:
            return None
        return {"nbytes": self.size[s], "offset": self.offset[s] if self.offset[s] >= 0 else None,
                "producer": self.producer[s] if self.producer[s] >= 0 else None,
                "index": self.index[s], "users": self.users[s], "readers": self.readers[s],
                "pins": self.pins[s], "held": bool(self.held[s])}

    def storages(self):
        """Ids of the live storage records."""
        return [s for s in range(<int>self.alive.size()) if self.alive[s]]

    def pinned(self):
        """{storage: pins} of the engine's pins."""
        return {s: self.pins[s] for s in range(<int>self.pins.size())
                if self.alive[s] and self.pins[s]}

    @property
    def clock(self):
        return self.now

    @property
    def live_storages(self):
        """How many storage records live."""
        return self.n_alive

    @property
    def live_ops(self):
        """How many op records live."""
        return self.op_in.size() - self.free_ops.size()

    def counters(self):
        """The engine's counters (docs/design.md's metrics come from these and the arena's)."""
        return {"ops": self.ops, "recomputes": self.recomputes, "cost_first": self.cost_first,
                "cost_total": self.cost_total, "eager_evictions": self.eager_evictions,
                "demotions": self.demotions, "releases": self.releases,
                "constants_placed": self.constants_placed,
                "held": self.held_count, "clock": self.now, "lower_bound_bytes": self.bound_bytes,
                "room_made": self.room_made, "compactions": self.compactions}

    def stats(self):
        """One dict, one name per figure: the engine's counters, the arena's, and the compute
        overhead (cost executed / cost of the first runs)."""
        out = self.counters()
        out.update(self.arena.stats())
        out["compute_overhead"] = self.cost_total / self.cost_first if self.cost_first else 1.0
        return out


cdef void _unique_into(vector[int]& xs, vector[int]& out) noexcept:
    cdef int x, y
    cdef bint seen
    out.clear()
    for x in xs:
        seen = False
        for y in out:
            if y == x:
                seen = True
                break
        if not seen:
            out.push_back(x)


cdef bint _contains(vector[int]& xs, int x) noexcept:
    cdef int y
    for y in xs:
        if y == x:
            return True
    return False


cdef bint _replace(vector[int]& xs, int old, int new) noexcept:
    cdef size_t i
    cdef bint found = False
    for i in range(xs.size()):
        if xs[i] == old:
            xs[i] = new
            found = True
    return found
