"""benchmarks/link_bound.py: the host link's lower bound on a step's overhead, from the bytes its
update reads."""
import pytest
from _scripts import load_benchmark
from _traces import write_trace

import coop.trace.replay as R
from coop.cli.main import main as coop_main

link_bound = load_benchmark("link_bound")


def _step(tmp_path, after=()):
    """A step by hand: parameter 1 and momentum 2 (100 bytes each), data 3 (50); a forward op
    (cost 10), a backward op making gradient 5 (cost 20), made a constant; SGD's two update
    ops (costs 1 and 2) reading 2 and 5, then 1 and 2; the link's host-to-device rate 2 ns per
    byte."""
    return write_trace(tmp_path / "step.jsonl", [
        {"op": "meta", "alignment": 1, "host_link": [1.0, 2.0]},
        {"op": "constant", "id": 1, "size": 100},
        {"op": "constant", "id": 2, "size": 100},
        {"op": "constant", "id": 3, "size": 50},
        {"op": "call", "name": "linear", "inputs": [1, 3],
         "outputs": [{"id": 4, "size": 40, "alias": -1}], "cost": 10.0},
        {"op": "call", "name": "linear_backward", "inputs": [4, 3],
         "outputs": [{"id": 5, "size": 100, "alias": -1}], "cost": 20.0},
        {"op": "release", "id": 4},
        {"op": "materialize", "id": 5},
        {"op": "mutate", "name": "momentum_", "inputs": [2, 5], "mutated": [0], "cost": 1.0,
         "cls": "cheap"},
        {"op": "mutate", "name": "sgd_apply_", "inputs": [1, 2], "mutated": [0], "cost": 2.0,
         "cls": "cheap"},
        *after])


def test_the_update_reads_and_the_bound_by_hand(tmp_path):
    """C = 33, c_U = 3, R = 300 bytes (parameter, momentum, gradient: data is not read by the
    update), 2 ns per byte; the bound at B is (30 + max(3, (300 - B) x 2)) / 33."""
    path = _step(tmp_path)
    assert link_bound.update_reads(str(path)) == (33.0, 3.0, 300, 2.0)
    assert link_bound.bound(33.0, 3.0, 300, 2.0, 0) == (30 + 600) / 33
    assert link_bound.bound(33.0, 3.0, 300, 2.0, 250) == (30 + 100) / 33
    assert link_bound.bound(33.0, 3.0, 300, 2.0, 299) == (30 + 3) / 33 == 1.0
    assert link_bound.bound(33.0, 3.0, 300, 2.0, 10 ** 6) == 1.0


def test_the_printed_table(tmp_path, capsys):
    """One row per trace: the bound at each ratio of the trace's peak, and the smallest ratio
    (in steps of 0.001) within the thrash limit."""
    path = _step(tmp_path)
    peak = R.unlimited(str(path))["peak_bytes"]
    assert link_bound.main([str(path), "--ratios", "0.1,0.5", "--thrash", "3.0"]) == 0
    row = capsys.readouterr().out.splitlines()[2].split(" | ")
    cells = [link_bound.bound(33.0, 3.0, 300, 2.0, int(r * peak)) for r in (0.1, 0.5)]
    assert row[1:4] == ["0.0", "0.0", "0.00"]        # ms and GB of a tiny step
    assert row[4:6] == [f"{c:.3f}" for c in cells]
    within = next(k / 1000 for k in range(1, 1001)
                  if link_bound.bound(33.0, 3.0, 300, 2.0, int(k / 1000 * peak)) <= 3.0)
    assert link_bound.bound(33.0, 3.0, 300, 2.0, int((within - 0.001) * peak)) > 3.0
    assert row[6] == f"{within:.3f} |"


def test_an_update_that_is_not_the_steps_end_is_refused(tmp_path):
    """An op after the update began (updates inside the backward pass): the bound does not
    hold for it, and the script says so; a trace without an update too."""
    path = _step(tmp_path, after=[
        {"op": "call", "name": "linear", "inputs": [1, 3],
         "outputs": [{"id": 6, "size": 40, "alias": -1}], "cost": 10.0}])
    with pytest.raises(ValueError, match="after the update began"):
        link_bound.update_reads(str(path))
    plain = write_trace(tmp_path / "plain.jsonl", [
        {"op": "constant", "id": 1, "size": 100},
        {"op": "call", "name": "linear", "inputs": [1],
         "outputs": [{"id": 2, "size": 40, "alias": -1}], "cost": 10.0}])
    with pytest.raises(ValueError, match="no update"):
        link_bound.update_reads(str(plain))


def test_no_replay_goes_below_the_bound(tmp_path_factory):
    """A recorded GPT step replayed with the host tier below its recompute-only bound, at
    three budgets: each replay's overhead is at least the bound at its budget."""
    out = tmp_path_factory.mktemp("bench") / "sweep"
    assert coop_main(["bench", "--quick", "--models", "gpt2", "--policies", "coop-offload",
                      "--step", "0.5", "--jobs", "1", "--no-progress", "--out", str(out)]) == 0
    (path,) = (out / "traces").glob("gpt2-*.jsonl")
    cost, cost_update, read, h2d = link_bound.update_reads(str(path))
    base = R.unlimited(path)
    assert read > 0 and 0 < cost_update < cost
    bounds = []
    for share in (0.5, 0.7, 0.9):
        nbytes = int(share * base["lower_bound_bytes"])
        r = R.replay(path, budget=nbytes, policy="coop-offload", thrash=None,
                     peak_bytes=base["peak_bytes"])
        assert r["status"] == "ok"
        b = link_bound.bound(cost, cost_update, read, h2d, nbytes)
        assert 1.0 <= b <= r["compute_overhead"]
        bounds.append(b)
    assert bounds[0] > 1.0 and bounds == sorted(bounds, reverse=True)
