"""Reading coop traces: JSON lines checked record by record against the format
(docs/trace-format.md); every error is a TraceError naming the file, the line and the problem."""
import io
import json
import math

from coop.errors import TraceError

#: the largest size in bytes a trace may give (a value, an allocation): what an arena can hold
MAX_BYTES = 1 << 62
#: the largest arena alignment a trace (or `coop replay --alignment`) may give
MAX_ALIGNMENT = 1 << 30


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def valid_alignment(value):
    """Whether value is an arena alignment a trace or a replay may give: a power of two in
    [1, 2**30]."""
    return is_int(value) and 0 < value <= MAX_ALIGNMENT and not value & (value - 1)


def show(value):
    """value as a message quotes it: its repr, cut to 80 characters (one line)."""
    return repr(value)[:80]


def _finite(number):
    """number as a float, or NaN where it is not finite (or too large for a float)."""
    try:
        number = float(number)
    except OverflowError:
        return math.nan
    return number if math.isfinite(number) else math.nan


def is_cost(value):
    """Whether value is a cost a trace may give (an op's ns, a copy's ns per byte): a number,
    not a bool, finite and >= 0 (an integer too large for a float is not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and _finite(value) >= 0


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


def read_records(path, data=None):
    """Yield (line number, record) from a coop trace, each checked against the format (data:
    the trace's bytes where read_once read them already)."""
    for lineno, record in json_lines(path, data):
        yield lineno, check_record(record, f"{path}:{lineno}")


def check_record(record, where):
    """record, if it is a valid coop trace record; else TraceError naming where and why."""
    if not isinstance(record, dict) or "op" not in record:
        raise TraceError(f"{where}: a record must be a JSON object with an 'op' field, got "
                         f"{show(record)}")
    kind = record["op"]
    if not isinstance(kind, str) or kind not in _FIELDS:
        raise TraceError(f"{where}: unknown record op {show(kind)}; known: "
                         f"{', '.join(_FIELDS)}")
    for field, types in _FIELDS[kind].items():
        value = record.get(field)
        if value is None or isinstance(value, bool) or not isinstance(value, types):
            raise TraceError(f"{where}: {kind} record needs field {field!r} "
                             f"({getattr(types, '__name__', 'number')}), got "
                             f"{show(value)}")
    # a field the record's op does not define is ignored, as any unknown field is: only a
    # constant has a size, only a call or a mutate a cost
    if kind == "constant" and not 0 <= record["size"] <= MAX_BYTES:
        raise TraceError(f"{where}: size must be in [0, 2**62], got {record['size']}")
    if kind in ("call", "mutate") and not is_cost(record["cost"]):
        raise TraceError(f"{where}: cost must be a finite number >= 0 (ns), got "
                         f"{show(record['cost'])}")
    if kind in ("call", "mutate") and type(record.get("failed", False)) is not bool:
        raise TraceError(f"{where}: failed must be true or false, got "
                         f"{show(record['failed'])}")
    if kind in ("call", "mutate") and not all(is_int(i) for i in record["inputs"]):
        raise TraceError(f"{where}: inputs must be integer ids, got {show(record['inputs'])}")
    if kind == "call":
        inputs = record["inputs"]
        for out in record["outputs"]:
            if not isinstance(out, dict) or not is_int(out.get("id")) \
                    or not is_int(out.get("size")) or not 0 <= out["size"] <= MAX_BYTES:
                raise TraceError(f"{where}: each call output needs an integer 'id' and a 'size' "
                                 f"in [0, 2**62] (bytes), got {show(out)}")
            alias = out.get("alias", -1)
            if not is_int(alias) or not -1 <= alias < len(inputs):
                raise TraceError(f"{where}: alias must be -1 or an index into the "
                                 f"{len(inputs)} inputs, got {show(alias)}")
            if alias >= 0 and out["id"] != inputs[alias]:
                raise TraceError(f"{where}: output {out['id']} has alias {alias}, a view of "
                                 f"input {inputs[alias]}: a view keeps its input's id; give id "
                                 f"{inputs[alias]}, or alias -1 for new memory")
        if record.get("failed") is True and record["outputs"]:
            raise TraceError(f"{where}: failed call {record['name']!r} has outputs; a failed "
                             "call's outputs are []")
        if not record["outputs"] and record.get("failed") is not True:
            raise TraceError(f"{where}: call {record['name']!r} has no outputs")
    if kind in ("call", "mutate"):
        if record.get("cls", "expensive") not in ("expensive", "cheap"):
            raise TraceError(f"{where}: cls must be 'expensive' or 'cheap', got "
                             f"{show(record['cls'])}")
    if kind == "mutate":
        inputs, mutated = record["inputs"], record["mutated"]
        n = len(inputs)
        if not mutated or not all(is_int(m) and 0 <= m < n for m in mutated):
            raise TraceError(f"{where}: mutated must list indices into the {n} inputs, got "
                             f"{show(mutated)}")
        # one storage mutated twice would make two old values of one piece
        if len({inputs[m] for m in mutated}) != len(mutated):
            raise TraceError(f"{where}: mutated {mutated} names one storage twice (inputs "
                             f"{[inputs[m] for m in mutated]}); list each mutated storage once")
    return record


#: the deepest JSON nesting a trace line may have (a record is flat; lists hold numbers)
MAX_DEPTH = 32


def _no_constant(name):
    raise ValueError(f"{name} is not a number a trace may hold")


def read_once(path):
    """None for a trace in a file, which its readers open as they go (and again, after
    sniff); the bytes of one that can be read only once (a pipe: /dev/stdin, a shell's
    <(...)), read now, for its readers to take as their data."""
    try:
        with open(path, "rb") as f:
            return None if f.seekable() else f.read()
    except OSError as e:
        raise TraceError(f"{path}: cannot read the trace: {e.strerror or e}") from None


#: the byte order mark an editor may write at the start of a UTF-8 file (read past)
BOM = b"\xef\xbb\xbf"


def json_lines(path, data=None):
    """(line number, parsed JSON) per non-blank line of the trace at path (or of data, its
    bytes, where read_once read them; a leading UTF-8 byte order mark is skipped);
    TraceError for a file that cannot be read, text that is not UTF-8, a line that is not JSON
    (one cut off inside a value says so), NaN or Infinity, deep nesting."""
    try:
        f = open(path, "rb") if data is None else io.BytesIO(data)
    except OSError as e:
        raise TraceError(f"{path}: cannot read the trace: {e.strerror or e}") from None
    with f:
        lineno = 0
        try:
            for lineno, raw in enumerate(f, 1):
                if lineno == 1 and raw.startswith(BOM):
                    raw = raw[len(BOM):]    # as many editors write one
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
        # the column in this line (the decoder's counts from a "\r" or "\n" it ends with)
        column = min(e.pos, len(line.rstrip("\r\n"))) + 1
        problem = f"{e.msg.removesuffix(' at')} at column {column}"
        if e.msg.startswith("Unterminated string") or e.pos >= len(line.rstrip()):
            raise TraceError(f"{path}:{lineno}: not JSON ({problem}): the line ends inside a "
                             "value, as if the trace was cut off; give the whole trace (one "
                             "complete record per line)") from None
        raise TraceError(f"{path}:{lineno}: not JSON ({problem})") from None
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


def next_line(lines, path, lineno):
    try:
        return next(lines)
    except StopIteration:
        raise TraceError(f"{path}:{lineno}: the log ends inside this record") from None


#: a trace with no record but meta (coop.trace.load refuses one in either format)
EMPTY = ("the trace is empty: it holds no record to replay (a meta record alone is none); give "
         "a recorded run's trace")


def sniff(path, data=None):
    """"coop" or "dtr": the format of the trace at path (by its first record; data: its bytes
    where read_once read them)."""
    for _, rec in json_lines(path, data):
        if isinstance(rec, dict) and "INSTRUCTION" in rec:
            return "dtr"
        return "coop"
    raise TraceError(f"{path}: {EMPTY}")
