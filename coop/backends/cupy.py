"""CuPy backend: a ``cupy.cuda.MemoryPool`` whose memory is one coop arena per device.

``cupy.cuda.set_allocator(coop.allocator("6GiB"))`` routes every CuPy allocation through coop.
The pool is itself the allocator (``__call__`` is ``malloc``), so the object handed to
``set_allocator`` is the one whose CuPy-style stats (``pool.used_bytes()`` ...) describe it;
``set_allocator(pool.malloc)`` works the same.

Per device, the first malloc reserves one device allocation of the budget (rounded down to 512
bytes, the arena's capacity); every allocation is a piece of it, wrapped in its own
``UnownedMemory`` whose owner (``coop.backends._cupy_pool.PieceOwner``) frees the piece when the last view of it dies.
Allocations made outside ``coop.apply`` stay anonymous pieces: never evicted. CuPy's memory
hooks (``cupy.cuda.MemoryHook``) are called as CuPy's own pool calls them.

Streams (the rule of RMM's stream-ordered pools): allocations may run on any stream. Memory
freed on stream A is reused on A at once (stream order protects it); before another stream B
gets memory after frees on A, B waits on an event recorded on A after those frees
(``cudaStreamWaitEvent``). Each thread's per-thread default stream is its own stream although
they share one handle. ``coop.backends.streams`` keeps this bookkeeping, only once a
second stream appears.

Host tier: a runtime's bound pool copies an array to pinned host memory (``to_host``, a
``HostCopy``), back into the arena (``from_host``) and releases the host copy (``free_host``),
each copy on one of the device's copy streams (out, back, and out ahead) and ordered with the
current stream by events (see ``coop.backends.streams.on_copy_stream``); a copy ahead (out:
``to_host(array, ahead=True)``, in chunks of ``coop.backends.base.AHEAD_CHUNK`` bytes on its own
stream; back, a prefetch: ``from_host(copy, placement, ahead=True)`` then ``await_host(copy)``
before its reader) leaves the current stream running beside it.

A coop.Runtime binds to the device current when it is made (`bound`): used with another device
current, it raises ``RuntimeError``; the pool itself serves every device (one arena each).

``base=`` (caller-owned memory at that address, for tests and embedding) never touches the
driver: the pool neither reserves memory nor reads the current device or stream (it serves
``device``, or device 0), so stream order is the caller's to keep.
"""
import collections
import contextlib
import ctypes
import gc
import os
import sys
import threading
import weakref

import numpy

import cupy
from cupy.cuda import memory_hook
from cupy.cuda.memory import MemoryPointer, UnownedMemory
from cupy.cuda.memory import OutOfMemoryError as _CupyOOM
from cupy.cuda.runtime import CUDARuntimeError

from coop._core import EXPENSIVE, Arena
from coop.backends._cupy_pool import PieceOwner, adopt, serve
from coop.backends import streams
from coop.backends.base import AHEAD_CHUNK, Backend
from coop.budget import Budget, host_memory_bytes, parse_budget
from coop.errors import CoopError, HostMemoryError, OutOfMemoryError

__all__ = ["CoopMemoryPool", "CupyOutOfMemoryError", "EventTimer", "HostCopy", "allocator"]

ALIGNMENT = 512  # CuPy's own pool rounds to 512 bytes; cudaMalloc returns 512-aligned bases
_ERROR_MEMORY_ALLOCATION = 2  # cudaErrorMemoryAllocation (not exported to Python by CuPy)
_has_hooks = memory_hook._has_memory_hooks
_get_hooks = memory_hook.get_memory_hooks


class CupyOutOfMemoryError(_CupyOOM, OutOfMemoryError):
    """coop's OutOfMemoryError that CuPy callers also catch as cupy.cuda.memory.OutOfMemoryError."""

    def __init__(self, message, *figures):
        # CuPy's __init__(size, total, limit) would write its own message: keep coop's.
        OutOfMemoryError.__init__(self, message, *figures)

    __reduce__ = OutOfMemoryError.__reduce__

    @classmethod
    def of(cls, err):
        """coop's OutOfMemoryError err as one CuPy callers catch too (every figure kept)."""
        return cls(str(err), *err.figures())


# ---- the driver, in one place (base= pools call none of these; tests replace them) ----------

#: the CUDA runtime's errors that mean no device can be used at all: cudaErrorInsufficientDriver
#: (no driver, or one older than CuPy's runtime), cudaErrorNoDevice, cudaErrorInitializationError
_NO_DEVICE = {35: "the CUDA driver is missing or older than CuPy's CUDA runtime",
              100: "no CUDA device is visible", 3: "the CUDA driver failed to initialise"}


@contextlib.contextmanager
def _device_needed(what):
    """CoopError, naming what needed a device and the fix, for a CUDA runtime error that means
    there is none (other errors go through as CuPy raised them)."""
    try:
        yield
    except CUDARuntimeError as e:
        why = _NO_DEVICE.get(getattr(e, "status", None))
        if why is None:
            raise
        raise CoopError(f"coop: {what} needs a CUDA device, and {why} ({e}); on the host use "
                        f"coop.numpy_allocator, or give coop.allocator base= for memory the "
                        f"caller owns") from None


def _current_device_id():
    with _device_needed("coop.allocator"):
        return cupy.cuda.runtime.getDevice()


def _mem_info(device_id):
    """(free, total) bytes of the device."""
    with _device_needed("coop.allocator"):
        return cupy.cuda.Device(device_id).mem_info


def _cuda_malloc(nbytes):
    return cupy.cuda.Memory(nbytes)  # plain cudaMalloc: never re-enters the allocator


def _device_name(device_id):
    with _device_needed("a coop.Runtime on coop.allocator"):
        name = cupy.cuda.runtime.getDeviceProperties(device_id)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def _timing_event():
    return cupy.cuda.Event()


def _event_done(event):
    return event.done       # cudaEventQuery: never waits


def _wait_event(event):
    event.synchronize()


def _elapsed_ms(start, end):
    return cupy.cuda.get_elapsed_time(start, end)   # both done


def _pinned(nbytes):
    """nbytes of pinned host memory from CuPy's current pinned allocator (by default its pinned
    pool, which keeps freed blocks for reuse by rounded size and releases them all when
    cudaHostAlloc fails; set_pinned_memory_allocator(None): cudaHostAlloc and cudaFreeHost each
    time)."""
    return cupy.cuda.alloc_pinned_memory(nbytes)


def _pinned_or_none(nbytes):
    """_pinned(nbytes), or None when the host cannot pin that much (cudaErrorMemoryAllocation
    from cudaHostAlloc, after CuPy's pinned pool released its free blocks and tried again)."""
    try:
        return _pinned(nbytes)
    except CUDARuntimeError as err:
        if err.status != _ERROR_MEMORY_ALLOCATION:
            raise
        return None


def _keep_until(event, memory):
    """Keep pinned memory alive until event (a copy into or out of it) is done, without
    blocking the host: CuPy's watch list (cupy.cuda.pinned_memory._add_to_watch_list, which
    cupy.asarray uses for its staging buffers) holds it and drops it once the event is done,
    checked at every pinned allocation. Where a CuPy lacks it, the host waits for the event."""
    if event is None or memory is None or _event_done(event):
        return
    if not _watch(event, memory):
        _wait_event(event)


def _watch(event, memory):
    """Hand memory to CuPy's watch list until event is done; False where CuPy has none."""
    watch = getattr(cupy.cuda.pinned_memory, "_add_to_watch_list", None)
    if watch is None:
        return False
    watch(event, memory)
    return True


def _reserve(device_id, nbytes):
    """One device allocation of nbytes on the current device (device_id); freed when dropped.

    cudaMalloc reports a full device as CUDARuntimeError (cudaErrorMemoryAllocation); like
    CuPy's pool, collect garbage (cycles may hold device memory) and try once more."""
    for attempt in (0, 1):
        try:
            return _cuda_malloc(nbytes)
        except CUDARuntimeError as err:
            if err.status != _ERROR_MEMORY_ALLOCATION:
                raise
            if attempt == 0:
                gc.collect()
                continue
            free, total = _mem_info(device_id)
            raise CupyOutOfMemoryError(
                f"coop: cannot reserve the budget of {nbytes} bytes on device {device_id}: the "
                f"device has {free} bytes free of {total} ({err}); give a budget below {free} "
                f"bytes or a percentage of the free memory (e.g. '90%'), or free other device "
                f"memory first (cupy.get_default_memory_pool().free_all_blocks())",
                nbytes, nbytes, free, 0) from None


def _env_limit():
    """CUPY_GPU_MEMORY_LIMIT as CuPy reads it: (bytes, None), (None, fraction of the device's
    total) or (None, None); 0 means no limit."""
    text = os.environ.get("CUPY_GPU_MEMORY_LIMIT")
    if text is None or not text.strip():
        return None, None
    text = text.strip()
    try:
        if text.endswith("%"):
            fraction = float(text[:-1]) / 100.0
            return None, (fraction if fraction > 0 else None)
        size = int(text)
    except ValueError:
        raise ValueError(f"coop: CUPY_GPU_MEMORY_LIMIT={text!r} is neither bytes nor a "
                         f"percentage (e.g. '8000000000' or '80%')") from None
    return (size if size > 0 else None), None


# ---- pieces and streams -----------------------------------------------------------------------

class _Scopes(threading.local):
    """Per thread: ``stack``, its open ``with pool:`` scopes; ``placement``, its allocations'
    placement class. A class default, not getattr(..., default): a missing attribute of a
    thread-local costs a caught AttributeError (~1 us) on every malloc."""
    placement = EXPENSIVE
    ops = 0          # open placing() scopes: a runtime's kernel, constant or copy is running

    def __init__(self):
        self.stack = []


class _DeviceArena:
    """One device's arena and the memory behind it; live pieces keep it (and the memory) alive."""
    __slots__ = ("arena", "device_id", "base", "memory", "stream_key", "stream", "stream_alive",
                 "order", "lock", "leases")

    def __init__(self, arena, device_id, lock):
        self.arena = arena            # offsets of [base, base + capacity); survives releases
        self.device_id = device_id
        self.base = None              # address of offset 0; None while nothing is reserved
        self.memory = None            # the cupy.cuda.Memory reserved; None with base= or released
        self.stream_key = None        # key of the first stream served; None with base=
        self.stream = None            # that stream (recorded on once a second one appears)
        self.stream_alive = None      # its liveness, judged on its thread (streams.liveness)
        self.order = None             # a StreamOrder once a second stream allocated, else None
        self.lock = lock              # the pool's lock: guards order (frees come from any thread)
        self.leases = weakref.WeakSet()  # live array_at views (no pieces, yet on the memory)


class _Lease:
    """Owner of an array_at view's memory: keeps its home alive and, while it lives, the
    reservation (free_all_blocks returns nothing while a lease is out)."""
    __slots__ = ("home", "__weakref__")

    def __init__(self, home):
        self.home = home
        home.leases.add(self)


def _piece_of(home, pointer):
    """The PieceOwner of a MemoryPointer's memory when it is a piece of home (a _DeviceArena),
    else None (another pool's memory, an array_at view, CuPy's own)."""
    piece = getattr(pointer.mem, "_owner", None)
    return piece if isinstance(piece, PieceOwner) and home is not None and piece.home is home \
        else None


def _call_hooks(hooks, stage, **info):
    for hook in hooks.values():
        getattr(hook, stage)(**info)


# ---- the pool ---------------------------------------------------------------------------------

class CoopMemoryPool(cupy.cuda.MemoryPool):
    """CuPy memory pool serving every allocation from a coop arena (one per device).

    A coop backend (coop.backends.base.Backend: memory only): ``arena`` (the current
    device's), ``xp``, ``alignment``, ``offset_of(array)``, ``array_at``, ``placing(placement)``;
    ``with pool:`` routes the thread's CuPy allocations to it (``cupy.cuda.using_allocator``).
    When nothing fits, the arena's owner (a coop.Runtime's engine) evicts; then garbage is
    collected and the request retried once (as CuPy's pool does); then malloc raises
    OutOfMemoryError.
    """

    xp = cupy
    alignment = ALIGNMENT

    def __init__(self, budget, device=None, base=None, host_budget=None):
        super().__init__()  # CuPy's own per-device pools stay unused; this touches no device
        for name, value in (("device", device), ("base", base)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise TypeError(f"coop: {name} must be an int or None, not {value!r}")
        if device is not None and device < 0:
            raise ValueError(f"coop: device must be >= 0, not {device}")
        if base is not None and (base <= 0 or base % ALIGNMENT):
            raise ValueError(f"coop: base must be a positive multiple of {ALIGNMENT}, "
                             f"not {base:#x}")
        self._base = base
        self._device = device if base is None or device is not None else 0
        self._budgets = {}            # device id -> budget in bytes (percentages differ per device)
        self._homes = {}              # device id -> _DeviceArena, made on first use
        self._lock = threading.RLock()  # guards homes, reservations and stream bookkeeping
        self._scopes = _Scopes()      # this thread's `with pool:` scopes and placement class
        spec = Budget(budget, of="the device's free memory")
        percent = spec.is_share
        if percent and base is not None:
            raise ValueError(f"coop: a budget of {budget!r} is a share of a device's memory; "
                             f"with base= give it in bytes, e.g. '512MiB'")
        self._spec = spec
        self._fixed = None if percent else self._checked(spec.resolve())
        #: bytes of pinned host memory a runtime's host tier may hold under an offloading
        #: policy (None: no limit); the runtime takes it unless given its own
        self.host_budget = None if host_budget is None else parse_budget(
            host_budget, host_memory_bytes(), of="this host's memory", limit=host_memory_bytes(),
            limit_name="this host's memory", name="host_budget")
        self._limit = _env_limit()    # CUPY_GPU_MEMORY_LIMIT, read once as CuPy's pools do
        if base is not None and self._limit[1] is not None:
            raise ValueError("coop: CUPY_GPU_MEMORY_LIMIT is a percentage of a device's memory; "
                             "with base= unset it or give it in bytes")
        if percent or self._limit[1] is not None:  # check it now, against the device it will serve
            self._budget_of(self._device if self._device is not None else _current_device_id())
        elif self._limit[0] is not None:
            self._budget_of(self._device)

    # -- budget and devices --
    @staticmethod
    def _checked(budget):
        if budget < ALIGNMENT:
            raise ValueError(f"coop: a device budget of {budget} bytes is below one "
                             f"{ALIGNMENT}-byte piece; give at least '{ALIGNMENT}B'")
        return budget

    def _budget_of(self, device_id):
        budget = self._budgets.get(device_id)
        if budget is not None:
            return budget
        budget = self._fixed
        if budget is None:  # a percentage of what the device can give now
            free = _mem_info(device_id)[0]
            budget = self._checked(self._spec.resolve(free, limit=free, limit_name=(
                f"the free memory of device {device_id}")))
        size, fraction = self._limit
        if fraction is not None:
            size = int(fraction * _mem_info(device_id)[1])
        if size is not None and budget > size:
            raise ValueError(f"coop: the budget of {budget} bytes exceeds CUPY_GPU_MEMORY_LIMIT "
                             f"({os.environ.get('CUPY_GPU_MEMORY_LIMIT')!r} = {size} bytes on "
                             f"device {device_id}); lower the budget or raise the limit")
        self._budgets[device_id] = budget
        return budget

    def _device_now(self):
        return self._device if self._base is not None else _current_device_id()

    def _check_device(self, device_id):
        if self._device is not None and device_id != self._device:
            raise RuntimeError(f"coop: this pool serves device {self._device} only, but the "
                               f"current device is {device_id}; make one coop.allocator per "
                               f"device, or one without device=")

    def _home(self, device_id):
        home = self._homes.get(device_id)
        if home is None:
            self._check_device(device_id)
            with self._lock:
                home = self._homes.get(device_id)
                if home is None:
                    arena = Arena(self._budget_of(device_id), ALIGNMENT)
                    home = self._homes[device_id] = _DeviceArena(arena, device_id, self._lock)
        return home

    def _reserve_home(self, home):
        with self._lock:
            if home.base is not None:
                return
            if self._base is not None:
                home.base = self._base
                return
            nbytes = home.arena.capacity
            hooks = _get_hooks() if _has_hooks() else None
            if hooks:
                _call_hooks(hooks, "alloc_preprocess", device_id=home.device_id, mem_size=nbytes)
            memory = None
            try:
                memory = _reserve(home.device_id, nbytes)
            finally:
                if hooks:
                    _call_hooks(hooks, "alloc_postprocess", device_id=home.device_id,
                                mem_size=nbytes, mem_ptr=memory.ptr if memory is not None else 0)
            home.memory = memory
            home.stream_key, home.stream = streams.current_stream(home.device_id)
            # judged now, on its own thread (a per-thread stream lives as long as its thread)
            home.stream_alive = streams.liveness(home.stream_key, home.stream)
            home.base = memory.ptr

    # -- the backend protocol --
    @property
    def arena(self):
        """The current device's arena (made on first use; memory is reserved at the first malloc)."""
        return self._home(self._device_now()).arena

    def offset_of(self, array):
        """Arena offset of the piece holding ``array`` (also for views), or None if not ours."""
        return self._offset_on(self._device_now(), array)

    def _offset_on(self, device_id, array):
        mem = getattr(getattr(array, "data", None), "mem", None)
        if not isinstance(mem, UnownedMemory) or mem.device_id != device_id:
            return None
        home = self._homes.get(device_id)
        if home is None or home.base is None:
            return None
        offset = mem.ptr - home.base  # each piece has its own UnownedMemory, starting at the piece
        return offset if 0 <= offset < home.arena.capacity else None

    def array_at(self, offset, nbytes):
        """A flat uint8 CuPy array over nbytes of the current device's arena at offset."""
        return self._array_on(self._device_now(), offset, nbytes)

    def _array_on(self, device_id, offset, nbytes):
        home = self._home(device_id)
        if home.base is None or not 0 <= offset <= home.arena.capacity - nbytes:
            raise ValueError(f"coop: no {nbytes} bytes at offset {offset} of the reservation")
        # the view is no piece of the arena: its lease keeps free_all_blocks from returning
        # the reservation under it
        memory = UnownedMemory(home.base + offset, nbytes, _Lease(home),
                               device_id=home.device_id)
        return cupy.ndarray((nbytes,), cupy.uint8, MemoryPointer(memory, 0))

    def _adopt_on(self, device_id, offset, nbytes, source=None):
        """A MemoryPointer owning the used, anonymous piece at offset, taken already by the
        arena (coop's window moving a storage there), on the current stream. ``source``: the
        array the move copies from on this stream; its piece's free is ordered after this
        stream's work from now on (the stream it was allocated on may reuse it at once, and
        would overwrite it before this stream's copy read it)."""
        home = self._home(device_id)
        key = None
        if home.stream_key is not None:
            key, stream = streams.current_stream(device_id)
            owner = _piece_of(home, source.data) if source is not None else None
            if owner is not None:
                owner.stream_key = key
        hooks = _get_hooks() if _has_hooks() else None
        if hooks:   # its free calls the free hooks: its allocation calls the malloc hooks
            rounded = -(-nbytes // ALIGNMENT) * ALIGNMENT
            _call_hooks(hooks, "malloc_preprocess", device_id=device_id, size=nbytes,
                        mem_size=rounded)
        pointer = None
        try:
            pointer = adopt(home, home.arena, home.base, offset, nbytes, key, device_id)
        finally:
            if hooks:
                _call_hooks(hooks, "malloc_postprocess", device_id=device_id, size=nbytes,
                            mem_size=rounded, mem_ptr=pointer.ptr if pointer is not None else 0,
                            pmem_id=id(pointer.mem) if pointer is not None else 0)
        if key is not None and (key != home.stream_key or home.order is not None):
            self._order(home, key, stream)
        return pointer

    def install(self):
        """Route this thread's CuPy allocations to the pool until uninstall()."""
        scope = cupy.cuda.using_allocator(self)
        scope.__enter__()
        self._scopes.stack.append(scope)

    def uninstall(self):
        """Undo the last install() of this thread."""
        self._scopes.stack.pop().__exit__(None, None, None)

    def __enter__(self):
        """Route this thread's CuPy allocations to the pool until exit (as the runtime does)."""
        self.install()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.uninstall()  # restore; let exc propagate
        return False

    @contextlib.contextmanager
    def placing(self, placement):
        """This thread's CuPy allocations go to the pool with this placement class until exit."""
        scopes = self._scopes
        saved = scopes.placement
        scopes.placement = placement
        self.install()
        scopes.ops += 1
        try:
            yield self
        finally:
            scopes.ops -= 1
            self.uninstall()
            scopes.placement = saved

    # -- what a coop.Runtime asks of a device backend --
    def bound(self):
        """The pool as a runtime's executor holds it: bound to the current device, the pool
        held weakly (the pool's arena owns the runtime's engine: no reference cycle)."""
        device_id = self._device_now()
        self._home(device_id)
        return _BoundPool(self, device_id)

    def device_name(self):
        """The current device's name (e.g. 'NVIDIA H100 80GB HBM3'); None with base=."""
        return None if self._base is not None else _device_name(self._device_now())

    def event_timer(self):
        """Times kernels with CUDA events (what cost='timing' measures on this backend)."""
        return EventTimer()

    # -- cupy.cuda.MemoryPool --
    def malloc(self, size, _hooked=False):
        """A MemoryPointer to ``size`` bytes at base + offset of a new arena piece."""
        if not _hooked and _has_hooks():
            hooks = _get_hooks()
            if hooks:
                return self._malloc_hooked(size, hooks)
        device_id = self._device if self._base is not None else _current_device_id()
        home = self._homes.get(device_id)
        if size == 0:
            if not self._scopes.stack:
                # No piece; a null pointer needs an explicit device id (else CuPy asks the
                # driver).
                self._check_device(device_id)
                return MemoryPointer(UnownedMemory(0, 0, None, device_id=device_id), 0)
            # within `with pool:` (a runtime's ops and constants): a piece of one alignment
            # unit, so that an empty array has an address in the arena, as NumPy's handler
            # gives np.empty(0) one on the host; the runtime registers it like any array
            size = 1
        if home is None:
            home = self._home(device_id)
        if home.base is None:
            self._reserve_home(home)
        placement = self._scopes.placement
        key = None
        if home.stream_key is not None:
            key, stream = streams.current_stream(device_id)
        # an allocation that must evict holds the lock of the runtime whose engine owns the
        # arena (the core's rule, Arena.c_request), whichever thread makes it
        pointer = self._serve(home, size, placement, key, device_id)
        if key is not None and (key != home.stream_key or home.order is not None):
            self._order(home, key, stream)   # before the caller can enqueue work on it
        return pointer

    __call__ = malloc  # set_allocator(pool): the allocator and its stats are one object

    def _serve(self, home, size, placement, key, device_id):
        """serve, evicting; when nothing fits, outside a runtime's op, unreachable cycles may
        hold pieces: collect once and try again (as CuPy's pool does). Inside one (placing)
        the failure goes straight back to the runtime, which makes room and runs the kernel
        again: a collection at each such failure would cost more than the op (on the host
        backend, measured: one random-program test 6.5x as long)."""
        try:
            return serve(home, home.arena, home.base, size, placement, key, device_id)
        except OutOfMemoryError as err:
            if self._scopes.ops:
                raise CupyOutOfMemoryError.of(err) from None
        gc.collect()
        try:
            return serve(home, home.arena, home.base, size, placement, key, device_id)
        except OutOfMemoryError as err:
            raise CupyOutOfMemoryError.of(err) from None

    def _malloc_hooked(self, size, hooks):
        # as CuPy's SingleDeviceMemoryPool.malloc: pre, the allocation, post (also on failure)
        device_id = self._device_now()
        rounded = -(-size // ALIGNMENT) * ALIGNMENT
        _call_hooks(hooks, "malloc_preprocess", device_id=device_id, size=size, mem_size=rounded)
        pointer = None
        try:
            pointer = self.malloc(size, True)
        finally:
            _call_hooks(hooks, "malloc_postprocess", device_id=device_id, size=size,
                        mem_size=rounded, mem_ptr=pointer.ptr if pointer is not None else 0,
                        pmem_id=id(pointer.mem) if pointer is not None else 0)
        return pointer

    def _order(self, home, key, stream):
        with self._lock:
            if home.order is None:
                home.order = streams.StreamOrder(home.device_id, home.stream_key, home.stream,
                                                 home.stream_alive)
            home.order.before_malloc(key, stream)

    def _stats(self):
        home = self._homes.get(self._device_now())
        return home.arena.stats() if home is not None and home.base is not None else None

    def used_bytes(self):
        """Bytes in used pieces (sizes rounded up to 512) on the current device."""
        stats = self._stats()
        return stats["used_bytes"] if stats else 0

    def free_bytes(self):
        """Bytes reserved but not in use on the current device; 0 while nothing is reserved."""
        stats = self._stats()
        return stats["free_bytes"] if stats else 0

    def total_bytes(self):
        """The reservation on the current device (the whole budget rounded down to 512, from
        the first allocation on; CuPy's pool grows it with use), 0 before it."""
        stats = self._stats()
        return stats["capacity"] if stats else 0

    def n_free_blocks(self):
        """Free pieces of the current device's arena; 0 while nothing is reserved."""
        stats = self._stats()
        return stats["free_pieces"] if stats else 0

    def get_limit(self):
        """The budget in bytes on the current device (never 0: a coop pool always has one)."""
        return self._budget_of(self._device_now())

    def set_limit(self, size=None, fraction=None):
        """The budget is fixed when the pool is made: only ``set_limit(size=get_limit())`` passes."""
        limit = self.get_limit()
        if fraction is None and size == limit:
            return
        raise ValueError(f"coop: the budget is fixed when the allocator is made ({limit} bytes); "
                         f"set_limit(size={size!r}, fraction={fraction!r}) cannot change it. "
                         f"Make a new coop.allocator(budget) instead")

    def free_all_blocks(self, stream=None):
        """Return the current device's reservation to the driver, if no piece is in use (nor
        a view made by ``array_at``).

        With pieces in use there is nothing to release (the arena is one allocation) and this
        does nothing. The arena itself (storages, counters) is kept; the next malloc reserves
        again and starts its stream bookkeeping anew. ``stream`` is accepted for CuPy's
        signature and ignored (the reservation serves every stream). With ``base=`` nothing
        reaches the driver.
        """
        home = self._homes.get(self._device_now())
        if home is None:
            return
        with self._lock:
            if home.base is not None and home.arena.stats()["used_bytes"] == 0 \
                    and not home.leases:
                if home.order is not None:
                    streams.synchronize(home.device_id)  # the streams' last uses end first
                home.base = None
                home.stream_key = home.stream = home.order = None
                home.memory = None  # cudaFree, unless base= (then it is already None)


class _BoundPool(Backend):
    """A CoopMemoryPool as one runtime's executor sees it: one device (the runtime's), the pool
    held weakly. Used with another device current, it raises instead of mixing arenas."""
    __slots__ = ("_pool", "device_id", "xp", "alignment", "__weakref__")

    #: a move is a device-to-device copy onto the destination piece (copy_to); a window is
    #: never compacted in place: an overlapping device copy is not done here
    can_move = True
    #: the host tier: to_host, from_host and free_host copy through pinned host memory on a
    #: copy stream (an offloading policy's offloads; run on an H200 by the device check)
    can_offload = True
    #: copies ahead: to_host(array, ahead=True) and from_host(copy, placement, ahead=True)
    #: leave the current stream running beside the copy; the array's piece, whenever it is
    #: freed, makes its stream wait for the copy (and a copy back's reader, await_host)
    can_copy_ahead = True

    def __init__(self, pool, device_id):
        self._pool = weakref.ref(pool)
        self.device_id = device_id
        self.xp = cupy
        self.alignment = ALIGNMENT

    def _live(self):
        pool = self._pool()
        if pool is None:
            raise RuntimeError("coop: the CuPy pool behind this runtime is gone")
        return pool

    def _check(self, pool):
        if pool._base is None:
            now = _current_device_id()
            if now != self.device_id:
                raise RuntimeError(
                    f"coop: this runtime is bound to device {self.device_id} (current when it was "
                    f"made) but the current device is {now}; run it under "
                    f"cupy.cuda.Device({self.device_id}), or make one runtime per device")

    @property
    def arena(self):
        return self._live()._homes[self.device_id].arena

    def offset_of(self, array):
        return self._live()._offset_on(self.device_id, array)

    def array_at(self, offset, nbytes):
        pool = self._live()
        self._check(pool)
        return pool._array_on(self.device_id, offset, nbytes)

    def placing(self, placement):
        pool = self._live()
        self._check(pool)
        return pool.placing(placement)

    def address_of(self, array):
        return array.data.ptr

    def memory_held(self, array):
        """Whether something else than array holds its memory: another pointer its
        UnownedMemory (a slice's view; expected are the pointer's reference and
        getrefcount's), or another array its very MemoryPointer (``cupy.ndarray(shape, dtype,
        memptr=array.data)``, as ``cupy.lib.stride_tricks.as_strided`` makes; expected are
        array's, ``pointer``'s and getrefcount's)."""
        pointer = array.data
        return sys.getrefcount(pointer.mem) > 2 or sys.getrefcount(pointer) > 3

    def copy_to(self, array, offset):
        """A device-to-device copy of array on the current stream, on the used, anonymous
        piece at offset (taken already by the arena: coop's window moving a storage there)."""
        pool = self._live()
        self._check(pool)
        pointer = pool._adopt_on(self.device_id, offset, array.nbytes, array)   # the copy reads array
        moved = cupy.ndarray(array.shape, array.dtype, pointer)
        moved.data.copy_from_device_async(array.data, array.nbytes)
        return moved

    # -- the host tier: copies to pinned host memory and back (streams.on_copy_stream) --
    def to_host(self, array, ahead=False):
        """A HostCopy of the C-contiguous device array's bytes in pinned host memory, copied on
        the device's copy stream out after the current stream's work so far (and after a copy
        back ahead into its piece that may still run). The array may be dropped at once: the
        current stream's next work waits for the copy, and a piece whose free is ordered on
        another stream remembers it (its free makes that stream wait). HostMemoryError when
        the host cannot pin the bytes (nothing is enqueued).

        ``ahead`` (a copy out ahead of the pressure, from an array that stays in use): the
        copy goes on the device's stream for copies ahead, as copies of at most AHEAD_CHUNK
        bytes, so that a copy out for room (on the copy stream out) may run between its chunks
        rather than behind all of it, as the engine's clock assumes (Engine.ahead_chunk); the
        current stream runs on beside the copy, and the array's piece remembers it
        (``PieceOwner.copying``): when the piece is freed, later, its stream waits for the copy
        before the piece can be written again. An array this pool did not allocate (a view of
        array_at's) has no piece to remember it: its copy holds the current stream, as
        without ``ahead``. Writing the array in place while the copy runs is the caller's to
        avoid (coop's engine drops a host copy before an in-place op writes its storage, and
        the released pinned memory outlives the copy: free_host)."""
        pool = self._live()
        if not isinstance(array, cupy.ndarray):
            raise TypeError(f"coop: to_host copies a cupy.ndarray, not {type(array).__name__}")
        if not array.flags.c_contiguous:
            raise ValueError(
                f"coop: to_host copies a C-contiguous array's bytes, but this array (shape "
                f"{array.shape}, strides {array.strides}, {array.dtype}) is not C-contiguous; "
                f"copy it first (cupy.ascontiguousarray(array)) or pass the whole array of "
                f"its storage")
        if array.data.device_id != self.device_id:
            raise ValueError(f"coop: to_host got an array on device {array.data.device_id}, but "
                             f"this runtime is bound to device {self.device_id}")
        self._check(pool)
        nbytes = array.nbytes
        copy = HostCopy(array.shape, array.dtype, nbytes, self.device_id)
        if nbytes:   # no bytes, nothing to order: no memory, stream or event
            memory = _pinned_or_none(nbytes)
            if memory is None:
                raise HostMemoryError(
                    f"coop: the host has no pinned memory for a {nbytes:,}-byte host copy "
                    f"(cudaHostAlloc failed after CuPy's pinned pool released its free "
                    f"blocks); give the runtime a host_budget the host can pin, or free host "
                    f"memory")
            copy.memory = memory
            copy.host = numpy.ndarray(array.shape, array.dtype, memory)
            source = array.data
            piece = self._piece(pool, source)
            # a copy ahead: on its own stream, in chunks (AHEAD_CHUNK, what the engine's clock
            # assumes), so that a copy out for room need not wait for all of it
            beside = ahead and piece is not None
            chunk = AHEAD_CHUNK if beside else nbytes
            copy.done = streams.on_copy_stream(self.device_id, lambda stream: copy_out(
                source, memory.ptr, nbytes, stream, chunk),
                hold=not beside, direction=streams.AHEAD if beside else streams.OUT,
                after=(piece.copying,) if piece is not None else ())
            self._mark(piece, copy.done, ahead)
        return copy

    def _piece(self, pool, pointer):
        """The PieceOwner of pointer's memory when it is a piece of this pool on this device
        (only such a piece can remember a copy: its free then waits for it), else None."""
        return _piece_of(pool._homes.get(self.device_id), pointer)

    def _mark(self, piece, event, ahead):
        """piece's free is ordered after the copy that ends with event: always for a copy
        ahead (the current stream runs on beside it); for a copy that held the current stream,
        where the piece's free is ordered on another stream (the one it was allocated on,
        which may reuse it at once: a copy out read on this stream would race its next
        kernel). A copy that follows the piece's earlier copy (on_copy_stream's after) ends
        after it too, so the one event covers both."""
        if piece is None:
            return
        if ahead or (piece.stream_key is not None and
                     piece.stream_key != streams.current_stream(self.device_id)[0]):
            piece.copying = event
        elif piece.copying is not None:
            piece.copying = None    # the current stream waited for this copy, and so for it

    def from_host(self, copy, placement, ahead=False):
        """A new C-contiguous device array (allocated with this placement class, so it may
        evict) holding the HostCopy's bytes, copied on the device's copy stream back after the
        current stream's work so far and after the copy out that filled the host memory, if
        that may still run; the current stream's next work waits for the copy.

        ``ahead`` (a copy back ahead of its reader: a prefetch): the current stream runs on
        beside the copy, so that the kernels enqueued before the reader's run under it; the
        reader's work waits for it (``await_host(copy)``, which coop's engine calls before the
        array is read, written, moved, copied out or freed), and the array's piece remembers
        it (``PieceOwner.copying``): if the piece is freed first all the same, its stream waits
        for the copy before the piece can be written again."""
        pool = self._live()
        if not isinstance(copy, HostCopy):
            raise TypeError(f"coop: from_host takes what to_host returned (a HostCopy), not "
                            f"{type(copy).__name__}")
        if copy.device_id != self.device_id:
            raise ValueError(f"coop: this host copy was made on device {copy.device_id}, but "
                             f"this runtime is bound to device {self.device_id}")
        if copy.freed:
            raise ValueError(f"coop: this host copy ({copy.nbytes} bytes, shape {copy.shape}) "
                             f"was released by free_host: it has no bytes to copy back")
        self._check(pool)
        with pool.placing(placement):
            array = cupy.empty(copy.shape, copy.dtype)
        if copy.nbytes:
            memory, target, nbytes = copy.memory, array.data, copy.nbytes
            piece = self._piece(pool, target)
            # after the copy out that filled the host memory (on the other copy stream)
            copy.done = streams.on_copy_stream(self.device_id, lambda stream: (
                target.copy_from_host_async(ctypes.c_void_p(memory.ptr), nbytes, stream)),
                hold=not (ahead and piece is not None), direction=streams.BACK,
                after=(copy.done,))
            self._mark(piece, copy.done, ahead)
        return array

    def await_host(self, copy):
        """The array from_host(copy, ..., ahead=True) made is about to be read: the current
        stream's later work waits for the copy (enqueued: the host does not block); nothing
        once the device has passed it, or for a copy that held the stream already."""
        if not isinstance(copy, HostCopy):
            raise TypeError(f"coop: await_host takes what to_host returned (a HostCopy), not "
                            f"{type(copy).__name__}")
        if copy.done is not None:
            streams.await_arrival(self.device_id, copy.done)

    def free_host(self, copy):
        """Release the HostCopy's pinned memory now, without the host waiting: while its last
        copy may still run, CuPy's watch list keeps the memory until that copy's event is done
        (HostCopy.release); a second call does nothing."""
        if not isinstance(copy, HostCopy):
            raise TypeError(f"coop: free_host takes what to_host returned (a HostCopy), not "
                            f"{type(copy).__name__}")
        copy.release()

    def install(self):
        pool = self._live()
        self._check(pool)
        pool.install()

    def uninstall(self):
        """Undo the last install() of this thread."""
        self._live().uninstall()


def copy_out(source, host_ptr, nbytes, stream, chunk):
    """Enqueue the copy of nbytes from device pointer source (a MemoryPointer) to pinned host
    memory at host_ptr on stream, as copies of at most chunk bytes each, in order."""
    for start in range(0, nbytes, chunk):
        (source + start).copy_to_host_async(ctypes.c_void_p(host_ptr + start),
                                            min(chunk, nbytes - start), stream)


class HostCopy:
    """A device array's bytes in pinned host memory (what to_host returns): its ``shape``,
    ``dtype``, ``nbytes`` and device, the memory until released, and the event recorded after
    the last copy into or out of it."""
    __slots__ = ("shape", "dtype", "nbytes", "device_id", "memory", "host", "done", "freed")

    def __init__(self, shape, dtype, nbytes, device_id):
        self.shape = shape
        self.dtype = dtype
        self.nbytes = nbytes
        self.device_id = device_id
        self.memory = None     # the PinnedMemoryPointer; None with 0 bytes and once released
        self.host = None       # a NumPy array over memory (shape, dtype); None as memory is
        self.done = None       # the event after the last copy into or out of memory, or None
        self.freed = False     # released: its bytes are gone

    def numpy(self):
        """The bytes as a NumPy array of the array's shape and dtype, once the last copy is
        done (waits for it); a view of the pinned memory, which it keeps alive."""
        if self.freed:
            raise ValueError(f"coop: this host copy ({self.nbytes} bytes) was released by "
                             f"free_host")
        if self.done is not None:
            _wait_event(self.done)
        return self.host if self.host is not None else numpy.empty(self.shape, self.dtype)

    def release(self):
        """Drop the pinned memory (twice: nothing). A copy that may still read or write it
        keeps it: it is handed to CuPy's watch list of pinned memory in use (the one
        ``cupy.asarray`` uses for its staging buffers), which drops it once the copy's event
        is done, without blocking the host."""
        _keep_until(self.done, self.memory)
        self.done = self.host = self.memory = None
        self.freed = True

    def __del__(self):
        # dropped unreleased (a runtime or executor torn down): a copy may still run
        if not self.freed and self.memory is not None:
            try:
                _keep_until(self.done, self.memory)
            except Exception:   # at interpreter exit the driver may be gone: nothing to keep
                pass

    def __repr__(self):
        state = "released" if self.freed else "pinned"
        return f"<coop HostCopy {self.shape} {self.dtype}, {self.nbytes} bytes {state}>"


class EventTimer:
    """Times kernels with CUDA events on the current stream (host timers would measure the
    launch: kernels run asynchronously), without a synchronize per op.

    ``kernel(k)`` is k recording a pair of events around its function. A pair's time is read
    once its end event is done: queried (never waited for) at each ``elapsed_ns()``, and with
    ``BATCH`` pairs outstanding the oldest is waited for. ``elapsed_ns()`` gives the latest
    time read for the last run's kernel and input shapes (an earlier run of the same work,
    while this one's events are still in flight). A key waits for its own end event twice,
    at its first two runs: the first has no time to stand in, and the first time is cold
    (CuPy compiling the kernel, cuBLAS making its handle: a 2048^3 matmul's first run took
    66 ms on an H200) and stands in for no other run. At most ``BATCH`` + 1 event pairs live,
    ``KEYS`` times and ``KEYS`` timed kernels (least recently used dropped first)."""

    BATCH = 64
    KEYS = 1024

    def __init__(self):
        self._spare = []                          # event pairs whose times were read
        self._pending = collections.deque()       # (key, start, end) recorded, not yet read
        self._times = collections.OrderedDict()   # key -> the latest time read, in ns
        self._cold = set()                        # keys whose one time read is their first
        self._timed = collections.OrderedDict()   # a kernel's options -> its timed copy
        self._last = None                         # key of the last run

    def kernel(self, kernel):
        """kernel recording events around its function; one copy per kernel's options, so
        applying a plain function (a new coop.Kernel each call) reuses it."""
        options = (kernel.fn, kernel.name, kernel.cls, kernel.random, kernel.inplace,
                   kernel.views, kernel.flops, kernel.shape)
        timed = self._timed.get(options)
        if timed is not None:
            self._timed.move_to_end(options)
            return timed
        fn, name = kernel.fn, kernel.name

        def run(*args, **kwargs):
            key = (name, tuple((getattr(a, "shape", None), str(getattr(a, "dtype", "")))
                               for a in args))
            start, end = self._spare.pop() if self._spare else (_timing_event(),
                                                                _timing_event())
            start.record()
            try:
                return fn(*args, **kwargs)
            finally:
                end.record()
                self._pending.append((key, start, end))
                self._last = key
                if len(self._pending) > self.BATCH:
                    _wait_event(self._pending[0][2])
                    self._read()

        run.__wrapped__ = fn       # the signature (an xp parameter) stays the kernel's
        run.__name__ = name
        timed = self._timed[options] = kernel.with_fn(run)
        if len(self._timed) > self.KEYS:
            self._timed.popitem(last=False)
        return timed

    def _read(self, wait_for=None):
        """Read the pending pairs in order while their end events are done; wait_for: a key
        whose latest pair is waited for if no time of it is known but a cold one."""
        pending, times, cold = self._pending, self._times, self._cold
        while pending:
            key, start, end = pending[0]
            if not _event_done(end):
                if wait_for is None or (wait_for in times and wait_for not in cold) or \
                        not any(k == wait_for for k, _, _ in pending):
                    return
                _wait_event(end)
            pending.popleft()
            if key in times:
                cold.discard(key)
            else:
                cold.add(key)
            times[key] = _elapsed_ms(start, end) * 1e6
            times.move_to_end(key)
            if len(times) > self.KEYS:
                cold.discard(times.popitem(last=False)[0])
            self._spare.append((start, end))

    def elapsed_ns(self):
        """The time of the last run's work (see the class), in ns."""
        key = self._last
        self._read(key)
        return self._times[key]


def allocator(budget, device=None, base=None, host_budget=None):
    """A pool for ``cupy.cuda.set_allocator``: every CuPy allocation lives within ``budget``.

    ``budget``: bytes or a string ("6GiB", "80%" of the memory the device has free);
    ``device``: serve only that device; ``base``: use caller-owned memory at that address (no
    driver calls), on ``device`` or device 0; ``host_budget``: the pinned host memory the host
    tier of an offloading policy may hold (bytes, "64GiB" or "25%" of this host's memory;
    None: no limit). Eviction needs a runtime: ``coop.Runtime(pool, policy=...)``
    (``policy="coop-offload"`` for the host tier).
    """
    return CoopMemoryPool(budget, device, base, host_budget)


Backend.register(CoopMemoryPool)
