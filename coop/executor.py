"""Executors of the residency engine for live runs: arrays (NumPy, CuPy) and sizes only.

The engine (coop._engine) decides what is resident; an executor says what running an op,
dropping a storage's memory and copying one mean. ``ArrayExecutor`` runs kernels on the
backend's arrays and adopts their outputs; ``SimExecutor`` sizes outputs with the kernels'
shape rules (the simulation backend), and recomputes at C speed (coop._replay.SizeExecutor).
"""
import time

import numpy

from coop._engine import Executor
from coop._replay import SizeExecutor
from coop.arrays import build_view, data_ptr, held_elsewhere, memory_of

_ns = time.perf_counter_ns


class OpRecord:
    """What running an op again needs: the kernel, its inputs' layouts, attributes, the seed
    of a random kernel, and its outputs' (shape, dtype) for checking a recompute."""

    __slots__ = ("kernel", "inputs", "attrs", "seed", "outputs")

    def __init__(self, kernel, inputs, attrs, seed):
        self.kernel = kernel
        self.inputs = inputs      # Views (their storages may be redirected: ask the engine)
        self.attrs = attrs
        self.seed = seed
        self.outputs = None


class ArrayExecutor(Executor):
    """Kernels on the backend's arrays; a storage's memory is one array (``arrays``: the
    kernel's C-contiguous output itself, or its bytes as a flat array; coop.arrays)."""

    def __init__(self, backend):
        self.backend = backend
        self.xp = backend.xp
        self.ndarray = backend.xp.ndarray
        self._placing = backend.placing
        self.arrays = []      # storage id -> its memory array while resident, else None
        self.records = []     # op id -> OpRecord (a dead op's entry waits to be reused)

    # ---- the runtime's side -------------------------------------------------------------------

    def record(self, o, rec):
        records = self.records
        if o < len(records):
            records[o] = rec
        else:
            records.extend([None] * (o - len(records)))
            records.append(rec)

    def array(self, view):
        """An array for view (its storage must be resident)."""
        memory = self.arrays[view.sid]
        if memory is None:
            raise RuntimeError(f"storage {view.sid} is not resident")
        if view.natural:
            return memory
        return build_view(self.xp, memory, view)

    def array_of(self, sid):
        return self.arrays[sid] if sid < len(self.arrays) else None

    def call(self, rec, arrays, placement, old=None):
        """Run rec's kernel on arrays, its allocations placed as placement says; returns
        (outputs, elapsed ns). old: an in-place kernel's recompute mutates a copy of its input
        storage's bytes (old, the old value others may still need) and returns that copy."""
        kernel = rec.kernel
        attrs = rec.attrs
        xp = self.xp
        if kernel.wants_xp:
            attrs = dict(attrs, xp=xp)
        if rec.seed is not None:
            attrs = dict(attrs, rng=xp.random.default_rng(rec.seed))
        i = kernel.inplace
        with self._placing(placement):
            if old is not None:
                out = xp.array(old, copy=True)
                arrays[i] = out if rec.inputs[i].natural else build_view(xp, out, rec.inputs[i])
            start = _ns()
            result = kernel.fn(*arrays, **attrs) if attrs else kernel.fn(*arrays)
            elapsed = _ns() - start
            if i is not None:
                if old is None:
                    out = arrays[i]
            elif type(result) is self.ndarray:
                return (result,), elapsed          # the common case: one array
            elif isinstance(result, numpy.generic) or (
                    isinstance(result, tuple) and any(isinstance(o, numpy.generic) for o in result)):
                # NumPy returns scalars from full reductions: 0-d arrays, inside the arena
                out = tuple(_as_array(xp, o) for o in result) if isinstance(result, tuple) \
                    else _as_array(xp, result)
            else:
                out = result
        outs = out if isinstance(out, tuple) else (out,)
        if not outs:
            raise TypeError(f"kernel {kernel.name!r} returned no output (an empty tuple); kernels "
                            f"must return {xp.__name__} arrays (or a tuple of them)")
        ndarray = xp.ndarray
        for k, o in enumerate(outs):
            if not isinstance(o, ndarray):
                raise TypeError(f"kernel {kernel.name!r} returned {type(o).__name__} as output {k}; "
                                f"kernels must return {xp.__name__} arrays (or a tuple of them)")
        return outs, elapsed

    def adopt(self, outs, placement):
        """(output, root, offset) of each output; memory from outside the arena (a worker
        thread's, a cached array) is copied in, and the copy is the output."""
        backend = self.backend
        ndarray = self.ndarray
        placed = []
        for o in outs:
            root = o
            while isinstance(root.base, ndarray):
                root = root.base
            offset = backend.offset_of(root)
            if offset is None:
                with backend.placing(placement):
                    o = root = self.xp.array(o, copy=True)
                offset = backend.offset_of(root)
            placed.append((o, root, offset))
        return placed

    def views(self, runtime, placed, sids):
        """Views of a first run's outputs on their storages (new ones keep the root's memory)."""
        arrays = self.arrays
        n = len(arrays)
        views = []
        for (o, root, _), sid in zip(placed, sids):
            if sid >= n:
                arrays.extend([None] * (sid + 1 - n))
                n = sid + 1
            memory = arrays[sid]
            if memory is None:
                memory = arrays[sid] = memory_of(root)
            if o is memory:
                views.append(View(runtime, sid, o.shape, o.dtype, o.strides, 0, True))
            else:
                views.append(View(runtime, sid, o.shape, o.dtype, o.strides,
                                  data_ptr(o) - data_ptr(memory)))
        return views

    # ---- the engine's side --------------------------------------------------------------------

    def run(self, o):
        """Recompute op o: run its kernel again; its live evicted outputs take the results."""
        engine = self.engine
        rec = self.records[o]
        arrays = self.arrays
        ins = []
        for sid, view in zip(engine.inputs(o), rec.inputs):
            # an old value made by an in-place op has its storage's layout: natural stays true
            ins.append(arrays[sid] if view.natural else build_view(self.xp, arrays[sid], view))
        placement = engine.placement(o)
        i = rec.kernel.inplace
        outs, _ = self.call(rec, ins, placement, None if i is None else arrays[engine.inputs(o)[i]])
        del ins
        missing = engine.evicted_outputs(o)
        if not missing:
            return 0
        for (k, sid), (_, root, offset) in zip(missing, self.adopt([outs[k] for k, _ in missing],
                                                                   placement)):
            shape, dtype = rec.outputs[k]
            if outs[k].shape != shape or outs[k].dtype != dtype:
                raise RuntimeError(f"kernel {rec.kernel.name!r} returned {outs[k].shape} "
                                   f"{outs[k].dtype} on recompute, {shape} {dtype} the first time")
            memory = memory_of(root)
            engine.bind(sid, offset)
            if sid >= len(arrays):      # an old value made by an in-place op, resident at last
                arrays.extend([None] * (sid + 1 - len(arrays)))
            arrays[sid] = memory
        return 0

    def drop(self, sid):
        """Free an evicted storage's memory, unless something else holds its array."""
        arrays = self.arrays
        if held_elsewhere(arrays[sid]):
            return False
        arrays[sid] = None
        return True

    def forget(self, sid):
        if sid < len(self.arrays):
            self.arrays[sid] = None
        return 0

    def copy(self, dst, src, placement, release):
        """dst takes a copy of src's bytes (new memory, placed as placement says); the old
        memory of dst, if dst is src, is freed with its array."""
        arrays = self.arrays
        with self.backend.placing(placement):
            moved = self.xp.array(arrays[src], copy=True)    # C-contiguous, as the source
        self.engine.bind(dst, self.backend.offset_of(moved))
        if dst >= len(arrays):
            arrays.extend([None] * (dst + 1 - len(arrays)))
        arrays[dst] = moved
        return 0


class SimExecutor(SizeExecutor):
    """The simulation backend: outputs sized by the kernels' shape rules, costs modelled."""

    def __init__(self, backend):
        self.backend = backend

    def record(self, o, rec):
        pass      # a recompute needs no record: sizes are the engine's

    def array(self, view):
        raise RuntimeError("the simulation backend has no arrays: it sizes and costs ops only")

    def array_of(self, sid):
        return None


def _as_array(xp, value):
    return xp.asarray(value) if isinstance(value, numpy.generic) else value


from coop.tensor import View  # noqa: E402  (coop.tensor imports nothing of this module)
