"""Stream order for the CuPy pool (the rule of RMM's stream-ordered pools).

Any stream may allocate from the pool. A piece carries the stream it was allocated on; CuPy frees
it when its last view dies, whatever the stream then. Memory freed on stream A is reused on A at
once (A's order protects it); before another stream B receives memory after frees on A, B waits
(``cudaStreamWaitEvent``) on an event recorded on A after those frees. Per-thread default streams
(``CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1``) share one handle but are distinct streams, one per
thread. ``StreamOrder`` is one device's bookkeeping; the pool makes it when a second stream
allocates. The driver calls are the functions below, which tests replace with fakes.
"""
import itertools
import threading

import cupy

__all__ = ["PER_THREAD_STREAM", "StreamOrder", "current_stream", "thread_number"]

PER_THREAD_STREAM = cupy.cuda.runtime.streamPerThread  # the handle every thread's PTDS shares


# ---- the driver (tests replace these) ----------------------------------------------------------

_threads = threading.local()
_thread_numbers = itertools.count(1)


def thread_number():
    """This thread's number, never reused (thread idents are, once a thread ends)."""
    try:
        return _threads.number
    except AttributeError:
        number = _threads.number = next(_thread_numbers)
        return number


def current_stream(device_id):
    """(key, stream) of the current stream: per-thread default streams share one handle, so
    their key also names the thread (CuPy's own pool keys them by thread too)."""
    stream = cupy.cuda.get_current_stream(device_id)
    ptr = stream.ptr
    return ((PER_THREAD_STREAM, thread_number()) if ptr == PER_THREAD_STREAM else ptr), stream


def new_event():
    return cupy.cuda.Event(disable_timing=True)


def record(event, stream):
    event.record(stream)


def wait(stream, event):
    stream.wait_event(event)


def synchronize(device_id):
    cupy.cuda.runtime.deviceSynchronize()  # the device is current: malloc runs on it


class StreamOrder:
    """One device's stream bookkeeping, made when a second stream allocates.

    Per stream key: its stream, one event, ``freed`` (pieces freed on it so far) and
    ``recorded`` (how many of those the event's last record covers). ``waited[b][a]``: how many
    of a's frees stream b has waited for. Before b gets memory, it waits for every other
    stream's frees it has not waited for yet (conservative: whichever piece it gets). The event
    of a stream is recorded lazily, when a waiter needs it (a record later than the frees
    covers them); a per-thread default stream can only be recorded from its own thread, so its
    frees are recorded at the free, and one freed elsewhere makes the next waiter synchronize
    the device. All under the pool's lock (frees come from any thread).
    """
    __slots__ = ("streams", "events", "freed", "recorded", "waited", "synced", "device_id")

    def __init__(self, device_id, key, stream):
        self.device_id = device_id
        self.streams = {key: stream}   # every stream served since the reservation (kept alive)
        self.events = {}               # key -> its event, made at its first record
        self.freed = {key: 1}          # frees before this bookkeeping existed: assume some
        self.recorded = {key: 0}
        self.waited = {}               # waiter key -> {key: frees of key it waited for}
        self.synced = {}               # key -> its frees complete at the last device sync

    def add(self, key, stream):
        if key not in self.streams:
            self.streams[key] = stream
            self.freed[key] = self.recorded[key] = 0

    def on_free(self, key):
        freed = self.freed[key] = self.freed.get(key, 0) + 1
        if isinstance(key, tuple) and key[1] == thread_number():
            self._record(key, freed)   # its own thread: the only one that can record it

    def _record(self, key, freed):
        event = self.events.get(key)
        if event is None:
            event = self.events[key] = new_event()
        record(event, self.streams[key])
        self.recorded[key] = freed

    def before_malloc(self, key, stream):
        """Make stream ``key`` wait for the frees of every other stream (see the class)."""
        self.add(key, stream)
        waited = self.waited.setdefault(key, {})
        synced = self.synced
        me = thread_number()
        pending = []
        for other, freed in self.freed.items():
            if other == key or freed <= max(waited.get(other, 0), synced.get(other, 0)):
                continue
            if self.recorded[other] < freed:
                if isinstance(other, tuple) and other[1] != me:
                    # another thread's per-thread stream, freed outside it: no handle reaches
                    # it from here, so wait for the whole device instead
                    synchronize(self.device_id)
                    self.synced = dict(self.freed)
                    return
                self._record(other, freed)
            pending.append(other)
        for other in pending:
            wait(stream, self.events[other])
            waited[other] = self.recorded[other]
