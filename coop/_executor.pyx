# distutils: language = c++
"""Executors of the residency engine for live runs: arrays (NumPy, CuPy) and sizes only.

The engine (coop.engine) decides what is resident; an executor says what running an op,
dropping a storage's memory and copying one mean. ``ArrayExecutor`` runs kernels on the
backend's arrays and adopts their outputs (compiled: it runs around every kernel); what differs
between the host and a device is the backend's (coop.backends.base.Backend). ``SimExecutor``
sizes outputs with the kernels' shape rules (the simulation backend), and recomputes at C speed
(coop.engine.SizeExecutor).

Layers: this module is the runtime's face, beside coop.runtime (its one user): it runs kernels
(coop.kernel's specs, coop.random's streams on the first random kernel), which the engine below
must not know. It cimports coop._core and coop.engine._engine and imports coop.engine,
coop.arrays and coop.errors; it reaches a backend only through the methods coop.backends.base
declares. Nothing below imports it.
"""
from cpython.ref cimport Py_REFCNT
from libc.stdint cimport int64_t
from libcpp.vector cimport vector
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from coop._core cimport Arena
from coop.engine._engine cimport Engine, Executor

cimport numpy as cnp

import numpy

from coop._core import LOWEST
from coop.arrays import build_view, memory_of
from coop.engine import SizeExecutor
from coop.errors import OutOfMemoryError
from coop.kernel import is_spec, spec_nbytes, specs_of

cnp.import_array()


cdef enum:
    _ITEM_REFCOUNT = 0x01     # NumPy's NPY_ITEM_REFCOUNT: the dtype's items hold references


cdef inline int _refuse_references(kernel, o, Py_ssize_t k) except -1:
    """TypeError for a host array whose elements hold references (object dtype, or a structured
    one with an object field). The arena's storages are plain bytes: coop slides them with
    memmove, copies them to new pieces and drops evicted ones; the references in an object
    array belong to the array object, so a byte move leaves them counted by an array that
    dies (a use after free), and the objects they point at lie outside the budget anyway.
    Refusing is the one rule every storage path can keep (a copy that increments references
    would have to replace memmove in the slide, and still leave the objects unbudgeted)."""
    if not (cnp.PyDataType_FLAGS(<cnp.dtype>cnp.PyArray_DESCR(<cnp.ndarray>o)) & _ITEM_REFCOUNT):
        return 0
    what = "a constant" if kernel is None else f"output {k} of kernel {kernel.name!r}"
    raise TypeError(f"coop: {what} has dtype {o.dtype}, whose elements are references to Python "
                    f"objects; coop's arena holds plain bytes (it moves, copies and drops them "
                    f"byte for byte): use a numeric dtype, or keep Python objects outside coop")


def gather(runtime, kernel, tuple inputs):
    """The inputs' views and storage ids; a clear error for anything but a Tensor of
    runtime."""
    cdef list views = []
    cdef list sids = []
    cdef View view
    cdef Py_ssize_t i
    for i in range(len(inputs)):
        try:
            view = inputs[i]._view
        except AttributeError:
            raise TypeError(f"input {i} of kernel {kernel.name!r} is a "
                            f"{type(inputs[i]).__name__}, not a coop.Tensor; wrap constants "
                            "with runtime.tensor(...)") from None
        if view.runtime is not runtime:
            raise ValueError(f"input {i} of kernel {kernel.name!r} belongs to another runtime")
        views.append(view)
        sids.append(view.sid)
    return views, sids


cdef inline int64_t _ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec * 1000000000 + ts.tv_nsec


cdef class View:
    """Where a tensor's elements sit in its storage: shape, dtype, strides, byte offset.
    ``natural``: the view is the storage's memory array itself (no view to build)."""
    cdef public object runtime
    cdef public int sid
    cdef public tuple shape
    cdef public object dtype
    cdef public object strides      # None: C-contiguous (simulation, natural views)
    cdef public Py_ssize_t offset
    cdef public bint natural

    def __init__(self, runtime, int sid, tuple shape, dtype, strides, Py_ssize_t offset,
                 bint natural=False):
        _fill(self, runtime, sid, shape, dtype, strides, offset, natural)

    @property
    def spec(self):
        return (self.shape, self.dtype)


cdef inline void _fill(View v, runtime, int sid, tuple shape, dtype, strides, Py_ssize_t offset,
                       bint natural) noexcept:
    v.runtime = runtime
    v.sid = sid
    v.shape = shape
    v.dtype = dtype
    v.strides = strides
    v.offset = offset
    v.natural = natural


cdef View _view(runtime, int sid, tuple shape, dtype, strides, Py_ssize_t offset, bint natural):
    """A View made without a Python call (a first run makes one per output)."""
    cdef View v = View.__new__(View)
    _fill(v, runtime, sid, shape, dtype, strides, offset, natural)
    return v


def _stream(seed, xp):
    """A random kernel's rng: the op's counter-based Philox stream (no generator state)."""
    from coop.random import Stream    # on the first random kernel: `import coop` stays small
    return Stream(seed, xp)


cdef class OpRecord:
    """What running an op again needs: the kernel, its inputs' layouts, attributes, the seed
    of a random kernel, and its outputs' (shape, dtype) for checking a recompute."""
    cdef public object kernel
    cdef public list inputs       # Views (their storages may be redirected: ask the engine)
    cdef public dict attrs
    cdef public object seed
    cdef public list outputs

    def __init__(self, kernel, list inputs, dict attrs, seed):
        self.kernel = kernel
        self.inputs = inputs
        self.attrs = attrs
        self.seed = seed


cdef class ArrayExecutor(Executor):
    """Kernels on the backend's arrays; a storage's memory is one array (``arrays``: the
    kernel's C-contiguous output itself, or its bytes as a flat array; coop.arrays)."""
    cdef public object backend
    cdef public object xp
    cdef object ndarray
    cdef object _placing
    cdef public list arrays       # storage id -> its memory array while resident, else None
    cdef public list records      # op id -> OpRecord while the op's record lives, else None
    cdef public list dying        # records of ops that just died: dropped outside the engine
    cdef list moved_out           # memory arrays of storages just moved: they die in moved()
    cdef public list host         # storage id -> its host tier copy (the backend's handle), else None
    cdef readonly bint logs_allocations   # a host trace records the kernels' allocations
    cdef bint numpy_arrays        # the backend's arrays are NumPy's (their dtypes may hold references)

    def __init__(self, backend):
        self.backend = backend
        self.xp = backend.xp
        self.ndarray = backend.xp.ndarray
        self._placing = backend.placing
        self.logs_allocations = backend.logs_allocations
        self.numpy_arrays = self.ndarray is numpy.ndarray
        self.arrays = []
        self.records = []
        self.dying = []
        self.moved_out = []
        # memory moves inside the arena where the backend can copy onto a given piece, and a
        # window is compacted in place where it can slide bytes down (the host)
        self.can_move = backend.can_move
        self.can_slide = backend.can_slide
        # the host tier: the backend copies arrays to host memory outside the arena and back
        self.can_offload = backend.can_offload
        # copies out ahead: the backend's to_host leaves the array's later work unordered
        self.can_copy_ahead = backend.can_offload and backend.can_copy_ahead
        self.host = []

    def constant(self, runtime, data, dtype):
        """A constant holding a copy of data, placed first fit from the low end: (its view,
        its bytes)."""
        with self._placing(LOWEST):
            array = self.xp.array(data, dtype=dtype, copy=True)
        if self.numpy_arrays:
            _refuse_references(None, array, 0)
        root = array
        while isinstance(root.base, self.ndarray):
            root = root.base
        sid = self.engine.constant(root.nbytes, self.backend.offset_of(root))
        return self.views(runtime, [(array, root, None)], [sid])[0], root.nbytes

    def mutate(self, int o, OpRecord rec):
        """An in-place op's first run (after Engine.prepare_inplace): the kernel mutates its
        input's storage itself. Returns the elapsed ns; a failure aborts the op."""
        cdef Engine engine = self.engine
        cdef View v
        try:
            _, elapsed = self.call(rec, [self.array(v) for v in rec.inputs], engine.c_placement(o))
        except BaseException:
            self.engine.fail_inplace(o)    # the kernel may have written part of its input
            raise
        memory = self.arrays[rec.inputs[rec.kernel.inplace].sid]
        rec.outputs = [(memory.shape, memory.dtype)]   # a recompute returns a copy of it
        return elapsed

    # ---- the runtime's side -------------------------------------------------------------------

    def record(self, int o, rec):
        cdef list records = self.records
        if o < len(records):
            records[o] = rec
        else:
            records.extend([None] * (o - len(records)))
            records.append(rec)

    cpdef int forget_op(self, int o) except -1:
        """o's record died: its OpRecord goes (the kernel, which may close over Tensors, and
        the attributes). Not at once: dropping a Tensor re-enters the engine, which is inside
        its collection now; the runtime drops ``dying`` on its way out (release_dying)."""
        if o < len(self.records) and self.records[o] is not None:
            self.dying.append(self.records[o])
            self.records[o] = None
        return 0

    def release_dying(self):
        """Drop the records of dead ops (outside the engine: their Tensors may re-enter it)."""
        while self.dying:
            dying, self.dying = self.dying, []
            del dying

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

    def call(self, OpRecord rec, list arrays, int placement, old=None):
        """Run rec's kernel on arrays, its allocations placed as placement says; returns
        (outputs, elapsed ns). old: an in-place kernel's recompute mutates a copy of its input
        storage's bytes (old, the old value others may still need) and returns that copy."""
        cdef object kernel = rec.kernel
        cdef dict attrs = rec.attrs
        cdef object xp = self.xp
        cdef int64_t start, elapsed
        if kernel.wants_xp:
            attrs = dict(attrs, xp=xp)
        if rec.seed is not None:
            attrs = dict(attrs, rng=_stream(rec.seed, xp))
        i = kernel.inplace
        with self._placing(placement):
            if old is not None:
                out = xp.array(old, copy=True)
                arrays[i] = out if rec.inputs[i].natural else build_view(xp, out, rec.inputs[i])
            start = _ns()
            result = kernel.fn(*arrays, **attrs) if attrs else kernel.fn(*arrays)
            elapsed = _ns() - start
            if i is not None:
                if result is not None and not _same_array(result, arrays[i],
                                                          self.backend.address_of):
                    raise TypeError(
                        f"kernel {kernel.name!r} is in-place (inplace={i}): it must write its "
                        f"input {i} and return None or that input, but returned "
                        f"{type(result).__name__ if not isinstance(result, self.ndarray) else 'a new array'}; "
                        f"write the result into input {i} (out=, [...] =), or drop inplace= "
                        f"to return a new array")
                if old is None:
                    out = arrays[i]
            elif type(result) is self.ndarray:
                if self.numpy_arrays:
                    _refuse_references(kernel, result, 0)
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
            if self.numpy_arrays:
                _refuse_references(kernel, o, k)
        return outs, elapsed

    def adopt(self, outs, placement, inputs=()):
        """(output, root, offset) of each output; memory from outside the arena (a worker
        thread's, a cached array) is copied in, and the copy is the output. So is memory of
        another storage than the op's inputs (a kernel returning an array it kept from an
        earlier call): a storage's memory is its own."""
        cdef object backend = self.backend
        cdef object ndarray = self.ndarray
        cdef Arena arena = backend.arena
        cdef list placed = []
        cdef size_t size
        cdef int slot
        for o in outs:
            root = o
            while isinstance(root.base, ndarray):
                root = root.base
            offset = backend.offset_of(root)
            if offset is not None and arena.c_used_piece(offset, &size, &slot) == 0 \
                    and slot >= 0 and arena.c_sid(slot) not in inputs:
                offset = None
            if offset is None:
                with backend.placing(placement):
                    o = root = self.xp.array(o, copy=True)
                offset = backend.offset_of(root)
            placed.append((o, root, offset))
        return placed

    def first_run(self, runtime, int o, OpRecord rec, bint timed):
        """A (pure) op's first run after Engine.begin: run the kernel, adopt its outputs, hand
        them to the engine (Engine.finish_call: aliases, new storages) at the op's cost (the
        elapsed time, or runtime._cost), and return (their views, the cost). A failure
        before the engine has the outputs aborts the op."""
        cdef Engine engine = self.engine
        cdef Arena arena = engine.arena
        cdef list arrays = self.arrays
        cdef int placement = engine.c_placement(o)
        cdef View v
        cdef list ins
        try:
            while True:
                ins = []
                for v in rec.inputs:      # the engine made them resident
                    ins.append(arrays[v.sid] if v.natural else build_view(self.xp, arrays[v.sid], v))
                try:
                    outs, elapsed = self.call(rec, ins, placement)
                    break
                except OutOfMemoryError as err:
                    # the kernel holds its inputs while it runs: the engine's rule (c_retry)
                    # may abort it and run it again once its arrays are gone
                    if not engine.c_may_retry():
                        raise
                    request = err.request
                ins = None                # the arrays go, so that the inputs can move
                arena.log.c_restart()     # only the last attempt's allocations are the kernel's
                engine.c_retry(o, request)
            del ins
            placed = self.adopt(outs, placement, [v.sid for v in rec.inputs])
            rec.outputs = [(x.shape, x.dtype) for x in outs]
            cost = float(elapsed) if timed else runtime._cost(rec, elapsed, rec.outputs)
        except BaseException:
            engine.abort(o)
            raise
        self.record(o, rec)    # before the engine finishes: an op of views only dies there
        sids = engine.finish_call(o, cost, [(p[1].nbytes, p[2]) for p in placed])
        return self.views(runtime, placed, sids), cost

    def views(self, runtime, list placed, sids):
        """Views of a first run's outputs on their storages (new ones keep the root's memory)."""
        cdef list arrays = self.arrays
        cdef Py_ssize_t n = len(arrays)
        cdef list views = []
        cdef int sid
        for (o, root, _), sid in zip(placed, sids):
            if sid >= n:
                arrays.extend([None] * (sid + 1 - n))
                n = sid + 1
            memory = arrays[sid]
            if memory is None:
                memory = arrays[sid] = memory_of(root)
            if o is memory:
                views.append(_view(runtime, sid, o.shape, o.dtype, o.strides, 0, True))
            else:
                views.append(_view(runtime, sid, o.shape, o.dtype, o.strides,
                                   self.backend.address_of(o) - self.backend.address_of(memory),
                                   False))
        return views

    # ---- the engine's side --------------------------------------------------------------------

    cpdef int run(self, int o) except -1:
        """Recompute op o: run its kernel again; its live evicted outputs take the results."""
        cdef Engine engine = self.engine
        cdef OpRecord rec = self.records[o]
        cdef list arrays = self.arrays
        cdef vector[int] inputs = engine.c_inputs(o)
        cdef vector[int] index, missing
        cdef int placement = engine.c_placement(o)
        cdef size_t j
        cdef int k, sid
        cdef View view
        ins = []
        for j in range(inputs.size()):
            # an old value made by an in-place op has its storage's layout: natural stays true
            view = rec.inputs[j]
            ins.append(arrays[inputs[j]] if view.natural
                       else build_view(self.xp, arrays[inputs[j]], view))
        i = rec.kernel.inplace
        outs, _ = self.call(rec, ins, placement, None if i is None else arrays[inputs[i]])
        del ins
        engine.c_evicted_outputs(o, index, missing)
        if missing.empty():
            return 0
        picked = []
        for j in range(index.size()):
            picked.append(outs[index[j]])
        placed = self.adopt(picked, placement)
        for j in range(missing.size()):
            k = index[j]
            sid = missing[j]
            _, root, offset = placed[j]
            shape, dtype = rec.outputs[k]
            if outs[k].shape != shape or outs[k].dtype != dtype:
                raise RuntimeError(f"kernel {rec.kernel.name!r} returned {outs[k].shape} "
                                   f"{outs[k].dtype} on recompute, {shape} {dtype} the first time")
            engine.c_bind(sid, offset)
            # an old value made by an in-place op may be resident here for the first time
            _put(arrays, sid, memory_of(root))
        return 0

    cpdef bint drop(self, int sid) except -1:
        """Free an evicted storage's memory, unless something else holds its array (a user's
        view of it, or a borrowed array kept past its block, or its memory object: the
        backend's memory_held)."""
        if not self.can_drop(sid):
            return False
        self.arrays[sid] = None
        return True

    cpdef bint can_drop(self, int sid) except -1:
        """Whether drop would free sid's memory now: only the executor holds its array."""
        cdef object memory = self.arrays[sid] if sid < len(self.arrays) else None
        if memory is None:
            return False
        # expected references: the list's and `memory`; to a flat array's base (the root):
        # the flat array's and `base`
        if Py_REFCNT(memory) > 2:
            return False
        cdef object base = memory.base
        if base is not None and Py_REFCNT(base) > 2:
            return False
        del base
        return not self.backend.memory_held(memory)

    cpdef bint relocate(self, int sid, Py_ssize_t src, Py_ssize_t dst) except -1:
        """Move sid's bytes to the piece at dst (taken already): a new memory array there
        holding a copy (the backend's copy_to), while the old one dies in moved() (freeing
        src). Refused (False) when something else holds the memory (as drop), it is not
        C-contiguous, or the backend could not put the copy there."""
        cdef object memory = self._movable(sid)
        if memory is None or self.backend.memory_held(memory):
            return False
        moved = self.backend.copy_to(memory, dst)
        if moved is None:
            return False          # nothing was allocated at dst: the copy stays out
        self.arrays[sid] = moved
        self.moved_out.append(memory)
        return True

    cpdef int moved(self) except -1:
        self.moved_out.clear()
        return 0

    cdef object _movable(self, int sid):
        """sid's memory array when only the executor holds it (as drop asks) and it is
        C-contiguous; None when it may not move."""
        cdef object memory = self.arrays[sid] if sid < len(self.arrays) else None
        if memory is None or Py_REFCNT(memory) > 2:     # the list's and `memory`'s only
            return None
        cdef object base = memory.base
        if base is not None and Py_REFCNT(base) > 2:
            return None
        del base
        if not memory.flags.c_contiguous:
            return None
        return memory

    cpdef bint slide(self, int sid, Py_ssize_t src, Py_ssize_t dst) except -1:
        """Move sid's bytes down from offset src to dst in place (the backend's slide: the
        arena slides the piece, the old array frees nothing). Refused (False) as relocate
        refuses, or where the backend cannot slide."""
        if self._movable(sid) is None:
            return False
        return self.backend.slide(self.arrays, sid, src, dst)

    cpdef int forget(self, int sid) except -1:
        if sid < len(self.arrays):
            self.arrays[sid] = None
        return 0

    cpdef bint offload(self, int sid, bint ahead=False) except -1:
        """Copy sid's memory array to the host tier (the backend's to_host: memory outside the
        arena); its memory stays until drop (with ahead, a copy out ahead: in use, the backend
        ordering its reuse after the copy). Refused (False) as a move is (something else holds
        it, it is not C-contiguous), and for arrays whose elements are references."""
        cdef object memory = self._movable(sid)
        if memory is None or self.backend.memory_held(memory) or memory.dtype.hasobject:
            return False
        # (a backend without copies ahead may define to_host(array) alone)
        _put(self.host, sid, self.backend.to_host(memory, ahead) if ahead
             else self.backend.to_host(memory))
        return True

    cpdef int fetch(self, int sid, int placement, bint ahead=False) except -1:
        """Bring sid back from the host tier: a new array in the arena (placed as placement
        says, evicting as the policy chooses) holding its host copy's bytes, bound to sid; the
        host copy stays until forget_host. ahead (a prefetch): where the backend copies ahead
        (can_copy_ahead), its copy may run beside the work after it until await_fetch; a
        backend without copies ahead may define from_host(copy, placement) alone."""
        array = self.backend.from_host(self.host[sid], placement, True) \
            if ahead and self.can_copy_ahead else self.backend.from_host(self.host[sid], placement)
        self.engine.c_bind(sid, self.backend.offset_of(array))
        _put(self.arrays, sid, array)
        return 0

    cpdef int await_fetch(self, int sid) except -1:
        """sid's copy back ahead is about to be read: the backend orders the work from now on
        after it (await_host). Its host copy is still the one fetched: the engine awaits before
        it drops a host copy (Engine._host_release)."""
        if self.can_copy_ahead:
            self.backend.await_host(self.host[sid])
        return 0

    cpdef int forget_host(self, int sid) except -1:
        if sid < len(self.host) and self.host[sid] is not None:
            copy, self.host[sid] = self.host[sid], None
            self.backend.free_host(copy)
        return 0

    cpdef int copy(self, int dst, int src, int placement, Py_ssize_t release) except -1:
        """dst takes a copy of src's bytes (new memory, placed as placement says); the old
        memory of dst, if dst is src, is freed with its array."""
        arrays = self.arrays
        with self.backend.placing(placement):
            moved = self.xp.array(arrays[src], copy=True)    # C-contiguous, as the source
        self.engine.c_bind(dst, self.backend.offset_of(moved))
        _put(arrays, dst, moved)
        return 0


class SimExecutor(SizeExecutor):
    """The simulation backend: outputs sized by the kernels' shape rules, costs modelled."""

    logs_allocations = False

    def __init__(self, backend):
        self.backend = backend

    def constant(self, runtime, data, dtype):
        """A constant of data's size (data: an array, or a (shape, dtype) spec), placed at the
        low end: (its view, its bytes)."""
        shape, dtype = data if is_spec(data) else (numpy.shape(data), dtype or numpy.float32)
        shape, dtype = tuple(shape), numpy.dtype(dtype)
        nbytes = spec_nbytes((shape, dtype))
        return View(runtime, self.engine.constant(nbytes, -1), shape, dtype, None, 0), nbytes

    def first_run(self, runtime, int o, OpRecord rec, bint timed):
        """An op's first run after Engine.begin: the kernel's shape rule sizes the outputs,
        the cost model prices the op, the engine places them. Returns (views, cost)."""
        kernel = rec.kernel
        try:
            if kernel.shape is None:
                raise TypeError(f"kernel {kernel.name!r} has no shape rule; the simulation "
                                "backend needs Kernel(shape=...) to size its outputs")
            specs = specs_of(kernel.shape(*[v.spec for v in rec.inputs], **rec.attrs))
            cost = runtime._cost(rec, 0, specs)
        except BaseException:
            self.engine.abort(o)
            raise
        outputs = [(spec_nbytes(spec),
                    -2 - kernel.views if kernel.views is not None and k == 0 else -1)
                   for k, spec in enumerate(specs)]
        sids = self.engine.finish_call(o, cost, outputs)
        return [View(runtime, sid, tuple(spec[0]), numpy.dtype(spec[1]), None, 0)
                for sid, spec in zip(sids, specs)], cost

    def mutate(self, o, rec):
        return 0      # nothing runs: the op's cost is modelled

    dying = ()    # no records: none die

    def record(self, o, rec):
        pass      # a recompute needs no record: sizes are the engine's

    def release_dying(self):
        pass

    def array(self, view):
        raise RuntimeError("the simulation backend has no arrays: it sizes and costs ops only")

    def array_of(self, sid):
        return None


cdef inline void _put(list items, int i, value):
    """items[i] = value, the list grown with None up to i first (ids index these lists)."""
    if i >= len(items):
        items.extend([None] * (i + 1 - len(items)))
    items[i] = value


def _as_array(xp, value):
    return xp.asarray(value) if isinstance(value, numpy.generic) else value



def _same_array(result, target, address_of):
    """result is target, or an array over target's very bytes (a view of it as it is: same
    address, by the backend's address_of, shape, strides and dtype), as an in-place kernel may
    return what it wrote."""
    if result is target:
        return True
    try:
        return (result.shape == target.shape and result.dtype == target.dtype
                and result.strides == target.strides
                and address_of(result) == address_of(target))
    except (AttributeError, TypeError):
        return False
