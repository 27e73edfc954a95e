"""Recording a run as a trace: JSON lines, one record per program event (docs/trace-format.md).

The trace is of the program, not of its execution under a budget: recomputes and evictions are
not in it, so one trace replays under any budget and policy.
"""
import json
import math
import re

from coop._core import EXPENSIVE
from coop.errors import TraceError

#: the largest size in bytes a trace may give (a value, an allocation): what an arena can hold
MAX_BYTES = 1 << 62
#: the largest arena alignment a trace (or `coop replay --alignment`) may give
MAX_ALIGNMENT = 1 << 30


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


def _int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def valid_alignment(value):
    """Whether value is an arena alignment a trace or a replay may give: a power of two in
    [1, 2**30]."""
    return _int(value) and 0 < value <= MAX_ALIGNMENT and not value & (value - 1)


def _show(value):
    """value as a message quotes it: its repr, cut to 80 characters (one line)."""
    return repr(value)[:80]


def _finite(number):
    """number as a float, or NaN where it is not finite (or too large for a float)."""
    try:
        number = float(number)
    except OverflowError:
        return math.nan
    return number if math.isfinite(number) else math.nan


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
                         f"{_show(record)}")
    kind = record["op"]
    if not isinstance(kind, str) or kind not in _FIELDS:
        raise TraceError(f"{where}: unknown record op {_show(kind)}; known: "
                         f"{', '.join(_FIELDS)}")
    for field, types in _FIELDS[kind].items():
        value = record.get(field)
        if value is None or isinstance(value, bool) or not isinstance(value, types):
            raise TraceError(f"{where}: {kind} record needs field {field!r} "
                             f"({getattr(types, '__name__', 'number')}), got "
                             f"{_show(value)}")
    if "size" in record and not 0 <= record["size"] <= MAX_BYTES:
        raise TraceError(f"{where}: size must be in [0, 2**62], got {record['size']}")
    if "cost" in record and not _finite(record["cost"]) >= 0:
        raise TraceError(f"{where}: cost must be a finite number >= 0 (ns), got "
                         f"{_show(record['cost'])}")
    if kind in ("call", "mutate") and type(record.get("failed", False)) is not bool:
        raise TraceError(f"{where}: failed must be true or false, got "
                         f"{_show(record['failed'])}")
    if kind == "call":
        for out in record["outputs"]:
            if not isinstance(out, dict) or not _int(out.get("id")) \
                    or not _int(out.get("size", 0)) or not 0 <= out.get("size", 0) <= MAX_BYTES:
                raise TraceError(f"{where}: each call output needs an integer 'id' and a size "
                                 f"in [0, 2**62], got {_show(out)}")
        if record.get("failed") is True and record["outputs"]:
            raise TraceError(f"{where}: failed call {record['name']!r} has outputs; a failed "
                             "call's outputs are []")
        if not record["outputs"] and record.get("failed") is not True:
            raise TraceError(f"{where}: call {record['name']!r} has no outputs")
    if kind in ("call", "mutate"):
        if not all(_int(i) for i in record["inputs"]):
            raise TraceError(f"{where}: inputs must be integer ids, got "
                             f"{_show(record['inputs'])}")
        if record.get("cls", "expensive") not in ("expensive", "cheap"):
            raise TraceError(f"{where}: cls must be 'expensive' or 'cheap', got "
                             f"{_show(record['cls'])}")
    if kind == "mutate":
        inputs, mutated = record["inputs"], record["mutated"]
        n = len(inputs)
        if not mutated or not all(_int(m) and 0 <= m < n for m in mutated):
            raise TraceError(f"{where}: mutated must list indices into the {n} inputs, got "
                             f"{_show(mutated)}")
        # one storage mutated twice would make two old values of one piece
        if len({inputs[m] for m in mutated}) != len(mutated):
            raise TraceError(f"{where}: mutated {mutated} names one storage twice (inputs "
                             f"{[inputs[m] for m in mutated]}); list each mutated storage once")
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
    an INSTRUCTION field); see docs/trace-format.md for the mapping. Numbers may be JSON
    numbers or strings ("MEMORY": "512", as DTR's published logs write them)."""
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
            raise TraceError(f"{where(lineno)}: unknown name {name[:80]!r} (never created, or "
                             "released)")
        return names[name]

    def field(rec, key, lineno, instr):
        if key not in rec:
            raise TraceError(f"{where(lineno)}: {instr} needs field {key!r}")
        return rec[key]

    def name_field(rec, key, lineno, instr):
        value = field(rec, key, lineno, instr)
        if not isinstance(value, str):
            raise TraceError(f"{where(lineno)}: {instr} field {key!r} must be a name (a string), "
                             f"got {_show(value)}")
        return value

    def names_field(rec, key, lineno, instr):
        value = field(rec, key, lineno, instr)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise TraceError(f"{where(lineno)}: {instr} field {key!r} must be a list of names, "
                             f"got {_show(value)}")
        return value

    def follower(lineno, instr, name):
        """The MEMORY or ALIAS record that must follow for name."""
        line, rec = _next(lines, path, lineno)
        if not isinstance(rec, dict) or rec.get("INSTRUCTION") != instr \
                or rec.get("NAME") != name:
            raise TraceError(f"{where(line)}: expected {instr} for {name[:80]!r}, got "
                             f"{_show(rec)}")
        return line, rec

    def memory(lineno, name):
        line, rec = follower(lineno, "MEMORY", name)
        size = _integer(rec.get("MEMORY"))
        if size is None:
            raise TraceError(f"{where(line)}: MEMORY needs an integer byte count, got "
                             f"{_show(rec.get('MEMORY'))}")
        if not 0 <= size <= MAX_BYTES:
            raise TraceError(f"{where(line)}: MEMORY must be in [0, 2**62], got {size}")
        return size

    lines = _json_lines(path)
    for lineno, rec in lines:
        instr = rec.get("INSTRUCTION") if isinstance(rec, dict) else None
        if instr == "CONSTANT":
            name = name_field(rec, "NAME", lineno, instr)
            size = memory(lineno, name)
            sid, next_id = next_id, next_id + 1
            release = bind(name, sid)
            if release:
                yield lineno, release
            yield lineno, {"op": "constant", "id": sid, "size": size}
        elif instr == "CALL":
            results = names_field(rec, "RESULT", lineno, instr)
            inputs = [lookup(a, lineno) for a in names_field(rec, "ARGS", lineno, instr)]
            outputs, bound = [], []
            for name in results:
                size = memory(lineno, name)
                alias_line, alias_rec = follower(lineno, "ALIAS", name)
                alias = _integer(alias_rec.get("ALIAS"))
                if alias is None or not -1 <= alias < len(inputs):
                    raise TraceError(f"{where(alias_line)}: ALIAS must be -1 or an index into "
                                     f"the {len(inputs)} args, got "
                                     f"{_show(alias_rec.get('ALIAS'))}")
                if alias >= 0:
                    sid = inputs[alias]
                    outputs.append({"id": sid, "size": 0, "alias": alias})
                else:
                    sid, next_id = next_id, next_id + 1
                    outputs.append({"id": sid, "size": size, "alias": -1})
                bound.append((name, sid))
            name = str(field(rec, "NAME", lineno, instr))[:200]
            yield lineno, check_record(
                {"op": "call", "name": name, "inputs": inputs, "outputs": outputs,
                 "cost": _time(rec, lineno, path), "cls": dtr_class(name)}, where(lineno))
            for out_name, sid in bound:
                release = bind(out_name, sid)
                if release:
                    yield lineno, release
        elif instr == "MUTATE":
            inputs = [lookup(a, lineno) for a in names_field(rec, "ARGS", lineno, instr)]
            mutated = field(rec, "MUTATE", lineno, instr)
            if isinstance(mutated, list):
                mutated = [m if (m := _integer(v)) is not None else v for v in mutated]
            name = str(field(rec, "NAME", lineno, instr))[:200]
            yield lineno, check_record(
                {"op": "mutate", "name": name, "inputs": inputs, "mutated": mutated,
                 "cost": _time(rec, lineno, path), "cls": dtr_class(name)}, where(lineno))
        elif instr in ("COPY", "COPY_FROM"):
            src = lookup(name_field(rec, "SRC", lineno, instr), lineno)
            dst = name_field(rec, "DST", lineno, instr)
            if instr == "COPY" and dst in names:
                raise TraceError(f"{where(lineno)}: COPY to {dst[:80]!r}, which already names a "
                                 "value (COPY_FROM reassigns)")
            release = bind(dst, src)
            yield lineno, {"op": "access", "id": src}
            if release:
                yield lineno, release
        elif instr == "RELEASE":
            release = drop(name_field(rec, "NAME", lineno, instr))
            if release:
                yield lineno, release
        elif instr == "ANNOTATE":
            if rec.get("ANNOTATION") == "START":
                yield lineno, {"op": "start"}
        elif instr in ("MEMORY", "ALIAS"):
            raise TraceError(f"{where(lineno)}: {instr} outside a CONSTANT or CALL")
        else:
            raise TraceError(f"{where(lineno)}: unknown record {str(instr)[:80]!r}; a DTR log "
                             "has CONSTANT, MEMORY, CALL, ALIAS, MUTATE, COPY, COPY_FROM, "
                             "RELEASE and ANNOTATE records")


#: the deepest JSON nesting a trace line may have (a record is flat; lists hold numbers)
MAX_DEPTH = 32


def _no_constant(name):
    raise ValueError(f"{name} is not a number a trace may hold")


def _json_lines(path):
    """(line number, parsed JSON) per non-blank line; TraceError for a file that cannot be
    read, text that is not UTF-8, a line that is not JSON, NaN or Infinity, deep nesting."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise TraceError(f"{path}: cannot read the trace: {e.strerror or e}") from None
    with f:
        lineno = 0
        try:
            for lineno, raw in enumerate(f, 1):
                line = raw.decode("utf-8")
                if line.strip():
                    yield lineno, _parse(line, path, lineno)
        except UnicodeDecodeError:
            raise TraceError(f"{path}:{lineno}: not UTF-8 text (a trace is JSON lines in "
                             "UTF-8)") from None
        except OSError as e:
            raise TraceError(f"{path}: cannot read the trace: {e.strerror or e}") from None


def _parse(line, path, lineno):
    try:
        record = json.loads(line, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise TraceError(f"{path}:{lineno}: not JSON ({e.msg})") from None
    except (ValueError, RecursionError) as e:   # NaN, Infinity, a 5,000-digit number, nesting
        raise TraceError(f"{path}:{lineno}: not a JSON record coop reads "
                         f"({str(e)[:80] or type(e).__name__})") from None
    if max(line.count("["), line.count("{")) > MAX_DEPTH and _depth(record) > MAX_DEPTH:
        raise TraceError(f"{path}:{lineno}: JSON nested deeper than {MAX_DEPTH} levels")
    return record


def _depth(value):
    """How deep lists and objects nest in a parsed JSON value (iterative: no recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (list, dict)):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict)
                                                   else value))
    return deepest


def _next(lines, path, lineno):
    try:
        return next(lines)
    except StopIteration:
        raise TraceError(f"{path}:{lineno}: the log ends inside this record") from None


_INTEGER = re.compile(r"\s*-?\d{1,19}\s*")


def _integer(value):
    """An int from a DTR number: an int, or a string of digits; None for anything else."""
    if _int(value):
        return value
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value)
    return None


def _time(rec, lineno, path):
    value = rec.get("TIME")
    t = None
    if _int(value) or isinstance(value, float):
        t = float(value)
    elif isinstance(value, str) and len(value) < 40:
        try:
            t = float(value)
        except ValueError:
            pass
    if t is None or not (math.isfinite(t) and t >= 0):
        raise TraceError(f"{path}:{lineno}: {rec.get('INSTRUCTION')} needs a TIME in ns (a "
                         f"finite number >= 0, or one as a string), got {_show(value)}")
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
                    allocs.append(out.get("alloc"))
            else:
                mutated = list(r["mutated"])
            if events is not None:
                _check_events(events, allocs, loc(lineno))
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
    meta.pop("op", None)
    align = meta.get("alignment")
    if align is not None and not valid_alignment(align):
        raise TraceError(f"{where}: the meta record's alignment must be a power of two in "
                         f"[1, 2**30], got {_show(align)}")
    if not math.isfinite(sum(op[5] for op in ops if not op[7])):
        raise TraceError(f"{where}: the ops' costs add up to more than a float holds; give "
                         "costs in ns")
    return Program(len(sizes), sizes, out_records, ops, names, meta, where)


def _check_events(events, allocs, where):
    if not isinstance(events, list) or not all(_int(e) for e in events):
        raise TraceError(f"{where}: allocs must be a list of integers, got {_show(events)}")
    n, freed = 0, set()
    for e in events:
        if e > MAX_BYTES:
            raise TraceError(f"{where}: allocs allocates {e} bytes, more than 2**62")
        if e >= 0:
            n += 1
        elif ~e >= n or ~e in freed:
            raise TraceError(f"{where}: allocs frees allocation {~e}, which is not live")
        else:
            freed.add(~e)
    held = set()
    for a in allocs:
        if a is None:
            raise TraceError(f"{where}: an output has no 'alloc': with 'allocs', each new "
                             "output names the allocation that holds it")
        if a == -1:        # a view: no memory of its own
            continue
        if not _int(a) or not 0 <= a < n or a in freed:
            raise TraceError(f"{where}: an output's alloc {_show(a)} is not an allocation "
                             "live at the kernel's end")
        if a in held:
            raise TraceError(f"{where}: two outputs name alloc {a}; each new output has an "
                             "allocation of its own")
        held.add(a)
