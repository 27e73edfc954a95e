"""`coop replay` and `coop bench` on bad input: every error is one line on stderr, exit status
2 for a bad argument and 1 for a run that failed, no traceback unless --debug."""
import json
import os
import subprocess
import sys

import pytest

from coop.cli.main import main
from coop.errors import TraceError

GOOD = [{"op": "constant", "id": 0, "size": 4096},
        {"op": "call", "name": "f", "inputs": [0], "outputs": [{"id": 1, "size": 8192}],
         "cost": 5}]


def lines(*records):
    return "".join(json.dumps(r) + "\n" for r in records)


#: file name -> content (str: UTF-8 text; bytes: as is)
FILES = {
    "good.jsonl": lines(*GOOD),
    "host-no-alloc.jsonl": lines({"op": "call", "name": "f", "inputs": [], "cost": 1,
                                  "allocs": [64], "outputs": [{"id": 1, "size": 64}]}),
    "binary.jsonl": b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4,
    "control.jsonl": bytes(range(10)) + b"\n",
    "utf16.jsonl": lines(*GOOD).encode("utf-16"),
    "empty.jsonl": "",
    "start-only.jsonl": lines({"op": "start"}),
    "huge.jsonl": lines({"op": "constant", "id": 0, "size": 1 << 70}),
    "too-big-at-once.jsonl": lines({"op": "constant", "id": 0, "size": 1 << 62},
                                   {"op": "constant", "id": 1, "size": 1 << 62}),
    "alignment.jsonl": lines({"op": "meta", "alignment": 3}, *GOOD),
    "nested.jsonl": "[" * 50_000 + "]" * 50_000 + "\n",
    "nan.jsonl": '{"op": "call", "name": "f", "inputs": [], "outputs": [{"id": 1, "size": 8}], '
                 '"cost": NaN}\n',
    "dtr-inf.jsonl": lines({"INSTRUCTION": "CALL", "NAME": "f", "ARGS": [], "RESULT": ["r"],
                            "TIME": "inf"},
                           {"INSTRUCTION": "MEMORY", "NAME": "r", "MEMORY": "8"},
                           {"INSTRUCTION": "ALIAS", "NAME": "r", "ALIAS": "-1"}),
    "mutate-twice.jsonl": lines(GOOD[0], {"op": "mutate", "name": "g_", "inputs": [0, 0],
                                          "mutated": [0, 1], "cost": 1}),
    "list.jsonl": "[1, 2, 3]\n",
}


@pytest.fixture
def files(tmp_path):
    for name, content in FILES.items():
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    (tmp_path / "a-directory").mkdir()
    return tmp_path


REPLAY_FAILURES = [   # (file, what stderr says): exit status 1
    ("missing.jsonl", "cannot read the trace: No such file or directory"),
    ("a-directory", "cannot read the trace: Is a directory"),
    ("binary.jsonl", "binary.jsonl:1: not UTF-8 text"),
    ("control.jsonl", "control.jsonl:1: not JSON"),
    ("utf16.jsonl", "utf16.jsonl:1: not UTF-8 text"),
    ("empty.jsonl", "the trace is empty"),
    ("host-no-alloc.jsonl", "host-no-alloc.jsonl:1: an output has no 'alloc'"),
    ("huge.jsonl", "huge.jsonl:1: size must be in [0, 2**62]"),
    ("too-big-at-once.jsonl", "needs more than 2**62 bytes at once"),
    ("alignment.jsonl", "alignment must be a power of two"),
    ("nested.jsonl", "nested.jsonl:1: not a JSON record coop reads"),
    ("nan.jsonl", "nan.jsonl:1: not a JSON record coop reads (NaN is not a number"),
    ("dtr-inf.jsonl", "dtr-inf.jsonl:1: CALL needs a TIME in ns"),
    ("mutate-twice.jsonl", "mutate-twice.jsonl:2: mutated [0, 1] names one storage twice"),
    ("list.jsonl", "list.jsonl:1: a record must be a JSON object"),
]


def one_line(capsys):
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err, captured.err
    return captured.err


@pytest.mark.parametrize("name, message", REPLAY_FAILURES)
@pytest.mark.parametrize("command", ["replay", "bench"])
def test_a_trace_that_cannot_be_replayed_is_one_line_and_status_1(files, capsys, command, name,
                                                                   message):
    path = str(files / name)
    if command == "replay":
        argv = ["replay", path, "--budget", "0.5"]
    else:
        if not os.path.isfile(path):
            pytest.skip("coop bench checks that a trace is a file (a usage error, below)")
        argv = ["bench", path, "--models", "none", "--policies", "coop", "--jobs", "1",
                "--no-progress", "--out", str(files / "out")]
    assert main(argv) == 1
    err = one_line(capsys)
    assert err.startswith(f"coop {command}: error: ") and message in err, err


@pytest.mark.parametrize("argv, message", [
    (["--budget", "inf"], "budget 'inf': not a budget"),
    (["--budget", "nan"], "budget 'nan': not a budget"),
    (["--budget", "abc"], "budget 'abc': not a budget"),
    (["--budget", "0"], "budget '0': must be more than 0"),
    (["--budget=-3GB"], "budget '-3GB': must be more than 0"),
    (["--budget", "0%"], "budget '0%': must be more than 0"),
    (["--budget", "1e300"], "budget '1e300': not a budget"),
    (["--budget", "1" + "0" * 30], "more than an arena holds"),
    (["--budget", "99999999999TiB"], "more than an arena holds"),
    (["--budget", "6 parsecs"], "unknown unit 'parsecs'"),
    (["--budget", "0.5", "--alignment", "3"], "alignment must be a power of two"),
    (["--budget", "0.5", "--alignment", "0"], "alignment must be a power of two"),
    (["--budget", "0.5", "--alignment", "-64"], "alignment must be a power of two"),
    (["--budget", "0.5", "--alignment", str(1 << 31)], "alignment must be a power of two"),
    (["--budget", "0.5", "--alignment", "x"], "alignment must be a power of two"),
    (["--budget", "0.5", "--policy", ""], "--policy names no policy"),
    (["--budget", "0.5", "--policy", " , "], "--policy names no policy"),
    (["--budget", "0.5", "--policy", "coop,belady"], "unknown policy 'belady'"),
    (["--budget", "0.5", "--thrash", "-1"], "thrash must be a finite number >= 1, or 0"),
    (["--budget", "0.5", "--thrash", "nan"], "thrash must be a finite number >= 1, or 0"),
    (["--budget", "0.5", "--thrash", "inf"], "thrash must be a finite number >= 1, or 0"),
    (["--budget", "0.5", "--format", "onnx"], "invalid choice: 'onnx'"),
    (["--budget", "0.5", "--host-budget", "1GiB"],
     "--host-budget needs an offloading policy (coop-offload, capuchin)"),
    (["--budget", "0.5", "--policy", "coop-offload", "--host-budget=-3GB"],
     "--host-budget: budget '-3GB': must be more than 0"),
    (["--budget", "0.5", "--lookahead", "-1"], "--lookahead must be a number of ops >= 0"),
    (["--budget", "0.5", "--device", "tpu"], "invalid choice: 'tpu'"),
    ([], "the following arguments are required: --budget"),
])
def test_a_bad_replay_argument_is_one_line_and_status_2(files, capsys, argv, message):
    assert main(["replay", str(files / "good.jsonl"), *argv]) == 2
    err = one_line(capsys)
    assert err.startswith("coop replay: ") and message in err, err


@pytest.mark.parametrize("argv, message", [
    (["--step", "1e-300"], "--step must be in [0.0001, 1)"),
    (["--step", "nan"], "--step must be in"),
    (["--step", "x"], "invalid float value: 'x'"),
    (["--patience", "1.5"], "invalid int value: '1.5'"),
    (["--jobs", "-2"], "--jobs must be >= 1"),
    (["--policies", ""], "--policies names no policy"),
    (["--models", "none"], "nothing to sweep"),
    (["--models", ""], "--models names no model; give paper models from resnet50, resnet152, "
                       "inception_v3, unet, bert_large, swin_t, bilstm, densenet121, gpt2, or "
                       "'none' for the traces alone"),
    (["--models", " , "], "--models names no model"),
    (["--models", "none", "a-directory"], "is not a file"),
    (["--models", "none", "good.jsonl", "--out", "good.jsonl"], "is a file, not a directory"),
])
def test_a_bad_bench_argument_is_one_line_and_status_2(files, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(files)
    assert main(["bench", "--no-progress", *argv]) == 2
    err = one_line(capsys)
    assert err.startswith("coop bench: ") and message in err, err


@pytest.mark.parametrize("argv, message", [
    ([], "the following arguments are required: command"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["replay"], "the following arguments are required: trace, --budget"),
    (["replay", "good.jsonl", "--budget", "1", "--frob"], "unrecognized arguments: --frob"),
])
def test_a_bad_command_line_is_one_line_and_status_2(capsys, argv, message):
    assert main(argv) == 2
    assert message in one_line(capsys)


def test_an_empty_program_replays(files, capsys):
    """A trace of no ops (a ZeroDivisionError before: its peak was 0 bytes)."""
    assert main(["replay", str(files / "start-only.jsonl"), "--budget", "1.0", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["status"], result["compute_overhead"], result["budget_bytes"]) == \
        ("ok", 1.0, 512)


def test_debug_shows_the_exception(files):
    for argv in (["--debug", "replay"], ["replay", "--debug"]):
        with pytest.raises(TraceError, match="an output has no 'alloc'"):
            main([*argv, str(files / "host-no-alloc.jsonl"), "--budget", "0.5"])


@pytest.mark.parametrize("argv, status, message", [
    # aborted with munmap_chunk(): invalid pointer (SIGABRT) before
    (["replay", "host-no-alloc.jsonl", "--budget", "0.5"], 1, "an output has no 'alloc'"),
    (["bench", "host-no-alloc.jsonl", "--models", "none", "--policies", "coop,dtr",
      "--no-progress", "--out", "out"], 1, "an output has no 'alloc'"),
    (["replay", "binary.jsonl", "--budget", "0.5"], 1, "not UTF-8 text"),
    (["replay", "good.jsonl", "--budget", "0.5", "--alignment", "3"], 2,
     "alignment must be a power of two"),
])
def test_the_command_as_a_process(files, argv, status, message):
    run = subprocess.run([sys.executable, "-m", "coop", *argv], cwd=files, capture_output=True,
                         text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert run.returncode == status, run.stderr
    assert run.stderr.count("\n") == 1 and message in run.stderr, run.stderr


def test_a_share_the_trace_makes_empty_is_a_failed_run_not_a_usage_error(tmp_path, capsys):
    # 0.5 of a peak of 1 byte is no byte: the budget is well formed, the trace makes it empty
    path = tmp_path / "tiny.jsonl"
    path.write_text('{"op": "meta", "alignment": 1}\n{"op": "constant", "id": 0, "size": 0}\n')
    assert main(["replay", str(path), "--budget", "0.5"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("coop replay: error: budget '0.5': is less "
                                                   "than 1 byte of the trace's unlimited peak")
