"""Traces written by hand: records (dicts) as coop's JSON lines, and a host-tier trace, shared
by the tests."""
import json


def write_trace(path, records):
    """path (a pathlib.Path) holds records, one JSON object per line; returns path."""
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def call(name, inputs, out, size, cost=1e4):
    """A call record: name reads inputs (ids) and writes out (an id) of size bytes."""
    return {"op": "call", "name": name, "inputs": inputs,
            "outputs": [{"id": out, "size": size, "alias": -1}], "cost": cost}


#: w (2048 bytes) is read by f and, after g, m1 and m2, by h; a budget of 6144 cannot hold w
#: beside g's input and output (2048 + 3072), nor beside k's (3072 + 2048): w must leave twice,
#: and nothing else can (every other piece is an input of the op that needs the room)
TRACE = [
    {"op": "meta", "alignment": 512},
    {"op": "constant", "id": 0, "size": 2048},
    call("f", [0], 1, 2048),
    call("g", [1], 2, 3072),
    {"op": "release", "id": 1},
    call("m1", [2], 3, 512),
    call("m2", [3], 4, 512),
    {"op": "release", "id": 3},
    call("h", [0, 2], 5, 512),
    {"op": "release", "id": 5},
    {"op": "release", "id": 4},
    call("k", [2], 6, 2048),
]