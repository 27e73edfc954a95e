"""The runtime: coop's Python face. It runs kernels on coop Tensors through the residency
engine (coop.engine), which decides what is resident, evicts and recomputes.

A Runtime is an engine plus an executor for its backend: arrays on the host or a CuPy device
(coop._executor.ArrayExecutor), sizes only on the simulation backend (SimExecutor). Per op,
Python does what only Python can (call the kernel, find where its outputs landed, make the
Tensors); every residency rule is the engine's, the same that replays traces.
"""
import collections
import contextvars
import threading
import warnings

import numpy

from coop._checks import check_int, check_number
from coop._core import CHEAP, EXPENSIVE, LOG_MOVE, log_records
from coop._executor import ArrayExecutor, OpRecord, SimExecutor, gather
from coop.arrays import host_copy
from coop.backends.base import Backend
from coop.budget import parse_budget
from coop.engine import Engine
from coop.engine.cost import DEVICES, DeviceSpec, device_spec
from coop.engine.policies import get_policy
from coop.kernel import Kernel, active_runtimes, as_kernel, call_error, spec_nbytes, specs_of
from coop.tensor import Tensor


class Runtime:
    """The tape and its execution under one backend's budget.

    policy: a name of coop.POLICIES (coop.engine.policies). cost: "timing" measures each op's
    first run (host ns on NumPy, CUDA events on CuPy); a DeviceSpec or a name in coop.engine.cost.DEVICES
    models every op by its FLOPs and bytes. None: timing on NumPy, the device's own spec
    (by its name; a warning and a100-80gb's when unknown) on CuPy, a100-80gb in simulation.
    classifier: "type" (the kernel's
    class, from the table of expensive ops) or "density" (EXPENSIVE when cost per output byte
    >= density_threshold ns/B, decided before the outputs are placed). host_budget: the bytes the
    host tier of an offloading policy (coop-offload) may hold (an int or "64GiB"; None: the
    backend's host_budget, else no limit); the backend must copy to the host (NumPy's does;
    elsewhere the policy runs without the tier). lookahead: with the tier, after each op the
    constants the next `lookahead` ops of the previous training step read (coop.optim's
    optimizers mark the steps: mark_step) start coming back from the host tier when they fit
    a free range, and with a lookahead of 2 or more those of the op after next with room made
    for them (0, the default: none; a recorded run then replays with its counters).
    """

    def __init__(self, backend, policy="coop", cost=None, classifier="type",
                 density_threshold=1.0, seed=0, host_budget=None, lookahead=0):
        record = get_policy(policy)
        if host_budget is None and getattr(backend, "host_budget", None) is not None:
            if not record.offload:
                raise ValueError(
                    f"this backend has a host_budget ({backend.host_budget:,} bytes), but "
                    f"policy {record.name!r} has no host tier, so it would go unused: use an "
                    f"offloading policy (policy='coop-offload'), or make the backend without "
                    f"host_budget")
            host_budget = backend.host_budget
        if host_budget is not None:
            host_budget = parse_budget(host_budget, name="host_budget")
        if classifier not in ("type", "density"):
            raise ValueError(f"classifier must be 'type' or 'density', got {classifier!r}")
        check_number("density_threshold", density_threshold)   # ns per byte
        check_int("seed", seed)
        arena = backend.arena if isinstance(backend, Backend) else None
        if arena is None:
            raise TypeError(f"a coop.Runtime needs a coop backend (coop.numpy_allocator, "
                            f"coop.allocator, coop.SimBackend), got {type(backend).__name__}")
        timer = None
        if cost == "timing":   # measured: host timers on NumPy, CUDA events on a device
            if backend.xp is None:
                raise ValueError("cost='timing' needs kernels to time; the simulation backend "
                                 "has none: give a device name or a coop.DeviceSpec")
            timer = backend.event_timer()   # None on the host: host timers
            cost = None
        elif cost is None and backend.xp is not numpy:
            cost = _default_cost(backend)
        if isinstance(cost, str):
            if cost not in DEVICES:
                raise ValueError(f"unknown device {cost!r} for the cost model; known: {', '.join(DEVICES)}")
            cost = DEVICES[cost]
        if cost is not None and not isinstance(cost, DeviceSpec):
            raise TypeError(f"cost must be None, a device name or a DeviceSpec, got {cost!r}")
        previous = arena.owner
        if previous is not None:
            if not isinstance(previous, Engine):
                raise ValueError(f"this backend's arena already has an owner ({previous!r}); "
                                 "detach it first or make one backend per runtime")
            if previous.live_storages:
                # its storage ids would collide with ours, and its evictions would reach us
                raise ValueError("this backend already serves another coop.Runtime that still has "
                                 "tensors; make one backend per runtime")
            previous.close()
        # a device backend's executor gets it bound to the current device, held weakly
        executor = SimExecutor(backend) if backend.xp is None else ArrayExecutor(backend.bound())
        try:
            engine = Engine(arena, record.name, executor, 0.0, _copy_cost(backend, cost),
                            host_budget, _host_link(backend, cost), lookahead)
            # a live run has no trace to look ahead in: the previous step's order of ops
            engine.step_prefetch = engine.lookahead > 0
        except BaseException:
            if previous is not None:      # refused: the backend stays the previous runtime's
                arena.attach(previous)
            raise
        self.backend = backend
        self.arena = arena
        self.xp = backend.xp
        self._executor = executor
        self._engine = engine
        # Threads share a runtime through this lock: every entry into the engine holds it (a
        # kernel runs holding it). A Tensor dropped by another thread while it is held is
        # queued (_pending) and released by the holder on its way out, so a __del__ never
        # waits (a kernel's worker thread may drop one while the kernel waits on it).
        self._lock = threading.RLock()
        # the backend's allocations from any thread that must evict go through this runtime's
        # engine, the arena's owner: they hold this lock (Arena.c_request), so that none runs
        # inside an op of this runtime's thread
        engine.lock = self._lock
        self._pending = collections.deque()
        self.policy = record.name
        self.cost_model = cost
        self.classifier = classifier
        self.density_threshold = density_threshold
        self._by_type = classifier == "type"
        self._timer = timer  # CUDA events around each kernel (cost="timing" on a device)
        # an op's cost is its elapsed host ns
        self._timed = cost is None and timer is None and classifier == "type"
        self._density = {}   # kernel name -> last measured cost per output byte (timing)
        self.seed = seed
        self.trace = None
        self._random_ops = 0
        self.shared = {}     # constants modules share (coop.nn's causal masks), by key

    # ---- entering ---------------------------------------------------------------------------

    def __enter__(self):
        active_runtimes.append(self)
        return self

    def _check_owner(self):
        if self.arena.owner is not self._engine:
            raise RuntimeError("this coop.Runtime was closed: its backend serves a newer "
                               "coop.Runtime (one backend serves one runtime); use the newer "
                               "one, or give each runtime its own backend")

    def _release_pending(self):
        """Release the Tensors other threads dropped while the lock was held (Tensor.__del__),
        then drop the records of ops that died (outside the engine: a kernel closing over a
        Tensor releases it, which enters the engine again)."""
        pending = self._pending
        lock = self._lock
        while pending and lock.acquire(blocking=False):
            try:
                while pending:
                    self._engine.unref(pending.popleft())
            finally:
                lock.release()
        self._executor.release_dying()

    def __exit__(self, *exc):
        active_runtimes.remove(self)

    def record(self, path):
        """Record the program from now on into a trace file (a context manager). Entered when
        tensors exist, the trace starts with them: the held resident ones as constants at
        their offsets, the held evicted ones as calls with no inputs (docs/trace-format.md)."""
        return _Recording(self, path)

    def timeline(self, path):
        """Draw the program from now on as a memory timeline, an HTML page at path (a context
        manager; coop.trace.timeline): recorded, then replayed at this budget and policy on exit."""
        from coop.trace.timeline import recording
        return recording(self, path)

    def mark_start(self):
        """Mark where the measured region of a recorded trace starts."""
        if self.trace is not None:
            self.trace.start()

    @property
    def clock(self):
        """The logical clock: the cost of every op run so far, recomputes included."""
        return self._engine.clock

    # ---- creating tensors -------------------------------------------------------------------

    def tensor(self, data, dtype=None, requires_grad=False):
        """A constant (never evicted) holding a copy of data, in the arena; with
        requires_grad, a leaf of the autograd graph (backward fills its ``.grad``)."""
        if isinstance(data, Tensor):
            raise TypeError("Runtime.tensor takes array data, and this is a coop.Tensor already: "
                            "use it as it is, or tensor.numpy() for a copy of its values")
        with self._lock:
            self._check_owner()
            view, nbytes = self._executor.constant(self, data, dtype)
            sid = view.sid
            if self.trace is not None:
                self.trace.constant(sid, nbytes)
            tensor = Tensor(view)
        if self._pending or self._executor.dying:
            self._release_pending()
        tensor.requires_grad = bool(requires_grad)
        return tensor

    def materialize(self, *tensors, settle=True):
        """Keep the tensors' values as constants: rematerialize them if evicted, then forget
        how they were computed. Their producers' records (and the graph behind them, the old
        values of parameters updated in place since) can then die, and each value settles at
        the low end with the constants. Autograd does this to the gradients a backward pass
        leaves in ``.grad``, as PyTorch's are plain leaves.

        settle=False: only the resident ones change, where they are (nothing is recomputed or
        moved); an evicted one keeps its record. Autograd does this to the root of a backward
        pass, so holding on to the loss keeps no graph alive."""
        with self._lock:
            self._check_owner()
            self._materialize(tensors, settle)
        if self._pending or self._executor.dying:
            self._release_pending()

    def _materialize(self, tensors, settle):
        engine = self._engine
        for sid in dict.fromkeys(t._view.sid for t in tensors):
            info = engine.info(sid)
            if info is None or info["producer"] is None:
                continue
            engine.materialize(sid, settle)
            if self.trace is not None:   # the rule replays: the record says which one
                self.trace.materialize(sid, settle)

    # ---- apply --------------------------------------------------------------------------------

    def apply(self, kernel, *inputs, **attrs):
        """Run kernel on Tensors: the engine pins and rematerializes the inputs, the kernel
        runs, the engine records the op and its outputs.

        Returns a Tensor when the kernel returns one array (or a tuple of one), a tuple of
        Tensors when it returns a tuple of two or more.
        """
        try:
            with self._lock:
                return self._apply(kernel, inputs, attrs)
        except TypeError as error:
            bad = call_error(as_kernel(kernel), inputs, attrs, error)
            if bad is error:
                raise
            raise bad from None
        finally:
            if self._pending or self._executor.dying:
                self._release_pending()

    def _apply(self, kernel, inputs, attrs):
        if self.arena.owner is not self._engine:
            self._check_owner()
        if type(kernel) is not Kernel:
            kernel = as_kernel(kernel)
        if self._timer is not None:
            kernel = self._timer.kernel(kernel)
        views, sids = gather(self, kernel, inputs)
        if kernel.inplace is not None and kernel.inplace >= len(views):
            raise ValueError(f"kernel {kernel.name!r} mutates its input {kernel.inplace} "
                             f"(inplace={kernel.inplace}) but was given {len(views)} input"
                             f"{'' if len(views) == 1 else 's'}; pass the array it writes as "
                             f"that input, or fix inplace=")
        seed = None
        if kernel.random:
            # the op's 64-bit Philox key: a hash of (runtime seed, random op number)
            seed = int(numpy.random.SeedSequence([self.seed, self._random_ops])
                       .generate_state(1, numpy.uint64)[0])
            self._random_ops += 1
        rec = OpRecord(kernel, views, attrs, seed)
        placement = kernel.cls if self._by_type else self._placement(rec)
        engine = self._engine
        o = engine.begin(sids, placement)
        if kernel.inplace is not None:
            return self._apply_inplace(o, rec, placement)
        trace = self.trace
        if trace is not None:
            self.arena.start_log()
        try:
            out_views, cost = self._executor.first_run(self, o, rec, self._timed)
        except BaseException:
            if trace is not None:   # the engine made the inputs resident, the kernel allocated
                log = self.arena.take_log()
                trace.failed_call(rec.kernel.name, [v.sid for v in rec.inputs],
                                  _cls_name(placement), self._kernel_allocs(log))
            raise
        log = self.arena.take_log() if trace is not None else None
        if trace is not None:
            self._trace_call(rec, out_views, cost, placement, log)
        if len(out_views) == 1:
            return Tensor(out_views[0])
        return tuple(Tensor(v) for v in out_views)

    def _apply_inplace(self, o, rec, placement):
        """Recomputable in-place (the engine's rule): the kernel mutates its input's storage
        S; S's old value stays recomputable (or copied) for whoever still needs it."""
        engine = self._engine
        executor = self._executor
        i = rec.kernel.inplace
        target = rec.inputs[i]
        engine.prepare_inplace(o, [i])
        trace = self.trace
        if trace is not None:
            self.arena.start_log()
        try:
            # the first run mutates S itself; only a recompute reads the old value
            elapsed = executor.mutate(o, rec)
        except BaseException:
            if trace is not None:   # S became a constant holding what the kernel left
                log = self.arena.take_log()
                trace.mutate(rec.kernel.name, [v.sid for v in rec.inputs], i, 0,
                             _cls_name(placement), self._kernel_allocs(log), failed=True)
            raise
        log = self.arena.take_log() if trace is not None else None
        cost = self._cost(rec, elapsed, [target.spec])
        if trace is not None:
            # the program's storages, before the old value replaces S in the records
            allocs = self._kernel_allocs(log)
            trace.mutate(rec.kernel.name, [v.sid for v in rec.inputs], i, cost,
                         _cls_name(placement), allocs)
        engine.finish_inplace(o, cost)
        executor.record(o, rec)
        return Tensor(target)

    def _kernel_allocs(self, log):
        """A host kernel's allocation events for its trace record (None off the host)."""
        return _allocs(log)[0] if self._executor.logs_allocations else None

    def _placement(self, rec):
        """The placement class of the op's outputs, decided before they are placed."""
        kernel = rec.kernel
        if self.classifier == "type":
            return kernel.cls
        if self.cost_model is not None:
            inputs = [v.spec for v in rec.inputs]
            # the outputs' sizes from the shape rule; without one, as large as the largest input
            specs = specs_of(kernel.shape(*inputs, **rec.attrs)) if kernel.shape is not None \
                else [max(inputs, key=spec_nbytes)] if inputs else []
            density = self._cost(rec, 0, specs) / max(sum(spec_nbytes(s) for s in specs), 1)
        else:
            density = self._density.get(kernel.name)
            if density is None:
                return kernel.cls
        return EXPENSIVE if density >= self.density_threshold else CHEAP

    def _cost(self, rec, elapsed, out_specs):
        if self.cost_model is None:
            if self._timer is not None:
                elapsed = self._timer.elapsed_ns()
            if self.classifier == "density":
                self._density[rec.kernel.name] = elapsed / max(sum(spec_nbytes(s) for s in out_specs), 1)
            return float(elapsed)
        specs = [v.spec for v in rec.inputs]
        kernel = rec.kernel
        flops = kernel.flops(*specs, **rec.attrs) if kernel.flops else 0.0
        nbytes = sum(spec_nbytes(s) for s in specs) + sum(spec_nbytes(s) for s in out_specs)
        return self.cost_model.cost_ns(flops, nbytes)

    def _trace_call(self, rec, out_views, cost, placement, log):
        inputs = [v.sid for v in rec.inputs]
        allocs, live = _allocs(log) if self._executor.logs_allocations else (None, None)
        outputs = []
        engine = self._engine
        for view in out_views:
            alias = inputs.index(view.sid) if view.sid in inputs else -1
            alloc = None
            if allocs is not None and alias < 0:
                alloc = live[engine.info(view.sid)["offset"]]
            outputs.append((view.sid, engine.info(view.sid)["nbytes"] if alias < 0 else 0,
                            alias, alloc))
        self.trace.call(rec.kernel.name, inputs, outputs, cost, _cls_name(placement), allocs)

    # ---- the rest of the public face ----------------------------------------------------------

    def _to_host(self, array):
        # a fresh context has NumPy's default handler: the copy is made outside the arena even
        # inside `with backend:`
        return contextvars.Context().run(host_copy, self.xp, array)

    def mark_step(self):
        """A training step ended (coop.optim's optimizers call this after each step): its
        order of ops is the one the next step's prefetch looks ahead in (lookahead)."""
        with self._lock:
            self._engine.step()

    def stats(self):
        """The engine's counters and the arena's, one name each, with compute_overhead
        (docs/design.md's metrics)."""
        with self._lock:
            return self._engine.stats()

    def storages(self):
        """Ids of the storages whose records live (resident or not)."""
        with self._lock:
            return self._engine.storages()

    def evict(self, *tensors):
        """Evict the tensors' (or storage ids') storages now, where the policy could
        (recomputable, unpinned, not held by a user's array): for experiments and tests."""
        sids = []
        for k, t in enumerate(tensors):
            if isinstance(t, Tensor):
                if t.runtime is not self:
                    raise ValueError(f"evict: tensor {k} belongs to another coop.Runtime; "
                                     f"evict it through its own runtime")
                sids.append(t._view.sid)
            elif isinstance(t, bool) or not hasattr(t, "__index__"):
                raise TypeError(f"evict takes coop Tensors or storage ids (ints), got "
                                f"{type(t).__name__} at {k}")
            else:
                sids.append(t.__index__())
        with self._lock:
            self._check_owner()
            for sid in sids:
                self._engine.evict_now(sid)

    def pinned(self):
        """{storage id: pins} of the storages pinned now (empty between ops)."""
        with self._lock:
            return self._engine.pinned()

    def __copy__(self):
        return self      # a runtime is a resource: copies of what refers to it share it

    def __deepcopy__(self, memo):
        return self


class _Recording:
    def __init__(self, runtime, path):
        from coop.trace import TraceWriter
        if runtime.trace is not None:
            raise ValueError("this runtime is recording a trace already (Runtime.record or "
                             "Runtime.timeline): one recording at a time; end that one first")
        self.runtime = runtime
        meta = {"alignment": runtime.arena.alignment, "policy": runtime.policy,
                "budget": runtime.arena.capacity}
        if runtime.cost_model is not None:
            meta["cost_model"] = runtime.cost_model.name
        meta["copy_cost"] = runtime._engine.copy_cost
        if runtime.arena.room_price > 0.0:
            # recorded mid-run: the replay's window prices room as the run's does from here
            meta["room_price"] = runtime.arena.room_price
        if runtime._engine.offloading:
            # the host tier's link, and its budget: a replay copies as the run did
            meta["host_link"] = [runtime._engine.d2h_rate, runtime._engine.h2d_rate]
            if runtime._engine.host_budget >= 0:
                meta["host_budget"] = runtime._engine.host_budget
        self.writer = TraceWriter(path, **meta)
        if runtime._engine.live_storages:
            self.writer.live(*_live_state(runtime))
        runtime.trace = self.writer
        runtime._engine.release_hook = self.writer.release

    def __enter__(self):
        return self.writer

    def __exit__(self, *exc):
        self.runtime.trace = None
        self.runtime._engine.release_hook = None
        self.writer.close()


def _live_state(runtime):
    """What TraceWriter.live writes for a runtime: its arena's pieces up to the last used one
    (a held storage, None for free memory and storages only records keep, -1 for memory
    without a storage) and its held evicted storages."""
    engine = runtime._engine
    pieces = []
    for offset, size, free, sid in runtime.arena.pieces():
        info = engine.info(sid) if sid >= 0 else None
        key = None if free or (info is not None and not info["users"]) else \
            sid if info is not None else -1
        if key is None and pieces and pieces[-1][0] is None:
            pieces[-1] = (None, pieces[-1][1] + size)
        else:
            pieces.append((key, size))
    if pieces and pieces[-1][0] is None:
        pieces.pop()
    evicted = []
    for sid in engine.storages():
        info = engine.info(sid)
        if info["users"] and info["offset"] is None:
            o = info["producer"]
            evicted.append((sid, info["nbytes"], engine.op_cost(o), _cls_name(engine.placement(o))))
    return pieces, evicted


def _default_cost(backend):
    """The simulation backend's model (a100-80gb), or the device's own spec by its name; an
    unknown device gets a100-80gb's with a warning."""
    if backend.xp is None:
        return DEVICES["a100-80gb"]
    name = backend.device_name()
    spec = device_spec(name) if name else None
    if spec is None:
        warnings.warn(f"coop: no cost model for device {name!r} (known: {', '.join(DEVICES)}); "
                      f"modelling it as an a100-80gb. Pass cost='timing' (measure with CUDA "
                      f"events), a device name or a coop.DeviceSpec", RuntimeWarning, stacklevel=3)
        return DEVICES["a100-80gb"]
    return spec


def _copy_cost(backend, spec):
    """Cost of copying one byte (a move, an in-place op's copy of an old value), in the cost
    model's ns: the model's device's; measured costs: the device's own by name (the "cpu" entry
    on the host)."""
    if spec is None:
        spec = DEVICES["cpu"] if backend.xp is numpy else _default_cost(backend)
    return spec.copy_ns_per_byte


def _host_link(backend, spec):
    """(d2h, h2d): the host tier's cost per byte each way, in the cost model's ns: the model's
    device's link; measured costs: the device's own by name (the "cpu" entry on the host, where
    a copy to the host tier is a memcpy)."""
    if spec is None:
        spec = DEVICES["cpu"] if backend.xp is numpy else _default_cost(backend)
    if spec.h2d_bytes_per_s is None or spec.d2h_bytes_per_s is None:
        return None       # the engine's default link
    return spec.host_link


def _allocs(log):
    """A host kernel's allocation log ([offset, nbytes or -1, ...]) as docs/trace-format.md's
    `allocs` (bytes, or ~index for a free) and {offset: index} of those left at its end; frees
    of memory allocated before (evicted storages) and moves of coop's window are not the
    kernel's."""
    events, live, count = [], {}, 0
    for offset, nbytes, *move in log_records(log):
        if nbytes == LOG_MOVE:       # (old, LOG_MOVE, new, size, sid): the piece is elsewhere
            if offset in live:
                live[move[0]] = live.pop(offset)
        elif nbytes >= 0:
            events.append(nbytes)
            live[offset] = count
            count += 1
        elif offset in live:
            events.append(~live.pop(offset))
    return events, live


def _cls_name(placement):
    return "expensive" if placement == EXPENSIVE else "cheap"
