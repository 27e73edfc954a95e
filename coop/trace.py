"""Recording a run as a trace: JSON lines, one record per program event (docs/trace-format.md).

The trace is of the program, not of its execution under a budget: recomputes and evictions are
not in it, so one trace replays under any budget and policy.
"""
import json

from coop._core import EXPENSIVE


class TraceWriter:
    """Writes records to a text file as the runtime reports events."""

    def __init__(self, path):
        self.path = path
        self._file = open(path, "w", encoding="utf-8")

    def _write(self, record):
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")

    def start(self):
        self._write({"op": "start"})

    def constant(self, storage):
        self._write({"op": "constant", "id": storage.sid, "size": storage.nbytes})

    def call(self, op, views):
        inputs = [v.storage.sid for v in op.inputs]
        outputs = []
        for view, entry in zip(views, op.outputs):
            alias = -1 if entry is not None else inputs.index(view.storage.sid)
            outputs.append({"id": view.storage.sid,
                            "size": view.storage.nbytes if alias < 0 else 0, "alias": alias})
        self._write({"op": "call", "name": op.kernel.name, "inputs": inputs, "outputs": outputs,
                     "cost": op.cost, "cls": "expensive" if op.cls == EXPENSIVE else "cheap"})

    def mutate(self, op, index):
        self._write({"op": "mutate", "name": op.kernel.name,
                     "inputs": [v.storage.sid for v in op.inputs], "mutated": [index],
                     "cost": op.cost, "cls": "expensive" if op.cls == EXPENSIVE else "cheap"})

    def release(self, storage):
        self._write({"op": "release", "id": storage.sid})

    def close(self):
        self._file.close()
