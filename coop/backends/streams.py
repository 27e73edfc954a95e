"""Stream order for the CuPy pool (the rule of RMM's stream-ordered pools).

Any stream may allocate from the pool. A piece carries the stream it was allocated on; CuPy frees
it when its last view dies, whatever the stream then. Memory freed on stream A is reused on A at
once (A's order protects it); before another stream B receives memory after frees on A, B waits
(``cudaStreamWaitEvent``) on an event recorded on A after those frees. Per-thread default streams
(``CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1``) share one handle but are distinct streams, one per
thread. ``StreamOrder`` is one device's bookkeeping; the pool makes it when a second stream
allocates. ``on_copy_stream`` runs a copy to or from host memory on one of the device's copy
streams (one per direction, as the device has a copy engine each way, and a third for copies out
ahead of the pressure, issued in chunks), ordered with the current stream both ways by events; a
copy ahead one way only: the current stream runs on beside it, the
piece's free waits for it (``await_copy``), and a copy back ahead's reader waits for it first
(``await_arrival``). The driver calls are the functions below, which tests replace with fakes.
"""
import itertools
import threading
import weakref

import cupy

__all__ = ["BACK", "OUT", "PER_THREAD_STREAM", "StreamOrder", "await_arrival", "await_copy",
           "copy_stream", "current_stream", "on_copy_stream", "on_device", "thread_number"]

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


def per_thread_stream():
    """The calling thread's per-thread default stream (its handle resolves against the current
    device)."""
    return cupy.cuda.Stream.ptds


def new_event():
    return cupy.cuda.Event(disable_timing=True)


def record(event, stream):
    event.record(stream)


def wait(stream, event):
    stream.wait_event(event)


def on_device(device_id):
    """A context in which device_id is the current device. A stream handle that names the
    legacy or per-thread default stream (0, 2) resolves against the current device, and a free
    may run with any device current."""
    return cupy.cuda.Device(device_id)


def synchronize(device_id):
    with on_device(device_id):
        cupy.cuda.runtime.deviceSynchronize()


def done(event):
    return event.done       # cudaEventQuery: never waits


def new_copy_stream(device_id, direction):
    """A new stream for device_id's copies in direction (OUT or BACK)."""
    with cupy.cuda.Device(device_id):
        # non-blocking: the legacy default stream does not serialize with it
        return cupy.cuda.Stream(non_blocking=True)


_HERE = object()                 # a liveness still to judge, on the calling thread


def liveness(key, stream):
    """What tells whether key's stream can still run work: a weak reference to it (to its
    thread, for a per-thread default stream: they share one Stream object), or None when it
    cannot be referenced weakly (then it is kept)."""
    try:
        return weakref.ref(threading.current_thread() if isinstance(key, tuple) else stream)
    except TypeError:
        return None


class StreamOrder:
    """One device's stream bookkeeping, made when a second stream allocates.

    Per stream key: its stream (held weakly where it can be: a stream the program dropped is
    forgotten), one event, ``freed`` (pieces freed on it so far) and ``recorded`` (how many of
    those the event's last record covers). ``waited[b][a]``: how many of a's frees stream b has
    waited for; ``synced[a]``: how many of a's frees are known complete (a device sync, or a's
    event found done), which no stream need wait for. Before b gets memory, it waits for every
    other stream's frees it has not waited for yet (conservative: whichever piece it gets).
    The event of a stream is recorded lazily, when a waiter needs it (a record later than the
    frees covers them); a per-thread default stream can only be recorded from its own thread,
    so its frees are recorded at the free, and frees no event can cover (another thread's
    per-thread stream, a stream gone) make the next waiter synchronize the device. Streams
    gone are forgotten when a new stream appears, once their frees are complete. All under
    the pool's lock (frees come from any thread).
    """
    __slots__ = ("streams", "alive", "events", "freed", "recorded", "waited", "synced",
                 "device_id")

    def __init__(self, device_id, key, stream, alive=_HERE):
        """key, stream: the first stream served; alive: its liveness (``liveness``), judged on
        its own thread when it allocated first (default: judged here)."""
        self.device_id = device_id
        self.streams = {}              # key -> its stream (None once it is gone)
        self.alive = {}                # key -> its liveness, or None (kept: held strongly)
        self.events = {}               # key -> its event, made at its first record
        self.freed = {}
        self.recorded = {}
        self.waited = {}               # waiter key -> {key: frees of key it waited for}
        self.synced = {}               # key -> its frees known complete
        self.add(key, stream, alive)
        self.freed[key] = 1            # frees before this bookkeeping existed: assume some

    def add(self, key, stream, alive=_HERE):
        """Know stream ``key`` from now on; alive: its liveness when judged elsewhere (on its
        own thread), else judged here, on the calling thread."""
        if key in self.streams and self._stream(key) is not None:
            return
        if key in self.streams:        # a new stream with a dead one's handle
            self._sync_if_pending(key)
            self._forget(key)
        self._sweep()
        if alive is _HERE:
            alive = liveness(key, stream)
        self.alive[key] = alive
        self.streams[key] = None if alive is not None and not isinstance(key, tuple) else stream
        self.freed.setdefault(key, 0)
        self.recorded[key] = 0

    def _stream(self, key):
        """key's stream, or None when it is gone (or was forgotten)."""
        if key not in self.alive:
            return None
        alive = self.alive[key]
        if alive is None:
            return self.streams[key]
        target = alive()
        if target is None:
            return None
        return self.streams[key] if isinstance(key, tuple) else target

    def _complete(self, key):
        freed = self.freed.get(key, 0)
        if freed <= self.synced.get(key, 0):
            return True
        event = self.events.get(key)
        if event is not None and self.recorded.get(key, 0) >= freed and done(event):
            self.synced[key] = freed
            return True
        return False

    def _sync_if_pending(self, key):
        if not self._complete(key):
            synchronize(self.device_id)
            self.synced = dict(self.freed)

    def _forget(self, key):
        for table in (self.streams, self.alive, self.events, self.freed, self.recorded,
                      self.synced, self.waited):
            table.pop(key, None)
        for waited in self.waited.values():
            waited.pop(key, None)

    def _sweep(self):
        """Forget the streams gone whose frees are complete."""
        for key in [k for k in self.streams if self._stream(k) is None]:
            if self._complete(key):
                self._forget(key)

    def on_free(self, key):
        freed = self.freed[key] = self.freed.get(key, 0) + 1
        if isinstance(key, tuple) and key[1] == thread_number() and key in self.streams:
            self._record(key, freed)   # its own thread: the only one that can record it

    def _record(self, key, freed):
        event = self.events.get(key)
        with on_device(self.device_id):
            if event is None:
                event = self.events[key] = new_event()
            record(event, self._stream(key))
        self.recorded[key] = freed

    def before_malloc(self, key, stream):
        """Make stream ``key`` wait for the frees of every other stream (see the class)."""
        self.add(key, stream)
        waited = self.waited.setdefault(key, {})
        synced = self.synced
        me = thread_number()
        pending = []
        # (a copy: a free the collector runs in the middle, of a stream swept, adds a key)
        for other, freed in list(self.freed.items()):
            if other == key or freed <= max(waited.get(other, 0), synced.get(other, 0)):
                continue
            if self.recorded.get(other, 0) < freed:
                if (isinstance(other, tuple) and other[1] != me) or \
                        self._stream(other) is None:
                    # another thread's per-thread stream freed outside it, or a stream gone:
                    # no handle records it from here, so wait for the whole device instead
                    synchronize(self.device_id)
                    self.synced = dict(self.freed)
                    return
                self._record(other, freed)
            elif self._complete(other):
                continue
            pending.append(other)
        for other in pending:
            wait(stream, self.events[other])
            waited[other] = self.recorded[other]


# ---- copies to and from host memory -------------------------------------------------------------

OUT, BACK, AHEAD = 0, 1, 2       # device to host, host to device, device to host ahead
_copy_streams = {}               # (device id, direction) -> its copy stream, made at first use
_copy_streams_lock = threading.Lock()


def copy_stream(device_id, direction=OUT):
    """The device's stream for copies to host memory (OUT) or from it (BACK), and for copies
    out ahead of the pressure (AHEAD): one each per device, made at the first use, kept for
    the process. A device has a copy engine each way, so a copy back (a prefetch) need not
    queue behind copies out; a copy out ahead, issued in chunks on its own stream, leaves the
    copy out made for room on OUT to the engine between its chunks, not behind all of it."""
    key = (device_id, direction)
    stream = _copy_streams.get(key)
    if stream is None:
        with _copy_streams_lock:
            stream = _copy_streams.get(key)
            if stream is None:
                stream = _copy_streams[key] = new_copy_stream(device_id, direction)
    return stream


def on_copy_stream(device_id, copy, hold=True, direction=OUT, after=()):
    """Enqueue ``copy(stream)`` on the device's copy stream for ``direction`` after the current
    stream's work so far (an event recorded on it) and after each event in ``after`` that is
    not done yet (copies on the other copy stream the copy must follow: the copy out that
    filled the host memory a copy back reads, a copy into or out of the same piece), and, with
    ``hold``, the current stream's later work after the copy (it waits on an event recorded
    after the copy); returns that event, done once the copy is (and, through the waits, once
    every event in ``after`` is).

    The wait on the current stream is what makes a piece freed right after a copy safe on that
    stream: the pool hands a freed piece out at once (frees are not stream ordered), and the
    next kernel on the current stream, or on a stream that waits for this one's frees
    (StreamOrder), runs only after the copy read or wrote it; a piece whose free is ordered on
    another stream (the one it was allocated on) is marked by the caller
    (``PieceOwner.copying``), so that its free makes that stream wait too (``await_copy``).
    Without ``hold`` (a copy out ahead, from a piece that stays in use; a copy back ahead, into
    a piece read only later) the current stream runs on beside the copy; the caller marks the
    piece, and a copy back's reader waits for it before it reads (``await_arrival``)."""
    # What CuPy does with these (cupy/cuda/stream.pyx, memory.pyx): Event.record(stream) is
    # runtime.eventRecord(event.ptr, stream.ptr); Stream.wait_event(event) is
    # runtime.streamWaitEvent(stream.ptr, event.ptr), which orders the stream's later work after
    # the event's last record (the wait is enqueued, the host does not block);
    # MemoryPointer.copy_to_host_async / copy_from_host_async(ptr, size, stream) is
    # runtime.memcpyAsync(..., stream.ptr), asynchronous only from pinned memory, and nothing at
    # all for size 0. No CuPy call here synchronizes the host.
    current = current_stream(device_id)[1]
    side = copy_stream(device_id, direction)
    ready = new_event()
    record(ready, current)
    wait(side, ready)
    for event in after:
        if event is not None and not done(event):
            wait(side, event)
    copy(side)
    finished = new_event()
    record(finished, side)
    if hold:
        wait(current, finished)
    return finished


def await_arrival(device_id, event):
    """A copy back ahead (``event``: done once the copy is) is about to be read: the current
    stream's later work waits for it (an enqueued wait: the host does not block); nothing
    when the device has passed it already."""
    if done(event):
        return
    wait(current_stream(device_id)[1], event)


def await_copy(home, key, event):
    """A piece of ``home`` (a pool's _DeviceArena) is being freed on stream ``key`` while a copy
    may still read or write it (``event``: done once the copy is): that stream's later work,
    which may be handed the piece at once, and every stream that waits for its frees
    (StreamOrder), wait for the copy first. A piece of a ``base=`` pool (no stream of its own:
    key None) and a stream that cannot be reached from here (gone, or another thread's
    per-thread default stream) order the current stream's work after the copy, or wait for the
    whole device. The wait is enqueued with the piece's device current (a free may run with
    any device current). Called under the pool's lock."""
    if done(event):
        return
    if key is None:             # a base= pool: no driver calls but the wait
        wait(current_stream(home.device_id)[1], event)
        return
    with on_device(home.device_id):
        current_key, current = current_stream(home.device_id)
        if key == current_key:
            wait(current, event)
            return
        stream = None
        if isinstance(key, tuple):
            if key[1] == thread_number():
                stream = per_thread_stream()    # this thread's own: reachable from here
        elif home.order is not None:
            stream = home.order._stream(key)
        elif key == home.stream_key:
            stream = home.stream
        if stream is None:
            synchronize(home.device_id)
            return
        wait(stream, event)
