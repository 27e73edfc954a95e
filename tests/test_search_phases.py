"""benchmarks/search_phases.py: coop's search time per phase beside dtr's, per model and ratio."""
import pytest
from _scripts import load_benchmark

search_phases = load_benchmark("search_phases")
islands = load_benchmark("islands")


def result(searches, search_time, fill=0.0, scan=0.0, plan=0.0, plans=0, moving=0,
           status="ok", pieces=0, entries=0):
    return {"status": status, "searches": searches, "search_time": search_time,
            "search_fill_time": fill, "search_scan_time": scan, "search_plan_time": plan,
            "plans_evaluated": plans, "moving_searches": moving, "search_pieces": pieces,
            "search_entries": entries}


def test_a_row_is_per_search_microseconds_and_the_totals():
    coop = result(4, 40e-6, fill=16e-6, scan=8e-6, plan=12e-6, plans=10, moving=4,
                  pieces=4000, entries=1002)
    dtr = result(10, 20e-6, status="oom")
    r = search_phases.row("m", 0.5, coop, dtr)
    assert (r["coop_status"], r["dtr_status"], r["coop_searches"], r["dtr_searches"]) == \
        ("ok", "oom", 4, 10)
    assert r["sweep"] == pytest.approx(4.0) and r["scans"] == pytest.approx(2.0)
    assert r["plans"] == pytest.approx(3.0) and r["other"] == pytest.approx(1.0)
    assert r["coop_per"] == pytest.approx(10.0) and r["dtr_per"] == pytest.approx(2.0)
    assert r["plans_per_search"] == 2.5 and r["moving"] == 4
    assert r["pieces"] == 1000 and r["entries"] == 250.5
    assert r["coop_total"] == pytest.approx(0.04) and r["dtr_total"] == pytest.approx(0.02)
    assert r["ratio_total"] == pytest.approx(0.5) and r["sweep_over_dtr"] == pytest.approx(2.0)
    line = search_phases.table([r]).splitlines()[2]
    assert line == ("| m | 0.50 | ok / oom | 4 / 10 | 4 | 2.5 | 1,000 / 250 | 4.00 | 2.00 | "
                    "3.00 | 1.00 | "
                    "10.00 | 2.00 | 2.0x | 0.040 | 0.020 | 0.50 |")


def test_on_a_trace_the_phases_add_up_and_the_figure_is_drawn(tmp_path, capsys):
    trace = tmp_path / "islands.jsonl"
    islands.write_islands(trace, islands.Islands(blocks=4, branches=2, stem_mib=1.0,
                                                 shrink=0.8, weight_kib=(4, 8)))
    out = tmp_path / "phases"
    rows = search_phases.main([str(trace), "--ratios", "0.5", "--repeat", "2",
                               "--out", str(out), "--no-progress"])
    assert [(r["model"], r["ratio"]) for r in rows] == [("islands", 0.5)]
    r = rows[0]
    assert r["coop_searches"] > 0 and r["dtr_searches"] > 0
    # every coop search moves here (moves are on by default); the phases sit inside the total
    assert r["moving"] == r["coop_searches"] and r["plans_per_search"] >= 1
    assert min(r["sweep"], r["scans"], r["plans"]) > 0
    assert r["sweep"] + r["scans"] + r["plans"] <= r["coop_per"] * (1 + 1e-9)
    assert 0 < r["entries"] <= r["pieces"]
    assert (out.with_suffix(".png")).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert out.with_suffix(".md").read_text().splitlines()[2].startswith("| islands | 0.50 |")
    assert "| islands | 0.50 |" in capsys.readouterr().out


def test_a_repeat_below_one_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        search_phases.main([str(tmp_path / "t.jsonl"), "--repeat", "0"])
    assert "--repeat 0: must be at least 1" in capsys.readouterr().err
