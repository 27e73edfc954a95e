"""Fuzzing every way a trace gets in: coop traces (host traces with `allocs`, generated or
recorded from a run, and plain ones; with failed kernels), DTR logs (valid, numbers as strings, mutated, truncated,
garbage bytes) and raw bytes, through coop.trace.replay in-process, `coop replay` in-process and
`python -m coop replay` as a process.

The property: a clean error (coop.errors.TraceError naming the file, and the line where there is
one; for the command one line on stderr and exit status 1 or 2), or runs whose arena passes
Arena.check() at the end, whose figures are finite, and which complete at ratio 1.0 under
every policy but none. No crash, no hang (the process has a timeout).

The suite runs a CI-sized number of examples; COOP_FUZZ_EXAMPLES=N runs N per test (the
process tests N // 10), e.g. COOP_FUZZ_EXAMPLES=2000 python -m pytest tests/test_fuzz_traces.py
"""
import contextlib
import functools
import io
import json
import math
import os
import re
import subprocess
import sys
import tempfile

import hypothesis.strategies as st
import pytest
from _arena import SEARCH_TIMES
from _gradcheck import deep_mlp, deep_mlp_loss
from hypothesis import HealthCheck, event, given, settings

import coop.trace.replay as R
from coop.cli.main import main
from coop.errors import TraceError

EXAMPLES = int(os.environ.get("COOP_FUZZ_EXAMPLES", "0"))


def fuzz(n, process=False):
    """n examples in CI; COOP_FUZZ_EXAMPLES (a tenth of it for process tests) by hand."""
    if EXAMPLES:
        n = max(EXAMPLES // 10, 1) if process else EXAMPLES
    return settings(max_examples=n, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.large_base_example])


# ---- JSON values and mutations --------------------------------------------------------------

NUMBERS = st.one_of(
    st.integers(-3, 70), st.integers(-(1 << 70), 1 << 70),
    st.sampled_from([0, 1, -1, 511, 512, 1 << 31, (1 << 62) - 1, 1 << 62, (1 << 62) + 1, 1 << 63,
                     1 << 64]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e308, -0.0, 1e-300]))
SCALARS = st.one_of(NUMBERS, st.booleans(), st.none(), st.text(max_size=8),
                    st.sampled_from(["512", "-1", "inf", "nan", "1e3", " 7 ", "0x10", ""]))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=10)


@st.composite
def mutated(draw, records):
    """records with a few edits: a field dropped or given any JSON value, a record dropped,
    duplicated or moved, an id or index shifted."""
    records = [dict(r) for r in records]
    for _ in range(draw(st.integers(1, 3))):
        if not records:
            break
        k = draw(st.integers(0, len(records) - 1))
        edit = draw(st.sampled_from(["drop field", "set field", "drop", "duplicate", "move",
                                     "shift", "add field"]))
        record = records[k]
        keys = sorted(record)
        if edit == "drop field" and keys:
            record.pop(draw(st.sampled_from(keys)))
        elif edit == "set field" and keys:
            record[draw(st.sampled_from(keys))] = draw(JSON)
        elif edit == "add field":
            record[draw(st.sampled_from(["alloc", "allocs", "alias", "settle", "cls", "mutated",
                                         "failed",
                                         "ALIAS", "MEMORY", "TIME"]))] = draw(JSON)
        elif edit == "drop":
            records.pop(k)
        elif edit == "duplicate":
            records.insert(draw(st.integers(0, len(records))), dict(record))
        elif edit == "move":
            records.insert(draw(st.integers(0, len(records) - 1)), records.pop(k))
        else:   # shift a number inside (ids, indices, sizes)
            shift = draw(st.sampled_from([-2, -1, 1, 2]))
            for key in keys:
                value = record[key]
                if isinstance(value, int) and not isinstance(value, bool):
                    record[key] = value + shift
                elif isinstance(value, list):
                    record[key] = [v + shift if isinstance(v, int) and not isinstance(v, bool)
                                   else v for v in value]
    return records


def text_of(records):
    return "".join(json.dumps(r) + "\n" for r in records)   # NaN and Infinity written as such


@st.composite
def damaged(draw, text):
    """The file's bytes: as written, truncated anywhere, or with garbage bytes spliced in."""
    data = text.encode("utf-8")
    how = draw(st.sampled_from(["as is", "as is", "truncated", "garbage", "utf-16"]))
    if how == "truncated" and data:
        data = data[:draw(st.integers(0, len(data) - 1))]
    elif how == "garbage":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(min_size=1, max_size=16)) + data[at:]
    elif how == "utf-16":
        data = text.encode("utf-16")
    return data


# ---- coop traces ----------------------------------------------------------------------------

SIZES = st.one_of(st.integers(0, 5000), st.sampled_from([0, 1, 63, 64, 65, 4096, 1 << 16]))


@st.composite
def coop_records(draw, host):
    """A valid coop trace: host traces give every call's allocation history (`allocs`)."""
    records = []
    if draw(st.booleans()):
        records.append({"op": "meta", "alignment": draw(st.sampled_from([1, 8, 64, 512]))})
    live, next_id = [], 0
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["constant", "call", "call", "call", "mutate", "release",
                                     "release", "access", "materialize", "start"]))
        if kind in ("mutate", "release", "access", "materialize") and not live:
            kind = "constant"
        if kind == "constant":
            records.append({"op": "constant", "id": next_id, "size": draw(SIZES)})
            live.append(next_id)
            next_id += 1
        elif kind == "call" and draw(st.integers(0, 5)) == 0:     # a kernel that failed
            inputs = draw(st.lists(st.sampled_from(live), max_size=3)) if live else []
            record = {"op": "call", "name": "fail", "inputs": inputs, "outputs": [],
                      "cost": 0, "cls": draw(st.sampled_from(["expensive", "cheap"])),
                      "failed": True}
            if host:
                record["allocs"] = allocs(draw, [], 0)
            records.append(record)
        elif kind == "call":
            inputs = draw(st.lists(st.sampled_from(live), max_size=3)) if live else []
            outputs, n_new = [], 0
            for _ in range(draw(st.integers(1, 3))):
                if inputs and draw(st.integers(0, 3)) == 0:
                    alias = draw(st.integers(0, len(inputs) - 1))
                    outputs.append({"id": inputs[alias], "size": 0, "alias": alias})
                else:
                    outputs.append({"id": next_id, "size": draw(SIZES), "alias": -1})
                    live.append(next_id)
                    next_id += 1
                    n_new += 1
            record = {"op": "call", "name": draw(st.sampled_from(["mm", "relu", "add"])),
                      "inputs": inputs, "outputs": outputs,
                      "cost": draw(st.floats(0, 1e6)),
                      "cls": draw(st.sampled_from(["expensive", "cheap"]))}
            if host:
                record["allocs"] = allocs(draw, record["outputs"], n_new)
            records.append(record)
        elif kind == "mutate":
            inputs = draw(st.lists(st.sampled_from(live), min_size=1, max_size=3))
            distinct = sorted({inputs.index(i) for i in inputs})
            mutated_ = draw(st.lists(st.sampled_from(distinct), min_size=1, unique=True))
            record = {"op": "mutate", "name": "add_", "inputs": inputs, "mutated": mutated_,
                      "cost": draw(st.floats(0, 1e6)), "cls": "cheap"}
            if draw(st.integers(0, 3)) == 0:
                record["failed"] = True
            if host:
                record["allocs"] = allocs(draw, [], 0)
            records.append(record)
        elif kind == "release":
            records.append({"op": "release", "id": live.pop(draw(st.integers(0, len(live) - 1)))})
        elif kind == "access":
            records.append({"op": "access", "id": draw(st.sampled_from(live))})
        elif kind == "materialize":
            records.append({"op": "materialize", "id": draw(st.sampled_from(live)),
                            "settle": draw(st.booleans())})
        else:
            records.append({"op": "start"})
    return records


def allocs(draw, outputs, n_new):
    """A kernel's allocation history: the new outputs' allocations and temporaries, some
    freed; each new output names its own allocation, which holds it (at least its size)."""
    n = n_new + draw(st.integers(0, 3))
    events = [draw(SIZES) for _ in range(n)]
    holders = draw(st.permutations(list(range(n))))[:n_new]
    new = iter(holders)
    for out in outputs:
        if out["alias"] < 0:
            out["alloc"] = next(new)
            events[out["alloc"]] = max(events[out["alloc"]], out["size"])
    temporaries = [k for k in range(n) if k not in holders]
    for k in draw(st.lists(st.sampled_from(temporaries), unique=True)) if temporaries else []:
        at = [i for i, e in enumerate(events) if e >= 0][k]     # allocation k's position
        events.insert(draw(st.integers(at + 1, len(events))), ~k)
    return events


@functools.cache
def recorded():
    """The records of a recorded host run (a small MLP's training step with AdamW, and an
    in-place kernel that writes a parameter and fails)."""
    import coop
    from coop.optim import AdamW
    rt = coop.Runtime(coop.numpy_allocator("16MiB"), cost="cpu")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "mlp.jsonl")
        with rt.record(path):
            x, targets, params = deep_mlp(rt, depth=2, width=8, batch=4)
            opt = AdamW(params, lr=1e-2)
            loss = deep_mlp_loss(x, targets, params)
            try:
                rt.apply(coop.Kernel(_write_then_fail, name="fail_", inplace=0), params[0])
            except ValueError:
                pass
            loss.backward()
            del loss
            opt.step()
            opt.zero_grad()
        with open(path) as f:
            records = [json.loads(line) for line in f]
    assert sum(r.get("failed", False) for r in records) == 1
    return records


def _write_then_fail(a):
    a *= 2.0
    raise ValueError("the kernel failed")


def coop_files(host):
    records = coop_records(host)
    return st.one_of(records.map(text_of),
                     records.flatmap(mutated).map(text_of)).flatmap(damaged)


# ---- DTR logs ---------------------------------------------------------------------------------

@st.composite
def dtr_records(draw):
    """A valid DTR simulator log; each number an int or, as DTR writes them, a string."""
    def number(n):
        return str(n) if draw(st.booleans()) else n
    records, names, k = [], [], 0
    for _ in range(draw(st.integers(1, 20))):
        kind = draw(st.sampled_from(["CONSTANT", "CALL", "CALL", "MUTATE", "COPY", "COPY_FROM",
                                     "RELEASE", "ANNOTATE"]))
        if kind in ("MUTATE", "COPY", "COPY_FROM", "RELEASE") and not names:
            kind = "CONSTANT"
        if kind == "CONSTANT":
            name, k = f"x{k}", k + 1
            records += [{"INSTRUCTION": "CONSTANT", "NAME": name},
                        {"INSTRUCTION": "MEMORY", "NAME": name, "MEMORY": number(draw(SIZES))}]
            names.append(name)
        elif kind == "CALL":
            args = draw(st.lists(st.sampled_from(names), max_size=3)) if names else []
            results = [f"x{k + j}" for j in range(draw(st.integers(1, 2)))]
            k += len(results)
            records.append({"INSTRUCTION": "CALL", "NAME": draw(st.sampled_from(
                ["aten::mm", "aten::relu", "aten::view"])), "ARGS": args, "RESULT": results,
                "TIME": number(draw(st.integers(0, 10 ** 6)))})
            for r in results:
                alias = draw(st.integers(-1, len(args) - 1)) if args else -1
                records += [{"INSTRUCTION": "MEMORY", "NAME": r, "MEMORY": number(draw(SIZES))},
                            {"INSTRUCTION": "ALIAS", "NAME": r, "ALIAS": number(alias)}]
            names += results
        elif kind == "MUTATE":
            args = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
            records.append({"INSTRUCTION": "MUTATE", "NAME": "aten::add_", "ARGS": args,
                            "MUTATE": [number(0)], "TIME": number(draw(st.integers(0, 99)))})
        elif kind in ("COPY", "COPY_FROM"):
            dst = f"x{k}" if kind == "COPY" else draw(st.sampled_from(names))
            k += 1
            records.append({"INSTRUCTION": kind, "DST": dst, "SRC": draw(st.sampled_from(names))})
            names.append(dst)
        elif kind == "RELEASE":
            name = draw(st.sampled_from(names))
            names = [n for n in names if n != name]
            records.append({"INSTRUCTION": "RELEASE", "NAME": name})
        else:
            records.append({"INSTRUCTION": "ANNOTATE",
                            "ANNOTATION": draw(st.sampled_from(["START", "BACKWARD"]))})
    if not any(r["INSTRUCTION"] in ("CONSTANT", "CALL") for r in records):
        # annotations alone make an empty log (an error, as an empty trace is), not a valid one
        records = [{"INSTRUCTION": "CONSTANT", "NAME": f"x{k}"},
                   {"INSTRUCTION": "MEMORY", "NAME": f"x{k}", "MEMORY": number(draw(SIZES))},
                   *records]
    return records


DTR_FILES = st.one_of(dtr_records().map(text_of),
                      dtr_records().flatmap(mutated).map(text_of)).flatmap(damaged)
GARBAGE = st.one_of(st.binary(max_size=300), st.text(max_size=200).map(str.encode))


# ---- the properties ---------------------------------------------------------------------------

def clean_error(error, path):
    """A TraceError naming the file, then the line where there is one, then the problem."""
    assert isinstance(error, TraceError), repr(error)
    assert re.match(rf"{re.escape(str(path))}(:\d+)?: \S", str(error)), str(error)
    assert "\n" not in str(error)


def finite(result):
    for key in ("compute_overhead", "cost_first", "cost_total", *SEARCH_TIMES,
                "fragmentation_rate", "largest_free_ratio", "wall_time"):
        assert math.isfinite(result[key]), (key, result[key])
    assert result["ratio"] is None or math.isfinite(result["ratio"])
    assert 0 <= result["peak_used_bytes"] <= result["budget_bytes"]


def replays_or_fails_cleanly(data):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "t.jsonl")
        with open(path, "wb") as f:
            f.write(data)
        try:
            program = R.load(path)
            base = R.unlimited(program)
        except TraceError as e:
            clean_error(e, path)
            return "error"
        assert base["status"] == "ok" and base["compute_overhead"] == 1.0
        peak = base["peak_bytes"]
        for policy in R.PEAK_POLICIES:
            result = R.replay(program, ratio=1.0, policy=policy, peak_bytes=peak, check=True)
            assert result["status"] == "ok", policy        # ratio 1.0 completes
            finite(result)
        for policy in ("coop", "dtr", "lru", "dtr-ideal", "coop-offload"):
            for ratio in (0.6, 0.3):
                result = R.replay(program, ratio=ratio, policy=policy, peak_bytes=peak,
                                  check=True, lower_bound_bytes=base["lower_bound_bytes"])
                assert result["status"] in ("ok", "oom", "thrash")
                if policy != "coop-offload" or result["cost_first"] >= 1e-300:
                    # (the host link's time over a subnormal cost_first overflows the ratio)
                    finite(result)
                # every op's inputs and outputs are resident together while it runs: no run
                # that completes, host tier or not, holds less than the offload floor
                if result["status"] == "ok":
                    assert result["peak_used_bytes"] >= base["offload_floor_bytes"], policy
        return "replayed"


@fuzz(40)
@given(st.one_of(coop_records(host=True), coop_records(host=False), dtr_records()))
def test_valid_traces_replay(records):
    assert replays_or_fails_cleanly(text_of(records).encode()) == "replayed"


@fuzz(150)
@given(coop_files(host=True))
def test_host_traces(data):
    event(replays_or_fails_cleanly(data))


@fuzz(100)
@given(coop_files(host=False))
def test_plain_traces(data):
    event(replays_or_fails_cleanly(data))


@fuzz(30)
@given(st.builds(recorded).flatmap(mutated).map(text_of).flatmap(damaged))
def test_recorded_host_traces(data):
    event(replays_or_fails_cleanly(data))


@fuzz(150)
@given(DTR_FILES)
def test_dtr_logs(data):
    event(replays_or_fails_cleanly(data))


@fuzz(100)
@given(GARBAGE)
def test_garbage(data):
    event(replays_or_fails_cleanly(data))


def command(data, argv, process=False):
    """Run `coop replay FILE *argv` on data: (status, stdout, stderr)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "t.jsonl")
        with open(path, "wb") as f:
            f.write(data)
        if process:
            # from the temporary folder: `python -m` puts the working directory first on the
            # path, and a checkout's coop/ (sources, no built modules) would shadow the install
            run = subprocess.run([sys.executable, "-m", "coop", "replay", path, *argv],
                                 cwd=folder, capture_output=True, text=True, timeout=120,
                                 env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
            return run.returncode, run.stdout, run.stderr
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(["replay", path, *argv])
        return status, out.getvalue(), err.getvalue()


def command_property(status, out, err):
    event(f"exit status {status}")
    if status in (0, 3):      # 3: a policy ran out of memory or thrashed (the JSON says so)
        assert err == ""
        statuses = []
        for line in out.splitlines():
            result = json.loads(line)
            statuses.append(result["status"])
            assert result["status"] in ("ok", "oom", "thrash")
            # a failed run shows no overhead (null), as the table shows "-"
            assert (result["compute_overhead"] is None) == (result["status"] != "ok")
            finite({**result, "compute_overhead": result["compute_overhead"] or 1.0})
        assert (status == 0) == all(s == "ok" for s in statuses), (status, statuses)
    else:
        assert status == 1, (status, err)    # the arguments are good: a failure, not usage
        assert err.count("\n") == 1 and err.startswith("coop replay: error: "), err
        assert "Traceback" not in err


ARGS = st.sampled_from([["--budget", "0.5", "--policy", "coop,dtr", "--json"],
                        ["--budget", "1.0", "--policy", "lru,dtr-ideal", "--json"],
                        ["--budget", "4KiB", "--json", "--alignment", "64"]])
ANY_FILE = st.one_of(coop_files(host=True), coop_files(host=False), DTR_FILES, GARBAGE)


@fuzz(60)
@given(ANY_FILE, ARGS)
def test_the_command(data, argv):
    command_property(*command(data, argv))


@fuzz(8, process=True)
@given(ANY_FILE, ARGS)
def test_the_command_as_a_process(data, argv):
    command_property(*command(data, argv, process=True))


@pytest.mark.parametrize("text", ['{"op": "start"}', '{"INSTRUCTION": "CONSTANT", "NAME": "a"}'])
def test_the_fuzzers_reach_both_outcomes(text):
    """A valid file replays, a cut one is a clean error (the property is not vacuous)."""
    assert replays_or_fails_cleanly(b'{"op": "start"}\n') == "replayed"
    assert replays_or_fails_cleanly(text.encode()[:-1]) == "error"
