"""`coop bench` (coop/cli/bench.py): a small sweep end to end, its files, and its argument checks."""
import csv
import json
import os

import pytest

from coop.cli import bench, claims
from coop.cli.main import main as cli

SMALL = ["--quick", "--models", "resnet50,unet", "--policies", "coop,dtr,dte", "--step", "0.1",
         "--no-progress"]
METRICS = ("status", "compute_overhead", "evictions", "bytes_evicted", "recomputes", "searches",
           "search_time", "fragmentation_rate", "largest_free_ratio", "records_per_s",
           "wall_time")
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench")
    assert cli(["bench", *SMALL, "--jobs", "1", "--out", str(path)]) == 0
    return path


def _rows(out):
    with open(out / "runs.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_the_sweep_writes_its_files(out):
    for name in ("runs.csv", "runs.json", "summary.json", "tables.md", "overhead.png",
                 "fragmentation.png", "search_time.png", "min_budget.png"):
        assert (out / name).stat().st_size > 0, name
    for name in ("overhead.png", "fragmentation.png", "search_time.png", "min_budget.png"):
        assert (out / name).read_bytes()[:8] == PNG, name
    assert sorted(os.listdir(out / "traces")) == ["resnet50-b2.jsonl", "unet-b2.jsonl"]


def test_runs_csv_has_one_row_per_replay_with_every_metric(out):
    rows = _rows(out)
    with open(out / "runs.json") as f:
        assert len(json.load(f)) == len(rows)
    assert list(rows[0])[:4] == list(bench.LEAD)
    for m in METRICS:
        assert m in rows[0], m
    assert {r["model"] for r in rows} == {"resnet50", "unet"}
    assert {r["policy"] for r in rows} == {"coop", "dtr", "dte"}
    assert all(r["status"] in ("ok", "oom", "thrash") for r in rows)


def test_ratio_one_is_the_unlimited_peak(out):
    """Ratio 1.0 is the unlimited run's peak of live bytes, raised until every policy completes
    there: a run there may still evict (fragmentation), so its overhead is >= 1.0."""
    with open(out / "summary.json") as f:
        models = json.load(f)["models"]
    at_one = [r for r in _rows(out) if float(r["ratio"]) == 1.0]
    assert len(at_one) == 6
    for r in at_one:
        peak = models[r["model"]]["peak_bytes"]
        assert int(r["budget_bytes"]) == peak
        assert float(r["compute_overhead"]) >= 1.0
        assert r["status"] == "ok"


def test_a_budget_above_the_peak_costs_nothing(out):
    """Where nothing is evicted the overhead is exactly 1.0."""
    path = str(out / "traces" / "resnet50-b2.jsonl")
    peak = bench.R.unlimited(path)["peak_used_bytes"]
    for policy in ("coop", "dtr"):
        row, = bench.sweep("resnet50", path, policy, peak, [3.0], patience=1)
        assert (row["status"], row["evictions"], row["compute_overhead"]) == ("ok", 0, 1.0)


def test_the_marks_are_tried_after_the_patience_runs_out(out):
    """Runs are not monotone in the budget: after `patience` failures in a row the sweep skips
    the ratios left but the MARKS (0.5 and 0.3), which it always tries."""
    path = str(out / "traces" / "resnet50-b2.jsonl")
    peak = bench.R.unlimited(path)["peak_used_bytes"]
    rows = bench.sweep("resnet50", path, "none", peak, [0.9, 0.8, 0.5, 0.4, 0.3], patience=1)
    assert [(r["ratio"], r["status"]) for r in rows] == [(0.9, "oom"), (0.5, "oom"), (0.3, "oom")]
    rows = bench.sweep("resnet50", path, "none", peak, [0.9, 0.8, 0.5, 0.4, 0.3], patience=2)
    assert [r["ratio"] for r in rows] == [0.9, 0.8, 0.5, 0.3]
    rows = bench.sweep("resnet50", path, "none", peak, [3.0, 0.9, 0.8, 0.4], patience=1)
    assert [(r["ratio"], r["status"]) for r in rows] == [(3.0, "ok"), (0.9, "oom")]


def test_summary_min_ratios_lie_between_the_bound_and_one(out):
    with open(out / "summary.json") as f:
        summary = json.load(f)
    assert summary["meta"]["replays"] == len(_rows(out))
    for name, s in summary["models"].items():
        assert 0 < s["lower_bound_ratio"] < 1
        assert 0 < s["offload_floor_ratio"] <= s["lower_bound_ratio"]
        assert s["offload_floor_bytes"] == round(s["offload_floor_ratio"] * s["peak_bytes"])
        assert s["optimizer"] == "sgd"
        for policy, p in s["policies"].items():
            best = p["min_feasible_ratio"]
            assert best is not None, (name, policy)
            assert s["lower_bound_ratio"] <= best <= 1.0
            assert all(r > best for r in p["failures_above_min"])
        for claim in s["claims"].values():
            assert claim["holds"] in (True, False, None)
            assert claim["holds"] is not None or claim["why"]
    text = (out / "tables.md").read_text()
    assert "Minimum feasible budget ratio" in text and "| unet |" in text
    assert "| model | batch | peak GiB | lower bound | offload floor | coop | dtr | dte |" in text


def test_processes_give_the_same_runs_as_one(tmp_path):
    """Decisions do not depend on the worker: statuses and overheads match a serial run."""
    args = ["bench", "--quick", "--models", "unet", "--policies", "coop,dtr", "--step", "0.25",
            "--no-progress"]
    cli([*args, "--jobs", "1", "--out", str(tmp_path / "one")])
    cli([*args, "--jobs", "2", "--out", str(tmp_path / "two")])
    key = ("model", "policy", "ratio", "status", "compute_overhead", "evictions")
    one, two = ([tuple(r[k] for k in key) for r in _rows(tmp_path / d)] for d in ("one", "two"))
    assert one == two and len(one) >= 4


def test_the_optimizer_names_the_trace_and_the_summary(tmp_path, capsys):
    """--optimizer adamw records AdamW's trace (its own file, never sgd's reused): its two
    moments per parameter are one state tensor more than SGD's momentum, so the lower bound
    grows by exactly the BiLSTM's parameter bytes (tests/test_paper_models.py)."""
    args = ["bench", "--quick", "--models", "bilstm", "--policies", "coop", "--step", "0.5",
            "--no-progress", "--jobs", "1", "--out", str(tmp_path)]
    assert cli([*args, "--optimizer", "adamw"]) == 0
    assert os.listdir(tmp_path / "traces") == ["bilstm-b2-adamw.jsonl"]
    with open(tmp_path / "summary.json") as f:
        summary = json.load(f)
    adamw = summary["models"]["bilstm"]
    assert summary["meta"]["optimizer"] == adamw["optimizer"] == "adamw"
    sgd, = bench.prepare(["bilstm"], [], str(tmp_path), quick=True)
    assert sgd["path"].endswith("bilstm-b2.jsonl") and sgd["optimizer"] == "sgd"
    assert adamw["lower_bound_bytes"] - sgd["lower_bound_bytes"] == 2_929_152
    assert adamw["offload_floor_bytes"] == sgd["offload_floor_bytes"]
    capsys.readouterr()
    assert cli([*args, "--optimizer", "adam"]) == 2
    assert "invalid choice: 'adam'" in capsys.readouterr().err


def test_traces_are_reused_unless_rerecord(tmp_path):
    first = bench.prepare(["resnet50"], [], str(tmp_path), quick=True)
    stamp = os.stat(first[0]["path"]).st_mtime_ns
    again = bench.prepare(["resnet50"], [first[0]["path"]], str(tmp_path), quick=True)
    assert os.stat(first[0]["path"]).st_mtime_ns == stamp
    assert [s["name"] for s in again] == ["resnet50", "resnet50-b2"]
    assert again[0]["peak_used_bytes"] == again[1]["peak_used_bytes"]


def test_ratios_go_from_one_to_below_the_bound():
    assert bench.sweep_ratios(0.1, 0.42) == [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    assert bench.sweep_ratios(0.25, 0.2) == [1.0, 0.75, 0.5, 0.3, 0.25]    # 0.5, 0.3 always
    assert bench.sweep_ratios(0.5, 0.0)[-1] >= 0.01
    assert bench.sweep_ratios(0.01, 0.0)[-1] == 0.01


def _row(ratio, status, overhead=1.0, moves=0):
    return {"ratio": ratio, "status": status, "fragmentation_rate": 0.1, "records_per_s": 1.0,
            "compute_overhead": overhead, "search_time": 0.0, "evictions": 0,
            "bytes_evicted": 0, "recomputes": 0,
            "window_moves": moves, "bytes_moved": 512 * moves, "move_cost": 0.5 * moves,
            "room_made": 0, "cost_total": 100.0 * overhead}


def test_a_failure_above_the_minimum_is_recorded():
    rows = [_row(r, s) for r, s in ((1.0, "ok"), (0.9, "oom"), (0.8, "ok"), (0.7, "thrash"))]
    p = claims.summarize_policy(rows)
    assert p["min_feasible_ratio"] == 0.8 and p["failures_above_min"] == [0.9]
    assert p["at_min"]["window_moves"] == 0 and p["at_min"]["status"] == "ok"


def test_coop_never_worse_than_an_ablation_is_checked_at_every_ratio():
    by = {"coop": [_row(1.0, "ok", 1.0), _row(0.9, "ok", 1.2), _row(0.8, "ok", 1.5),
                   _row(0.7, "oom")],
          "coop-no-move": [_row(1.0, "ok", 1.0), _row(0.9, "ok", 1.1), _row(0.8, "oom"),
                           _row(0.7, "oom")]}
    c = claims._never_worse_claim(by, "coop-no-move")
    assert (c["holds"], c["min_holds"], c["worse_at"]) == (False, True, [0.9])
    assert (c["coop"], c["coop-no-move"]) == (0.8, 0.9)
    by["coop-no-move"][1] = _row(0.9, "ok", 1.2)
    assert claims._never_worse_claim(by, "coop-no-move")["holds"] is True
    by["coop-no-move"][3] = _row(0.7, "ok", 3.0)     # completes lower: coop's minimum is higher
    c = claims._never_worse_claim(by, "coop-no-move")
    assert (c["holds"], c["min_holds"], c["worse_at"]) == (False, False, [])
    assert claims._never_worse_claim({"coop": by["coop"]}, "coop-no-move")["holds"] is None


def test_coop_against_dtr_ideal_takes_the_minimum_and_the_overhead_at_half():
    by = {"coop": [_row(0.5, "ok", 1.12), _row(0.4, "ok", 1.3), _row(0.3, "oom")],
          "dtr-ideal": [_row(0.5, "ok", 1.10), _row(0.4, "ok", 1.2), _row(0.3, "oom")]}
    mins = {"coop": 0.4, "dtr-ideal": 0.4}
    c = claims._ideal_claim(mins, by)
    assert (c["holds"], c["min_holds"], c["overhead_0.5_holds"]) == (True, True, True)
    assert c["overhead_0.5"] == [1.12, 1.10]
    by["coop"][0] = _row(0.5, "ok", 1.13)            # 0.03 above: the overhead claim fails
    assert claims._ideal_claim(mins, by)["overhead_0.5_holds"] is False
    by["coop"][0] = _row(0.5, "ok", 1.12)
    c = claims._ideal_claim({"coop": 0.43, "dtr-ideal": 0.4}, by)
    assert (c["holds"], c["min_holds"]) == (False, False)
    assert claims._ideal_claim({"coop": 0.42, "dtr-ideal": 0.4}, by)["min_holds"] is True


@pytest.mark.parametrize("argv, names", [
    (["--models", "resnet51"], "resnet51"),
    (["--policies", "coop,best"], "best"),
    (["--step", "0"], "--step"),
    (["--step", "-0.1"], "--step"),
    (["--patience", "0"], "--patience"),
    (["--jobs", "0"], "--jobs"),
    (["no-such-trace.jsonl"], "no-such-trace.jsonl"),
])
def test_bad_arguments_name_the_problem(tmp_path, capsys, argv, names):
    assert cli(["bench", "--no-progress", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert names in err and err.count("\n") == 1
    assert not os.listdir(tmp_path)    # checked before anything is written


def test_coop_against_the_dtr_family_names_each_exception_and_its_cause():
    by = {"coop": [_row(0.9, "ok", 1.10), _row(0.8, "ok", 1.30), _row(0.7, "ok", 1.50),
                   _row(0.6, "ok", 1.70), _row(0.5, "ok", 1.9), _row(0.4, "oom")],
          "dtr": [_row(0.9, "ok", 1.095), _row(0.8, "ok", 1.20), _row(0.7, "ok", 1.40),
                  _row(0.6, "ok", 1.60), _row(0.5, "oom"), _row(0.4, "ok", 1.5)],
          "dte": [_row(0.9, "ok", 1.2), _row(0.8, "ok", 1.25), _row(0.7, "ok", 1.45),
                  _row(0.6, "ok", 1.65), _row(0.5, "ok", 1.5), _row(0.4, "ok", 1.5)],
          "coop-no-move": [_row(0.8, "ok", 1.28), _row(0.7, "ok", 1.40), _row(0.6, "thrash")]}
    c = claims._family_claim(by)
    # 0.9: 1.10 <= 1.095 * 1.005 = 1.100475 (within the slack); 0.5 and 0.4: not all complete
    assert (c["holds"], c["ratios"]) == (False, 4)
    assert [(x["ratio"], x["best"], x["by"], x["coop-no-move"], x["cause"])
            for x in c["exceptions"]] == [
        (0.8, 1.20, "dtr", 1.28, "window"),          # the evict-only window above too
        (0.7, 1.40, "dtr", 1.40, "moves"),           # the evict-only window within: moves
        (0.6, 1.60, "dtr", "thrash", "window_fails")]
    assert c["causes"] == {"window": 1, "moves": 1, "window_fails": 1}
    assert c["largest_excess"] == pytest.approx(1.30 / 1.20 - 1)
    del by["coop-no-move"]
    assert {x["cause"] for x in claims._family_claim(by)["exceptions"]} == {"unmeasured"}
    by["coop"] = [_row(0.9, "ok", 1.1), _row(0.8, "ok", 1.2)]
    c = claims._family_claim(by)
    assert (c["holds"], c["ratios"], c["exceptions"], c["causes"]) == (True, 2, [], {})
    assert claims._family_claim({"coop": by["coop"], "dtr": by["dtr"]})["holds"] is None
    only_failures = {p: [_row(0.5, "oom")] for p in ("coop", "dtr", "dte")}
    assert claims._family_claim(only_failures)["holds"] is None
