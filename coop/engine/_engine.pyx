# distutils: language = c++
"""The residency engine: the one implementation of the rules that decide what is resident.

Live runs (coop.Runtime on the host, CuPy or the simulation backend), trace replays and
``coop bench`` all run these rules, over storages and ops with integer ids:

- an op's inputs are pinned while it runs, and made resident first by iterative
  rematerialization (no recursion limit): each pending op pins its inputs as they become
  resident; a dependency recomputed only for this call is kept but demoted after its last
  pending reader (one the program released: the first victim, and after its first recompute
  since its release evicted when the call ends);
- recomputable in-place: a mutated storage S's old value becomes a new storage V with S's old
  producer, readers of S are redirected to V, and the in-place op becomes S's producer (with
  the ablation, or for a constant, V holds a copy instead);
- record lifetime: a storage's record lives while the program holds it (users) or a live op
  reads it (readers); an op's record lives while one of its outputs does; a storage released by
  the program loses its memory at once (the record may stay, to recompute others);
- materialize: a storage becomes a constant, and settles at the low end of the arena;
- the logical clock (advanced by each op's cost, recomputes included) and one set of counters.

The Engine is built from layers, one concern each, each a cdef class in its own .pxi file
(listed in _engine.pxd, which is the C API). The engine places memory through the arena core
(coop._core) and is the arena's owner: the core calls ``evict`` with its victims, whichever
backend allocation ran out of room. What running an op, dropping memory and copying mean is the
executor's (SizeExecutor here, for sizes only: replays and the simulation backend;
coop._executor.ArrayExecutor for NumPy and CuPy arrays), through the Executor contract below and
the engine's "executors' API".

Layers: this module cimports coop._core and imports coop.errors, coop.engine's own pure
Python modules (policies, cost) and one constant of the backends' contract
(coop.backends.base.AHEAD_CHUNK); never the runtime, kernels, traces or a backend itself.
"""
from libc.math cimport INFINITY, isfinite
from libc.stdint cimport int64_t, uint64_t
from libcpp.algorithm cimport remove
from libcpp.vector cimport vector

from coop._core cimport PLACE_EXPENSIVE, PLACE_LOWEST, Arena, Evictor

import warnings

from coop._checks import check_int
from coop.backends.base import AHEAD_CHUNK
from coop.engine.cost import DEVICES
from coop.engine.policies import POLICIES, get_policy
from coop.errors import HostMemoryError, OutOfMemoryError, Thrash


# what becomes of a mutated storage's old value (c_prepare_inplace)
cdef enum:
    OLD_NONE = 0        # nothing: no record needs it
    OLD_RECOMPUTE = 1   # a new storage with S's old producer, evicted: recomputed when needed
    OLD_COPY = 2        # a copy of a constant, resident while read
    OLD_VERSION = 3     # DTR's rule: a copy, then released (evicted at once when recomputable)

#: cost units per byte of copying memory when none is given: the a100-80gb's, in nanoseconds
#: (coop's recorded traces and DTR's logs count nanoseconds)
DEFAULT_COPY_COST = DEVICES["a100-80gb"].copy_ns_per_byte
#: (d2h, h2d) cost units per byte of the host link when none is given: the a100-80gb's PCIe
DEFAULT_LINK = DEVICES["a100-80gb"].host_link


cdef class Executor:
    """Base executor: every method the engine calls. run, drop, forget and copy must be
    provided by a subclass; an executor that cannot move memory keeps relocate's and slide's
    refusals (and can_move, can_slide False)."""

    cpdef int run(self, int op) except -1:
        """Run op again: give each of its live evicted outputs memory (Engine.c_evicted_output,
        then c_place or c_bind)."""
        raise NotImplementedError

    cpdef bint drop(self, int storage) except -1:
        """Free an evicted storage's memory; False refuses (its memory is held elsewhere)."""
        raise NotImplementedError

    cpdef bint can_drop(self, int storage) except -1:
        """Whether drop would free resident storage's memory now (nothing else holds it)."""
        return True

    cpdef int forget(self, int storage) except -1:
        """storage's record died: free its memory if it has any, and what is kept for it."""
        raise NotImplementedError

    cpdef int forget_op(self, int op) except -1:
        """op's record died: what is kept to run it again (its kernel, attributes) may go."""
        return 0

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

    cpdef bint offload(self, int storage, bint ahead=False) except -1:
        """Copy resident storage's bytes into host memory kept for it, outside the arena; its
        memory stays (the engine frees it next, through drop, which must then succeed). False
        refuses (memory held elsewhere). Called only when can_offload is set. ahead (only when
        can_copy_ahead is set): a copy out ahead, whose storage stays resident and in use: the
        copy must not hold up the work after it, nor its memory be reused before it ends."""
        return False

    cpdef int fetch(self, int storage, int placement, bint ahead=False) except -1:
        """Give offloaded storage memory (Engine.c_place, or an allocation then c_bind) that
        holds the bytes of its host copy; the copy may go (forget_host follows). ahead (a
        prefetch, ahead of its reader): the copy need not be done when this returns, nor hold
        up the work after it; the engine calls await_fetch before anything reads, writes,
        moves or copies out the storage, drops its host copy or frees its memory."""
        raise NotImplementedError

    cpdef int await_fetch(self, int storage) except -1:
        """storage's copy back ahead (fetch with ahead) is about to be read: the work from now
        on waits for it."""
        return 0

    cpdef int forget_host(self, int storage) except -1:
        """storage's host copy is no longer needed: free it."""
        return 0

    cpdef bint slide(self, int storage, Py_ssize_t src, Py_ssize_t dst) except -1:
        """Move resident storage's bytes from offset src down to dst (the ranges may overlap)
        and make the memory at dst its own, the memory at src freeing nothing; False refuses.
        Called only when can_slide is set."""
        return False


include "_clock.pxi"
include "_records.pxi"
include "_room.pxi"
include "_tier.pxi"
include "_residency.pxi"
include "_first_run.pxi"
include "_inplace.pxi"


cdef class Engine(_InPlace):
    """One run's residency state and rules over one arena (see the module docstring).

    policy: a name of coop.engine.policies.POLICIES; executor: what running and dropping mean;
    thrash_cost: raise Thrash once the cost executed passes it (0: never); copy_cost: cost units
    per byte of copying memory (None: DEFAULT_COPY_COST), what coop's in-place rule weighs a
    copy at and what a move costs when the policy moves.

    The host tier (a policy that offloads, an executor that can copy to the host): host_budget
    is the bytes it may hold (None: no limit); link is (d2h, h2d), the cost units per byte of a
    copy out to the host and back (None: DEFAULT_LINK, the a100-80gb's); lookahead is how many
    ops ahead a caller (the replayer) brings offloaded inputs back (c_prefetch; 0: none).

    The Python API below is the runtime's: every entry checks its ids.
    """

    def __init__(self, Arena arena, policy, Executor executor, double thrash_cost=0.0,
                 copy_cost=None, host_budget=None, link=None, lookahead=0):
        cdef object record = get_policy(policy)
        # the one check of policy against arena: an ideal arena (no addresses) takes only
        # dtr-ideal, and dtr-ideal only an ideal arena, so coop's window never meets one
        if record.ideal != arena.ideal:
            raise ValueError(f"policy {record.name!r} needs "
                             + ("an ideal arena" if record.ideal else "an arena with addresses")
                             + ": use coop.SimBackend(budget, ideal=True) with policy='dtr-ideal', "
                               "and only with it")
        if executor.engine is not None:
            raise ValueError("this executor already serves another engine")
        self.policy_code = record.core_code
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
        arena.moves_if_blocked = record.moves_if_blocked
        arena.excess_weight = record.excess_weight
        self._tier(record, host_budget, link, lookahead)
        arena.attach(self)
        executor.engine = self
        self.cur_op = -1

    def _tier(self, record, host_budget, link, lookahead):
        self.offloading = record.offload and self.executor.can_offload and not self.arena.ideal
        if host_budget is not None and not record.offload:
            raise ValueError(f"policy {record.name!r} has no host tier, so host_budget="
                             f"{host_budget!r} would go unused: use an offloading policy "
                             f"({', '.join(n for n, p in POLICIES.items() if p.offload)}) or "
                             "leave host_budget out")
        if host_budget is None:
            self.host_budget = -1
        else:
            if isinstance(host_budget, bool) or not isinstance(host_budget, int) \
                    or host_budget < 0:
                raise ValueError(f"host_budget must be a number of bytes >= 0 (None: no "
                                 f"limit), got {host_budget!r}")
            self.host_budget = host_budget
        d2h, h2d = DEFAULT_LINK if link is None else link
        for name, rate in (("d2h", d2h), ("h2d", h2d)):
            if isinstance(rate, bool) or not 0.0 <= float(rate) < INFINITY:
                raise ValueError(f"link: the {name} cost per byte must be a finite number >= 0, "
                                 f"got {rate!r}")
        self.d2h_rate = float(d2h)
        self.h2d_rate = float(h2d)
        lookahead = check_int("lookahead", lookahead, 0, 1 << 30)
        if lookahead and not record.offload:
            raise ValueError(f"policy {record.name!r} has no host tier, so lookahead="
                             f"{lookahead} would go unused: use an offloading policy "
                             f"({', '.join(n for n, p in POLICIES.items() if p.offload)}) or "
                             "leave lookahead out")
        self.lookahead = lookahead if self.offloading else 0
        self.ref_pos = -1
        self.bringing = -1
        self.ahead_s = -1
        self.ahead_chunk = AHEAD_CHUNK
        self.read_pricing = True
        self.release_pricing = True
        self.max_step_ops = 1 << 20
        if self.offloading and not record.offload_last:
            self.arena.c_count_offloads(True)

    def open_tier(self, bint constants_only=False):
        """Open the host tier now, for good: from here on every choice counts offloads, each
        piece leaving by its cheapest way, as after the first choice that needed the tier
        (docs/core.md, "The host tier"). For a run known to need the tier before it starts (a
        replay whose budget is below its trace's recompute-only lower bound). constants_only:
        until a choice finds no way out with them alone, only constants whose host copy is
        cached (copied out ahead: leaving copies nothing) are offered; then the tier widens to
        every storage (the core's Evictor.widen). True when the tier is open (the policy
        offloads and the executor copies to the host)."""
        if self.offloading:
            self.arena.c_count_offloads(True)
            self.tier_constants = constants_only
        return bool(self.offloading)

    def close(self):
        """Stop owning the arena (its storages stay registered)."""
        self.arena.detach(self)

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
        self.c_retain(s)

    def unref(self, int s):
        """The program dropped a reference to s; at none, s is released."""
        self._storage(s)
        self.c_unref(s)

    def pin(self, int s):
        self._storage(s)
        self.c_pin(s)

    def unpin(self, int s):
        self._storage(s)
        if self.pins[s] <= 0:
            raise ValueError(f"unpin of storage {s}, which the engine has not pinned")
        self.c_unpin(s, True)

    def make_resident(self, int s):
        """Recompute s if it is evicted (pin it first)."""
        self._storage(s)
        self.c_make_resident(s)

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
        return self.c_inputs(o)

    def evicted_outputs(self, int o):
        """(index, storage) of o's live outputs that have no memory: what running it again
        must give memory to."""
        self._op(o)
        cdef vector[int] index, storages
        self.c_evicted_outputs(o, index, storages)
        return list(zip(index, storages))

    def placement(self, int o):
        self._op(o)
        return self.c_placement(o)

    def op_cost(self, int o):
        self._op(o)
        return self.cost[o]

    def resident(self, int s):
        self._storage(s)
        return self.c_resident(s)

    def written(self, int s):
        """Resident s's bytes were written outside an op (a borrowed array written in place:
        data parallel training's buckets): a cached host copy (a copy out ahead) no longer
        holds them and is dropped, so that leaving again copies the new bytes out."""
        self._storage(s)
        if self.on_host[s] == 2:
            self._host_release(s)

    def info(self, int s):
        """A storage's state, for tests and debugging; offer: what an offload of it costs
        the window now, before the scan divides it by staleness (None: not on offer)."""
        cdef double offer
        if s < 0 or s >= <int>self.alive.size() or not self.alive[s]:
            return None
        offer = self.arena.c_offload_cost(self.slot[s]) if self.slot[s] >= 0 else INFINITY
        return {"nbytes": self.size[s], "offset": self.offset[s] if self.offset[s] >= 0 else None,
                "producer": self.producer[s] if self.producer[s] >= 0 else None,
                "index": self.index[s], "users": self.users[s], "readers": self.readers[s],
                "pins": self.pins[s], "held": bool(self.held[s]),
                "on_host": self.on_host[s], "offer": offer if offer < INFINITY else None}

    def storages(self):
        """Ids of the live storage records."""
        return [s for s in range(<int>self.alive.size()) if self.alive[s]]

    def pinned(self):
        """{storage: pins} of the engine's pins."""
        return {s: self.pins[s] for s in range(<int>self.pins.size())
                if self.alive[s] and self.pins[s]}

    @property
    def live_storages(self):
        """How many storage records live."""
        return self.n_alive

    @property
    def live_ops(self):
        """How many op records live."""
        return self.op_in.size() - self.free_ops.size()

    def stats(self):
        """One dict, one name per figure: the engine's counters, the arena's, and the compute
        overhead (cost executed / cost of the first runs)."""
        out = self.counters()
        out.update(self.arena.stats())
        out.update(self.tier_counters())
        out["compute_overhead"] = self.cost_total / self.cost_first if self.cost_first else 1.0
        return out


include "_sizes.pxi"


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
