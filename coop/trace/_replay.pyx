# distutils: language = c++
"""Trace replay: a compiled program (coop.trace) driven through the residency engine
(coop.engine) on the real arena core, at C speed, by the engine's sizes-only executor.

The engine is the one the runtime uses, so a trace recorded from a run replays with the
evictions and recomputes the run made (tests/test_replay.py). Semantics: docs/trace-format.md.

Layer: coop.trace; cimports the engine and the core, imports coop.errors; nothing above.
"""
from libc.math cimport INFINITY
from libc.stdint cimport int64_t
from libcpp.vector cimport vector

from coop._core cimport Arena
from coop.engine._engine cimport Engine, SizeExecutor
from coop.errors import OutOfMemoryError



# record kinds
cdef enum:
    R_CONSTANT, R_CALL, R_MUTATE, R_RELEASE, R_ACCESS, R_MATERIALIZE, R_MATERIALIZE_IN_PLACE

#: the largest size in bytes (an arena holds at most 2**62)
cdef int64_t MAX_BYTES = (<int64_t>1) << 62

KINDS = {"constant": R_CONSTANT, "call": R_CALL, "mutate": R_MUTATE, "release": R_RELEASE,
         "access": R_ACCESS, "materialize": R_MATERIALIZE,
         "materialize in place": R_MATERIALIZE_IN_PLACE}


cdef class Program:
    """A trace compiled to flat arrays: records, ops (CSR inputs/outputs/events), value sizes.

    Built by coop.trace.compile_program from validated records; values are dense indices.
    """
    cdef readonly int n_values
    cdef readonly int n_ops
    cdef readonly double cost_first          # sum of op costs: an unlimited run's total
    cdef readonly object names               # op index -> kernel name
    cdef readonly object meta                # the trace's meta record (a dict), or {}
    cdef readonly object source              # where it was read from (for messages)
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
    cdef vector[unsigned char] failed        # the op's kernel failed: its first run aborts

    def __init__(self, int n_values, sizes, records, ops, names, meta=None, source="<records>"):
        """records: [(kind, arg)]; ops: [(inputs, outputs, out_allocs, mutated, events or
        None, cost, cls[, failed])] (failed: a bool, False when left out). Every index is
        checked here (ValueError), so that a replay, which reads them unchecked, never reads
        outside its arrays."""
        _check_program(n_values, sizes, records, ops, names)
        self.n_values = n_values
        self.value_size = sizes
        self.names = list(names)
        self.meta = dict(meta or {})
        self.source = str(source)
        for kind, arg in records:
            self.rec_kind.push_back(kind)
            self.rec_arg.push_back(arg)
        self.in_ptr.push_back(0)
        self.out_ptr.push_back(0)
        self.mut_ptr.push_back(0)
        self.ev_ptr.push_back(0)
        self.cost_first = 0.0
        for op in ops:
            inputs, outputs, allocs, mutated, events, cost, cls = op[:7]
            failed = len(op) > 7 and op[7]
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
            self.failed.push_back(failed)
            if not failed:        # a failed op costs nothing: its first run never finished
                self.cost_first += cost
        self.n_ops = len(self.names)

    @property
    def n_records(self):
        return self.rec_kind.size()

    def op_failed(self, int t):
        """Whether op t's kernel failed (its record says "failed": true)."""
        if not 0 <= t < self.n_ops:
            raise IndexError(f"op {t} is not in the program's {self.n_ops}")
        return bool(self.failed[t])

    def __repr__(self):
        return (f"<coop.trace.Program records={self.rec_kind.size()} ops={self.n_ops} "
                f"values={self.n_values}>")


def _check_program(n_values, sizes, records, ops, names):
    """ValueError naming the first index or number of a program that is out of range."""
    def bad(what):
        raise ValueError(f"coop.trace.Program: {what}")

    def ints(xs, lo, hi, what):
        for x in xs:
            if isinstance(x, bool) or not isinstance(x, int) or not lo <= x < hi:
                bad(f"{what} {x!r} is not in [{lo}, {hi})")

    if n_values < 0 or len(sizes) != n_values:
        bad(f"{len(sizes)} sizes for {n_values} values")
    ints(sizes, 0, MAX_BYTES + 1, "a value size")
    if len(names) != len(ops):
        bad(f"{len(names)} names for {len(ops)} ops")
    for i, (kind, arg) in enumerate(records):
        ints((kind,), 0, R_MATERIALIZE_IN_PLACE + 1, f"record {i}: kind")
        ints((arg,), 0, len(ops) if kind in (R_CALL, R_MUTATE) else n_values,
             f"record {i}: argument")
        if kind == R_CALL and ops[arg][3]:
            bad(f"record {i}: op {arg} mutates its inputs: its record is a mutate")
        if kind == R_MUTATE and (not ops[arg][3] or ops[arg][1]):
            bad(f"record {i}: op {arg} of a mutate record needs mutated inputs and no outputs")
    for t, op in enumerate(ops):
        if len(op) not in (7, 8):
            bad(f"op {t} has {len(op)} fields, not 7 or 8")
        inputs, outputs, allocs, mutated, events, cost, cls = op[:7]
        if len(op) == 8 and not isinstance(op[7], bool):
            bad(f"op {t}: failed {op[7]!r} is not a bool")
        if len(op) == 8 and op[7] and outputs:
            bad(f"op {t}: a failed op has no outputs")
        ints(inputs, 0, n_values, f"op {t}: input value")
        ints(outputs, -1, n_values, f"op {t}: output value")
        if len({v for v in outputs if v >= 0}) != len([v for v in outputs if v >= 0]):
            bad(f"op {t}: a value is two of its outputs")
        ints(mutated, 0, len(inputs), f"op {t}: mutated input")
        if len({inputs[m] for m in mutated}) != len(mutated):
            bad(f"op {t}: a value is mutated twice")
        if len(allocs) != len(outputs):
            bad(f"op {t}: {len(allocs)} output allocations for {len(outputs)} outputs")
        if not (isinstance(cost, (int, float)) and 0.0 <= cost < float("inf")):
            bad(f"op {t}: cost {cost!r} is not a finite number >= 0")
        ints((cls,), 0, 3, f"op {t}: placement")
        if events is None:
            continue
        n, live = 0, set()
        for e in events:
            ints((e,), -n, MAX_BYTES + 1, f"op {t}: allocation event")
            if e >= 0:
                live.add(n)
                n += 1
            elif ~e not in live:
                bad(f"op {t}: allocation {~e} is freed twice")
            else:
                live.discard(~e)
        held = [a for v, a in zip(outputs, allocs) if v >= 0]
        ints(held, 0, n, f"op {t}: output allocation")
        if any(a not in live for a in held) or len(set(held)) != len(held):
            bad(f"op {t}: each new output needs an allocation of its own, live at the end")


cdef class _ReplayExecutor(SizeExecutor):
    """SizeExecutor plus host traces' kernel allocation histories (docs/trace-format.md)."""
    cdef Program prog
    cdef vector[Py_ssize_t] alloc_off     # offsets of the running kernel's allocations

    cpdef int run(self, int o) except -1:
        cdef Engine e = self.engine
        cdef Program p = self.prog
        cdef int t = e.c_tag(o)
        if not p.has_events[t]:
            return SizeExecutor.run(self, o)
        cdef int placement = e.c_placement(o)
        cdef int m
        cdef size_t k, j = 0
        cdef vector[Py_ssize_t] fresh
        cdef vector[int] inputs, index, missing
        cdef bint mutate = p.mut_ptr[t + 1] > p.mut_ptr[t]
        # a host kernel: an in-place op first copies the old value(s) into fresh memory
        try:
            if mutate:
                inputs = e.c_inputs(o)
                for m in range(p.mut_ptr[t], p.mut_ptr[t + 1]):
                    fresh.push_back(e.c_allocate(e.c_size(inputs[p.muts[m]]), placement))
            self._run_events(t, placement)
        except BaseException:
            # a failed recompute (no room) leaves no anonymous piece behind: what the
            # kernel had allocated is freed, as a failed kernel's arrays are
            for k in range(fresh.size()):
                e.arena.c_free(fresh[k])
            self._free_leftovers()
            raise
        e.c_evicted_outputs(o, index, missing)
        if mutate:
            # output k is mutated input k's new value: it takes fresh copy k if it has no memory
            for k in range(fresh.size()):
                if j < index.size() and <size_t>index[j] == k:
                    e.c_bind(missing[j], fresh[k])
                    j += 1
                else:
                    e.arena.c_free(fresh[k])
        else:
            for j in range(missing.size()):
                e.c_bind(missing[j], self._take(p.out_alloc[p.out_ptr[t] + index[j]]))
        self._free_leftovers()
        return 0

    cdef Py_ssize_t _take(self, int a) except -2:
        """The offset of the running kernel's allocation a, which now holds an output."""
        cdef Py_ssize_t off
        if a < 0 or <size_t>a >= self.alloc_off.size() or self.alloc_off[a] < 0:
            raise ValueError(f"an output's allocation {a} is not live at the kernel's end")
        off = self.alloc_off[a]
        self.alloc_off[a] = -1
        return off

    cdef int _run_events(self, int t, int placement) except -1:
        """A host kernel's allocations and frees, in order; alloc_off keeps their offsets."""
        cdef Program p = self.prog
        cdef int64_t ev
        cdef Py_ssize_t k
        self.alloc_off.clear()
        for k in range(p.ev_ptr[t], p.ev_ptr[t + 1]):
            ev = p.evs[k]
            if ev >= 0:
                self.alloc_off.push_back(self.engine.c_allocate(ev, placement))
            else:
                if <size_t>(~ev) >= self.alloc_off.size() or self.alloc_off[~ev] < 0:
                    raise ValueError(f"a kernel frees allocation {~ev}, which is not live")
                self.engine.arena.c_free(self.alloc_off[~ev])
                self.alloc_off[~ev] = -1
        return 0

    cdef int _free_leftovers(self) except -1:
        cdef size_t k
        for k in range(self.alloc_off.size()):
            if self.alloc_off[k] >= 0:
                self.engine.arena.c_free(self.alloc_off[k])
                self.alloc_off[k] = -1
        return 0


cdef class Replayer:
    """One replay of a Program under one arena and policy (use coop.trace.replay.replay): each
    record becomes the engine call the runtime would make."""

    cdef Program prog
    cdef readonly Engine engine
    cdef _ReplayExecutor executor
    cdef vector[int] sid_of            # program value -> engine storage, -1 before defined
    cdef vector[unsigned char] held    # the program holds the value (defined, not released)
    cdef readonly long long records
    cdef readonly int last_op          # the program op of the last call or mutate run, or -1
    cdef vector[int] read_ptr, reads   # the engine's reference: per value, the records reading it
    cdef vector[Py_ssize_t] release_at  # ... and the record releasing it (-1: none)

    def __init__(self, Program prog, Arena arena, policy, double thrash_cost=0.0,
                 copy_cost=None, host_budget=None, link=None, lookahead=0):
        self.prog = prog
        # a trace recorded mid-run prices the room as the run's window did when it began
        arena.room_price = prog.meta.get("room_price", 0.0)
        self.executor = _ReplayExecutor()
        self.executor.prog = prog
        self.engine = Engine(arena, policy, self.executor, thrash_cost, copy_cost, host_budget,
                             link, lookahead)
        self.sid_of.assign(prog.n_values, -1)
        self.held.assign(prog.n_values, 0)
        self.last_op = -1
        if self.engine.lookahead > 0:
            self._reference()

    cdef int _reference(self) except -1:
        """With lookahead the trace is the engine's reference (Engine.c_next_read): its
        records are the positions, the first run's cost before each its clock, and each
        value's reads the call and mutate records whose inputs hold it."""
        cdef Program p = self.prog
        cdef Py_ssize_t i, n = p.rec_kind.size()
        cdef int t, k, v
        cdef vector[int] count, last
        cdef vector[double] times
        cdef double clock = 0.0
        count.assign(p.n_values + 1, 0)
        last.assign(p.n_values, -1)
        for i in range(n):
            times.push_back(clock)
            if p.rec_kind[i] == R_CALL or p.rec_kind[i] == R_MUTATE:
                t = p.rec_arg[i]
                clock += p.cost[t]
                for k in range(p.in_ptr[t], p.in_ptr[t + 1]):
                    v = p.ins[k]
                    if last[v] != i:
                        last[v] = <int>i
                        count[v + 1] += 1
        times.push_back(clock)
        self.engine.c_ref_clock(times)
        for v in range(p.n_values):
            count[v + 1] += count[v]
        self.read_ptr = count
        self.release_at.assign(p.n_values, -1)
        for i in range(n):
            if p.rec_kind[i] == R_RELEASE:
                self.release_at[p.rec_arg[i]] = i
        self.reads.assign(count[p.n_values], 0)
        last.assign(p.n_values, -1)
        for i in range(n):
            if p.rec_kind[i] == R_CALL or p.rec_kind[i] == R_MUTATE:
                t = p.rec_arg[i]
                for k in range(p.in_ptr[t], p.in_ptr[t + 1]):
                    v = p.ins[k]
                    if last[v] != i:
                        last[v] = <int>i
                        self.reads[count[v]] = <int>i
                        count[v] += 1
        return 0

    def run(self, start=0, stop=None):
        """Replay records [start, stop); raises OutOfMemoryError, or Thrash."""
        cdef Py_ssize_t n = self.prog.rec_kind.size()
        cdef Py_ssize_t i, end = n if stop is None else stop
        cdef int kind, arg
        cdef Engine e = self.engine
        if not 0 <= start <= end <= n:
            raise IndexError(f"records [{start}, {end}) are not within the program's {n}")
        for i in range(start, end):
            kind = self.prog.rec_kind[i]
            arg = self.prog.rec_arg[i]
            if kind != R_CALL and kind != R_MUTATE and kind != R_CONSTANT \
                    and kind != R_RELEASE and not self.held[arg]:
                self._unheld(arg, i)
            if kind == R_CALL or kind == R_MUTATE:
                e.c_ref_at(i)
                self._apply(arg, kind == R_MUTATE)
                if e.lookahead > 0:
                    self._prefetch(i)
            elif kind == R_CONSTANT:
                if self.sid_of[arg] >= 0:
                    raise ValueError(f"record {i}: value {arg} is defined twice")
                self._define(arg, e.c_constant(self.prog.value_size[arg], -1))
            elif kind == R_RELEASE:
                if self.held[arg]:
                    self.held[arg] = 0
                    e.c_unref(self.sid_of[arg])
            elif kind == R_ACCESS:
                e.c_access(self.sid_of[arg])
            else:
                e.c_materialize(self.sid_of[arg], kind == R_MATERIALIZE)
            self.records += 1

    def finish(self):
        """The end of the trace: every value the program still holds is made resident and
        pinned (a recompute may be needed), or stays in the host tier, where it is safe; with
        the tier, one made resident before may go there to make room for a later one
        (Engine.c_keep_resident)."""
        cdef int v
        cdef vector[int] held
        for v in range(self.prog.n_values):
            if self.held[v]:
                held.push_back(self.sid_of[v])
        self.engine.c_keep_resident(held)

    def resident_values(self):
        cdef Engine e = self.engine
        return [v for v in range(self.prog.n_values)
                if self.held[v] and e.c_resident(self.sid_of[v])]

    def storage_of(self, int v):
        """The engine's storage id of program value v (-1 before it is defined)."""
        if not 0 <= v < self.prog.n_values:
            raise IndexError(f"value {v} is not in the program's {self.prog.n_values}")
        return self.sid_of[v]

    cdef int _prefetch(self, Py_ssize_t i) except -1:
        """The host tier's lookahead: the inputs of the next `lookahead` ops after record i
        that wait in the host tier start coming back now (Engine.c_prefetch: only into free
        ranges), nearest op first; with a lookahead of two or more, those of the op after
        next are brought back first, with room made for them where no free range holds them
        (_prefetch_room), so that their copies run under the next op."""
        cdef Program p = self.prog
        cdef Engine e = self.engine
        cdef Py_ssize_t j, n = p.rec_kind.size()
        cdef int seen = 0, t, k, v, kind
        if e.lookahead >= 2:
            self._prefetch_room(i)
        for j in range(i + 1, n):
            if seen >= e.lookahead:
                break
            kind = p.rec_kind[j]
            if kind != R_CALL and kind != R_MUTATE:
                continue
            seen += 1
            t = p.rec_arg[j]
            for k in range(p.in_ptr[t], p.in_ptr[t + 1]):
                v = p.ins[k]
                if self.held[v] and e.on_host[self.sid_of[v]]:
                    e.c_prefetch(self.sid_of[v])
        return 0

    cdef int _prefetch_room(self, Py_ssize_t i) except -1:
        """The inputs the next two ops after record i read, and the op after next's, for the
        engine's room made ahead (Engine.c_prefetch_after_next); with them the first input of
        a later op within the lookahead that the engine says must come back now for it
        (Engine.c_late_back, given the ops' costs before that op): one at a time, so that
        room is not made for copies that would wait behind it."""
        cdef Program p = self.prog
        cdef Engine e = self.engine
        cdef Py_ssize_t j, n = p.rec_kind.size()
        cdef int seen = 0, t, k, v, s
        cdef double between = 0.0
        cdef int far = -1
        cdef vector[int] reads, wanted
        for j in range(i + 1, n):
            if p.rec_kind[j] != R_CALL and p.rec_kind[j] != R_MUTATE:
                continue
            seen += 1
            if seen > e.lookahead:
                break
            t = p.rec_arg[j]
            for k in range(p.in_ptr[t], p.in_ptr[t + 1]):
                v = p.ins[k]
                if not self.held[v]:
                    continue
                s = self.sid_of[v]
                if seen <= 2:
                    reads.push_back(s)
                if seen == 2:
                    wanted.push_back(s)
                elif far < 0 and seen > 2 and e.c_late_back(s, between):
                    far = s
            between += p.cost[t]
            if seen >= 2 and (far >= 0 or not e.c_back_idle()):
                break       # (busy: no input further ahead is late, c_late_back)
        if seen >= 2:
            if far >= 0:
                wanted.push_back(far)
            return self.engine.c_prefetch_after_next(reads, wanted)
        return 0

    cdef int _unheld(self, int v, Py_ssize_t i) except -1:
        state = "released" if self.sid_of[v] >= 0 else "not defined yet"
        raise ValueError(f"record {i} uses value {v}, which is {state}")

    cdef int _define(self, int v, int s) except -1:
        if self.sid_of[v] >= 0:
            raise ValueError(f"value {v} is defined twice")
        self.sid_of[v] = s
        self.held[v] = 1
        self.engine.c_retain(s)
        if self.read_ptr.size() > 0:
            self.engine.c_ref_reads(s, self.reads.data() + self.read_ptr[v],
                                    self.read_ptr[v + 1] - self.read_ptr[v])
            self.engine.c_ref_release(s, self.release_at[v])
        return 0

    cdef int _apply(self, int t, bint mutate) except -1:
        cdef Program p = self.prog
        cdef Engine e = self.engine
        cdef vector[int] inputs, mutated
        cdef int k, v, o
        cdef Py_ssize_t a
        for k in range(p.in_ptr[t], p.in_ptr[t + 1]):
            if not self.held[p.ins[k]]:
                self._unheld(p.ins[k], self.records)
            inputs.push_back(self.sid_of[p.ins[k]])
        for k in range(p.out_ptr[t], p.out_ptr[t + 1]):
            if p.outs[k] >= 0 and self.sid_of[p.outs[k]] >= 0:
                raise ValueError(f"record {self.records}: value {p.outs[k]} is defined twice")
        self.last_op = t
        o = e.c_begin(inputs, p.cls[t], t)
        e.c_set_cost(o, p.cost[t])
        if mutate:
            for k in range(p.mut_ptr[t], p.mut_ptr[t + 1]):
                mutated.push_back(p.muts[k])
            e.c_prepare_inplace(o, mutated)
            if p.has_events[t]:
                self._kernel_events(o, t)
            if p.failed[t]:
                # the kernel failed: each mutated S keeps what it holds, as a constant
                e.c_fail_inplace(o)
            else:
                e.c_finish_inplace(o)
            return 0
        if p.failed[t]:
            # a call whose kernel failed: its inputs were made resident (c_begin), its
            # allocations made room; then the op aborts
            if p.has_events[t]:
                self._kernel_events(o, t)
            e.c_abort(o)
            return 0
        if p.has_events[t]:
            # a host kernel: its allocations are anonymous until it returns
            self._first_events(o, t)
            for k in range(p.out_ptr[t], p.out_ptr[t + 1]):
                v = p.outs[k]
                if v >= 0:
                    a = self.executor._take(p.out_alloc[k])
                    self._define(v, e.c_output(o, p.value_size[v], a))
                else:
                    e.c_alias(o)
            self.executor._free_leftovers()
        else:
            for k in range(p.out_ptr[t], p.out_ptr[t + 1]):
                v = p.outs[k]
                if v >= 0:
                    self._define(v, e.c_first_output(o, p.value_size[v]))
                else:
                    e.c_alias(o)
        e.c_finish(o)
        return 0

    cdef int _first_events(self, int o, int t) except -1:
        """A first run's host-kernel allocations; one that fails frees the kernel's live
        allocations and may run it again (Engine.c_retry)."""
        cdef Engine e = self.engine
        while True:
            try:
                self.executor._run_events(t, e.c_placement(o))
                return 0
            except OutOfMemoryError as err:
                self.executor._free_leftovers()
                if not e.c_retry(o, err.request):
                    raise

    cdef int _kernel_events(self, int o, int t) except -1:
        """The allocations and frees of a kernel that leaves no output; what it leaves
        allocated is freed after it."""
        self.executor._run_events(t, self.engine.c_placement(o))
        self.executor._free_leftovers()
        return 0

    def counters(self):
        out = self.engine.counters()
        out["records"] = self.records
        return out


