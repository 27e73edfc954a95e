"""benchmarks/islands.py, the islands workload: a valid coop trace (read by coop's trace reader)
of the shape its docstring describes, and benchmarks/bench_islands.py's report on it."""
import json

import pytest
from _scripts import load_benchmark

import coop.trace.replay as R

islands = load_benchmark("islands")
SMALL = islands.Islands(blocks=3, branches=2, stem_mib=1.0, shrink=0.5, weight_kib=(4, 8))


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("islands") / "islands.jsonl"
    islands.write_islands(path, SMALL)
    return path


def test_the_trace_reads_and_has_the_workloads_shape(trace):
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    program = R.load(trace)                         # coop's reader: a TraceError if invalid
    # 3 blocks x 2 branches: 6 weights, the constant 1, the input batch, 3 counters
    assert [r["op"] for r in records].count("constant") == 11
    names = [r["name"] for r in records if r["op"] == "call"]
    # forward 3 x (2 conv + cat + add), sum, ones_like; backward 3 x (2 x 3 + 1 add)
    assert (names.count("conv"), names.count("cat"), names.count("add")) == (6, 3, 6)
    assert (names.count("conv_backward_weight"), names.count("conv_backward_input"),
            names.count("slice")) == (6, 6, 6)
    assert program.n_ops == len(names) == 35
    activations = [islands.Islands.activation(SMALL, k) for k in range(4)]
    assert activations == [1 << 20, 1 << 19, 1 << 18, 1 << 17]


def test_the_weight_gradients_are_held_to_the_end_between_the_large_values(trace):
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    released = {r["id"] for r in records if r["op"] == "release"}
    weights = [r for r in records if r["op"] == "constant" and 4096 <= r["size"] <= 8192]
    grads = [r for r in records if r["op"] == "call" and r["name"] == "conv_backward_weight"]
    assert len(weights) == len(grads) == 6
    # each gradient has its weight's size (backward walks blocks top down, branches in order)
    order = [w["size"] for w in weights]
    assert [g["outputs"][0]["size"] for g in grads] == order[4:] + order[2:4] + order[:2]
    assert not {g["outputs"][0]["id"] for g in grads} & released
    # every activation but the input batch, and every input gradient, is released
    big = {o["id"] for r in records if r["op"] == "call" and r["name"] in (
        "cat", "conv_backward_input", "ones_like") for o in r["outputs"]}
    assert big <= released
    assert len(released) == len({r["id"] for r in records if r["op"] == "release"})


def test_the_unlimited_peak_is_the_live_bytes_walked_by_hand(trace):
    """Every size is a multiple of 512 but the 8-byte values (512 each in the arena). A released
    computed storage frees its memory at once; a released constant (an old counter) cannot be
    recomputed, so it stays while an op that read it has a live output (its new counter, held).
    The unlimited peak is the largest sum of live sizes after a call's outputs are placed."""
    live, constants, readers, peak = {}, set(), {}, 0
    for r in map(json.loads, trace.read_text().splitlines()):
        if r["op"] == "constant":
            live[r["id"]] = max(r["size"], 512)
            constants.add(r["id"])
        elif r["op"] == "call":
            live.update((o["id"], max(o["size"], 512)) for o in r["outputs"])
            for i in r["inputs"]:
                readers.setdefault(i, []).extend(o["id"] for o in r["outputs"])
            peak = max(peak, sum(live.values()))
        elif r["op"] == "release":
            if r["id"] not in constants or not any(o in live for o in readers.get(r["id"], ())):
                live.pop(r["id"])
    assert R.unlimited(trace)["peak_used_bytes"] == peak


def test_the_shape_refuses_what_makes_no_pyramid():
    with pytest.raises(ValueError, match="blocks and branches must be >= 1, got 0 and 3"):
        islands.Islands(blocks=0)
    with pytest.raises(ValueError, match=r"shrink must be in \(0, 1\]"):
        islands.Islands(shrink=1.5)


def test_the_bench_reports_each_policys_minimum_and_the_target(trace, tmp_path, capsys):
    bench = load_benchmark("bench_islands")
    bench.main(["--trace", str(trace), "--out", str(tmp_path), "--policies", "coop,dtr-ideal",
                "--step", "0.25", "--min-ratio", "0.5", "--no-progress"])
    text = (tmp_path / "table.md").read_text()
    assert text == capsys.readouterr().out.split("wrote ")[0]
    rows = [line for line in text.splitlines() if line.startswith(("| coop |",
                                                                   "| dtr-ideal |"))]
    assert [row.split("|")[2].strip() for row in rows[:6]] == ["1.00", "0.75", "0.50"] * 2
    assert "target: coop's minimum" in text
    assert (tmp_path / "overhead.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
