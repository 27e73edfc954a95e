"""Recording a run as a trace: JSON lines, one record per program event (docs/trace-format.md).

The trace is of the program, not of its execution under a budget: recomputes and evictions are
not in it, so one trace replays under any budget and policy.
"""
import json

class TraceWriter:
    """Writes records to a text file as the runtime reports events, by storage id.

    The engine reuses a dead storage's id; the trace never does: each definition (a constant,
    a call's new output) takes a fresh trace id, and references map to the current one."""

    def __init__(self, path, **meta):
        self.path = path
        self._file = open(path, "w", encoding="utf-8")
        self._ids = {}       # storage id -> trace id of its current value
        self._next = 0
        if meta:
            self._write({"op": "meta", **meta})

    def _write(self, record):
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")

    def _define(self, sid):
        tid = self._ids[sid] = self._next
        self._next += 1
        return tid

    def _ref(self, sid):
        tid = self._ids.get(sid)
        return self._define(sid) if tid is None else tid

    def start(self):
        """The record that begins a recording."""
        self._write({"op": "start"})

    def live(self, pieces, evicted):
        """The state of a run that has tensors when its recording starts (docs/trace-format.md,
        "Recording any time"). pieces: (storage id, bytes) of the arena's pieces from address 0,
        in address order: a storage the program holds, None for a range the replay leaves free,
        or -1 for memory no record names (kept); each becomes a constant, in that order, so that
        placed first fit from the low end they take the run's offsets; the None ones are then
        released. evicted: (storage id, bytes, cost, class name) of the held storages that are
        evicted; each becomes a call with no inputs, recomputable at its producer's cost."""
        free = []
        for sid, nbytes in pieces:
            if sid is None or sid < 0:
                tid = self._next
                self._next += 1
                if sid is None:
                    free.append(tid)
            else:
                tid = self._define(sid)
            self._write({"op": "constant", "id": tid, "size": nbytes})
        for tid in free:
            self._write({"op": "release", "id": tid})
        for sid, nbytes, cost, cls in evicted:
            self._write({"op": "call", "name": "evicted before recording", "inputs": [],
                         "outputs": [{"id": self._define(sid), "size": nbytes, "alias": -1}],
                         "cost": cost, "cls": cls})

    def constant(self, sid, nbytes):
        """A constant (a parameter, an input) of nbytes defined as storage sid."""
        self._write({"op": "constant", "id": self._define(sid), "size": nbytes})

    def call(self, name, inputs, outputs, cost, cls, allocs=None):
        """outputs: (storage, nbytes, alias index or -1, allocation index or None) each;
        allocs: a host kernel's allocation events (docs/trace-format.md)."""
        ins = [self._ref(s) for s in inputs]
        outs, defined = [], {}
        for sid, nbytes, alias, alloc in outputs:
            if alias >= 0:
                tid = ins[alias]
            else:
                tid = defined.get(sid)
                if tid is None:    # two outputs on one storage: one definition
                    tid = defined[sid] = self._define(sid)
            out = {"id": tid, "size": nbytes, "alias": alias}
            if alloc is not None:
                out["alloc"] = alloc
            outs.append(out)
        record = {"op": "call", "name": name, "inputs": ins, "outputs": outs, "cost": cost,
                  "cls": cls}
        if allocs is not None:
            record["allocs"] = allocs
        self._write(record)

    def mutate(self, name, inputs, index, cost, cls, allocs=None, failed=False):
        """failed: the kernel raised (or was interrupted) after it may have written the input:
        the input's storage keeps what it holds, as a constant (docs/trace-format.md)."""
        record = {"op": "mutate", "name": name, "inputs": [self._ref(s) for s in inputs],
                  "mutated": [index], "cost": cost, "cls": cls}
        if allocs is not None:
            record["allocs"] = allocs
        if failed:
            record["failed"] = True
        self._write(record)

    def failed_call(self, name, inputs, cls, allocs=None):
        """A call whose kernel raised (or was interrupted): no outputs, no cost; its inputs
        were made resident and its allocations made room (docs/trace-format.md)."""
        record = {"op": "call", "name": name, "inputs": [self._ref(s) for s in inputs],
                  "outputs": [], "cost": 0, "cls": cls, "failed": True}
        if allocs is not None:
            record["allocs"] = allocs
        self._write(record)

    def materialize(self, sid, settle=True):
        """The program reads storage sid's value (it must be resident)."""
        record = {"op": "materialize", "id": self._ref(sid)}
        if not settle:
            record["settle"] = False
        self._write(record)

    def release(self, sid):
        """The program drops its last reference to storage sid."""
        tid = self._ids.pop(sid, None)
        if tid is not None:
            self._write({"op": "release", "id": tid})

    def close(self):
        """Close the trace's file."""
        self._file.close()
