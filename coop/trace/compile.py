"""Compiling trace records into a Program (coop.trace._replay): dense value indices, checked
references, the records before `start` turned into constants."""
import math

from coop._core import EXPENSIVE
from coop.errors import TraceError
from coop.trace._replay import KINDS, Program
from coop.trace.dtr import import_dtr
from coop.trace.records import (EMPTY, MAX_BYTES, is_cost, is_int, read_once, read_records,
                                show, sniff, valid_alignment)

def load(path, format=None):
    """Read and compile a trace file (coop's format, or a DTR log: sniffed when format is None).
    A pipe is read once, so it loads as the same trace in a file does; a trace with no record
    but meta is a TraceError, in either format."""
    return load_lines(path, format)[0]


def load_lines(path, format=None):
    """(program, lines): load's program, and the file's line number of each of its records
    (a failed replay's failed_record indexes it; the constants a `start` makes have its
    line)."""
    if format not in (None, "coop", "dtr"):
        raise ValueError(f"unknown trace format {format!r}; choose 'coop' or 'dtr'")
    data = read_once(path)
    format = format or sniff(path, data)
    records = list(read_records(path, data) if format == "coop" else import_dtr(path, data))
    program, lines = _compile(records, str(path))    # a bad meta record first
    if all(r["op"] == "meta" for _, r in records):
        raise TraceError(f"{path}: {EMPTY}")
    return program, lines


def compile_program(records, where="<records>"):
    """Compile (line number, record) pairs (or plain records) into a coop.trace._replay.Program.

    Records before a `start` are not replayed: the values they leave referenced at the start
    become constants. Ids become dense value indices; a reference to an unknown or released id
    is an error naming its line.
    """
    return _compile(records, where)[0]


def _compile(records, where):
    """compile_program's program, and the line number of each of its records (None where
    records are plain)."""
    items = [(lr if isinstance(lr, tuple) else (None, lr)) for lr in records]
    start = max((i for i, (_, r) in enumerate(items) if r["op"] == "start"), default=-1)
    meta, meta_lines = {}, {}    # meta_lines: field -> the line of the meta record giving it
    index, sizes, live = {}, [], set()
    out_records, ops, names, lines = [], [], [], []
    cost_kind = {"expensive": EXPENSIVE, "cheap": 1}

    def loc(lineno):
        return f"{where}:{lineno}" if lineno is not None else where

    def value(tid, size):
        index[tid] = len(sizes)
        sizes.append(size)
        live.add(tid)
        return index[tid]

    def ref(tid, lineno):
        if tid not in live:
            state = "released" if tid in index else "never defined"
            raise TraceError(f"{loc(lineno)}: id {tid} is used but {state}")
        return index[tid]

    if start >= 0:
        # the prefix: what is still referenced at the start becomes a constant
        prefix_sizes = {}
        for lineno, r in items[:start]:
            kind = r["op"]
            if kind == "constant":
                prefix_sizes[r["id"]] = r["size"]
            elif kind == "call":
                for out in r["outputs"]:
                    if out.get("alias", -1) < 0:
                        prefix_sizes.setdefault(out["id"], out["size"])
            elif kind == "release":
                prefix_sizes.pop(r["id"], None)
            elif kind == "meta":
                meta.update(r)
                meta_lines.update(dict.fromkeys(r, lineno))
        for tid, size in prefix_sizes.items():
            out_records.append((KINDS["constant"], value(tid, size)))
            lines.append(items[start][0])
    for lineno, r in items[start + 1:]:
        kind = r["op"]
        n_out = len(out_records)
        if kind == "constant":
            if r["id"] in live:
                raise TraceError(f"{loc(lineno)}: id {r['id']} is defined twice")
            out_records.append((KINDS["constant"], value(r["id"], r["size"])))
        elif kind in ("call", "mutate"):
            inputs = [ref(i, lineno) for i in r["inputs"]]
            events = r.get("allocs")
            outputs, allocs, out_sizes, mutated = [], [], [], []
            if kind == "call":
                seen = set()
                for out in r["outputs"]:
                    alias = out.get("alias", -1)
                    if not isinstance(alias, int) or not -1 <= alias < len(inputs):
                        raise TraceError(f"{loc(lineno)}: alias must be -1 or an index into "
                                         f"the {len(inputs)} inputs, got {alias!r}")
                    if alias >= 0 or out["id"] in seen:
                        outputs.append(-1)
                        allocs.append(-1)
                        out_sizes.append(0)
                        continue
                    if out["id"] in live:
                        raise TraceError(f"{loc(lineno)}: id {out['id']} is defined twice")
                    seen.add(out["id"])
                    outputs.append(out["id"])
                    allocs.append(out.get("alloc"))
                    out_sizes.append(out["size"])
            else:
                mutated = list(r["mutated"])
            if events is not None:
                _check_events(events, allocs, out_sizes, loc(lineno))
            else:
                allocs = [-1] * len(allocs)
            outputs = [value(o, out["size"]) if o != -1 else -1
                       for o, out in zip(outputs, r.get("outputs", []))]
            ops.append((inputs, outputs, allocs, mutated, events, float(r["cost"]),
                        cost_kind[r.get("cls", "expensive")], r.get("failed", False)))
            names.append(r["name"])
            out_records.append((KINDS[kind], len(ops) - 1))
        elif kind in ("release", "access", "materialize"):
            if r["id"] not in live:
                if kind != "release":
                    ref(r["id"], lineno)
                continue   # releasing an unknown or released id is ignored
            if kind == "release":
                live.discard(r["id"])
            if kind == "materialize" and r.get("settle", True) is not True:
                if r["settle"] is not False:
                    raise TraceError(f"{loc(lineno)}: settle must be true or false, "
                                     f"got {r['settle']!r}")
                kind = "materialize in place"
            out_records.append((KINDS[kind], index[r["id"]]))
        elif kind == "meta":
            meta.update(r)
            meta_lines.update(dict.fromkeys(r, lineno))
        lines.extend([lineno] * (len(out_records) - n_out))
    meta.pop("op", None)
    align = meta.get("alignment")
    if align is not None and not valid_alignment(align):
        raise TraceError(f"{loc(meta_lines['alignment'])}: the meta record's alignment must be "
                         f"a power of two in [1, 2**30], got {show(align)}")
    _check_meta(meta, lambda field: loc(meta_lines[field]))
    if not math.isfinite(sum(op[5] for op in ops if not op[7])):
        raise TraceError(f"{where}: the ops' costs add up to more than a float holds; give "
                         "costs in ns")
    return Program(len(sizes), sizes, out_records, ops, names, meta, where), lines


def _check_meta(meta, where):
    """The meta fields a replay reads besides alignment: copy_cost a finite number >= 0,
    host_link [d2h, h2d] two of them, cost_model a device's name (an unknown name falls back
    to the a100-80gb), host_budget bytes (an integer in [0, 2**62]), room_price a finite
    number >= 0. where(field): the file and line of the meta record that gave field."""
    rate = meta.get("copy_cost")
    if rate is not None and not is_cost(rate):
        raise TraceError(f"{where('copy_cost')}: the meta record's copy_cost must be a finite "
                         f"number >= 0 (the cost of copying one byte), got {show(rate)}")
    link = meta.get("host_link")
    if link is not None and not (isinstance(link, list) and len(link) == 2
                                 and all(is_cost(x) for x in link)):
        raise TraceError(f"{where('host_link')}: the meta record's host_link must be [d2h, "
                         f"h2d], two finite numbers >= 0 (the cost of copying one byte each "
                         f"way), got {show(link)}")
    model = meta.get("cost_model")
    if model is not None and not isinstance(model, str):
        raise TraceError(f"{where('cost_model')}: the meta record's cost_model must be a "
                         f"device's name (a string such as \"a100-80gb\"), got {show(model)}")
    price = meta.get("room_price")
    if price is not None and not is_cost(price):
        raise TraceError(f"{where('room_price')}: the meta record's room_price must be a "
                         f"finite number >= 0 (the room's price per byte in coop's window), got "
                         f"{show(price)}")
    budget = meta.get("host_budget")
    if budget is not None and not (is_int(budget) and 0 <= budget <= MAX_BYTES):
        raise TraceError(f"{where('host_budget')}: the meta record's host_budget must be a "
                         f"number of bytes in [0, 2**62], got {show(budget)}")


def _check_events(events, allocs, sizes, where):
    """A host record's allocs, and the allocation each new output (of sizes bytes) names: it
    is live at the kernel's end, no other output's, and holds the output."""
    if not isinstance(events, list) or not all(is_int(e) for e in events):
        raise TraceError(f"{where}: allocs must be a list of integers, got {show(events)}")
    n, freed, nbytes = 0, set(), []
    for e in events:
        if e > MAX_BYTES:
            raise TraceError(f"{where}: allocs allocates {e} bytes, more than 2**62")
        if e >= 0:
            n += 1
            nbytes.append(e)
        elif ~e >= n or ~e in freed:
            raise TraceError(f"{where}: allocs frees allocation {~e}, which is not live")
        else:
            freed.add(~e)
    held = set()
    for a, size in zip(allocs, sizes):
        if a is None:
            raise TraceError(f"{where}: an output has no 'alloc': with 'allocs', each new "
                             "output names the allocation that holds it")
        if a == -1:        # a view: no memory of its own
            continue
        if not is_int(a) or not 0 <= a < n or a in freed:
            raise TraceError(f"{where}: an output's alloc {show(a)} is not an allocation "
                             "live at the kernel's end")
        if a in held:
            raise TraceError(f"{where}: two outputs name alloc {a}; each new output has an "
                             "allocation of its own")
        if size > nbytes[a]:
            raise TraceError(f"{where}: an output of {size} bytes names alloc {a}, of "
                             f"{nbytes[a]}: the allocation that holds an output is at least "
                             "its size")
        held.add(a)
