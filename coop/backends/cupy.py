"""CuPy backend: a ``cupy.cuda.MemoryPool`` whose memory is one coop arena per device.

``cupy.cuda.set_allocator(coop.allocator("6GiB"))`` routes every CuPy allocation through coop.
The pool is itself the allocator (``__call__`` is ``malloc``), so the object handed to
``set_allocator`` is the one whose CuPy-style stats (``pool.used_bytes()`` ...) describe it;
``set_allocator(pool.malloc)`` works the same.

Per device, the first malloc reserves one device allocation of the budget (rounded down to 512
bytes, the arena's capacity); every allocation is a piece of it, wrapped in its own
``UnownedMemory`` whose owner (`_Piece`) frees the piece when the last view of it dies.
Allocations made outside ``coop.apply`` stay anonymous pieces: never evicted.

Streams: coop assumes one stream per device. Pieces are reused in allocation order, not in
stream order, so a piece freed while stream A still reads it could be handed to stream B. The
pool records the current stream at the first malloc on each device and raises ``RuntimeError``
when a later malloc runs on another stream. To switch streams: synchronize, drop every array,
call ``free_all_blocks()`` (which forgets the recorded stream), then allocate on the new stream.

``base=`` (caller-owned memory at that address, for tests and embedding) never touches the
driver: the pool neither reserves memory nor reads the current device or stream (it serves
``device``, or device 0), so the stream rule is the caller's to keep.
"""
import contextlib
import threading

import cupy
from cupy.cuda.memory import MemoryPointer, UnownedMemory
from cupy.cuda.memory import OutOfMemoryError as _CupyOOM

from coop._core import EXPENSIVE, Arena
from coop.backends.base import Backend
from coop.budget import parse_budget
from coop.errors import OutOfMemoryError

__all__ = ["CoopMemoryPool", "CupyOutOfMemoryError", "allocator"]

ALIGNMENT = 512  # CuPy's own pool rounds to 512 bytes; cudaMalloc returns 512-aligned bases


class CupyOutOfMemoryError(_CupyOOM, OutOfMemoryError):
    """coop's OutOfMemoryError that CuPy callers also catch as cupy.cuda.memory.OutOfMemoryError."""

    def __init__(self, message, request=0, budget=0, free=0, largest_free=0):
        # CuPy's __init__(size, total, limit) would write its own message: keep coop's.
        OutOfMemoryError.__init__(self, message, request, budget, free, largest_free)

    def __reduce__(self):
        return (type(self), (str(self), self.request, self.budget, self.free, self.largest_free))


# ---- the driver, in one place (base= pools call none of these; tests replace them) ----------

def _current_device_id():
    return cupy.cuda.runtime.getDevice()


def _current_stream_ptr(device_id):
    return cupy.cuda.get_current_stream(device_id).ptr


def _device_total(device_id):
    return cupy.cuda.Device(device_id).mem_info[1]


def _reserve(device_id, nbytes):
    """One device allocation of nbytes on the current device (device_id); freed when dropped."""
    try:
        return cupy.cuda.Memory(nbytes)  # plain cudaMalloc: never re-enters the allocator
    except _CupyOOM as err:
        raise CupyOutOfMemoryError(
            f"coop: cannot reserve the budget of {nbytes} bytes on device {device_id} ({err}); "
            f"lower the budget", nbytes, nbytes, 0, 0) from err


# ---- pieces -----------------------------------------------------------------------------------

class _DeviceArena:
    """One device's arena and the memory behind it; live pieces keep it (and the memory) alive."""
    __slots__ = ("arena", "device_id", "base", "memory", "stream_ptr")

    def __init__(self, arena, device_id):
        self.arena = arena            # offsets of [base, base + capacity); survives releases
        self.device_id = device_id
        self.base = None              # address of offset 0; None while nothing is reserved
        self.memory = None            # the cupy.cuda.Memory reserved; None with base= or released
        self.stream_ptr = None        # stream seen at the reservation; None with base=


class _Piece:
    """Owner of one arena piece: CuPy drops it with the piece's last view, which frees it."""
    __slots__ = ("home", "offset")

    def __init__(self, home, offset):
        self.home = home
        self.offset = offset

    def __del__(self):
        # May run inside allocate_or_evict (the evict callback drops the victims' last views):
        # the core allows that re-entry under the GIL.
        self.home.arena.free(self.offset)


# ---- the pool ---------------------------------------------------------------------------------

class CoopMemoryPool(cupy.cuda.MemoryPool):
    """CuPy memory pool serving every allocation from a coop arena (one per device).

    A coop backend (coop.backends.base.Backend: memory only): ``arena`` (the current
    device's), ``xp``, ``alignment``, ``offset_of(array)``, ``array_at``, ``placing(placement)``;
    ``with pool:`` routes the thread's CuPy allocations to it (``cupy.cuda.using_allocator``).
    When nothing fits, the arena's owner (a coop.Runtime's engine) evicts; with none, malloc
    raises OutOfMemoryError.
    """

    xp = cupy
    alignment = ALIGNMENT

    def __init__(self, budget, device=None, base=None):
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
        self._budget_spec = budget
        self._budgets = {}            # device id -> budget in bytes (percentages differ per device)
        self._homes = {}              # device id -> _DeviceArena, made on first use
        self._lock = threading.Lock() # guards making homes and reservations, never held in malloc
        self._scopes = threading.local()  # .stack: this thread's open `with pool:` scopes;
                                          # .placement: its allocations' placement class
        percent = isinstance(budget, str) and budget.strip().endswith("%")
        if percent and base is not None:
            raise ValueError(f"coop: a percentage budget ({budget!r}) is of a device's memory; "
                             f"with base= give it in bytes, e.g. '512MiB'")
        self._fixed = None if percent else self._checked(parse_budget(budget))
        if percent:  # check it now, against the device it will first serve
            self._budget_of(self._device if self._device is not None else _current_device_id())

    # -- budget and devices --
    @staticmethod
    def _checked(budget):
        if budget < ALIGNMENT:
            raise ValueError(f"coop: a device budget of {budget} bytes is below one "
                             f"{ALIGNMENT}-byte piece; give at least '{ALIGNMENT}B'")
        return budget

    def _budget_of(self, device_id):
        if self._fixed is not None:
            return self._fixed
        budget = self._budgets.get(device_id)
        if budget is None:
            budget = self._checked(parse_budget(self._budget_spec, _device_total(device_id)))
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
                    home = self._homes[device_id] = _DeviceArena(arena, device_id)
        return home

    def _reserve_home(self, home):
        with self._lock:
            if home.base is not None:
                return
            if self._base is not None:
                home.base = self._base
                return
            home.memory = _reserve(home.device_id, home.arena.capacity)
            home.stream_ptr = _current_stream_ptr(home.device_id)
            home.base = home.memory.ptr

    # -- the backend protocol --
    @property
    def arena(self):
        """The current device's arena (made on first use; memory is reserved at the first malloc)."""
        return self._home(self._device_now()).arena

    def offset_of(self, array):
        """Arena offset of the piece holding ``array`` (also for views), or None if not ours."""
        mem = getattr(getattr(array, "data", None), "mem", None)
        if not isinstance(mem, UnownedMemory):
            return None
        home = self._homes.get(mem.device_id)
        if home is None or home.base is None or mem.device_id != self._device_now():
            return None
        offset = mem.ptr - home.base  # each piece has its own UnownedMemory, starting at the piece
        return offset if 0 <= offset < home.arena.capacity else None

    def array_at(self, offset, nbytes):
        """A flat uint8 CuPy array over nbytes of the current device's arena at offset."""
        home = self._home(self._device_now())
        if home.base is None or not 0 <= offset <= home.arena.capacity - nbytes:
            raise ValueError(f"coop: no {nbytes} bytes at offset {offset} of the reservation")
        memory = UnownedMemory(home.base + offset, nbytes, home, device_id=home.device_id)
        return cupy.ndarray((nbytes,), cupy.uint8, MemoryPointer(memory, 0))

    def install(self):
        """Route this thread's CuPy allocations to the pool until uninstall()."""
        scope = cupy.cuda.using_allocator(self)
        scope.__enter__()
        self._scopes.__dict__.setdefault("stack", []).append(scope)

    def uninstall(self):
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
        saved = getattr(scopes, "placement", EXPENSIVE)
        scopes.placement = placement
        self.install()
        try:
            yield self
        finally:
            self.uninstall()
            scopes.placement = saved

    # -- cupy.cuda.MemoryPool --
    def malloc(self, size):
        """A MemoryPointer to ``size`` bytes at base + offset of a new arena piece."""
        device_id = self._device_now()
        if size == 0:
            # No piece; a null pointer needs an explicit device id (else CuPy asks the driver).
            self._check_device(device_id)
            return MemoryPointer(UnownedMemory(0, 0, None, device_id=device_id), 0)
        home = self._home(device_id)
        if home.base is None:
            self._reserve_home(home)
        elif home.stream_ptr is not None:
            stream_ptr = _current_stream_ptr(device_id)
            if stream_ptr != home.stream_ptr:
                raise RuntimeError(
                    f"coop: device {device_id}'s pool serves stream {home.stream_ptr:#x} (seen at "
                    f"its first allocation) but this allocation runs on stream {stream_ptr:#x}; "
                    f"coop reuses memory in allocation order, not stream order. Allocate on one "
                    f"stream, or synchronize, free every array and call free_all_blocks() first")
        try:
            offset = home.arena.request(size, getattr(self._scopes, "placement", EXPENSIVE))
        except OutOfMemoryError as err:
            raise CupyOutOfMemoryError(str(err), err.request, err.budget, err.free,
                                       err.largest_free) from None
        memory = UnownedMemory(home.base + offset, size, _Piece(home, offset), device_id=device_id)
        return MemoryPointer(memory, 0)

    __call__ = malloc  # set_allocator(pool): the allocator and its stats are one object

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
        """The reservation on the current device (budget rounded down to 512), 0 before it."""
        stats = self._stats()
        return stats["capacity"] if stats else 0

    def n_free_blocks(self):
        """Free pieces of the current device's arena; 0 while nothing is reserved."""
        stats = self._stats()
        return stats["free_pieces"] if stats else 0

    def get_limit(self):
        """The budget in bytes (of the current device, for a percentage budget)."""
        return self._fixed if self._fixed is not None else self._budget_of(self._device_now())

    def set_limit(self, size=None, fraction=None):
        """The budget is fixed when the pool is made: only ``set_limit(size=get_limit())`` passes."""
        limit = self.get_limit()
        if fraction is None and size == limit:
            return
        raise ValueError(f"coop: the budget is fixed when the allocator is made ({limit} bytes); "
                         f"set_limit(size={size!r}, fraction={fraction!r}) cannot change it. "
                         f"Make a new coop.allocator(budget) instead")

    def free_all_blocks(self, stream=None):
        """Return the current device's reservation to the driver, if no piece is in use.

        With pieces in use there is nothing to release (the arena is one allocation) and this
        does nothing. The arena itself (storages, counters) is kept; the next malloc reserves
        again and records its stream anew. ``stream`` is accepted for CuPy's signature and
        ignored: a pool serves one stream per device. With ``base=`` nothing reaches the driver.
        """
        home = self._homes.get(self._device_now())
        if home is None:
            return
        with self._lock:
            if home.base is not None and home.arena.stats()["used_bytes"] == 0:
                home.base = None
                home.stream_ptr = None
                home.memory = None  # cudaFree, unless base= (then it is already None)


def allocator(budget, device=None, base=None):
    """A pool for ``cupy.cuda.set_allocator``: every CuPy allocation lives within ``budget``.

    ``budget``: bytes or a string ("6GiB", "80%" of the device's memory); ``device``: serve only
    that device; ``base``: use caller-owned memory at that address (no driver calls), on
    ``device`` or device 0. Eviction needs a runtime: ``coop.Runtime(pool, policy=...)``.
    """
    return CoopMemoryPool(budget, device, base)


Backend.register(CoopMemoryPool)
