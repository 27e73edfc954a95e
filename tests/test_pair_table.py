"""benchmarks/pair_table.py, two policies side by side from a sweep's runs.json (rows made up
here, so each figure of the row is known)."""
import json
import sys

import pytest
from _scripts import load_benchmark

pair_table = load_benchmark("pair_table")


def row(policy, ratio, status, overhead, search):
    return {"model": "m", "policy": policy, "ratio": ratio, "status": status,
            "compute_overhead": overhead, "search_time": search}


def test_the_row_of_a_model(tmp_path, capsys, monkeypatch):
    rows = [row("coop", 0.5, "ok", 1.10, 2.0), row("coop", 0.4, "ok", 1.20, 4.0),
            row("coop", 0.3, "oom", 1.0, 1.0),
            row("b", 0.5, "ok", 1.05, 1.0), row("b", 0.4, "ok", 1.20, 1.0),
            row("b", 0.3, "ok", 1.50, 1.0),
            row("dtr", 0.5, "ok", 1.30, 1.0), row("dtr", 0.4, "thrash", 2.0, 1.0),
            row("dte", 0.5, "ok", 1.06, 1.0), row("dte", 0.4, "ok", 1.0, 1.0),
            row("dtr-ideal", 0.5, "ok", 1.0, 0.0), row("dtr-ideal", 0.3, "ok", 1.0, 0.0)]
    (tmp_path / "runs.json").write_text(json.dumps(rows))
    monkeypatch.setattr(sys, "argv", ["pair_table.py", str(tmp_path), "--b", "b"])
    pair_table.main()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| model | coop min | b min | dtr-ideal min |")
    # mins 0.40 / 0.30 / 0.30; at 0.5: 1.100, 1.050, 1.300; dtr/coop's search 1.0 / 2.0 at
    # the one ratio both complete (0.5), dtr/b's 1.0; b lower at 0.5, the same at 0.4
    # against the DTR family (dtr and dte complete at 0.5 only): coop 1.100 is above
    # min(1.300, 1.060) + 0.5%, b's 1.050 is not
    assert lines[2] == ("| m | 0.40 | 0.30 | 0.30 | 1.100 | 1.050 | 1.300 | 0.50 | 1.00 | "
                        "1 / 0 / 1 | 1 / 1 | 0 / 1 |")


def test_a_folder_without_either_policy_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "runs.json").write_text(json.dumps([row("dtr", 0.5, "ok", 1.0, 1.0)]))
    monkeypatch.setattr(sys, "argv", ["pair_table.py", str(tmp_path)])
    with pytest.raises(SystemExit, match="no replays of coop or coop-move-if-blocked"):
        pair_table.main()
