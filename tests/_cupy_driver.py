"""A fake CUDA driver for the CuPy backend's isolated driver calls (no GPU needed).

Streams are names ("A", "B"), ``FakeStream`` objects (held weakly by the pool, as CuPy's
are), or ``ptds()`` for the calling thread's per-thread default stream; every record, wait
and synchronize lands in ``log`` in order.
"""
import contextlib
import threading

import pytest

from coop.backends import streams

GiB = 1 << 30


class FakeMemory:
    def __init__(self, ptr, device_id, released):
        self.ptr, self.device_id, self._released = ptr, device_id, released

    def __del__(self):
        self._released.append(self.device_id)


class FakeStream:
    """A stream object the program can drop (its key is its name, as CuPy's is its handle)."""
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


class FakeEvent:
    def __init__(self, name):
        self.name = name


class FakeDriver:
    bases = {0: 0x7F0000000000, 1: 0x7E0000000000}

    def __init__(self, backend):
        self.backend = backend
        self.device, self.stream = 0, "A"
        self.free, self.total = 60 * GiB, 80 * GiB
        self.name = "NVIDIA H100 80GB HBM3"
        self.reserved, self.released, self.log = [], [], []
        self.events = 0   # events made: e1, e2, ...
        self.finished = set()   # names of the events the device has passed (done)
        self.queries = 0
        self.watched = []         # pinned memory handed to the watch list

    def ptds(self):
        """This thread's per-thread default stream (all threads share one handle)."""
        return "ptds"

    def current_stream(self, device_id):
        if self.stream == "ptds":
            key = (streams.PER_THREAD_STREAM, streams.thread_number())
            return key, f"ptds@{threading.get_ident()}"
        if isinstance(self.stream, FakeStream):
            return self.stream.name, self.stream
        return self.stream, self.stream

    def reserve(self, device_id, nbytes):
        assert device_id == self.device
        self.reserved.append((device_id, nbytes))
        return FakeMemory(self.bases[device_id], device_id, self.released)

    def new_event(self):
        self.events += 1
        return FakeEvent(f"e{self.events}")

    def record(self, event, stream):
        self.log.append(("record", event.name, getattr(stream, "name", stream)))

    def wait(self, stream, event):
        self.log.append(("wait", getattr(stream, "name", stream), event.name))

    def synchronize(self, device_id):
        self.log.append(("sync", device_id))

    @contextlib.contextmanager
    def on_device(self, device_id):
        """device_id current within (logged when it is not the current device already)."""
        before = self.device
        if device_id != before:
            self.log.append(("device", device_id))
        self.device = device_id
        try:
            yield
        finally:
            self.device = before

    def done(self, event):
        self.queries += 1         # not in the log: a query orders nothing
        return event.name in self.finished

    def host_wait(self, event):
        self.log.append(("host-wait", event.name))

    def watch(self, event, memory):
        """CuPy's watch list of pinned memory in use: keeps memory until event is done."""
        self.log.append(("watch", event.name))
        self.watched.append(memory)
        return True

    def take(self):
        log, self.log = self.log, []
        return log


def install(monkeypatch, backend, reserve=True):
    fake = FakeDriver(backend)
    monkeypatch.setattr(backend, "_current_device_id", lambda: fake.device)
    monkeypatch.setattr(streams, "current_stream", fake.current_stream)
    monkeypatch.setattr(backend, "_mem_info", lambda device_id: (fake.free, fake.total))
    monkeypatch.setattr(backend, "_device_name", lambda device_id: fake.name)
    monkeypatch.setattr(streams, "new_event", fake.new_event)
    monkeypatch.setattr(streams, "record", fake.record)
    monkeypatch.setattr(streams, "wait", fake.wait)
    monkeypatch.setattr(streams, "synchronize", fake.synchronize)
    monkeypatch.setattr(streams, "on_device", fake.on_device)
    monkeypatch.setattr(streams, "per_thread_stream", lambda: f"ptds@{threading.get_ident()}")
    monkeypatch.setattr(backend, "_event_done", fake.done)
    monkeypatch.setattr(backend, "_wait_event", fake.host_wait)
    monkeypatch.setattr(backend, "_watch", fake.watch)
    monkeypatch.setattr(streams, "done", fake.done)
    if reserve:
        monkeypatch.setattr(backend, "_reserve", fake.reserve)
    monkeypatch.delenv("CUPY_GPU_MEMORY_LIMIT", raising=False)
    return fake


@pytest.fixture
def driver(monkeypatch):
    from coop.backends import cupy as backend
    return install(monkeypatch, backend)
