"""`coop replay` on the inputs a command line meets: a trace through a pipe, a trace with no
record, a budget below the arena's alignment, limits out of range, a --timeline that cannot
be written; each bad one is one line with the documented exit status, and --timeline draws
the run the table shows."""
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from _traces import TRACE, write_trace

from coop.cli.main import main

ROOT = Path(__file__).resolve().parent.parent

#: 4 KiB of constant, then 8 KiB for f's output: at half the peak (6 KiB) f finds no room
GOOD = [{"op": "meta", "alignment": 512},
        {"op": "constant", "id": 0, "size": 4096},
        {"op": "call", "name": "f", "inputs": [0], "outputs": [{"id": 1, "size": 8192}],
         "cost": 5}]
#: what differs between two replays of one trace: the clock's
TIMES = ("wall_time", "records_per_s", "search_time", "search_fill_time", "search_scan_time",
         "search_plan_time")


@pytest.fixture
def good(tmp_path):
    return write_trace(tmp_path / "good.jsonl", GOOD)


def results(out):
    return [{k: v for k, v in json.loads(line).items() if k not in TIMES}
            for line in out.splitlines()]


def one_line(capsys):
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err, captured.err
    return captured


def test_a_trace_through_a_pipe_replays_as_the_same_file_does(good, capsys):
    assert main(["replay", str(good), "--budget", "0.5", "--json"]) == 3
    from_file = results(capsys.readouterr().out)
    assert from_file[0]["status"] == "oom" and from_file[0]["records"] == 1
    read, write = os.pipe()

    def feed():
        with os.fdopen(write, "wb") as f:
            f.write(good.read_bytes())

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        assert main(["replay", f"/dev/fd/{read}", "--budget", "0.5", "--json"]) == 3
    finally:
        feeder.join()
        os.close(read)
    assert results(capsys.readouterr().out) == from_file


def test_a_trace_on_stdin_replays_as_the_same_file_does(good):
    def run(path, text=""):     # stdin: a pipe holding text
        return subprocess.run([sys.executable, "-m", "coop", "replay", path, "--budget", "0.5",
                               "--json"], input=text, capture_output=True, text=True,
                              cwd=good.parent, timeout=120,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    from_file = run(str(good))
    from_stdin = run("/dev/stdin", good.read_text())
    assert (from_stdin.returncode, from_stdin.stderr) == (from_file.returncode, "") == (3, "")
    assert results(from_stdin.stdout) == results(from_file.stdout)


EMPTY = ("the trace is empty: it holds no record to replay (a meta record alone is none); give "
         "a recorded run's trace")


@pytest.mark.parametrize("text", ["", "\n  \n", '{"op": "meta", "alignment": 512}\n'])
@pytest.mark.parametrize("format", [[], ["--format", "coop"], ["--format", "dtr"]])
def test_a_trace_with_no_record_is_empty_in_either_format(tmp_path, capsys, text, format):
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    assert main(["replay", str(path), "--budget", "0.5", *format]) == 1
    err = one_line(capsys).err
    if format == ["--format", "dtr"] and text.startswith("{"):
        # a meta record is not a DTR record
        assert err == (f"coop replay: error: {path}:1: the line has no INSTRUCTION field, so "
                       "this is not a DTR log (a coop trace? read it as one: --format coop) "
                       "(--debug shows the traceback)\n")
    else:
        assert err == f"coop replay: error: {path}: {EMPTY} (--debug shows the traceback)\n"


def test_a_coop_trace_read_as_a_dtr_log_says_so(good, capsys):
    assert main(["replay", str(good), "--budget", "0.5", "--format", "dtr"]) == 1
    assert one_line(capsys).err == (
        f"coop replay: error: {good}:1: the line has no INSTRUCTION field, so this is not a "
        "DTR log (a coop trace? read it as one: --format coop) (--debug shows the traceback)\n")


#: the usage lines of a thrash limit below 1 and of a lookahead beyond the replayer's int
THRASH = ("argument --thrash: thrash must be a finite number >= 1, or 0 (never stop): a run's "
          "compute overhead is at least 1.0 (default 2.0), got '{}' (see coop replay --help)")
LOOKAHEAD = ("argument --lookahead: --lookahead must be a number of ops >= 0 and at most "
             "2,147,483,647, got '{}' (see coop replay --help)")


@pytest.mark.parametrize("argv, message", [
    (["--budget", "100B"],
     "budget '100B': 100 bytes is less than the arena's alignment, 512 bytes; give --budget "
     "512B or more (or a smaller --alignment)"),
    (["--budget", "512MB", "--alignment", "1073741824"],
     "budget '512MB': 512,000,000 bytes is less than the arena's alignment, 1,073,741,824 "
     "bytes; give --budget 1073741824B or more (or a smaller --alignment)"),
    (["--budget", "0.0000001"],
     "budget '0.0000001': is less than 1 byte of the trace's unlimited peak (12,288 bytes); "
     'give a size ("6GiB", "512MB", "2000000000B") or a share of the trace\'s unlimited peak '
     '("0.5", "0.5x", "50%")'),
    (["--budget", "1" * 5000],
     "budget '11111111111111111111'...: 5,000 characters, more than any budget has (2**62 "
     'bytes is 19 digits); give a size ("6GiB", "512MB", "2000000000B") or a share of the '
     'trace\'s unlimited peak ("0.5", "0.5x", "50%")'),
    (["--budget", "0.5", "--policy", "coop-offload", "--host-budget", "9" * 5000],
     "--host-budget: budget '99999999999999999999'...: 5,000 characters, more than any budget "
     'has (2**62 bytes is 19 digits); give 2000000000 (bytes), a size ("6GiB", "512MB", '
     '"1.5 GiB")'),
    *[(["--budget", "0.5", "--thrash", value], THRASH.format(value))
      for value in ("0.5", "0.999")],
    *[(["--budget", "0.5", "--lookahead", value], LOOKAHEAD.format(value))
      for value in ("99999999999999999999999", "2147483648")],
    (["--budget", "0.5", "--timeline", ""],
     "--timeline names no file; give a path such as out.html"),
])
def test_a_bad_argument_is_one_usage_line(good, capsys, argv, message):
    assert main(["replay", str(good), *argv]) == 2
    captured = one_line(capsys)
    assert captured.err == f"coop replay: {message}\n"
    assert captured.out == ""


@pytest.mark.parametrize("where, problem", [("a-directory", "Is a directory"),
                                            ("missing/out.html", "No such file or directory")])
@pytest.mark.parametrize("policies", ["coop", "coop,dtr"])
def test_a_timeline_that_cannot_be_written_is_refused_before_the_replay(good, capsys, where,
                                                                         problem, policies):
    (good.parent / "a-directory").mkdir(exist_ok=True)
    out = str(good.parent / where)
    if policies != "coop" and where == "a-directory":
        (good.parent / "a-directory-coop.html").mkdir()
        out_coop = str(good.parent / "a-directory-coop.html")
    else:
        out_coop = out if policies == "coop" else str(good.parent / "missing/out-coop.html")
    assert main(["replay", str(good), "--budget", "0.5", "--policy", policies,
                 "--timeline", out]) == 2
    captured = one_line(capsys)
    assert captured.out == ""     # no table: nothing was replayed
    assert captured.err == (f"coop replay: --timeline {out_coop!r} cannot be written: {problem}; "
                            "give a file in a directory you can write\n")


def page_figures(path):
    text = Path(path).read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="timeline-data">(.*?)</script>', text,
                      re.S)
    return json.loads(found.group(1).replace("<\\/", "</"))["figures"]


@pytest.mark.parametrize("argv, status", [
    (["--host-budget", "1024"], "oom"),
    (["--host-budget", "2KiB", "--lookahead", "0", "--device", "h200"], "ok"),
])
def test_the_timeline_draws_the_run_the_table_shows(tmp_path, capsys, argv, status):
    trace = write_trace(tmp_path / "t.jsonl", TRACE)
    out = tmp_path / "out.html"
    code = main(["replay", str(trace), "--budget", "6144B", "--policy", "coop-offload",
                 "--json", "--timeline", str(out), *argv])
    assert code == (0 if status == "ok" else 3)
    table = json.loads(capsys.readouterr().out)
    page = page_figures(out)
    assert table["status"] == page["status"] == status
    for key in ("budget_bytes", "evictions", "recomputes", "offloads", "host_peak_bytes",
                "peak_used_bytes", "records"):
        assert page[key] == table[key], key
    assert page["copies_back"] == table["fetches"] + table["prefetches"]
    if status == "ok":
        assert page["compute_overhead"] == table["compute_overhead"]
    else:
        assert table["host_refusals"] == 1


def test_a_failed_runs_json_has_no_overhead(good, capsys):
    assert main(["replay", str(good), "--budget", "0.5", "--policy", "coop,none",
                 "--json"]) == 3
    for result in map(json.loads, capsys.readouterr().out.splitlines()):
        assert result["status"] == "oom" and result["compute_overhead"] is None


def test_the_help_states_the_thrash_default(capsys):
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert ("--thrash THRASH stop a run once its compute overhead passes this: a number >= 1, "
            "or 0: never (default 2.0)") in text


def test_the_readmes_bad_budget_command_prints_the_readmes_line(good, capsys):
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    found = re.search(r"`coop replay run\.jsonl (--budget=\S+)` prints `([^`]+)`", readme)
    assert found, "the README shows the command that prints a bad budget's line"
    assert main(["replay", str(good), found.group(1)]) == 2
    assert one_line(capsys).err == found.group(2) + "\n"


@pytest.mark.parametrize("argv, message", [
    (["--first-step"], "--first-step needs an offloading policy (coop-offload, capuchin)"),
    (["--lookahead", "8"], "--lookahead needs an offloading policy (coop-offload, capuchin)"),
    (["--device", "h200"], "--device needs an offloading policy (coop-offload, capuchin)"),
    (["--policy", "coop,dtr", "--lookahead", "0"],
     "--lookahead needs an offloading policy (coop-offload, capuchin)"),
    (["--policy", "coop,coop"], "a policy is named twice in 'coop,coop'"),
    (["--policy", "coop, dtr,coop"], "a policy is named twice in 'coop, dtr,coop'"),
    (["--bogus"], "unrecognized arguments: --bogus (see coop replay --help)"),
])
def test_a_host_tier_option_without_an_offloading_policy_is_a_usage_line(good, capsys, argv,
                                                                         message):
    """The host tier's options are refused, as --host-budget is, where no policy offloads
    (they changed nothing); a policy named twice is refused as coop bench refuses it; an
    unknown argument points to the command's help."""
    assert main(["replay", str(good), "--budget", "0.5", *argv]) == 2
    captured = one_line(capsys)
    assert captured.err == f"coop replay: {message}\n"
    assert captured.out == ""


def test_a_usage_error_under_debug_shows_the_traceback_and_exits_2(good, capsys):
    for argv in (["--debug", "replay"], ["replay", "--debug"]):
        assert main([*argv, str(good), "--budget", "abc"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("Traceback") and "coop replay: budget 'abc': not a budget" in err
    # outside the checkout, whose coop/ sources `python -m` would otherwise find first
    run = subprocess.run([sys.executable, "-m", "coop", "--debug", "replay", str(good),
                          "--budget", "abc"], capture_output=True, text=True, timeout=120,
                         cwd=good.parent,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert run.returncode == 2 and "Traceback" in run.stderr, run.stderr


def test_the_failure_line_gives_the_records_line_in_the_trace(tmp_path, capsys):
    """The record index counts from 0 without meta; the line is the file's (meta, a blank line
    and, in a DTR log, the MEMORY and ALIAS lines counted)."""
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (GOOD[0], GOOD[1])) + "\n"
                    + json.dumps(GOOD[2]) + "\n")
    assert main(["replay", str(path), "--budget", "0.5"]) == 3
    assert capsys.readouterr().out.splitlines()[-1] == (
        "coop: oom at record 1 of 2 (line 4): a request of 8,192 bytes found no room within "
        "the budget of 6,144 (largest free range 2,048 bytes; no choice made room)")
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in (
        {"INSTRUCTION": "CONSTANT", "NAME": "x"},
        {"INSTRUCTION": "MEMORY", "NAME": "x", "MEMORY": "4096"},
        {"INSTRUCTION": "CALL", "NAME": "f", "ARGS": ["x"], "RESULT": ["y"], "TIME": "5"},
        {"INSTRUCTION": "MEMORY", "NAME": "y", "MEMORY": "8192"},
        {"INSTRUCTION": "ALIAS", "NAME": "y", "ALIAS": "-1"})))
    assert main(["replay", str(log), "--budget", "0.5"]) == 3
    assert capsys.readouterr().out.splitlines()[-1].startswith(
        "coop: oom at record 1 of 2 (line 3): a request of 8,192 bytes")


def test_a_trace_with_a_byte_order_mark_replays_as_without(good, tmp_path, capsys):
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + good.read_bytes())
    assert main(["replay", str(good), "--budget", "1.0", "--json"]) == 0
    plain = results(capsys.readouterr().out)
    assert main(["replay", str(bom), "--budget", "1.0", "--json"]) == 0
    assert results(capsys.readouterr().out) == plain


@pytest.mark.parametrize("text, message", [
    # cut inside a string: the decoder meets the newline
    ('{"INSTRUCTION": "CONSTANT", "NAME": "z"}\n{"INSTRUCTION": "MEMORY", "NAME": "z", "MEMO\n',
     "t.jsonl:2: not JSON (Invalid control character at column 45): the line ends inside a "
     "value, as if the trace was cut off; give the whole trace (one complete record per line)"),
    # cut inside a string, no newline at the end
    ('{"op": "constant", "id": 0, "size": 8}\n{"op": "cons',
     "t.jsonl:2: not JSON (Unterminated string starting at column 8): the line ends inside a "
     "value, as if the trace was cut off; give the whole trace (one complete record per line)"),
    # cut between fields
    ('{"op": "constant", "id": 0,\r\n',
     "t.jsonl:1: not JSON (Expecting property name enclosed in double quotes at column 28): "
     "the line ends inside a value, as if the trace was cut off; give the whole trace (one "
     "complete record per line)"),
    # not cut: the column of the problem
    ('{"op": "constant", "id": tru, "size": 8}\n', "t.jsonl:1: not JSON (Expecting value at "
                                                   "column 26)"),
])
def test_a_line_that_is_not_json_gives_its_column_and_says_when_it_looks_cut_off(
        tmp_path, capsys, text, message):
    path = tmp_path / "t.jsonl"
    path.write_text(text, newline="")
    assert main(["replay", str(path), "--budget", "0.5"]) == 1
    assert one_line(capsys).err == (f"coop replay: error: {tmp_path / message} (--debug shows "
                                    "the traceback)\n")


@pytest.mark.parametrize("records, line, message", [
    ([{"op": "meta", "alignment": 3}, *GOOD[1:]], 1,
     "the meta record's alignment must be a power of two in [1, 2**30], got 3"),
    ([GOOD[1], {"op": "meta", "copy_cost": -1}, GOOD[2]], 2,
     "the meta record's copy_cost must be a finite number >= 0 (the cost of copying one byte), "
     "got -1"),
    # the later meta record's field is the one read
    ([{"op": "meta", "host_budget": 64}, GOOD[1], {"op": "meta", "host_budget": -1}, GOOD[2]],
     3, "the meta record's host_budget must be a number of bytes in [0, 2**62], got -1"),
])
def test_a_bad_meta_field_names_its_line(tmp_path, capsys, records, line, message):
    path = write_trace(tmp_path / "t.jsonl", records)
    assert main(["replay", str(path), "--budget", "0.5"]) == 1
    assert one_line(capsys).err == (f"coop replay: error: {path}:{line}: {message} (--debug "
                                    "shows the traceback)\n")


@pytest.mark.parametrize("mutate, message", [
    ("0", "MUTATE field 'MUTATE' must list indices into the 2 ARGS (e.g. [0] or [\"0\"]), got "
          "'0'"),
    (["2"], "MUTATE field 'MUTATE' must list indices into the 2 ARGS (e.g. [0] or [\"0\"]), "
            "got ['2']"),
    ([], "MUTATE field 'MUTATE' must list indices into the 2 ARGS (e.g. [0] or [\"0\"]), got "
         "[]"),
    (["0", "1"], "MUTATE ['0', '1'] names one storage twice (ARGS ['x', 'y']); list each "
                 "mutated storage once"),
])
def test_a_bad_dtr_mutate_names_the_dtr_field(tmp_path, capsys, mutate, message):
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (
        {"INSTRUCTION": "CONSTANT", "NAME": "x"},
        {"INSTRUCTION": "MEMORY", "NAME": "x", "MEMORY": "64"},
        {"INSTRUCTION": "COPY", "SRC": "x", "DST": "y"},
        {"INSTRUCTION": "MUTATE", "NAME": "add_", "ARGS": ["x", "y"], "MUTATE": mutate,
         "TIME": "1"})))
    assert main(["replay", str(path), "--budget", "1.0", "--format", "dtr"]) == 1
    assert one_line(capsys).err == (f"coop replay: error: {path}:4: {message} (--debug shows "
                                    "the traceback)\n")
