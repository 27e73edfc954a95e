"""benchmarks/excess_weight.py: coop's windows at several weights of the bytes beyond the
request. The summary is checked on made-up sweeps (each figure known), the sweeps on one small
recorded trace against coop bench's own sweeps of coop and coop-per-byte."""
import pytest
from _scripts import load_benchmark

from coop.cli import bench
from coop.engine.policies import POLICIES

excess_weight = load_benchmark("excess_weight")


@pytest.fixture
def policies():
    """The runtime's policy table as it was, after the test registered weights in it."""
    saved = dict(POLICIES)
    yield
    POLICIES.clear()
    POLICIES.update(saved)


def made_up():
    ok = "ok"
    w0, w1 = excess_weight.policy_name(0.0), excess_weight.policy_name(1.0)
    return {
        # a: at 0.5 all complete (family best 1.10: 1.11 is above 1.1055, 1.105 is not); at 0.4
        # dte fails; weight 1 fails at 0.3, where weight 0 completes
        "a": {"dtr": {0.5: (ok, 1.10), 0.4: (ok, 1.20), 0.3: ("oom", 1.0)},
              "dte": {0.5: (ok, 1.12), 0.4: ("thrash", 2.5), 0.3: (ok, 1.5)},
              w0: {0.5: (ok, 1.11), 0.4: (ok, 1.15), 0.3: (ok, 1.30)},
              w1: {0.5: (ok, 1.105), 0.4: (ok, 1.18), 0.3: ("oom", 1.0)}},
        # b: dtr never completes (no minimum), dte's is 0.4
        "b": {"dtr": {0.5: ("oom", 1.0)},
              "dte": {0.5: (ok, 1.3), 0.4: (ok, 1.4)},
              w0: {0.5: (ok, 1.2), 0.4: (ok, 1.3)},
              w1: {0.5: (ok, 1.2), 0.4: ("oom", 1.0)}},
    }


def test_the_summary_of_made_up_sweeps(policies):
    runs = made_up()
    # weight 0: above at a's 0.5 only (1 of 1: b has no ratio where dtr completes); minima
    # a 0.3 (<= dtr's 0.4 and dte's 0.3), b 0.4 (<= dte's 0.4)
    assert excess_weight.summarize(runs, excess_weight.policy_name(0.0)) == (
        1, 1, 2, 2, {"a": 0.3, "b": 0.4})
    # weight 1: not above at 0.5; minima a 0.4 (above dte's 0.3), b 0.5 (above dte's 0.4)
    assert excess_weight.summarize(runs, excess_weight.policy_name(1.0)) == (
        0, 1, 0, 2, {"a": 0.4, "b": 0.5})
    lines = excess_weight.table(runs, [0.0, 1.0]).splitlines()
    assert lines[0] == ("| weight | above min(dtr, dte) + 0.5% | minimum <= dtr's and dte's | "
                        "a min | b min |")
    assert lines[2:] == ["| 0 | 1 of 1 | 2 of 2 | 0.30 | 0.40 |",
                         "| 1 | 0 of 1 | 0 of 2 | 0.40 | 0.50 |",
                         "| dtr | - | - | 0.40 | none |",
                         "| dte | - | - | 0.30 | 0.40 |"]


def test_register_adds_coop_with_each_weight(policies):
    excess_weight.register([0.0, 0.5])
    for w in (0.0, 0.5):
        p = POLICIES[excess_weight.policy_name(w)]
        assert p.excess_weight == w and p.name == f"coop-excess-{w:g}"
        assert (p.core, p.partition, p.inplace, p.move, p.core_code) == (
            "coop", True, True, True, POLICIES["coop"].core_code)


@pytest.mark.parametrize("args, message", [
    (["--weights", "0,x"], "--weights: comma-separated numbers"),
    (["--weights", "0,1.5"], "--weights: each must be a number in [0, 1]"),
    (["--weights", "-0.1"], "--weights: each must be a number in [0, 1]"),
    (["--jobs", "0"], "--jobs must be >= 1"),
])
def test_bad_arguments_are_refused(tmp_path, capsys, args, message):
    trace = tmp_path / "t.jsonl"
    trace.write_text("")
    with pytest.raises(SystemExit):
        excess_weight.main([str(trace), *args])
    assert message in capsys.readouterr().err


def test_a_missing_trace_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        excess_weight.main([str(tmp_path / "none.jsonl")])
    assert "no such trace" in capsys.readouterr().err


def test_weights_0_and_1_are_coop_and_coop_per_byte(tmp_path, policies):
    """The sweeps are coop bench's: weight 0 makes coop's runs, weight 1 coop-per-byte's."""
    source, = bench.prepare(["unet"], [], str(tmp_path), quick=True)
    path = source["path"]
    runs = excess_weight.measure([path], [0.0, 1.0], 1, progress=False)
    grid = bench.sweep_ratios(excess_weight.STEP, source["lower_bound_ratio"])
    for w, name in ((0.0, "coop"), (1.0, "coop-per-byte")):
        rows = bench.sweep("unet", path, name, source["peak_bytes"], grid,
                           excess_weight.PATIENCE)
        assert runs["unet"][excess_weight.policy_name(w)] == {
            r["ratio"]: (r["status"], r["compute_overhead"]) for r in rows}
    assert set(runs["unet"]) == {"dtr", "dte", "coop-excess-0", "coop-excess-1"}
