# distutils: language = c++
"""NumPy's data allocations served from a coop arena: a NEP 49 memory handler.

``HostBackend`` owns one host buffer of ``capacity`` bytes and the ``coop.Arena`` that cuts it
into pieces; while it is installed, every NumPy array *data* allocation of the current context
(0-d arrays and ``np.empty(0)`` included) takes a piece of that buffer, and evicts through the
runtime's callback when none fits.

Where the handler applies (NumPy keeps it in a contextvar):
- ``install()`` / ``with backend:`` set it for the current thread's current context only. A thread
  started inside the block starts with NumPy's default handler (so does a fresh
  ``contextvars.Context()``; copies of the current one inherit the handler). Install the backend
  in each thread that should use it.
- Each array remembers the handler that allocated it, so an array made before ``install()`` is
  freed by NumPy's default handler, and an arena array that outlives ``uninstall()`` (or moves to
  another thread) is still freed into the arena. Its capsule keeps the backend alive until then.
- Out of memory: NumPy replaces the handler's error with its own ``MemoryError`` ("Unable to
  allocate ..."), so the handler keeps the real reason in ``last_error`` (one per thread), and
  leaving a ``with`` block re-raises it (``coop.OutOfMemoryError``, whose message names the
  budget) from NumPy's.

The GIL is the lock: every handler function takes it (NumPy calls them holding it anyway), and
the arena calls no Python code while its structures are inconsistent.

Layer: coop.backends; cimports and imports the core, imports coop.backends.base; nothing above.
"""
cimport cython
from cpython.pycapsule cimport PyCapsule_GetContext, PyCapsule_GetPointer, PyCapsule_New
from cpython.pycapsule cimport PyCapsule_SetContext
from cpython.pythread cimport PyThread_get_thread_ident
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdint cimport uint8_t, uintptr_t
from libc.stdlib cimport free as libc_free
from libc.string cimport memcpy, memmove, memset, strncpy

cimport numpy as cnp

from coop._core cimport Arena

import contextvars
import warnings

import numpy

from coop._core import EXPENSIVE
from coop.backends.base import Backend
from coop.errors import HostMemoryError

cnp.import_array()

cdef extern from "<stdlib.h>" nogil:
    int posix_memalign(void** memptr, size_t alignment, size_t size)

cdef extern from "numpy/ndarraytypes.h":
    ctypedef struct PyDataMemAllocator:
        void* ctx
        void* (*malloc)(void* ctx, size_t size) noexcept nogil
        void* (*calloc)(void* ctx, size_t nelem, size_t elsize) noexcept nogil
        void* (*realloc)(void* ctx, void* ptr, size_t new_size) noexcept nogil
        void (*free)(void* ctx, void* ptr, size_t size) noexcept nogil

    ctypedef struct PyDataMem_Handler:
        char name[127]
        uint8_t version
        PyDataMemAllocator allocator

NAME = "coop_host"
cdef const char* CAPSULE_NAME = "mem_handler"   # NumPy accepts only capsules of this name


cdef void _release_backend(object capsule) noexcept:
    """Capsule destructor: drop the reference that kept the handler's backend alive."""
    cdef void* backend = PyCapsule_GetContext(capsule)
    if backend != NULL:
        Py_DECREF(<object>backend)


@cython.no_gc_clear
cdef class HostBackend:
    """A host buffer, its arena, and the NumPy memory handler that allocates from them.

    The garbage collector never clears it (no_gc_clear): NumPy's frees reach it from arrays
    that may die in the same collection, and need its arena (the core's arena is no_gc_clear
    too)."""

    cdef readonly Arena arena          # pieces of buf; the handler's frees come back here
    cdef char* buf                     # capacity bytes aligned to the alignment; NULL once freed
    cdef PyDataMem_Handler handler     # ctx is self; every capsule of it holds a reference to self
    cdef public int placement          # placement class of the allocations made now (placing())
    cdef dict errors                   # thread id -> why the handler last returned NULL in that
                                       # thread (NumPy drops it): last_error, per thread
    cdef object saved                  # ContextVar: handlers that install() replaced, innermost last
    cdef public object host_budget     # bytes a runtime's host tier may hold (None: no limit)
    cdef long long n_malloc, n_calloc, n_realloc, n_free   # handler calls, for tests and profiles
    cdef long long n_slow              # allocations that went through allocate_or_evict
    cdef long long n_foreign           # frees/reallocs of memory outside the buffer (ignored)
    cdef long long n_to_host, n_to_host_bytes, n_from_host, n_from_host_bytes  # the host tier's copies
    cdef Py_ssize_t next_at            # >= 0: the next allocation takes this used piece (a move)
    cdef unsigned long next_thread     # ... if made by this thread (the move's)
    cdef Py_ssize_t skip_free          # >= 0: the next free of memory at this offset frees nothing

    def __cinit__(self, nbytes, alignment=64):
        self.errors = {}
        if isinstance(alignment, int) and alignment < 16:
            raise ValueError(f"coop: a host arena's alignment must be at least 16 bytes (NumPy's "
                             f"own allocations are 16-byte aligned; 64 keeps SIMD loops, and so "
                             f"recomputed values, the same), got {alignment}")
        self.arena = Arena(nbytes, alignment)
        self.arena.managed_by = "coop.numpy_allocator"   # its arrays free their own pieces
        cdef void* mem = NULL
        cdef size_t align = max(self.arena.alignment, sizeof(void*))
        self.next_at = -1
        self.skip_free = -1
        if posix_memalign(&mem, align, self.arena.capacity) != 0:
            raise MemoryError(f"coop: cannot reserve the {self.arena.capacity}-byte host arena")
        self.buf = <char*>mem
        self.placement = EXPENSIVE
        strncpy(self.handler.name, NAME.encode(), 126)
        self.handler.version = 1
        self.handler.allocator.ctx = <void*>self
        self.handler.allocator.malloc = _malloc
        self.handler.allocator.calloc = _calloc
        self.handler.allocator.realloc = _realloc
        self.handler.allocator.free = _free
        self.saved = contextvars.ContextVar(f"coop_host_saved_{id(self):x}", default=())

    def __dealloc__(self):
        if self.buf == NULL:
            return
        if self.arena is not None and self.arena.used_bytes:
            # pieces still handed out: something may still read them, so leak rather than crash
            warnings.warn(f"coop: host arena freed with {self.arena.used_bytes} bytes in use; "
                          "leaking its buffer", ResourceWarning)
            return
        libc_free(self.buf)
        self.buf = NULL

    # ---- protocol -----------------------------------------------------------------------------

    @property
    def xp(self):
        return numpy

    @property
    def alignment(self):
        return self.arena.alignment

    @property
    def name(self):
        return NAME

    @property
    def base(self):
        """Address of the buffer's first byte (arena offset 0)."""
        return <uintptr_t>self.buf

    def offset_of(self, array):
        """Arena offset of the piece holding the array's memory (also for views), else None."""
        owner = array
        while isinstance(owner, cnp.ndarray) and owner.base is not None:
            owner = owner.base
        if not isinstance(owner, cnp.ndarray):
            return None
        cdef size_t size
        cdef int slot
        cdef Py_ssize_t offset = self._piece_at(cnp.PyArray_DATA(<cnp.ndarray>owner), &size, &slot)
        return offset if offset >= 0 else None

    def calls(self):
        """Counts of the handler's calls since construction."""
        return {"malloc": self.n_malloc, "calloc": self.n_calloc, "realloc": self.n_realloc,
                "free": self.n_free, "slow": self.n_slow, "foreign": self.n_foreign}

    # ---- installing ---------------------------------------------------------------------------

    def install(self):
        """Make this backend NumPy's memory handler in the current context (nests)."""
        capsule = PyCapsule_New(<void*>&self.handler, CAPSULE_NAME, _release_backend)
        PyCapsule_SetContext(capsule, <void*>self)
        Py_INCREF(self)   # released by the capsule's destructor, after the last array using it
        previous = cnp.PyDataMem_SetHandler(capsule)
        self.saved.set(self.saved.get() + (previous,))

    def uninstall(self):
        """Restore the handler that the matching install() replaced, in this context."""
        stack = self.saved.get()
        current = cnp.PyDataMem_GetHandler()
        if not stack or PyCapsule_GetPointer(current, CAPSULE_NAME) != <void*>&self.handler:
            raise RuntimeError(
                "coop: this host backend is not NumPy's current memory handler in this thread; "
                "uninstall in the reverse order of install, in the thread that installed it")
        cdef Py_ssize_t depth = len(stack)
        cnp.PyDataMem_SetHandler(stack[depth - 1])
        self.saved.set(stack[:depth - 1])

    def placing(self, int placement):
        """A context: install the handler, its allocations placed with this placement class
        (EXPENSIVE, CHEAP or LOWEST); the previous class is restored on every exit."""
        cdef _Placing ctx = _Placing.__new__(_Placing)
        ctx.backend = self
        ctx.placement = placement
        return ctx

    # ---- what the runtime and the array executor ask (coop.backends.base.Backend) ------------

    @property
    def logs_allocations(self):
        """True: a recorded trace keeps the kernels' own allocations (docs/trace-format.md)."""
        return True

    @property
    def can_move(self):
        return True

    @property
    def can_slide(self):
        return True

    def bound(self):
        return self

    def device_name(self):
        return None

    def event_timer(self):
        """None: kernels on the host are timed with host timers."""
        return None

    def address_of(self, cnp.ndarray array):
        return <uintptr_t>cnp.PyArray_DATA(array)

    def memory_held(self, array):
        """False: a NumPy array is its memory's only owner (its bases are counted apart)."""
        return False

    def copy_to(self, cnp.ndarray array, Py_ssize_t offset):
        """A C-ordered copy of array on the used, anonymous piece at offset (a move's
        destination), or None when the new array did not land there (NumPy allocates at least
        one byte for every array, so that is not expected: the move is then refused)."""
        cdef cnp.ndarray moved = self._array_on(array, offset)
        if self.offset_of(moved) != offset:
            return None
        numpy.copyto(moved, array, casting="no")
        return moved

    @property
    def can_offload(self):
        return True

    @property
    def can_copy_ahead(self):
        # to_host's copy is done when it returns: the array may stay in use
        return True

    def to_host(self, array, ahead=False):
        """The host tier's copy of C-contiguous array: its bytes copied into memory outside
        the arena (a bytearray, which NumPy's memory handler never sees), as an array of its
        shape and dtype. The copy is counted (host_copies, host_bytes_copied). It is done
        when this returns, so a copy out ahead (ahead) is the same copy. HostMemoryError when
        the host has no memory for it (the engine then treats the tier as full)."""
        if not array.flags.c_contiguous:
            raise ValueError(f"to_host needs a C-contiguous array, got shape {array.shape} with "
                             f"strides {array.strides}; copy it first (numpy.ascontiguousarray)")
        if array.dtype.hasobject:
            raise ValueError(f"to_host copies bytes, and {array.dtype} elements are references")
        try:
            buf = bytearray(array.nbytes)
        except MemoryError:
            raise HostMemoryError(
                f"coop: the host has no memory for a {array.nbytes:,}-byte host copy; give "
                f"the runtime a host_budget the host can hold, or free host memory") from None
        copy = numpy.frombuffer(buf, dtype=array.dtype).reshape(array.shape) \
            if array.nbytes else numpy.frombuffer(buf, dtype=numpy.uint8)[:0].view(
                array.dtype).reshape(array.shape)
        numpy.copyto(copy, array, casting="no")
        self.n_to_host += 1
        self.n_to_host_bytes += array.nbytes
        return copy

    def from_host(self, copy, int placement, bint ahead=False):
        """A new C-contiguous array in the arena (placement's class) holding copy's bytes. The
        copy is done when this returns, so a copy back ahead (ahead) is the same copy."""
        with self.placing(placement):
            array = numpy.empty(copy.shape, copy.dtype)
        numpy.copyto(array, copy, casting="no")
        self.n_from_host += 1
        self.n_from_host_bytes += array.nbytes
        return array

    def await_host(self, copy):
        """Nothing to wait for: from_host's copy is done when it returns."""
        return None

    def free_host(self, copy):
        """Nothing to do: the copy's bytearray goes with its last reference."""
        return None

    @property
    def host_copies(self):
        """(copies to the host tier, bytes, copies back, bytes), for tests and the examples."""
        return (self.n_to_host, self.n_to_host_bytes, self.n_from_host, self.n_from_host_bytes)

    def slide(self, list arrays, Py_ssize_t index, Py_ssize_t src, Py_ssize_t dst):
        """Move arrays[index]'s bytes down from offset src to dst (memmove: the ranges may
        overlap) under a new array at dst, which replaces it; the old array dies here and its
        free frees nothing (the arena slides the piece). False when the new array did not land
        at dst (not expected; the old array stays). The caller must hold no other reference to
        the old array."""
        memory = arrays[index]
        cdef cnp.ndarray moved = self._array_on(memory, dst)
        if <char*>cnp.PyArray_DATA(moved) != self.buf + dst:
            return False          # it landed elsewhere (not expected): the copy stays out
        memmove(self.buf + dst, self.buf + src, memory.nbytes)
        self.skip_free = src
        arrays[index] = moved
        del memory                # its last reference: the old array dies, freeing nothing
        if self.skip_free >= 0:
            self.skip_free = -1
            raise RuntimeError(f"the array at offset {src} outlived its slide: something else "
                               "holds it")
        return True

    cdef cnp.ndarray _array_on(self, memory, Py_ssize_t offset):
        """A new C-ordered array like memory, on the used, anonymous piece at offset unless
        it lands elsewhere (not expected: NumPy allocates at least one byte): the caller checks
        where it landed."""
        with self.placing(EXPENSIVE):
            # the next allocation of this thread (numpy.empty_like runs Python code first: a
            # thread switch may let another thread with the backend installed allocate)
            self.next_at = offset
            self.next_thread = PyThread_get_thread_ident()
            try:
                return numpy.empty_like(memory, order="C")
            finally:
                self.next_at = -1

    def array_at(self, Py_ssize_t offset, Py_ssize_t nbytes):
        """A flat uint8 array over nbytes of the buffer at offset (it keeps the backend alive,
        not the piece: the caller owns the piece's lifetime)."""
        if self.buf == NULL or offset < 0 or nbytes < 0 or \
                <size_t>(offset + nbytes) > self.arena.capacity:
            raise ValueError(f"coop: no {nbytes} bytes at offset {offset} of the host arena")
        cdef cnp.npy_intp n = nbytes
        cdef cnp.ndarray out = cnp.PyArray_SimpleNewFromData(1, &n, cnp.NPY_UINT8,
                                                             <void*>(self.buf + offset))
        cnp.PyArray_SetBaseObject(out, self)
        Py_INCREF(self)       # PyArray_SetBaseObject steals a reference
        return out

    def __enter__(self):
        self._clear_error()
        self.install()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.uninstall()
        _reraise_real_error(self, exc)
        return False

    def __repr__(self):
        return (f"<coop.HostBackend capacity={self.arena.capacity} "
                f"used={self.arena.used_bytes}>")

    # ---- allocation (GIL held) ----------------------------------------------------------------

    cdef Py_ssize_t _piece_at(self, const void* ptr, size_t* size, int* slot) noexcept:
        """Offset of the used piece starting at ptr, its size and storage slot (-1: anonymous)
        in size and slot; or -1 (outside the buffer, unknown, free).

        Asks the arena (c_used_piece): realloc needs the old piece's size, which NumPy does not
        pass.
        """
        cdef uintptr_t addr = <uintptr_t>ptr, start = <uintptr_t>self.buf
        if self.buf == NULL or addr < start or addr >= start + self.arena.capacity:
            return -1
        if self.arena.c_used_piece(addr - start, size, slot) < 0:
            return -1
        return <Py_ssize_t>(addr - start)

    cdef char* _allocate(self, size_t nbytes) noexcept:
        """Best fit without Python calls; else the eviction loop. NULL (and last_error) on failure."""
        cdef Py_ssize_t offset = -1
        if self.next_at >= 0 and self.next_thread == PyThread_get_thread_ident():
            offset = self.next_at
            self.next_at = -1
            return self.buf + offset
        if nbytes <= self.arena.capacity:
            offset = self.arena.c_allocate(self.arena.request_size(nbytes), self.placement, -1)
            if offset >= 0:
                self.arena.c_log_request(nbytes)
        if offset < 0:
            offset = self._allocate_slow(nbytes)
            if offset < 0:
                return NULL
        return self.buf + offset

    cdef Py_ssize_t _allocate_slow(self, size_t nbytes) noexcept:
        """Nothing fits: the eviction loop (holding the lock of the runtime whose engine owns the
        arena: the core's rule, Arena.c_request). No garbage collection first (CuPy's pool
        collects): a failure here is how a kernel's temporaries that do not fit reach the
        runtime, which then makes room and runs the kernel again, and a collection at each
        would cost more than the op."""
        self.n_slow += 1
        try:
            return self.arena.c_request(nbytes, self.placement)
        except BaseException as error:   # nothing may propagate into NumPy's C code
            self._fail(error)
            return -1

    cdef void _fail(self, error) noexcept:
        """The handler returns NULL in this thread: error is why (last_error)."""
        try:
            self.errors[PyThread_get_thread_ident()] = error
        except BaseException:
            pass        # no memory for the entry: NumPy's own MemoryError stands alone

    cdef inline void _clear_error(self) noexcept:
        """This thread's last_error goes (a block or an op starts)."""
        if self.errors:                  # empty almost always: no Python call on the hot path
            self.errors.pop(PyThread_get_thread_ident(), None)

    @property
    def last_error(self):
        """Why the handler last returned NULL in the calling thread (NumPy replaces it with
        its own MemoryError), or None; per thread, so that another thread's failure (the
        backend serves every thread it is installed in) neither hides nor replaces it. Leaving
        a ``with`` block or an op's ``placing()`` re-raises it and clears it."""
        return self.errors.get(PyThread_get_thread_ident()) if self.errors else None

    @last_error.setter
    def last_error(self, error):
        if error is None:
            self._clear_error()
        else:
            self._fail(error)


try:
    from numpy._core._exceptions import _ArrayMemoryError
except ImportError:          # NumPy 1.x
    from numpy.core._exceptions import _ArrayMemoryError


cdef int _reraise_real_error(HostBackend backend, exc) except -1:
    """Leaving a block: raise the handler's last error (the real reason) from the MemoryError
    NumPy raised in its place. Only NumPy's own errors stand for it (its "Unable to allocate"
    class, or a bare MemoryError with no message or NumPy's "cannot allocate ..."): any other
    MemoryError (the program's own, raised after it handled the earlier failure) propagates
    as it is."""
    if not backend.errors:
        return 0
    error = backend.errors.pop(PyThread_get_thread_ident(), None)
    if error is not None and exc is not error and (type(exc) is _ArrayMemoryError or (
            type(exc) is MemoryError and exc.__context__ is None and (
                not exc.args or str(exc.args[0]).startswith("cannot allocate")))):
        raise error from exc
    return 0


cdef class _Placing:
    """HostBackend.placing's context (a C class: it runs around every kernel). It keeps the
    handler it replaced itself, so entering costs one capsule and two handler swaps."""
    cdef HostBackend backend
    cdef int placement
    cdef int saved
    cdef object previous       # the handler this context replaced

    def __enter__(self):
        cdef HostBackend backend = self.backend
        capsule = PyCapsule_New(<void*>&backend.handler, CAPSULE_NAME, _release_backend)
        PyCapsule_SetContext(capsule, <void*>backend)
        Py_INCREF(backend)   # released by the capsule's destructor, after the last array using it
        self.saved = backend.placement
        backend.placement = self.placement
        backend._clear_error()
        self.previous = cnp.PyDataMem_SetHandler(capsule)
        return backend

    def __exit__(self, exc_type, exc, tb):
        cdef HostBackend backend = self.backend
        cnp.PyDataMem_SetHandler(self.previous)
        self.previous = None
        backend.placement = self.saved
        _reraise_real_error(backend, exc)
        return False


Backend.register(HostBackend)


cdef void* _malloc(void* ctx, size_t nbytes) noexcept with gil:
    cdef HostBackend backend = <HostBackend>ctx
    backend.n_malloc += 1
    return backend._allocate(nbytes)


cdef void* _calloc(void* ctx, size_t nelem, size_t elsize) noexcept with gil:
    cdef HostBackend backend = <HostBackend>ctx
    backend.n_calloc += 1
    if elsize and nelem > (<size_t>-1) // elsize:
        backend._fail(MemoryError(f"coop: calloc of {nelem} x {elsize} bytes overflows"))
        return NULL
    cdef char* ptr = backend._allocate(nelem * elsize)
    if ptr != NULL:
        memset(ptr, 0, nelem * elsize)
    return ptr


cdef void* _realloc(void* ctx, void* ptr, size_t nbytes) noexcept with gil:
    cdef HostBackend backend = <HostBackend>ctx
    backend.n_realloc += 1
    if ptr == NULL:
        return backend._allocate(nbytes)
    cdef size_t old_size
    cdef int slot
    cdef Py_ssize_t old_offset = backend._piece_at(ptr, &old_size, &slot)
    if old_offset < 0:
        backend.n_foreign += 1
        backend._fail(ValueError(
            f"coop: realloc of {<uintptr_t>ptr:#x}, which this arena did not allocate"))
        return NULL
    if slot >= 0:
        # moving it would evict the storage under the runtime's feet
        backend._fail(ValueError(
            "coop: cannot resize an array whose memory the runtime tracks; copy it instead"))
        return NULL
    cdef Py_ssize_t offset
    cdef char* moved
    if nbytes <= old_size:
        if backend.arena.request_size(nbytes) == old_size:
            return ptr
        # shrink: move if a smaller piece is free now, else keep the larger one
        offset = backend.arena.c_allocate(backend.arena.request_size(nbytes), backend.placement, -1)
        if offset < 0:
            return ptr
        moved = backend.buf + offset
        backend.arena.c_log_request(nbytes)
    else:
        moved = backend._allocate(nbytes)
        if moved == NULL:
            return NULL
    memcpy(moved, ptr, min(old_size, nbytes))
    backend.arena.c_free(old_offset)
    return moved


cdef void _free(void* ctx, void* ptr, size_t size) noexcept with gil:
    cdef HostBackend backend = <HostBackend>ctx
    backend.n_free += 1
    if ptr == NULL:
        return
    if backend.skip_free >= 0 and <char*>ptr == backend.buf + backend.skip_free:
        backend.skip_free = -1
        return
    cdef size_t size_in_arena
    cdef int slot
    if backend._piece_at(ptr, &size_in_arena, &slot) < 0:
        # NumPy sends each array's frees to the handler that allocated it; never expected
        backend.n_foreign += 1
        return
    backend.arena.c_free(<uintptr_t>ptr - <uintptr_t>backend.buf)
