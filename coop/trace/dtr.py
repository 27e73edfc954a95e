"""Importing DTR simulator logs (INSTRUCTION records) as coop trace records (docs/trace-format.md)."""
import math
import re

from coop.errors import TraceError
from coop.trace.records import MAX_BYTES, check_record, is_int, json_lines, next_line, show

#: op names (substrings, lower case) DTR logs give to the paper's EXPENSIVE ops
DTR_EXPENSIVE = ("conv", "mm", "matmul", "linear", "lstm", "gru", "rnn", "einsum", "attention")


def dtr_class(name):
    """The class of a DTR log op: "expensive" if its name names a matmul/convolution/RNN op."""
    lowered = name.lower()
    return "expensive" if any(key in lowered for key in DTR_EXPENSIVE) else "cheap"


def import_dtr(path, data=None):
    """Yield (line number, record) in coop's format from a DTR simulator log (JSON lines with
    an INSTRUCTION field); see docs/trace-format.md for the mapping. Numbers may be JSON
    numbers or strings ("MEMORY": "512", as DTR's published logs write them). data: the log's
    bytes where coop.trace.records.read_once read them."""
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
                             f"got {show(value)}")
        return value

    def names_field(rec, key, lineno, instr):
        value = field(rec, key, lineno, instr)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise TraceError(f"{where(lineno)}: {instr} field {key!r} must be a list of names, "
                             f"got {show(value)}")
        return value

    def follower(lineno, instr, name):
        """The MEMORY or ALIAS record that must follow for name."""
        line, rec = next_line(lines, path, lineno)
        if not isinstance(rec, dict) or rec.get("INSTRUCTION") != instr \
                or rec.get("NAME") != name:
            raise TraceError(f"{where(line)}: expected {instr} for {name[:80]!r}, got "
                             f"{show(rec)}")
        return line, rec

    def memory(lineno, name):
        line, rec = follower(lineno, "MEMORY", name)
        size = _integer(rec.get("MEMORY"))
        if size is None:
            raise TraceError(f"{where(line)}: MEMORY needs an integer byte count, got "
                             f"{show(rec.get('MEMORY'))}")
        if not 0 <= size <= MAX_BYTES:
            raise TraceError(f"{where(line)}: MEMORY must be in [0, 2**62], got {size}")
        return size

    lines = json_lines(path, data)
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
                                     f"{show(alias_rec.get('ALIAS'))}")
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
            args = names_field(rec, "ARGS", lineno, instr)
            inputs = [lookup(a, lineno) for a in args]
            mutated = field(rec, "MUTATE", lineno, instr)
            if isinstance(mutated, list):
                mutated = [m if (m := _integer(v)) is not None else v for v in mutated]
            n = len(inputs)
            if not isinstance(mutated, list) or not mutated \
                    or not all(is_int(m) and 0 <= m < n for m in mutated):
                raise TraceError(f"{where(lineno)}: MUTATE field 'MUTATE' must list indices "
                                 f"into the {n} ARGS (e.g. [0] or [\"0\"]), got "
                                 f"{show(rec['MUTATE'])}")
            if len({inputs[m] for m in mutated}) != len(mutated):
                raise TraceError(f"{where(lineno)}: MUTATE {show(rec['MUTATE'])} names one "
                                 f"storage twice (ARGS {[args[m] for m in mutated]}); list each "
                                 f"mutated storage once")
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
            # a rename, as in DTR's simulator (a COPY only adds a reference to SRC's storage:
            # no access, so an evicted SRC is not recomputed until something reads it)
            release = bind(dst, src)
            if release:
                yield lineno, release
        elif instr == "RELEASE":
            release = drop(name_field(rec, "NAME", lineno, instr))
            if release:
                yield lineno, release
        elif instr == "ANNOTATE":
            if rec.get("ANNOTATION") == "START":
                yield lineno, {"op": "start"}
        elif not isinstance(rec, dict) or "INSTRUCTION" not in rec:
            raise TraceError(f"{where(lineno)}: the line has no INSTRUCTION field, so this is "
                             "not a DTR log (a coop trace? read it as one: --format coop)")
        elif instr in ("MEMORY", "ALIAS"):
            raise TraceError(f"{where(lineno)}: {instr} outside a CONSTANT or CALL")
        else:
            raise TraceError(f"{where(lineno)}: unknown record {str(instr)[:80]!r}; a DTR log "
                             "has CONSTANT, MEMORY, CALL, ALIAS, MUTATE, COPY, COPY_FROM, "
                             "RELEASE and ANNOTATE records")


_INTEGER = re.compile(r"\s*-?\d{1,19}\s*")


def _integer(value):
    """An int from a DTR number: an int, or a string of digits; None for anything else."""
    if is_int(value):
        return value
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value)
    return None


def _time(rec, lineno, path):
    value = rec.get("TIME")
    t = None
    if is_int(value) or isinstance(value, float):
        t = float(value)
    elif isinstance(value, str) and len(value) < 40:
        try:
            t = float(value)
        except ValueError:
            pass
    if t is None or not (math.isfinite(t) and t >= 0):
        raise TraceError(f"{path}:{lineno}: {rec.get('INSTRUCTION')} needs a TIME in ns (a "
                         f"finite number >= 0, or one as a string), got {show(value)}")
    return t
