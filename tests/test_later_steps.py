"""benchmarks/later_steps.py: a one-step replay beside a training loop's later steps, and the
paper models' multi-step traces it records."""
import json

import pytest
from _scripts import load_benchmark

from coop.models import paper
from coop.trace import replay as R

later_steps = load_benchmark("later_steps")


def test_each_step_is_the_cost_it_adds_and_nothing_after_a_failure():
    ok = lambda total: {"status": "ok", "cost_total": total}  # noqa: E731
    assert later_steps.steps_of([ok(12.0), ok(26.0), ok(39.0)], 10.0) == [1.2, 1.4, 1.3]
    assert later_steps.steps_of([ok(12.0), {"status": "thrash", "cost_total": 99.0},
                                 ok(39.0)], 10.0) == [1.2, None, None]


def test_a_multi_step_trace_repeats_the_step(tmp_path):
    one, three = tmp_path / "one.jsonl", tmp_path / "three.jsonl"
    s1 = paper.record_trace("resnet50", str(one), batch=2)
    s3 = paper.record_trace("resnet50", str(three), batch=2, steps=3)
    p1, p3 = R.load(str(one)), R.load(str(three))
    # the same ops three times: three times the ops and their cost
    assert p3.n_ops == 3 * p1.n_ops
    assert p3.cost_first == pytest.approx(3 * p1.cost_first, rel=1e-12)
    assert s3["peak_used_bytes"] >= s1["peak_used_bytes"]
    with pytest.raises(ValueError, match="steps must be an int >= 1, got 0"):
        paper.record_trace("resnet50", str(tmp_path / "none.jsonl"), batch=2, steps=0)


def test_with_room_for_everything_every_step_costs_one_step(tmp_path, capsys):
    out = tmp_path / "ls"
    rows = later_steps.main(["--models", "resnet50", "--policies", "coop", "--ratios", "4",
                             "--steps", "3", "--batch", "2", "--out", str(out), "--jobs", "1",
                             "--no-progress"])
    (r,) = rows
    assert r["statuses"] == ["ok", "ok", "ok"]
    assert r["steps"] == [pytest.approx(1.0, rel=1e-12)] * 3
    assert out.with_suffix(".png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert json.loads(out.with_suffix(".json").read_text())[0]["statuses"] == ["ok"] * 3
    line = out.with_suffix(".md").read_text().splitlines()[2]
    assert line == "| resnet50 | coop | 4.00 | 1.000 | 1.000 | 1.000 | +0.000 | yes |"
    assert line in capsys.readouterr().out


def test_under_a_budget_the_steps_add_up_to_the_longest_replay(tmp_path):
    out = tmp_path / "ls"
    bench = tmp_path / "bench"
    bench.mkdir()
    # a bench's runs.json: its smallest completing ratio is replayed too
    (bench / "runs.json").write_text(json.dumps([
        {"model": "resnet50", "policy": "coop", "ratio": 0.45, "status": "ok"},
        {"model": "resnet50", "policy": "coop", "ratio": 0.4, "status": "oom"}]))
    rows = later_steps.main(["--models", "resnet50", "--policies", "coop", "--ratios", "0.6",
                             "--steps", "2", "--batch", "2", "--bench", str(bench),
                             "--out", str(out), "--jobs", "1", "--no-progress"])
    assert [(r["ratio"], r["kind"]) for r in rows] == [(0.6, "ratio"), (0.45, "minimum")]
    for r in rows:
        paths = [later_steps.trace_path(str(out) + "-traces", "resnet50", "sgd", "a100-80gb",
                                        2, n) for n in (1, 2)]
        one, two = (R.replay(p, budget=r["budget_bytes"], policy="coop", thrash=4.0)
                    for p in paths)
        assert r["statuses"] == [one["status"], two["status"]]
        if two["status"] == "ok":
            cost = R.load(paths[0]).cost_first
            assert r["steps"][0] == one["compute_overhead"]
            assert sum(r["steps"]) * cost == pytest.approx(two["cost_total"], rel=1e-12)
            assert min(r["steps"]) >= 1.0
    assert "| resnet50 | coop | 0.45 (bench minimum) |" in out.with_suffix(".md").read_text()


@pytest.mark.parametrize("args, message", [
    (["--steps", "1"], "--steps 1: must be at least 2"),
    (["--policies", "coop,dtr-real"], "unknown policy 'dtr-real'"),
    (["--models", "alexnet"], "unknown model 'alexnet'"),
    (["--ratios", "0"], "each must be a number > 0"),
    (["--thrash", "-1"], "--thrash -1.0: must be a number >= 0"),
])
def test_bad_arguments_are_refused(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit):
        later_steps.main(args + ["--out", str(tmp_path / "x")])
    assert message in capsys.readouterr().err


def test_a_scan_starts_at_the_bench_minimum_and_stops_at_the_first_ratio_that_holds(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "runs.json").write_text(json.dumps([
        {"model": "resnet50", "policy": "coop", "ratio": 0.9, "status": "ok"},
        {"model": "resnet50", "policy": "dtr", "ratio": 0.05, "status": "ok"}]))
    out = tmp_path / "ls"
    later_steps.main(["--models", "resnet50", "--policies", "coop,dtr", "--ratios",
                      "--steps", "2", "--batch", "2", "--bench", str(bench), "--scan", "0.02",
                      "--out", str(out), "--jobs", "1", "--no-progress"])
    found = {f["policy"]: f for f in json.loads((tmp_path / "ls-scan.json").read_text())}
    # every step completes at coop's minimum: the scan stops there, with that replay's steps
    assert found["coop"]["later_minimum"] == 0.9
    assert found["coop"]["row"]["statuses"] == ["ok", "ok"]
    # 5% of the peak is below what any step needs: 0.05, 0.06 and 0.07 all fail
    assert found["dtr"]["later_minimum"] is None and found["dtr"]["row"] is None
    text = out.with_suffix(".md").read_text()
    assert "| resnet50 | coop | 0.90 | 0.90 |" in text
    assert "| resnet50 | dtr | 0.05 | none | - |" in text


def test_a_scan_needs_the_bench(tmp_path, capsys):
    with pytest.raises(SystemExit):
        later_steps.main(["--scan", "0.1", "--out", str(tmp_path / "x")])
    assert "--scan needs --bench" in capsys.readouterr().err


def test_nothing_to_replay_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        later_steps.main(["--models", "resnet50", "--ratios", "--batch", "2", "--steps", "2",
                          "--out", str(tmp_path / "x"), "--no-progress"])
    assert "nothing to replay" in capsys.readouterr().err
