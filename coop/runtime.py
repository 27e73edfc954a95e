"""The rematerialization runtime: runs kernels on coop Tensors, records the tape, evicts and
recomputes.

One Runtime drives one backend (host, device or simulation; see docs/backends.md). The arena
core decides *what* to evict; this module decides what evicting and recomputing *mean*:
dropping a storage's array, and running its producer Op again (iteratively, pinning what it
needs, evicting temporaries right after their one use).
"""
import contextvars
import math
import time
import weakref

import numpy

from coop._core import CHEAP, EXPENSIVE, LOWEST
from coop.arrays import build_view, flat_bytes, host_copy, view_of
from coop.kernel import DEVICES, DeviceSpec, as_kernel
from coop.residency import Residency, _unique
from coop.tensor import Op, Storage, Tensor, View

#: runtime policy name -> (core policy, partition cheap/expensive, recomputable in-place)
POLICY_TABLE = {
    "coop": ("coop", True, True),
    "dtr": ("dtr", False, True),
    "dte": ("dte", False, True),
    "lru": ("lru", False, True),
    "size": ("size", False, True),
    "none": ("none", False, True),
    "coop-no-partition": ("coop", False, True),
    "coop-no-inplace": ("coop", True, False),
    "coop-loop": ("dtr", True, True),
    # DTR with memory as a plain sum of sizes: needs an ideal arena (SimBackend(ideal=True))
    "dtr-ideal": ("dtr", False, True),
}

_current = []


def get_runtime():
    """The innermost runtime entered with ``with runtime:``."""
    if not _current:
        raise RuntimeError("no coop runtime is active: create one, e.g. "
                           "`with coop.Runtime(coop.numpy_allocator('1GiB')):`")
    return _current[-1]


def apply(kernel, *inputs, **attrs):
    """Run kernel on coop Tensors (see Runtime.apply); the runtime is the inputs' own."""
    for t in inputs:
        if isinstance(t, Tensor):
            return t.runtime.apply(kernel, *inputs, **attrs)
    return get_runtime().apply(kernel, *inputs, **attrs)


class Runtime(Residency):
    """The tape and its execution under one backend's budget.

    cost: None times host kernels (ns); a DeviceSpec or a name in coop.kernel.DEVICES models
    every op by its FLOPs and bytes (the simulation and device backends default to a model).
    classifier: "type" (the kernel's class, from the table of expensive ops) or "density"
    (EXPENSIVE when cost per output byte >= density_threshold ns/B).
    """

    def __init__(self, backend, policy=None, cost=None, classifier="type",
                 density_threshold=1.0, seed=0):
        policy = policy or backend.policy
        if policy not in POLICY_TABLE:
            raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICY_TABLE)}")
        if classifier not in ("type", "density"):
            raise ValueError(f"classifier must be 'type' or 'density', got {classifier!r}")
        if (policy == "dtr-ideal") != backend.arena.ideal:
            raise ValueError("policy 'dtr-ideal' needs, and only it takes, an ideal arena: "
                             "use coop.SimBackend(budget, ideal=True) with policy='dtr-ideal'")
        previous = getattr(backend.evict, "__self__", None)
        if isinstance(previous, Runtime) and len(previous._storages):
            # its storage ids would collide with ours, and its evictions would reach us
            raise ValueError("this backend already serves another coop.Runtime that still has "
                             "tensors; make one backend per runtime")
        self.backend = backend
        self.arena = backend.arena
        self.xp = backend.xp
        self.policy = policy
        core_policy, self.partition, self.inplace = POLICY_TABLE[policy]
        backend.policy = core_policy
        backend.evict = self._evict
        if cost is None and backend.xp is not numpy:
            cost = "a100-80gb"
        if isinstance(cost, str):
            if cost not in DEVICES:
                raise ValueError(f"unknown device {cost!r} for the cost model; known: {', '.join(DEVICES)}")
            cost = DEVICES[cost]
        if cost is not None and not isinstance(cost, DeviceSpec):
            raise TypeError(f"cost must be None, a device name or a DeviceSpec, got {cost!r}")
        self.cost_model = cost
        self.classifier = classifier
        self.density_threshold = density_threshold
        self.seed = seed
        self.clock = 0.0
        self.trace = None
        self._next_sid = 0
        self._random_ops = 0
        self._storages = weakref.WeakValueDictionary()   # sid -> Storage
        self._pins = {}                                    # sid -> pins held by the runtime
        self.shared = {}     # constants modules share (coop.nn's causal masks), by key
        self.counters = dict(ops=0, recomputes=0, cost_first=0.0, cost_total=0.0,
                             eager_evictions=0, demotions=0, releases=0, held=0)

    # ---- entering ---------------------------------------------------------------------------

    def __enter__(self):
        _current.append(self)
        return self

    def __exit__(self, *exc):
        _current.remove(self)

    def record(self, path):
        """Record the program from now on into a trace file (a context manager)."""
        return _Recording(self, path)

    def mark_start(self):
        """Mark where the measured region of a recorded trace starts."""
        if self.trace is not None:
            self.trace.start()

    # ---- creating tensors -------------------------------------------------------------------

    def tensor(self, data, dtype=None, requires_grad=False):
        """A constant (never evicted) holding a copy of data, in the arena; with
        requires_grad, a leaf of the autograd graph (backward fills its ``.grad``)."""
        if self.xp is None:
            shape, dtype = data if _is_spec(data) else (numpy.shape(data), dtype or numpy.float32)
            storage = self._new_storage(None, 0)
            storage.nbytes = _nbytes((shape, dtype))
            view = View(storage, shape, dtype, None, 0)
            self.arena.add_storage(storage.sid, 0.0, (), evictable=False)
            self._sim_place(storage, LOWEST)
        else:
            with self.backend:
                self.backend.cls = LOWEST     # constants go first fit from the low end
                array = self.xp.array(data, dtype=dtype, copy=True)
                self.backend.cls = EXPENSIVE
            storage = self._new_storage(None, 0)
            view = self._adopt_new(storage, array, self._root(array))
            self.arena.add_storage(storage.sid, 0.0, (), evictable=False)
            self.arena.bind(self.backend.offset_of(storage.array), storage.sid)
        self.arena.set_evictable(storage.sid, False)
        if self.trace is not None:
            self.trace.constant(storage)
        tensor = Tensor(view)
        tensor.requires_grad = bool(requires_grad)
        return tensor

    def materialize(self, *tensors):
        """Keep the tensors' values as constants: rematerialize them if evicted, then forget
        how they were computed. Their producers' records (and the graph behind them, the old
        values of parameters updated in place since) can then die. Autograd does this to the
        gradients a backward pass leaves in ``.grad``, as PyTorch's are plain leaves."""
        storages = [s for s in _unique(t._view.storage for t in tensors) if s.op is not None]
        self._pin(storages)
        try:
            self._make_resident(storages)
        finally:
            self._unpin(storages)
        for s in storages:
            # the producer's record goes first (what it alone kept alive is freed), then s
            # settles among the constants
            s.op.outputs[s.index] = None
            s.op, s.index = None, 0
            self._reregister(s, 0.0, (), False, settle=True)
            if self.trace is not None:
                self.trace.materialize(s)

    def _reregister(self, storage, cost, neighbours, evictable, settle=False):
        """Register a resident storage anew (a new producer, or none: a constant), keeping its
        memory (or, settling a new constant, moving it lower) and its pins."""
        info = self.arena.storage_info(storage.sid)
        self.arena.remove_storage(storage.sid)
        self.arena.add_storage(storage.sid, cost, neighbours, evictable=evictable)
        if settle:
            self._settle(storage, info["offset"])
        else:
            self.arena.bind(info["offset"], storage.sid)
        for _ in range(info["pins"]):
            self.arena.pin(storage.sid)

    def _settle(self, storage, offset):
        """Bind a new constant at offset, or move it (a copy) to the lowest free range that
        holds it when that lies below offset: constants belong together at the low end. Never
        evicts to make room."""
        target = self.arena.lowest_fit(storage.nbytes)
        if not 0 <= target < offset:
            self.arena.bind(offset, storage.sid)
            return
        if self.xp is None:
            storage.array = self.arena.allocate(storage.nbytes, LOWEST)
            self.arena.bind(storage.array, storage.sid)
            self.arena.free(offset)
            return
        with self.backend:
            self.backend.cls = LOWEST
            moved = flat_bytes(self.xp.array(storage.array, copy=True))
            self.backend.cls = EXPENSIVE
        self.arena.bind(self.backend.offset_of(moved), storage.sid)
        storage.array = moved      # the old memory, anonymous now, is freed with its array

    # ---- apply --------------------------------------------------------------------------------

    def apply(self, kernel, *inputs, **attrs):
        """Run kernel on Tensors: pin and rematerialize the inputs, run, record the Op.

        Returns a Tensor, or a tuple of Tensors when the kernel returns a tuple.
        """
        kernel = as_kernel(kernel)
        views = []
        for i, t in enumerate(inputs):
            if not isinstance(t, Tensor):
                raise TypeError(f"input {i} of kernel {kernel.name!r} is a {type(t).__name__}, "
                                "not a coop.Tensor; wrap constants with runtime.tensor(...)")
            if t.runtime is not self:
                raise ValueError(f"input {i} of kernel {kernel.name!r} belongs to another runtime")
            views.append(t._view)
        seed = None
        if kernel.random:
            seed = int(numpy.random.SeedSequence([self.seed, self._random_ops]).generate_state(1)[0])
            self._random_ops += 1
        op = Op(kernel, views, attrs, kernel.cls, seed)
        storages = _unique(v.storage for v in views)
        self._pin(storages)
        try:
            self._make_resident(storages)
            if kernel.inplace is not None:
                return self._apply_inplace(op, storages)
            if self.xp is None:
                return self._sim_first(op)
            outs, elapsed = self._execute(op, recompute=False)
            result = self._adopt_first(op, outs, elapsed)
        finally:
            if getattr(self.backend, "log", None) is not None:
                self.backend.log = None
            self._unpin(storages)
        return result

    def _execute(self, op, recompute):
        """Run op's kernel on its (resident, pinned) inputs; return (outputs, elapsed ns)."""
        kernel = op.kernel
        backend = self.backend
        arrays = [self._array(v) for v in op.inputs]
        attrs = op.attrs
        if kernel.wants_xp:
            attrs = dict(attrs, xp=self.xp)
        if op.seed is not None:
            attrs = dict(attrs, rng=self.xp.random.default_rng(op.seed))
        backend.cls = op.cls if self.partition else EXPENSIVE
        if not recompute and self.trace is not None and getattr(backend, "log", False) is None:
            backend.log = []   # a host trace records the kernel's allocations and frees
        try:
            with backend:
                fresh = None
                if recompute and kernel.inplace is not None:
                    # recompute of an in-place op: copy the old value (its input), mutate the copy
                    i = kernel.inplace
                    fresh = self.xp.array(op.inputs[i].storage.array, copy=True)
                    arrays[i] = build_view(self.xp, fresh, op.inputs[i])
                start = time.perf_counter_ns()
                out = kernel.fn(*arrays, **attrs)
                elapsed = time.perf_counter_ns() - start
                if kernel.inplace is not None:
                    out = fresh if fresh is not None else arrays[kernel.inplace]
                elif isinstance(out, numpy.generic) or (
                        isinstance(out, tuple) and any(isinstance(o, numpy.generic) for o in out)):
                    # NumPy returns scalars from full reductions: make them 0-d arrays, here
                    # inside the arena
                    out = tuple(_as_array(self.xp, o) for o in out) if isinstance(out, tuple) \
                        else _as_array(self.xp, out)
        finally:
            backend.cls = EXPENSIVE
        del arrays, fresh
        outs = out if isinstance(out, tuple) else (out,)
        if not outs:
            raise TypeError(f"kernel {kernel.name!r} returned no output (an empty tuple); kernels "
                            f"must return {self.xp.__name__} arrays (or a tuple of them)")
        for k, o in enumerate(outs):
            if not isinstance(o, self.xp.ndarray):
                raise TypeError(f"kernel {kernel.name!r} returned {type(o).__name__} as output {k}; "
                                f"kernels must return {self.xp.__name__} arrays (or a tuple of them)")
        return outs, elapsed

    def _cost(self, op, elapsed, out_views):
        if self.cost_model is None:
            return float(elapsed)
        specs = [v.spec for v in op.inputs]
        flops = op.kernel.flops(*specs, **op.attrs) if op.kernel.flops else 0.0
        nbytes = sum(_nbytes(v.spec) for v in op.inputs) + sum(_nbytes(v.spec) for v in out_views)
        return self.cost_model.cost_ns(flops, nbytes)

    def _adopt_first(self, op, outs, elapsed):
        """Map a first run's outputs to views: aliases of inputs, or new storages."""
        by_offset = {self.backend.offset_of(v.storage.array): v.storage for v in op.inputs}
        new = {}
        views = []
        for o in outs:
            root = self._root(o)
            offset = self.backend.offset_of(root)
            if offset is None:   # memory from outside the arena: copy it in
                with self.backend:
                    o = self.xp.array(o, copy=True)
                root = self._root(o)
                offset = self.backend.offset_of(root)
            if offset in by_offset:
                storage = by_offset[offset]
                views.append(view_of(storage, o, storage.array))
                op.outputs.append(None)
                continue
            if offset not in new:
                storage = self._new_storage(op, len(op.outputs))
                new[offset] = storage
                views.append(self._adopt_new(storage, o, root))
            else:
                storage = new[offset]
                views.append(view_of(storage, o, storage.array))
            # the record keeps the view's parameters, not its storage (that would be a cycle)
            op.outputs.append((weakref.ref(storage), views[-1].on(None)))
        del outs, o, root
        op.cost = self._cost(op, elapsed, views)
        if self.classifier == "density":
            out_bytes = sum(s.nbytes for s in new.values()) or 1
            op.cls = EXPENSIVE if op.cost / out_bytes >= self.density_threshold else CHEAP
        neighbours = _neighbours(op.inputs)
        for offset, storage in new.items():
            self.arena.add_storage(storage.sid, op.cost, neighbours)
            self.arena.bind(offset, storage.sid)
        return self._record(op, views)

    def _record(self, op, views):
        """A first run is done: link the op to its inputs, account it, hand out Tensors."""
        for v in op.inputs:
            v.storage.consumers.add(op)
        self._account(op, recompute=False)
        if self.trace is not None:
            self.trace.call(op, views, *self._take_log())
        tensors = tuple(Tensor(v) for v in views)
        return tensors if len(tensors) > 1 else tensors[0]

    def _recompute(self, op):
        """Run op again and give its recomputed outputs back to their (evicted) storages."""
        if self.xp is None:
            placed = []
            try:
                for entry in op.outputs:
                    storage = entry[0]() if entry is not None else None
                    if storage is not None and storage.array is None:
                        # pinned until all are placed, as a kernel's outputs are while it runs
                        self._sim_place(storage, op.cls)
                        self._pin([storage])
                        placed.append(storage)
            finally:
                self._unpin_quietly(placed)
            self.counters["recomputes"] += 1
            self._account(op, recompute=True)
            return
        outs, elapsed = self._execute(op, recompute=True)
        for o, entry in zip(outs, op.outputs):
            if entry is None:
                continue
            storage = entry[0]()
            if storage is None or storage.array is not None:
                continue
            root = self._root(o)
            view = view_of(storage, o, flat_bytes(root))
            if view.shape != entry[1].shape or view.dtype != entry[1].dtype:
                raise RuntimeError(f"kernel {op.kernel.name!r} returned {view.shape} {view.dtype} on "
                                   f"recompute, {entry[1].shape} {entry[1].dtype} the first time")
            storage.array = flat_bytes(root)
            self.arena.bind(self.backend.offset_of(root), storage.sid)
        del outs
        self.counters["recomputes"] += 1
        self._account(op, recompute=True)

    def _account(self, op, recompute):
        self.counters["cost_total"] += op.cost
        if not recompute:
            self.counters["ops"] += 1
            self.counters["cost_first"] += op.cost
        self.clock += op.cost
        self.backend.now = self.clock
        for v in op.inputs:
            if v.storage.array is not None:
                self.arena.touch(v.storage.sid, self.clock)
        for entry in op.outputs:
            storage = entry[0]() if entry is not None else None
            if storage is not None and storage.array is not None:
                self.arena.touch(storage.sid, self.clock)

    # ---- in-place ---------------------------------------------------------------------------

    def _apply_inplace(self, op, storages):
        """Recomputable in-place: the old value becomes a new storage V with the old producer;
        recorded readers of the mutated storage S are redirected to V; op becomes S's producer."""
        i = op.kernel.inplace
        target = op.inputs[i]
        s = target.storage
        readers = [c for c in s.consumers if any(e is not None and e[0]() is not None for e in c.outputs)]
        v = None
        if s.op is not None or readers:
            v = self._new_storage(s.op, s.index)
            v.nbytes = s.nbytes
            old_inputs = _neighbours(s.op.inputs) if s.op is not None else []
            self.arena.add_storage(v.sid, self.arena.storage_info(s.sid)["cost"], old_inputs,
                                   evictable=s.op is not None)
            if s.op is None or not self.inplace:
                # nothing can recompute the old value (or the ablation copies): keep a copy,
                # taken before the kernel overwrites S. A constant's copy is unevictable: it
                # goes with the constants (LOWEST: first fit from the low end), not among the
                # tensors whose windows it would split.
                self._copy_into(v, s, LOWEST if s.op is None else op.cls)
        elapsed = 0
        if self.xp is not None:
            # the first run mutates S itself; only a recompute reads V (into a fresh copy).
            # Nothing is redirected yet, so a kernel that raises leaves the records as they were.
            outs, elapsed = self._execute(op, recompute=False)
            del outs
        op.cost = self._cost(op, elapsed, [target])
        if self.trace is not None:
            # the program's storages, before V replaces S in the record
            self.trace.mutate(op, i, self._take_log()[0])
        if v is not None:
            if s.op is not None:
                s.op.outputs[s.index] = (weakref.ref(v), s.op.outputs[s.index][1])
            for c in list(s.consumers):
                c.inputs = [u.on(v) if u.storage is s else u for u in c.inputs]
                v.consumers.add(c)
            s.consumers = weakref.WeakSet()
            op.inputs = [u.on(v) if u.storage is s else u for u in op.inputs]
        op.outputs.append((weakref.ref(s), View(None, (s.nbytes,), numpy.uint8, (1,), 0)))
        if s.op is not None:
            # S's producer is now op: its neighbours are op's inputs (V among them)
            self._reregister(s, op.cost, _neighbours(u for u in op.inputs if u.storage is not s),
                             self.arena.storage_info(s.sid)["evictable"])
            s.op, s.index = op, 0
        for u in op.inputs:
            u.storage.consumers.add(op)
        self._account(op, recompute=False)
        return Tensor(target)

    def _take_log(self):
        """A host kernel's allocations since _execute began logging: (events, {offset: index}),
        events as docs/trace-format.md's `allocs` (bytes, or ~index for a free); frees of
        memory allocated before (evicted storages) are not the kernel's. (None, {}) if not
        logging."""
        log = getattr(self.backend, "log", None)
        if log is None:
            return None, {}
        self.backend.log = None
        events, live, count = [], {}, 0
        for k in range(0, len(log), 2):
            offset, nbytes = log[k], log[k + 1]
            if nbytes >= 0:
                events.append(nbytes)
                live[offset] = count
                count += 1
            elif offset in live:
                events.append(~live.pop(offset))
        return events, live

    def _copy_into(self, dst, src, cls):
        """Give dst a resident copy of src's bytes (an arena allocation of class cls)."""
        if self.xp is None:
            dst.nbytes = src.nbytes
            self._sim_place(dst, cls)
        else:
            with self.backend:
                self.backend.cls = self._placement(cls)
                dst.array = flat_bytes(self.xp.array(src.array, copy=True))
                self.backend.cls = EXPENSIVE
            self.arena.bind(self.backend.offset_of(dst.array), dst.sid)
        self.arena.touch(dst.sid, self.clock)

    # ---- simulation (sizes and costs only) ----------------------------------------------------

    def _sim_first(self, op):
        kernel = op.kernel
        if kernel.shape is None:
            raise TypeError(f"kernel {kernel.name!r} has no shape rule; the simulation backend "
                            "needs Kernel(shape=...) to size its outputs")
        specs = kernel.shape(*[v.spec for v in op.inputs], **op.attrs)
        specs = [specs] if _is_spec(specs) else list(specs)
        op.cost = self._cost(op, 0, [View(None, shape, dtype, None, 0) for shape, dtype in specs])
        neighbours = _neighbours(op.inputs)
        views, placed = [], []
        try:
            for k, (shape, dtype) in enumerate(specs):
                if kernel.views is not None and k == 0:
                    views.append(View(op.inputs[kernel.views].storage, shape, dtype, None, 0))
                    op.outputs.append(None)
                    continue
                storage = self._new_storage(op, k)
                storage.nbytes = _nbytes((shape, dtype))
                self.arena.add_storage(storage.sid, op.cost, neighbours)
                views.append(View(storage, shape, dtype, None, 0))
                op.outputs.append((weakref.ref(storage), views[-1].on(None)))
                self._sim_place(storage, op.cls)
                self._pin([storage])
                placed.append(storage)
        finally:
            self._unpin_quietly(placed)
        return self._record(op, views)

    def _placement(self, cls):
        """The arena class of an allocation of class cls: LOWEST (constants) as it is; CHEAP
        and EXPENSIVE when the policy partitions, else all EXPENSIVE."""
        return cls if cls == LOWEST or self.partition else EXPENSIVE

    def _sim_place(self, storage, cls):
        storage.array = self.arena.allocate_or_evict(
            storage.nbytes, self._placement(cls), self.backend.policy,
            self.clock, self._evict, storage=storage.sid)

    # ---- arrays -----------------------------------------------------------------------------

    def _new_storage(self, op, index):
        sid = self._next_sid
        self._next_sid += 1
        storage = Storage(self, sid, 0, op, index)
        self._storages[sid] = storage
        return storage

    def _adopt_new(self, storage, array, root):
        storage.array = flat_bytes(root)
        storage.nbytes = storage.array.nbytes
        return view_of(storage, array, storage.array)

    def _root(self, array):
        while isinstance(array.base, self.xp.ndarray):
            array = array.base
        return array

    def _array(self, view):
        if view.storage.array is None:
            raise RuntimeError(f"storage {view.storage.sid} is not resident")
        return build_view(self.xp, view.storage.array, view)

    def _to_host(self, array):
        # a fresh context has NumPy's default handler: the copy is made outside the arena even
        # inside `with backend:`
        return contextvars.Context().run(host_copy, self.xp, array)

    def stats(self):
        """Runtime counters with the arena's; compute_overhead as DESIGN.md defines it."""
        out = dict(self.counters)
        out["compute_overhead"] = out["cost_total"] / out["cost_first"] if out["cost_first"] else 1.0
        out.update({f"arena_{k}": v for k, v in self.arena.stats().items()})
        return out


class _Recording:
    def __init__(self, runtime, path):
        from coop.trace import TraceWriter
        self.runtime = runtime
        meta = {"alignment": runtime.arena.alignment, "policy": runtime.policy,
                "budget": runtime.arena.capacity}
        if runtime.cost_model is not None:
            meta["cost_model"] = runtime.cost_model.name
        self.writer = TraceWriter(path, **meta)
        runtime.trace = self.writer

    def __enter__(self):
        return self.writer

    def __exit__(self, *exc):
        self.runtime.trace = None
        self.writer.close()


def _neighbours(views):
    """The core's neighbours of an op's outputs: its inputs that can be recomputed. A constant
    is never evicted, so it never counts in c' or joins an evicted class: leaving it out
    changes no decision and keeps a weight read by thousands of ops off their lists."""
    return [v.storage.sid for v in views if v.storage.op is not None]


def _is_spec(value):
    """(shape, dtype): a shape tuple and anything numpy.dtype accepts."""
    return (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], tuple)
            and not isinstance(value[1], tuple))


def _nbytes(spec):
    shape, dtype = spec
    return math.prod(shape) * numpy.dtype(dtype).itemsize


def _as_array(xp, value):
    return xp.asarray(value) if isinstance(value, numpy.generic) else value
