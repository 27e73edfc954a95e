"""Recording a run as a trace: JSON lines, one record per program event (docs/trace-format.md).

The trace is of the program, not of its execution under a budget: recomputes and evictions are
not in it, so one trace replays under any budget and policy.
"""
import json

from coop._core import EXPENSIVE


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

    def mutate(self, name, inputs, index, cost, cls, allocs=None):
        record = {"op": "mutate", "name": name, "inputs": [self._ref(s) for s in inputs],
                  "mutated": [index], "cost": cost, "cls": cls}
        if allocs is not None:
            record["allocs"] = allocs
        self._write(record)

    def materialize(self, sid, settle=True):
        record = {"op": "materialize", "id": self._ref(sid)}
        if not settle:
            record["settle"] = False
        self._write(record)

    def release(self, sid):
        tid = self._ids.pop(sid, None)
        if tid is not None:
            self._write({"op": "release", "id": tid})

    def close(self):
        self._file.close()


class TraceError(ValueError):
    """A trace that cannot be read: the message names the file, the line and the problem."""


_FIELDS = {   # op -> required fields and their types
    "meta": {},
    "constant": {"id": int, "size": int},
    "call": {"name": str, "inputs": list, "outputs": list, "cost": (int, float)},
    "mutate": {"name": str, "inputs": list, "mutated": list, "cost": (int, float)},
    "release": {"id": int},
    "access": {"id": int},
    "materialize": {"id": int},
    "start": {},
}


def read_records(path):
    """Yield (line number, record) from a coop trace, each checked against the format."""
    for lineno, record in _json_lines(path):
        yield lineno, check_record(record, f"{path}:{lineno}")


def check_record(record, where):
    """record, if it is a valid coop trace record; else TraceError naming where and why."""
    if not isinstance(record, dict) or "op" not in record:
        raise TraceError(f"{where}: a record must be a JSON object with an 'op' field, got "
                         f"{str(record)[:80]}")
    kind = record["op"]
    if kind not in _FIELDS:
        raise TraceError(f"{where}: unknown record op {kind!r}; known: {', '.join(_FIELDS)}")
    for field, types in _FIELDS[kind].items():
        value = record.get(field)
        if value is None or isinstance(value, bool) or not isinstance(value, types):
            raise TraceError(f"{where}: {kind} record needs field {field!r} "
                             f"({getattr(types, '__name__', 'number')}), got {value!r}")
    for field in ("size", "cost"):
        if field in record and record[field] < 0:
            raise TraceError(f"{where}: {field} must be >= 0, got {record[field]}")
    if kind == "call":
        for out in record["outputs"]:
            if not isinstance(out, dict) or not isinstance(out.get("id"), int) \
                    or not isinstance(out.get("size", 0), int) or out.get("size", 0) < 0:
                raise TraceError(f"{where}: each call output needs an integer 'id' and a size "
                                 f">= 0, got {out!r}")
        if not record["outputs"]:
            raise TraceError(f"{where}: call {record['name']!r} has no outputs")
    if kind in ("call", "mutate"):
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in record["inputs"]):
            raise TraceError(f"{where}: inputs must be integer ids, got {record['inputs']!r}")
        if record.get("cls", "expensive") not in ("expensive", "cheap"):
            raise TraceError(f"{where}: cls must be 'expensive' or 'cheap', got {record['cls']!r}")
    if kind == "mutate":
        n = len(record["inputs"])
        if not record["mutated"] or not all(isinstance(m, int) and 0 <= m < n
                                            for m in record["mutated"]):
            raise TraceError(f"{where}: mutated must list indices into the {n} inputs, got "
                             f"{record['mutated']!r}")
    return record


# ---- DTR's simulator logs -------------------------------------------------------------------

#: op names (substrings, lower case) DTR logs give to the paper's EXPENSIVE ops
DTR_EXPENSIVE = ("conv", "mm", "matmul", "linear", "lstm", "gru", "rnn", "einsum", "attention")


def dtr_class(name):
    """The class of a DTR log op: "expensive" if its name names a matmul/convolution/RNN op."""
    lowered = name.lower()
    return "expensive" if any(key in lowered for key in DTR_EXPENSIVE) else "cheap"


def import_dtr(path):
    """Yield (line number, record) in coop's format from a DTR simulator log (JSON lines with
    an INSTRUCTION field); see docs/trace-format.md for the mapping."""
    names = {}      # name -> storage id
    refs = {}       # storage id -> names (and copies) referring to it
    next_id = 0

    def where(lineno):
        return f"{path}:{lineno}"

    def bind(name, sid):
        """name now refers to storage sid; returns the release of its old value, if that
        was the old value's last name."""
        if names.get(name) == sid:
            return None
        release = drop(name)
        names[name] = sid
        refs[sid] = refs.get(sid, 0) + 1
        return release

    def drop(name):
        sid = names.pop(name, None)
        if sid is None:
            return None
        refs[sid] -= 1
        if refs[sid] == 0:
            del refs[sid]
            return {"op": "release", "id": sid}
        return None

    def lookup(name, lineno):
        if name not in names:
            raise TraceError(f"{where(lineno)}: unknown name {name!r} (never created, or "
                             "released)")
        return names[name]

    def field(rec, key, lineno, instr):
        if key not in rec:
            raise TraceError(f"{where(lineno)}: {instr} needs field {key!r}")
        return rec[key]

    def memory(lineno, rec, name):
        if rec.get("INSTRUCTION") != "MEMORY" or rec.get("NAME") != name:
            raise TraceError(f"{where(lineno)}: expected MEMORY for {name!r}, got {rec!r}")
        try:
            size = int(rec["MEMORY"])
        except (KeyError, TypeError, ValueError):
            raise TraceError(f"{where(lineno)}: MEMORY needs an integer byte count (a string), "
                             f"got {rec.get('MEMORY')!r}") from None
        if size < 0:
            raise TraceError(f"{where(lineno)}: MEMORY must be >= 0, got {size}")
        return size

    lines = _json_lines(path)
    for lineno, rec in lines:
        instr = rec.get("INSTRUCTION") if isinstance(rec, dict) else None
        if instr == "CONSTANT":
            name = field(rec, "NAME", lineno, instr)
            size = memory(*_next(lines, path, lineno), name)
            sid, next_id = next_id, next_id + 1
            release = bind(name, sid)
            if release:
                yield lineno, release
            yield lineno, {"op": "constant", "id": sid, "size": size}
        elif instr == "CALL":
            results = field(rec, "RESULT", lineno, instr)
            inputs = [lookup(a, lineno) for a in field(rec, "ARGS", lineno, instr)]
            outputs, bound = [], []
            for name in results:
                size = memory(*_next(lines, path, lineno), name)
                alias_line, alias_rec = _next(lines, path, lineno)
                if alias_rec.get("INSTRUCTION") != "ALIAS" or alias_rec.get("NAME") != name:
                    raise TraceError(f"{where(alias_line)}: expected ALIAS for {name!r}, got "
                                     f"{alias_rec!r}")
                alias = alias_rec.get("ALIAS")
                if not isinstance(alias, int) or not -1 <= alias < len(inputs):
                    raise TraceError(f"{where(alias_line)}: ALIAS must be -1 or an index into "
                                     f"the {len(inputs)} args, got {alias!r}")
                if alias >= 0:
                    sid = inputs[alias]
                    outputs.append({"id": sid, "size": 0, "alias": alias})
                else:
                    sid, next_id = next_id, next_id + 1
                    outputs.append({"id": sid, "size": size, "alias": -1})
                bound.append((name, sid))
            name = str(field(rec, "NAME", lineno, instr))
            yield lineno, {"op": "call", "name": name, "inputs": inputs, "outputs": outputs,
                           "cost": _time(rec, lineno, path), "cls": dtr_class(name)}
            for out_name, sid in bound:
                release = bind(out_name, sid)
                if release:
                    yield lineno, release
        elif instr == "MUTATE":
            inputs = [lookup(a, lineno) for a in field(rec, "ARGS", lineno, instr)]
            mutated = field(rec, "MUTATE", lineno, instr)
            name = str(field(rec, "NAME", lineno, instr))
            yield lineno, check_record(
                {"op": "mutate", "name": name, "inputs": inputs, "mutated": mutated,
                 "cost": _time(rec, lineno, path), "cls": dtr_class(name)}, where(lineno))
        elif instr in ("COPY", "COPY_FROM"):
            src = lookup(field(rec, "SRC", lineno, instr), lineno)
            dst = field(rec, "DST", lineno, instr)
            if instr == "COPY" and dst in names:
                raise TraceError(f"{where(lineno)}: COPY to {dst!r}, which already names a "
                                 "value (COPY_FROM reassigns)")
            release = bind(dst, src)
            yield lineno, {"op": "access", "id": src}
            if release:
                yield lineno, release
        elif instr == "RELEASE":
            release = drop(field(rec, "NAME", lineno, instr))
            if release:
                yield lineno, release
        elif instr == "ANNOTATE":
            if rec.get("ANNOTATION") == "START":
                yield lineno, {"op": "start"}
        elif instr in ("MEMORY", "ALIAS"):
            raise TraceError(f"{where(lineno)}: {instr} outside a CONSTANT or CALL")
        else:
            raise TraceError(f"{where(lineno)}: unknown record {instr!r}; a DTR log has "
                             "CONSTANT, MEMORY, CALL, ALIAS, MUTATE, COPY, COPY_FROM, RELEASE "
                             "and ANNOTATE records")


def _json_lines(path):
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield lineno, json.loads(line)
                except json.JSONDecodeError as e:
                    raise TraceError(f"{path}:{lineno}: not JSON ({e.msg})") from None


def _next(lines, path, lineno):
    try:
        return next(lines)
    except StopIteration:
        raise TraceError(f"{path}:{lineno}: the log ends inside this record") from None


def _time(rec, lineno, path):
    try:
        t = float(rec["TIME"])
    except (KeyError, TypeError, ValueError):
        raise TraceError(f"{path}:{lineno}: {rec.get('INSTRUCTION')} needs a TIME in ns, got "
                         f"{rec.get('TIME')!r}") from None
    if not t >= 0:
        raise TraceError(f"{path}:{lineno}: TIME must be >= 0, got {t}")
    return t


def sniff(path):
    """"coop" or "dtr": the format of the trace at path (by its first record)."""
    for _, rec in _json_lines(path):
        if isinstance(rec, dict) and "INSTRUCTION" in rec:
            return "dtr"
        return "coop"
    raise TraceError(f"{path}: the trace is empty")


# ---- compiling ----------------------------------------------------------------------------------

def load(path, format=None):
    """Read and compile a trace file (coop's format, or a DTR log: sniffed when format is None)."""
    format = format or sniff(path)
    if format == "coop":
        records = read_records(path)
    elif format == "dtr":
        records = import_dtr(path)
    else:
        raise ValueError(f"unknown trace format {format!r}; choose 'coop' or 'dtr'")
    return compile_program(records, str(path))


def compile_program(records, where="<records>"):
    """Compile (line number, record) pairs (or plain records) into a coop._replay.Program.

    Records before a `start` are not replayed: the values they leave referenced at the start
    become constants. Ids become dense value indices; a reference to an unknown or released id
    is an error naming its line.
    """
    from coop._replay import KINDS, Program
    items = [(lr if isinstance(lr, tuple) else (None, lr)) for lr in records]
    start = max((i for i, (_, r) in enumerate(items) if r["op"] == "start"), default=-1)
    meta = {}
    index, sizes, live = {}, [], set()
    out_records, ops, names = [], [], []
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
        for tid, size in prefix_sizes.items():
            out_records.append((KINDS["constant"], value(tid, size)))
    for lineno, r in items[start + 1:]:
        kind = r["op"]
        if kind == "constant":
            if r["id"] in live:
                raise TraceError(f"{loc(lineno)}: id {r['id']} is defined twice")
            out_records.append((KINDS["constant"], value(r["id"], r["size"])))
        elif kind in ("call", "mutate"):
            inputs = [ref(i, lineno) for i in r["inputs"]]
            events = r.get("allocs")
            outputs, allocs, mutated = [], [], []
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
                        continue
                    if out["id"] in live:
                        raise TraceError(f"{loc(lineno)}: id {out['id']} is defined twice")
                    seen.add(out["id"])
                    outputs.append(out["id"])
                    allocs.append(out.get("alloc", -1))
            else:
                mutated = list(r["mutated"])
            if events is not None:
                _check_events(events, allocs, loc(lineno))
            outputs = [value(o, out["size"]) if o != -1 else -1
                       for o, out in zip(outputs, r.get("outputs", []))]
            ops.append((inputs, outputs, allocs, mutated, events, float(r["cost"]),
                        cost_kind[r.get("cls", "expensive")]))
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
    meta.pop("op", None)
    return Program(len(sizes), sizes, out_records, ops, names, meta)


def _check_events(events, allocs, where):
    if not isinstance(events, list) or not all(isinstance(e, int) and not isinstance(e, bool)
                                               for e in events):
        raise TraceError(f"{where}: allocs must be a list of integers, got {events!r}")
    n, freed = 0, set()
    for e in events:
        if e >= 0:
            n += 1
        elif ~e >= n or ~e in freed:
            raise TraceError(f"{where}: allocs frees allocation {~e}, which is not live")
        else:
            freed.add(~e)
    for a in allocs:
        if a != -1 and (not isinstance(a, int) or not 0 <= a < n or a in freed):
            raise TraceError(f"{where}: an output's alloc {a!r} is not an allocation live at "
                             "the kernel's end")
