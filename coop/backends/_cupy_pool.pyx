# distutils: language = c++
"""The CuPy pool's allocation path in C (coop/backends/cupy.py is the rest of the pool).

``serve`` places one request in the arena and wraps the piece as CuPy wants it:
``MemoryPointer(UnownedMemory(base + offset, n, owner=piece, device_id), 0)``; the ``PieceOwner``
owner frees the piece from ``__dealloc__`` when CuPy drops the last view. CuPy ships no .pxd for
its memory module (its class layouts change between versions), so its classes are called
through Python, from C. Imported only by the CuPy backend: importing it imports CuPy.

Layer: coop.backends; cimports the core only.
"""
cimport cython

import sys

from cupy.cuda import memory_hook
from cupy.cuda.memory import MemoryPointer, UnownedMemory

from coop._core cimport Arena
from coop.backends import streams

cdef object _has_hooks = memory_hook._has_memory_hooks
cdef object _is_finalizing = sys.is_finalizing
cdef object _get_hooks = memory_hook.get_memory_hooks


@cython.no_gc_clear
cdef class PieceOwner:
    """Owner of one arena piece: CuPy drops it with the piece's last view, which frees it.

    Its free may run inside an eviction (the runtime drops the victims' last views from the
    arena's evict callback): the core allows that re-entry under the GIL.

    The garbage collector never clears it (no_gc_clear): an array caught in a reference cycle
    still frees its piece, into an arena the collector leaves intact too (the core's arena is
    no_gc_clear as well). Its free reads nothing from ``home`` but the stream order and its
    lock, which a collected pool may have lost (then there is nothing to order).

    ``copying``: a copy on the copy stream that the current stream does not wait for may
    still read the piece (a copy out ahead, ``to_host(array, ahead=True)``) or write it (a
    copy back ahead, ``from_host(copy, placement, ahead=True)``); its free then makes the
    piece's stream wait for that copy first (``coop.backends.streams.await_copy``)."""
    cdef readonly object home          # the pool's _DeviceArena: keeps arena and memory alive
    cdef Arena arena                   # home.arena, for the C free
    cdef readonly size_t offset        # the piece's offset in the arena
    cdef readonly size_t nbytes        # its rounded size, as CuPy's free hooks report it
    cdef public object stream_key      # the stream its free is ordered on: the one it was
                                       # allocated on, or the one a move read it on last
    cdef readonly Py_ssize_t memory_id # id() of its UnownedMemory, the hooks' pmem_id
    cdef readonly size_t ptr           # the piece's address (base + offset), for the hooks
    cdef readonly int device_id        # its device, for the hooks
    cdef public object copying         # the event of a copy ahead that may still read or write
                                       # the piece (None: none): its free orders reuse after it

    def __dealloc__(self):
        if self.arena is None:
            return
        if _has_hooks():
            hooks = _get_hooks()
            if hooks:
                info = dict(device_id=self.device_id, mem_size=self.nbytes,
                            mem_ptr=self.ptr, pmem_id=self.memory_id)
                for hook in hooks.values():
                    hook.free_preprocess(**info)
                try:
                    self._free()
                finally:
                    for hook in hooks.values():
                        hook.free_postprocess(**info)
                return
        self._free()

    cdef _free(self):
        home = self.home
        copying, self.copying = self.copying, None
        if _is_finalizing():
            # the interpreter is exiting: the driver may be unloading, and nothing will run
            # on the piece again (as CuPy's own pool frees then)
            self.arena.c_free(self.offset)
            return
        try:
            if copying is not None:
                # a copy ahead may still read or write the piece: whoever gets it next waits
                # for it
                # (a collected home has lost its slots: its memory goes with it)
                lock = getattr(home, "lock", None)
                if lock is not None:
                    with lock:
                        try:
                            streams.await_copy(home, self.stream_key, copying)
                        except BaseException:
                            # the wait failed (a driver error; an event the collector
                            # destroyed first, in a cycle): the whole device then, and report
                            if self.stream_key is not None:
                                streams.synchronize(home.device_id)
                            raise
        finally:    # the piece is freed even if a driver call failed
            # several streams: the free is counted for stream ordering before the piece goes
            # back, so that a stream another thread serves it to waits for it
            order = getattr(home, "order", None)   # a collected home has lost its slots
            try:
                if order is not None:
                    with home.lock:
                        if home.order is not None:
                            home.order.on_free(self.stream_key)
            finally:
                self.arena.c_free(self.offset)


def adopt(home, Arena arena, size_t base, size_t offset, size_t nbytes, stream_key,
          int device_id):
    """A MemoryPointer owning the used piece at offset, already taken in the arena (a move's
    destination): freed, like serve's, when CuPy drops its last view."""
    cdef PieceOwner piece = PieceOwner.__new__(PieceOwner)
    piece.home = home
    piece.arena = arena
    piece.offset = offset
    piece.nbytes = arena.request_size(nbytes)
    piece.stream_key = stream_key
    piece.ptr = base + offset
    piece.device_id = device_id
    memory = UnownedMemory(base + offset, nbytes, piece, device_id)
    piece.memory_id = id(memory)
    return MemoryPointer(memory, 0)


def serve(home, Arena arena, size_t base, size_t nbytes, int placement, stream_key,
          int device_id):
    """A MemoryPointer to a new piece of nbytes (> 0) at base + offset (OutOfMemoryError from
    the arena when nothing fits after eviction)."""
    cdef Py_ssize_t offset = arena.c_request(nbytes, placement)
    return adopt(home, arena, base, offset, nbytes, stream_key, device_id)
