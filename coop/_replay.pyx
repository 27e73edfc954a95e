# distutils: language = c++
"""Trace replay: a compiled program (coop.trace) run under a budget on the real arena core.

The replayer is the runtime's residency (coop/runtime.py, coop/residency.py) over integer
storages instead of Python objects, at C speed: the same pins, the same iterative
rematerialization with eager eviction of dependencies, the same recomputable in-place path,
the same release and record-lifetime rules, the same clock. A trace recorded from a run
therefore replays with the evictions and recomputes the run made (tests/test_replay.py).
Semantics are specified in docs/trace-format.md.
"""
from libc.stdint cimport int64_t
from libcpp.vector cimport vector
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from coop._core cimport Arena, Evictor, policy_code

from coop._core import CHEAP, EXPENSIVE, LOWEST
from coop.errors import OutOfMemoryError

# record kinds
cdef enum:
    R_CONSTANT, R_CALL, R_MUTATE, R_RELEASE, R_ACCESS, R_MATERIALIZE

KINDS = {"constant": R_CONSTANT, "call": R_CALL, "mutate": R_MUTATE, "release": R_RELEASE,
         "access": R_ACCESS, "materialize": R_MATERIALIZE}


cdef inline double _monotonic() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef class Program:
    """A trace compiled to flat arrays: records, ops (CSR inputs/outputs/events), value sizes.

    Built by coop.trace.compile_program from validated records; values are dense indices.
    """
    cdef readonly int n_values
    cdef readonly int n_ops
    cdef readonly double cost_first          # sum of op costs: an unlimited run's total
    cdef readonly object names               # op index -> kernel name
    cdef readonly object meta                # the trace's meta record (a dict), or {}
    cdef vector[int] rec_kind
    cdef vector[int] rec_arg
    cdef vector[int64_t] value_size
    cdef vector[int] in_ptr, ins             # op inputs (values, in argument order)
    cdef vector[int] out_ptr, outs           # op outputs: a value, or -1 for an alias
    cdef vector[int] out_alloc               # the kernel allocation that holds each output, or -1
    cdef vector[int] mut_ptr, muts           # mutate ops: indices into the inputs
    cdef vector[int] ev_ptr                  # kernel allocation events (host traces), or none
    cdef vector[int64_t] evs                 # >= 0: allocate that many bytes; < 0: free alloc ~e
    cdef vector[unsigned char] has_events
    cdef vector[double] cost
    cdef vector[unsigned char] cls

    def __init__(self, int n_values, sizes, records, ops, names, meta=None):
        """records: [(kind, arg)]; ops: [(inputs, outputs, out_allocs, mutated, events or
        None, cost, cls)], all validated by the caller."""
        self.n_values = n_values
        self.value_size = sizes
        self.names = names
        self.meta = dict(meta or {})
        for kind, arg in records:
            self.rec_kind.push_back(kind)
            self.rec_arg.push_back(arg)
        self.in_ptr.push_back(0)
        self.out_ptr.push_back(0)
        self.mut_ptr.push_back(0)
        self.ev_ptr.push_back(0)
        self.cost_first = 0.0
        for inputs, outputs, allocs, mutated, events, cost, cls in ops:
            for v in inputs:
                self.ins.push_back(v)
            self.in_ptr.push_back(self.ins.size())
            for v, a in zip(outputs, allocs):
                self.outs.push_back(v)
                self.out_alloc.push_back(a)
            self.out_ptr.push_back(self.outs.size())
            for m in mutated:
                self.muts.push_back(m)
            self.mut_ptr.push_back(self.muts.size())
            self.has_events.push_back(events is not None)
            for e in events or ():
                self.evs.push_back(e)
            self.ev_ptr.push_back(self.evs.size())
            self.cost.push_back(cost)
            self.cls.push_back(cls)
            self.cost_first += cost
        self.n_ops = len(names)

    @property
    def n_records(self):
        return self.rec_kind.size()

    def __repr__(self):
        return (f"<coop.trace.Program records={self.rec_kind.size()} ops={self.n_ops} "
                f"values={self.n_values}>")


cdef class Replayer(Evictor):
    """One replay of a Program under one arena and policy (use coop.replay.replay)."""

    cdef Program prog
    cdef Arena arena
    cdef int code                 # core policy code
    cdef object policy            # runtime policy name (errors)
    cdef bint partition           # place cheap ops' outputs at the high end
    cdef bint inplace             # recomputable in-place (else copy the old value)
    cdef double thrash_cost       # stop once the cost executed exceeds this (0: never)
    # per storage (program values first, then old values made by in-place ops)
    cdef vector[int64_t] size
    cdef vector[int] slot         # arena slot, -1 when not registered
    cdef vector[Py_ssize_t] offset   # resident at, -1 when not
    cdef vector[int] producer     # op, -1 for a constant
    cdef vector[int] index        # output index in its producer
    cdef vector[unsigned char] users   # the program holds it (not yet released)
    cdef vector[unsigned char] alive   # its record lives (the runtime's Python object)
    cdef vector[unsigned char] defined # created (a constant or a first-run output)
    cdef vector[int] readers      # live ops that read it
    cdef vector[int] pins         # the replayer's pins
    cdef vector[vector[int]] consumers   # ops that read it (dead ones pruned lazily)
    cdef vector[int] needs        # scratch of _rematerialize: pending frames reading it
    cdef vector[unsigned char] temp    # scratch of _rematerialize: recomputed as a dependency
    # per op
    cdef vector[vector[int]] op_in     # current inputs (in-place redirects them)
    cdef vector[vector[int]] op_out    # current outputs (-1: alias)
    cdef vector[int] live_out          # its live output storages (0: the record is dead)
    cdef vector[unsigned char] op_done # run once
    # scratch
    cdef vector[Py_ssize_t] alloc_off
    cdef vector[int] work
    # counters
    cdef readonly double clock
    cdef readonly double cost_total
    cdef readonly double cost_first
    cdef readonly long long ops, recomputes, eager_evictions, demotions, releases, moves
    cdef readonly long long records
    cdef readonly int64_t const_bytes, bound_bytes

    def __init__(self, Program prog, Arena arena, str core_policy, policy, bint partition,
                 bint inplace, double thrash_cost=0.0):
        self.prog = prog
        self.arena = arena
        self.code = policy_code(core_policy, arena.ideal)
        self.policy = policy
        self.partition = partition
        self.inplace = inplace
        self.thrash_cost = thrash_cost
        cdef int n = prog.n_values
        self.size = prog.value_size
        self.slot.assign(n, -1)
        self.offset.assign(n, -1)
        self.producer.assign(n, -1)
        self.index.assign(n, 0)
        self.users.assign(n, 0)
        self.alive.assign(n, 0)
        self.defined.assign(n, 0)
        self.readers.assign(n, 0)
        self.pins.assign(n, 0)
        self.consumers.resize(n)
        self.needs.assign(n, 0)
        self.temp.assign(n, 0)
        self.op_in.resize(prog.n_ops)
        self.op_out.resize(prog.n_ops)
        self.live_out.assign(prog.n_ops, 0)
        self.op_done.assign(prog.n_ops, 0)

    # ---- running ----------------------------------------------------------------------------

    def run(self, start=0, stop=None):
        """Replay records [start, stop); raises OutOfMemoryError, or _Thrash."""
        cdef Py_ssize_t i, end = self.prog.rec_kind.size() if stop is None else stop
        cdef int kind, arg
        for i in range(start, end):
            kind = self.prog.rec_kind[i]
            arg = self.prog.rec_arg[i]
            if kind == R_CALL or kind == R_MUTATE:
                self._apply(arg, kind == R_MUTATE)
            elif kind == R_CONSTANT:
                self._constant(arg)
            elif kind == R_RELEASE:
                self._release(arg)
            elif kind == R_ACCESS:
                self._access(arg)
            else:
                self._materialize(arg)
            self.records += 1

    def finish(self):
        """The end of the trace: every value the program still holds is made resident and
        pinned (a recompute may be needed)."""
        cdef int v
        for v in range(self.prog.n_values):
            if self.users[v] and self.alive[v]:
                self._pin1(v)
                self._make_resident1(v)

    def resident_values(self):
        return [v for v in range(self.prog.n_values) if self.users[v] and self.offset[v] >= 0]

    # ---- records ----------------------------------------------------------------------------

    cdef int _constant(self, int v) except -1:
        cdef vector[int] none
        self._new_storage(v, -1, 0, 0.0, none, False)
        self._place(v, LOWEST)
        self.const_bytes += self.arena.request_size(self.size[v])
        self.users[v] = 1
        return 0

    cdef int _release(self, int v) except -1:
        if not self.users[v]:
            return 0
        self.users[v] = 0
        self.releases += 1
        if self.producer[v] >= 0 and self.offset[v] >= 0 and self.pins[v] == 0:
            self._free_storage(v)
        self._maybe_die(v)
        return 0

    cdef int _access(self, int v) except -1:
        self._pin1(v)
        self._make_resident1(v)
        self.arena.c_touch(self.slot[v], self.clock)
        self._unpin1(v, True)
        return 0

    cdef int _materialize(self, int v) except -1:
        """Runtime.materialize: v becomes a constant (resident, unevictable, no producer);
        its producer's record may die, and what only it kept alive."""
        cdef int o = self.producer[v]
        cdef vector[int] none
        if o < 0:
            return 0
        self._pin1(v)
        self._make_resident1(v)
        self._unpin1(v, True)
        # the producer's record goes first (what it alone kept alive is freed), then v settles
        self.op_out[o][self.index[v]] = -1
        self.producer[v] = -1
        self.index[v] = 0
        self.work.clear()
        self._lose_output(o)
        self._collect()
        self._reregister(v, 0.0, none, False, True)
        self.const_bytes += self.arena.request_size(self.size[v])
        return 0

    cdef int _apply(self, int o, bint mutate) except -1:
        cdef Program p = self.prog
        cdef int k, v
        cdef vector[int] uniq
        self.op_in[o].clear()
        for k in range(p.in_ptr[o], p.in_ptr[o + 1]):
            self.op_in[o].push_back(p.ins[k])
        _unique_into(self.op_in[o], uniq)
        for v in uniq:
            self._pin1(v)
        self._make_resident(uniq)
        self._bound(o, uniq)
        if mutate:
            self._first_inplace(o)
        else:
            self._first_call(o, uniq)
        for v in uniq:
            self._unpin1(v, True)
        return 0

    cdef void _bound(self, int o, vector[int]& uniq) noexcept:
        """DESIGN's lower bound, per op: live constants + the op's other inputs and outputs."""
        cdef Program p = self.prog
        cdef int64_t io = self.const_bytes
        cdef int v, k
        for v in uniq:
            if self.producer[v] >= 0:
                io += self.arena.request_size(self.size[v])
        for k in range(p.out_ptr[o], p.out_ptr[o + 1]):
            if p.outs[k] >= 0:
                io += self.arena.request_size(self.size[p.outs[k]])
        if io > self.bound_bytes:
            self.bound_bytes = io

    # ---- first runs -------------------------------------------------------------------------

    cdef int _first_call(self, int o, vector[int]& uniq) except -1:
        cdef Program p = self.prog
        cdef int k, v, n_new = 0
        cdef int cls = self._placement(o)
        cdef vector[int] placed
        self.op_out[o].clear()
        for k in range(p.out_ptr[o], p.out_ptr[o + 1]):
            self.op_out[o].push_back(p.outs[k])
        if p.has_events[o]:
            # a host kernel: its allocations are anonymous until it returns
            self._run_events(o, cls)
            for k in range(p.out_ptr[o], p.out_ptr[o + 1]):
                v = p.outs[k]
                if v >= 0:
                    self._new_storage(v, o, k - p.out_ptr[o], p.cost[o], self.op_in[o], True)
                    self._bind(v, self.alloc_off[p.out_alloc[k]])
                    self.alloc_off[p.out_alloc[k]] = -1
                    n_new += 1
            self._free_leftovers()
        else:
            for k in range(p.out_ptr[o], p.out_ptr[o + 1]):
                v = p.outs[k]
                if v >= 0:
                    self._new_storage(v, o, k - p.out_ptr[o], p.cost[o], self.op_in[o], True)
                    self._place(v, cls)
                    self._pin1(v)
                    placed.push_back(v)
                    n_new += 1
            for v in placed:
                self._unpin1(v, False)
        for k in range(p.out_ptr[o], p.out_ptr[o + 1]):
            if p.outs[k] >= 0:
                self.users[p.outs[k]] = 1
        self.live_out[o] = n_new
        if n_new:
            self._link(o)   # an op of views only has no record left to read its inputs
        self._account(o, False)
        return 0

    cdef int _first_inplace(self, int o) except -1:
        """The runtime's recomputable in-place path, for each mutated input S in turn: the
        old value becomes a new storage V with S's old producer, readers of S are redirected to
        V, and the op becomes S's producer."""
        cdef Program p = self.prog
        cdef int k, m, s, w, c, j
        cdef int cls = self._placement(o)
        cdef vector[int] created      # V per mutated input, -1 if none
        cdef vector[int] neighbours
        cdef vector[int] live_readers
        self.op_out[o].clear()
        for k in range(p.mut_ptr[o], p.mut_ptr[o + 1]):
            m = p.muts[k]
            s = self.op_in[o][m]
            w = -1
            self._live_consumers(s, live_readers)
            if self.producer[s] >= 0 or not live_readers.empty():
                w = self._new_value(s)
                neighbours.clear()
                if self.producer[s] >= 0:
                    neighbours = self.op_in[self.producer[s]]
                self._new_storage(w, self.producer[s], self.index[s],
                                  self.arena.storages[self.slot[s]].cost, neighbours,
                                  self.producer[s] >= 0)
                if self.producer[s] < 0 or not self.inplace:
                    # nothing can recompute the old value (or the ablation copies): a copy;
                    # a constant's copy is unevictable and goes with the constants
                    self._place(w, LOWEST if self.producer[s] < 0 else cls)
                    self.arena.c_touch(self.slot[w], self.clock)
                    if self.producer[s] < 0:
                        self.const_bytes += self.arena.request_size(self.size[w])
            created.push_back(w)
        if p.has_events[o]:
            self._run_events(o, cls)
            self._free_leftovers()
        j = 0
        for k in range(p.mut_ptr[o], p.mut_ptr[o + 1]):
            m = p.muts[k]
            s = self.op_in[o][m]
            w = created[j]
            if w >= 0:
                if self.producer[s] >= 0:
                    self.op_out[self.producer[s]][self.index[s]] = w
                self.alive[w] = 1
                for c in self.consumers[s]:
                    if _replace(self.op_in[c], s, w):
                        self.consumers[w].push_back(c)
                        if self.live_out[c] > 0:
                            self.readers[s] -= 1
                            self.readers[w] += 1
                self.consumers[s].clear()
                _replace(self.op_in[o], s, w)
            self.op_out[o].push_back(s)
            if self.producer[s] >= 0:
                # S's producer is now o: its neighbours are o's inputs (V among them)
                neighbours.clear()
                for c in self.op_in[o]:
                    if c != s:
                        neighbours.push_back(c)
                self._reregister(s, p.cost[o], neighbours,
                                 self.arena.storages[self.slot[s]].evictable, False)
                # S leaves its old producer's outputs (V took its place there)
                self.producer[s] = o
                self.index[s] = j
                self.live_out[o] += 1
            j += 1
        if self.live_out[o] > 0:
            self._link(o)
        else:
            for c in self.op_in[o]:
                self.consumers[c].push_back(o)
        self._account(o, False)
        return 0

    cdef void _link(self, int o) noexcept:
        """o's first run is recorded: it reads its inputs (a live record counts once each)."""
        cdef vector[int] uniq
        _unique_into(self.op_in[o], uniq)
        cdef int v
        for v in uniq:
            self.consumers[v].push_back(o)
            self.readers[v] += 1

    cdef void _live_consumers(self, int s, vector[int]& out) noexcept:
        """Consumers of s whose record lives, pruning dead ones."""
        cdef vector[int]* cs = &self.consumers[s]
        cdef size_t i, j = 0
        out.clear()
        for i in range(cs.size()):
            if self.live_out[cs[0][i]] > 0:
                cs[0][j] = cs[0][i]
                j += 1
                out.push_back(cs[0][i])
        cs.resize(j)

    # ---- residency (coop/residency.py) ------------------------------------------------------

    cdef int _make_resident1(self, int v) except -1:
        cdef vector[int] one
        one.push_back(v)
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
        demoted after its last pending reader (first in line to be evicted)."""
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

    cdef void _demote(self, int v) noexcept:
        """Keep v, but as if untouched since the start: the first victim unless read again."""
        if self.offset[v] >= 0:
            self.arena.c_touch(self.slot[v], 0.0)
            self.demotions += 1

    cdef int _recompute(self, int o) except -1:
        """Run o again; its live evicted outputs get memory back."""
        cdef Program p = self.prog
        cdef int cls = self._placement(o)
        cdef int k, v, a
        cdef vector[int] placed
        cdef Py_ssize_t fresh
        cdef bint mutate = p.mut_ptr[o + 1] > p.mut_ptr[o]
        if p.has_events[o]:
            # a host kernel: an in-place op first copies the old value(s) into fresh memory
            if mutate:
                for k in range(p.mut_ptr[o], p.mut_ptr[o + 1]):
                    v = self.op_in[o][p.muts[k]]
                    placed.push_back(self._allocate(self.size[v], cls, -1))
            self._run_events(o, cls)
            if mutate:
                for k in range(self.op_out[o].size()):
                    v = self.op_out[o][k]
                    fresh = placed[k]
                    if self.alive[v] and self.producer[v] == o and self.offset[v] < 0:
                        self._bind(v, fresh)
                    else:
                        self.arena.c_free(fresh)
            else:
                for k in range(p.out_ptr[o], p.out_ptr[o + 1]):
                    v = self.op_out[o][k - p.out_ptr[o]]
                    a = p.out_alloc[k]
                    if v < 0:
                        continue
                    if self.alive[v] and self.offset[v] < 0:
                        self._bind(v, self.alloc_off[a])
                        self.alloc_off[a] = -1
            self._free_leftovers()
        else:
            for v in self.op_out[o]:
                if v >= 0 and self.alive[v] and self.producer[v] == o and self.offset[v] < 0:
                    self._place(v, cls)
                    self._pin1(v)
                    placed.push_back(v)
            for v in placed:
                self._unpin1(v, False)
        self.recomputes += 1
        self._account(o, True)
        return 0

    cdef void _evict_eagerly(self, int v) noexcept:
        if (self.offset[v] >= 0 and self.pins[v] == 0
                and self.arena.storages[self.slot[v]].evictable):
            self._free_storage(v)
            self.eager_evictions += 1

    cdef inline void _pin1(self, int v) noexcept:
        self.arena.c_pin(self.slot[v], 1)
        self.pins[v] += 1

    cdef int _unpin1(self, int v, bint release) except -1:
        self.arena.c_pin(self.slot[v], -1)
        self.pins[v] -= 1
        if release and self.pins[v] == 0 and not self.users[v] and self.producer[v] >= 0 \
                and self.offset[v] >= 0:
            # released while pinned, or recomputed as a dependency: drop its memory
            self._evict_eagerly(v)
        return 0

    cdef int _account(self, int o, bint recompute) except -1:
        cdef double c = self.prog.cost[o]
        cdef int v
        self.cost_total += c
        if self.thrash_cost > 0.0 and self.cost_total > self.thrash_cost:
            raise _Thrash()
        if not recompute:
            self.ops += 1
            self.cost_first += c
        self.clock += c
        for v in self.op_in[o]:
            if self.offset[v] >= 0:
                self.arena.c_touch(self.slot[v], self.clock)
        for v in self.op_out[o]:
            if v >= 0 and self.alive[v] and self.offset[v] >= 0:
                self.arena.c_touch(self.slot[v], self.clock)

    # ---- lifetime ---------------------------------------------------------------------------

    cdef void _maybe_die(self, int v) noexcept:
        """Free v's record if nothing refers to it (the program, or a live op reading it), and
        the ops and storages that only it kept alive (the runtime's reference counting)."""
        self.work.clear()
        self.work.push_back(v)
        self._collect()

    cdef void _lose_output(self, int o) noexcept:
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

    cdef void _collect(self) noexcept:
        """Free the records on the work list that nothing refers to any more, transitively."""
        cdef int s
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
                self.arena.c_free(self.offset[s])
                self.offset[s] = -1
                if self.producer[s] < 0:
                    self.const_bytes -= self.arena.request_size(self.size[s])
            if self.producer[s] >= 0:
                self._lose_output(self.producer[s])

    # ---- memory -----------------------------------------------------------------------------

    cdef int _new_value(self, int like) except -1:
        """A storage beyond the program's values (an old value kept by an in-place op)."""
        cdef int w = self.size.size()
        self.size.push_back(self.size[like])
        self.slot.push_back(-1)
        self.offset.push_back(-1)
        self.producer.push_back(-1)
        self.index.push_back(0)
        self.users.push_back(0)
        self.alive.push_back(0)
        self.defined.push_back(0)
        self.readers.push_back(0)
        self.pins.push_back(0)
        self.consumers.push_back(vector[int]())
        self.needs.push_back(0)
        self.temp.push_back(0)
        return w

    cdef int _new_storage(self, int v, int o, int index, double cost, vector[int]& neighbours,
                          bint evictable) except -1:
        if self.defined[v]:
            raise ValueError(f"value {v} is defined twice")
        self.defined[v] = 1
        self.alive[v] = 1
        self.producer[v] = o
        self.index[v] = index
        self._register(v, cost, neighbours, evictable)
        return 0

    cdef int _reregister(self, int v, double cost, vector[int]& neighbours, bint evictable,
                         bint settle) except -1:
        """Register resident v anew (a new producer, or none: a constant), keeping its memory
        and pins; settling a new constant, move it (a copy) to the lowest free range that
        holds it when that lies below (never evicting for it), as Runtime._settle."""
        cdef Py_ssize_t off = self.offset[v], lowest
        cdef size_t size = self.arena.request_size(self.size[v])
        cdef int pins = self.arena.storages[self.slot[v]].pins
        self.arena.c_remove_storage(self.slot[v])
        self.slot[v] = -1
        self._register(v, cost, neighbours, evictable)
        lowest = self.arena.c_lowest_fit(size) if settle else -1
        if 0 <= lowest < off:
            self.arena.c_allocate(size, LOWEST, self.slot[v])
            self.offset[v] = lowest
            self.arena.c_free(off)
            self.moves += 1
        else:
            self.offset[v] = -1
            self._bind(v, off)
        self.arena.c_pin(self.slot[v], pins)
        return 0

    cdef int _register(self, int v, double cost, vector[int]& neighbours, bint evictable) except -1:
        cdef vector[int] slots
        cdef int u
        for u in neighbours:
            # constants never evict: they are nobody's neighbour (as coop/runtime.py)
            if u != v and self.slot[u] >= 0 and self.producer[u] >= 0:
                slots.push_back(self.slot[u])
        self.slot[v] = self.arena.c_add_storage(v, cost, slots, evictable)
        return 0

    cdef inline int _placement(self, int o) noexcept:
        return self.prog.cls[o] if self.partition else EXPENSIVE

    cdef Py_ssize_t _allocate(self, int64_t nbytes, int cls, int slot) except -2:
        if <size_t>nbytes > self.arena.capacity:
            raise OutOfMemoryError(
                f"coop: a request of {nbytes} bytes is larger than the whole arena (budget "
                f"{self.arena.capacity} bytes); raise the budget above {nbytes} bytes",
                nbytes, self.arena.capacity, self.arena.capacity - self.arena.used_bytes,
                self.arena.capacity - self.arena.used_bytes)
        return self.arena.c_allocate_or_evict(self.arena.request_size(nbytes), cls, self.code,
                                              self.clock, slot, self, self.policy)

    cdef int _place(self, int v, int cls) except -1:
        self.offset[v] = self._allocate(self.size[v], cls, self.slot[v])
        return 0

    cdef int _bind(self, int v, Py_ssize_t off) except -1:
        self.arena._bind(self.arena.by_offset[off], self.slot[v])
        self.offset[v] = off
        return 0

    cdef int _free_storage(self, int v) except -1:
        cdef Py_ssize_t off = self.offset[v]
        self.offset[v] = -1
        self.arena.c_free(off)
        return 0

    cdef int evict(self, Arena arena, vector[int]& victims) except -1:
        cdef int s
        for s in victims:
            self._free_storage(<int>arena.storages[s].sid)
        return 0

    cdef int _run_events(self, int o, int cls) except -1:
        """A host kernel's allocations and frees, in order; alloc_off keeps their offsets."""
        cdef Program p = self.prog
        cdef int64_t e
        cdef Py_ssize_t k
        self.alloc_off.clear()
        for k in range(p.ev_ptr[o], p.ev_ptr[o + 1]):
            e = p.evs[k]
            if e >= 0:
                self.alloc_off.push_back(self._allocate(e, cls, -1))
            else:
                self.arena.c_free(self.alloc_off[~e])
                self.alloc_off[~e] = -1
        return 0

    cdef int _free_leftovers(self) except -1:
        cdef size_t k
        for k in range(self.alloc_off.size()):
            if self.alloc_off[k] >= 0:
                self.arena.c_free(self.alloc_off[k])
                self.alloc_off[k] = -1
        return 0

    def counters(self):
        return dict(ops=self.ops, recomputes=self.recomputes, cost_first=self.cost_first,
                    cost_total=self.cost_total, eager_evictions=self.eager_evictions, demotions=self.demotions, moves=self.moves,
                    releases=self.releases, records=self.records, clock=self.clock,
                    bound_bytes=self.bound_bytes)


class _Thrash(Exception):
    """The cost executed passed the thrash limit."""


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

